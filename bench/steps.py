"""Where the time around a repetition and a cell goes (issue #23), step by step.

One `drivelab run` (live view and telemetry on) on a fresh 2-client lab: drives nvme and
ssd, ext4, placements tablespace and cluster, scale 10, `pgbench -c 4 -j 2 -T 10` per
client host, 2 repetitions: 4 cells, 8 repetitions. Ansible's ``ansible.posix.profile_tasks``
callback is enabled for it, so every playbook's log carries each task's seconds; the
runner is run in a process of this script's that times each ``ansible-playbook``
(:func:`collector.run.stages.run_playbook`) and the controller's own steps after a run
(gather, store, telemetry) from the outside.

The bench-only callback ``drivelab_trace`` (bench/callback) is enabled beside it: each
host's own task starts and ends, into ``trace.jsonl`` in the results folder. From it each
repetition's cycle is cut into segments (:data:`SEGMENTS`): the runner's hand-over and
ansible-playbook's start-up, the DB host's path through the play before the run (its
prelude, the cold start's module run, what follows it), the synchronized play around
the start action, the start action beyond pgbench, the play after the run, the exit, and
the runner's time until the next repetition's stage (``profile_tasks`` cannot say this
under ``strategy: free``, where a task's figure is the time to any host's next task).

Printed (and kept as JSON in the results folder, ``steps.json``):
- per stage (playbook): invocations, mean wall, of which tasks, and the rest (start-up of
  ansible-playbook, loading the inventory and roles, plays);
- per task of the pgbench stage, mean seconds per repetition, and the same per cell
  stage (drives, database) per cell;
- per repetition: the pgbench stage, of which inside pgbench (first launch to last
  end, the clients' command.json), and outside it;
- the segments of a repetition's cycle, mean (min-max) (written into the section too).

A run writes nothing to docs/benchmarks.md; ``--compare BEFORE AFTER`` writes its section
``steps`` from two kept runs (their results folders, e.g. one made on an older commit
with this script copied in, and one on the current one). Builds its own lab and tears it
down, even on failure. About 6 minutes.

    flock /tmp/drivelab-lab.lock .venv/bin/python bench/steps.py [--label before]
    .venv/bin/python bench/steps.py --compare /tmp/drivelab-bench-steps-before-X \
        /tmp/drivelab-bench-steps-after-Y --names "main 01f9eea" "h-cost 1234567"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _labrun import REPO, drivelab, environ, pgbench_span, write_scenario

HOSTS = 2
DRIVES = ("nvme", "ssd")
PLACEMENTS = ("tablespace", "cluster")
DURATION = 10
REPETITIONS = 2

#: bench/callback: drivelab_trace, each host's task starts and ends, into TRACE beside the
#: timings (the critical path of a repetition: :func:`critical_path`)
CALLBACKS = Path(__file__).resolve().parent / "callback"
TRACE = "trace.jsonl"

#: profile_tasks' summary line: "<role> : <task> ------ 1.23s" (sort order none: run order)
_TASK = re.compile(r"^(?P<name>.+?) -+ (?P<sec>\d+\.\d+)s\s*$")


def scenario() -> dict:
    return {
        "name": "steps",
        "description": "bench/steps.py: where the time around a repetition goes",
        "drives": list(DRIVES),
        "filesystems": [{"fs": "ext4"}],
        "placement": list(PLACEMENTS),
        "workload": {"scale": [10], "clients_per_host": 4, "threads": 2, "duration": DURATION},
        "hosts": [HOSTS],
        "repetitions": REPETITIONS,
    }


def inner(scenario_path: str, timings: str) -> int:
    """`drivelab run` in this process, each playbook and controller step timed."""
    sys.path.insert(0, str(REPO))
    from collector.cli import main as cli  # noqa: PLC0415
    from collector.run import conductor as scenariorun  # noqa: PLC0415
    from collector.run import stages as runner  # noqa: PLC0415
    from collector.run import telemetrystage  # noqa: PLC0415

    out = open(timings, "a", encoding="utf-8")  # noqa: SIM115  (the process's lifetime)
    # for the playbooks only: the preflight's ad-hoc ping reads Ansible's JSON output
    profiled = {
        "ANSIBLE_CALLBACKS_ENABLED": (
            "drivelab_failures,drivelab_module_cache,ansible.posix.profile_tasks,drivelab_trace"
        ),
        "ANSIBLE_CALLBACK_PLUGINS": f"{REPO / 'collector/ansible_plugins/callback'}:{CALLBACKS}",
        "DRIVELAB_TRACE": str(Path(timings).with_name(TRACE)),
        "PROFILE_TASKS_SORT_ORDER": "none",
        "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all",
    }

    def profiled_playbook(*args, **kwargs):
        with environ(profiled):
            return run_playbook(*args, **kwargs)

    def timed(kind, fn, name_of):
        def wrapper(*args, **kwargs):
            started = time.time()
            try:
                return fn(*args, **kwargs)
            finally:
                rec = {"kind": kind, "what": name_of(args, kwargs), "start": started,
                       "end": time.time()}  # fmt: skip
                out.write(json.dumps(rec) + "\n")
                out.flush()

        return wrapper

    run_playbook = runner.run_playbook
    runner.run_playbook = timed("playbook", profiled_playbook, lambda a, k: k.get("what") or a[0])
    for name in ("gather_run", "record"):
        fn = getattr(scenariorun, name)
        setattr(scenariorun, name, timed("controller", fn, lambda a, k, n=name: n))
    run_tel = telemetrystage.Telemetry.after_run
    telemetrystage.Telemetry.after_run = timed("controller", run_tel, lambda a, k: "telemetry")
    ping = scenariorun.preflight
    scenariorun.preflight = timed("controller", ping, lambda a, k: "preflight (ping)")
    return cli.main(["run", scenario_path])


def tasks_of(log: Path) -> list[tuple[str, float]]:
    """(task, seconds) in run order from a playbook log's profile_tasks summary."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    try:
        start = max(i for i, ln in enumerate(lines) if ln.startswith("=" * 20))
    except ValueError:
        return []
    found = (_TASK.match(ln) for ln in lines[start + 1 :])
    return [(m["name"].strip(), float(m["sec"])) for m in found if m]


