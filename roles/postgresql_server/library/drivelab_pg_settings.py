#!/usr/bin/python
"""The PostgreSQL settings of drivelab's cluster, checked by the installed server itself,
applied with a reload (or a restart where one needs it), and verified.

* ``state: check`` (read-only): refuses a setting drivelab keeps for itself, one that
  would stop the run, and one that runs a command or loads code (archive_command,
  ssl_passphrase_command, jit_provider...) unless ``allow_commands`` names it, then asks the installed server about each of ``settings``:
  ``postgres -D <conf_dir> -c lc_messages=C -c NAME=VALUE -C NAME`` (as postgres; no
  cluster needs to run). Unknown names (with the closest known one), bad values, units
  the server would not parse: one line, nothing changed. Returns ``settings`` (the text
  the settings file gets) and ``expected`` (each as the server reads it: 256MB -> 32768;
  not ``values``, which Jinja would take for the dict's method). With ``dest``, the
  same module run then writes the settings file: ``head`` (drivelab's own lines) and one
  ``name = 'value'`` line per setting, sorted, atomically, owned by postgres, only when
  its text differs (``written``); a template task after the check cost a module run of
  its own in every database stage (docs/scaling.md).
* ``state: judge`` (read-only): the same verdict for each of ``pairs`` ({name, value}),
  never failing: what ``drivelab run`` checks a scenario with before anything runs.
* ``state: apply``: with the cluster running, and when the settings file ``changed``:
  reload, wait until the server has read its files again (``pg_conf_load_time``), and
  restart only when a changed setting waits for one (``pending_restart``). Then, whether
  or not the file changed, every setting of ``expected`` must have taken (pg_settings
  ``setting`` as the server read it, no pending restart): one line naming the setting
  otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_pgsettings import (
    Refusal,
    allow_problem,
    describe_config,
    name_problem,
    took,
    value_text,
    verdict,
)
from ansible.module_utils.drivelab_pgstart import ctl_argv, systemd_runs_here

DOCUMENTATION = r"""
module: drivelab_pg_settings
short_description: check PostgreSQL settings with the installed server, apply them (reload or restart), verify
options:
  state: {description: "check (refuse what the server or drivelab would not take), judge (a verdict per pair), apply (reload or restart, verify)", type: str, choices: [check, judge, apply], default: check}
  settings: {description: "check: the settings to write (name: value)", type: dict, default: {}}
  allow_commands: {description: "check, judge: the settings that run a command or load code (archive_command...) this DB host's operator allows; any other is refused", type: list, elements: str, default: []}
  pairs: {description: "judge: [{name, value}] to ask the server about", type: list, elements: dict, default: []}
  expected: {description: "apply: each setting as the server reads it (check's expected)", type: dict, default: {}}
  changed: {description: "apply: the settings file changed", type: bool, default: false}
  major: {description: PostgreSQL major version, type: str, required: true}
  cluster: {description: "apply: the cluster's name (pg_ctlcluster)", type: str, default: drivelab}
  conf_dir: {description: "the cluster's configuration folder (/etc/postgresql/<major>/<cluster>)", type: path, required: true}
  port: {description: "apply: the cluster's port", type: int, default: 5440}
  dest: {description: "check: the settings file to write once the check passed (empty: none)", type: path}
  head: {description: "check with dest: the file's text before the settings lines", type: str, default: ""}
  socket: {description: "apply: the Unix socket folder", type: path, default: /var/run/postgresql}
