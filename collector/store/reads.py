"""The read methods of :class:`collector.store.Store`, in a base class of it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from collector.errors import DrivelabError
from collector.records import (
    CellSpec,
    ClientResult,
    LatencyHistogram,
    RawOutput,
    RunStatus,
    Sample,
    SeriesPoint,
)
from collector.store.rows import Fact, ScenarioInfo, StoredRun

if TYPE_CHECKING:
    from collector.store.backend import Backend
    from collector.store.target import Target


class Reads:
    """Queries of one results store: its scenarios, cells, runs, clients, series,
    samples, facts and raw-output paths. :class:`collector.store.Store` adds the
    lifecycle and the writes."""

    db: Backend
    path: Target

    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        return self.db.cursor().execute(sql, args).fetchall()

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self.db.cursor().execute(sql, args).fetchone()

    def scenarios(self) -> list[ScenarioInfo]:
        rows = self._all(
            "SELECT id, name, created_at, baseline_drive, spec_json, description"
            " FROM scenarios ORDER BY id"
        )
        return [ScenarioInfo(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5]) for r in rows]

    def scenario(self, name: str) -> ScenarioInfo:
        for s in self.scenarios():
            if s.name == name:
                return s
        known = ", ".join(s.name for s in self.scenarios()) or "none"
        raise DrivelabError(f"no scenario {name!r} in {self.path} (stored: {known})")

    def cells(self, scenario_id: int) -> list[tuple[int, CellSpec]]:
        rows = self._all(
            "SELECT id, drive, workload, filesystem, placement, scale, clients, params_json,"
            " write_cache, filesystem_json, pg_settings_name, pg_settings_json, wal_drive,"
            " drive_state, trim, clients_swept"
            " FROM cells WHERE scenario_id = ? ORDER BY id",
            (scenario_id,),
        )
        out = []
        for r in rows:
            fs = json.loads(r[9])
            spec = CellSpec(
                r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7]), write_cache=r[8],
                mkfs_options=tuple(fs.get("mkfs_options") or ()),
                mount_options=fs.get("mount_options"), filesystem_name=fs.get("name"),
                pg_settings_name=r[10], pg_settings=json.loads(r[11]), wal_drive=r[12],
                drive_state=r[13], trim=r[14], clients_swept=bool(r[15]),
            )  # fmt: skip
            out.append((r[0], spec))
        return out

    def runs(self, cell_id: int) -> list[StoredRun]:
        rows = self._all(
            "SELECT id, cell_id, repetition, status, reason, started_at, ended_at, commands_json,"
            " attempt, controller FROM runs WHERE cell_id = ? ORDER BY repetition, attempt",
            (cell_id,),
        )
        return [
            StoredRun(
                r[0],
                r[1],
                r[2],
                RunStatus(r[3]),
                r[4],
                r[5],
                r[6],
                tuple(json.loads(r[7])),
                attempt=r[8],
                controller=r[9],
            )
            for r in rows
        ]

    def client_results(self, run_id: int) -> list[ClientResult]:
        rows = self._all(
            "SELECT client, status, reason, tps, tps_kind, processed, failed, skipped,"
            " latency_avg_s, latency_stddev_s, latency_p50_s, latency_p95_s, latency_p99_s,"
            " latency_max_s, start_ts, end_ts, exit_code, histogram_json, report_json"
            " FROM client_results WHERE run_id = ? ORDER BY client",
            (run_id,),
        )
        out = []
        for r in rows:
            hist = None
            if r[17]:
                h = json.loads(r[17])
                hist = LatencyHistogram(tuple(h["lows_s"]), tuple(h["highs_s"]), tuple(h["counts"]))
            out.append(
                ClientResult(
                    client=r[0],
                    status=RunStatus(r[1]),
                    reason=r[2],
                    tps=r[3],
                    tps_kind=r[4],
                    processed=r[5],
                    failed=r[6],
                    skipped=r[7],
                    latency_avg_s=r[8],
                    latency_stddev_s=r[9],
                    latency_p50_s=r[10],
                    latency_p95_s=r[11],
                    latency_p99_s=r[12],
                    latency_max_s=r[13],
                    start=r[14],
                    end=r[15],
                    exit_code=r[16],
                    histogram=hist,
                    report=json.loads(r[18]),
                )
            )
        return out

    def series(self, run_id: int) -> list[SeriesPoint]:
        rows = self._all(
            "SELECT client, start_ts, duration_s, transactions, latency_avg_s, failed, source"
            " FROM series WHERE run_id = ? ORDER BY client, start_ts",
            (run_id,),
        )
        return [SeriesPoint(*r) for r in rows]

    def samples(
        self, scenario_id: int | None = None, run_id: int | None = None, metric_prefix: str = ""
    ) -> list[Sample]:
        # the prefix compared exactly, the same on both backends (LIKE is not: SQLite's
        # ignores ASCII case, and '_' is a wildcard in both)
        sql = (
            "SELECT metric, value, unit, labels_json, timestamp FROM samples"
            " WHERE substr(metric, 1, ?) = ?"
        )
        args: list[Any] = [len(metric_prefix), metric_prefix]
        if scenario_id is not None:
            sql += " AND scenario_id = ?"
            args.append(scenario_id)
        if run_id is not None:
            sql += " AND run_id = ?"
            args.append(run_id)
        rows = self._all(sql + " ORDER BY id", args)
        return [Sample(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    def facts(self, scenario_id: int, run_id: int | None = None) -> list[Fact]:
        sql = "SELECT scope, key, value_json, host, run_id FROM facts WHERE scenario_id = ?"
        args: list[Any] = [scenario_id]
        if run_id is not None:
            sql += " AND run_id = ?"
            args.append(run_id)
        rows = self._all(sql + " ORDER BY id", args)
        return [Fact(r[0], r[1], json.loads(r[2]), r[3], r[4]) for r in rows]

    def raw_outputs(self, run_id: int) -> list[RawOutput]:
        rows = self._all(
            "SELECT kind, path, host FROM raw_outputs WHERE run_id = ? ORDER BY id", (run_id,)
        )
        return [RawOutput(*r) for r in rows]
