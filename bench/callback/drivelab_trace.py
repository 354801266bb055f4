"""Callback ``drivelab_trace`` (bench only): every task's start and end on every host, as
JSON lines appended to the file ``DRIVELAB_TRACE`` names, with the playbook's, its plays'
and its process's own instants. ``profile_tasks`` times a task from one task's start to
the next one's, on any host: under ``strategy: free`` that says nothing of one host's
path through a play, which is what bench/steps.py needs to tell the DB host's cold
start from the task turns around it.

Lines (``t``, ``start``, ``end``: epoch seconds; ``pid``: the ansible-playbook's):
``{"ev": "init"}`` when Ansible loads the callback, ``{"ev": "playbook", "name"}``,
``{"ev": "play", "name"}``, ``{"ev": "task", "host", "task", "play", "status", "start",
"end"}`` per host and task, ``{"ev": "stats"}`` after the last play and ``{"ev": "exit"}``
as the process exits. Each line is one write to a file opened for appending, so the
processes that run at once (the telemetry playbook beside the drives one) do not cut into
one another's lines."""

from __future__ import annotations

import atexit
import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: drivelab_trace
type: aggregate
short_description: each host's task starts and ends, as JSON lines (bench/steps.py)
description: Appends one JSON line per task and host to the file DRIVELAB_TRACE names.
requirements: [enabled in callbacks_enabled, DRIVELAB_TRACE set]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "drivelab_trace"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        path = os.environ.get("DRIVELAB_TRACE")
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self._started: dict[tuple[str, str], float] = {}
        self._play = ""
        self._write(ev="init")
        atexit.register(self._write, ev="exit")

    def _write(self, **fields) -> None:
        if self._fd is None:
            return
        fields.setdefault("t", time.time())
        line = json.dumps({**fields, "pid": os.getpid()}) + "\n"
        os.write(self._fd, line.encode())

    def v2_playbook_on_start(self, playbook) -> None:
        self._write(ev="playbook", name=os.path.basename(playbook._file_name))

    def v2_playbook_on_play_start(self, play) -> None:
        self._play = play.get_name()
        self._write(ev="play", name=self._play)

    def v2_runner_on_start(self, host, task) -> None:
        self._started[(host.name, task._uuid)] = time.time()

    def _ended(self, result, status: str) -> None:
        host, task = result._host.name, result._task
        start = self._started.pop((host, task._uuid), None)
        self._write(ev="task", host=host, task=task.get_name(), play=self._play,
                    status=status, start=start, end=time.time())  # fmt: skip

    def v2_runner_on_ok(self, result) -> None:
        self._ended(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._ended(result, "failed")

    def v2_runner_on_skipped(self, result) -> None:
        self._ended(result, "skipped")

    def v2_runner_on_unreachable(self, result) -> None:
        self._ended(result, "unreachable")

    def v2_playbook_on_stats(self, stats) -> None:
        self._write(ev="stats")
