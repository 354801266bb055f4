"""Action ``drivelab_start`` (role pgbench_run, entry point ``run``): the second phase
of the synchronized start, run once on the controller for every client at once.

Each client's wrapper (``pgbench-at --go FIFO``) arms by making a named pipe and waits
on it for the line "START_AT CHOSEN_AT". This action opens one session per client, all
at once: ``ssh`` with the host's inventory settings (address, port, user, key, its ssh
arguments; ``sudo -n`` when the host becomes root as another user), or a local shell for
``ansible_connection: local``. Each session waits for the client's pipe, says "armed",
reads one line and writes it into the pipe. When every client said armed, the start
instant is chosen ``lead`` seconds ahead and the line goes to every session. Handing it
over costs the controller one write per client into a session already open, so the lead
no longer follows Ansible's cost per client and per task (a task per client to check the
pipe and another to write it cost 0.12 s per client at 2 clients and 0.3 s at 32).

A client whose session fails, or whose pipe does not appear within ``arm_timeout``
seconds, is left out and named in ``left_out`` (its reason); the others get the instant,
as a host that fails a task is left out of the rest of a play. The task itself fails
only when no client is left.

It returns only 0.2 s after the instant: Ansible's next task forks a worker per client,
CPU the clients would wake and connect on where they share the controller's cores.

Returns ``chosen_at``, ``start_at`` and ``returned_at`` (epoch seconds), ``lead_s``,
``armed_s`` (from this action's start until every client was armed), ``sent_s`` (from
the choice until every client had written the line into its pipe), ``clients`` (those
started) and ``left_out`` ({host: reason}).
"""

from __future__ import annotations

import os
import selectors
import shlex
import subprocess
import time

from ansible.plugins.action import ActionBase

#: runs on each client: $1 the pipe, $2 seconds to wait for it. Constant: no value is
#: ever put into it, they come as arguments.
SESSION_SH = r"""
timeout "$2" sh -c 'until test -p "$0"; do sleep 0.02; done' "$1" || {
    echo "no named pipe $1 after $2 s: the wrapper did not arm" >&2; exit 3; }
echo armed
IFS= read -r line || { echo "the session ended before the instant came" >&2; exit 4; }
test -p "$1" || { echo "the named pipe $1 went away: the wrapper ended" >&2; exit 5; }
printf '%s\n' "$line" > "$1" && echo sent
"""

#: seconds after the instant this action still keeps the controller quiet (in the lab,
#: the clients share its cores)
QUIET_AFTER_S = 0.2

ARGUMENT_SPEC = {
    "fifos": {"type": "dict", "required": True},
    "lead": {"type": "float", "required": True},
    "arm_timeout": {"type": "int", "required": True},
}


class Session:
    """One client's session: its process, what it said, and why it ended."""

    def __init__(self, host: str, argv: list[str]) -> None:
        self.host = host
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        self.said = b""
        self.armed = False
        self.sent = False
        self.why = ""

    def ended(self) -> str:
        """Why the session ended: its last line on stderr, else its exit code."""
        try:
            _, err = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        return lines[-1].strip() if lines else f"session exited {self.proc.returncode}"

    def tell(self, line: str) -> None:
        try:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.close()
        except OSError as exc:  # the session died under us: said when it is read
            self.why = f"could not hand the line over: {exc}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def session_argv(host: str, hv, fifo: str, timeout: int, become: bool) -> list[str]:
    """How to open one client's session, from its inventory variables ``hv``."""
    script = ["sh", "-c", SESSION_SH, "drivelab-start", fifo, str(timeout)]
    if str(hv.get("ansible_connection", "ssh")) == "local":
        return script
    user = str(hv.get("ansible_user") or hv.get("ansible_ssh_user") or "root")
    if become and user != "root":
        script = ["sudo", "-n", *script]
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        argv += shlex.split(str(hv.get(key) or ""))
    key_file = hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file")
    if key_file:
        argv += ["-i", os.path.expanduser(str(key_file))]
    argv += ["-p", str(hv.get("ansible_port") or hv.get("ansible_ssh_port") or 22), "-l", user]
    return [*argv, str(hv.get("ansible_host") or host), shlex.join(script)]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        hostvars = task_vars["hostvars"]
        started = time.time()
        sessions: dict[str, Session] = {}
        left_out: dict[str, str] = {}
        try:
            for host, fifo in args["fifos"].items():
                hv = hostvars[host]
                become = bool(hv.get("ansible_become", self._play_context.become))
                argv = session_argv(host, hv, str(fifo), args["arm_timeout"], become)
                try:
                    sessions[host] = Session(host, argv)
                except OSError as exc:
                    left_out[host] = f"could not open a session: {exc}"
            self._wait(sessions, "armed", started + args["arm_timeout"] + 30, left_out)
            if not sessions:
                why = "; ".join(f"{h}: {w}" for h, w in sorted(left_out.items()))
                result.update(failed=True, left_out=left_out, msg=f"no client armed: {why}")
                return result
            armed_s = time.time() - started
            chosen = time.time()
            start_at = round(chosen + args["lead"], 3)
            line = f"{start_at:.3f} {chosen:.6f}\n"
            for s in sessions.values():
                s.tell(line)
            self._wait(sessions, "sent", time.time() + 30, left_out)
            sent_s = time.time() - chosen
        finally:
            for s in sessions.values():
                s.stop()
        # back to Ansible only after the instant and the clients' first connections: its
        # next tasks (a worker forked per client) would take the CPU the clients wake on
        time.sleep(max(0.0, start_at + QUIET_AFTER_S - time.time()))
        result.update(
            changed=True, chosen_at=chosen, start_at=start_at, lead_s=args["lead"],
            returned_at=time.time(),
            armed_s=round(armed_s, 3), sent_s=round(sent_s, 3), left_out=left_out,
            clients=sorted(sessions),
        )  # fmt: skip
        return result

    @staticmethod
    def _wait(sessions: dict[str, Session], word: str, deadline: float, left_out) -> None:
        """Until every session said ``word`` (a line of its stdout); a session that ends
        or says nothing by ``deadline`` is removed from ``sessions`` into ``left_out``."""
        flag = word  # "armed" or "sent": the Session attribute of the same name
        waiting = {s.host: s for s in sessions.values() if not getattr(s, flag)}
        with selectors.DefaultSelector() as sel:
            for s in waiting.values():
                sel.register(s.proc.stdout, selectors.EVENT_READ, s)
            while waiting:
                left = deadline - time.time()
                if left <= 0:
                    for host, s in waiting.items():
                        left_out[host] = s.why or f"said nothing for {word} in time"
                        s.stop()
                        del sessions[host]
                    return
                for key, _ in sel.select(left):
                    s = key.data
                    chunk = os.read(s.proc.stdout.fileno(), 4096)
                    s.said += chunk
                    if f"{word}\n".encode() in s.said:
                        setattr(s, flag, True)
                        s.said = b""
                    elif not chunk:  # ended without saying it
                        left_out[s.host] = s.why or s.ended()
                        del sessions[s.host]
                    else:
                        continue
                    sel.unregister(s.proc.stdout)
                    del waiting[s.host]
