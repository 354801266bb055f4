"""The server's checkpoint, WAL and I/O activity over a run: each PostgreSQL version's
statistics views (13 to 17, tests/data/pgstats/: 13, 15 and 17 captured, 14 and 16
hand-made, see its README), the log's checkpoint lines, the host module that picks
those lines from the end of the log, and the run facts gather stores."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import shutil
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collector.errors import DrivelabError
from collector.gather import folder as gather
from collector.gather import serverstats
from collector.parse import ParseError, pglog, pgstats
from tests.unit.test_gather import make_run, two

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests/data/pgstats"


def server(version: int, when: str) -> dict:
    return json.loads((DATA / str(version) / f"pg_server-{when}.json").read_text())["server"]


def run_deltas(version: int) -> pgstats.ServerDeltas:
    b = pgstats.read_snapshot(server(version, "before"), "before.json")
    a = pgstats.read_snapshot(server(version, "after"), "after.json")
    return pgstats.deltas(b, a)


def host_module():
    """roles/pgbench_run/module_utils/drivelab_checkpointlog.py, as the host has it (a
    fresh copy each time: a test sets its BLOCK)."""
    path = ROOT / "roles/pgbench_run/module_utils/drivelab_checkpointlog.py"
    spec = importlib.util.spec_from_file_location("drivelab_checkpointlog", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------- the views


#: per version: figures of the captured run (pgbench -i -s 5, then 8 s of pgbench with
#: max_wal_size 32MB, then CHECKPOINT), checked against the raw view columns by hand
EXPECTED = {
    13: {
        "checkpoints": {"timed": 0, "requested": 7, "buffers_checkpoint": 8168,
                        "buffers_backend": 1065, "write_s": 4.897, "sync_s": 0.126},
        "wal": {"bytes": 98898056, "records": None, "fpi": None, "syncs": None,
                "source": "WAL position (pg_current_wal_lsn)"},
        "io": 0,
    },
    14: {  # hand-made: 15's capture, as 14's views have exactly 15's columns
        "checkpoints": {"requested": 6, "buffers_checkpoint": 6007, "buffers_backend": 1270},
        "wal": {"bytes": 84337655, "records": 52354, "fpi": 10288, "syncs": 6006,
                "sync_s": 5.706131, "lsn_bytes": 84701680, "source": "pg_stat_wal"},
        "io": 0,
    },
    15: {
        "checkpoints": {"timed": 0, "requested": 6, "buffers_checkpoint": 6007,
                        "buffers_clean": 3012, "buffers_backend": 1270, "backend_fsyncs": 0,
                        "write_s": 8.937, "sync_s": 0.33, "source": "pg_stat_bgwriter"},
        "wal": {"bytes": 84337655, "records": 52354, "fpi": 10288, "writes": 6163,
                "syncs": 6006, "write_s": 0.066299, "sync_s": 5.706131, "buffers_full": 0},
        "io": 0,
    },
    16: {  # hand-made from 17's capture: pg_stat_bgwriter with 16's names, pg_stat_io
        "checkpoints": {"requested": 10, "buffers_checkpoint": 9483, "buffers_backend": 5596,
                        "source": "pg_stat_bgwriter"},
        "wal": {"bytes": 157604126, "fpi": 19149, "syncs": 13991},
        "io": 3,
    },
    17: {
        "checkpoints": {"timed": 0, "requested": 10, "buffers_checkpoint": 9483,
                        "buffers_clean": 3697, "buffers_backend": 5596, "backend_fsyncs": 0,
                        "write_s": 8.41, "sync_s": 0.148,
                        "source": "pg_stat_checkpointer, pg_stat_bgwriter, pg_stat_io"},
        "wal": {"bytes": 157604126, "records": 102394, "fpi": 19149, "writes": 14283,
                "syncs": 13991, "sync_s": 4.804557, "lsn_bytes": 158309184},
        "io": 3,
    },
}  # fmt: skip


@pytest.mark.parametrize("version", sorted(EXPECTED), ids=lambda v: f"PostgreSQL {v}")
def test_each_versions_views_give_the_same_figures(version):
    d = run_deltas(version)
    want = EXPECTED[version]
    assert d.version // 10000 == version
    assert {k: d.checkpoints[k] for k in want["checkpoints"]} == want["checkpoints"]
    assert {k: d.wal[k] for k in want["wal"]} == want["wal"]
    assert len(d.io) == want["io"]
    assert d.reset == [] and 10 < d.seconds < 12


def test_17_takes_backend_writes_from_pg_stat_io_not_from_a_removed_column():
    after = server(17, "after")
    assert "buffers_backend" not in after["pg_stat_bgwriter"]
    client = next(
        r for r in after["pg_stat_io"]
        if (r["backend_type"], r["object"], r["context"]) == ("client backend", "relation", "normal")
    )  # fmt: skip
    snap = pgstats.read_snapshot(after, "after.json")
    assert snap.backend_source == "pg_stat_io"
    assert snap.counters["buffers_backend"] >= client["writes"]
    assert snap.counters["checkpoints_requested"] == after["pg_stat_checkpointer"]["num_requested"]


def test_pg_stat_io_rows_keep_only_what_changed_in_seconds():
    rows = {(r["backend_type"], r["context"]): r for r in run_deltas(17).io}
    assert set(rows) == {
        ("background writer", "normal"), ("checkpointer", "normal"), ("client backend", "normal")
    }  # fmt: skip
    ckpt = rows[("checkpointer", "normal")]
    assert ckpt["writes"] == 9483 and ckpt["fsyncs"] == 111
    assert ckpt["fsync_s"] == pytest.approx(0.139268)  # fsync_time in ms, here in seconds
    assert "reads" not in ckpt and "op_bytes" not in ckpt  # zero deltas and non-counters go


def test_a_view_the_version_has_missing_is_one_line_naming_the_key():
    s = server(15, "after")
    del s["pg_stat_wal"]
    with pytest.raises(ParseError, match=r"^f\.json: 'server\.pg_stat_wal' is missing, and"
                       r" PostgreSQL 150018 has that view$"):  # fmt: skip
        pgstats.read_snapshot(s, "f.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["pg_stat_bgwriter"].update(buffers_clean="12"),
         r"'server\.pg_stat_bgwriter\.buffers_clean' must be a number, not '12'"),
        (lambda s: s.update(server_version_num=90600),
         r"'server\.server_version_num' must be 130000 or later, not 90600"),
        (lambda s: s.update(pg_stat_io={}), r"'server\.pg_stat_io' must be a list of rows"),
    ],
    ids=["a figure not a number", "a version before 13", "pg_stat_io not rows"],
)  # fmt: skip
def test_malformed_snapshots(change, message):
    s = server(17, "after")
    change(s)
    with pytest.raises(ParseError, match=message):
        pgstats.read_snapshot(s, "f.json")


def test_a_reset_between_the_snapshots_voids_that_views_deltas():
    before = server(15, "before")
    after = server(15, "after")
    after["pg_stat_wal"]["stats_reset"] = "2026-11-24T08:21:06+00:00"
    d = pgstats.deltas(pgstats.read_snapshot(before, "b"), pgstats.read_snapshot(after, "a"))
    assert d.reset == ["pg_stat_wal"]
    assert d.wal["records"] is None and d.wal["bytes"] is None
    assert d.wal["lsn_bytes"] == 84701680  # the WAL position is no counter: still known
    assert d.checkpoints["requested"] == 6


# --------------------------------------------------------------------------- the log


@pytest.mark.parametrize("version", [13, 15, 17])
def test_checkpoint_lines_of_each_version(version):
    text = (DATA / str(version) / "pg_checkpoints.log").read_text()
    log = pglog.parse_checkpoint_log(text, "pg_checkpoints.log")
    starts = text.count("checkpoint starting:")
    assert len(log.events) == starts and log.too_frequent == text.count("too frequently")
    last = log.events[-1]  # the CHECKPOINT command at the end of the capture
    assert last.reason == "immediate force wait" and not last.start_from_total
    assert last.end >= last.start and last.total_s is not None and last.buffers > 0
    assert all(e.reason == "wal" for e in log.events[:-1])
    # 16 added the lsn fields to the complete line
    assert (last.lsn is not None) == (version >= 16)


def test_one_complete_line_read_by_its_words():
    line = (
        "2026-11-24 08:27:24.004 UTC [20679] LOG:  checkpoint complete: wrote 274 buffers"
        " (13.4%); 0 WAL file(s) added, 3 removed, 0 recycled; write=1.575 s, sync=0.027 s,"
        " total=1.625 s; sync files=37, longest=0.012 s, average=0.001 s; distance=49139 kB,"
        " estimate=49139 kB; lsn=0/6021200, redo lsn=0/507EFF8"
    )
    (e,) = pglog.parse_checkpoint_log(line).events
    end = datetime(2026, 11, 24, 8, 27, 24, 4000, tzinfo=UTC).timestamp()
    assert e.end == pytest.approx(end)
    # its start line was not kept (it began before the run): placed from total=
    assert e.start_from_total and e.start == pytest.approx(end - 1.625, abs=1e-3)
    assert (e.buffers, e.buffers_pct, e.wal_removed, e.sync_files) == (274, 13.4, 3, 37)
    assert (e.write_s, e.sync_s, e.total_s) == (1.575, 0.027, 1.625)
    assert e.distance_bytes == 49139 * 1024 and (e.lsn, e.redo_lsn) == ("0/6021200", "0/507EFF8")


def test_a_checkpoint_still_running_has_no_end_and_local_times_are_placed():
    text = "2026-01-15 09:00:00.500 CET [7] LOG:  checkpoint starting: time\n"
    (e,) = pglog.parse_checkpoint_log(text, timezone="Europe/Berlin").events
    assert e.end is None and e.reason == "time"
    assert e.start == datetime(2026, 1, 15, 8, 0, 0, 500000, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("LOG:  checkpoint starting: wal\n", r"^f\.log:1: a checkpoint line without a timestamp"),
        ("2026-11-24 08:27:24.004 UTC [1] LOG:  checkpoint complete: wrote lots\n",
         r"^f\.log:1: a checkpoint complete line without its figures"),
    ],
    ids=["no timestamp prefix", "no figures"],
)  # fmt: skip
def test_malformed_checkpoint_lines(text, message):
    with pytest.raises(ParseError, match=message):
        pglog.parse_checkpoint_log(text, "f.log")


# --------------------------------------------------------------------------- the host module


def _span(version: int) -> tuple[float, float]:
    return server(version, "before")["at"], server(version, "after")["at"]


@pytest.mark.parametrize("version", [13, 15, 17])
def test_the_host_picks_the_runs_lines_from_the_whole_log(version):
    """From the capture's whole server log (its start, pgbench -i, the run, the stop),
    only the checkpoint lines between the snapshots, and the start of one running at
    the first; whatever the size of the blocks it reads backwards in."""
    mod = host_module()
    whole = (DATA / str(version) / "postgresql.log").read_bytes()
    since, until = _span(version)
    lines, read, reached = mod.select(io.BytesIO(whole), since, until, mod.zone_of("UTC"))
    assert reached and read <= len(whole)
    kept = (DATA / str(version) / "pg_checkpoints.log").read_text().splitlines()
    assert lines == kept
    assert lines[0].endswith("checkpoint starting: wal")
    assert mod.stamp(lines[0], mod.zone_of("UTC")) < since  # running when the run began
    assert all(mod.stamp(x, mod.zone_of("UTC")) <= until for x in lines)
    assert not any("HINT" in x or "shutting down" in x for x in lines)
    mod.BLOCK = 97  # lines split across blocks: the same lines
    assert mod.select(io.BytesIO(whole), since, until, mod.zone_of("UTC"))[0] == kept


def test_the_host_reads_only_the_end_of_a_big_log():
    mod = host_module()
    whole = (DATA / "15" / "postgresql.log").read_bytes()
    since, until = _span(15)
    old = b"2026-11-24 07:00:00.000 UTC [1] LOG:  some line of long ago\n" * 200_000
    _, read, reached = mod.select(io.BytesIO(old + whole), since, until, mod.zone_of("UTC"))
    assert reached and read <= len(whole) + mod.BLOCK  # 12 MB of older lines left unread
    _, read, reached = mod.select(io.BytesIO(whole), since, until, mod.zone_of("UTC"), 1000)
    assert not reached and read <= 1000  # the caller says the span's start was not reached


@pytest.mark.parametrize(
    ("change", "lines", "problem"),
    [
        ({}, 19, None),
        ({"logfile": "/nonexistent/drivelab.log"}, 0,
         "cannot read /nonexistent/drivelab.log: No such file or directory"),
        ({"line_prefix": "[%p] "}, 0,
         "log_line_prefix '[%p] ' does not start with a timestamp (%m)"),
        ({"since": None}, 0, "no before snapshot: the span's start is unknown"),
        ({"timezone": "Mars/Olympus"}, 0, "log_timezone 'Mars/Olympus': "),
    ],
    ids=["read", "no such log", "no timestamp in the prefix", "no before snapshot", "bad zone"],
)  # fmt: skip
def test_a_log_the_module_cannot_read_is_a_problem_never_a_failure(change, lines, problem):
    """What drivelab_pg_snapshot returns as ``log`` after the run (its module_utils)."""
    since, until = _span(15)
    args = {"since": since, "until": until, "major": "15", "cluster": "drivelab",
            "logfile": str(DATA / "15/postgresql.log"), "timezone": "UTC",
            "line_prefix": "%m [%p] %q%u@%d "}  # fmt: skip
    out = host_module().checkpoint_lines(**{**args, **change})
    assert len(out["lines"]) == lines
    assert (out["problem"] or "").startswith(problem or "") and bool(out["problem"]) == bool(
        problem
    )


@pytest.mark.parametrize(
    ("logfile", "data_directory", "expected"),
    [
        (None, "/x", "/var/log/postgresql/postgresql-17-drivelab.log"),
        ("log/postgresql-Mon.log", "/srv/pg", "/srv/pg/log/postgresql-Mon.log"),
        ("/var/log/pg/current.log", "/srv/pg", "/var/log/pg/current.log"),
    ],
    ids=["pg_ctlcluster's file", "logging collector, relative", "logging collector, absolute"],
)
def test_where_the_server_logs(logfile, data_directory, expected):
    assert host_module().log_path("17", "drivelab", logfile, data_directory) == expected


def test_the_role_writes_a_snapshots_files_in_one_command(tmp_path):
    """roles/pgbench_run's writer on the controller (action drivelab_run_files): JSON
    objects as to_nice_json wrote them (the copy tasks it replaced), lines as text, each
    file whole (no .tmp left), nothing outside the folder."""
    path = ROOT / "roles/drivelab/action_plugins/drivelab_run_files.py"
    spec = importlib.util.spec_from_file_location("drivelab_run_files", path)
    action = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(action)
    files = {
        "pg_stat-after.json": {"when": "after", "databases": []},
        "pg_server-after.json": {"when": "after", "server": server(15, "after")},
        "pg_checkpoints.log": ["line one", "line two"],
        "../escape.json": {"x": 1},
    }
    written = action.write_files(str(tmp_path), files)
    assert written[-1] == str(tmp_path / "escape.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "escape.json", "pg_checkpoints.log", "pg_server-after.json", "pg_stat-after.json"
    ]  # fmt: skip
    assert (tmp_path / "pg_checkpoints.log").read_text() == "line one\nline two\n"
    text = (tmp_path / "pg_stat-after.json").read_text()
    assert text == '{\n    "databases": [],\n    "when": "after"\n}\n'
    doc = json.loads((tmp_path / "pg_server-after.json").read_text())
    assert doc["server"] == server(15, "after")


# --------------------------------------------------------------------------- the run facts


def _shift_log(text: str, seconds: float) -> str:
    def move(m: re.Match) -> str:
        t = datetime.fromisoformat(m[1]).replace(tzinfo=UTC).timestamp() + seconds
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"

    return re.sub(r"^(\S+ \S+) UTC", move, text, flags=re.M)


def _server_files(run_dir: Path, version: int, shift: float, log: dict | None = None) -> None:
    for when in ("before", "after"):
        doc = json.loads((DATA / str(version) / f"pg_server-{when}.json").read_text())
        doc["server"]["at"] += shift
        if log is not None and when == "after":
            doc["log"] = log
        (run_dir / f"pg_server-{when}.json").write_text(json.dumps(doc))
    text = (DATA / str(version) / "pg_checkpoints.log").read_text()
    (run_dir / "pg_checkpoints.log").write_text(_shift_log(text, shift))


def _gathered(tmp_path, version=17, at=1.0, log=None):
    """A run folder with the captured server files of ``version``, moved in time so
    that its first checkpoint in the span starts ``at`` seconds into the window where
    both clients ran (None: leaves them where they are, far from the window)."""
    run_dir = make_run(tmp_path, two())
    window = gather.gather_run(run_dir).stats().window
    first = pglog.parse_checkpoint_log((DATA / str(version) / "pg_checkpoints.log").read_text())
    shift = 0.0 if at is None else window[0] + at - first.events[1].start
    _server_files(
        run_dir, version, shift, {"path": "/l", "problem": None, "lines": 9} if log is None else log
    )
    return run_dir, gather.gather_run(run_dir), window


def test_a_checkpoint_in_the_window_is_flagged_and_its_deltas_stored(tmp_path):
    _, g, window = _gathered(tmp_path, 17, at=1.0)
    f = g.run.facts
    assert f["checkpoint_in_window"] is True
    inside = [e for e in f["checkpoints"] if e.get("in_window")]
    assert inside and all(window[0] - 3 <= e["start"] <= window[1] for e in inside)
    assert f["checkpoints"][0]["start"] < window[0] + 1  # began before: not "in" it
    assert f["pg_checkpoints"]["requested"] == 10 and f["pg_wal"]["bytes"] == 157604126
    assert {r["backend_type"] for r in f["pg_io"]} == {
        "background writer", "checkpointer", "client backend"
    }  # fmt: skip
    assert f["pg_checkpoint_log"] == {
        "path": "/l", "problem": None, "lines": 9, "too_frequent": 9, "log_checkpoints": "on"
    }  # fmt: skip
    assert f["pg_stats_span"]["server_version_num"] == 170012
    samples = {(s.metric, tuple(s.labels.items())): s.value for s in g.samples}
    assert samples[("drivelab_pg_checkpoints", (("kind", "requested"),))] == 10
    assert samples[("drivelab_pg_wal_bytes", ())] == 157604126
    assert samples[("drivelab_pg_checkpoint_in_window", ())] == 1
    assert samples[("drivelab_pg_io_fsync_seconds",
                    (("backend_type", "checkpointer"), ("context", "normal"),
                     ("object", "relation")))] == pytest.approx(0.139268)  # fmt: skip
    kinds = {r.kind for r in g.run.raw_outputs}
    assert {"pg_server_json", "pg_checkpoints_log"} <= kinds


def test_checkpoints_outside_the_window_are_not_flagged(tmp_path):
    _, g, _ = _gathered(tmp_path, 15, at=None)  # the capture's own times: long before
    assert g.run.facts["checkpoint_in_window"] is False
    assert not any(e.get("in_window") for e in g.run.facts["checkpoints"])


def test_an_unread_log_leaves_the_flag_unknown_but_keeps_the_counters(tmp_path):
    log = {"path": "/var/log/postgresql/postgresql-15-drivelab.log", "lines": 0,
           "problem": "cannot read /var/log/postgresql/postgresql-15-drivelab.log: Permission denied"}  # fmt: skip
    _, g, _ = _gathered(tmp_path, 15, at=1.0, log=log)
    f = g.run.facts
    assert f["checkpoint_in_window"] is None and f["checkpoints"] == []
    assert f["pg_checkpoint_log"]["problem"].endswith("Permission denied")
    assert f["pg_checkpoints"]["requested"] == 6


def test_13_has_no_pg_stat_wal_and_no_pg_stat_io(tmp_path):
    _, g, _ = _gathered(tmp_path, 13, at=1.0)
    f = g.run.facts
    assert f["pg_wal"]["bytes"] == f["pg_wal"]["lsn_bytes"] == 98898056
    assert f["pg_wal"]["records"] is None and f["pg_io"] == []
    assert f["checkpoint_in_window"] is True
    assert not [s for s in g.samples if s.metric == "drivelab_pg_wal_records"]


def test_in_window_words():
    e = pglog.CheckpointEvent(start=10.0, end=20.0, reason="time")
    assert serverstats.in_window(e, (12.0, 30.0)) == "ended"
    assert serverstats.in_window(e, (5.0, 15.0)) == "started"
    assert serverstats.in_window(e, (5.0, 25.0)) == "started and ended"
    assert serverstats.in_window(e, (12.0, 18.0)) == "ran through"
    assert serverstats.in_window(replace(e, end=None), (12.0, 18.0)) == "ran through"
    assert serverstats.in_window(e, (21.0, 30.0)) is None


def test_older_runs_give_nothing_and_a_broken_file_is_one_line(tmp_path):
    assert serverstats.read_server_counters(tmp_path) == ({}, [])
    for when in ("before", "after"):
        shutil.copy(DATA / "15" / f"pg_server-{when}.json", tmp_path / f"pg_server-{when}.json")
    (tmp_path / "pg_server-after.json").write_text('{"when": "after", "server": []}')
    with pytest.raises(DrivelabError) as err:
        serverstats.read_server_counters(tmp_path)
    assert (
        str(err.value)
        == f"{tmp_path}/pg_server-after.json: 'server' must be an object, not a list []"
    )
    (tmp_path / "pg_server-after.json").write_text("{not json")
    with pytest.raises(DrivelabError, match=r"pg_server-after\.json: not JSON \(line 1"):
        serverstats.read_server_counters(tmp_path)
