"""The lab's lease, seen from the controller: one file on the DB host saying who measures
or writes there now (its rules: ``roles/drivelab/module_utils/drivelab_lease.py``, the
same code the module ``drivelab_lease`` runs in playbooks).

``drivelab run`` takes it after preflight and before provisioning (:meth:`Lease.holding`),
renews it every sixth of its time to live from a thread (a heartbeat: one SSH exec of the
rule book over a connection kept open for the run), gives its token to every playbook
(each stage checks on the host that the run still holds it), and releases it at the end.
Another holder refuses the run in one line naming it, unless ``--wait``; a holder on this
controller whose process is gone, or one that has not renewed within its time to live, is
taken over, said in one line. A run that loses its lease stops its running playbook and
ends (:class:`LeaseLost`).

Reaching the DB host: over SSH with the inventory's key and known_hosts (as the live view
does, :func:`collector.scenario.inventory.ssh_settings`), else through ``ansible`` (an
ad-hoc call of the module, a process start and a module run each, dear on the controller's
CPU: docs/scaling.md, "Why the hot path is shaped as it is").
"""

from __future__ import annotations

import getpass
import importlib.util
import json
import os
import shlex
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from collector.ansible_plugins.filter.drivelab import controller_id, pid_start
from collector.errors import DrivelabError, HostFailure, LabBusy
from collector.hosts import playbook
from collector.paths import REPO, ansible_bin
from collector.scenario.inventory import host_vars

ROLE = REPO / "roles" / "drivelab"
UTILS_PATH = ROLE / "module_utils" / "drivelab_lease.py"
#: seconds between two attempts of a waiting run (--wait)
WAIT_POLL_S = 10.0


def _rules() -> Any:
    spec = importlib.util.spec_from_file_location("drivelab_lease_rules", UTILS_PATH)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load {UTILS_PATH}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the DB host's rule book (describe, the refusal codes), as the module uses it
RULES = _rules()


LeaseLost = playbook.LeaseLost


@dataclass(frozen=True)
class Settings:
    """Role drivelab's lease facts for one DB host (its inventory's values over the role's
    defaults)."""

    file: str
    ttl: float
    playbook_ttl: float

    @property
    def renew_every(self) -> float:
        return self.ttl / 6


def settings(inventory: dict, host: str) -> Settings:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    hv = {**defaults, **host_vars(inventory, host)}
    try:
        return Settings(
            str(hv["drivelab_lease_file"]),
            float(hv["drivelab_lease_ttl"]),
            float(hv["drivelab_lease_playbook_ttl"]),
        )
    except (TypeError, ValueError) as err:
        raise DrivelabError(f"inventory: {host}: drivelab_lease_*: {err}") from None


def db_host(inventory: dict) -> str:
    try:
        return next(iter(inventory["all"]["children"]["db"]["hosts"]))
    except (KeyError, TypeError, StopIteration):
        raise DrivelabError("inventory: no DB host (group db): no lab lease to read") from None


# ---------------------------------------------------------------------- reaching the host


class Transport(Protocol):
    cheap: bool

    def call(self, request: dict[str, Any]) -> dict[str, Any]: ...
    def close(self) -> None: ...


