"""collector.verdicts.telemetry against a real node_exporter and a real Prometheus on loopback,
and its parser on captured Prometheus answers (tests/data/telemetry/README.md)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from collector.errors import DrivelabError
from collector.records import Sample
from collector.verdicts import telemetry

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "telemetry"
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
PROMETHEUS = shutil.which("prometheus")
ROLE_DEFAULTS = yaml.safe_load((ROOT / "roles/node_exporter/defaults/main.yml").read_text())
EXCLUDE = ROLE_DEFAULTS["node_exporter_diskstats_exclude"]
URL = "http://127.0.0.1:9/api/v1/query_range"

# --------------------------------------------------------------------------- captured


def _data(name: str):
    return telemetry.parse_response((DATA / name).read_text(), URL)


@pytest.mark.parametrize(
    ("name", "series", "points", "label", "values"),
    [
        ("query_range_written_bytes.json", 2, [11, 11], "device", ["vda", "zram0"]),
        ("query_range_read_await.json", 1, [5], "device", ["vda"]),
        ("query_range_cpu_modes.json", 3, [11, 11, 11], "mode", ["iowait", "system", "user"]),
        # a vector whose only value is +Inf: the series stays, its point is dropped
        ("query_nan.json", 1, [0], "device", ["vda"]),
    ],
    ids=["written-bytes", "await-with-gaps", "cpu-modes", "vector-inf"],
)
def test_parse_captured_answers(name, series, points, label, values):
    parsed = telemetry.parse_matrix(_data(name), URL)
    assert len(parsed) == series
    assert [len(s.points) for s in parsed] == points
    assert [s.labels[label] for s in parsed] == values
    for s in parsed:
        assert all(math.isfinite(v) and v >= 0 for _, v in s.points)
        ts = [t for t, _ in s.points]
        assert ts == sorted(ts)


def test_parse_captured_values_in_base_units():
    written = telemetry.parse_matrix(_data("query_range_written_bytes.json"))
    vda = next(s for s in written if s.labels["device"] == "vda")
    # 4 MiB written and fsync'd each second while the capture ran
    assert vda.points[0] == (1795246637.0, 4308992.0)
    assert [t for t, _ in vda.points] == [1795246637.0 + i for i in range(11)]
    assert sum(1 for _, v in vda.points if v > 4_000_000) == 5
    cpu = telemetry.parse_matrix(_data("query_range_cpu_modes.json"))
    assert all(0 <= v <= 1 for s in cpu for _, v in s.points)
    wait = telemetry.parse_matrix(_data("query_range_read_await.json"))[0]
    # seconds per read, only for seconds that had reads (1795246638..41 had none)
    assert [t for t, _ in wait.points] == [
        1795246637,
        1795246642,
        1795246645,
        1795246646,
        1795246647,
    ]
    assert wait.points[1][1] == pytest.approx(0.0035)


def test_captured_error_answer_is_one_line_naming_the_url():
    with pytest.raises(DrivelabError) as err:
        _data("query_range_bad_query.json")
    msg = str(err.value)
    assert msg == (
        f"Prometheus {URL}: bad_data: 1:38: parse error: missing unit character in duration"
    )


def test_captured_targets():
    targets = telemetry.parse_targets(_data("targets.json"))
    assert [(t.labels["job"], t.health, t.up) for t in targets] == [
        ("drivelab_live", "down", False),
        ("node", "up", True),
    ]
    assert "connection refused" in targets[0].last_error
    assert targets[1].labels["drivelab_host"] == "dbhost"
    assert targets[1].scrape_url == "http://127.0.0.1:19100/metrics"


def test_hosts_without_a_node_exporter_scraped_up_are_named():
    """The captured answer: dbhost's node_exporter up; the live exporter (down) is not a
    host's; a client Prometheus has no target for is named, as is one whose target is
    down (telemetry is set up again for them)."""
    targets = telemetry.parse_targets(_data("targets.json"))
    assert telemetry.hosts_not_up(targets, ["dbhost"]) == []
    assert telemetry.hosts_not_up(targets, ["dbhost", "client1"]) == ["client1"]
    down = [replace(t, health="down") if t.labels["job"] == "node" else t for t in targets]
    assert telemetry.hosts_not_up(down, ["dbhost"]) == ["dbhost"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<html>502 Bad Gateway</html>", "not a JSON answer"),
        ("[1, 2]", "not a Prometheus API answer"),
        ('{"status": "error", "error": "line one\\nline two"}', "error: line one line two"),
    ],
    ids=["html", "json-not-api", "multi-line-error"],
)
def test_parse_response_errors(text, expected):
    with pytest.raises(DrivelabError) as err:
        telemetry.parse_response(text, URL)
    assert str(err.value).startswith(f"Prometheus {URL}: ")
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"resultType": "scalar", "result": [1, "2"]}, "expected a matrix or vector, got scalar"),
        ([], "expected a matrix or vector, got list"),
        ({"resultType": "matrix", "result": [{"values": [[1, "x"]]}]}, "malformed series"),
    ],
    ids=["scalar", "list", "bad-value"],
)
def test_parse_matrix_errors(data, expected):
    with pytest.raises(DrivelabError, match=re.escape(expected)):
        telemetry.parse_matrix(data, URL)


# --------------------------------------------------------------------------- PromQL


@pytest.mark.parametrize(
    ("values", "literal"),
    [
        (["loop3"], '"loop3"'),
        (["loop3", "md0"], '"loop3|md0"'),
        (["10.213.0.2:9100"], r'"10\\.213\\.0\\.2:9100"'),
        (['we"ird'], r'"we\"ird"'),
    ],
    ids=["one", "two", "dots", "quote"],
)
def test_label_regex(values, literal):
    assert telemetry.label_regex(values) == literal


@pytest.mark.parametrize(
    ("step", "scrape", "expected"),
    [
        (1.0, 1.0, ("irate", "3000ms")),
        (0.5, 1.0, ("irate", "3000ms")),
        (1.5, 1.0, ("rate", "2000ms")),
        (10.0, 1.0, ("rate", "10000ms")),
        (15.0, 15.0, ("irate", "45000ms")),
    ],
)
def test_rate_expr(step, scrape, expected):
    assert telemetry.rate_expr(step, scrape) == expected


@pytest.mark.parametrize(
    ("device", "excluded"),
    [
        ("loop3", False),  # the local lab's drives: node_exporter's own default drops them
        ("sda", False),
        ("md0", False),
        ("nvme0n1", False),
        ("vda", False),
        ("sda1", True),
        ("vda2", True),
        ("nvme0n1p2", True),
        ("ram0", True),
    ],
)
def test_role_default_diskstats_exclusion(device, excluded):
    assert bool(re.match(EXCLUDE, device)) is excluded


# --------------------------------------------------------------------------- client_bound


def _busy(host: str, values: list[float]) -> list[Sample]:
    return [
        Sample(telemetry.CPU_BUSY, v, "ratio", {"host": host}, 1795246600.0 + i)
        for i, v in enumerate(values)
    ]


@pytest.mark.parametrize(
    ("samples", "threshold", "expected"),
    [
        (_busy("client1", [0.95, 0.97, 0.99]) + _busy("client2", [0.3, 0.4]), 0.9, ["client1"]),
        # the mean decides, not a peak
        (_busy("client1", [1.0, 1.0, 0.5]), 0.9, []),
        # above, not at
        (_busy("client1", [0.9, 0.9]), 0.9, []),
        (_busy("b", [0.92]) + _busy("a", [0.91]), 0.9, ["a", "b"]),
        ([], 0.9, []),
        # device and DB host CPU samples are not clients
        (
            [
                Sample(telemetry.CPU_MODE, 1.0, "ratio", {"host": "dbhost", "mode": "user"}, 1.0),
                Sample("drivelab_device_util_ratio", 1.0, "ratio", {"host": "dbhost"}, 1.0),
            ],
            0.9,
            [],
        ),
        (_busy("client1", [0.6]), 0.5, ["client1"]),
    ],
    ids=[
        "one-bound",
        "mean-not-peak",
        "at-threshold",
        "sorted",
        "none",
        "not-clients",
        "threshold",
    ],
)
def test_client_bound(samples, threshold, expected):
    assert telemetry.client_bound(samples, threshold) == expected


def test_missing_names_devices_and_hosts():
    s = [
        Sample(
            telemetry.DEVICE_PREFIX + "read_iops",
            1,
            "operations/second",
            {"host": "db", "device": "loop3"},
            1.0,
        ),
        Sample(telemetry.CPU_MODE, 0.1, "ratio", {"host": "db", "mode": "user"}, 1.0),
        *_busy("client1", [0.2]),
    ]
    assert telemetry.missing(
        s, db_host="db", clients=["client1", "client2"], devices=["loop3", "sdz"]
    ) == [
        "db loop3: no drivelab_device_write_iops, drivelab_device_read_bytes_per_second,"
        " drivelab_device_write_bytes_per_second, drivelab_device_util_ratio",
        "db sdz: no disk figures",
        "client2: no CPU figures",
    ]


def test_devices_from_facts():
    facts = {
        "filesystem": "raid",
        "drives": [
            {"device": "/dev/loop4", "kname": "loop4", "model": "loop device"},
            {"device": "/dev/loop5", "kname": "loop5", "model": "loop device"},
        ],
    }
    assert telemetry.devices_from_facts(facts) == ["loop4", "loop5"]
    with pytest.raises(DrivelabError) as err:
        telemetry.devices_from_facts({"filesystem": "nvme", "drives": []})
    assert str(err.value) == "device facts of nvme: no drive with a kernel name"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"devices": []}, "telemetry: no candidate device given"),
        ({"instance_label": "in-stance"}, "telemetry: 'in-stance' is not a Prometheus label name"),
        ({"prom_url": "localhost:9490"}, "Prometheus URL 'localhost:9490': write http://HOST:PORT"),
    ],
    ids=["no-device", "bad-label", "bad-url"],
)
def test_run_telemetry_bad_arguments(kwargs, expected):
    args = {"prom_url": "http://127.0.0.1:9", "devices": ["loop3"]} | kwargs
    prom_url = args.pop("prom_url")
    with pytest.raises(DrivelabError) as err:
        telemetry.run_telemetry(prom_url, 0.0, 10.0, db_instance="db", client_instances={}, **args)
    assert str(err.value) == expected


# --------------------------------------------------------------------------- real Prometheus


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310  # loopback http
        return resp.read()


def _wait(what: str, check, proc_log: Path, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, DrivelabError):
            pass
        time.sleep(0.1)
    pytest.fail(f"{what} not ready in {timeout} s: {proc_log.read_text()[-2000:]}")


def _block_device_of(path: Path) -> str | None:
    """Kernel name of the whole disk holding ``path`` (vda for /dev/vda1), or None
    when it is on no block device (tmpfs, overlay)."""
    dev = os.stat(path).st_dev
    sys_dev = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if os.major(dev) == 0 or not sys_dev.exists():
        return None
    real = sys_dev.resolve()
    return real.parent.name if (real / "partition").exists() else real.name


class Lab:
    """A node_exporter and a Prometheus scraping it every second, both on loopback."""

    def __init__(self, root: Path):
        self.root = root
        self.exporter_port = _free_port()
        self.prom_port = _free_port()
        self.url = f"http://127.0.0.1:{self.prom_port}"
        self.instance = f"127.0.0.1:{self.exporter_port}"
        self.procs: list[subprocess.Popen] = []
        self.prom: subprocess.Popen | None = None

    def start(self):
        ne_log = self.root / "node_exporter.log"
        with ne_log.open("wb") as log:
            self.procs.append(
                subprocess.Popen(
                    [
                        NODE_EXPORTER,
                        f"--web.listen-address={self.instance}",
                        "--collector.disable-defaults",
                        "--collector.cpu",
                        "--collector.diskstats",
                        "--collector.meminfo",
                        f"--collector.diskstats.device-exclude={EXCLUDE}",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        config = self.root / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": "node",
                            "static_configs": [
                                {"targets": [self.instance], "labels": {"drivelab_host": "dbhost"}}
                            ],
                        }
                    ],
                }
            )
        )
        prom_log = self.root / "prometheus.log"
        with prom_log.open("wb") as log:
            self.prom = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.prom_port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(self.prom)
        _wait(
            "node_exporter",
            lambda: b"node_disk_" in _get(f"http://{self.instance}/metrics"),
            ne_log,
        )
        _wait("Prometheus", lambda: _get(f"{self.url}/-/ready"), prom_log)
        _wait(
            "the first scrape",
            lambda: any(
                v == 1 for s in telemetry.Prometheus(self.url).query("up") for _, v in s.points
            ),
            prom_log,
        )

    def stop(self):
        for proc in self.procs:  # each by its own pid
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The real pair, some disk I/O on the device of the tmp folder while it scrapes,
    and the window of that I/O."""
    if not (NODE_EXPORTER and PROMETHEUS):
        pytest.skip("prometheus and prometheus-node-exporter are not installed (make setup)")
    root = tmp_path_factory.mktemp("telemetry")
    device = _block_device_of(root)
    if device is None:
        pytest.skip(f"{root} is on no block device: no disk figures to read")
    lab = Lab(root)
    try:
        lab.start()
        time.sleep(2.0)  # irate needs two scrapes before the window opens
        start = time.time()
        target = root / "io.bin"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(6):  # 3 s: 1 MiB written and fsync'd every half second
                os.write(fd, os.urandom(1 << 20))
                os.fsync(fd)
                time.sleep(0.5)
        finally:
            os.close(fd)
        # read it back from the device, not the page cache
        fd = os.open(target, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while os.read(fd, 1 << 20):
                pass
        finally:
            os.close(fd)
        end = time.time()
        time.sleep(2.5)  # the scrapes that close the window
        yield lab, device, start, end
    finally:
        lab.stop()


@pytest.fixture(scope="module")
def samples(live):
    lab, device, start, end = live
    return telemetry.run_telemetry(
        lab.url,
        start,
        end,
        db_instance=lab.instance,
        client_instances={"client1": lab.instance},
        devices=[device],
        db_host="dbhost",
    )


def _by_metric(samples):
    out = defaultdict(list)
    for s in samples:
        out[s.metric].append(s)
    return out


def test_device_figures_every_second(live, samples):
    _, device, start, end = live
    by = _by_metric(samples)
    for name in (
        "read_iops",
        "write_iops",
        "read_bytes_per_second",
        "write_bytes_per_second",
        "util_ratio",
    ):
        got = sorted(by[telemetry.DEVICE_PREFIX + name], key=lambda s: s.timestamp)
        assert got, name
        ts = [s.timestamp for s in got]
        # per second, whole seconds, over the whole window
        assert all(b - a == 1.0 for a, b in itertools.pairwise(ts)), name
        assert ts[0] == math.floor(start) and ts[-1] == math.ceil(end)
        assert {s.labels["device"] for s in got} == {device}
        assert {s.labels["host"] for s in got} == {"dbhost"}
        assert all(s.value >= 0 for s in got)
    units = {s.metric: s.unit for s in samples}
    assert units["drivelab_device_write_iops"] == "operations/second"
    assert units["drivelab_device_write_bytes_per_second"] == "bytes/second"
    assert units["drivelab_device_util_ratio"] == "ratio"
    assert all(0 <= s.value <= 1 for s in by["drivelab_device_util_ratio"])
    written = sum(s.value for s in by["drivelab_device_write_bytes_per_second"])
    # 6 MiB were written and fsync'd in the window (other writers may add to it)
    assert written >= 4 * (1 << 20)
    assert max(s.value for s in by["drivelab_device_write_iops"]) > 0
    for direction in ("read", "write"):
        awaits = by[f"drivelab_device_{direction}_await_seconds"]
        assert all(0 <= s.value < 10 and s.unit == "seconds" for s in awaits)
    assert by["drivelab_device_write_await_seconds"]


def test_cpu_figures_are_ratios(samples):
    by = _by_metric(samples)
    modes = by[telemetry.CPU_MODE]
    assert {s.labels["mode"] for s in modes} == {"user", "system", "iowait"}
    assert {s.labels["host"] for s in modes} == {"dbhost"}
    busy = by[telemetry.CPU_BUSY]
    assert busy and {s.labels["host"] for s in busy} == {"client1"}
    for s in modes + busy:
        assert 0 <= s.value <= 1 and s.unit == "ratio"
    assert telemetry.client_bound(samples, threshold=1.0) == []
    assert telemetry.client_bound(samples, threshold=-0.1) == ["client1"]
    assert [m.startswith(("drivelab_device_", "drivelab_cpu_")) for m in by] == [True] * len(by)


def test_nothing_missing_but_a_wrong_device(live, samples):
    _, device, _, _ = live
    assert telemetry.missing(samples, db_host="dbhost", clients=["client1"], devices=[device]) == []
    assert telemetry.missing(samples, db_host="dbhost", clients=["client1"], devices=["sdzz"]) == [
        "dbhost sdzz: no disk figures"
    ]


def test_by_drivelab_host_label(live):
    """With drivelab's own Prometheus the inventory name selects a host too."""
    lab, device, start, end = live
    got = telemetry.run_telemetry(
        lab.url,
        start,
        end,
        db_instance="dbhost",
        client_instances={"client1": "dbhost"},
        devices=[device],
        instance_label="drivelab_host",
    )
    assert {s.labels["host"] for s in got} == {"dbhost", "client1"}
    assert sum(1 for s in got if s.metric == "drivelab_device_write_iops") >= 4


def test_long_window_in_pieces(live, monkeypatch):
    lab, device, start, end = live
    prom = telemetry.Prometheus(lab.url)
    q = f'node_disk_written_bytes_total{{device="{device}"}}'
    whole = prom.query_range(q, math.floor(start), math.ceil(end), 1.0)
    monkeypatch.setattr(telemetry, "MAX_POINTS", 3)
    pieces = prom.query_range(q, math.floor(start), math.ceil(end), 1.0)
    assert pieces == whole and len(whole[0].points) >= 5


def test_targets_and_instant_query(live):
    lab, _, _, _ = live
    prom = telemetry.Prometheus(lab.url)
    (target,) = prom.targets()
    assert target.up and target.labels["drivelab_host"] == "dbhost"
    assert target.scrape_url == f"http://{lab.instance}/metrics"
    (up,) = prom.query("up")
    assert up.labels["instance"] == lab.instance and up.points[0][1] == 1.0


def test_http_errors_name_the_url(live):
    lab, _, _, _ = live
    prom = telemetry.Prometheus(lab.url)
    with pytest.raises(DrivelabError) as err:
        prom.query_range("rate(node_disk_reads_completed_total[", 0, 10, 1)
    assert str(err.value).startswith(
        f"Prometheus {lab.url}/api/v1/query_range: HTTP 400 bad_data: "
    )
    with pytest.raises(DrivelabError) as err:
        prom._get("/no/such/path")
    assert str(err.value) == f"Prometheus {lab.url}/no/such/path: HTTP 404 Not Found"
    port = _free_port()  # nothing listens there
    with pytest.raises(DrivelabError) as err:
        telemetry.Prometheus(f"http://127.0.0.1:{port}").targets()
    assert str(err.value).startswith(
        f"Prometheus http://127.0.0.1:{port}/api/v1/targets: unreachable ("
    )
    assert "\n" not in str(err.value)


def lab_teardown_module():
    """roles/lab/library/lab_teardown.py, imported with its module_utils in place (both of
    them: run alone, no other test has put drivelab_cgroup in sys.modules)."""
    names = ("drivelab_lab", "drivelab_cgroup")
    saved = {n: sys.modules.get(f"ansible.module_utils.{n}") for n in names}
    try:
        for name in names:
            spec = importlib.util.spec_from_file_location(
                f"ansible.module_utils.{name}", ROOT / f"roles/lab/module_utils/{name}.py"
            )
            utils = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(utils)
            sys.modules[f"ansible.module_utils.{name}"] = utils
        spec = importlib.util.spec_from_file_location(
            "lab_teardown", ROOT / "roles/lab/library/lab_teardown.py"
        )
        teardown = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(teardown)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(f"ansible.module_utils.{name}", None)
            else:
                sys.modules[f"ansible.module_utils.{name}"] = module
    return teardown


def test_lab_teardown_finds_only_a_live_prometheus(live, tmp_path):
    """roles/lab/library/lab_teardown.py ends the lab's daemons (Prometheus, the apt
    proxy, container hosts) through their pidfiles: the pid must be a running process of
    that program, anything else is left alone."""
    lab, _, _, _ = live
    teardown = lab_teardown_module()
    cases = {
        "prometheus": str(lab.prom.pid),
        "exporter": str(lab.procs[0].pid),  # a live process that is not prometheus
        "self": str(os.getpid()),
        "garbage": "not a pid",
        "dead": "999999999",
    }
    for name, content in cases.items():
        (tmp_path / name / "prometheus").mkdir(parents=True)
        (tmp_path / name / "prometheus" / "prometheus.pid").write_text(content + "\n")
    dirs = [str(tmp_path / n) for n in cases] + [str(tmp_path / "no-such-folder")]
    assert teardown.lab_daemons(dirs) == [lab.prom.pid]
    # a pidfile names a program too: Prometheus's pid in a container host's nspawn.pid is
    # not a systemd-nspawn to shut down
    wrong = tmp_path / "wrong" / "containers" / "dbhost"
    wrong.mkdir(parents=True)
    (wrong / "nspawn.pid").write_text(f"{lab.prom.pid}\n")
    assert teardown.lab_daemons([str(tmp_path / "wrong")], only=b"systemd-nspawn") == []


def test_lab_teardown_finds_the_results_store_postmaster_by_its_pidfile(pg_cluster, tmp_path):
    """The lab's results store (lab up --results-store) is a postmaster of the controller:
    lab down finds it by the first line of postmaster.pid below the lab folder (a real
    server's file), and leaves alone a pidfile whose pid is no postgres."""
    teardown = lab_teardown_module()
    pidfile = (pg_cluster.data / "postmaster.pid").read_text()
    assert len(pidfile.splitlines()) > 1  # the pid, then the data folder, start time, port...
    ours = tmp_path / "lab" / "results-pg" / "data"
    ours.mkdir(parents=True)
    (ours / "postmaster.pid").write_text(pidfile)
    other = tmp_path / "other" / "results-pg" / "data"
    other.mkdir(parents=True)
    (other / "postmaster.pid").write_text(f"{os.getpid()}\n{other}\n")
    assert teardown.lab_daemons([str(tmp_path / "lab")]) == [pg_cluster.proc.pid]
    assert teardown.lab_daemons([str(tmp_path / "other")]) == []