_BANNER = re.compile(r"\(\d+:\d\d:\d\d\.\d+\)\s+(\d+):(\d\d):(\d\d\.\d+)")


def plays_of(log: Path) -> list[tuple[str, float]]:
    """(play, seconds) in run order: from the elapsed time profile_tasks prints at the
    start of each task, the first after each PLAY line, to the last one. Under
    ``strategy: free`` a task's own figure is the time between two task starts of any
    hosts, so only the plays' figures add up."""
    marks: list[tuple[str | None, float]] = []
    pending: str | None = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("PLAY [") and not line.startswith("PLAY RECAP"):
            pending = line[6 : line.rindex("]")]
        elif m := _BANNER.search(line):
            t = int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3])
            marks.append((pending, t))
            pending = None
    starts = [(name, t) for name, t in marks if name is not None]
    end = marks[-1][1] if marks else 0.0
    return [(name, (starts[i + 1][1] if i + 1 < len(starts) else end) - t)
            for i, (name, t) in enumerate(starts)]  # fmt: skip


def analyse(results: Path, timings: Path) -> dict:
    recs = [json.loads(ln) for ln in timings.read_text(encoding="utf-8").splitlines() if ln]
    # one log per playbook run, named <start>-<stage>.log: a stage's logs in the order of
    # its records' starts (a stage's runs never overlap; two stages' do, the telemetry beside
    # the drives, and logs of playbooks this script does not time, such as the check, are
    # in the folder too: matched in one list, they shifted every record onto another's log)
    logs: dict[str, list[Path]] = defaultdict(list)
    for log in sorted((results / "logs").glob("*.log")):
        logs[log.stem.split("-", 2)[-1]].append(log)
    plays = sorted((r for r in recs if r["kind"] == "playbook"), key=lambda r: r["start"])
    matched: list[tuple[dict, Path]] = []
    for what in dict.fromkeys(r["what"] for r in plays):
        mine = [r for r in plays if r["what"] == what]
        matched += zip(mine, logs.get(what, []), strict=False)
    by_stage: dict[str, list[dict]] = defaultdict(list)
    for rec, log in matched:
        tasks = tasks_of(log)
        by_stage[rec["what"]].append(
            {
                "wall": rec["end"] - rec["start"],
                "tasks": tasks,
                "plays": plays_of(log),
                "log": log.name,
            }
        )
    controller: dict[str, list[float]] = defaultdict(list)
    for r in recs:
        if r["kind"] == "controller":
            controller[r["what"]].append(r["end"] - r["start"])
    reps = []
    for run_json in sorted((results / "runs").rglob("run.json")):
        doc = json.loads(run_json.read_text(encoding="utf-8"))
        if doc.get("ended_at") is None:
            continue  # not ended (a run still going, or killed)
        span = pgbench_span(run_json.parent)
        stage = doc["ended_at"] - doc["started_at"]
        inside = span[1] - span[0] if span else None
        reps.append({"run": str(run_json.parent.relative_to(results)), "stage": stage,
                     "pgbench": inside, "outside": stage - inside if inside else None})  # fmt: skip
    return {"stages": by_stage, "controller": controller, "reps": reps,
            "critical": critical_path(results, timings)}  # fmt: skip


