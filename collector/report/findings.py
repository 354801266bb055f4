"""What a report says, computed once per scenario view for every publisher: the notes
on runs not averaged in, the cache-defeat lines, the physics checks, the checkpoints in
a window, the start's synchronisation, the rate searches, the database warnings and the
pre-tests' figures. Words and numbers only, no format: the terminal (rich), the HTML page
and the exports lay them out (:func:`findings`)."""

from __future__ import annotations

import re
import weakref
from collections import defaultdict
from dataclasses import dataclass

from collector.records import RunStatus
from collector.report import ScenarioView, drivestates, fmt_cache
from collector.report.rows import checkpoint_rows, iostat_rows, percentile_rows, pretest_rows
from collector.stats import ratesearch
from collector.verdicts import caveats as caveat
from collector.verdicts import physics
from collector.verdicts.physics import WARNING


def shared_test(view: ScenarioView) -> str | None:
    """The test every row shares (then printed once above the table), else None."""
    tests = {cv.test for cv in view.cells}
    return tests.pop() if len(tests) == 1 else None


def test_words(test: str) -> list[str]:
    """A test's parts (``CellSpec.test``): its words, ``pg <set>`` and ``wc <state>``
    each one part."""
    words = test.split()
    out: list[str] = []
    for w in words:
        if out and out[-1] in ("pg", "wc", "ds", "trim"):
            out[-1] = f"{out[-1]} {w}"
        else:
            out.append(w)
    return out


def shared_words(view: ScenarioView) -> list[str]:
    """The parts of the test (``tpcb ext4 cluster s5 2cl c4 j2 T8 R100``) that every
    row's test has, in the first test's order: said once above the table."""
    tests = [test_words(cv.test) for cv in view.cells]
    if not tests:
        return []
    return [w for w in tests[0] if all(w in t for t in tests[1:])]


def test_rest(view: ScenarioView, test: str) -> str:
    """What a row's test adds to the shared words (``R100``); ``-`` for nothing."""
    shared = set(shared_words(view))
    return " ".join(w for w in test_words(test) if w not in shared) or "-"


#: what a test's words mean (CellSpec.test): the fixed ones, then the patterns
_WORDS = {
    "tpcb": "pgbench's TPC-B-like script",
    "select-only": "pgbench's select-only script (-S)",
    "simple-update": "pgbench's simple-update script (-N)",
    "custom": "the scenario's own script (-f)",
    "mix": "a weighted mix of pgbench's built-in scripts",
    "cluster": "the whole cluster on the drive",
    "tablespace": "the databases in a tablespace on the drive",
}
_PATTERNS = (
    (
        re.compile(r"cluster-wal-([a-z][a-z0-9_]*)"),
        "the cluster's data on the drive, its WAL on {} (a drive of its own)",
    ),
    (re.compile(r"s(\d+)"), "scale {} (each client host's own database)"),
    (re.compile(r"(\d+)cl"), "{} client hosts at once"),
    (re.compile(r"c(\d+)"), "{} connections per client host (-c)"),
    (re.compile(r"j(\d+)"), "{} pgbench threads per client host (-j)"),
    (re.compile(r"T(\d+)"), "{} s per run (-T)"),
    (re.compile(r"t(\d+)"), "{} transactions per connection (-t)"),
    (re.compile(r"R(\d+)"), "{} transactions/s per client host (-R)"),
    (re.compile(r"L(\d+)"), "transactions over {} ms counted late (-L)"),
    (re.compile(r"M(simple|extended|prepared)"), "the {} query protocol (-M)"),
    (re.compile(r"b([a-z-]+@[0-9]+(?:\+[a-z-]+@[0-9]+)*)"), "scripts and weights {} (-b)"),
    (re.compile(r"wc (on|off)"), "the drive's write cache {}"),
    (re.compile(r"pg (.+)"), "the PostgreSQL settings named {}"),
    (re.compile(r"ds (.+)"), "the drive brought to the state {} first (drive_state)"),
    (re.compile(r"trim (discard|fstrim)"), "TRIM by {} (the mount option, or before each run)"),
)