"""

ENV = {"LC_ALL": "C", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
#: the columns of pg_settings the verification reads
ROW = "name, setting, unit, context, source, sourcefile, sourceline, pending_restart"


class Server:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        p = module.params
        self.bin = f"/usr/lib/postgresql/{p['major']}/bin"
        self.conf_dir = p["conf_dir"]
        self.runuser = module.get_bin_path(
            "runuser", required=True, opt_dirs=["/usr/sbin", "/sbin"]
        )

    def as_postgres(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.runuser, "-u", "postgres", "--", *argv],
            capture_output=True, text=True, check=False, env=ENV, timeout=timeout,
        )  # fmt: skip

    def known(self) -> dict:
        proc = self.as_postgres(f"{self.bin}/postgres", "--describe-config")
        return describe_config(proc.stdout) if proc.returncode == 0 else {}

    def judge(self, name: str, text: str, known: dict) -> dict:
        proc = self.as_postgres(
            f"{self.bin}/postgres", "-D", self.conf_dir, "-c", "lc_messages=C",
            "-c", f"{name}={text}", "-C", name,
        )  # fmt: skip
        out = verdict(name, text, proc.returncode, proc.stdout, proc.stderr, known)
        out["context"] = known.get(name, {}).get("context")
        return out

    # ------------------------------------------------------------------ the running cluster

    def sql(self, query: str) -> str | None:
        p = self.module.params
        proc = self.as_postgres(
            f"{self.bin}/psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
            "-h", p["socket"], "-p", str(p["port"]), "-d", "postgres", "-c", query,
            timeout=30,
        )  # fmt: skip
        return proc.stdout.strip() if proc.returncode == 0 else None

    def rows(self, names: list[str]) -> dict:
        if not names:
            return {}
        quoted = ", ".join("'" + n.replace("'", "''") + "'" for n in names)
        # pg_settings spells a few names in mixed case (TimeZone); drivelab's are lower case
        text = self.sql(
            f"SELECT coalesce(json_agg(s), '[]') FROM (SELECT {ROW} FROM pg_settings"  # noqa: S608
            f" WHERE lower(name) IN ({quoted})) s"
        )
        if text is None:
            self.fail("cannot read pg_settings from the running cluster")
        return {r["name"].lower(): r for r in json.loads(text)}

    def wait(self, what: str, check, seconds: float):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.2)
        self.fail(f"timed out after {seconds:.0f} s waiting for {what}")
        return None

    def ctl(self, action: str) -> None:
        p = self.module.params
        proc = subprocess.run(
            ctl_argv(p["major"], p["cluster"], action, systemd_runs_here()),
            capture_output=True, text=True, check=False, env=ENV, timeout=300,
        )  # fmt: skip
        if proc.returncode != 0:
            words = " ".join((proc.stderr + proc.stdout).split())
            fatal = words[words.find("FATAL:") :] if "FATAL:" in words else words
            self.fail(f"pg_ctlcluster {action} failed with the new settings: {fatal[:300]}")

    def fail(self, message: str) -> None:
        p = self.module.params
        self.module.fail_json(msg=f"cluster {p['major']}/{p['cluster']}: {message}")


def allowed(module: AnsibleModule) -> list:
    """The DB host's allowed settings that run code (ALLOW_VAR), or a failure."""
    allow = module.params["allow_commands"]
    problem = allow_problem(allow)
    if problem:
        module.fail_json(msg=problem, refusal="bad_allow")
    return allow


def check(module: AnsibleModule, server: Server) -> None:
    settings = module.params["settings"]
    allow = allowed(module)
    texts = {}
    for name in sorted(settings):
        problem = name_problem(name, allow)
        if problem:
            module.fail_json(msg=f"setting {name}: {problem}", refusal="owned")
        try:
            texts[name] = value_text(settings[name])
        except Refusal as err:
            module.fail_json(msg=f"setting {name}: {err}", refusal="bad_value")
    if not os.path.exists(os.path.join(server.conf_dir, "postgresql.conf")):
        if module.check_mode:  # the cluster is not made in check mode
            module.exit_json(changed=False, settings=texts, expected={}, checked=False)
        server.fail(f"no {server.conf_dir}/postgresql.conf: the cluster does not exist")
    known = server.known()
    values = {}
    for name, text in texts.items():
        v = server.judge(name, text, known)
        if not v["ok"]:
            code = "unknown" if v.get("unknown") else "bad_value"
            major = module.params["major"]
            module.fail_json(msg=f"setting {name}: PostgreSQL {major} {v['message']}", refusal=code)
        values[name] = v["setting"]
    written = bool(module.params["dest"]) and write(module, texts)
    module.exit_json(
        changed=written, written=written, settings=texts, expected=values, checked=True
    )


