"""The rate search's bisection (collector.stats.ratesearch): what it runs next, when it
stops, what it reports, and that it resumes from stored steps; judged on model drives
(a latency that grows with the rate) and on the p99s of real ``pgbench -R -l`` logs
captured on the lab (tests/data/txlog-rate/README.md)."""

from __future__ import annotations

import io
import math
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from collector import scenario as sc
from collector.errors import DrivelabError
from collector.parse import latencyseries, pgbench
from collector.parse.lag import read_lag
from collector.records import RunRecord, RunStatus
from collector.report import findings, load
from collector.report import html as html_report
from collector.run.conductor import RunOptions, ScenarioRun
from collector.stats import ratesearch as rs
from collector.store import Store

DATA = Path(__file__).resolve().parent.parent / "data" / "txlog-rate"


def model(capacity: float, knee_ms: float = 5.0):
    """A drive whose p99 is ``knee_ms`` at low load and grows without bound as the
    total rate nears ``capacity`` (an M/M/1 queue's shape); above it the lag grows."""

    def observe(rate: int) -> rs.Observation:
        if rate >= capacity:
            return rs.Observation(rate, 3000.0, False, True, "rate not sustained: lag grew")
        return rs.Observation(rate, knee_ms / (1 - rate / capacity), True, True)

    return observe


def search(spec: rs.SearchSpec, observe) -> tuple[rs.SearchResult, list[rs.Decision]]:
    """Runs the search to its end against ``observe``; the result and every decision."""
    seen: list[rs.Observation] = []
    decisions = []
    for _ in range(rs.MAX_STEPS + 1):
        d = rs.next_step(spec, seen)
        decisions.append(d)
        if d.rate is None:
            assert d.result is not None
            return d.result, decisions
        # a rate is run twice only to confirm the bracket's top, and only once so
        again = d.rate in {o.rate for o in seen}
        assert again == d.again, f"{d.rate} run again ({d.why})"
        assert sum(o.rate == d.rate for o in seen) <= 1, f"{d.rate} run three times"
        seen.append(observe(d.rate))
    raise AssertionError("the search did not end within MAX_STEPS + 1 decisions")


def capacity_at(target_ms: float, capacity: float, knee_ms: float = 5.0) -> float:
    """The highest rate the model holds at ``target_ms``."""
    return capacity * (1 - knee_ms / target_ms)


CASES = {
    # name: (spec, model capacity)
    "default start, capacity above it": (rs.SearchSpec(p99_ms=20), 1000),
    "default start, capacity below it": (rs.SearchSpec(p99_ms=20), 37),
    "bracket given around it": (rs.SearchSpec(p99_ms=50, low=20, high=200), 120),
    "bracket given below it": (rs.SearchSpec(p99_ms=50, low=20, high=40), 120),
    "bracket given above it": (rs.SearchSpec(p99_ms=50, low=400, high=800), 120),
    "two hosts": (rs.SearchSpec(p99_ms=20, quantum=2), 333),
    "three hosts, tight": (rs.SearchSpec(p99_ms=20, quantum=3, within_pct=2, steps=16), 777),
    "fast drive": (rs.SearchSpec(p99_ms=10, low=1000, quantum=2), 40_000),
}


@pytest.mark.parametrize("name", CASES)
def test_the_search_brackets_the_sustained_rate_within_the_ratio(name):
    spec, capacity = CASES[name]
    result, decisions = search(spec, model(capacity))
    true = capacity_at(spec.p99_ms, capacity)
    assert result.status == rs.CONVERGED, result.text
    assert result.holds_at is not None and result.breaks_at is not None
    assert result.holds_at <= true < result.breaks_at
    assert result.holds_at >= result.breaks_at * (1 - spec.within_pct / 100) or (
        result.breaks_at - result.holds_at == spec.quantum
    )
    assert result.runs <= spec.steps
    assert all(s.rate % spec.quantum == 0 for s in result.steps)
    # the bracket's ends were run and judged so; its top, if it broke by its p99 alone
    # (not by a growing lag) or first broke right after an overload, was run twice
    by_rate = {s.rate: s for s in result.steps}
    top = by_rate[result.breaks_at]
    rates = [d.rate for d in decisions[:-1]]
    # the rates whose first run came right after a run that fell behind
    shadowed = {
        r for i, r in enumerate(rates)
        if 0 < i == rates.index(r) and rs.overload(model(capacity)(rates[i - 1]))
    }  # fmt: skip
    twice = top.p99_only or top.rate in shadowed
    assert by_rate[result.holds_at].holds and not top.holds
    assert top.runs == (2 if twice else 1) and result.confirmed is twice
    assert result.runs == sum(s.runs for s in result.steps)
    # every step run twice was a break by p99 alone or one right after an overload
    assert all(s.p99_only or s.rate in shadowed for s in result.steps if s.runs == 2)
    assert decisions[0].rate == spec.start


def test_steps_needed_as_documented():
    """docs/scenarios.md: from a given bracket of ratio r, bisection to 10 % (a ratio
    of 1/0.9) takes ceil(log2(ln r / ln(1/0.9))) steps after the two ends, and one to
    confirm the break; doubling from the default start adds one step per doubling."""
    spec = rs.SearchSpec(p99_ms=50, low=20, high=160)  # ratio 8
    result, _ = search(spec, model(130))
    bisect = math.ceil(math.log2(math.log(8) / -math.log(0.9)))
    assert bisect == 5
    assert len(result.steps) <= 2 + bisect
    assert result.runs - len(result.steps) <= 2  # confirmations of breaks by p99 alone
    # default start 100, capacity at ~6000: 100, 200 ... 6400 (7), then bisect from x2
    result, _ = search(rs.SearchSpec(p99_ms=20), model(8000))
    assert result.status == rs.CONVERGED
    assert len(result.steps) <= 7 + math.ceil(math.log2(math.log(2) / -math.log(0.9)))
    assert result.runs - len(result.steps) <= 2
    assert result.runs <= rs.DEFAULT_STEPS