def test_legend(view: ScenarioView) -> str | None:
    """Each abbreviation of the view's tests said once, from the tests that ran (``s34:
    scale 34 (each client host's own database), 2cl: 2 client hosts at once, ...``)."""
    seen: list[str] = []
    for cv in view.cells:
        seen += [w for w in test_words(cv.test) if w not in seen]
    said = []
    for w in seen:
        meaning = _WORDS.get(w)
        for pattern, words in _PATTERNS:
            m = pattern.fullmatch(w) if meaning is None else None
            if m:
                meaning = words.format(m.group(1))
        if meaning is not None:
            said.append(f"{w}: {meaning}")
    return ", ".join(said) or None


def label(view: ScenarioView, cv) -> str:
    """How a line names a cell: its drive, and its test unless every row shares it."""
    return cv.drive if shared_test(view) is not None else f"{cv.drive} {cv.test}"


def notes(view: ScenarioView) -> list[str]:
    """One line per run that was not averaged in, with its reason."""
    out = []
    for cv in view.cells:
        for r in cv.stats.runs:
            if r.status != RunStatus.COMPLETE:
                out.append(
                    f"{label(view, cv)} {r.name}: {r.status.value}"
                    f" ({r.reason or 'no reason recorded'}), not averaged in"
                )
            elif not r.windowed:
                out.append(
                    f"{label(view, cv)} {r.name}: no per-second data, tps is pgbench's reported sum"
                )
    return out


def cache_lines(view: ScenarioView) -> list[str]:
    """One line per cell whose latest run has cache figures (pg_stat_database and the
    drive's reads): the cache-defeat proof, or its absence."""
    return [
        f"{label(view, cv)}: {fmt_cache(cv.database['cache'])}"
        for cv in view.cells
        if cv.database.get("cache")
    ]


@dataclass(frozen=True)
class PhysicsLine:
    """One physics flag as a report says it: its kind (``flush``, ``fio``, ``plp``),
    whom it is about (a drive, a cell, or ``all drives``), the words, its level."""

    kind: str
    who: str
    message: str
    level: str

    @property
    def text(self) -> str:
        return f"{self.kind} {self.who}: {self.message}"


def physics_lines(view: ScenarioView) -> list[PhysicsLine]:
    """The physics checks (:mod:`collector.verdicts.physics`) stored with the scenario's
    pre-tests and runs, in words: per drive what the drive is (rotation unknown,
    power-loss protection) and what its pre-tests showed, per cell what its runs showed
    (a flag in several runs once, with the most extreme figures and how many runs);
    a line every drive or cell shares is said once, for ``all drives``."""
    by_run = {r.run_id: cv for cv in view.cells for r in cv.stats.runs if r.run_id is not None}
    drive_flags: dict[str, dict[tuple[str, str], physics.Flag]] = defaultdict(dict)
    cell_flags: dict[int, dict[str, list[physics.Flag]]] = defaultdict(lambda: defaultdict(list))
    checked: dict[int, set[str]] = defaultdict(set)
    for f in view.facts:
        if f.key not in ("physics", "physics_iops") or not isinstance(f.value, list):
            continue
        cv = by_run.get(f.run_id) if f.scope == "run" else None
        if f.scope == "run" and cv is None:
            continue
        if cv is not None:
            checked[id(cv)].add(f.key)
        for flag in (physics.Flag.from_fact(v) for v in f.value if isinstance(v, dict)):
            if cv is None or flag.code in physics.DRIVE_CODES:
                drive_flags[flag.drive].setdefault((flag.code, flag.message), flag)
            else:
                cell_flags[id(cv)][flag.code].append(flag)
    per_drive: list[PhysicsLine] = []
    order = {d: i for i, d in enumerate(view.drives)}
    for drive in sorted(drive_flags, key=lambda d: (order.get(d, len(order)), d)):
        per_drive += [
            PhysicsLine(f.kind, drive, f.message, f.level) for f in drive_flags[drive].values()
        ]
    per_cell: list[PhysicsLine] = []
    for cv in view.cells:
        who = label(view, cv)
        for flags in cell_flags[id(cv)].values():
            worst = max(flags, key=lambda f: f.figures.get("ratio") or 0)
            runs = len(cv.stats.runs)
            many = (
                f" (in {len(flags)} of {runs} runs)" if runs > 1 and worst.level == WARNING else ""
            )
            per_cell.append(PhysicsLine(worst.kind, who, worst.message + many, worst.level))
        if "physics" in checked[id(cv)] and "physics_iops" not in checked[id(cv)]:
            per_cell.append(
                PhysicsLine("fio", who, "not checked: no telemetry of its runs", physics.NOTE)
            )
    cells = {label(view, cv) for cv in view.cells}
    return _once(per_drive, set(view.drives)) + _once(per_cell, cells)