def settings_file(head: str, texts: dict) -> str:
    """The settings file's text: ``head``, then a line per setting, sorted by name (the
    values passed value_text: no quotes or backslashes to escape)."""
    lines = [f"{name} = '{texts[name]}'\n" for name in sorted(texts)]
    return head.rstrip("\n") + "\n" + "".join(lines)


def write(module: AnsibleModule, texts: dict) -> bool:
    """Writes ``dest`` (owner postgres, mode 0644) when its text differs; True if so
    (in check mode: would)."""
    dest = module.params["dest"]
    text = settings_file(module.params["head"], texts)
    try:
        with open(dest, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    if module.check_mode:
        return True
    pg = pwd.getpwnam("postgres")
    fd, tmp = tempfile.mkstemp(prefix=".drivelab-", dir=os.path.dirname(dest))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chown(tmp, pg.pw_uid, pg.pw_gid)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def judge(module: AnsibleModule, server: Server) -> None:
    if not os.path.exists(os.path.join(server.conf_dir, "postgresql.conf")):
        server.fail(f"no {server.conf_dir}/postgresql.conf: provision the DB host first")
    allow = allowed(module)
    known = server.known()
    out = []
    for pair in module.params["pairs"]:
        name, value = pair.get("name"), pair.get("value")
        problem = name_problem(name, allow)
        if problem:
            out.append({"name": name, "value": value, "ok": False, "message": problem})
            continue
        try:
            text = value_text(value)
        except Refusal as err:
            out.append({"name": name, "value": value, "ok": False, "message": str(err)})
            continue
        out.append(server.judge(name, text, known))
    module.exit_json(changed=False, verdicts=out, known=len(known))


def apply(module: AnsibleModule, server: Server) -> None:
    p = module.params
    expected = p["expected"]
    reloaded = restarted = False
    restart_for: list[str] = []
    if module.check_mode:
        module.exit_json(changed=p["changed"])
    if server.sql("SELECT 1") is None:
        server.fail("does not run: cannot apply its settings")
    if p["changed"]:
        loaded = server.sql("SELECT pg_conf_load_time()")
        server.ctl("reload")
        server.wait(
            "the server to read its settings again",
            lambda: server.sql("SELECT pg_conf_load_time()") not in (None, loaded),
            30,
        )
        reloaded = True
        text = server.sql("SELECT coalesce(json_agg(name ORDER BY name), '[]') FROM pg_settings"
                          " WHERE pending_restart")  # fmt: skip
        restart_for = json.loads(text or "[]")
        if restart_for:
            server.ctl("restart")
            server.wait("the cluster to accept connections again",
                        lambda: server.sql("SELECT 1") is not None, 120)  # fmt: skip
            restarted = True
    rows = server.rows(sorted(expected))
    conf_file = os.path.join(server.conf_dir, "conf.d", "drivelab.conf")
    for name in sorted(expected):
        problem = took(name, expected[name], rows.get(name), conf_file)
        if problem:
            server.fail(f"setting {name} did not take: {problem}")
    module.exit_json(
        changed=reloaded or restarted, reloaded=reloaded, restarted=restarted,
        restart_for=restart_for,
        applied={n: rows[n]["setting"] for n in sorted(expected) if n in rows},
    )  # fmt: skip


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["check", "judge", "apply"], "default": "check"},
            "settings": {"type": "dict", "default": {}},
            "allow_commands": {"type": "list", "elements": "str", "default": []},
            "pairs": {"type": "list", "elements": "dict", "default": []},
            "expected": {"type": "dict", "default": {}},
            "changed": {"type": "bool", "default": False},
            "major": {"type": "str", "required": True},
            "cluster": {"type": "str", "default": "drivelab"},
            "conf_dir": {"type": "path", "required": True},
            "port": {"type": "int", "default": 5440},
            "socket": {"type": "path", "default": "/var/run/postgresql"},
            "dest": {"type": "path"},
            "head": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    server = Server(module)
    {"check": check, "judge": judge, "apply": apply}[module.params["state"]](module, server)


if __name__ == "__main__":
    main()