def test_start_doubles_and_halves():
    spec = rs.SearchSpec(p99_ms=20, low=100)
    hold = rs.Observation(100, 5.0, True, True)
    brk = rs.Observation(100, 50.0, True, True)
    assert rs.next_step(spec, []) == rs.Decision(100, why="start")
    assert rs.next_step(spec, [hold]) == rs.Decision(200, why="double")
    assert rs.next_step(spec, [brk]) == rs.Decision(50, why="halve")
    given = rs.SearchSpec(p99_ms=20, low=100, high=1000)
    assert rs.next_step(given, [hold]) == rs.Decision(1000, why="high")
    # high held too: doubling from it
    assert rs.next_step(given, [hold, rs.Observation(1000, 9.0, True, True)]).rate == 2000
    # bisection: geometric mean, rounded to a multiple of the hosts
    two = rs.SearchSpec(p99_ms=20, low=20, high=200, quantum=2)
    obs = [rs.Observation(20, 5.0, True, True), rs.Observation(200, 80.0, True, True)]
    # 200 broke by its p99 alone, above a hold: run again first
    assert rs.next_step(two, obs) == rs.Decision(200, why="confirm")
    obs.append(rs.Observation(200, 75.0, True, True))
    assert rs.next_step(two, obs) == rs.Decision(64, why="bisect")  # sqrt(4000) = 63.2
    # a break by a growing lag is believed at once
    lag = [obs[0], rs.Observation(200, 80.0, False, True, "rate not sustained: lag grew")]
    assert rs.next_step(two, lag) == rs.Decision(64, why="bisect")


def test_steps_exhausted_keeps_the_bracket_it_has():
    spec = rs.SearchSpec(p99_ms=50, low=10, high=10_000, steps=3)
    result, _ = search(spec, model(500))
    assert result.status == rs.STEPS_EXHAUSTED
    assert len(result.steps) == 3
    assert result.holds_at is not None and result.breaks_at is not None
    assert result.holds_at <= capacity_at(50, 500) < result.breaks_at
    assert "3 steps, the most: bracket " in result.text and "wider than 10 %" in result.text


def test_nothing_holds_down_to_one_per_host():
    spec = rs.SearchSpec(p99_ms=1, low=16, quantum=2)
    result, decisions = search(spec, model(1e9, knee_ms=5.0))  # p99 >= 5 ms at any rate
    assert [d.rate for d in decisions[:-1]] == [16, 8, 4, 2]
    assert result.status == rs.NO_HOLD and result.holds_at is None
    assert result.sustained_rate is None
    assert result.text == (
        "no rate sustained at p99 <= 1 ms (breaks at 2/s total, the lowest rate run; 4 steps)"
    )


def test_nothing_breaks_within_the_steps():
    result, _ = search(rs.SearchSpec(p99_ms=20, low=100, steps=4), model(1e12))
    assert result.status == rs.NO_BREAK and result.breaks_at is None
    assert result.holds_at == 800
    assert result.text == (
        "sustained at least 800/s total at p99 <= 20 ms (held at every rate run, up to 800;"
        " no break found in 4 steps)"
    )


