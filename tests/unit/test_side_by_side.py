"""`drivelab run` sets up telemetry while it provisions (collector.scenariorun._beside):
the two run at once, the run goes on only when both are done, and a failure of either is
the one told, the provisioning's first: never a stage left running behind the error."""

from __future__ import annotations

import threading
import time

import pytest

from collector.errors import DrivelabError
from collector.scenariorun import _beside


def test_both_run_at_once_and_the_background_result_is_returned():
    both = threading.Barrier(2, timeout=10)  # broken unless the two meet
    assert _beside(lambda: both.wait() or "telemetry", both.wait, alone=False) == "telemetry"


def test_alone_runs_the_foreground_first_then_the_background():
    order: list[str] = []
    got = _beside(lambda: order.append("telemetry") or 7, lambda: order.append("provision"),
                  alone=True)  # fmt: skip
    assert got == 7 and order == ["provision", "telemetry"]


def test_a_failed_foreground_is_told_once_the_background_is_done():
    done = threading.Event()

    def background() -> None:
        time.sleep(0.3)
        done.set()
        raise DrivelabError("telemetry: failed too")

    def foreground() -> None:
        raise DrivelabError("provision: dbhost: exit 1: no space left")

    with pytest.raises(DrivelabError, match=r"^provision: dbhost") as err:
        _beside(background, foreground, alone=False)
    assert done.is_set(), "the error was told while the background still ran"
    assert "telemetry" not in str(err.value)


def test_a_failed_background_is_told_after_the_foreground_succeeded():
    finished: list[str] = []

    def background() -> None:
        raise DrivelabError("telemetry: client1: node_exporter did not answer")

    with pytest.raises(DrivelabError, match=r"^telemetry: client1"):
        _beside(background, lambda: finished.append("provision"), alone=False)
    assert finished == ["provision"]
