"""Action ``drivelab_run_files`` (role drivelab's, for the roles that depend on it:
pgbench_run's entry point ``stats``, pgbench_database's ``facts``, candidate_drive's
device facts): writes files into a run folder on the controller, each atomically (a
temporary file beside it, then a rename): an object as indented JSON (as
``to_nice_json``), a list as lines of text. A
file's name is its base name only: nothing is written outside the folder.

It runs where it is: on the controller, in the worker of the task, with no module sent
anywhere. The command it replaced (a constant Python script run by ``command`` delegated
to localhost) cost a module run and two Python start-ups, twice on the DB host's path of
every repetition (docs/scaling.md, "Why the hot path is shaped as it is"). In check mode
nothing is written."""

from __future__ import annotations

import json
import os

from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = {
    "dir": {"type": "path", "required": True},
    "files": {"type": "dict", "required": True},
}


def write_files(folder: str, files: dict) -> list[str]:
    """Writes ``files`` ({name: object or list of lines}) into ``folder``; returns the
    paths written, in order."""
    written = []
    for name, value in files.items():
        path = os.path.join(folder, os.path.basename(name))
        if isinstance(value, list):
            text = "".join(f"{line}\n" for line in value)
        else:
            text = json.dumps(value, indent=4, sort_keys=True) + "\n"
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(path + ".tmp", path)
        written.append(path)
    return written


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: nothing written")
            return result
        try:
            written = write_files(args["dir"], args["files"])
        except OSError as exc:
            result.update(failed=True, msg=f"{exc.filename or args['dir']}: {exc.strerror}")
            return result
        result.update(changed=True, written=written)
        return result