def test_nothing_breaks_up_to_the_highest_rate():
    spec = rs.SearchSpec(p99_ms=20, low=rs.MAX_RATE // 2, steps=5)
    result, decisions = search(spec, model(1e12))
    assert [d.rate for d in decisions[:-1]] == [rs.MAX_RATE // 2, rs.MAX_RATE]
    assert result.status == rs.NO_BREAK and result.holds_at == rs.MAX_RATE


def test_result_text_and_json():
    spec = rs.SearchSpec(p99_ms=20, low=180, high=200)
    obs = [
        rs.Observation(180, 15.0, True, True),
        rs.Observation(200, 25.0, True, True),
    ]
    assert rs.next_step(spec, obs) == rs.Decision(200, why="confirm")
    obs.append(rs.Observation(200, 31.0, True, True))
    result = rs.next_step(spec, obs).result
    assert result is not None
    assert result.text == (
        "sustained 180/s total at p99 <= 20 ms (holds at 180, breaks at 200 twice; 3 steps)"
    )
    doc = result.to_json()
    assert doc["sustained_rate"] == 180 and doc["breaks_at"] == 200
    assert doc["status"] == "converged" and doc["text"] == result.text
    assert doc["runs"] == 3 and doc["break_confirmed"] is True
    assert doc["steps"][1] == {
        "rate": 200, "holds": False, "p99_ms": 31.0, "runs": 2, "p99_only": True,
        "after_overload": False, "why": "p99 31.0 ms > 20 ms; also broke: p99 25.0 ms > 20 ms",
    }  # fmt: skip


def test_a_break_by_p99_alone_confirmed_by_one_with_lag_counts_as_confirmed():
    """The lab's rate search (CI, 2026-11-27): 122/s broke at p99 876 ms with the rate
    sustained, was run again to confirm and then also fell behind. The step broke in
    both runs, not by its p99 alone in both: confirmed, and not run a third time."""
    spec = rs.SearchSpec(p99_ms=200, low=94, high=122, quantum=2, within_pct=25)
    obs = [rs.Observation(94, 194.6, True, True), rs.Observation(122, 876.5, True, True)]
    assert rs.next_step(spec, obs) == rs.Decision(122, why="confirm")
    obs.append(rs.Observation(122, 1400.0, False, True, "rate not sustained: lag grew"))
    result = rs.next_step(spec, obs).result
    assert result is not None and result.breaks_at == 122 and result.holds_at == 94
    top = result.steps[1]
    assert (top.runs, top.holds, top.p99_only) == (2, False, False)
    assert result.confirmed and "breaks at 122 twice" in result.text


@pytest.mark.parametrize("model_capacity", [50, 333, 5000])
def test_resume_from_any_prefix_asks_the_same_next_rate(model_capacity):
    """The state is the stored steps: a search killed after k steps and started again
    (its observations read back in the order run: whether a run came right after an
    overload is part of its reading) asks what the whole one asked."""
    spec = rs.SearchSpec(p99_ms=30, quantum=2)
    observe = model(model_capacity)
    _, decisions = search(spec, observe)
    rates = [d.rate for d in decisions[:-1]]
    for k in range(len(rates)):
        stored = [observe(r) for r in rates[:k]]
        assert rs.next_step(spec, stored).rate == rates[k]
    final = rs.next_step(spec, [observe(r) for r in rates])
    assert final.rate is None and final.result == decisions[-1].result


def test_a_changed_target_rejudges_the_stored_steps():
    stored = [rs.Observation(100, 12.0, True, True), rs.Observation(200, 30.0, True, True)]
    loose = rs.next_step(rs.SearchSpec(p99_ms=50), stored)
    assert loose.rate == 400 and loose.why == "double"  # both hold at 50 ms
    tight = rs.next_step(rs.SearchSpec(p99_ms=20), stored)
    assert (tight.rate, tight.why) == (200, "confirm")  # 100 holds, 200 breaks by p99
    tight = rs.next_step(rs.SearchSpec(p99_ms=20), [*stored, rs.Observation(200, 28.0, True, True)])
    assert (tight.rate, tight.why) == (141, "bisect")


def test_a_rate_run_again_counts_once_and_holds_if_any_run_held():
    spec = rs.SearchSpec(p99_ms=20)
    first = rs.Observation(100, None, None, False, "client2: pgbench exited 1")
    again = rs.Observation(100, 8.0, True, True)
    for order in ([first, again], [again, first]):
        assert rs.next_step(spec, order).rate == 200
        (step,) = rs.judge(spec, order)
        assert step.holds and step.runs == 2 and step.p99_ms == 8.0
        assert step.why == (
            "p99 8.0 ms <= 20 ms, rate sustained; broke once: not complete: client2: pgbench"
            " exited 1"
        )


def test_a_break_that_holds_when_confirmed_moves_the_bracket_up_and_is_named():
    """The lab's case (tests/lab/test_run.py, a CI run): 72/s broke at p99 696 ms between
    56 (held, 48.6 ms) and 94 (broke, 348 ms); a run at 84/s then held at 126 ms. The
    single break at 72 is run again before it is reported; held, the bracket is 72..94,
    narrow at 25 %, and 94 is confirmed in its turn."""
    spec = rs.SearchSpec(p99_ms=200, low=20, high=160, steps=8, within_pct=25, quantum=2)
    obs = [
        rs.Observation(20, 4.8, True, True),
        rs.Observation(160, 2392.1, False, True, "rate not sustained: lag grew"),
        rs.Observation(56, 48.6, True, True),
        rs.Observation(94, 348.2, True, True),
        rs.Observation(72, 696.3, True, True),
    ]
    assert rs.next_step(spec, obs) == rs.Decision(72, why="confirm")
    obs.append(rs.Observation(72, 103.0, True, True))
    assert rs.next_step(spec, obs) == rs.Decision(94, why="confirm")
    obs.append(rs.Observation(94, 410.0, True, True))
    result = rs.next_step(spec, obs).result
    assert result is not None and result.status == rs.CONVERGED
    assert (result.holds_at, result.breaks_at, result.runs) == (72, 94, 7)
    assert result.held_when_confirmed == (72,)
    assert result.text == (
        "sustained 72/s total at p99 <= 200 ms (holds at 72, breaks at 94 twice; 7 steps;"
        " 72 broke once, then held: noisy near the edge)"
    )
    # with no step left for the confirmation, the single break is reported as it is
    short = rs.next_step(replace(spec, steps=5), obs[:5]).result
    assert short is not None and (short.holds_at, short.breaks_at) == (56, 72)
    assert short.status == rs.CONVERGED  # narrow: 56 >= 72 x 0.75
    assert not short.confirmed and "breaks at 72; 5 steps)" in short.text
    # another CI run: 56 broke first (by p99), the search went below it, 56 held later.
    # Run right after 160's overload, its break is run again once a step below it held;
    # held then, the search goes on above 56
    lag = rs.Observation(160, 2326.5, False, True, "rate not sustained: lag grew")
    seen = [rs.Observation(20, 5.8, True, True), lag, rs.Observation(56, 240.0, True, True)]
    assert rs.next_step(spec, seen) == rs.Decision(34, why="bisect")
    seen.append(rs.Observation(34, 30.1, True, True))
    assert rs.next_step(spec, seen) == rs.Decision(56, why="confirm")
    seen.append(rs.Observation(56, 37.4, True, True))
    assert rs.next_step(spec, seen) == rs.Decision(94, why="bisect")


def test_a_break_right_after_an_overload_is_run_again_after_a_hold():
    """The lab's rate search in CI (661f8b1): after 160/s fell behind (p99 5,308 ms),
    56/s broke at 2,261 ms and was believed at once (not by its p99 alone); 34 and 44
    then held, the search stopped at 44, and 66/s (1.5 times it) held twice: the drive
    was still paying for 160/s. A break right after an overload now counts only once
    the rate is run again after a step that held (e5bb4f6, before settled steps, had 56
    break by its p99 twice, run again at once as a break by p99 alone was)."""
    spec = rs.SearchSpec(p99_ms=200, low=20, high=160, steps=10, within_pct=25, quantum=2)
    behind = "rate not sustained: lag grew"
    seen = [
        rs.Observation(20, 23.3, True, True),
        rs.Observation(160, 5308.0, False, True, behind),
        rs.Observation(56, 2261.0, False, True, behind),
    ]
    (_, over, after) = rs.judge(spec, seen)
    assert not over.after_overload and after.after_overload
    assert after.why.endswith("(right after an overload)")
    assert rs.next_step(spec, seen) == rs.Decision(34, why="bisect")
    seen.append(rs.Observation(34, 51.7, True, True))
    assert rs.next_step(spec, seen) == rs.Decision(56, why="confirm")
    # held when run again: 56 holds, the bracket is 56..160
    held = rs.next_step(spec, [*seen, rs.Observation(56, 60.2, True, True)])
    assert held == rs.Decision(94, why="bisect")
    # broke again, after a hold: believed, 34..56 bisected
    broke = [*seen, rs.Observation(56, 900.0, False, True, behind)]
    assert rs.next_step(spec, broke) == rs.Decision(44, why="bisect")
    (step,) = [s for s in rs.judge(spec, broke) if s.rate == 56]
    assert (step.runs, step.holds, step.after_overload) == (2, False, False)
    # e5bb4f6: 56 broke by its p99 alone right after 160's overload and was run again at
    # once, breaking again (3,768 ms twice). Now it is not run again before a hold
    p99 = [*seen[:2], rs.Observation(56, 3768.0, True, True)]
    assert rs.next_step(spec, p99) == rs.Decision(34, why="bisect")
    # a bracket too narrow to go below: the sustained rate is run again first
    narrow = [
        rs.Observation(94, 150.0, True, True),
        rs.Observation(160, 5000.0, False, True, behind),
        rs.Observation(118, 900.0, False, True, behind),
    ]
    assert rs.next_step(spec, narrow) == rs.Decision(94, why="again")
    narrow.append(rs.Observation(94, 140.0, True, True))
    assert rs.next_step(spec, narrow) == rs.Decision(118, why="confirm")
    narrow.append(rs.Observation(118, 700.0, True, True))
    result = rs.next_step(spec, narrow).result
    assert result is not None and (result.holds_at, result.breaks_at) == (94, 118)
    assert result.confirmed and result.held_when_confirmed == ()
    assert "breaks at 118 twice" in result.text


def test_a_break_after_an_overload_is_never_left_unconfirmed():
    """CI on 99287dd: 20/s broke once and then held, 160/s fell behind, 56/s broke right
    after it and held when run again after 34/s held; 94/s fell behind, and 72/s broke by
    its p99 alone (397 ms) right after it. The bracket 56..72 could not be split, the
    sustained rate had been run twice, and the search ended on 72's one break,
    unconfirmed. Now a rate that held once is run again first when two steps are left,
    else the top is run again at once."""
    behind = "rate not sustained: lag grew"
    seen = [
        rs.Observation(20, 250.4, True, True),
        rs.Observation(10, 9.6, True, True),
        rs.Observation(20, 17.2, True, True),
        rs.Observation(160, 5963.8, False, True, behind),
        rs.Observation(56, 310.0, True, True),
        rs.Observation(34, 10.6, True, True),
        rs.Observation(56, 16.6, True, True),
        rs.Observation(94, 876.5, False, True, behind),
        rs.Observation(72, 397.3, True, True),
    ]
    spec = rs.SearchSpec(p99_ms=200, low=20, high=160, steps=10, within_pct=25, quantum=2)
    top = next(s for s in rs.judge(spec, seen) if s.rate == 72)
    assert top.after_overload and top.p99_only and top.runs == 1
    # the 10th and last step: the top at once
    assert rs.next_step(spec, seen) == rs.Decision(72, why="confirm")
    # room for two: 34, the highest rate that held once (56 and 20 ran twice), then 72
    roomy = rs.SearchSpec(p99_ms=200, low=20, high=160, steps=12, within_pct=25, quantum=2)
    assert rs.next_step(roomy, seen) == rs.Decision(34, why="again")
    seen_again = [*seen, rs.Observation(34, 11.0, True, True)]
    assert rs.next_step(roomy, seen_again) == rs.Decision(72, why="confirm")
    # broke again: confirmed, 56 sustained, 72 broke twice
    result = rs.next_step(spec, [*seen, rs.Observation(72, 420.0, True, True)]).result
    assert result is not None and (result.holds_at, result.breaks_at) == (56, 72)
    assert result.confirmed and "breaks at 72 twice" in result.text
    # every rate that held run twice already: the top at once, steps left or not
    ran_twice = [
        rs.Observation(56, 20.0, True, True),
        rs.Observation(56, 18.0, True, True),
        rs.Observation(94, 876.5, False, True, behind),
        rs.Observation(72, 397.3, True, True),
    ]
    assert rs.next_step(roomy, ran_twice) == rs.Decision(72, why="confirm")


@pytest.mark.parametrize("capacity", [37, 61, 90, 133, 250])
@pytest.mark.parametrize("aftermath", [1, 2])
@pytest.mark.parametrize("steps", [6, 8, 10])
def test_a_search_ends_with_its_top_confirmed_unless_the_steps_ran_out(capacity, aftermath, steps):
    """Whatever the order of breaks, a search that stops with steps left has run the top
    of its bracket twice when it broke by its p99 alone or right after an overload; one
    that used every step may not have (its last step broke a new top)."""
    spec = rs.SearchSpec(p99_ms=200, low=20, high=160, steps=steps, within_pct=25, quantum=2)
    observe_model = model(capacity)
    shadow = {"left": 0}

    def observe(rate: int) -> rs.Observation:
        obs = observe_model(rate)
        if shadow["left"] > 0 and obs.complete:  # the overload's aftermath: p99 only
            shadow["left"] -= 1
            obs = rs.Observation(rate, max(obs.p99_ms or 0, 400.0), obs.sustained, True)
        if rs.overload(obs):
            shadow["left"] = aftermath
        return obs

    result, decisions = search(spec, observe)
    top = next((s for s in result.steps if s.rate == result.breaks_at), None)
    if top is not None and result.holds_at is not None and result.runs < steps:
        assert top.runs == 2 or not (top.p99_only or top.after_overload), (
            [(d.rate, d.why) for d in decisions],
            result.text,
        )


def test_a_hold_above_the_lowest_break_does_not_move_the_bracket():
    spec = rs.SearchSpec(p99_ms=20, within_pct=10)
    obs = [
        rs.Observation(100, 10.0, True, True),
        rs.Observation(200, 40.0, False, True, "rate not sustained: lag grew"),
        rs.Observation(141, 25.0, True, True),
        rs.Observation(141, 22.0, True, True),  # confirmed
        rs.Observation(170, 19.0, True, True),  # noise: held above the break at 141
    ]
    d = rs.next_step(spec, obs)
    assert d.rate == 119  # between 100 (holds) and 141 (the lowest break)
    obs += [rs.Observation(119, 15.0, True, True), rs.Observation(130, 18.0, True, True)]
    result = rs.next_step(spec, obs).result
    assert result is not None and (result.holds_at, result.breaks_at) == (130, 141)
    assert result.held_above_break == (170,)
    assert "held again at 170, above the break: noisy near the edge" in result.text


def test_a_bracket_one_rate_per_host_wide_is_done():
    spec = rs.SearchSpec(p99_ms=20, within_pct=1, quantum=4)
    obs = [rs.Observation(8, 5.0, True, True), rs.Observation(12, 50.0, True, True)]
    assert rs.next_step(spec, obs) == rs.Decision(12, why="confirm")
    result = rs.next_step(spec, [*obs, rs.Observation(12, 45.0, True, True)]).result
    assert result is not None and result.status == rs.CONVERGED
    assert (result.holds_at, result.breaks_at) == (8, 12)


def test_what_holds():
    target = 20.0
    cases = {
        "under the target, sustained": (rs.Observation(10, 19.9, True, True), True),
        "at the target": (rs.Observation(10, 20.0, True, True), True),
        "over the target": (rs.Observation(10, 20.1, True, True), False),
        "under the target, lag grew": (
            rs.Observation(10, 5.0, False, True, "rate not sustained: lag grew"),
            False,
        ),
        "under the target, lag not read": (rs.Observation(10, 5.0, None, True), True),
        "a client partial": (rs.Observation(10, 5.0, True, False, "client2: exited 1"), False),
        "no transaction in the window": (rs.Observation(10, None, None, True), False),
    }
    for name, (obs, holds) in cases.items():
        got, why = obs.verdict(target)
        assert got is holds, (name, why)
    assert rs.Observation(10, 5.0, True, False, "client2: exited 1").verdict(target)[1] == (
        "not complete: client2: exited 1"
    )


def test_spec_bounds():
    for bad in (
        {"p99_ms": 0},
        {"p99_ms": 20, "steps": 0},
        {"p99_ms": 20, "steps": rs.MAX_STEPS + 1},
        {"p99_ms": 20, "within_pct": 0},
        {"p99_ms": 20, "low": 200, "high": 100},
        {"p99_ms": 20, "quantum": 0},
    ):
        with pytest.raises(ValueError):
            rs.SearchSpec(**bad)
    assert rs.SearchSpec(p99_ms=20, quantum=3).start == 99
    assert rs.SearchSpec(p99_ms=20, low=1, quantum=3).start == 3


# --------------------------------------------------------------------------- real logs

#: capture folder -> total rate offered (two client hosts, -R per host)
CAPTURES = {
    "hdd7200-cluster-r10": 20,
    "hdd7200-cluster-r100": 200,
    "hdd7200-cluster-r100-L50": 200,
    "hdd7200-tablespace-r100": 200,
    "nvme-tablespace-r400": 800,
    "nvme-tablespace-r400-L2": 800,
}
LIMITS = {"hdd7200-cluster-r100-L50": 0.050, "nvme-tablespace-r400-L2": 0.002}


def captured(run: str) -> rs.Observation:
    """A capture as a step: its p99 over the window where both clients ran (the merged
    per-second histograms) and its lag reading, as a run's latency_window fact has them."""
    series = []
    for client in ("client1", "client2"):
        files = sorted((DATA / run).glob(f"{client}.[0-9]*"))
        summary = pgbench.summarize_txlog(files, latency_limit_s=LIMITS.get(run))
        series.append(summary.latency_series)
    merged = latencyseries.merge_latency_series(series)
    lo = max(s.first_second for s in series)
    hi = min(s.first_second + s.seconds - 1 for s in series)
    p99 = latencyseries.window_percentiles(merged, lo, hi, (0.99,))[0.99]
    lag = read_lag(latencyseries.latency_points(merged))
    window = {
        "p99_ms": p99 * 1e3,
        "lag": {"sustained": lag.sustained, "reason": lag.reason},
    }
    return rs.observation(CAPTURES[run], window, complete=True)


def test_real_captures_hold_or_break_as_measured():
    """hdd7200 with its WAL on the drive holds 20/s in all with p99 36 ms and breaks at
    200/s (the lag grows to seconds); with -L 50 its p99 stays under 150 ms, yet 45 % of
    the schedule was skipped: not sustained, so it breaks even a loose target."""
    obs = {run: captured(run) for run in CAPTURES}
    p99 = {run: o.p99_ms for run, o in obs.items()}
    assert 30 < p99["hdd7200-cluster-r10"] < 45
    assert p99["hdd7200-cluster-r100"] > 3000
    assert 140 < p99["hdd7200-cluster-r100-L50"] < 160
    assert p99["nvme-tablespace-r400"] < 10
    verdicts = {run: o.verdict(50.0)[0] for run, o in obs.items()}
    assert verdicts == {
        "hdd7200-cluster-r10": True,
        "hdd7200-cluster-r100": False,  # p99 seconds, lag grew
        "hdd7200-cluster-r100-L50": False,  # p99 150 ms > 50
        "hdd7200-tablespace-r100": True,  # WAL off the drive: 200/s at p99 11 ms
        "nvme-tablespace-r400": True,
        "nvme-tablespace-r400-L2": False,  # p99 13 ms, but 6 % skipped under -L 2
    }
    loose = obs["hdd7200-cluster-r100-L50"].verdict(500.0)
    assert loose[0] is False and "skipped" in loose[1]
    assert obs["nvme-tablespace-r400-L2"].verdict(20.0)[0] is False


def test_search_on_the_real_hdd7200_cluster_steps():
    """Started at 20/s with 200/s as high on hdd7200 (cluster): 20 holds at 50 ms, 200
    breaks, so the next step is their geometric mean, 64/s (two hosts: 32 each); at a
    20 ms target 20/s already breaks (p99 36 ms), so the search halves."""
    spec = rs.SearchSpec(p99_ms=50, low=20, high=200, quantum=2)
    low, high = captured("hdd7200-cluster-r10"), captured("hdd7200-cluster-r100")
    assert rs.next_step(spec, []).rate == 20
    assert rs.next_step(spec, [low]).rate == 200
    d = rs.next_step(spec, [low, high])
    assert (d.rate, d.why) == (64, "bisect")
    tight = rs.SearchSpec(p99_ms=20, low=20, high=200, quantum=2)
    assert rs.next_step(tight, [low]) == rs.Decision(10, why="halve")
    # stopped here (the most steps: 2): the bracket the captures give
    result = rs.next_step(rs.SearchSpec(p99_ms=50, low=20, high=200, quantum=2, steps=2),
                          [low, high]).result  # fmt: skip
    assert result is not None and result.status == rs.STEPS_EXHAUSTED
    assert (result.holds_at, result.breaks_at) == (20, 200)
    assert result.text.startswith(
        "sustained 20/s total at p99 <= 50 ms (holds at 20, breaks at 200"
    )


def test_observation_from_a_window_fact():
    window = {"p99_ms": 12.5, "lag": {"sustained": False, "reason": "rate not sustained: x"}}
    obs = rs.observation(64, window, complete=True)
    assert obs == rs.Observation(64, 12.5, False, True, "rate not sustained: x")
    assert rs.observation(64, None, complete=False, reason="client1: failed") == (
        rs.Observation(64, None, None, False, "client1: failed")
    )
    assert rs.observation(64, {"p99_ms": None, "lag": None}, complete=True).p99_ms is None


# --------------------------------------------------------------------------- the scenario


def _scenario(tmp_path: Path, workload: str, hosts: str = "[2]") -> Path:
    path = tmp_path / "search.yml"
    path.write_text(
        "name: search-t\ndrives: [hdd7200, nvme]\nplacement: [cluster]\n"
        f"workload: {workload}\nhosts: {hosts}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        (
            "{scale: 5, duration: 8, rate: [10, 20], target: {p99_ms: 50}}",
            "workload.target: searches the rate itself: remove workload.rate ([10, 20]);"
            " target.low and target.high bound the search",
        ),
        (
            "{scale: 5, duration: 8, rate: 10, target: {p99_ms: 50}}",
            "workload.target: searches the rate itself: remove workload.rate ([10])",
        ),
        (
            "{scale: 5, duration: 8, log: aggregate, target: {p99_ms: 50}}",
            "workload.target: needs the per-transaction log of every transaction (log: full)"
            " to read the p99 from; log is aggregate",
        ),
        (
            "{scale: 5, duration: 8, log: none, target: {p99_ms: 50}}",
            "workload.target: needs the per-transaction log of every transaction (log: full)"
            " to read the p99 from; log is none",
        ),
        (
            "{scale: 5, transactions: 100, target: {p99_ms: 50}}",
            "workload.target: needs duration (-T): every step of the search runs as long",
        ),
        (
            "{scale: 5, duration: 8, target: {p99_ms: 50, low: 200, high: 100}}",
            "workload.target: high (100) must be above low (200)",
        ),
        (
            "{scale: 5, duration: 8, target: {p99_ms: 50, steps: 25}}",
            "workload.target.steps: must be at most 24 (got 25)",
        ),
        ("{scale: 5, duration: 8, target: {p99_ms: 0}}", "workload.target.p99_ms: must be greater"),
        ("{scale: 5, duration: 8, target: {p99: 50}}", "workload.target.p99_ms: required, missing"),
    ],
)
def test_a_target_that_cannot_be_searched_is_one_line(tmp_path, workload, expected):
    path = _scenario(tmp_path, workload)
    with pytest.raises(DrivelabError) as info:
        sc.load(path)
    assert str(info.value).startswith(f"{path}: {expected}"), str(info.value)
    assert "\n" not in str(info.value)


