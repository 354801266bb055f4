"""``drivelab compare A B``: baseline A against contender B, cell by cell.

A and B are two scenarios (cells matched by their key: drive and test), two
drives within one scenario (cells matched by test), or two PostgreSQL setting sets
(``postgresql.sets``) within one scenario (cells matched by drive and test without
the set). For each pair: both means with
their confidence intervals, the difference in % of the baseline, Welch's t-test
p-value and whether the difference is significant at 5 %. Like ``esrally
compare``, with the statistics it lacks. Only complete runs enter.

Before the figures: what differs between the two sides' environments (the run fact
``environment``, :mod:`collector.verdicts.environment`), pair by pair, a difference common to
every pair listed once; a setting that is not the same in all runs of one side is
shown as "varies".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from collector.errors import DrivelabError
from collector.records import RunStatus
from collector.report import CellView, ScenarioView, fmt_ms, fmt_tps, load
from collector.stats import tps as stats
from collector.store import Fact, Store
from collector.verdicts import caveats as caveat
from collector.verdicts import environment


@dataclass(frozen=True)
class Pair:
    what: str
    baseline: CellView
    contender: CellView
    test: stats.Welch
    ratio: stats.Ratio | None


@dataclass(frozen=True)
class EnvironmentDifference:
    setting: str
    baseline: str
    contender: str
    #: the pairs (tests) it was found in; empty: in every pair whose environments are known
    tests: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    baseline_label: str
    contender_label: str
    pairs: tuple[Pair, ...]
    unmatched: tuple[str, ...] = ()
    environment: tuple[EnvironmentDifference, ...] = ()
    #: how many pairs have an environment recorded on both sides
    environment_pairs: int = 0


def _complete_runs(cv: CellView) -> list[int]:
    return [
        r.run_id for r in cv.stats.runs if r.status == RunStatus.COMPLETE and r.run_id is not None
    ]


def environment_differences(
    pairs: list[Pair], base_facts: tuple[Fact, ...], cont_facts: tuple[Fact, ...]
) -> tuple[tuple[EnvironmentDifference, ...], int]:
    """What differs between the environments of each pair's two cells (their complete
    runs), and how many pairs have one on both sides."""
    found: dict[tuple[str, str, str], list[str]] = {}
    known = 0
    for p in pairs:
        a = environment.of_runs(base_facts, _complete_runs(p.baseline))
        b = environment.of_runs(cont_facts, _complete_runs(p.contender))
        if not a or not b:
            continue
        known += 1
        for d in environment.diff(environment.merge(a), environment.merge(b)):
            found.setdefault((d.key, *environment.shown(d)), []).append(p.what)
    return tuple(
        EnvironmentDifference(key, left, right, () if len(tests) == known else tuple(tests))
        for (key, left, right), tests in found.items()
    ), known


def _pairs(base: list[CellView], cont: list[CellView], key) -> tuple[list[Pair], list[str]]:
    by_key = {key(c): c for c in cont}
    pairs, unmatched = [], []
    for b in base:
        c = by_key.pop(key(b), None)
        if c is None:
            unmatched.append(f"{b.drive} {b.test} (baseline only)")
            continue
        pairs.append(
            Pair(
                what=key(b),
                baseline=b,
                contender=c,
                test=stats.welch(b.stats.tps_values, c.stats.tps_values),
                ratio=stats.ratio(c.stats.tps_values, b.stats.tps_values),
            )
        )
    unmatched += [f"{c.drive} {c.test} (contender only)" for c in by_key.values()]
    return pairs, unmatched


def compare(store: Store, a: str, b: str, scenario: str | None = None) -> Comparison:
    """Resolve A and B (scenarios, or drives of ``scenario`` / of the only or latest
    scenario holding both) and compare them."""
    names = [s.name for s in store.scenarios()]
    if scenario is None and a in names and b in names:
        va, vb = load(store, a), load(store, b)
        pairs, unmatched = _pairs(list(va.cells), list(vb.cells), lambda c: f"{c.drive} {c.test}")
        if not pairs:
            raise DrivelabError(f"scenarios {a!r} and {b!r} have no cell in common")
        env, known = environment_differences(pairs, va.facts, vb.facts)
        return Comparison(a, b, tuple(pairs), tuple(unmatched), env, known)
    view, kind = _scenario_with(store, names, a, b, scenario)
    if kind == "drive":
        pairs, unmatched = _pairs(
            [c for c in view.cells if c.drive == a],
            [c for c in view.cells if c.drive == b],
            lambda c: c.test,
        )
        if not pairs:
            raise DrivelabError(
                f"drives {a!r} and {b!r} share no test in scenario {view.info.name!r}"
            )
        labels = (f"{view.info.name}: {a}", f"{view.info.name}: {b}")
    else:
        pairs, unmatched = _pairs(
            [c for c in view.cells if c.stats.spec.pg_settings_name == a],
            [c for c in view.cells if c.stats.spec.pg_settings_name == b],
            lambda c: f"{c.drive} {replace(c.stats.spec, pg_settings_name=None).test}",
        )
        if not pairs:
            raise DrivelabError(
                f"setting sets {a!r} and {b!r} share no drive and test in scenario"
                f" {view.info.name!r}"
            )
        labels = (f"{view.info.name}: pg {a}", f"{view.info.name}: pg {b}")
    env, known = environment_differences(pairs, view.facts, view.facts)
    return Comparison(*labels, tuple(pairs), tuple(unmatched), env, known)


def _sets(view: ScenarioView) -> list[str]:
    """The scenario's PostgreSQL setting sets (``postgresql.sets``), in cell order."""
    names = (c.stats.spec.pg_settings_name for c in view.cells)
    return list(dict.fromkeys(n for n in names if n is not None))


