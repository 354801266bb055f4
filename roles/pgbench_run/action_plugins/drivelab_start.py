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
pipe and another to write it: docs/scaling.md, "Why the hot path is shaped as it is").

A client whose session fails, or whose pipe does not appear within ``arm_timeout``
seconds, is left out and named in ``left_out`` (its reason); the others get the instant,
as a host that fails a task is left out of the rest of a play. The task itself fails
only when no client is left.

With ``run_dirs`` (a run of ``duration`` seconds), the sessions stay open through the
run and bring the outputs back: at the run's planned end the action tells each session,
which waits for its wrapper's ``command.json`` (written last, when pgbench has ended),
packs the run folder and sends the archive's size and the archive, which the action
unpacks into ``fetch_to``/<host>/. That replaces a sleep to the end rounded up to a
whole second, a poll per client every second, and three of the four module runs per
client of the ``fetch`` entry point (pack, fetch, unpack); its removal of the run
folder stays, a little later: the live view's follower ends when it has read the
wrapper's ``rc.txt``, which it polls every 0.2 s, and it would miss it in a folder
removed at once. A client whose outputs do not arrive within
``end_grace`` seconds of the planned end (its link cut, its wrapper killed) is named in
``not_fetched`` and left to Ansible's own path (the wait on the client, the ``fetch`` entry
point), which reports it as it always did. Without ``run_dirs`` it returns 0.2 s after
the instant: Ansible's next task forks a worker per client, CPU the clients would wake
and connect on where they share the controller's cores.

With ``db_after`` (``host``: the DB host, ``params``: module drivelab_pg_snapshot's
options after the run), one more session, to the DB host, is opened with the others:
python3 there loads the snapshot's code (module_utils drivelab_snapshot and the two it
imports, sent as the session's arguments) and waits. Once every client's outputs are in
(so every pgbench has ended), the action tells it to go: it reads the server's counters
and the log's checkpoint lines since the before snapshot, and returns them as
``db_after`` ({snapshot, log}); the play after the run writes them and runs no module for
them (that play 0.71-0.76 -> 0.45-0.47 s, this action 0.14-0.16 s longer: docs/scaling.md,
"Why the hot path is shaped as it is"). When anything else happened (a
client left out or not fetched, the session failed, the query failed), ``db_after`` is
empty, ``db_after_why`` says why, and that play reads them in its module run as before.

Clocks: every client decides the instant by its own clock, and real hosts' clocks differ
(milliseconds with NTP, seconds without it). Once all are armed, each session is asked
for its clock ``CLOCK_ROUNDS`` times, every client at once (NTP's exchange: the
controller's clock before and after, the client's in between), and the exchange of least
round trip gives the client's offset, within half that round trip (an offset within its
bound is no offset: clocks that agree are not corrected by the measure's own error). The
line each client gets is "START_AT CHOSEN_AT OFFSET BOUND MEASURED": the instant and the
choice on the controller's clock, the offset applied and its bound, the offset measured;
the wrapper waits for
START_AT + OFFSET on its own clock and records both, so the collector puts the client's
timestamps on the controller's clock.

Returns ``chosen_at``, ``start_at`` and ``returned_at`` (epoch seconds), ``lead_s``,
``armed_s`` (from this action's start until every client was armed), ``clock_s`` (the
clock exchanges), ``sent_s`` (from the choice until every client had written the line
into its pipe), ``clients`` (those started), ``left_out`` ({host: reason}), ``clocks``
({host: {offset_s: measured, bound_s, applied_s}}), and with ``run_dirs``: ``fetched``
(hosts whose outputs are in ``fetch_to``), ``not_fetched`` ({host: reason}) and
``fetched_s`` (from the planned end until the last outputs were unpacked); with
``db_after``: ``db_after``, ``db_after_why`` and ``db_after_s`` (from the last outputs
unpacked until the DB host's answer).
"""

from __future__ import annotations

import json
import os
import selectors
import shlex
import subprocess
import time
from pathlib import Path

from ansible.plugins.action import ActionBase

#: runs on each client: $1 the pipe, $2 seconds to wait for it, $3 the run folder to
#: bring back after the run ("": none), $4 how many 50 ms polls to wait for its end after
#: the controller said the run's planned end came. Constant: no value is ever put into
#: it, they come as arguments.
SESSION_SH = r"""
timeout "$2" sh -c 'until test -p "$0"; do sleep 0.02; done' "$1" || {
    echo "no named pipe $1 after $2 s: the wrapper did not arm" >&2; exit 3; }
echo armed
line=
while IFS= read -r line; do
    case "$line" in
    t) echo "c $(date +%s.%N)" ;;
    *) break ;;
    esac
