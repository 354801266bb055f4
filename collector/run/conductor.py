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

import json
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from collector.cell import OWN_CLUSTER, Cell
from collector.errors import DrivelabError
from collector.gather.folder import GatheredRun, gather_run
from collector.hosts import hostcheck
from collector.hosts import lease as lab_lease
from collector.hosts.playbook import HOLDS_POSTGRESQL_DATA, LeaseLost, PlaybookFailed
from collector.paths import REPO, ansible_bin
from collector.run import stages as runner
from collector.run.search import CellSearch
from collector.run.storing import record
from collector.runfolder import DATABASE_JSON, DB_DIR, PG_STAT, rep_dir
from collector.scenario import PlannedCell, Scenario, drive_batch, estimate_seconds, pgsettings
from collector.scenario.inventory import prometheus_url, ssh_settings
from collector.scenario.plan import runs_at_most
from collector.stats.tps import summarize
from collector.store import Store, Target, claim
from collector.verdicts import physics, pretest
from collector.verdicts.pretest import PRETEST_PREFIXES


class SetupFailed(DrivelabError):
    """The run's own set-up (telemetry) failed where a cell waited for it: the run
    stops, as it did before any cell, not only that cell."""


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
    #: "<cell>: not run: <why>" of every cell whose drive or database stage failed
    not_run: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        eta = max(0.0, self.estimate - elapsed)
        minutes = f"{elapsed / 60:.1f} min elapsed, ~{eta / 60:.1f} min left"
        return f"[run {self.done}/{self.total}, {minutes}]"