class SshTransport:
    """The rule book run by the host's python3 over one SSH connection kept open
    (paramiko, the inventory's key, its known_hosts only): one exec and no process start
    on the controller per call. A dropped connection is opened again on the next call."""

    #: a call is cheap (no new connection, no Ansible): the run renews before every playbook
    cheap = True

    def __init__(self, ssh: dict[str, Any], timeout: float = 20.0) -> None:
        self.ssh = ssh
        self.timeout = timeout
        self._client: Any = None
        self._lock = threading.Lock()
        code = UTILS_PATH.read_text(encoding="utf-8") + "\nmain_stdin()\n"
        sudo = "" if ssh["user"] == "root" else "sudo -n "
        self.command = f"{sudo}python3 -c {shlex.quote(code)}"

    def _connect(self) -> Any:
        from collector.hosts.sshhosts import connect  # noqa: PLC0415

        client = connect(self.ssh, self.timeout)
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(5)
        return client

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._client is None:
                        self._client = self._connect()
                    stdin, stdout, stderr = self._client.exec_command(
                        self.command, timeout=self.timeout
                    )
                    stdin.write(json.dumps(request) + "\n")
                    stdin.flush()
                    stdin.channel.shutdown_write()
                    out = stdout.read().decode("utf-8", "replace")
                    err = stderr.read().decode("utf-8", "replace")
                    break
                except Exception as exc:  # paramiko's, socket's: all mean "not reached"
                    self.close()
                    if attempt == 2:
                        where = f"{self.ssh['user']}@{self.ssh['host']}:{self.ssh['port']}"
                        raise HostFailure(f"lab lease: cannot reach {where}: {exc}") from None
            try:
                return json.loads(out)
            except ValueError:
                # the host answered, but not with the rule book's answer (no python3, a
                # login that cannot run it): the host's failure, not the input's
                last = (err.strip().splitlines() or [out.strip() or "no output"])[-1]
                raise HostFailure(f"lab lease: {self.ssh['host']}: {last[:200]}") from None

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()


class AnsibleTransport:
    """The module drivelab_lease, called ad hoc with ``ansible`` (an inventory without an
    SSH key and known_hosts file of its own: Ansible knows how to reach the host)."""

    #: a call is an ansible process and a module run: each playbook checks on the host itself
    cheap = False

    def __init__(self, inventory: Path, host: str) -> None:
        self.inventory = inventory
        self.host = host

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        args: dict[str, Any] = {"path": request["path"], "host": self.host}
        op = request["op"]
        if op == "take":
            holder = dict(request["holder"])
            args |= {
                "state": "held", "token": holder.pop("token"), "holder": holder,
                "ttl": request["ttl"], "must_hold": bool(request.get("must_hold")),
            }  # fmt: skip
            for key in ("expected_seconds", "takeover"):
                if request.get(key) is not None:
                    args[key] = request[key]
        elif op == "release":
            args |= {"state": "absent", "token": request["token"]}
        else:
            args["state"] = "query"
        env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_LIBRARY=str(ROLE / "library"),
            ANSIBLE_MODULE_UTILS=str(ROLE / "module_utils"),
            ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
            ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        )
        argv = [ansible_bin("ansible"), self.host, "-i", str(self.inventory),
                "-m", "drivelab_lease", "-a", json.dumps(args)]  # fmt: skip
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
        try:
            doc = json.loads(proc.stdout[proc.stdout.index("{") :])
            res = doc["plays"][0]["tasks"][0]["hosts"][self.host]
        except (ValueError, KeyError, IndexError):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise DrivelabError(
                f"lab lease: ansible exited {proc.returncode}: {last[:200]}"
            ) from None
        if res.get("unreachable") or (
            res.get("failed") and "held" not in res and "lease" not in res
        ):
            why = " ".join(str(res.get("msg") or "no answer").split())
            raise HostFailure(f"lab lease: {self.host}: {why[:200]}")
        return res

    def close(self) -> None:
        pass


def transport_for(
    inventory_path: Path, inventory: dict, host: str, timeout: float = 20.0
) -> Transport:
    """SSH when the inventory names a key and a known_hosts file for ``host``, else
    Ansible; ``timeout``: seconds to connect (and to wait for an answer)."""
    from collector.scenario.inventory import ssh_settings  # noqa: PLC0415

    ssh = ssh_settings(inventory, host)
    return (
        SshTransport(ssh, timeout=timeout)
        if ssh is not None
        else AnsibleTransport(inventory_path, host)
    )


# ---------------------------------------------------------------------- reading it


def describe(record: dict[str, Any] | None, now: float | None = None) -> str:
    """``free``, or who holds it, running what, since when (the host's words)."""
    return "free" if not record else RULES.describe(record, now)


