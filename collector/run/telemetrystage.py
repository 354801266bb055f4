"""Telemetry beside a scenario's run: node_exporter on every host and Prometheus on
the controller, set up in the background beside the first drives stage and ready before
anything is measured; after each run, its per-second device and CPU figures read from
Prometheus, stored with it, and the verdicts drawn from them (cache defeated or not,
client-bound, IOPS against physics)."""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from collector.errors import DrivelabError
from collector.gather.folder import GatheredRun
from collector.run import stages as runner
from collector.runfolder import PG_STAT
from collector.scenario.inventory import prometheus_url
from collector.store import Store
from collector.verdicts import physics, pretest
from collector.verdicts.pretest import PRETEST_PREFIXES


class SetupFailed(DrivelabError):
    """The run's own set-up (telemetry) failed where a cell waited for it: the run
    stops, as it did before any cell, not only that cell."""


class Telemetry:
    """The run's telemetry: :meth:`start`, :meth:`ready`, then :meth:`after_run` for
    every run; ``prom_url`` is set once it is ready (None: not asked for)."""

    def __init__(self, opts: Any, inventory: dict[str, Any], db_host: str, console: Console):
        self.opts = opts
        self.inventory = inventory
        self.db_host = db_host
        self.console = console
        self.prom_url: str | None = None
        #: the telemetry playbook, running beside the first drives stage (None: not
        #: asked for, or ready)
        self._job: Future | None = None

    def start(self) -> None:
        """The telemetry playbook, started in the background: it sets up node_exporter on
        every host and Prometheus on the controller while the first drives stage makes
        the filesystems (neither installs packages then: provisioning did, so no two
        apt run on one host at once). :meth:`ready` waits for it before the
        first pre-test, database stage or run. With ``verbose`` (Ansible's output on the
        terminal) it runs here and now, its output not mixed with another playbook's."""
        opts = self.opts
        live_target = f"{opts.metrics_addr}:{opts.metrics_port}" if opts.live else ""
        setup = partial(runner.telemetry, live_target=live_target, inventory=opts.inventory,
                        stream=opts.verbose, reuse=not opts.reprovision)  # fmt: skip
        if opts.verbose:
            self._up(setup())
            return
        pool = ThreadPoolExecutor(1, thread_name_prefix="drivelab-telemetry")
        self._job = pool.submit(setup)
        pool.shutdown(wait=False)

    def ready(self, *, failing: bool = False) -> None:
        """Waits for the telemetry set-up started by :meth:`start` (its error
        raised here); ``failing``: the run is failing already, so its error, if any, is
        not raised over the run's own (the playbook is still waited for: no
        ansible-playbook outlives the run)."""
        job, self._job = self._job, None
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
        self._up(ran)

    def _up(self, ran: object) -> None:
        """Says how telemetry was set up (``ran`` None: found answering, not run)."""
        if ran is None:
            # one line under 80 columns: rich wraps at 80 when not on a terminal
            self.console.print(
                "telemetry set-up skipped: Prometheus and every node_exporter answer"
            )
        self.prom_url = prometheus_url(self.inventory)
        self.console.print(f"telemetry: Prometheus at {self.prom_url}")

    def after_run(self, gathered: GatheredRun, run_id: int) -> None:
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
