# Writes every failed or unreachable task as one JSON line to the file named by
# $DRIVELAB_FAILURES, so the drivelab CLI can tell the user what went wrong in one
# line instead of a screen of Ansible output. Messages of no_log tasks arrive censored.
from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: drivelab_failures
type: notification
short_description: failures as JSON lines for the drivelab CLI
description: >-
  writes {host, task, msg[, refusal[, filesystems]]} for each failed or unreachable task to
  $DRIVELAB_FAILURES
"""


#: what the command, shell and raw modules say of any command that exited non-zero
GENERIC = "non-zero return code"


def _why(res: dict):
    """A failed result's reason. For a command that exited non-zero, its exit status and
    the last line it wrote to stderr (or, with nothing there, to stdout), where Ansible
    says only "non-zero return code"."""
    msg = res.get("msg") or res.get("stderr") or res.get("reason") or "failed"
    if msg != GENERIC:
        return msg
    said = [line.strip() for line in str(res.get("stderr") or res.get("stdout") or "").splitlines()]
    said = [line for line in said if line]
    rc = res.get("rc")
    head = f"exit {rc}" if isinstance(rc, int) else msg
    return f"{head}: {said[-1]}" if said else head


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "drivelab_failures"
    CALLBACK_NEEDS_ENABLED = True

    def _record(self, result, kind):
        path = os.environ.get("DRIVELAB_FAILURES")
        if not path:
            return
        res = result._result
        # a loop task reports "One or more items failed": the items say why
        items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
        msg = "; ".join(str(_why(r)) for r in items) if items else _why(res)
        if isinstance(msg, list):
            msg = "; ".join(str(m) for m in msg)
        line = {
            "kind": kind,
            "host": result._host.get_name(),
            "task": result._task.get_name(),
            "msg": " ".join(str(msg).split()),
        }
        # a drive module's refusal code: what the controller decides on, never the text
        # (a loop task's is its failed item's: drive_format's re-gate runs per filesystem)
        codes = [r.get("refusal") for r in [res, *items] if isinstance(r.get("refusal"), str)]
        if codes:
            line["refusal"] = codes[0]
            # the filesystems refused so (drive_format names its own)
            names = [
                n for r in [res, *items] if r.get("refusal") == codes[0]
                for n in (r.get("filesystems") if isinstance(r.get("filesystems"), list)
                          else [r.get("filesystem")])
                if isinstance(n, str)
            ]  # fmt: skip
            if names:
                line["filesystems"] = names
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not ignore_errors:
            self._record(result, "failed")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")
