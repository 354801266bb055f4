"""The steady-state rule of SNIA's PTS (a window of five rounds; its range within 20 %
and its fitted line's excursion within 10 % of its mean) and the drift flags (a trend
across repetitions, a run still rising or falling through its window), on worked
examples whose figures are computed here by hand."""

from __future__ import annotations

import pytest

from collector.records import SeriesPoint
from collector.stats import drift
from collector.stats.steadystate import Rule, first_steady, judge

#: an SSD after preconditioning: fast at first, settling at about 6,000 IOPS
SETTLING = [9000, 7000, 6100, 6000, 5950, 6050, 5980, 6020]


def test_a_series_that_settles_is_steady_at_the_first_window_that_holds():
    # rounds 2-6: 7000 6100 6000 5950 6050, mean 6220: range 1050 (16.9 %) holds, but the
    # fitted slope is -205 per round, 820 across the window: 13.2 % > 10 %
    w = judge(SETTLING, 6)
    assert (round(w.range_frac, 3), round(w.excursion_frac, 3)) == (0.169, 0.132)
    assert w.range_ok and not w.slope_ok
    # rounds 3-7: 6100 6000 5950 6050 5980, mean 6016: range 150 (2.5 %), slope -19 per
    # round (76 across, 1.3 %): steady at round 7
    verdict = first_steady(SETTLING)
    assert (verdict.steady, verdict.round, verdict.rounds) == (True, 7, 8)
    assert round(verdict.last.range_frac, 4) == 0.0249
    assert round(verdict.last.excursion_frac, 4) == 0.0126
    assert verdict.words().startswith("steady after 7 rounds (range 2.5 % and excursion 1.3 %")


def test_a_series_that_swings_fails_on_range_alone():
    # 5000 8000 5000 8000 5000: mean 6200, range 3000 (48 %); the fitted line is flat
    verdict = first_steady([5000, 8000, 5000, 8000, 5000])
    assert not verdict.steady and verdict.round is None
    assert verdict.last.slope_ok and not verdict.last.range_ok
    assert round(verdict.last.range_frac, 3) == 0.484 and verdict.last.excursion_frac == 0
    assert "fails on range: range 48.4 % and excursion 0.0 %" in verdict.words()


def test_a_series_that_still_climbs_fails_on_slope_alone():
    # 6000 6250 6500 6750 7000: mean 6500, range 1000 (15.4 %) within 20 %, but the line
    # climbs 250 a round, 1000 across the window: 15.4 % > 10 %
    verdict = first_steady([6000, 6250, 6500, 6750, 7000])
    assert not verdict.steady and verdict.last.range_ok and not verdict.last.slope_ok
    assert round(verdict.last.excursion_frac, 3) == 0.154
    assert "fails on slope" in verdict.words()


def test_the_window_and_limits_are_the_rules():
    assert first_steady([100, 100, 100]).words() == "not steady: 3 rounds, fewer than a window"
    assert first_steady([100, 100, 100], Rule(window=3)).round == 3
    # a wider range allowed: the swinging series holds
    assert first_steady([5000, 8000, 5000, 8000, 5000], Rule(range_pct=50)).steady
    with pytest.raises(ValueError, match=r"mean 0\.0, not above 0"):
        judge([0, 0, 0, 0, 0], 5)


def test_repetitions_that_fall_are_drift_and_noise_is_not():
    # every one below the one before: Kendall's tau -1, exact p 2/720 = 0.0028; the
    # Theil-Sen slope (the median of the 15 pairwise slopes) -27.5 a repetition, 137.5
    # across five steps: 14.9 % of the mean 920.8
    falling = [1000, 960, 930, 905, 880, 850]
    t = drift.repetition_trend(falling)
    assert t is not None and t.direction == "fell" and t.n == 6
    assert round(t.p, 4) == 0.0028 and round(t.change, 3) == -0.149
    assert drift.repetition_words(t).startswith(
        "tps fell 15 % across 6 repetitions (Kendall's p 0.003)"
    )
    assert drift.repetition_trend([1000, 1030, 990, 1010, 1000, 1020]) is None  # noise
    assert drift.repetition_trend([1000, 900, 800, 700]) is None  # 4: no order reaches p < 0.05
    # a steady fall too small to matter (1 % across): not flagged
    assert drift.repetition_trend([1000, 998, 996, 994, 992, 990]) is None


