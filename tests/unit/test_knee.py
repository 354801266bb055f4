"""The knee of a client sweep (collector/stats/knee.py) on worked examples."""

from __future__ import annotations

import pytest

from collector.stats.knee import Point, gain_per_doubling, knee


def test_a_doubling_that_adds_little_while_p99_grows_is_the_knee():
    # 8 -> 16 adds 40 %, 16 -> 32 adds 5 % while p99 doubles: the knee is at 16
    points = [Point(8, 1000, 0.004), Point(16, 1400, 0.006), Point(32, 1470, 0.012)]
    assert knee(points) == Point(16, 1400, 0.006)
    assert knee(list(reversed(points))) == Point(16, 1400, 0.006)  # any order


def test_a_curve_that_keeps_paying_has_no_knee():
    assert knee([Point(2, 100, 0.002), Point(4, 190, 0.002), Point(8, 350, 0.003)]) is None


def test_little_gain_without_the_p99_growing_is_no_knee():
    # the drive saturated no further: latency the same (say a client-side limit)
    assert knee([Point(4, 500, 0.010), Point(8, 520, 0.010)]) is None


def test_the_gain_is_scaled_to_one_doubling():
    # 4 -> 16 is two doublings: +21 % over both is +10 % per doubling
    assert gain_per_doubling(Point(4, 100, None), Point(16, 121, None)) == pytest.approx(0.10)
    # 4 -> 6 adds 8 %: per doubling that is (1.08)^(1/log2(1.5)) - 1, about 14 %
    assert gain_per_doubling(Point(4, 100, None), Point(6, 108, None)) == pytest.approx(
        1.08 ** (1 / 0.5849625) - 1
    )
    assert knee([Point(4, 100, 0.01), Point(6, 108, 0.02)]) is None  # 14 % still pays
    assert knee([Point(4, 100, 0.01), Point(16, 115, 0.02)]) == Point(4, 100, 0.01)


def test_an_unknown_p99_or_a_repeated_count():
    assert knee([Point(4, 500, None), Point(8, 500, 0.02)]) is None
    assert knee([Point(4, 500, 0.01)]) is None
    with pytest.raises(ValueError, match="one point per connection count"):
        knee([Point(4, 500, 0.01), Point(4, 510, 0.02)])
