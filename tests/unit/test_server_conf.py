"""The settings file drivelab writes for its cluster (roles/postgresql_server/templates/
etc/postgresql/drivelab.conf.j2) names only parameters the server's major version knows:
an unknown parameter stops PostgreSQL from starting. The distributions operators have
ship 13 (Debian 11) to 17 (Debian 13)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import jinja2
import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "roles/postgresql_server/templates/etc/postgresql/drivelab.conf.j2"
#: the first major version with each parameter the template writes (release notes)
SINCE = {
    "listen_addresses": 8,
    "port": 8,
    "password_encryption": 10,  # with the value scram-sha-256
    "client_connection_check_interval": 14,
    "tcp_user_timeout": 12,
    "tcp_keepalives_idle": 8,
    "tcp_keepalives_interval": 8,
    "tcp_keepalives_count": 8,
    "log_checkpoints": 8,
    "log_line_prefix": 8,
    "log_timezone": 8,
    "track_io_timing": 9,  # 9.2
    "track_wal_io_timing": 14,
}


def render(version: int) -> list[str]:
    return [m[1] for m in re.finditer(r"^([a-z_]+) = ", render_text(version), re.M)]


def render_text(version: int) -> str:
    # a settings file, not HTML: nothing to escape
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)  # noqa: S701
    env.filters["comment"] = lambda text: f"# {text}"
    return env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="managed",
        __postgresql_server_listen="10.213.0.2",
        drivelab_pg_port=5433,
        drivelab_pg_major=str(version),
    )


@pytest.mark.parametrize("version", [13, 14, 15, 16, 17])
def test_every_parameter_written_is_known_to_that_version(version):
    names = render(version)
    assert names, "the template wrote no parameters"
    unknown = [n for n in names if n not in SINCE]
    assert not unknown, f"add to SINCE, with the version that brought it: {unknown}"
    too_new = [n for n in names if SINCE[n] > version]
    assert not too_new, f"PostgreSQL {version} would not start: {too_new}"


def test_a_vanished_client_is_noticed_where_the_server_can():
    assert "client_connection_check_interval" not in render(13)
    assert "client_connection_check_interval" in render(14)


def test_wal_io_timing_where_the_server_has_it():
    assert "track_wal_io_timing" not in render(13)
    assert "track_wal_io_timing" in render(14)


def test_the_log_lines_carry_a_utc_timestamp():
    """collector.parse.pglog places checkpoints in time by the %m prefix, in UTC."""
    text = render_text(15)
    assert re.search(r"^log_line_prefix = '%m ", text, re.M)
    assert "log_timezone = 'UTC'" in text
    assert "log_checkpoints = on" in text


def test_the_installed_server_knows_every_parameter_written_for_it():
    """The real server of this machine (its --describe-config), not only the table."""
    servers = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    assert servers, "no PostgreSQL server installed (make setup installs one)"
    postgres = servers[-1]
    version = int(postgres.parts[-3])
    out = subprocess.run(
        ["runuser", "-u", "postgres", "--", str(postgres), "--describe-config"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    known = {line.split("\t")[0] for line in out.splitlines()}
    assert not [n for n in render(version) if n not in known]