#: the segments of one repetition's cycle, in order (:func:`critical_path`)
SEGMENTS = (
    ("start", "the runner hands the stage over, to ansible-playbook's first play (start-up)"),
    ("before_db_prelude", "play before the run, DB host: to its cold start's module run"),
    ("cold_start_module",
     "play before the run, DB host: the module run (cold start, environment, counters)"),
    ("before_db_after", "play before the run, DB host: after that module run, to the play's end"),
    ("sync_prelude", "synchronized play: to the start action"),
    ("action_beyond_pgbench",
     "synchronized play: the start action beyond pgbench (the instant's lead, outputs, DB read)"),
    ("pgbench", "pgbench itself (first launch to last end, the clients' command.json)"),
    ("sync_after", "synchronized play: after the start action, to the play's end"),
    ("after_play", "play after the run, and the plays after it, to the last play's end"),
    ("exit", "the last play's end to the runner's return (ansible-playbook's exit)"),
    ("between",
     "the runner's return to the next repetition's stage (gather, store, the hand-over)"),
)  # fmt: skip
#: the task names the segments start and end at (roles/pgbench_run, playbooks/pgbench.yml)
_COLD = "pgbench_run : The cold start where asked"
_START = "pgbench_run : Hand the start instant"
_ARMED = "pgbench_run : Where each client's wrapper arms"