INVENTORY = sc.load_inventory(Path(__file__).resolve().parent.parent / "data" / "inventory")


def test_the_plan_says_each_cell_is_searched_with_its_most_steps_and_time(tmp_path):
    path = _scenario(tmp_path, "{scale: 5, duration: 8, target: {p99_ms: 50, low: 21, steps: 7}}",
                     hosts="[1, 2]")  # fmt: skip
    s = sc.load(path)
    cells = sc.expand(s, INVENTORY)
    assert [c.search.quantum for c in cells if c.search] == [1, 2, 1, 2]
    assert all(c.search == rs.SearchSpec(p99_ms=50, low=21, steps=7, quantum=c.search.quantum)
               for c in cells if c.search)  # fmt: skip
    assert cells[1].search.start == 22  # 21 in all, a whole -R per host: 11 each
    # each step one run of -T 8 plus the per-run overhead, the database once
    assert sc.estimate_seconds(cells[0]) == 7 * (8 + sc.OVERHEAD_PER_REPETITION) + sc.init_seconds(
        cells[0]
    )
    text = sc.plan_text(s, cells)
    assert "4 cells x a rate search of at most 7 steps" in text
    assert "rate search per cell: the highest total rate with p99 <= 50 ms over" in text
    assert "at most 7 steps of one run each (repetitions do not apply)" in text
    assert "at most 3 min 51 s per cell" in text  # 7 x (8 + 25) s
    assert text.splitlines()[-1].startswith("estimated duration: at most ")
    assert all(len(line) <= 80 for line in text.splitlines())
    rows = [line for line in text.splitlines() if "-tpcb" in line]
    assert len(rows) == 4 and all(" <=7 " in r for r in rows)
    # without a target: nothing of it
    plain = sc.load(_scenario(tmp_path, "{scale: 5, duration: 8}"))
    plain_cells = sc.expand(plain, INVENTORY)
    assert all(c.search is None for c in plain_cells)
    assert "rate search" not in sc.plan_text(plain, plain_cells)