def _scenario_with(
    store: Store, names: list[str], a: str, b: str, scenario: str | None
) -> tuple[ScenarioView, str]:
    """The scenario (``scenario``, else the latest) holding A and B as two drives
    (``"drive"``) or as two PostgreSQL setting sets (``"set"``)."""
    candidates = [scenario] if scenario else list(reversed(names))
    for name in candidates:
        view = load(store, name)
        if a in view.drives and b in view.drives:
            return view, "drive"
        sets = _sets(view)
        if a in sets and b in sets:
            return view, "set"
        if scenario:
            if sets and (a in sets or b in sets):
                missing = next(x for x in (a, b) if x not in sets)
                raise DrivelabError(
                    f"scenario {scenario!r} has no setting set {missing!r}"
                    f" (sets: {', '.join(sets)})"
                )
            missing = next(x for x in (a, b) if x not in view.drives)
            raise DrivelabError(
                f"scenario {scenario!r} has no drive {missing!r} (drives: {', '.join(view.drives)})"
            )
    raise DrivelabError(
        f"{a!r} and {b!r} are neither two scenarios nor two drives or two PostgreSQL setting"
        f" sets of one scenario (scenarios: {', '.join(names)})"
    )


def table(cmp: Comparison) -> Table:
    t = Table(
        title=f"baseline {cmp.baseline_label}  vs  contender {cmp.contender_label}",
        caption="ratio: contender/baseline [95% CI]; p: Welch's t-test; sig.: at 5%",
    )
    # at 80 columns a figure folds onto a second line, never cut short
    for col, just in (
        ("test", "left"),
        ("base tps", "right"),
        ("cont tps", "right"),
        ("diff %", "right"),
        ("ratio", "right"),
        ("p", "right"),
        ("sig.", "left"),
        ("p95 ms b/c", "right"),
        ("runs", "right"),
    ):
        t.add_column(col, justify=just, overflow="fold")
    for p in cmp.pairs:
        w = p.test
        sig = "n/a (2+ runs each)" if w.significant is None else ("yes" if w.significant else "no")
        style = "" if not w.significant else ("green" if (w.diff_pct or 0) > 0 else "red")
        r = p.ratio
        ratio_txt = (
            "-"
            if r is None
            else (
                f"{r.ratio:.2f}x"
                + (f" [{r.ci_low:.2f}-{r.ci_high:.2f}]" if r.ci_low is not None else "")
            )
        )
        bp95 = p.baseline.stats.latency_p95_s
        cp95 = p.contender.stats.latency_p95_s
        t.add_row(
            p.what,
            fmt_tps(p.baseline.stats.tps),
            fmt_tps(p.contender.stats.tps),
            "-"
            if w.diff_pct is None
            else f"{w.diff_pct:+,.{0 if abs(w.diff_pct) >= 100 else 1}f}%",
            ratio_txt,
            "-" if w.p_value is None else ("<0.001" if w.p_value < 0.001 else f"{w.p_value:.2g}"),
            f"[{style}]{sig}[/{style}]" if style else sig,
            f"{fmt_ms(bp95.mean if bp95 else None)} / {fmt_ms(cp95.mean if cp95 else None)}",
            f"{p.baseline.stats.complete}/{p.contender.stats.complete}",
        )
    return t


