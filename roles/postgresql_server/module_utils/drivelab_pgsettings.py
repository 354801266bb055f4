"""PostgreSQL settings a scenario or an inventory may give drivelab's cluster, and how the
server's own verdict on them reads.

Shared by the DB host (module ``drivelab_pg_settings``, which asks the installed server:
``postgres -D <cluster's configuration> -c lc_messages=C -c NAME=VALUE -C NAME``) and the
controller (``collector.scenario.pgsettings`` loads this file by path), so a scenario is
refused with the very words the host would use. Pure functions: no I/O.

The server is the judge of names and values (units, ranges, enum values, booleans, as
its configuration-file parser reads them, for the installed version); this module only
says which names drivelab keeps for itself, turns a scenario's YAML value into the text
a settings file holds, reads the server's answer, and checks after a reload or restart
that each setting took.
"""

from __future__ import annotations

import difflib
import math
import re

#: a setting's name: PostgreSQL's unquoted identifier, lower case (63 bytes at most;
#: PostgreSQL ignores case, so DateStyle, IntervalStyle and TimeZone are written
#: datestyle, intervalstyle, timezone: one spelling per setting); custom names with a
#: dot (extensions' ``x.y``) are not settings drivelab knows
NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: a value is written into the settings file between single quotes
MAX_VALUE = 1024

_REACH = "where the clients and drivelab's own tasks reach the server"
_LOST = "how the server notices a lost client"
_LOG = "the server log drivelab reads (checkpoints)"
_TIMING = "the I/O timings drivelab records"
#: settings drivelab sets itself (roles/postgresql_server/templates/etc/postgresql/
#: drivelab.conf.j2 and what it reads), and why: a scenario or inventory cannot set them
OWNED = {
    "listen_addresses": _REACH,
    "port": _REACH,
    "password_encryption": "the clients' logins (scram-sha-256)",
    "tcp_keepalives_idle": _LOST,
    "tcp_keepalives_interval": _LOST,
    "tcp_keepalives_count": _LOST,
    "tcp_user_timeout": _LOST,
    "client_connection_check_interval": _LOST,
    "log_checkpoints": _LOG,
    "log_line_prefix": _LOG,
    "log_timezone": _LOG,
    "log_destination": _LOG,
    "logging_collector": _LOG,
    "log_directory": _LOG,
    "log_filename": _LOG,
    "lc_messages": _LOG + ", in English",
    "track_io_timing": _TIMING,
    "track_wal_io_timing": _TIMING,
}
_FILES = "pg_ctlcluster and drivelab find the cluster's files where Debian's layout puts them"
_SOCKET = "drivelab's tasks log in over the Unix socket"
_LIBRARY = (
    "a library the server cannot load stops it (or every connection), and drivelab installs none"
)
#: settings that would stop the run: the cluster would not start, or drivelab could no
#: longer reach or find it
STOPS_THE_RUN = {
    "data_directory": _FILES,
    "config_file": _FILES,
    "hba_file": _FILES,
    "ident_file": _FILES,
    "external_pid_file": _FILES,
    "unix_socket_directories": _SOCKET,
    "unix_socket_group": _SOCKET,
    "unix_socket_permissions": _SOCKET,
    "shared_preload_libraries": _LIBRARY,
    "session_preload_libraries": _LIBRARY,
    "local_preload_libraries": _LIBRARY,
}

_SHELL = "a shell command the server runs as postgres"
_CODE = "code the server loads into itself"
#: settings that make the server run a program or load code named in the setting: a
#: scenario file may come from anyone, so each is set only where the DB host's
#: inventory allows it by name (ALLOW_VAR)
RUNS_CODE = {
    "archive_command": _SHELL + " for every WAL segment",
    "archive_cleanup_command": _SHELL + " on a standby",
    "restore_command": _SHELL + " in recovery",
    "recovery_end_command": _SHELL + " at the end of recovery",
    "ssl_passphrase_command": _SHELL + " for the SSL key's passphrase",
    "archive_library": _CODE + " to archive WAL",
    "jit_provider": _CODE + " for JIT compilation",
    "dynamic_library_path": "where the server looks for " + _CODE,
}
#: the DB host's variable that lists the RUNS_CODE settings its operator allows
ALLOW_VAR = "postgresql_server_allow_commands"


class Refusal(Exception):
    """A setting drivelab will not pass on; ``str()`` is the line to show."""