# --------------------------------------------------------------------------- the runner loop


class Killed(Exception):
    """Stands for the SIGKILL of a search mid-way."""


class ModelRun(ScenarioRun):
    """A scenario run whose steps are stored as the real path stores them (a gathered
    run's status and its ``latency_window`` fact, in a real store) but whose p99 comes
    from a model drive instead of the playbooks (the lab test runs the real ones).
    ``kill_after``: raise :class:`Killed` once that many steps were stored."""

    def __init__(self, *args, capacity: float, kill_after: int | None = None, **kw):
        super().__init__(*args, **kw)
        self.observe = model(capacity)
        self.kill_after = kill_after
        self.ran: list[tuple[str, int]] = []

    def prepare_or_skip(self, planned, head) -> bool:
        return True

    def run_one(  # noqa: PLR0917
        self, planned, rep, head, tps, attempt=1, last=True, cold_start=True, settle=False
    ) -> bool:
        assert cold_start is False and settle is True  # a step is measured warm, settled
        if self.kill_after is not None and len(self.ran) >= self.kill_after:
            raise Killed
        cell = planned.cell
        total = cell.pgbench.rate * len(cell.hosts)
        self.ran.append((cell.cell_id, total))
        obs = self.observe(total)
        window = {"p99_ms": obs.p99_ms, "rate_total": total,
                  "lag": {"sustained": obs.sustained, "reason": obs.reason or "sustained"}}  # fmt: skip
        run = RunRecord(repetition=rep, status=RunStatus.COMPLETE, attempt=attempt,
                        facts={"latency_window": window})  # fmt: skip
        with Store.open(self.opts.db) as store:
            sid = store.add_scenario(cell.scenario)
            store.record_run(store.add_cell(sid, cell.spec), run)
        self.progress.done += 1
        return True