done
test -n "$line" || { echo "the session ended before the instant came" >&2; exit 4; }
test -p "$1" || { echo "the named pipe $1 went away: the wrapper ended" >&2; exit 5; }
printf '%s\n' "$line" > "$1" && echo sent || exit 6
test -n "$3" || exit 0
IFS= read -r line || exit 0
n=0
until test -e "$3/command.json"; do
    n=$((n + 1)); test "$n" -le "$4" || { echo "the wrapper did not end" >&2; exit 7; }
    sleep 0.05
done
tar -C "$3" -czf "$3.tar.gz" . || { echo "could not pack $3" >&2; exit 8; }
echo "ended $(stat -c %s "$3.tar.gz")"
exec cat "$3.tar.gz"
"""

#: clock exchanges per client once it is armed (the one of least round trip is kept), and
#: how long one may take before its client is left out
CLOCK_ROUNDS = 5
CLOCK_TIMEOUT_S = 10.0

#: seconds after the instant this action still keeps the controller quiet (in the lab,
#: the clients share its cores)
QUIET_AFTER_S = 0.2

#: runs on the DB host (python3 -c): loads the module_utils sources given as JSON ($2: [name,
#: source] pairs in import order) as ansible.module_utils.<name>, says "ready", waits for
#: "go" on stdin (anything else, or its end: exits 0), then reads the snapshot with the
#: parameters in $1 and prints {snapshot, log} or {failed: why} as one JSON line.
#: Constant: every value comes as an argument.
SNAPSHOT_PY = r"""
import json, os, subprocess, sys, types
for name in ("ansible", "ansible.module_utils"):
    sys.modules[name] = types.ModuleType(name)
    sys.modules[name].__path__ = []
for name, source in json.loads(sys.argv[2]):
    module = types.ModuleType("ansible.module_utils." + name)
    sys.modules[module.__name__] = module
    exec(compile(source, name + ".py", "exec"), module.__dict__)
print("ready", flush=True)
if sys.stdin.readline().strip() != "go":
    sys.exit(0)


class Runner:
    def run_command(self, argv, data=None, environ_update=None):
        env = dict(os.environ, **(environ_update or {}))
        done = subprocess.run(argv, input=data, capture_output=True, text=True, env=env)
        return done.returncode, done.stdout, done.stderr


params = json.loads(sys.argv[1])
psql = sys.modules["ansible.module_utils.drivelab_psql"]
try:
    out = sys.modules["ansible.module_utils.drivelab_snapshot"].snapshot(Runner(), params)
except psql.PsqlError as err:
    out = {"failed": "snapshot of the server on port %s: %s" % (params["port"], err)}
