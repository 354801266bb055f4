"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from tests.unit.sshd import Sshd


@pytest.fixture
def sshd(tmp_path):
    """A throwaway sshd on 127.0.0.1 (tests marked ``sshd``), stopped by its own PID."""
    server = Sshd(tmp_path)
    try:
        yield server
    finally:
        server.stop()