def _once(lines: list[PhysicsLine], everyone: set[str]) -> list[PhysicsLine]:
    """Lines whose words every one of ``everyone`` (the drives, or the cells) shares,
    said once."""
    whos: dict[tuple[str, str], set[str]] = defaultdict(set)
    for line in lines:
        whos[(line.kind, line.message)].add(line.who)
    shared = {k for k, v in whos.items() if len(everyone) > 1 and v >= everyone}
    out = [line for line in lines if (line.kind, line.message) not in shared]
    seen: set[tuple[str, str]] = set()
    for line in lines:
        key = (line.kind, line.message)
        if key in shared and key not in seen:
            seen.add(key)
            out.append(PhysicsLine(line.kind, "all drives", line.message, line.level))
    return out


#: how a checkpoint met the window that flags its run (collector.gather.serverstats.in_window)
FLAGGED = ("started", "ended", "started and ended")


def run_facts(view: ScenarioView, key: str) -> dict[int, object]:
    """One run fact of every run of the view, by run id."""
    return {f.run_id: f.value for f in view.facts if f.scope == "run" and f.key == key}


def checkpoint_lines(view: ScenarioView) -> list[str]:
    """One line per cell with a run in whose window a checkpoint started or ended: which
    runs, of how many whose server log was read, and the checkpoints' reasons."""
    flags = run_facts(view, "checkpoint_in_window")
    events = run_facts(view, "checkpoints")
    out = []
    for cv in view.cells:
        known = [r for r in cv.stats.runs if flags.get(r.run_id) is not None]
        hit = [r for r in known if flags[r.run_id] is True]
        if not hit:
            continue
        reasons = sorted({
            str(e.get("reason") or "reason not logged")
            for r in hit for e in events.get(r.run_id) or [] if e.get("in_window") in FLAGGED
        })  # fmt: skip
        out.append(
            f"{label(view, cv)}: a checkpoint ({', '.join(reasons)}) started or ended while"
            f" all clients ran in {', '.join(r.name for r in hit)} ({len(hit)} of"
            f" {len(known)} runs): its writes competed with the clients' for the drive"
        )
    return out


def rate_searches(view: ScenarioView) -> list[dict]:
    """The scenario's rate search results (the fact ``rate_search``), the latest per
    searched cell, by drive (the scenario's order) and test."""
    latest: dict[str, dict] = {}
    for f in view.facts:
        if f.scope == ratesearch.FACT and f.key == ratesearch.FACT and isinstance(f.value, dict):
            latest[str(f.value.get("cell"))] = f.value
    order = {d: i for i, d in enumerate(view.drives)}

    def by(d: dict) -> tuple:
        return order.get(d.get("drive"), 99), str(d.get("drive")), str(d.get("test"))

    return sorted(latest.values(), key=by)


def search_lines(view: ScenarioView) -> list[str]:
    """One line per searched cell: ``hdd7200 tpcb ext4 cluster s5 2cl c4 j2 T8: sustained
    64/s total at p99 <= 50 ms (holds at 64, breaks at 70; 6 steps)``."""
    return [f"{d.get('drive')} {d.get('test')}: {d.get('text')}" for d in rate_searches(view)]


def warnings(view: ScenarioView) -> list[str]:
    """One line per cell whose runs carry a database warning (fits in RAM), then one per
    cell whose repetitions drift."""
    out = [f"{label(view, cv)}: {w}" for cv in view.cells for w in cv.warnings]
    return out + [f"{label(view, cv)}: {cv.drift}" for cv in view.cells if cv.drift]