def query(inventory_path: Path, inventory: dict) -> dict[str, Any]:
    """{db_host, lease (None: free), stale (seconds past its time to live, or None),
    text}: the lease as ``drivelab status`` and ``drivelab lab status`` show it."""
    host = db_host(inventory)
    st = settings(inventory, host)
    # a status is asked by a person waiting: a host that does not answer is said soon
    transport = transport_for(inventory_path, inventory, host, timeout=5.0)
    try:
        res = transport.call({"op": "query", "path": st.file})
    finally:
        transport.close()
    if "error" in res:
        raise HostFailure(f"lab lease: {host}: {res['error']}")
    record, stale = res.get("lease"), res.get("stale")
    text = describe(record, res.get("now"))
    if record and stale is not None:
        text += f" (not renewed within its {RULES._span(record['ttl'])}: may be taken over)"
    elif record and gone(record):
        text += f" (its process {record['pid']} is gone: may be taken over)"
    public = {k: v for k, v in (record or {}).items() if k != "token"}
    return {"db_host": host, "lease": public or None, "stale": stale, "text": text}


def gone(record: dict[str, Any]) -> bool:
    """The holder ran on this controller and its process is no longer there."""
    if record.get("controller_id") != controller_id() or not record.get("pid"):
        return False
    start = pid_start(record["pid"])
    return start is None or (record.get("pid_start") is not None and start != record["pid_start"])


# ---------------------------------------------------------------------- holding it