def _series(rates: list[float], start: float = 100.0) -> list[SeriesPoint]:
    return [SeriesPoint("client1", start + i, 1.0, r) for i, r in enumerate(rates)]


def test_a_run_still_climbing_through_its_window_is_flagged_with_its_change():
    climbing = [500 + 20 * i for i in range(15)]  # 500 -> 780 tps over 15 s: +44 % of 640
    t = drift.run_trend(_series(climbing), (100.0, 115.0))
    assert t is not None and t.direction == "rose" and t.n == 15
    assert round(t.change, 3) == round(280 / 640, 3)
    assert drift.run_words(t.to_fact()) == "tps rose 44 % through the window"
    flat = [600, 610, 590, 605, 595, 600, 612, 588, 601, 599, 603, 597, 600, 604, 596]
    assert drift.run_trend(_series(flat), (100.0, 115.0)) is None
    assert drift.run_trend(_series(climbing[:6]), (100.0, 106.0)) is None  # too short to judge
    assert drift.run_trend(_series(climbing), None) is None
    # the window's whole seconds only: half a second at either edge is left out
    assert len(drift.per_second(_series(climbing), (100.5, 114.5))) == 14


def test_a_run_still_changing_carries_its_mark_and_a_drifting_cell_its_words():
    """The run fact tps_trend is the caveat `unsteady`, marked t on the figure; a
    drifting cell's words come from its complete repetitions in order."""
    from collector.verdicts import caveats  # noqa: PLC0415

    fact = {"change": 0.22, "p": 0.002, "n": 10, "mean": 65.3}
    assert caveats.run_caveats({"tps_trend": fact}) == (caveats.UNSTEADY,)
    assert caveats.run_caveats({"tps_trend": None}) == ()
    assert caveats.BY_CODE[caveats.UNSTEADY].mark == "t"
    assert drift.run_words(fact) == "tps rose 22 % through the window"


def test_the_db_hosts_judge_between_rounds_agrees_with_the_controllers():
    """The DB host stops its rounds by module_utils drivelab_steady's rule; the report
    judges the stored rounds by collector.stats.steadystate: the same first steady round
    for the worked examples and for many series, at several rules."""
    import random  # noqa: PLC0415

    from tests.unit.hostcode import module_util  # noqa: PLC0415

    host = module_util("candidate_drive", "drivelab_steady")
    rng = random.Random(58)  # noqa: S311  (test series, not secrets)
    series = [SETTLING, [5000, 8000, 5000, 8000, 5000], [6000, 6250, 6500, 6750, 7000]]
    series += [[rng.uniform(4000, 6000) * (1 - 0.02 * k) ** rng.choice((0, 3))
                for k in range(rng.randint(5, 25))] for _ in range(300)]  # fmt: skip
    for values in series:
        for rule in (Rule(), Rule(window=3), Rule(range_pct=10, excursion_pct=5)):
            ended = next(
                (n for n in range(rule.window, len(values) + 1)
                 if host.window_holds(values[:n], rule.window, rule.range_pct,
                                      rule.excursion_pct)), None,
            )  # fmt: skip
            assert ended == first_steady(values, rule).round, (values, rule)