def critical_path(results: Path, timings: Path) -> list[dict]:
    """Per repetition (one ``pgbench`` playbook each), its cycle cut into :data:`SEGMENTS`
    from the trace callback's lines (each host's own task starts and ends), the runner's
    timings and the run folders' pgbench spans: the DB host's path through the play
    before the run is the longer one (``clients_armed_s``, the clients' path, beside it;
    ``cold_start_steps_s``, :func:`cold_start_path`, inside its module run)."""
    trace = results / TRACE
    if not trace.exists():
        return []
    recs = [json.loads(ln) for ln in timings.read_text(encoding="utf-8").splitlines() if ln]
    stages = sorted((r for r in recs if r["kind"] == "playbook"), key=lambda r: r["start"])
    events: dict[int, list[dict]] = defaultdict(list)
    for ln in trace.read_text(encoding="utf-8").splitlines():
        if ln.strip():
            ev = json.loads(ln)
            events[ev["pid"]].append(ev)
    procs = sorted(
        (evs for evs in events.values()
         if any(e["ev"] == "playbook" and e["name"] == "pgbench.yml" for e in evs)),
        key=lambda evs: evs[0]["t"],
    )  # fmt: skip
    runs = []
    for run_json in sorted((results / "runs").rglob("run.json")):
        doc = json.loads(run_json.read_text(encoding="utf-8"))
        runs.append((doc["started_at"], run_json.parent))
    folders = [folder for _, folder in sorted(runs, key=lambda r: r[0])]
    spans = [pgbench_span(folder) for folder in folders]
    pg_stages = [r for r in stages if r["what"] == "pgbench"]
    if not (len(procs) == len(pg_stages) == len(spans)):
        print(f"trace: {len(procs)} pgbench processes, {len(pg_stages)} stages, {len(spans)} "
              "runs: not matched, no critical path")  # fmt: skip
        return []
    out = []
    for evs, stage, span, folder in zip(procs, pg_stages, spans, folders, strict=True):
        stats = next((e["t"] for e in evs if e["ev"] == "stats"), None)
        plays = [(e["name"], e["t"]) for e in evs if e["ev"] == "play"]
        tasks = [e for e in evs if e["ev"] == "task" and e.get("start") is not None]
        cold = next((t for t in tasks if t["task"].startswith(_COLD)), None)
        start = next((t for t in tasks if t["task"].startswith(_START)), None)
        armed = [t["end"] for t in tasks if t["task"].startswith(_ARMED)]
        if cold is None or start is None or span is None or stats is None:
            continue  # a repetition that failed, or ran without a cold start
        play_at = dict(plays)
        before = next(t for n, t in plays if n.startswith("Before the run"))
        sync = play_at["Synchronized pgbench"]
        after = next(t for n, t in plays if n.startswith("After the run"))
        nxt = next((r for r in stages if r["start"] >= stage["end"]), None)
        seg = {
            "start": before - stage["start"],
            "before_db_prelude": cold["start"] - before,
            "cold_start_module": cold["end"] - cold["start"],
            "before_db_after": sync - cold["end"],
            "sync_prelude": start["start"] - sync,
            "action_beyond_pgbench": (start["end"] - start["start"]) - (span[1] - span[0]),
            "pgbench": span[1] - span[0],
            "sync_after": after - start["end"],
            "after_play": stats - after,
            "exit": stage["end"] - stats,
            "between": (nxt["start"] - stage["end"])
            if nxt is not None and nxt["what"] == "pgbench" else None,
        }  # fmt: skip
        seg["clients_armed_s"] = max(armed) - before if armed else None
        seg["cold_start_steps_s"] = cold_start_path(folder / "cold_start.json")
        out.append(seg)
    return out


def cold_start_path(path: Path) -> float | None:
    """The cold start's own seconds on its longest path, from its ``cold_start.json``:
    its stages run one after another, the steps of a stage (one per client database,
    named "<step> <database>") at once (module_utils drivelab_coldstart)."""
    if not path.exists():
        return None
    stages: dict[str, float] = defaultdict(float)
    for step, sec in json.loads(path.read_text(encoding="utf-8"))["seconds"].items():
        key = step.split(" drivelab_", 1)[0]
        stages[key] = max(stages[key], sec)
    return sum(stages.values())


