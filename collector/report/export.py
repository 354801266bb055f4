"""CSV and JSON export of every figure's data: the summary per cell (tps per drive
plot), every run, every client, the per-second series (tps per second per client
plot), the latency histograms (latency distribution plot), the rate steps (latency
against throughput: table and plot) and the per-second latency (latency per second
plot), telemetry and pre-test samples, facts. CSV: one file per table in a folder;
JSON: one document."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from collector import build
from collector.report import ScenarioView, cell_rows, run_rows, sweep
from collector.report.latency import step_rows


def tables(views: list[ScenarioView]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {
        "cells": [],
        "runs": [],
        "series": [],
        "latency_histogram": [],
        "latency_steps": [],
        "latency_series": [],
        "client_sweeps": [],
        "telemetry": [],
        "pretests": [],
        "facts": [],
    }
    for v in views:
        name = v.info.name
        out["cells"] += cell_rows(v)
        out["runs"] += run_rows(v)
        for c in v.cells:
            for p in c.series:
                out["series"].append(
                    {
                        "scenario": name,
                        "drive": c.drive,
                        "test": c.test,
                        "repetition": c.series_run,
                        "client": p.client,
                        "start": p.start,
                        "duration_s": p.duration_s,
                        "tps": p.transactions / p.duration_s,
                        "latency_avg_s": p.latency_avg_s,
                        "failed": p.failed,
                        "source": p.source,
                    }
                )
            if c.histogram is not None:
                for lo, hi, n in zip(
                    c.histogram.lows_s, c.histogram.highs_s, c.histogram.counts, strict=True
                ):
                    out["latency_histogram"].append(
                        {
                            "scenario": name,
                            "drive": c.drive,
                            "test": c.test,
                            "low_s": lo,
                            "high_s": hi,
                            "count": n,
                        }
                    )
        out["latency_steps"] += step_rows(v)
        out["latency_series"] += _latency_series(v)
        out["client_sweeps"] += sweep.export_rows(v)
        for key, samples in (("telemetry", v.telemetry), ("pretests", v.pretests)):
            for s in samples:
                out[key].append(
                    {
                        "scenario": name,
                        "metric": s.metric,
                        "labels": json.dumps(dict(s.labels), sort_keys=True),
                        "value": s.value,
                        "unit": s.unit,
                        "timestamp": s.timestamp,
                    }
                )
        for f in v.facts:
            out["facts"].append(
                {
                    "scenario": name,
                    "scope": f.scope,
                    "host": f.host,
                    "key": f.key,
                    "value": json.dumps(f.value, sort_keys=True, default=str),
                    "run_id": f.run_id,
                }
            )
    return out


def _latency_series(v: ScenarioView) -> list[dict]:
    """Per-second latency (and schedule lag) of the run each cell's plots show: one row
    per second, client ("" for all clients) and figure."""
    rows = []
    for c in v.cells:
        for s in c.latency:
            rows.append(
                {
                    "scenario": v.info.name,
                    "drive": c.drive,
                    "test": c.test,
                    "repetition": c.series_run,
                    "client": s.labels.get("client", ""),
                    "metric": s.metric,
                    "quantile": s.labels.get("quantile"),
                    "start": s.timestamp,
                    "value_s": s.value,
                }
            )
    return rows


def write_csv(views: list[ScenarioView], folder: Path | str) -> list[Path]:
    """One CSV per table (header row always written, even when empty)."""
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in tables(views).items():
        p = d / f"{name}.csv"
        fields = list(rows[0]) if rows else ["scenario"]
        with p.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        written.append(p)
    return written


def document(views: list[ScenarioView]) -> dict:
    """The JSON document of ``views``: its schema version and drivelab's build first."""
    return build.stamped({"scenarios": [v.info.name for v in views], **tables(views)})


def write_json(views: list[ScenarioView], path: Path | str) -> Path | None:
    """The document written to ``path`` (atomically), or to stdout for ``-`` (None)."""
    text = json.dumps(document(views), indent=1, default=str) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
        return None
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(p)
    return p
