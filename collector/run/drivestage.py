"""A scenario's drives stages and pre-tests: each cell's filesystems made and mounted
(all cells' at once when they fit together, else when a cell's request changes), its
device facts in the cell's folder, and the drive's raw pre-tests once per cell that
carries them."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from collector.errors import DrivelabError
from collector.hosts.playbook import HOLDS_POSTGRESQL_DATA, LeaseLost, PlaybookFailed
from collector.run import stages as runner
from collector.runfolder import DB_DIR
from collector.scenario import PlannedCell
from collector.store import Store
from collector.verdicts import physics, pretest
from collector.verdicts.pretest import PRETEST_PREFIXES


@dataclass
class ServerState:
    """What the run knows of the DB host's PostgreSQL between cells."""

    #: the major version a previous cell's server reported (its database.json)
    pg_major: str | None = None
    #: the cluster and settings the last database stage left running, while nothing
    #: but complete runs came after it (None: unknown): the next cell with the same
    #: ones need not have its cluster's settings checked and applied again
    cluster: tuple | None = None


class Drives:
    """The run's drives stages and pre-tests (one per run; it remembers what it made)."""

    def __init__(self, opts: Any, db_host: str, console: Console, server: ServerState) -> None:
        self.opts = opts
        self.db_host = db_host
        self.console = console
        self.server = server
        #: the DB host's drive tools are installed (provisioning, or a drives stage of
        #: this run, did it)
        self.tools = False
        #: fio is installed on the DB host (provisioning, or a pre-tests stage, did it)
        self.fio = False
        #: the filesystems of every cell still to run, made and mounted together before
        #: the first (:func:`~collector.scenario.drive_batch`; None: one cell at a time),
        #: and the device facts that drives stage wrote ({file name: text})
        self.batch: list[dict[str, Any]] | None = None
        self._batch_facts: dict[str, str] | None = None
        self._last_request: tuple | None = None
        self._last_facts_dir: Path | None = None

    def for_cell(self, planned: PlannedCell) -> None:
        """The cell's filesystems, and its device facts in its folder: a drives stage
        when the request (or the write cache) changed since the last cell; the same
        request leaves the filesystems as they are (no reformatting)."""
        opts = self.opts
        facts_dir = planned.cell.cell_dir() / DB_DIR
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
                      "install_packages": not self.tools}  # fmt: skip
            self.make(planned.drive_request, **drives)
            self.tools = True  # once per run: the packages stay installed
            self._last_request = request
            self._last_facts_dir = facts_dir
        elif self._last_facts_dir is not None and self._last_facts_dir != facts_dir:
            # same drives as the previous cell: its device facts hold for this one too
            facts_dir.mkdir(parents=True, exist_ok=True)
            for f in self._last_facts_dir.glob("*.json"):
                if f.name != "database.json":
                    shutil.copy2(f, facts_dir / f.name)

    def make(self, request: list[dict[str, Any]], **drives: Any) -> None:
        """:func:`runner.prepare_drives`; refused because drivelab's own databases from an
        earlier cell or run are on a filesystem to be made anew: they (and only they, on
        the filesystems refused so) are released, then the gate lets it be reformatted."""
        try:
            runner.prepare_drives(request, **drives)
        except PlaybookFailed as err:
            # drive_format never stops PostgreSQL (it refuses a filesystem that holds
            # its data, and a failure leaves the clusters as they were); a release does
            self.server.cluster = None
            if HOLDS_POSTGRESQL_DATA not in err.refusals:
                raise
            held = sorted(
                {name for f in err.failures if f.get("refusal") == HOLDS_POSTGRESQL_DATA
                 for name in f.get("filesystems") or ()}
            ) or [r["name"] for r in request]  # fmt: skip
            self.console.print(f"releasing drivelab's PostgreSQL data on {', '.join(held)}")
            runner.release(held, inventory=self.opts.inventory, stream=self.opts.verbose,
                           provisioned=True, pg_major=self.server.pg_major)  # fmt: skip
            runner.prepare_drives(request, **drives)

    def batch_facts(self) -> dict[str, str] | None:
        """The device facts of the drives stage that made and mounted every cell's
        filesystem at once, run the first time it is asked for; None when there is no
        such stage, or it failed (each cell then has its own drives stage, as without
        the batch)."""
        if self.batch is None or self._batch_facts is not None:
            return self._batch_facts
        batch, self.batch = self.batch, None
        names = ", ".join(r["name"] for r in batch)
        opts = self.opts
        with tempfile.TemporaryDirectory(prefix="drivelab-drives-") as tmp:
            drives = {"facts_dir": Path(tmp), "inventory": opts.inventory, "stream": opts.verbose,
                      "install_packages": not self.tools}  # fmt: skip
            try:
                self.make(batch, **drives)
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
            self.tools = True
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
        self.server.cluster = None
        out = cell.cell_dir() / "pretests"
        if out.exists():
            shutil.rmtree(out)  # a cut-off attempt's outputs: run again from scratch
        started = time.monotonic()
        kinds = " and ".join(k for k in ("fio", "pg_test_fsync") if planned.pretests[k])
        self.console.print(f"{cell.cell_id}: raw pre-tests ({kinds})")
        # the drive under test's (a WAL drive beside it is made, not pre-tested)
        runner.run_pretests(planned.drive_request[:1], planned.pretests, out,
                            inventory=self.opts.inventory, stream=self.opts.verbose,
                            install_packages=not self.fio)  # fmt: skip
        self.fio = True  # once per run: the package stays installed
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