def critical_table(paths: list[list[dict]], names: list[str]) -> list[str]:
    """Markdown: each segment's mean (min-max) over the repetitions, one column per run."""
    rows = [f"| segment of a repetition's cycle | {' | '.join(names)} |",
            "|---|" + "---:|" * len(names)]  # fmt: skip
    beside = (
        ("cold_start_steps_s",
         "(of the module run: the cold start's own steps on their longest path, cold_start.json)"),
        ("clients_armed_s",
         "(beside the DB host's path: the clients armed, from the play's start)"),
    )  # fmt: skip
    for key, label in (*SEGMENTS, *beside):
        cells = [_spread([r[key] for r in reps if r.get(key) is not None], 2) for reps in paths]
        rows.append(f"| {label} | {' | '.join(cells)} |")
    totals = []
    for reps in paths:
        full = [r for r in reps if r["between"] is not None]
        totals.append(
            f"**{_spread([sum(r[k] for k, _ in SEGMENTS) - r['pgbench'] for r in full], 2)}**"
        )
    rows.append(
        f"| **the cycle less pgbench (repetitions a repetition follows)** | {' | '.join(totals)} |"
    )
    return rows


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def print_tables(data: dict) -> None:
    print("\n| stage (playbook) | runs | mean wall s | of which tasks s | rest s |")
    print("|---|---:|---:|---:|---:|")
    for what, runs in data["stages"].items():
        wall = mean([r["wall"] for r in runs])
        tasks = mean([sum(s for _, s in r["tasks"]) for r in runs])
        print(f"| {what} | {len(runs)} | {wall:.2f} | {tasks:.2f} | {wall - tasks:.2f} |")
    for what in ("pgbench", "drives", "database"):
        runs = data["stages"].get(what, [])
        if not runs:
            continue
        plays: dict[str, list[float]] = defaultdict(list)
        for r in runs:
            for name, sec in r.get("plays", []):
                plays[name].append(sec)
        print(f"\n{what}: mean seconds per play ({len(runs)} runs)\n")
        print("| play | s |\n|---|---:|")
        for name, xs in plays.items():
            print(f"| {name} | {sum(xs) / len(runs):.2f} |")
        agg: dict[str, list[float]] = defaultdict(list)
        order: list[str] = []
        for r in runs:
            seen: dict[str, int] = defaultdict(int)
            for name, sec in r["tasks"]:
                seen[name] += 1
                key = name if seen[name] == 1 else f"{name} #{seen[name]}"
                if key not in agg:
                    order.append(key)
                agg[key].append(sec)
        print(f"\n{what}: mean seconds per run of the playbook ({len(runs)} runs)\n")
        print("| task | s |\n|---|---:|")
        for key in order:
            print(f"| {key} | {sum(agg[key]) / len(runs):.2f} |")
    print("\n| controller step | runs | mean s |\n|---|---:|---:|")
    for what, xs in data["controller"].items():
        print(f"| {what} | {len(xs)} | {mean(xs):.2f} |")
    reps = data["reps"]
    print("\n| repetition | pgbench stage s | inside pgbench s | outside s |\n|---|---:|---:|---:|")
    for r in reps:
        inside, outside = r["pgbench"] or 0, r["outside"] or 0
        print(f"| {r['run']} | {r['stage']:.1f} | {inside:.1f} | {outside:.1f} |")
    outs = [r["outside"] for r in reps if r["outside"] is not None]
    print(f"\nmean outside pgbench per repetition: {mean(outs):.2f} s over {len(outs)}")
    _print_critical(data)


def _print_critical(data: dict) -> None:
    if data.get("critical"):
        print("\n" + "\n".join(critical_table([data["critical"]], ["s"])))


def _kept(results: Path) -> dict:
    data = analyse(results, results / "timings.jsonl")
    kept = results / "steps.json"
    data["wall"] = (
        json.loads(kept.read_text(encoding="utf-8")).get("wall") if kept.exists() else None
    )
    return data


def _plays(data: dict, stage: str) -> dict[str, float]:
    runs = data["stages"].get(stage, [])
    out: dict[str, float] = defaultdict(float)
    for r in runs:
        for name, sec in r.get("plays", []):
            out[name] += sec / len(runs)
    return out


def _spread(xs: list[float], digits: int = 1) -> str:
    """mean (min-max), ``digits`` after the point; "-" for none."""
    return f"{mean(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})" if xs else "-"