def _show(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def name_problem(name, allowed=()):
    """Why drivelab will not set ``name`` (one line, without the name), or None.
    ``allowed``: the RUNS_CODE names the DB host's inventory allows (ALLOW_VAR)."""
    if isinstance(name, str) and name != name.lower() and NAME.fullmatch(name.lower()):
        return f"write {name} in lower case: {name.lower()} (PostgreSQL ignores the case)"
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return f"{_show(name)} is not a setting name ({NAME.pattern})"
    if name in OWNED:
        return f"drivelab sets {name} itself ({OWNED[name]}): not a setting to give"
    if name in STOPS_THE_RUN:
        return f"{name} would stop the run ({STOPS_THE_RUN[name]}): not a setting to give"
    if name in RUNS_CODE and name not in allowed:
        return (
            f"{name} runs {RUNS_CODE[name]}: set only where the DB host's inventory allows"
            f" it ({ALLOW_VAR}: [{name}])"
        )
    return None


def allow_problem(allowed):
    """Why ``allowed`` (the DB host's ALLOW_VAR) is not a list of RUNS_CODE names, or None."""
    if not isinstance(allowed, (list, tuple)):
        return f"{ALLOW_VAR} must be a list of setting names (got {_show(allowed)})"
    for name in allowed:
        if name not in RUNS_CODE:
            return (
                f"{ALLOW_VAR}: {_show(name)} is not a setting that runs code"
                f" (those are: {', '.join(sorted(RUNS_CODE))})"
            )
    return None


def value_text(value):
    """A YAML value as the settings file holds it: true/false as on/off, numbers as
    written; Refusal for anything else (null, a list, a quote, a control character, and
    braces: the value reaches Ansible as an extra variable, which it would template)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Refusal(f"must be a finite number (got {_show(value)})")
        return repr(value)
    if not isinstance(value, str):
        raise Refusal(f"must be a string, a number or true/false (got {_show(value)})")
    if len(value) > MAX_VALUE:
        raise Refusal(f"at most {MAX_VALUE} characters")
    bad = next((c for c in value if c in "'\\{}" or not c.isprintable()), None)
    if bad is not None:
        raise Refusal(f"{_show(value)}: no quotes, backslashes, braces or control characters")
    return value


# --------------------------------------------------------------------------- the server's verdict


def server_lines(stderr):
    """The FATAL (or ERROR) line of ``postgres -C``'s stderr and its HINT, prefixes cut
    (whatever log_line_prefix the cluster has): (message, hint), either may be None."""
    message = hint = None
    for line in stderr.splitlines():
        m = re.search(r"\b(FATAL|ERROR|PANIC):\s+(.*)", line)
        if m and message is None:
            message = m.group(2).strip()
        m = re.search(r"\bHINT:\s+(.*)", line)
        if m and hint is None:
            hint = m.group(1).strip()
    return message, hint


def describe_config(text):
    """``postgres --describe-config`` as {name: {"context", "vartype"}} (tab-separated:
    name, context, group, type, ...). It leaves out a few settings pg_settings lists
    (application_name, developer options): good for suggestions and contexts only."""
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 4 and NAME.fullmatch(parts[0]):
            out[parts[0]] = {"context": parts[1], "vartype": parts[3].lower()}
    return out


def closest(name, known):
    """The known setting name closest to ``name``, or None."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else None


def verdict(name, value, rc, stdout, stderr, known):  # noqa: PLR0917  (one answer, spelled out)
    """What ``postgres ... -c NAME=VALUE -C NAME`` said, as a dict: ``ok`` and the
    value as the server reads it (``setting``, in its base unit: 256MB -> 32768), or
    ``unknown`` / ``message``: the reason in one line, to follow "PostgreSQL 15 on
    dbhost". ``known``: the names the server knows (describe_config), for a suggestion."""
    message, hint = server_lines(stderr)
    if rc == 0 and message is None:
        lines = stdout.splitlines()
        return {"name": name, "value": value, "ok": True, "setting": lines[-1] if lines else ""}
    out = {"name": name, "value": value, "ok": False, "unknown": False}
    if message and message.startswith("unrecognized configuration parameter"):
        out["unknown"] = True
        near = closest(name, known)
        out["message"] = f"has no setting {name}" + (f" (did you mean {near!r}?)" if near else "")
    elif message and message.endswith("cannot be changed"):
        out["message"] = (
            f"will not change it: {message} (fixed when PostgreSQL was built or the cluster made)"
        )
    else:
        why = message or f"postgres exited {rc}"
        out["message"] = f"refuses {_show(value)}: {why}" + (f" ({hint})" if hint else "")
    return out


# --------------------------------------------------------------------------- after applying


def took(name, expected, row, conf_file=None):
    """Why ``name`` did not take (one line, without the name), or None when it did.

    ``expected`` is the value as the server reads it (the ``setting`` of its verdict);
    ``row`` the pg_settings row once the server was reloaded or restarted (``setting``,
    ``unit``, ``source``, ``sourcefile``, ``sourceline``, ``pending_restart``). A value the
    server computes itself from what was asked (wal_buffers -1: source ``override``)
    took. ``conf_file``: drivelab's settings file, named when another one wins."""
    if row is None:
        return "the server does not list it in pg_settings"
    if row.get("pending_restart"):
        return "changed in the file, but the server still waits for a restart (pending_restart)"
    if str(row.get("setting")) == str(expected) or row.get("source") == "override":
        return None
    unit = f" {row['unit']}" if row.get("unit") else ""
    where = row.get("source") or "?"
    if row.get("sourcefile"):
        where = f"{row['sourcefile']} line {row.get('sourceline')}"
        if conf_file and row["sourcefile"] != conf_file:
            where += f", read after {conf_file}"
    return f"asked {expected}{unit}, the server has {row.get('setting')}{unit} (from {where})"
