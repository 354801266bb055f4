"""bench/steps.py reads each timed playbook's own log: logs named <start>-<stage>.log,
matched to the records of the same stage in start order, whatever else the logs folder
holds (a playbook the script does not time) and however two stages overlap."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
_spec = importlib.util.spec_from_file_location("bench_steps", BENCH / "steps.py")
steps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(steps)


def log(folder: Path, name: str, play: str, seconds: float) -> None:
    """A playbook log with one play that profile_tasks timed as ``seconds`` long."""
    (folder / name).write_text(
        f"PLAY [{play}] ***\n"
        "Monday 07 December 2026  16:43:01 +0000 (0:00:00.000)       0:00:01.000 ****\n"
        "TASK [end] ***\n"
        f"Monday 07 December 2026  16:43:02 +0000 (0:00:00.000)       0:00:{1 + seconds:06.3f} ****\n"
    )


def test_each_stage_gets_its_own_logs_in_order(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    # the check's log comes first and has no record; telemetry starts beside the drives
    log(logs, "20261207-164245-check.log", "check", 1.0)
    log(logs, "20261207-164253-provision.log", "provision", 7.0)
    log(logs, "20261207-164301-drives.log", "drives", 5.0)
    log(logs, "20261207-164301-telemetry.log", "telemetry", 6.0)
    log(logs, "20261207-164312-pgbench.log", "first repetition", 3.0)
    log(logs, "20261207-164326-pgbench.log", "second repetition", 4.0)
    records = [
        ("provision", 773.7, 781.3), ("telemetry", 781.4, 787.6), ("drives", 781.5, 787.0),
        ("pgbench", 792.3, 806.0), ("pgbench", 806.6, 820.0),
    ]  # fmt: skip
    # written as each ends: telemetry's record after the drives'
    records.sort(key=lambda r: r[2])
    (tmp_path / "timings.jsonl").write_text(
        "".join(
            json.dumps({"kind": "playbook", "what": w, "start": s, "end": e}) + "\n"
            for w, s, e in records
        )
    )
    (tmp_path / "runs").mkdir()
    data = steps.analyse(tmp_path, tmp_path / "timings.jsonl")
    plays = {stage: [run["plays"] for run in runs] for stage, runs in data["stages"].items()}
    assert plays == {
        "provision": [[("provision", 7.0)]],
        "telemetry": [[("telemetry", 6.0)]],
        "drives": [[("drives", 5.0)]],
        "pgbench": [[("first repetition", 3.0)], [("second repetition", 4.0)]],
    }, plays


STEPS = Path(__file__).resolve().parents[1] / "data" / "steps"


def test_a_repetitions_cycle_is_cut_where_each_hosts_own_tasks_start_and_end():
    """Two repetitions of a real bench/steps.py run (2 clients, 10 s; the trace callback's
    lines, the runner's timings, the run folders' command.json): the segments add up to
    each pgbench stage's wall, none is negative, the DB host's path through the play
    before the run is its own (the cold start's module run as the trace timed it), and
    only a repetition the next one follows has the runner's time between them."""
    reps = steps.critical_path(STEPS, STEPS / "timings.jsonl")
    timings = [json.loads(ln) for ln in (STEPS / "timings.jsonl").read_text().splitlines()]
    assert len(reps) == len(timings) == 2
    trace = [json.loads(ln) for ln in (STEPS / "trace.jsonl").read_text().splitlines()]
    modules = [e["end"] - e["start"] for e in trace
               if e["ev"] == "task" and e["task"].startswith(steps._COLD)]  # fmt: skip
    for rep, stage, module in zip(reps, timings, modules, strict=True):
        cycle = [rep[key] for key, _ in steps.SEGMENTS if key != "between"]
        assert min(cycle) >= 0, rep
        assert abs(sum(cycle) - (stage["end"] - stage["start"])) < 1e-6, rep
        assert rep["cold_start_module"] == module
        assert 10.0 <= rep["pgbench"] <= 10.2, rep
        # the clients' path (run folders, wrappers armed) ends before the DB host's
        before_db = rep["before_db_prelude"] + rep["cold_start_module"] + rep["before_db_after"]
        assert rep["clients_armed_s"] < before_db, rep
        # the cold start's own steps, on their longest path, are inside its module run
        assert 0 < rep["cold_start_steps_s"] < rep["cold_start_module"], rep
    # vacuums at once, checkpoint, stop, page-cache drop, start, warm-ups and transactions
    assert abs(reps[0]["cold_start_steps_s"] - (0.101 + 0.04 + 0.128 + 0.087 + 0.148 + 0.051
                                                + 0.043)) < 1e-9  # fmt: skip
    assert reps[0]["between"] == timings[1]["start"] - timings[0]["end"]
    assert reps[1]["between"] is None
    table = steps.critical_table([reps], ["a"])
    cycle_less_pgbench = sum(reps[0][k] for k, _ in steps.SEGMENTS) - reps[0]["pgbench"]
    assert table[-1].endswith(f"**{cycle_less_pgbench:.2f} ({cycle_less_pgbench:.2f}-"
                              f"{cycle_less_pgbench:.2f})** |"), table[-1]  # fmt: skip


def test_a_run_without_the_trace_has_no_cycle_cut(tmp_path):
    (tmp_path / "timings.jsonl").write_text((STEPS / "timings.jsonl").read_text())
    assert steps.critical_path(tmp_path, tmp_path / "timings.jsonl") == []
