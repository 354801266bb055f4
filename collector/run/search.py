"""One cell's rate search on the hosts (``workload.target``): each step run, gathered and
stored through the conductor, the next step asked of :mod:`collector.stats.ratesearch`
(the search's pure part), the result stored as a scenario fact."""

from __future__ import annotations

import shutil
from dataclasses import replace
from typing import Any, Protocol

from rich.console import Console

from collector.cell import Cell, total_rate
from collector.errors import DrivelabError
from collector.runfolder import DB_DIR
from collector.scenario import PlannedCell
from collector.stats import ratesearch
from collector.store import Store


class Conductor(Protocol):
    """What a search needs of the scenario's run (:class:`collector.run.conductor.ScenarioRun`)."""

    opts: Any
    console: Console
    progress: Any

    def prepare_or_skip(self, planned: PlannedCell, head: str) -> bool: ...

    def run_one(  # noqa: PLR0917  (as the conductor's)
        self,
        planned: PlannedCell,
        rep: int,
        head: str,
        tps: list[float],
        attempt: int = 1,
        last: bool = True,
        cold_start: bool = True,
        settle: bool = False,
    ) -> bool: ...


def step_cell(cell: Cell, total: int) -> Cell:
    """The cell of one step of a rate search: ``cell`` at ``total`` transactions/s over
    its client hosts, each running ``-R total/hosts`` (its own cell, named ``-r<per host>``,
    as a ``rate_per: total`` sweep names it)."""
    return replace(cell, pgbench=cell.pgbench.at_rate(total, "total", len(cell.hosts) or 1))