def environment_table(cmp: Comparison) -> Table | str:
    """The environment differences as a table, or the one line that says there are
    none (or that the runs did not record their environments)."""
    total = len(cmp.pairs)
    if not cmp.environment_pairs:
        return "environments: not recorded (runs gathered before drivelab recorded them)"
    partly = (
        f" (known for {cmp.environment_pairs} of {total} pairs)"
        if cmp.environment_pairs < total
        else ""
    )
    if not cmp.environment:
        return f"environments: no difference{partly}"
    t = Table(title=f"environment differences{partly}")
    some = any(d.tests for d in cmp.environment)
    for col in ("setting", "baseline", "contender", *(("in",) if some else ())):
        t.add_column(col, overflow="fold")
    for d in cmp.environment:
        t.add_row(
            d.setting,
            d.baseline,
            d.contender,
            *((", ".join(d.tests) or "every pair",) if some else ()),
        )
    return t


def caveat_lines(cmp: Comparison) -> list[str]:
    """One line per pair whose either side carries a caveat
    (:mod:`collector.verdicts.caveats`): what that side measured besides the drive, so a
    difference (or none) is not read as the drives'."""
    out = []
    for p in cmp.pairs:
        sides = [
            f"{name} {', '.join(c.kind.short for c in cv.caveats)}"
            for name, cv in (("baseline", p.baseline), ("contender", p.contender))
            if cv.caveats
        ]
        if sides:
            both = len(sides) == 2 and caveat.CLIENT_BOUND in p.baseline.caveat_codes
            both = both and caveat.CLIENT_BOUND in p.contender.caveat_codes
            what = (
                "both sides measured the clients, not the drives"
                if both
                else "not only the drives were measured"
            )
            out.append(f"{p.what}: {'; '.join(sides)}: {what}")
    return out


def publish(cmp: Comparison, console: Console | None = None) -> None:
    console = console or Console()
    env = environment_table(cmp)
    if isinstance(env, str):
        console.print(env, highlight=False)
    else:
        console.print(env)
    console.print(table(cmp))
    for line in caveat_lines(cmp):
        console.print(f"  [bold red]caveat[/bold red] {escape(line)}", highlight=False)
    for u in cmp.unmatched:
        console.print(f"  [yellow]not compared[/yellow] {u}", highlight=False)


def as_dict(cmp: Comparison) -> dict:
    return {
        "baseline": cmp.baseline_label,
        "contender": cmp.contender_label,
        "pairs": [
            {
                "test": p.what,
                "baseline_tps_mean": p.test.baseline.mean if p.test.baseline else None,
                "contender_tps_mean": p.test.contender.mean if p.test.contender else None,
                "diff_pct": p.test.diff_pct,
                "t": p.test.t,
                "df": p.test.df,
                "p_value": p.test.p_value,
                "significant": p.test.significant,
                "ratio": p.ratio.ratio if p.ratio else None,
                "ratio_ci_low": p.ratio.ci_low if p.ratio else None,
                "ratio_ci_high": p.ratio.ci_high if p.ratio else None,
                **{
                    f"{side}_{key}": value
                    for side, cv in (("baseline", p.baseline), ("contender", p.contender))
                    for key, value in (
                        ("client_bound", caveat.CLIENT_BOUND in cv.caveat_codes),
                        ("cache_defeated", cv.cache_defeated),
                        ("caveats", list(cv.caveat_codes)),
                    )
                },
            }
            for p in cmp.pairs
        ],
        "unmatched": list(cmp.unmatched),
        "environment": {
            "pairs_known": cmp.environment_pairs,
            "differences": [
                {
                    "setting": d.setting,
                    "baseline": d.baseline,
                    "contender": d.contender,
                    "tests": list(d.tests),
                }
                for d in cmp.environment
            ],
        },
    }
