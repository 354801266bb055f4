#!/usr/bin/python
"""A daemon run without a service manager: started in the background with
start-stop-daemon from the Ansible session (in the namespace lab that puts it in the
host's network namespace and cgroups), its pid in a pidfile. start-stop-daemon matches
the pidfile's process by its executable, so a stale pidfile or a reused pid is never
signalled. The user and arguments it was started with are recorded beside it; when they
change, the running daemon is stopped and started again with the new ones. With
``wait_port``, the call returns once something accepts connections on that port and the
daemon still runs (someone else on the port does not pass for it), and fails as soon as
the daemon has died: one module run where a start, ``wait_for`` and a status were three
(docs/scaling.md, "Why the hot path is shaped as it is")."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: drivelab_daemon
short_description: a pidfile daemon started with start-stop-daemon (no service manager)
options:
  executable: {description: the daemon's program (start-stop-daemon --exec), type: path, required: true}
  pidfile: {description: its pidfile, type: path, required: true}
  state:
    description: >-
      started (running with these user and arguments: started, or stopped and started again when the
      recorded ones differ), reloaded (SIGHUP when it runs), status (only read whether it runs; never changes anything)
    type: str
    choices: [started, reloaded, status]
    default: started
  args: {description: its arguments (state started), type: list, elements: str, default: []}
  user: {description: user it runs as (--chuid; state started), type: str}
  log: {description: file its stdout and stderr go to (state started), type: path}
  args_file: {description: "where the user and arguments are recorded, one per line (state started)", type: path}
  stop_timeout: {description: seconds after SIGTERM before SIGKILL when it is stopped for a restart, type: int, default: 5}
  wait_port: {description: "state started: wait until this TCP port accepts connections (and the daemon still runs)", type: int}
  wait_host: {description: "the address to connect to for wait_port", type: str, default: 127.0.0.1}
  wait_timeout: {description: seconds to wait for wait_port, type: int, default: 30}
"""

RETURN = r"""
running: {description: the pidfile's process runs (after the change, in check mode: before it), type: bool}
started: {description: it was started by this call, type: bool}
stopped: {description: a running daemon was stopped because its user or arguments changed, type: bool}
args_changed: {description: the recorded user and arguments differed from those asked for, type: bool}
rc: {description: "state status: start-stop-daemon --status's exit code (0 runs, 1 dead with a pidfile, 3 not running, 4 unknown)", type: int}
waited: {description: "wait_port: seconds until the port accepted a connection", type: float}
"""


def ssd(*argv):
    """start-stop-daemon with these arguments: (rc, output)."""
    proc = subprocess.run(["start-stop-daemon", *argv], capture_output=True, text=True, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def match(params):
    return ["--pidfile", params["pidfile"], "--exec", params["executable"]]


def probe(params):
    """True when the pidfile's process runs (start --test: 0 would start, 1 runs)."""
    rc, out = ssd("--start", "--test", "--quiet", *match(params))
    if rc not in (0, 1):
        raise DaemonError(f"start-stop-daemon --start --test exited {rc}: {out}")
    return rc == 1


def stop(params):
    """Stop the pidfile's process (TERM, then KILL): True when one was running."""
    retry = f"TERM/{params['stop_timeout']}/KILL/5"
    rc, out = ssd("--stop", "--quiet", "--retry", retry, "--remove-pidfile", *match(params))
    if rc not in (0, 1):
        raise DaemonError(f"start-stop-daemon --stop exited {rc}: {out}")
    return rc == 0


def start(params):
    rc, out = ssd(
        "--start", "--background", "--make-pidfile", "--pidfile", params["pidfile"],
        "--output", params["log"], "--chuid", params["user"],
        "--exec", params["executable"], "--", *params["args"],
    )  # fmt: skip
    if rc != 0:
        raise DaemonError(f"start-stop-daemon --start exited {rc}: {out}")


def recorded(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def record(path, text):
    """Write the record whole (a temporary file renamed over it), root's, mode 0644."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".drivelab-daemon-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class DaemonError(Exception):
    pass


def alive(params):
    """The daemon's state: "running" (the pidfile's process is the daemon), "starting" (no
    pidfile yet, or its process has not exec'd the daemon yet: start-stop-daemon
    --background returns before that) or "dead"."""
    if probe(params):
        return "running"
    try:
        with open(params["pidfile"], encoding="utf-8") as fh:
            pid = int(fh.read().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return "starting"
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            zombie = fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return "dead"
    return "dead" if zombie else "starting"


def accepts(host, port):
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def wait_listening(params):
    """Seconds until ``wait_host:wait_port`` accepts a connection while the daemon runs
    (someone else on the port does not pass for it); DaemonError as soon as it is dead,
    or when the time is up."""
    where = f"{params['wait_host']}:{params['wait_port']}"
    began = time.monotonic()
    while True:
        state = alive(params)
        if state == "dead":
            raise DaemonError(f"not running: it exited after its start (see {params['log']})")
        if state == "running" and accepts(params["wait_host"], params["wait_port"]):
            return round(time.monotonic() - began, 3)
        if time.monotonic() - began > params["wait_timeout"]:
            raise DaemonError(
                f"nothing accepts connections on {where} after {params['wait_timeout']} s"
                f" (see {params['log']})"
            )
        time.sleep(0.05)


def started(module, params):
    want = "\n".join([f"--chuid={params['user']}", *params["args"]]) + "\n"
    have = recorded(params["args_file"])
    args_changed = have != want
    result = {"args_changed": args_changed, "stopped": False, "started": False}
    if args_changed:
        result["diff"] = {
            "before_header": params["args_file"],
            "after_header": params["args_file"],
            "before": have or "",
            "after": want,
        }
    running = probe(params)
    if module.check_mode:
        result.update(changed=args_changed or not running, running=running)
        return result
    if args_changed:
        record(params["args_file"], want)
        result["stopped"] = running and stop(params)
        running = probe(params)
    if not running:
        start(params)
        result["started"] = True
    result.update(changed=args_changed or result["started"], running=True)
    if params["wait_port"] is not None:
        result["waited"] = wait_listening(params)
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "executable": {"type": "path", "required": True},
            "pidfile": {"type": "path", "required": True},
            "state": {
                "type": "str",
                "choices": ["started", "reloaded", "status"],
                "default": "started",
            },
            "args": {"type": "list", "elements": "str", "default": []},
            "user": {"type": "str"},
            "log": {"type": "path"},
            "args_file": {"type": "path"},
            "stop_timeout": {"type": "int", "default": 5},
            "wait_port": {"type": "int"},
            "wait_host": {"type": "str", "default": "127.0.0.1"},
            "wait_timeout": {"type": "int", "default": 30},
        },
        required_if=[("state", "started", ("user", "log", "args_file"))],
        supports_check_mode=True,
    )
    params = module.params
    try:
        if params["state"] == "status":
            rc, _ = ssd("--status", *match(params))
            module.exit_json(changed=False, running=rc == 0, rc=rc)
        if params["state"] == "reloaded":
            if module.check_mode:
                running = probe(params)
                module.exit_json(changed=running, running=running)
            # rc 1: not running; it reads its configuration when it starts
            rc, out = ssd("--stop", "--quiet", "--signal", "HUP", *match(params))
            if rc not in (0, 1):
                raise DaemonError(f"start-stop-daemon --stop --signal HUP exited {rc}: {out}")
            module.exit_json(changed=rc == 0, running=rc == 0)
        module.exit_json(**started(module, params))
    except (DaemonError, OSError) as err:
        module.fail_json(msg=f"{params['executable']} ({params['pidfile']}): {err}")


if __name__ == "__main__":
    main()