def compare(before: Path, after: Path, names: list[str]) -> None:
    """Writes docs/benchmarks.md's section ``steps`` from two kept runs."""
    from _report import machine_note, update_section  # noqa: PLC0415

    runs = [(names[0], _kept(before)), (names[1], _kept(after))]
    s = scenario()
    body = [
        "## Where the time around a repetition goes (`bench/steps.py`)",
        "",
        machine_note(),
        "",
        f"One `drivelab run` (live view and telemetry on) on a fresh {HOSTS}-client lab per "
        f"commit: {' and '.join(DRIVES)}, ext4, placements {' and '.join(PLACEMENTS)}, scale "
        f"{s['workload']['scale'][0]}, `pgbench -c 4 -j 2 -T {DURATION}` per client host, "
        f"{REPETITIONS} repetitions: {len(DRIVES) * len(PLACEMENTS)} cells, "
        f"{len(DRIVES) * len(PLACEMENTS) * REPETITIONS} repetitions. Each `ansible-playbook` "
        "timed from the runner; plays from Ansible's `profile_tasks` callback (under "
        "`strategy: free` only a play's figure adds up, not its tasks'). Outside pgbench: "
        "run.json `started_at` to `ended_at` (the pgbench stage) less first launch to last "
        "end of the clients' pgbench. Figures: mean (min-max).",
        "",
        f"| | {names[0]} | {names[1]} |",
        "|---|---:|---:|",
    ]
    for label, key in (("whole `drivelab run`", "wall"),):
        body.append(f"| {label} | {runs[0][1][key] or 0:.1f} s | {runs[1][1][key] or 0:.1f} s |")
    for stage in ("provision", "telemetry", "drives", "database", "pgbench"):
        cells = []
        for _, data in runs:
            walls = [r["wall"] for r in data["stages"].get(stage, [])]
            cells.append(f"{_spread(walls)} s x {len(walls)}")
        body.append(f"| `{stage}` playbook | {cells[0]} | {cells[1]} |")
    outs = [[r["outside"] for r in d["reps"] if r["outside"] is not None] for _, d in runs]
    body.append(
        f"| **per repetition, outside pgbench** | **{_spread(outs[0])} s** "
        f"| **{_spread(outs[1])} s** |"
    )
    if all(data.get("critical") for _, data in runs):
        body += [
            "",
            "One repetition's cycle, cut where each host's own task starts and ends say "
            "(bench/callback/drivelab_trace.py; the DB host's path through the play before "
            "the run is the longer one): seconds, mean (min-max) over the repetitions.",
            "",
        ]
        body += critical_table([data["critical"] for _, data in runs], names)
    for stage in ("pgbench", "database"):
        for name, data in runs:
            body += ["", f"`{stage}` playbook, {name}: seconds per play (mean)", ""]
            body += ["| play | s |", "|---|---:|"]
            body += [f"| {play} | {sec:.2f} |" for play, sec in _plays(data, stage).items()]
    text = "\n".join(body)
    print(text)
    update_section("steps", text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="")
    ap.add_argument("--inner", nargs=2, metavar=("SCENARIO", "TIMINGS"))
    ap.add_argument("--analyse", metavar="RESULTS", help="only print the tables of a kept run")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--names", nargs=2, default=["before", "after"])
    args = ap.parse_args()
    if args.compare:
        compare(Path(args.compare[0]), Path(args.compare[1]), args.names)
        return
    if args.inner:
        sys.exit(inner(*args.inner))
    if args.analyse:
        results = Path(args.analyse)
        print_tables(analyse(results, results / "timings.jsonl"))
        return
    results = Path(tempfile.mkdtemp(prefix=f"drivelab-bench-steps-{args.label}-"))
    path = write_scenario(results, scenario())
    timings = results / "timings.jsonl"
    env = dict(
        os.environ,
        COLUMNS="200",
        DRIVELAB_RESULTS=str(results),
    )
    print(f"results in {results}")
    drivelab("lab", "down")
    started = time.time()
    try:
        drivelab("lab", "up", "--clients", str(HOSTS))
        started = time.time()
        with open(results / "console.log", "w", encoding="utf-8") as log:
            rc = subprocess.run(
                [sys.executable, __file__, "--inner", str(path), str(timings)],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, check=False,
            ).returncode  # fmt: skip
    finally:
        wall = time.time() - started
        drivelab("lab", "down", check=False)
    print(f"drivelab run: exit {rc}, {wall:.1f} s")
    data = analyse(results, timings)
    data["wall"] = wall
    (results / "steps.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    print_tables(data)
    if rc != 0:
        sys.exit(f"drivelab run failed (exit {rc}); see {results}/console.log")


if __name__ == "__main__":
    main()