#: a launch this long after the start instant means its client got the instant late
LATE_S = 0.05


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def start_lines(view: ScenarioView) -> list[str]:
    """How together the clients started, per test with more than one client, worst of
    its complete runs, in three steps: the wrappers' launches (what drivelab controls),
    the connections up (launch plus pgbench's initial connection time) and the first
    transactions. The last two are the DB host's: it authenticates every connection
    at once (SCRAM is CPU work), so a spread there is the server's, not drivelab's."""
    launch = run_facts(view, "launch_skew_s")
    connect = run_facts(view, "connect_spread_s")
    lead = run_facts(view, "start_lead_s")
    late = run_facts(view, "launch_late_s")
    offsets = run_facts(view, "clock_offsets")
    out = []
    for cv in view.cells:
        runs = [r for r in cv.stats.runs if r.status == RunStatus.COMPLETE and r.clients > 1]
        launches = [float(v) for r in runs if isinstance(v := launch.get(r.run_id), int | float)]
        if not launches:
            continue
        leads = [float(v) for r in runs if isinstance(v := lead.get(r.run_id), int | float)]
        lates = [float(v) for r in runs if isinstance(v := late.get(r.run_id), int | float)]
        mine = "drivelab's"
        if leads:
            mine += f"; instant chosen {_ms(max(leads))} ahead, all armed"
        if lates and max(lates) > LATE_S:
            mine += f"; a client launched {_ms(max(lates))} after it"
        words = [f"launches {_ms(max(launches))} apart ({mine})"]
        connects = [float(v) for r in runs if isinstance(v := connect.get(r.run_id), int | float)]
        firsts = [r.start_skew_s for r in runs if r.start_skew_s is not None]
        server = []
        if connects:
            server.append(f"connections up {_ms(max(connects))} apart")
        if firsts:
            server.append(f"first transactions {_ms(max(firsts))} apart")
        if server:
            words.append(
                ", ".join(server) + " (the DB host's: it authenticates every connection at once)"
            )
        clocks = _clock_words([offsets.get(r.run_id) for r in runs])
        if clocks:
            words.append(clocks)
        out.append(
            f"{label(view, cv)}: {runs[0].clients} clients, worst of {len(runs)} runs: "
            + "; ".join(words)
        )
    return out


#: a client clock this far from the controller's is named in the start line
CLOCK_SHOWN_S = 0.001


def _clock_words(per_run: list[object]) -> str:
    """The clients whose clocks were off the controller's by more than CLOCK_SHOWN_S in
    any run (the largest offset of each, with its bound), or ""; every instant of the
    start line is on the controller's clock, each client's corrected by its offset."""
    worst: dict[str, tuple[float, float]] = {}
    for offsets in per_run:
        if not isinstance(offsets, dict):
            continue
        for host, o in offsets.items():
            if not isinstance(o, dict) or not isinstance(o.get("offset_s"), int | float):
                continue
            off, bound = float(o["offset_s"]), float(o.get("bound_s") or 0.0)
            if abs(off) > CLOCK_SHOWN_S and abs(off) > abs(worst.get(host, (0.0, 0.0))[0]):
                worst[host] = (off, bound)
    if not worst:
        return ""
    named = ", ".join(
        f"{h} {off * 1e3:+,.1f} ms (±{bound * 1e3:,.1f})"
        for h, (off, bound) in sorted(worst.items())
    )
    return f"clocks off the controller's, corrected: {named}"


def start_summary(view: ScenarioView) -> str | None:
    """The start lines in one line: how many cells, the worst launch spread and the worst
    first-transaction spread over all of them (the per-cell lines: ``report -v``)."""
    launch = run_facts(view, "launch_skew_s")
    launches, firsts, cells = [], [], 0
    for cv in view.cells:
        runs = [r for r in cv.stats.runs if r.status == RunStatus.COMPLETE and r.clients > 1]
        mine = [float(v) for r in runs if isinstance(v := launch.get(r.run_id), int | float)]
        if mine:
            cells += 1
            launches += mine
            firsts += [r.start_skew_s for r in runs if r.start_skew_s is not None]
    if not cells:
        return None
    words = f"launches at most {_ms(max(launches))} apart"
    if firsts:
        words += f", first transactions at most {_ms(max(firsts))} apart"
    # a client clock off the controller's is said here too: every instant was corrected
    offsets = run_facts(view, "clock_offsets")
    clocks = _clock_words([offsets.get(r.run_id) for cv in view.cells for r in cv.stats.runs])
    return f"{cells} cells, worst run of each: {words}" + (f"; {clocks}" if clocks else "")