print(json.dumps(out), flush=True)
"""

#: the snapshot's code the DB host's session loads, in import order (the roles' own files)
ROLES = Path(__file__).resolve().parents[2]
SNAPSHOT_SOURCES = (
    ("drivelab_psql", ROLES / "drivelab/module_utils/drivelab_psql.py"),
    ("drivelab_checkpointlog", ROLES / "pgbench_run/module_utils/drivelab_checkpointlog.py"),
    ("drivelab_snapshot", ROLES / "pgbench_run/module_utils/drivelab_snapshot.py"),
)

#: seconds the DB host's session may take to answer once told to go
DB_AFTER_TIMEOUT_S = 30.0

ARGUMENT_SPEC = {
    "fifos": {"type": "dict", "required": True},
    "lead": {"type": "float", "required": True},
    "arm_timeout": {"type": "int", "required": True},
    "run_dirs": {"type": "dict", "default": {}},
    "duration": {"type": "int", "default": 0},
    "fetch_to": {"type": "str", "default": ""},
    "end_grace": {"type": "float", "default": 10.0},
    "db_after": {"type": "dict", "default": {}},
}

#: how the action unpacks a client's archive (as the ``fetch`` entry point does)
UNPACK = ("tar", "--no-same-owner", "-xzf", "-", "-C")


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
        self.size: int | None = None  # of the archive, once the session said "ended"
        # the client's clock against this one: (round trip, offset) of the best exchange
        self.clock: tuple[float, float] | None = None

    def ended(self) -> str:
        """Why the session ended: its last line on stderr, else its exit code."""
        try:
            _, err = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        return lines[-1].strip() if lines else f"session exited {self.proc.returncode}"

    def clock_answer(self, sent: float) -> str | None:
        """Reads the session's answer to a clock exchange asked at ``sent`` and keeps it in
        ``clock`` when its round trip is the least yet. Returns None while the line is not
        whole, "" once it was read, why the session is left out otherwise (stopped)."""
        chunk = os.read(self.proc.stdout.fileno(), 4096)
        self.said += chunk
        if b"\n" not in self.said:
            return None if chunk else (self.why or self.ended())
        received = time.time()
        head = self.said.split(b"\n", 1)[0]
        try:
            client = float(head.removeprefix(b"c "))
        except ValueError:
            self.stop()
            return f"answered the clock exchange with {head[:80]!r}"
        rtt, offset = offset_from(sent, client, received)
        if self.clock is None or rtt < self.clock[0]:
            self.clock = (rtt, offset)
        return ""

    def bound(self) -> float:
        """How far the measured offset may be from the truth: half the round trip."""
        return self.clock[0] / 2 if self.clock else 0.0

    def applied(self) -> float:
        """The offset the client's instant is corrected by: the measured one, unless it
        is within its bound (then the clocks agree as far as can be told, and a
        correction would only add the measure's own error: 0)."""
        if self.clock is None or abs(self.clock[1]) <= self.bound():
            return 0.0
        return self.clock[1]

    def tell(self, line: str, last: bool = True) -> None:
        try:
            self.proc.stdin.write(line.encode())
            if last:
                self.proc.stdin.close()
            else:
                self.proc.stdin.flush()
        except OSError as exc:  # the session died under us: said when it is read
            self.why = f"could not hand the line over: {exc}"

    def archive(self, chunk: bytes) -> bytes | None:
        """Fed what the session sent after the run's end ("ended SIZE", then SIZE bytes):
        None while more is to come, the archive once whole, b"" if the session ended or
        said something else first."""
        self.said += chunk
        if self.size is None and b"\n" in self.said:
            head, self.said = self.said.split(b"\n", 1)
            try:
                self.size = int(head.removeprefix(b"ended "))
            except ValueError:
                return b""
        if self.size is not None and len(self.said) >= self.size:
            return self.said[: self.size] or b""
        return b"" if not chunk else None

    def finish(self, timeout: float = 10) -> None:
        """Let the session end on its own, or stop it."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class DbSnapshot:
    """The DB host's session: python3 there, the snapshot's code loaded, waiting to go."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip

    def read(self, timeout: float = DB_AFTER_TIMEOUT_S) -> tuple[dict, str]:
        """Told to go: (its {snapshot, log}, "") or ({}, why not)."""
        try:
            out, err = self.proc.communicate(b"go\n", timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            return {}, f"the DB host did not answer within {timeout:g} s"
        last = (out.decode(errors="replace").strip().splitlines() or [""])[-1]
        try:
            doc = json.loads(last) if last.startswith("{") else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or ("snapshot" not in doc and "failed" not in doc):
            lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
            why = lines[-1].strip() if lines else f"its session exited {self.proc.returncode}"
            return {}, f"the DB host's session: {why}"
        if "failed" in doc:
            return {}, str(doc["failed"])
        return doc, ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def db_session_argv(host: str, hv, params: dict, become: bool) -> list[str]:
    """How to open the DB host's session, from its inventory variables ``hv``: its
    Python (the inventory's, a command line as Ansible takes it, "/usr/bin/env python3"
    say; else python3) with :data:`SNAPSHOT_PY`, the parameters and the snapshot's
    sources as arguments."""
    python = str(hv.get("ansible_python_interpreter") or "python3")
    words = shlex.split(python) if not (python.startswith("auto") or "{" in python) else []
    sources = [(name, path.read_text(encoding="utf-8")) for name, path in SNAPSHOT_SOURCES]
    script = [*(words or ["python3"]), "-c", SNAPSHOT_PY, json.dumps(params), json.dumps(sources)]
    return remote_argv(host, hv, script, become)


def snapshot_params(given: dict) -> dict:
    """module drivelab_pg_snapshot's options after the run, typed as the module types
    them (they come from facts, where a number may be a string)."""
    since = given.get("since")
    return {
        "port": int(given["port"]),
        "socket": str(given.get("socket") or "/var/run/postgresql"),
        "sql": str(given["sql"]),
        "checkpoint_log": True,
        "since": None if since in (None, "") else float(since),
        "cluster": str(given["cluster"]),
        "major": str(given["major"]),
    }


def offset_from(sent: float, client: float, received: float) -> tuple[float, float]:
    """One NTP-style exchange: the controller asked at ``sent`` and had the answer at
    ``received`` (its clock), the client read its clock (``client``) in between. Returns
    (round trip, offset): the client's clock minus the controller's, taken at the middle
    of the round trip; it is within half the round trip of the truth."""
    rtt = max(0.0, received - sent)
    return rtt, client - (sent + received) / 2


def unpack(archive: bytes, dest: str) -> str | None:
    """The archive unpacked into ``dest`` (made if missing); why not, or None."""
    try:
        os.makedirs(dest, exist_ok=True)
        done = subprocess.run(
            [*UNPACK, dest], input=archive, capture_output=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not unpack its outputs: {exc}"
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines() or [
            f"exit {done.returncode}"
        ]
        return f"could not unpack its outputs: {lines[-1]}"
    return None


def session_argv(
    host: str, hv, fifo: str, timeout: int, become: bool, *, run_dir: str = "", polls: int = 0
) -> list[str]:
    """How to open one client's session, from its inventory variables ``hv``."""
    script = ["sh", "-c", SESSION_SH, "drivelab-start", fifo, str(timeout), run_dir, str(polls)]
    return remote_argv(host, hv, script, become)


#: a session that only answers clock exchanges ("t" -> "c <epoch>") until told anything
#: else (``drivelab check`` measures each host's clock with it)
CLOCK_SH = r"""
while IFS= read -r line; do
    case "$line" in
    t) echo "c $(date +%s.%N)" ;;
    *) exit 0 ;;
    esac
done
"""


def remote_argv(host: str, hv, script: list[str], become: bool) -> list[str]:
    """``script`` (an argv) run on ``host`` over ssh with its inventory variables ``hv``
    (address, port, user, key, its ssh arguments; ``sudo -n`` when ``become`` and the
    login is not root), or as it is for ``ansible_connection: local``."""
    if str(hv.get("ansible_connection", "ssh")) == "local":
        return script
    user = str(hv.get("ansible_user") or hv.get("ansible_ssh_user") or "root")
    if become and user != "root":
        script = ["sudo", "-n", *script]
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        argv += shlex.split(str(hv.get(key) or ""))
    # as Ansible's own connections (ansible.cfg): a session held through a run notices a
    # client gone silent (the inventory's, given first, win)
    argv += ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
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
        fetching = bool(args["run_dirs"]) and args["duration"] > 0 and bool(args["fetch_to"])
        started = time.time()
        sessions: dict[str, Session] = {}
        left_out: dict[str, str] = {}
        fetched: list[str] = []
        not_fetched: dict[str, str] = {}
        fetched_s = None
        # the DB host's session, opened with the clients' ones
        db, db_why = self._db_session(args["db_after"] if fetching else {}, hostvars)
        db_after, db_after_s = {}, None
        try:
            self._open(sessions, args, hostvars, fetching, left_out)
            self._wait(sessions, "armed", started + args["arm_timeout"] + 30, left_out)
            if not sessions:
                why = "; ".join(f"{h}: {w}" for h, w in sorted(left_out.items()))
                result.update(failed=True, left_out=left_out, msg=f"no client armed: {why}")
                return result
            armed_s = time.time() - started
            self._clocks(sessions, left_out)
            if not sessions:
                why = "; ".join(f"{h}: {w}" for h, w in sorted(left_out.items()))
                result.update(failed=True, left_out=left_out, msg=f"no client armed: {why}")
                return result
            chosen = time.time()
            clock_s = chosen - started - armed_s
            start_at = round(chosen + args["lead"], 3)
            for s in sessions.values():
                # the instant and the choice on the controller's clock, and how far the
                # client's is from it: the wrapper waits for the instant on its own clock
                measured = s.clock[1] if s.clock else 0.0
                clock = f"{s.applied():.6f} {s.bound():.6f} {measured:.6f}"
                line = f"{start_at:.3f} {chosen:.6f} {clock}\n"
                s.tell(line, last=not fetching)
            self._wait(sessions, "sent", time.time() + 30, left_out)
            sent_s = time.time() - chosen
            if fetching:
                planned_end = start_at + args["duration"]
                time.sleep(max(0.0, planned_end - time.time()))
                deadline = planned_end + args["end_grace"] + 5
                fetched, not_fetched = self._fetch(sessions, args["fetch_to"], deadline)
                fetched_s = round(time.time() - planned_end, 3)
                if db is not None:
                    db_after, db_why, db_after_s = self._db_read(db, left_out or not_fetched)
        finally:
            for s in sessions.values():
                s.stop()
            if db is not None:
                db.stop()
        # back to Ansible only after the instant and the clients' first connections: its
        # next tasks (a worker forked per client) would take the CPU the clients wake on
        time.sleep(max(0.0, start_at + QUIET_AFTER_S - time.time()))
        result.update(
            changed=True, chosen_at=chosen, start_at=start_at, lead_s=args["lead"],
            returned_at=time.time(),
            armed_s=round(armed_s, 3), clock_s=round(clock_s, 3), sent_s=round(sent_s, 3),
            left_out=left_out,
            clients=sorted(sessions), fetched=sorted(fetched), not_fetched=not_fetched,
            fetched_s=fetched_s,
            db_after=db_after, db_after_why=db_why, db_after_s=db_after_s,
            clocks={
                h: {"offset_s": round(s.clock[1], 6), "bound_s": round(s.bound(), 6),
                    "applied_s": round(s.applied(), 6)}
                for h, s in sessions.items() if s.clock
            },
        )  # fmt: skip
        return result

    def _open(self, sessions: dict[str, Session], args, hostvars, fetching: bool, left_out):
        """One session per client into ``sessions``, all at once (one that cannot open:
        ``left_out``)."""
        polls = int(args["end_grace"] / 0.05)
        for host, fifo in args["fifos"].items():
            hv = hostvars[host]
            become = bool(hv.get("ansible_become", self._play_context.become))
            run_dir = str(args["run_dirs"].get(host, "")) if fetching else ""
            argv = session_argv(
                host, hv, str(fifo), args["arm_timeout"], become, run_dir=run_dir, polls=polls
            )
            try:
                sessions[host] = Session(host, argv)
            except OSError as exc:
                left_out[host] = f"could not open a session: {exc}"

    def _db_session(self, db_after: dict, hostvars) -> tuple[DbSnapshot | None, str]:
        """The DB host's session opened (None and why not)."""
        if not db_after:
            return None, "not asked"
        try:
            host = str(db_after["host"])
            params = snapshot_params(db_after["params"])
            hv = hostvars[host]
            become = bool(hv.get("ansible_become", self._play_context.become))
            return DbSnapshot(db_session_argv(host, hv, params, become)), ""
        except (KeyError, TypeError, ValueError, OSError) as exc:
            return None, f"no session to the DB host: {exc!r}"

    @staticmethod
    def _db_read(db: DbSnapshot, missing) -> tuple[dict, str, float | None]:
        """The DB host's counters after the run, once every client's outputs are in
        (``missing``: the clients left out or not fetched, whose pgbench may still run):
        (its {snapshot, log} or {}, why not, seconds it took)."""
        if missing:
            db.stop()
            return {}, "not every client's outputs came back: read in the play after", None
        asked = time.time()
        doc, why = db.read()
        return doc, why, round(time.time() - asked, 3)

    @staticmethod
    def _clocks(sessions: dict[str, Session], left_out, rounds: int = CLOCK_ROUNDS) -> None:
        """Each armed client's clock against the controller's, over its session: ``rounds``
        exchanges with every client at once (the controller writes "t", the session
        answers "c <its epoch>"), the one of least round trip kept in ``Session.clock``.
        A session that ends or does not answer in time is moved to ``left_out``."""
        for _ in range(rounds):
            sent = {}
            for host, s in list(sessions.items()):
                s.said = b""
                sent[host] = time.time()
                s.tell("t\n", last=False)
            waiting = dict(sessions)
            deadline = time.time() + CLOCK_TIMEOUT_S
            with selectors.DefaultSelector() as sel:
                for s in waiting.values():
                    sel.register(s.proc.stdout, selectors.EVENT_READ, s)
                while waiting:
                    left = deadline - time.time()
                    if left <= 0:
                        for host, s in waiting.items():
                            left_out[host] = s.why or "did not answer the clock exchange in time"
                            s.stop()
                            del sessions[host]
                        return
                    for key, _ in sel.select(left):
                        s = key.data
                        why = s.clock_answer(sent[s.host])
                        if why is None:
                            continue  # not a whole line yet
                        if why:
                            left_out[s.host] = why
                            del sessions[s.host]
                        sel.unregister(s.proc.stdout)
                        del waiting[s.host]

    @staticmethod
    def _fetch(sessions: dict[str, Session], fetch_to: str, deadline: float):
        """Tell every session the run's planned end came; read back each one's archive
        ("ended SIZE", then SIZE bytes) and unpack it into ``fetch_to``/<host>/. Returns
        (fetched hosts, {host: why not})."""
        fetched: list[str] = []
        not_fetched: dict[str, str] = {}
        for s in sessions.values():
            s.said = b""
            s.tell("end\n", last=False)
        waiting = dict(sessions)
        with selectors.DefaultSelector() as sel:
            for s in waiting.values():
                sel.register(s.proc.stdout, selectors.EVENT_READ, s)
            while waiting:
                left = deadline - time.time()
                if left <= 0:
                    for host, s in waiting.items():
                        not_fetched[host] = s.why or "its outputs did not come in time"
                        s.stop()
                    break
                for key, _ in sel.select(left):
                    s = key.data
                    archive = s.archive(os.read(s.proc.stdout.fileno(), 1 << 16))
                    if archive is None:
                        continue
                    why = unpack(archive, os.path.join(fetch_to, s.host)) if archive else None
                    if archive and not why:
                        fetched.append(s.host)
                    else:
                        not_fetched[s.host] = why or s.why or s.ended()
                    s.finish()
                    sel.unregister(s.proc.stdout)
                    del waiting[s.host]
        return fetched, not_fetched

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
