"""The write methods of :class:`collector.store.Store`, in a base class of it: a
scenario and its cells made if new, a run recorded whole with its clients, series,
samples, facts and raw-output paths, the samples and facts of a scenario; and the
resume queries (which repetitions are stored, and how) that decide what the runner
still has to write. Each write is one :meth:`~collector.store.Store.transaction`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from collector.errors import DrivelabError
from collector.records import CellSpec, ClientResult, RunRecord, RunStatus, Sample
from collector.store.backend import Cursor
from collector.store.reads import Reads
from collector.store.rows import _dumps, _filesystem_options


class Writes(Reads):
    """Writes to one results store, and the runner's resume queries.
    :class:`collector.store.Store` adds the lifecycle, the transaction and the claims."""

    #: the store's clock (``time.time``, or a test's)
    clock: Callable[[], float]
    #: the controller recorded with every run that names none
    controller: str
    #: one write, all or nothing (:meth:`collector.store.Store.transaction`)
    transaction: Callable[[], AbstractContextManager[Cursor]]

    def add_scenario(
        self,
        name: str,
        spec: Mapping[str, Any] | None = None,
        baseline_drive: str | None = None,
        description: str | None = None,
    ) -> int:
        """The scenario's id, creating it if new. The spec (the validated scenario
        file), the baseline drive and the description are updated when given."""
        with self.transaction() as cur:
            row = cur.execute("SELECT id FROM scenarios WHERE name = ?", (name,)).fetchone()
            if row is None:
                # another controller may add the same name at the same moment: the unique
                # name decides, and the loser takes the winner's row
                made = cur.execute(
                    "INSERT INTO scenarios (name, created_at, baseline_drive, spec_json,"
                    " description) VALUES (?,?,?,?,?) ON CONFLICT (name) DO NOTHING RETURNING id",
                    (name, self.clock(), baseline_drive, _dumps(spec or {}), description or ""),
                ).fetchone()
                if made is not None:
                    return int(made[0])
                row = cur.execute("SELECT id FROM scenarios WHERE name = ?", (name,)).fetchone()
            updates = {
                "spec_json": _dumps(spec) if spec is not None else None,
                "baseline_drive": baseline_drive,
                "description": description,
            }
            for column, value in updates.items():
                if value is not None:
                    cur.execute(f"UPDATE scenarios SET {column} = ? WHERE id = ?", (value, row[0]))  # noqa: S608  (a fixed column name)
            return int(row[0])

    def add_cell(self, scenario_id: int, cell: CellSpec) -> int:
        """The cell's id within the scenario, creating it if new (keyed by :attr:`CellSpec.key`)."""
        with self.transaction() as cur:
            row = cur.execute(
                "SELECT id FROM cells WHERE scenario_id = ? AND key = ?", (scenario_id, cell.key)
            ).fetchone()
            if row:
                return int(row[0])
            made = cur.execute(
                "INSERT INTO cells (scenario_id, key, drive, workload, filesystem, placement,"
                " scale, clients, params_json, write_cache, filesystem_json, pg_settings_name,"
                " pg_settings_json, wal_drive, drive_state, trim, clients_swept)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT (scenario_id, key) DO NOTHING RETURNING id",
                (
                    scenario_id,
                    cell.key,
                    cell.drive,
                    cell.workload,
                    cell.filesystem,
                    cell.placement,
                    cell.scale,
                    cell.clients,
                    _dumps(dict(cell.params)),
                    cell.write_cache,
                    _dumps(_filesystem_options(cell)),
                    cell.pg_settings_name,
                    _dumps(dict(cell.pg_settings)),
                    cell.wal_drive,
                    cell.drive_state,
                    cell.trim,
                    int(cell.clients_swept),
                ),
            ).fetchone()
            if made is None:  # another controller added it since the SELECT
                made = cur.execute(
                    "SELECT id FROM cells WHERE scenario_id = ? AND key = ?",
                    (scenario_id, cell.key),
                ).fetchone()
            return int(made[0])

    def attempts(self, scenario: str, cell: CellSpec) -> dict[int, list[RunStatus]]:
        """{repetition: [status of attempt 1, attempt 2, ...]} of the stored runs of one
        cell of a scenario (an attempt never stored is absent from its list)."""
        rows = self._all(
            "SELECT r.repetition, r.attempt, r.status FROM runs r"
            " JOIN cells c ON c.id = r.cell_id JOIN scenarios s ON s.id = c.scenario_id"
            " WHERE s.name = ? AND c.key = ? ORDER BY r.repetition, r.attempt",
            (scenario, cell.key),
        )
        out: dict[int, list[RunStatus]] = {}
        for rep, _attempt, status in rows:
            out.setdefault(int(rep), []).append(RunStatus(status))
        return out

    def repetitions(self, scenario: str, cell: CellSpec) -> dict[int, RunStatus]:
        """{repetition: status} of one cell of a scenario: complete when any attempt of it
        is, else its last attempt's status. What a resumed run skips."""
        return {
            rep: RunStatus.COMPLETE if RunStatus.COMPLETE in seen else seen[-1]
            for rep, seen in self.attempts(scenario, cell).items()
        }

    def has_run(self, cell_id: int, repetition: int, complete_only: bool = False) -> bool:
        """Whether this repetition is stored (and, with ``complete_only``, complete):
        the runner's resume test."""
        sql = "SELECT status FROM runs WHERE cell_id = ? AND repetition = ?"
        row = self._one(sql, (cell_id, repetition))
        return bool(row) and (not complete_only or row[0] == RunStatus.COMPLETE.value)

    def record_run(
        self,
        cell_id: int,
        run: RunRecord,
        replace: bool = True,
        scoped_facts: Iterable[tuple[str, str | None, Mapping[str, Any]]] = (),
    ) -> int:
        """Store one repetition with its clients, series, samples, facts and raw-output
        paths, all in one transaction. An existing run of the same repetition is
        replaced (``replace``) or refused. ``run.facts`` get scope ``run``;
        ``scoped_facts`` (scope, host, facts), such as the DB host's device facts, are
        stored with the run too, so that replacing the run replaces them. The cell's row
        is locked first (PostgreSQL), so two writers of one cell queue."""
        with self.transaction() as cur:
            lock = self.db.for_update  # a fixed clause of the backend's
            cell = cur.execute(
                f"SELECT scenario_id FROM cells WHERE id = ?{lock}",  # noqa: S608
                (cell_id,),
            ).fetchone()
            if cell is None:
                raise DrivelabError(f"{self.path}: no cell {cell_id} to record a run of")
            scenario_id = cell[0]
            old = cur.execute(
                "SELECT id FROM runs WHERE cell_id = ? AND repetition = ? AND attempt = ?",
                (cell_id, run.repetition, run.attempt),
            ).fetchone()
            if old:
                if not replace:
                    attempt = f" attempt {run.attempt}" if run.attempt > 1 else ""
                    raise DrivelabError(
                        f"cell {cell_id} repetition {run.repetition}{attempt} is already stored"
                    )
                cur.execute("DELETE FROM runs WHERE id = ?", (old[0],))
            made = cur.execute(
                "INSERT INTO runs (cell_id, repetition, attempt, status, reason, started_at,"
                " ended_at, commands_json, recorded_at, controller)"
                " VALUES (?,?,?,?,?,?,?,?,?,?) RETURNING id",
                (
                    cell_id,
                    run.repetition,
                    run.attempt,
                    RunStatus(run.status).value,
                    run.reason,
                    run.started_at,
                    run.ended_at,
                    _dumps(list(run.commands)),
                    self.clock(),
                    run.controller or self.controller,
                ),
            ).fetchone()
            run_id = int(made[0])
            self._insert_run_rows(cur, run, scenario_id, run_id, scoped_facts)
            return run_id

    def _insert_run_rows(
        self,
        cur: Cursor,
        run: RunRecord,
        scenario_id: int,
        run_id: int,
        scoped_facts: Iterable[tuple[str, str | None, Mapping[str, Any]]],
    ) -> None:
        """What belongs to the run ``run_id`` just inserted: its clients, series,
        raw-output paths, samples and facts, in :meth:`record_run`'s transaction."""
        for c in run.clients:
            self._insert_client(cur, run_id, c)
        cur.executemany(
            "INSERT INTO series (run_id, client, start_ts, duration_s, transactions,"
            " latency_avg_s, failed, source) VALUES (?,?,?,?,?,?,?,?)",
            [
                (
                    run_id,
                    p.client,
                    p.start,
                    p.duration_s,
                    p.transactions,
                    p.latency_avg_s,
                    p.failed,
                    p.source,
                )
                for p in run.series
            ],
        )
        cur.executemany(
            "INSERT INTO raw_outputs (run_id, host, kind, path) VALUES (?,?,?,?)",
            [(run_id, r.host, r.kind, r.path) for r in run.raw_outputs],
        )
        self._insert_samples(cur, run.samples, scenario_id, run_id)
        self._insert_facts(
            cur, facts=run.facts, scenario_id=scenario_id, run_id=run_id, scope="run", host=None
        )
        for scope, host, facts in scoped_facts:
            self._insert_facts(
                cur, facts=facts, scenario_id=scenario_id, run_id=run_id, scope=scope, host=host
            )

    @staticmethod
    def _insert_client(cur: Cursor, run_id: int, c: ClientResult) -> None:
        hist = None
        if c.histogram is not None:
            hist = _dumps(
                {
                    "lows_s": c.histogram.lows_s,
                    "highs_s": c.histogram.highs_s,
                    "counts": c.histogram.counts,
                }
            )
        cur.execute(
            "INSERT INTO client_results (run_id, client, status, reason, tps, tps_kind, processed,"
            " failed, skipped, latency_avg_s, latency_stddev_s, latency_p50_s, latency_p95_s,"
            " latency_p99_s, latency_max_s, start_ts, end_ts, exit_code, histogram_json,"
            " report_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                c.client,
                RunStatus(c.status).value,
                c.reason,
                c.tps,
                c.tps_kind,
                c.processed,
                c.failed,
                c.skipped,
                c.latency_avg_s,
                c.latency_stddev_s,
                c.latency_p50_s,
                c.latency_p95_s,
                c.latency_p99_s,
                c.latency_max_s,
                c.start,
                c.end,
                c.exit_code,
                hist,
                _dumps(dict(c.report)),
            ),
        )

    @staticmethod
    def _insert_samples(
        cur: Cursor, samples: Iterable[Sample], scenario_id: int | None, run_id: int | None
    ) -> None:
        cur.executemany(
            "INSERT INTO samples (scenario_id, run_id, metric, value, unit, labels_json, timestamp)"
            " VALUES (?,?,?,?,?,?,?)",
            [
                (
                    scenario_id,
                    run_id,
                    s.metric,
                    s.value,
                    s.unit,
                    _dumps(dict(s.labels)),
                    s.timestamp,
                )
                for s in samples
            ],
        )

    @staticmethod
    def _insert_facts(
        cur: Cursor,
        *,
        facts: Mapping[str, Any],
        scenario_id: int | None,
        run_id: int | None,
        scope: str,
        host: str | None,
    ) -> None:
        cur.executemany(
            "INSERT INTO facts (scenario_id, run_id, scope, host, key, value_json)"
            " VALUES (?,?,?,?,?,?)",
            [(scenario_id, run_id, scope, host, k, _dumps(v)) for k, v in facts.items()],
        )

    def add_samples(
        self, samples: Iterable[Sample], scenario_id: int | None = None, run_id: int | None = None
    ) -> None:
        """Samples (fio and pg_test_fsync pre-tests, device telemetry series) of a
        scenario or of one run, in one transaction."""
        with self.transaction() as cur:
            if run_id is not None and scenario_id is None:
                scenario_id = cur.execute(
                    "SELECT c.scenario_id FROM runs r JOIN cells c ON c.id = r.cell_id"
                    " WHERE r.id = ?",
                    (run_id,),
                ).fetchone()[0]
            self._insert_samples(cur, samples, scenario_id, run_id)

    def add_facts(
        self,
        scenario_id: int,
        facts: Mapping[str, Any],
        scope: str = "environment",
        host: str | None = None,
        run_id: int | None = None,
    ) -> None:
        """Environment facts (kernel, PostgreSQL settings), device facts (model,
        serial, rotational, write cache) and the like; values are any JSON."""
        with self.transaction() as cur:
            self._insert_facts(
                cur, facts=facts, scenario_id=scenario_id, run_id=run_id, scope=scope, host=host
            )