class CellSearch:
    """The rate search of one cell (``workload.target``, :mod:`collector.stats.ratesearch`): each
    step is the cell at one total rate, its own cell (``-r<rate per host>``), run once
    through the conductor's ``run_one`` (run, gather, store; a partial run again up to
    ``retries`` times) without the cold start: the p99 searched is the warm, steady
    state's, not the cache warming up (on a cold 120-IOPS drive that alone set a short
    step's p99: docs/scaling.md). Each step is settled first (vacuums, CHECKPOINT, sync; caches
    kept): nothing the step before left to write out. That was not all an overload left
    (lab hdd7200, settled: 56/s broke at p99 2.3 s right after 160/s, 66/s held twice
    later), so a break right after an overload is run again after a hold
    (:mod:`collector.stats.ratesearch`). Before every step the steps stored so far are read
    back from the store in the order run (their ``latency_window`` facts and status):
    that is the whole state, so a search killed mid-way goes on where it stopped. The
    result is stored as the scenario fact ``rate_search`` (scope ``rate_search``) and
    printed."""

    def __init__(self, run: Conductor, planned: PlannedCell) -> None:
        assert planned.search is not None  # noqa: S101  (the caller checks)
        self.scenario_run = run
        self.planned = planned
        self.spec: ratesearch.SearchSpec = planned.search
        self.cell = planned.cell
        self.hosts = len(self.cell.hosts) or 1
        self.head = f"[{planned.index}/{planned.total}] {self.cell.cell_id}"

    def stored(self) -> list[ratesearch.Observation]:
        """The steps of this search in the store, in the order they were run: per step
        cell and repetition (1: a confirmation) its complete run, else its last attempt."""
        out: list[tuple[int, ratesearch.Observation]] = []
        if not self.scenario_run.opts.db.exists():
            return []
        with Store.open(self.scenario_run.opts.db, create=False) as store:
            sid = next((i.id for i in store.scenarios() if i.name == self.cell.scenario), None)
            if sid is None:
                return []
            for cid, spec in store.cells(sid):
                per_host = spec.params.get("rate")
                if not isinstance(per_host, int) or per_host <= 0:
                    continue
                total = total_rate(per_host, self.hosts)
                if step_cell(self.cell, total).spec.key != spec.key:
                    continue
                # repetition 0: the step; 1: the step run again (its break confirmed, or the
                # sustained rate again before a confirmation)
                for rep in (0, 1):
                    runs = [r for r in store.runs(cid) if r.repetition == rep]
                    if not runs:
                        continue
                    done = [r for r in runs if r.status.value == "complete"]
                    run = (done or runs)[-1]
                    facts = {f.key: f.value for f in store.facts(sid, run_id=run.id)}
                    obs = ratesearch.observation(
                        total, facts.get("latency_window"), complete=bool(done), reason=run.reason
                    )
                    out.append((min(r.id for r in runs), obs))
        return [o for _, o in sorted(out, key=lambda x: x[0])]

    def run_step(self, decision: ratesearch.Decision, number: int) -> None:
        """One step: the cell at ``decision.rate``, with the base cell's database facts;
        a confirmation (the rate run again) is the step cell's repetition 1."""
        total = decision.rate
        assert total is not None  # noqa: S101  (a step has a rate)
        step = step_cell(self.cell, total)
        rep = 1 if decision.again else 0
        src, dst = self.cell.cell_dir() / DB_DIR, step.cell_dir() / DB_DIR
        if dst.exists():
            shutil.rmtree(dst)
        if src.is_dir():
            shutil.copytree(src, dst)
        head = (
            f"{self.head} step {number}/{self.spec.steps} ({decision.why}):"
            f" {total}/s total (-R {total // self.hosts} per host)"
        )
        with Store.open(self.scenario_run.opts.db) as store:
            before = len(store.attempts(step.scenario, step.spec).get(rep, []))
        planned = replace(self.planned, cell=step)
        retries = self.planned.retries
        for retry in range(retries + 1):
            last = retry == retries
            # warm: no cold start (docs/scenarios.md: a step's p99 is steady-state latency),
            # settled: nothing the step before left to write out
            if self.scenario_run.run_one(
                planned, rep, head, [], attempt=before + retry + 1, last=last,
                cold_start=False, settle=True,
            ):  # fmt: skip
                break

    def run(self) -> ratesearch.SearchResult | None:
        """The search to its end; its result, or None when the cell could not run."""
        console, spec = self.scenario_run.console, self.spec
        observed = self.stored()
        self.scenario_run.progress.done += len(observed)
        decision = ratesearch.next_step(spec, observed)
        if decision.rate is not None:
            if observed:
                console.print(f"{self.head}: {len(observed)} steps of the search stored, going on")
            if not self.scenario_run.prepare_or_skip(self.planned, self.head):
                return None
        while decision.rate is not None:
            self.run_step(decision, len(observed) + 1)
            now = self.stored()
            new = [o for o in now if o.rate == decision.rate]
            if new:
                holds, why = new[-1].verdict(spec.p99_ms)
                console.print(f"  {'holds' if holds else 'breaks'}: {why}", highlight=False)
            if len(now) <= len(observed):  # nothing stored for the step: do not loop on it
                raise DrivelabError(f"{self.head}: step at {decision.rate}/s total not stored")
            observed = now
            decision = ratesearch.next_step(spec, observed)
        result = decision.result
        assert result is not None  # noqa: S101  (no rate: the result)
        self.scenario_run.progress.done += max(spec.steps - result.runs, 0)
        self.store_result(result)
        console.print(f"{self.head}: {result.text}", highlight=False, soft_wrap=True)
        return result

    def store_result(self, result: ratesearch.SearchResult) -> None:
        spec = self.cell.spec
        doc = result.to_json() | {
            "cell": spec.key,
            "cell_id": spec.cell_id,
            "drive": spec.drive,
            "test": spec.test,
            "hosts": self.hosts,
        }
        for step in doc["steps"]:
            s = step_cell(self.cell, step["rate"]).spec
            step |= {"rate_per_host": step["rate"] // self.hosts, "cell": s.key}
        with Store.open(self.scenario_run.opts.db) as store:
            sid = store.add_scenario(self.cell.scenario)
            earlier = [
                f.value
                for f in store.facts(sid)
                if f.scope == ratesearch.FACT and f.value.get("cell") == spec.key
            ]
            if not earlier or earlier[-1] != doc:  # a finished search resumed: stored once
                store.add_facts(sid, {ratesearch.FACT: doc}, scope=ratesearch.FACT)