def verdict_lines(view: ScenarioView) -> list[str]:
    """The answer at a glance, one line per test: the fastest drive against the baseline
    (``nvme vs hdd7200: 17.8x``), or the one drive's tps, and what qualifies it (``but
    client-bound: nvme is faster than this lab can show``)."""
    by_test: dict[str, list] = defaultdict(list)
    for cv in view.cells:
        if cv.stats.tps is not None:
            by_test[cv.test].append(cv)
    out = []
    for test, cells in by_test.items():
        who = "" if shared_test(view) is not None else f"{test_rest(view, test)}: "
        base = next((cv for cv in cells if cv.is_baseline), None)
        others = [cv for cv in cells if cv is not base]
        if base is None or not others:
            best = max(cells, key=lambda cv: cv.stats.tps.mean)
            said = f"{who}{best.drive}: {best.stats.tps.mean:,.1f} tps"
            clauses = [c.kind.short for c in best.caveats]
        else:
            best = max(others, key=lambda cv: cv.stats.tps.mean)
            r = best.baseline_ratio
            ratio = "-" if r is None else (f"{r.ratio:.2f}x" if r.ratio < 10 else f"{r.ratio:.1f}x")
            said = f"{who}{best.drive} vs {base.drive}: {ratio}"
            clauses = [_contender_clause(c, best.drive) for c in best.caveats]
            clauses += [f"{base.drive} {c.kind.short}" for c in base.caveats]
        out.append(said + (f", but {'; '.join(clauses)}" if clauses else ""))
    return out


def _contender_clause(c: caveat.Caveat, drive: str) -> str:
    if c.code == caveat.CLIENT_BOUND:
        return f"client-bound: {drive} is faster than this lab can show"
    return c.kind.short


def legend_lines(view: ScenarioView) -> list[tuple[str, str]]:
    """The legend of the marks on the view's figures, each kind once."""
    return caveat.legend(c for cv in view.cells for c in cv.caveats)


@dataclass(frozen=True)
class Findings:
    """Everything :mod:`collector.report.findings` says of one scenario view."""

    verdicts: tuple[str, ...]
    #: (mark, meaning) of each kind of caveat marked on the view's figures
    legend: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    cache: tuple[str, ...]
    physics: tuple[PhysicsLine, ...]
    checkpoints: tuple[str, ...]
    starts: tuple[str, ...]
    #: the start lines in one (None: no cell with more than one client)
    start_summary: str | None
    searches: tuple[str, ...]
    warnings: tuple[str, ...]
    pretests: tuple[tuple[str, ...], ...]
    #: iostat's summary per drive over its runs' windows; latency percentiles per cell
    iostat: tuple[tuple[str, ...], ...] = ()
    percentiles: tuple[tuple[str, ...], ...] = ()
    #: per cell, checkpoints, buffers written by whom and WAL, mean per run
    checkpoints_table: tuple[tuple[str, ...], ...] = ()
    #: each abbreviation of the tests that ran, said once (None: no test)
    test_legend: str | None = None
    #: per cell whose drive was brought to a state first: what that state was
    states: tuple[str, ...] = ()


#: the findings of each view alive, by its id (a view holds mappings: it has no hash)
_MADE: dict[int, Findings] = {}


def findings(view: ScenarioView) -> Findings:
    """What the reports say of ``view``, computed on the first call and kept with the view
    (every publisher of one report asks again: the terminal, the HTML page)."""
    made = _MADE.get(id(view))
    if made is None:
        made = Findings(
            verdicts=tuple(verdict_lines(view)),
            legend=tuple(legend_lines(view)),
            notes=tuple(notes(view)),
            cache=tuple(cache_lines(view)),
            physics=tuple(physics_lines(view)),
            checkpoints=tuple(checkpoint_lines(view)),
            starts=tuple(start_lines(view)),
            start_summary=start_summary(view),
            searches=tuple(search_lines(view)),
            warnings=tuple(warnings(view)),
            pretests=tuple(tuple(r) for r in pretest_rows(view)),
            iostat=tuple(tuple(r) for r in iostat_rows(view)),
            percentiles=tuple(tuple(r) for r in percentile_rows(view)),
            checkpoints_table=tuple(tuple(r) for r in checkpoint_rows(view)),
            test_legend=test_legend(view),
            states=tuple(drivestates.state_lines(view)),
        )
        _MADE[id(view)] = made
        weakref.finalize(view, _MADE.pop, id(view), None)
    return made