class Lease:
    """The lease of one ``drivelab run`` on its DB host."""

    def __init__(
        self,
        transport: Transport,
        settings: Settings,
        host: str,
        *,
        scenario: str,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        self.transport = transport
        self.settings = settings
        self.host = host
        self.say = say
        self.clock = clock
        self.sleep = sleep
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = str(os.getuid())
        pid = os.getpid()
        self.holder = {
            "token": uuid.uuid4().hex,
            "user": user,
            "controller": socket.gethostname(),
            "controller_id": controller_id(),
            "pid": pid,
            "pid_start": pid_start(pid),
            "purpose": "drivelab run",
            "scenario": scenario,
            "cell": None,
        }
        #: the cell being run (sent with every renewal: status shows it)
        self.cell: str | None = None
        #: set when the lease is lost; ``why`` says how
        self.lost = threading.Event()
        self.why = ""
        #: the run's fact ``lab_lease``: the holder taken over, when there was one
        self.took_over: dict[str, Any] | None = None
        self.since: float | None = None
        self.renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_ok = 0.0

    @property
    def token(self) -> str:
        return self.holder["token"]

    def _take(self, **extra: Any) -> dict[str, Any]:
        req = {"op": "take", "path": self.settings.file, "holder": dict(self.holder),
               "ttl": self.settings.ttl, **extra}  # fmt: skip
        res = self.transport.call(req)
        if "error" in res:
            raise HostFailure(f"lab lease: {self.host}: {res['error']}")
        return res

    def take(self, *, wait: bool = False, expected_seconds: float | None = None) -> None:
        """Takes the lease, or raises one line naming its holder (``wait``: polls every
        :data:`WAIT_POLL_S` seconds until it is free). A holder on this controller whose
        process is gone is taken over at once; one that has not renewed within its time
        to live, by the host's rule book."""
        started = self.clock()
        said = None
        takeover = None
        while True:
            res = self._take(expected_seconds=expected_seconds, takeover=takeover)
            if res.get("held"):
                break
            record = res.get("lease") or {}
            if takeover is None and record and gone(record):
                takeover = record.get("token_sha256")
                continue
            takeover = None
            text = f"{self.host} is in use: {describe(record)}"
            if not wait:
                raise LabBusy(
                    f"lab lease: {text}; nothing was touched (--wait waits for it;"
                    " drivelab status shows it)"
                )
            if said != record.get("token_sha256"):
                self.say(f"lab lease: {text}; waiting for it (--wait)")
                said = record.get("token_sha256")
            self.sleep(WAIT_POLL_S)
        self._last_ok = self.clock()
        lease = res["lease"]
        self.since = lease.get("since")
        if res.get("took_over"):
            gone_ = res["took_over"]
            rec = {k: v for k, v in gone_["record"].items() if k != "token"}
            self.took_over = {"record": rec, "why": gone_["why"]}
            self.say(
                f"lab lease: took {self.host} over from {describe(gone_['record'])}: {gone_['why']}"
            )
        self.say(
            f"lab lease: {self.host} held by this run (taken in {self.clock() - started:.1f} s;"
            f" renewed every {self.settings.renew_every:.0f} s, lost after"
            f" {self.settings.ttl:.0f} s without renewal)"
        )

    def renew(self) -> bool:
        """One heartbeat: the lease renewed (with the current cell), or :attr:`lost` set.
        True when the host renewed it."""
        if self.lost.is_set():
            return False
        self.holder["cell"] = self.cell
        try:
            res = self._take(must_hold=True)
        except Exception as err:  # any failure to renew (the heartbeat thread must go on)
            silent = self.clock() - self._last_ok
            if silent >= self.settings.ttl:
                self._lose(f"not renewed for {silent:.0f} s ({err})")
            return False
        if res.get("held"):
            self._last_ok = self.clock()
            self.renewals += 1
            return True
        self._lose(res.get("why") or "the host no longer lists this run as its holder")
        return False

    def fresh(self) -> float | None:
        """Renewed now, before a playbook starts, when that is cheap (over the SSH
        connection the heartbeat keeps open): the wall-clock instant it was (the
        playbook's lease play then skips its own check on the host, a task and a module
        run), else None (the Ansible transport, or a renewal that failed: the playbook
        checks on the host, as it always did). A lease found lost is set :attr:`lost`."""
        if not self.transport.cheap:
            return None
        return time.time() if self.renew() else None

    def _lose(self, why: str) -> None:
        self.lose(f"{self.host}: this run lost the lab's lease: {why}")

    def lose(self, text: str) -> None:
        """Lost, for the reason ``text`` (one line): the running playbook is stopped."""
        if not self.lost.is_set():
            self.why = text
            self.lost.set()

    def _beat(self) -> None:
        while not self._stop.wait(self.settings.renew_every):
            self.renew()
            if self.lost.is_set():
                return

    def release(self) -> None:
        if self.lost.is_set():
            return
        res = self.transport.call(
            {"op": "release", "path": self.settings.file, "token": self.token}
        )
        if "error" in res:
            raise HostFailure(f"lab lease: {self.host}: {res['error']}")

    def fact(self) -> dict[str, Any]:
        """The run fact ``lab_lease``: on which host, since when, and whom it took over."""
        return {"db_host": self.host, "since": self.since, "took_over": self.took_over,
                "ttl_s": self.settings.ttl, "renew_every_s": self.settings.renew_every}  # fmt: skip

    @contextmanager
    def holding(
        self, *, wait: bool = False, expected_seconds: float | None = None
    ) -> Iterator[None]:
        """Take it, renew it from a thread, give its token to every playbook (which each
        check it on the host and are stopped when it is lost), release it at the end."""
        try:
            self.take(wait=wait, expected_seconds=expected_seconds)
            self._thread = threading.Thread(target=self._beat, name="drivelab-lease", daemon=True)
            self._thread.start()
            with playbook.guarded_by(self):
                yield
        finally:
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=30)
            try:
                if self.since is not None:
                    self.release()
            except DrivelabError as err:
                # it ends by itself: this process gone, or its time to live over
                self.say(f"lab lease: not released ({err})")
            finally:
                self.transport.close()

    def check(self) -> None:
        """Raises :class:`LeaseLost` when the lease was lost."""
        if self.lost.is_set():
            raise LeaseLost(self.why)