def test_drive_states_are_an_axis_of_named_states_and_out_of_shape_is_one_line(tmp_path):
    """drive_state: a mapping or a list of them, each its own cells (-ds<name>), the drive
    request carrying the state and mkfs told not to discard what the state wrote."""
    import yaml  # noqa: PLC0415

    from collector import scenario as sc  # noqa: PLC0415
    from collector.errors import DrivelabError  # noqa: PLC0415
    from collector.paths import REPO  # noqa: PLC0415

    inventory = sc.load_inventory(REPO / "tests" / "data" / "inventory")
    base = {"name": "t", "drives": ["ssd"], "workload": {"scale": [5], "duration": 15}}

    def load(**extra):
        path = tmp_path / "s.yml"
        path.write_text(yaml.safe_dump({**base, **extra}))
        return sc.load(path)

    s = load(filesystems=[{"fs": "ext4", "mkfs_options": ["-E", "stride=16"]}],
             drive_state=[{"name": "fresh", "purge": "discard"},
                          {"purge": "discard", "precondition": {},
                           "steady_state": {"round_seconds": 30}}])  # fmt: skip
    cells = sc.expand(s, inventory)
    assert [c.cell_id for c in cells] == [
        "ssd-ext4-tablespace-s5-h1-tpcb-dsfresh", "ssd-ext4-tablespace-s5-h1-tpcb-dssteady",
    ]  # fmt: skip
    assert cells[1].cell.spec.test.endswith("ds steady")
    fresh, steady = (c.drive_request[0] for c in cells)
    assert fresh["mkfs_options"] == ["-E", "stride=16"]  # a purge alone: mkfs may discard
    assert steady["mkfs_options"] == ["-E", "stride=16,nodiscard"]
    assert steady["drive_state"]["precondition"] == {"multiple": 2.0, "block_size": "128k",
                                                     "iodepth": 32}  # fmt: skip
    assert steady["drive_state"]["steady_state"]["window"] == 5
    assert [c.state_seconds for c in cells] == [0.0, 25 * 30.0]
    xfs = sc.expand(load(filesystems=[{"fs": "xfs"}], drive_state={"precondition": True}),
                    inventory)  # fmt: skip
    assert xfs[0].drive_request[0]["mkfs_options"] == ["-K"]
    assert xfs[0].cell_id.endswith("-dspreconditioned")
    for extra, says in [
        ({"drive_state": {"purge": "trim"}}, "drive_state[0].purge"),
        ({"drive_state": [{"purge": "discard"}, {"purge": "secure"}]}, "'purged' listed twice"),
        ({"drive_state": {"steady_state": {"max_rounds": 3}}},
         "max_rounds (3) must be at least the window (5)"),
        ({"drive_state": {"name": "Bad", "purge": "discard"}}, "is not a state name"),
        ({"drive_state": {"precondition": {"block_size": "128q"}}}, "drive_state[0].precondition.block_size"),
    ]:  # fmt: skip
        with pytest.raises(DrivelabError) as err:
            load(**extra)
        assert says in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_state_is_said_as_its_steps_and_rounds():
    from collector.report.drivestates import state_words  # noqa: PLC0415

    rounds = [{"iops": v} for v in SETTLING]
    words = state_words({
        "purge": {"how": "discard", "seconds": 0.12},
        "precondition": {"io_bytes": 8 * 2**30, "bw_bytes": 700 * 2**20, "seconds": 11.7},
        "steady_state": {"rounds": rounds, "rule": {"window": 5, "range_pct": 20,
                                                    "excursion_pct": 10}},
    })  # fmt: skip
    assert words.startswith("purged (discard, 0.1 s), preconditioned (8.0 GiB written in 12 s,")
    assert "steady after 7 rounds (range 2.5 % and excursion 1.3 %" in words
    assert words.endswith("IOPS by round 9,000 7,000 6,100 6,000 5,950 6,050 5,980 6,020")
    assert state_words({}) == "as found (nothing written to it first)"


def test_the_trim_policy_is_an_axis_of_cells_and_discard_a_mount_option(tmp_path):
    import yaml  # noqa: PLC0415

    from collector import scenario as sc  # noqa: PLC0415
    from collector.paths import REPO  # noqa: PLC0415

    inventory = sc.load_inventory(REPO / "tests" / "data" / "inventory")
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump({
        "name": "t", "drives": ["ssd"], "trim": ["none", "discard", "fstrim"],
        "filesystems": [{"fs": "xfs", "mount_options": "noatime,discard"}, {"fs": "ext4"}],
        "workload": {"scale": [5], "duration": 15},
    }))  # fmt: skip
    cells = sc.expand(sc.load(path), inventory)
    assert [(c.cell.filesystem, c.cell.spec.trim, c.drive_request[0]["mount_options"])
            for c in cells] == [
        ("xfs", "none", "noatime,discard"),
        ("xfs", "discard", "noatime,discard"),
        ("xfs", "fstrim", "noatime,discard"),
        ("ext4", "none", "noatime"),
        ("ext4", "discard", "noatime,discard"),
        ("ext4", "fstrim", "noatime"),
    ]  # fmt: skip
    # the policy is in every name of its cells, and none is in no name
    assert ["trim" in c.cell.spec.test for c in cells] == [False, True, True] * 2
    assert cells[4].cell.spec.test.endswith("trim discard")
    assert cells[5].cell_id.endswith("-trimfstrim")
    from collector.run.stages import _pgbench_vars  # noqa: PLC0415

    extra = _pgbench_vars(cells[5].cell, tmp_path, ["client1"], cold_start=True, settle=False,
                          synchronized=True)  # fmt: skip
    assert extra["pgbench_run_trim"] == "fstrim"
