"""pgbench's command line (role pgbench_run's filter drivelab_pgbench_argv), held to one
the lab ran (tests/data/physics: a single-client hdd7200 run's command.json) and to
pgbench's options for each mode, log, rate and limit."""

from __future__ import annotations

import importlib.util
import json

import pytest

from collector.paths import REPO

_spec = importlib.util.spec_from_file_location(
    "drivelab_pgbench_filter", REPO / "roles/pgbench_run/filter_plugins/pgbench.py"
)
assert _spec and _spec.loader
pgbench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pgbench)

#: the role's defaults as the entry point arm passes them, for the captured run
RUN = {
    "host": "10.213.0.2", "port": 5440, "database": "drivelab_client1", "clients": 1,
    "threads": 1, "duration": 10, "transactions": 0, "mode": "tpcb",
    "script": "/home/drivelab/c/runs/x/script.sql", "rate": 0, "latency_limit": 0,
    "progress": 1, "log": "full", "sampling_rate": 0.01, "aggregate_interval": 1,
    "peer_timeout": 10,
}  # fmt: skip


def test_the_argv_is_the_one_a_lab_run_recorded():
    captured = REPO / "tests/data/physics/runs/hdd7200-single/client1/command.json"
    assert pgbench.drivelab_pgbench_argv(RUN) == json.loads(captured.read_text())["argv"]


@pytest.mark.parametrize(
    ("change", "has", "lacks"),
    [
        ({"mode": "select-only"}, ["-S"], ["-N", "-f"]),
        ({"mode": "simple-update"}, ["-N"], ["-S"]),
        ({"mode": "custom"}, ["-f", RUN["script"]], ["-S", "-N"]),
        ({"duration": 0, "transactions": 500}, ["-t", "500"], ["-T"]),
        ({"rate": 40, "latency_limit": 250}, ["-R", "40", "-L", "250"], []),
        ({"progress": 0}, [], ["-P", "--progress-timestamp"]),
        ({"log": "sampled"}, ["--log", "--sampling-rate=0.01"], []),
        ({"log": "aggregate", "aggregate_interval": 5}, ["--aggregate-interval=5"], []),
        ({"log": "none"}, [], ["--log"]),
        ({"protocol": "prepared"}, ["-M", "prepared"], []),
        ({"protocol": "extended", "mode": "select-only"}, ["-S", "-M", "extended"], []),
        ({"protocol": "simple"}, [], ["-M"]),
        ({"mix": ["tpcb-like@9", "select-only@1"]}, ["-b tpcb-like@9 -b select-only@1"], ["-S"]),
        ({"mix": ["tpcb-like@4", "script@1"]}, [f"-b tpcb-like@4 -f {RUN['script']}@1"], ["-S"]),
    ],
)
def test_each_setting_is_its_pgbench_option(change, has, lacks):
    argv = pgbench.drivelab_pgbench_argv({**RUN, **change})
    text = " ".join(argv[:-1])
    assert " ".join(has) in text
    assert not [word for word in lacks if word in argv]
    assert argv[0] == "pgbench" and argv[-1].startswith("dbname=drivelab_client1 ")


def test_a_silent_server_is_given_up_after_the_peer_timeout():
    assert pgbench.conninfo("d", 3).endswith("keepalives_idle=1 keepalives_interval=1 "
                                            "keepalives_count=1 tcp_user_timeout=3000")  # fmt: skip


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"mix": ["tpcb-like@9; rm -rf /"]}, "not <built-in script>@<weight>"),
        ({"mix": ["select-only@0"]}, "not <built-in script>@<weight>"),
        ({"mix": ["script@1x"]}, "or script@<weight>"),
        ({"mix": ["/etc/passwd@1"]}, "or script@<weight>"),
        (
            {"mix": ["tpcb-like@1"], "mode": "select-only"},
            "in place of a mode, not beside select-only",
        ),
    ],
)
def test_a_mix_word_out_of_shape_never_reaches_pgbench(change, says):
    with pytest.raises(pgbench.AnsibleFilterError) as err:
        pgbench.drivelab_pgbench_argv({**RUN, **change})
    assert says in str(err.value)
