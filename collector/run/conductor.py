"""The runner of a scenario, stage by stage:

    preflight   every host answers over SSH before any drive is touched (and the store
                holds no cell of the scenario with other PostgreSQL settings)
    lease       the lab's lease on the DB host (collector.hosts.lease): refused in one line while
                another holds it (``wait``: waits for it), held and renewed to the end;
                lost, the run stops
    provision   playbooks/provision.yml, skipped when every host is current
    settings    the DB host's PostgreSQL checks the scenario's settings (read-only)
    telemetry   node_exporter and Prometheus (unless asked not to), set up beside the
                first drives stage and ready before anything is measured
    per cell    drive (gate, mkfs, mount; only when the filesystem request changes),
                pre-tests (once per drive and filesystem), database (place, initialise),
                repetitions: each one run, gathered and stored as it ends, with resume
                (what the store holds complete is skipped) and adaptive stopping

Validation and the plan come before it (:mod:`collector.scenario`), the report after it
(:mod:`collector.report`); ``drivelab run`` (:mod:`collector.cli.runcmd`) only parses its
arguments and prints. A partial or failed run is stored as such and, unless
``fail_fast``, the scenario goes on; a cell whose drive or database stage fails is not
run, the others are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from collector.cell import OWN_CLUSTER, Cell
from collector.errors import DrivelabError
from collector.gather.folder import gather_run
from collector.hosts import hostcheck
from collector.hosts import lease as lab_lease
from collector.hosts.playbook import LeaseLost
from collector.run import drivestage
from collector.run import stages as runner
from collector.run.drivestage import Drives, ServerState
from collector.run.preflight import preflight
from collector.run.search import CellSearch
from collector.run.storing import record
from collector.run.telemetrystage import SetupFailed, Telemetry
from collector.runfolder import DATABASE_JSON, DB_DIR, pg_major, rep_dir
from collector.scenario import PlannedCell, Scenario, drive_batch, estimate_seconds, pgsettings
from collector.scenario.inventory import ssh_settings
from collector.scenario.plan import runs_at_most
from collector.stats.tps import ci_pct
from collector.store import Store, Target, claim


@dataclass(frozen=True)
class RunOptions:
    """How ``drivelab run`` was asked to run (its command line, parsed)."""

    inventory: Path
    #: the results store: an SQLite file or a PostgreSQL database (collector.store.target)
    db: Target
    verbose: bool = False
    fail_fast: bool = False
    live: bool = True
    telemetry: bool = True
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = 9479
    reprovision: bool = False
    #: wait for the lab's lease instead of refusing while another holds it
    wait: bool = False
    #: the preflight runs ``drivelab check`` on the scenario's hosts and drives
    #: (collector.hosts.hostcheck; the command line's default, ``--no-check`` turns it off)
    check: bool = False


@dataclass
class Progress:
    """Counts for the progress line and the closing summary."""

    total: int = 0
    estimate: float = 0.0
    done: int = 0
    problems: int = 0
    incomplete: int = 0  #: repetitions partial/failed at their last attempt, cells not run
    #: "<cell>: not run: <why>" of every cell whose drive or database stage failed
    not_run: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        eta = max(0.0, self.estimate - elapsed)
        minutes = f"{elapsed / 60:.1f} min elapsed, ~{eta / 60:.1f} min left"
        return f"[run {self.done}/{self.total}, {minutes}]"


class ScenarioRun:
    """One run of a validated, expanded scenario against one inventory."""

    def __init__(
        self,
        scenario: Scenario,
        cells: list[PlannedCell],
        inventory: dict[str, Any],
        options: RunOptions,
        console: Console,
    ) -> None:
        self.scenario = scenario
        self.cells = cells
        self.inventory = inventory
        self.opts = options
        self.console = console
        self.db_host = next(iter(inventory["all"]["children"]["db"]["hosts"]))
        self.clients = sorted(
            inventory["all"]["children"]["clients"]["hosts"], key=lambda h: (len(h), h)
        )
        self.progress = Progress(
            total=sum(runs_at_most(c) for c in cells),
            estimate=sum(estimate_seconds(c) for c in cells),
        )
        self.info = {"description": scenario.description, "baseline": scenario.baseline}
        self.lease: lab_lease.Lease | None = None
        self.server = ServerState()
        self.drives = Drives(options, self.db_host, console, self.server)
        self.telemetry = Telemetry(options, inventory, self.db_host, console)

    # ------------------------------------------------------------------ the stages

    def run(self) -> Progress:
        """Every stage; returns the counts. Raises DrivelabError when no cell could run,
        or at once when another drivelab is running this scenario into the same store
        (:func:`collector.store.claim`, held for the whole run)."""
        with claim(self.opts.db, self.scenario.name):
            return self._run()

    def _run(self) -> Progress:
        opts = self.opts
        self.check_stored_settings()
        preflight(opts.inventory, self.console, self.inventory)
        self.check_hosts()
        self.lease = lab_lease.Lease(
            lab_lease.transport_for(opts.inventory, self.inventory, self.db_host),
            lab_lease.settings(self.inventory, self.db_host), self.db_host,
            scenario=self.scenario.name, say=self._say,
        )  # fmt: skip
        with self.lease.holding(wait=opts.wait, expected_seconds=self.progress.estimate):
            return self._run_leased()

    def check_hosts(self) -> None:
        """The scenario's datasets against its drives' declared sizes and the DB host's
        memory (always: read from the inventory), then, with ``check``, ``drivelab
        check`` (collector.hosts.hostcheck) on every host: a problem of the scenario's hosts or
        drives stops the run before anything is touched, one line naming the first; a
        clock off the controller's is named and the run goes on (the start measures it
        again and corrects each client by it)."""
        found, notes = hostcheck.dataset_problems(self.cells, self.inventory)
        for note in notes[:3]:
            self._say(f"preflight: {note}")
        if len(notes) > 3:
            self._say(f"preflight: and {len(notes) - 3} more cells whose datasets fit in memory")
        hosts = {self.db_host, *(h for p in self.cells for h in p.cell.hosts)}
        if self.opts.check:
            doc = hostcheck.check_inventory(self.opts.inventory, self.inventory)
            found += [hostcheck.Problem(**p) for p in doc["problems"]]
            self.console.print(f"preflight: drivelab check in {doc['seconds']:.1f} s")
        drives = {d for p in self.cells for item in p.drive_request for d in item["drives"]}
        found = hostcheck.for_scenario(found, hosts, drives)
        for p in (p for p in found if p.check == "clock"):
            self._say(f"preflight: {p.line()} (the start corrects each client by its offset)")
        stop = [p for p in found if p.check != "clock"]
        if stop:
            more = f" (and {len(stop) - 1} more: drivelab check lists them)" * (len(stop) > 1)
            raise DrivelabError(f"preflight: {stop[0].line()}{more}: nothing was touched")

    def _say(self, line: str) -> None:
        # one line whatever its length (rich wraps at 80 columns when not on a terminal)
        self.console.print(line, highlight=False, soft_wrap=True)

    def _run_leased(self) -> Progress:
        opts = self.opts
        self.provision()
        self.check_settings()
        self.console.print(f"provisioned in {time.monotonic() - self.progress.started:.0f} s")
        if opts.telemetry:
            self.telemetry.start()
        try:
            return self._run_cells()
        finally:
            self.telemetry.ready(failing=True)

    def _run_cells(self) -> Progress:
        with Store.open(self.opts.db) as store:  # the scenario, as asked, before any run of it
            store.add_scenario(
                self.scenario.name, spec=self.scenario.model_dump(mode="json"),
                baseline_drive=self.scenario.baseline, description=self.scenario.description,
            )  # fmt: skip
        self.drives.batch = drive_batch([p for p in self.cells if not self.stored(p)])
        for planned in self.cells:
            if self.lease is not None:
                self.lease.cell = planned.cell.cell_id
                self.lease.renew()  # now, so status shows the cell (and a lost lease stops here)
                self.lease.check()
            self.run_cell(planned)
        self.telemetry.ready()
        if self.lease is not None:
            self.lease.check()
        p = self.progress
        if p.not_run and len(p.not_run) == len(self.cells):
            # nothing ran at all (a refused drive, say): the reason is the last word
            more = f" (and {len(self.cells) - 1} more cells)" if len(self.cells) > 1 else ""
            raise DrivelabError(f"scenario {self.scenario.name}: {p.not_run[0]}{more}")
        return p

    def provision(self) -> None:
        opts = self.opts
        # provisioning installs the DB host's drive tools and fio, or finds a host that
        # it did so with the same roles: the stages after it need not check (an apt check each)
        self.drives.tools = self.drives.fio = True
        if opts.reprovision:
            runner.provision(inventory=opts.inventory, stream=opts.verbose)
            unchanged = False
        else:
            _, unchanged = runner.provision_unless_unchanged(
                inventory=opts.inventory, stream=opts.verbose
            )
        if unchanged:
            # one line under 80 columns: rich wraps at 80 when not on a terminal
            self.console.print(
                "provisioning skipped: every host is current (--reprovision forces it)"
            )
        else:
            # provisioning has just left drivelab's own cluster running with the
            # inventory's settings: a first cell on it with none of its own leaves the
            # cluster's part out of its database stage, as a cell after a cell does
            self.server.cluster = (OWN_CLUSTER, ())

    def check_settings(self) -> None:
        """The scenario's PostgreSQL settings, checked by the DB host's installed server
        (read-only) after provisioning (which installs it) and before the first cell: an
        unknown name or a value it would not take is one line naming the file and the
        YAML path, and nothing else runs."""
        s = self.scenario
        if not s.postgresql.given():
            return
        answer = runner.check_pg_settings(
            pgsettings.to_ask(s), inventory=self.opts.inventory, stream=self.opts.verbose
        )
        # one line whatever its length (rich wraps at 80 columns when not on a terminal)
        self.console.print(pgsettings.check(s, answer), highlight=False, soft_wrap=True)

    def check_stored_settings(self) -> None:
        """A cell of this scenario already stored with other PostgreSQL settings (the file
        was edited since) would mix two configurations under one key: refused, before
        anything runs."""
        if not self.opts.db.exists():
            return
        with Store.open(self.opts.db, create=False) as store:
            sid = next((i.id for i in store.scenarios() if i.name == self.scenario.name), None)
            stored = {spec.key: spec for _, spec in store.cells(sid)} if sid is not None else {}
        for planned in self.cells:
            spec = planned.cell.spec
            old = stored.get(spec.key)
            if old is not None and dict(old.pg_settings) != dict(spec.pg_settings):
                have = ", ".join(f"{k}={v}" for k, v in old.pg_settings.items()) or "none"
                want = ", ".join(f"{k}={v}" for k, v in spec.pg_settings.items()) or "none"
                raise DrivelabError(
                    f"{self.scenario.source}: postgresql: {spec.cell_id} is stored in"
                    f" {self.opts.db} with other PostgreSQL settings ({have}; now {want}):"
                    " give the new ones a set of their own, or use another scenario name or --db"
                )

    def run_cell(self, planned: PlannedCell) -> None:
        if planned.search is not None:
            CellSearch(self, planned).run()
            return
        cell = planned.cell
        head = f"[{planned.index}/{planned.total}] {cell.cell_id}"
        attempts, have, want = self._attempts(planned)
        if all(have.get(r) == "complete" for r in range(want)):
            self.console.print(f"{head}: all {want} repetitions stored, skipped")
            self.progress.done += want
            return
        if not self.prepare_or_skip(planned, head):
            return
        tps = list(stored_tps(cell).values())
        for rep in range(want):
            if have.get(rep) == "complete":
                self.progress.done += 1
                continue
            if planned.adaptive and rep >= planned.adaptive.min and enough(tps, planned.adaptive):
                self.console.print(
                    f"{head}: 95% CI ±{ci_pct(tps):.1f}% of the mean after {rep} runs: enough"
                )
                break
            # a partial or failed attempt is run again, up to ``retries`` times; each
            # attempt keeps its own folder and stored run, numbered after earlier ones'
            before = len(attempts.get(rep, []))
            for retry in range(planned.retries + 1):
                last = retry == planned.retries
                if self.run_one(planned, rep, head, tps, attempt=before + retry + 1, last=last):
                    break
        if planned.adaptive and ci_pct(tps) is not None:
            self.console.print(
                f"{head}: {len(tps)} complete runs, 95% CI ±{ci_pct(tps):.1f}% of the mean"
            )

    def _attempts(self, planned: PlannedCell) -> tuple[dict[int, list[str]], dict[int, str], int]:
        """The cell's stored attempts by repetition, each repetition's best status, and
        how many repetitions it is to have at most."""
        cell = planned.cell
        with Store.open(self.opts.db) as store:
            attempts = store.attempts(cell.scenario, cell.spec)
        have = {r: "complete" if "complete" in seen else seen[-1] for r, seen in attempts.items()}
        want = planned.repetitions if planned.adaptive is None else planned.adaptive.max
        return attempts, have, want

    def stored(self, planned: PlannedCell) -> bool:
        """Every repetition of the cell is stored complete (a rate search: never, its
        steps decide for themselves)."""
        if planned.search is not None:
            return False
        _, have, want = self._attempts(planned)
        return all(have.get(r) == "complete" for r in range(want))

    def prepare_or_skip(self, planned: PlannedCell, head: str) -> bool:
        """:meth:`prepare`; False (and the line why) when the cell is not to be run."""
        cell = planned.cell
        try:
            self.prepare(planned)
        except (LeaseLost, SetupFailed):
            raise  # not this cell's problem: the run stops
        except DrivelabError as err:
            # a refused drive, an md set where md is absent, a failed init: this cell is
            # not run, the others are (unless --fail-fast)
            self.progress.problems += 1
            self.progress.incomplete += 1
            self.progress.not_run.append(f"{cell.cell_id}: not run: {err}")
            self.console.print(f"{head}: not run: {err}")
            if self.opts.fail_fast:
                raise
            return False
        skip = drivestage.write_cache_skip(cell.cell_dir() / DB_DIR)
        if planned.write_cache in ("on", "off") and skip:
            self.console.print(f"{head}: skipped: {skip}")
            return False
        return True

    def prepare(self, planned: PlannedCell) -> None:
        """The cell's drive (when its request changed), pre-tests and databases."""
        cell = planned.cell
        self.drives.for_cell(planned)
        self.telemetry.ready()  # set up beside the drives stage; before anything measured
        if planned.pretests:
            self.drives.pretests(planned)
        self.prepare_database(planned)
        # the server's own major version, for the next cell's database stage
        self.server.pg_major = pg_major(cell.cell_dir() / DB_DIR / DATABASE_JSON)

    def prepare_database(self, planned: PlannedCell) -> None:
        """The cell's database stage. When the last one left the same cluster with the
        same settings running and only complete runs came since, the stage leaves the
        cluster's part out (reading the clusters, checking, writing and applying the
        settings, in every cell); should that fail, the whole stage runs."""
        cell, opts = planned.cell, self.opts
        wanted = (cell.cluster, tuple(sorted(cell.pg_settings.items())))
        current, self.server.cluster = wanted == self.server.cluster, None
        stage = {"inventory": opts.inventory, "stream": opts.verbose, "provisioned": True}
        try:
            runner.prepare_database(cell, pg_major=self.server.pg_major, cluster_current=current,
                                    **stage)  # fmt: skip
        except LeaseLost:
            raise
        except DrivelabError as err:
            if not current:
                raise
            self._say(f"{cell.cell_id}: database stage again with its cluster's part ({err})")
            runner.prepare_database(cell, pg_major=self.server.pg_major, **stage)
        self.server.cluster = wanted

    def record_stopped(self, cell: Cell, rep: int, attempt: int) -> None:
        """The repetition the runner was stopped in, stored failed with the reason
        run_pgbench wrote in its run.json (what the clients handed over is kept), so the
        next ``drivelab run`` runs it again; a folder that cannot be stored is said so."""
        run_dir = rep_dir(cell.cell_dir(), rep, attempt)
        if not (run_dir / "run.json").exists():
            return  # stopped before the folder was made: nothing ran
        try:
            gathered = gather_run(run_dir)
            with Store.open(self.opts.db) as store:
                record(store, gathered)
        except DrivelabError as err:
            self._say(f"{cell.cell_id} rep {rep}: stopped, not stored ({err})")
            return
        self._say(f"{cell.cell_id} rep {rep}: failed, {gathered.stats().reason}")

    def run_one(  # noqa: PLR0917  (one repetition, spelled out)
        self,
        planned: PlannedCell,
        rep: int,
        head: str,
        tps: list[float],
        attempt: int = 1,
        last: bool = True,
        cold_start: bool = True,
        settle: bool = False,
    ) -> bool:
        """One attempt at a repetition: run, gather, store, telemetry; its line on the
        console. True when it is complete; ``last``: no retry follows a partial one;
        ``cold_start``: checkpoint, restart and drop caches first (a rate search's steps
        run without, settled instead: ``settle``, :class:`~collector.run.search.CellSearch`)."""
        cell = planned.cell
        live = None if not self.opts.live else partial(self.live_view, planned, rep)
        try:
            run_dir = runner.run_pgbench(
                cell, rep, client_hosts=self.clients, db_host=self.db_host,
                inventory=self.opts.inventory, stream=self.opts.verbose, live=live,
                scenario_info=self.info, attempt=attempt, cold_start=cold_start, settle=settle,
            )  # fmt: skip
        except KeyboardInterrupt:
            self.record_stopped(cell, rep, attempt)
            raise
        gathered = gather_run(run_dir)
        with Store.open(self.opts.db) as store:
            run_id = record(store, gathered)
            if self.lease is not None:
                # under which lease it was measured, and whom that took over
                sid = store.add_scenario(gathered.scenario)
                store.add_facts(sid, {"lab_lease": self.lease.fact()}, scope="run", run_id=run_id)
        if self.lease is not None and self.lease.lost.is_set():
            # stored as failed with the reason (gather reads it in run.json): nothing more runs
            self.progress.problems += 1
            raise LeaseLost(f"{cell.cell_id} rep {rep}: failed, stopped: {self.lease.why}")
        if self.telemetry.prom_url:
            self.telemetry.after_run(gathered, run_id)
        st = gathered.stats()
        complete = st.status.value == "complete" and bool(st.tps)
        if complete or last:
            self.progress.done += 1
        figure = f"{st.tps:,.1f} tps" if st.tps else "no tps"
        reason = f" ({st.reason})" if st.reason else ""
        which = f"rep {rep}" + (f" attempt {attempt}" if attempt > 1 else "")
        self.console.print(
            f"{head} {which}: {st.status.value}, {figure}{reason}  {self.progress.line()}"
        )
        if complete:
            tps.append(st.tps)
            return True
        self.server.cluster = None  # the server may not be as the database stage left it
        self.progress.problems += 1
        self.progress.incomplete += int(last)
        if self.opts.fail_fast:
            raise DrivelabError(
                f"{cell.cell_id} {which}: {st.status.value} ({st.reason}); --fail-fast"
            )
        if not last:
            self.console.print(f"{head} {which}: kept as {st.status.value}; running it again")
        return False

    # ------------------------------------------------------------------ around a run

    def live_view(self, planned: PlannedCell, rep: int, run_dir: Path, hosts: list[str]):
        """Follows the clients' progress lines (and transaction logs) over SSH while the
        playbook runs: a live table, metrics for Prometheus and `drivelab watch`. Best
        effort: a client not reached is marked; results come from the fetched files."""
        from collector import live  # noqa: PLC0415

        cell = planned.cell
        per_tx = cell.pgbench.log in ("full", "sampled") and self.opts.metrics_port is not None
        txlogs = cell.pgbench.threads if per_tx else 0  # each thread's, for the histogram
        targets = []
        for h in hosts:
            ssh = ssh_settings(self.inventory, h)
            if ssh is None:
                self.console.print(f"live view: no SSH key or known_hosts for {h}: not followed")
                continue
            stderr = str(live.remote_run_dir(run_dir, h) / "stderr.txt")
            targets.append(live.ClientTarget(h, ssh["host"], stderr, ssh["key"], ssh["known_hosts"],
                                             ssh["port"], ssh["user"], txlogs=txlogs))  # fmt: skip
        labels = live.RunLabels(cell.scenario, cell.cell_id, str(rep), cell.drive)
        return live.following(
            targets, labels, float(cell.pgbench.duration) if cell.pgbench.duration else None,
            metrics_addr=self.opts.metrics_addr, metrics_port=self.opts.metrics_port,
            console=self.console, display=False if self.opts.verbose else None,
        )  # fmt: skip


def enough(tps: list[float], policy) -> bool:
    pct = ci_pct(tps)
    return pct is not None and pct <= policy.target_ci_pct


def stored_tps(cell: runner.Cell) -> dict[int, float]:
    out = {}
    for run_dir in sorted(cell.cell_dir().glob("rep-*")):
        try:
            st = gather_run(run_dir).stats()
        except DrivelabError:
            continue
        if st.status.value == "complete" and st.tps:
            out[st.repetition] = st.tps
    return out