def _search_run(tmp_path, **kw) -> ModelRun:
    tmp_path.mkdir(exist_ok=True)
    path = _scenario(tmp_path, "{scale: 5, duration: 8, target: {p99_ms: 50, low: 20, high: 200}}")
    s = sc.load(path)
    cells = [c for c in sc.expand(s, INVENTORY) if c.cell.drive == "hdd7200"]
    opts = RunOptions(inventory=tmp_path / "hosts.yml", db=tmp_path / "drivelab.db")
    return ModelRun(s, cells, INVENTORY, opts, Console(file=io.StringIO(), width=200), **kw)


def test_each_step_is_its_own_cell_and_a_killed_search_resumes_where_it_stopped(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("DRIVELAB_RESULTS", str(tmp_path / "results"))
    # the whole search at once, for reference
    whole = _search_run(tmp_path / "a", capacity=150)
    whole.run_cell(whole.cells[0])
    rates = [r for _, r in whole.ran]
    assert rates[:3] == [20, 200, 64]  # low, high, then their geometric mean
    # a cell per rate; the last step runs the bracket's top again to confirm its break
    assert len({cid for cid, _ in whole.ran}) == len(rates) - 1
    assert rates[-1] in rates[:-1]
    assert whole.ran[2][0] == "hdd7200-ext4-cluster-s5-h2-tpcb-r32"  # -R 32 per host
    # killed after 3 steps, started again: the stored steps are read back, not run again
    first = _search_run(tmp_path / "b", capacity=150, kill_after=3)
    with pytest.raises(Killed):
        first.run_cell(first.cells[0])
    again = _search_run(tmp_path / "b", capacity=150)
    again.run_cell(again.cells[0])
    assert [r for _, r in first.ran] + [r for _, r in again.ran] == rates
    out = again.console.file.getvalue()
    assert "3 steps of the search stored, going on" in out
    # the result, stored once as the fact rate_search, is what the report prints
    with Store.open(tmp_path / "b" / "drivelab.db", create=False) as store:
        view = load(store, "search-t")
        facts = [f for f in store.facts(store.scenario("search-t").id) if f.scope == rs.FACT]
    assert len(facts) == 1
    doc = facts[0].value
    true = capacity_at(50, 150)  # the model's edge: 135/s
    assert doc["holds_at"] <= true < doc["breaks_at"]
    assert doc["status"] == rs.CONVERGED and doc["cell"] == again.cells[0].cell.spec.key
    assert [s["rate"] for s in doc["steps"]] == rates[:-1]
    assert doc["runs"] == len(rates) and doc["break_confirmed"]
    with Store.open(tmp_path / "b" / "drivelab.db", create=False) as store:
        sid = store.scenario("search-t").id
        (top,) = [cid for cid, spec in store.cells(sid)
                  if spec.params.get("rate") == doc["breaks_at"] // 2]  # fmt: skip
        assert sorted(r.repetition for r in store.runs(top)) == [0, 1]  # confirmed: rep 1
    assert doc["steps"][2]["cell"].startswith("hdd7200 tpcb ext4 cluster s5 2cl c4 j2 T8 R32")
    line = (
        f"hdd7200 tpcb ext4 cluster s5 2cl c4 j2 T8: sustained {doc['holds_at']}/s total at"
        f" p99 <= 50 ms (holds at {doc['holds_at']}, breaks at {doc['breaks_at']} twice;"
        f" {len(rates)} steps)"
    )
    assert findings.search_lines(view) == [line]
    assert (
        f"[{again.cells[0].index}/{again.cells[0].total}] {again.cells[0].cell_id}: "
        + line[len("hdd7200 tpcb ext4 cluster s5 2cl c4 j2 T8: ") :]
        in out
    )
    page = html_report.render([view])
    assert "<h3>Rate search</h3>" in page and f"{doc['holds_at']}/s" in page
    # started once more: nothing runs, the result is not stored twice
    third = _search_run(tmp_path / "b", capacity=150)
    third.run_cell(third.cells[0])
    assert third.ran == []
    with Store.open(tmp_path / "b" / "drivelab.db", create=False) as store:
        sid = store.scenario("search-t").id
        assert len([f for f in store.facts(sid) if f.scope == rs.FACT]) == 1


def test_a_break_by_a_growing_lag_is_run_again_before_the_search_ends_on_it():
    """CI on 56bb97e: 20/s held, 160/s fell behind, 56/s broke by its p99 alone right
    after it, 34/s broke with its lag growing (p99 2.6 s), 26/s held at 6 ms, and the
    search ended at 26/s on 34's one break; 40/s then held twice (p99 25 and 6 ms). Now
    the top is run again first, and when it holds the search goes on above it."""
    behind = "rate not sustained: lag grew"
    spec = rs.SearchSpec(p99_ms=200, low=20, high=160, steps=10, within_pct=25, quantum=2)
    seen = [
        rs.Observation(20, 55.8, True, True),
        rs.Observation(160, 5963.8, False, True, behind),
        rs.Observation(56, 696.3, True, True),
        rs.Observation(56, 650.0, True, True),
        rs.Observation(34, 2588.7, False, True, behind),
        rs.Observation(26, 6.0, True, True),
    ]
    top = next(s for s in rs.judge(spec, seen) if s.rate == 34)
    assert not (top.p99_only or top.after_overload) and top.runs == 1
    assert rs.next_step(spec, seen) == rs.Decision(34, why="confirm")
    # it held: noisy, and the bracket is 34..56, split at 44
    held = [*seen, rs.Observation(34, 30.0, True, True)]
    assert rs.next_step(spec, held).rate == 44
    # it broke again: the search ends, the break confirmed
    result = rs.next_step(spec, [*seen, rs.Observation(34, 900.0, False, True, behind)]).result
    assert result is not None and (result.holds_at, result.breaks_at) == (26, 34)
    assert result.confirmed and "breaks at 34 twice" in result.text