def preflight(inventory: Path, console: Console, hosts: dict[str, Any] | None = None) -> None:
    """Every host answers over SSH before any drive is touched; else one line naming it.
    ``hosts``: the parsed inventory; when its file gives every host a key and a
    known_hosts file, they are asked over SSH directly, all at once (a command that does
    nothing; 0.2-0.3 s where Ansible's ping took 1.3 s). Any other case, and any host
    that does not answer so, is Ansible's to judge (its view of the inventory is the one
    that counts): read from its JSON output (its ``json`` callback), never its words."""
    if hosts is not None:
        from collector.hosts import sshhosts  # noqa: PLC0415

        settings = sshhosts.settings_of(hosts, sshhosts.all_hosts(hosts))
        answers = sshhosts.on_all(settings or {}, lambda _host: "true")
        if settings and all(a.rc == 0 for a in answers.values()):
            console.print(f"preflight: {len(answers)} hosts answer over SSH")
            return
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
    )
    argv = [ansible_bin("ansible"), "all", "-i", str(inventory), "-m", "ansible.builtin.ping",
            "-T", "10"]  # fmt: skip
    proc = subprocess.run(
        argv,
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    try:
        # the JSON document alone: a callback enabled in the environment (profile_tasks,
        # to time a run's steps) may print its own lines after it
        doc, _ = json.JSONDecoder().raw_decode(proc.stdout, proc.stdout.index("{"))
        results = doc["plays"][0]["tasks"][0]["hosts"]
    except (ValueError, KeyError, IndexError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DrivelabError(
            f"preflight: ansible exited {proc.returncode}: nothing was touched ({last[:200]})"
        ) from None
    for host, res in sorted(results.items()):
        if res.get("unreachable") or res.get("failed"):
            why = " ".join(str(res.get("msg") or "no answer").split())
            raise DrivelabError(
                f"preflight: host {host} does not answer over SSH: nothing was touched"
                f" ({why[:200]})"
            )
    console.print(f"preflight: {len(results)} hosts answer over SSH")


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
        self.prom_url: str | None = None
        self.lease: lab_lease.Lease | None = None
        self._last_request: tuple | None = None
        self._last_facts_dir: Path | None = None
        #: the DB host's drive tools are installed (provisioning, or a drives stage of
        #: this run, did it)
        self._drive_tools = False
        #: fio is installed on the DB host (provisioning, or a pre-tests stage, did it)
        self._fio = False
        #: the filesystems of every cell still to run, made and mounted together before
        #: the first (:func:`~collector.scenario.drive_batch`; None: one cell at a time),
        #: and the device facts that drives stage wrote ({file name: text})
        self._batch: list[dict[str, Any]] | None = None
        self._batch_facts: dict[str, str] | None = None
        #: the major version a previous cell's server reported (its database.json)
        self._pg_major: str | None = None
        #: the cluster and settings the last database stage left running, while nothing
        #: but complete runs came after it (None: unknown): the next cell with the same
        #: ones need not have its cluster's settings checked and applied again
        self._cluster: tuple | None = None
        #: the telemetry playbook, running beside the first drives stage (None: not
        #: asked for, or ready)
        self._telemetry: Future | None = None

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
            self.start_telemetry()
        try:
            return self._run_cells()
        finally:
            self.telemetry_ready(failing=True)

    def _run_cells(self) -> Progress:
        with Store.open(self.opts.db) as store:  # the scenario, as asked, before any run of it
            store.add_scenario(
                self.scenario.name, spec=self.scenario.model_dump(mode="json"),
                baseline_drive=self.scenario.baseline, description=self.scenario.description,
            )  # fmt: skip
        self._batch = drive_batch([p for p in self.cells if not self.stored(p)])
        for planned in self.cells:
            if self.lease is not None:
                self.lease.cell = planned.cell.cell_id
                self.lease.renew()  # now, so status shows the cell (and a lost lease stops here)
                self.lease.check()
            self.run_cell(planned)
        self.telemetry_ready()
        if self.lease is not None:
            self.lease.check()
        p = self.progress
        if p.not_run and len(p.not_run) == len(self.cells):
            # nothing ran at all (a refused drive, say): the reason is the last word
            more = f" (and {len(self.cells) - 1} more cells)" if len(self.cells) > 1 else ""
            raise DrivelabError(f"scenario {self.scenario.name}: {p.not_run[0]}{more}")
        return p

    def start_telemetry(self) -> None:
        """The telemetry playbook, started in the background: it sets up node_exporter on
        every host and Prometheus on the controller while the first drives stage makes
        the filesystems (neither installs packages then: provisioning did, so no two
        apt run on one host at once). :meth:`telemetry_ready` waits for it before the
        first pre-test, database stage or run. With ``verbose`` (Ansible's output on the
        terminal) it runs here and now, its output not mixed with another playbook's."""
        opts = self.opts
        live_target = f"{opts.metrics_addr}:{opts.metrics_port}" if opts.live else ""
        setup = partial(runner.telemetry, live_target=live_target, inventory=opts.inventory,
                        stream=opts.verbose, reuse=not opts.reprovision)  # fmt: skip
        if opts.verbose:
            self._telemetry_up(setup())
            return
        pool = ThreadPoolExecutor(1, thread_name_prefix="drivelab-telemetry")
        self._telemetry = pool.submit(setup)
        pool.shutdown(wait=False)

    def telemetry_ready(self, *, failing: bool = False) -> None:
        """Waits for the telemetry set-up started by :meth:`start_telemetry` (its error
        raised here); ``failing``: the run is failing already, so its error, if any, is
        not raised over the run's own (the playbook is still waited for: no
        ansible-playbook outlives the run)."""
        job, self._telemetry = self._telemetry, None
        if job is None:
            return
        if failing:
            with suppress(Exception):
                job.result()
            return
        try:
            ran = job.result()
        except DrivelabError as err:
            raise SetupFailed(str(err)) from err
        self._telemetry_up(ran)

    def _telemetry_up(self, ran: object) -> None:
        """Says how telemetry was set up (``ran`` None: found answering, not run)."""
        if ran is None:
            # one line under 80 columns: rich wraps at 80 when not on a terminal
            self.console.print(
                "telemetry set-up skipped: Prometheus and every node_exporter answer"
            )
        self.prom_url = prometheus_url(self.inventory)
        self.console.print(f"telemetry: Prometheus at {self.prom_url}")

    def provision(self) -> None:
        opts = self.opts
        # provisioning installs the DB host's drive tools and fio, or finds a host that
        # it did so with the same roles: the stages after it need not check (1.8 s each)
        self._drive_tools = self._fio = True
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
            self._cluster = (OWN_CLUSTER, ())

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
            self.progress.not_run.append(f"{cell.cell_id}: not run: {err}")
            self.console.print(f"{head}: not run: {err}")
            if self.opts.fail_fast:
                raise
            return False
        skip = write_cache_skip(cell.cell_dir() / DB_DIR)
        if planned.write_cache in ("on", "off") and skip:
            self.console.print(f"{head}: skipped: {skip}")
            return False
        return True

    def prepare(self, planned: PlannedCell) -> None:
        """The cell's drive (when its request changed), pre-tests and databases."""
        cell = planned.cell
        facts_dir = cell.cell_dir() / DB_DIR
        opts = self.opts
        # the drives stage again when the filesystem request or the write cache changes
        # (the same request leaves the filesystem as it is: no reformatting)
        request = (planned.drive_request, planned.write_cache)
        if request != self._last_request and self.batch_facts() is not None:
            # made and mounted with every other cell's: this cell's device facts
            facts_dir.mkdir(parents=True, exist_ok=True)
            own = {f"{self.db_host}-{r['name']}.json" for r in planned.drive_request}
            for name, text in (self._batch_facts or {}).items():
                if name in own:
                    (facts_dir / name).write_text(text, encoding="utf-8")
            self._last_request = request
            self._last_facts_dir = facts_dir
        elif request != self._last_request:
            self._last_request = None
            drives = {"facts_dir": facts_dir, "write_cache": planned.write_cache,
                      "inventory": opts.inventory, "stream": opts.verbose,
                      "install_packages": not self._drive_tools}  # fmt: skip
            self.make_drives(planned.drive_request, **drives)
            self._drive_tools = True  # once per run: the packages stay installed
            self._last_request = request
            self._last_facts_dir = facts_dir
        elif self._last_facts_dir is not None and self._last_facts_dir != facts_dir:
            # same drives as the previous cell: its device facts hold for this one too
            facts_dir.mkdir(parents=True, exist_ok=True)
            for f in self._last_facts_dir.glob("*.json"):
                if f.name != "database.json":
                    shutil.copy2(f, facts_dir / f.name)
        self.telemetry_ready()  # set up beside the drives stage; before anything measured
        if planned.pretests:
            self.pretests(planned)
        self.prepare_database(planned)
        # the server's own major version, for the next cell's database stage
        self._pg_major = runner.pg_major(cell.cell_dir() / DB_DIR / DATABASE_JSON)

    def prepare_database(self, planned: PlannedCell) -> None:
        """The cell's database stage. When the last one left the same cluster with the
        same settings running and only complete runs came since, the stage leaves the
        cluster's part out (reading the clusters, checking, writing and applying the
        settings: about 1.5 s a cell); should that fail, the whole stage runs."""
        cell, opts = planned.cell, self.opts
        wanted = (cell.cluster, tuple(sorted(cell.pg_settings.items())))
        current, self._cluster = wanted == self._cluster, None
        stage = {"inventory": opts.inventory, "stream": opts.verbose, "provisioned": True}
        try:
            runner.prepare_database(cell, pg_major=self._pg_major, cluster_current=current,
                                    **stage)  # fmt: skip
        except LeaseLost:
            raise
        except DrivelabError as err:
            if not current:
                raise
            self._say(f"{cell.cell_id}: database stage again with its cluster's part ({err})")
            runner.prepare_database(cell, pg_major=self._pg_major, **stage)
        self._cluster = wanted

    def make_drives(self, request: list[dict[str, Any]], **drives: Any) -> None:
        """:func:`runner.prepare_drives`; refused because drivelab's own databases from an
        earlier cell or run are on a filesystem to be made anew: they (and only they, on
        the filesystems refused so) are released, then the gate lets it be reformatted."""
        try:
            runner.prepare_drives(request, **drives)
        except PlaybookFailed as err:
            # drive_format never stops PostgreSQL (it refuses a filesystem that holds
            # its data, and a failure leaves the clusters as they were); a release does
            self._cluster = None
            if HOLDS_POSTGRESQL_DATA not in err.refusals:
                raise
            held = sorted(
                {name for f in err.failures if f.get("refusal") == HOLDS_POSTGRESQL_DATA
                 for name in f.get("filesystems") or ()}
            ) or [r["name"] for r in request]  # fmt: skip
            self.console.print(f"releasing drivelab's PostgreSQL data on {', '.join(held)}")
            runner.release(held, inventory=self.opts.inventory, stream=self.opts.verbose,
                           provisioned=True, pg_major=self._pg_major)  # fmt: skip
            runner.prepare_drives(request, **drives)

    def batch_facts(self) -> dict[str, str] | None:
        """The device facts of the drives stage that made and mounted every cell's
        filesystem at once, run the first time it is asked for; None when there is no
        such stage, or it failed (each cell then has its own drives stage, as without
        the batch)."""
        if self._batch is None or self._batch_facts is not None:
            return self._batch_facts
        batch, self._batch = self._batch, None
        names = ", ".join(r["name"] for r in batch)
        opts = self.opts
        with tempfile.TemporaryDirectory(prefix="drivelab-drives-") as tmp:
            drives = {"facts_dir": Path(tmp), "inventory": opts.inventory, "stream": opts.verbose,
                      "install_packages": not self._drive_tools}  # fmt: skip
            try:
                self.make_drives(batch, **drives)
            except LeaseLost:
                raise
            except DrivelabError as err:
                # a drive refused (the gate, or drive_format's own check before it
                # writes) or one that failed: each cell gets its own drives stage
                self.console.print(
                    f"drives {names} together: not made ({err}); one cell at a time",
                    highlight=False, soft_wrap=True,
                )  # fmt: skip
                return None
            self._drive_tools = True
            self._batch_facts = {
                f.name: f.read_text(encoding="utf-8") for f in Path(tmp).glob("*.json")
            }
        self.console.print(
            f"drives {names}: made and mounted together for every cell",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
        return self._batch_facts

    def pretests(self, planned: PlannedCell) -> None:
        """The drive's raw pre-tests, once per cell that carries them (just formatted):
        skipped when the store has them from an earlier attempt, stored in one go."""
        cell = planned.cell
        with Store.open(self.opts.db) as store:
            sid = store.add_scenario(cell.scenario)
            if any(
                s.labels.get("cell") == cell.cell_id
                for p in PRETEST_PREFIXES
                for s in store.samples(sid, metric_prefix=p)
            ):
                self.console.print(f"{cell.cell_id}: pre-tests stored earlier, skipped")
                return
        self._cluster = None
        out = cell.cell_dir() / "pretests"
        if out.exists():
            shutil.rmtree(out)  # a cut-off attempt's outputs: run again from scratch
        started = time.monotonic()
        kinds = " and ".join(k for k in ("fio", "pg_test_fsync") if planned.pretests[k])
        self.console.print(f"{cell.cell_id}: raw pre-tests ({kinds})")
        runner.run_pretests(planned.drive_request, planned.pretests, out,
                            inventory=self.opts.inventory, stream=self.opts.verbose,
                            install_packages=not self._fio)  # fmt: skip
        self._fio = True  # once per run: the package stays installed
        samples = pretest.collect(out, {"cell": cell.cell_id, "filesystem": cell.filesystem})
        flags = pretest.physics_facts(samples, cell.cell_dir() / DB_DIR)
        with Store.open(self.opts.db) as store:
            sid = store.add_scenario(cell.scenario)
            store.add_samples(samples, scenario_id=sid)
            store.add_facts(sid, {"physics": flags}, scope="pretest", host=self.db_host)
        for f in (physics.Flag.from_fact(f) for f in flags if f["level"] == physics.WARNING):
            self.console.print(f"  {f.kind} {f.drive}: {f.message}", highlight=False)
        self.console.print(
            f"{cell.cell_id}: pre-tests done in {time.monotonic() - started:.0f} s,"
            f" {len(samples)} figures stored"
        )

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
        if self.prom_url:
            self.run_telemetry(gathered, run_id)
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
        self._cluster = None  # the server may not be as the database stage left it
        self.progress.problems += 1
        if self.opts.fail_fast:
            raise DrivelabError(
                f"{cell.cell_id} {which}: {st.status.value} ({st.reason}); --fail-fast"
            )
        if not last:
            self.console.print(f"{head} {which}: kept as {st.status.value}; running it again")
        return False

    # ------------------------------------------------------------------ around a run

    def live_view(self, planned: PlannedCell, rep: int, run_dir: Path, hosts: list[str]):
        """Follows the clients' progress lines over SSH while the playbook runs: a live
        table on a terminal, metrics for Prometheus and `drivelab watch`. Best effort:
        a client it cannot reach is marked, the results come from the fetched files."""
        from collector import live  # noqa: PLC0415

        cell = planned.cell
        targets = []
        for h in hosts:
            ssh = ssh_settings(self.inventory, h)
            if ssh is None:
                self.console.print(f"live view: no SSH key or known_hosts for {h}: not followed")
                continue
            stderr = live.remote_run_dir(run_dir, h) / "stderr.txt"
            targets.append(live.ClientTarget(h, ssh["host"], str(stderr), ssh["key"],
                                             ssh["known_hosts"], port=ssh["port"],
                                             user=ssh["user"]))  # fmt: skip
        labels = live.RunLabels(cell.scenario, cell.cell_id, str(rep), cell.drive)
        duration = float(cell.pgbench.duration) if cell.pgbench.duration else None
        return live.following(
            targets, labels, duration, metrics_addr=self.opts.metrics_addr,
            metrics_port=self.opts.metrics_port, console=self.console,
            display=False if self.opts.verbose else None,
        )  # fmt: skip

    def run_telemetry(self, gathered: GatheredRun, run_id: int) -> None:
        """After a run: its per-second device and CPU figures from Prometheus, stored
        with it, and the verdicts drawn from them (cache defeated or not, client-bound).
        A problem here is one line: the run itself stands."""
        from collector.verdicts import cachedefeat, telemetry  # noqa: PLC0415

        run, cell = gathered.run, gathered.cell
        hosts = list(run.facts.get("client_hosts") or [])
        starts = [c.start for c in run.clients if c.start is not None]
        ends = [c.end for c in run.clients if c.end is not None]
        start = min(starts) if starts else run.started_at
        end = max(ends) if ends else run.ended_at
        try:
            if start is None or end is None:
                raise DrivelabError("the run has no start or end time")
            dev = next(
                (f.facts[cell.drive] for f in gathered.facts
                 if f.scope == "device" and cell.drive in f.facts),
                None,
            )  # fmt: skip
            if dev is None:
                raise DrivelabError(f"no device facts for {cell.drive}")
            devices = telemetry.devices_from_facts(dev)
            samples = telemetry.run_telemetry(
                self.prom_url or "", start - 1, end + 1, db_instance=self.db_host,
                client_instances={h: h for h in hosts}, devices=devices, db_host=self.db_host,
                instance_label="drivelab_host",
            )  # fmt: skip
            verdicts: dict[str, Any] = {
                "telemetry_devices": devices,
                "telemetry_missing": telemetry.missing(
                    samples, db_host=self.db_host, clients=hosts, devices=devices
                ),
                "client_bound": telemetry.client_bound(samples),
            }
            pg_stat = read_pg_stat(gathered.run_dir)
            cache = cachedefeat.from_run(pg_stat, run.facts, samples, devices)
            if cache is not None:
                verdicts["cache"] = cache
            with Store.open(self.opts.db) as store:
                sid = store.add_scenario(gathered.scenario)
                pre = [s for p in PRETEST_PREFIXES for s in store.samples(sid, metric_prefix=p)]
                verdicts["physics_iops"] = physics.telemetry_facts(
                    cell, run, tps=gathered.stats().tps, samples=samples, devices=devices,
                    pretest=pretest.for_cell(pre, cell), cache=cache,
                )  # fmt: skip
                store.add_samples(samples, run_id=run_id)
                store.add_facts(sid, verdicts, scope="run", run_id=run_id)
        except DrivelabError as err:
            self.console.print(f"telemetry of {cell.drive} rep {run.repetition}: {err}")
            return
        if verdicts["client_bound"]:
            self.console.print(
                f"  {telemetry.CLIENT_BOUND_NOTE} ({', '.join(verdicts['client_bound'])})"
            )
        if cache is not None:
            self.console.print(f"  {cache['verdict']}: {cache['reason']}", highlight=False)


def read_pg_stat(run_dir: Path) -> dict[str, Any] | None:
    """The client databases' counters before and after the run (pg_stat-*.json)."""
    out = {}
    for when in ("before", "after"):
        path = run_dir / PG_STAT.format(when)
        if not path.exists():
            return None
        out[when] = json.loads(path.read_text(encoding="utf-8"))["databases"]
    return out


def enough(tps: list[float], policy) -> bool:
    pct = ci_pct(tps)
    return pct is not None and pct <= policy.target_ci_pct


def write_cache_skip(facts_dir: Path) -> str | None:
    for path in sorted(facts_dir.glob("*.json")) if facts_dir.is_dir() else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        for wc in doc.get("write_cache", []) if isinstance(doc, dict) else []:
            if wc.get("skip_cells"):
                return wc.get("msg") or "write cache cannot be changed on this drive"
    return None


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


def ci_pct(values: list[float]) -> float | None:
    s = summarize(values)
    if s is None or s.ci_low is None or not s.mean:
        return None
    return (s.mean - s.ci_low) / s.mean * 100
