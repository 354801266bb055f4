"""fio parsers on every captured fio fixture; figures written out in base units."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.parse import ParseError
from collector.parse.fio import fio_samples, parse_fio_json, parse_fio_terse

FIO = Path(__file__).resolve().parents[1] / "data" / "fio"

# file -> direction -> (iops, bytes/s, runtime s, clat p99 s, clat mean s, lat mean s, bins)
JSON = {
    "fio_randread_4k.json": (
        "randread4k",
        {
            "read": (
                123498.167278,
                505848493,
                3.001,
                407552e-9,
                256664.721827e-9,
                258793.395958e-9,
                0,
            )
        },
        (0.84818942, 339808),
    ),
    "fio_randwrite_4k.json": (
        "randwrite4k",
        {
            "write": (
                111076.307897,
                454968557,
                3.001,
                391168e-9,
                285651.476681e-9,
                287784.776096e-9,
                0,
            )
        },
        (0.85580774, 62),
    ),
    "fio_seqwrite_1m.json": (
        "seqwrite1m",
        {
            "write": (
                3119.214119,
                3270733064,
                3.003,
                3194880e-9,
                2526924.147646e-9,
                2562933.11722e-9,
                0,
            )
        },
        (0.96560935, 2),
    ),
    "fio_randrw_4k_jsonplus.json": (
        "randrw4k_jsonplus",
        {
            "read": (
                68619.126958,
                281063944,
                3.001,
                240640e-9,
                153852.277901e-9,
                156326.611273e-9,
                205926,
            ),
            "write": (
                29489.836721,
                120790371,
                3.001,
                276480e-9,
                175139.124465e-9,
                177800.501282e-9,
                88499,
            ),
        },
        (0.80774366, 198461),
    ),
    "fio_jobfile_global_numjobs2.json": (
        "cs_randread4k",
        {
            "read": (
                130672.163918,
                535233183,
                2.001,
                362496e-9,
                242560.601094e-9,
                244553.286502e-9,
                0,
            )
        },
        (0.84534102, 259222),
    ),
}


@pytest.mark.parametrize(("name", "expected"), JSON.items(), ids=list(JSON))
def test_fio_json(name, expected):
    jobname, directions, (util, read_ios) = expected
    result = parse_fio_json((FIO / name).read_text(), name)
    assert result.fio_version == "fio-3.33"
    (job,) = result.jobs
    assert job.name == jobname and job.error == 0 and job.host is None
    assert set(job.directions) == set(directions)  # idle directions are left out
    for d, (iops, bw, runtime, p99, clat_mean, lat_mean, bins) in directions.items():
        got = job.directions[d]
        assert got.iops == pytest.approx(iops)
        assert got.bw_bytes_per_s == bw
        assert got.runtime_s == pytest.approx(runtime)
        assert got.clat.percentiles[99.0] == pytest.approx(p99)
        assert got.clat.mean_s == pytest.approx(clat_mean)
        assert got.lat.mean_s == pytest.approx(lat_mean)
        assert (sum(got.clat.bins.values()) if got.clat.bins else 0) == bins
        if bins:
            assert sum(got.clat.bins.values()) == got.clat.n
    (disk,) = result.disk_util
    assert disk.name == "vda" and disk.util == pytest.approx(util) and disk.read_ios == read_ios


def test_fio_global_options():
    result = parse_fio_json((FIO / "fio_jobfile_global_numjobs2.json").read_text())
    assert result.global_options["numjobs"] == "2"
    assert result.global_options["group_reporting"] == "1"


def test_fio_client_server():
    """client_stats: one entry per client plus "All clients"; non-JSON lines before it."""
    text = (FIO / "fio_client_server_2clients.json").read_text()
    assert text.startswith("<vm> ")
    result = parse_fio_json(text, "cs.json")
    assert [(j.name, j.port, j.aggregate) for j in result.jobs] == [
        ("cs_randread4k", 8765, False),
        ("cs_randread4k", 8766, False),
        ("All clients", 8766, True),
    ]
    a, b, total = (j.directions["read"] for j in result.jobs)
    assert a.iops == pytest.approx(60608.695652)
    assert total.iops == pytest.approx(124911.044478)
    assert a.iops + b.iops == pytest.approx(total.iops, rel=1e-3)
    # fio cannot sum percentiles: the "All clients" entry has none (observed)
    assert total.clat.percentiles == {}
    assert [(d.host, d.util) for d in result.disk_util] == [
        ("127.0.0.1:8765", pytest.approx(0.86773547)),
        ("127.0.0.1:8766", pytest.approx(0.91577928)),
    ]
    assert (FIO / "fio_client_server_2clients.stderr").read_text() == ""


def test_fio_terse_v3():
    result = parse_fio_terse((FIO / "fio_randrw_4k_terse_v3.txt").read_text(), "terse")
    (job,) = result.jobs
    assert job.name == "randrw4k_terse" and result.fio_version == "fio-3.33"
    r, w = job.directions["read"], job.directions["write"]
    assert (r.iops, r.io_bytes, r.bw_bytes_per_s, r.runtime_s) == (
        45407,
        363440 * 1024,
        181629 * 1024,
        2.001,
    )
    assert r.clat.percentiles[99.0] == pytest.approx(261e-6)  # field 30
    assert w.clat.percentiles[99.0] == pytest.approx(292e-6)  # field 71
    assert r.clat.mean_s == pytest.approx(162.452134e-6)
    assert w.iops == 45264
    assert job.usr_cpu == pytest.approx(0.0555) and job.sys_cpu == pytest.approx(0.2665)
    (disk,) = result.disk_util
    assert (disk.name, disk.read_ios, disk.write_ios, disk.util) == (
        "vda",
        85670,
        85335,
        pytest.approx(0.8136),
    )


def test_fio_samples_in_base_units():
    result = parse_fio_json((FIO / "fio_randread_4k.json").read_text())
    samples = {
        (s.metric, s.labels.get("quantile")): s for s in fio_samples(result, {"drive": "ssd"})
    }
    assert samples[("drivelab_fio_iops", None)].value == pytest.approx(123498.167278)
    assert samples[("drivelab_fio_iops", None)].labels["drive"] == "ssd"
    assert samples[("drivelab_fio_bandwidth_bytes_per_second", None)].value == 505848493
    assert samples[("drivelab_fio_clat_seconds", "0.99")].value == pytest.approx(407552e-9)
    assert samples[("drivelab_fio_disk_util_ratio", None)].value == pytest.approx(0.84818942)


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda t: t[: len(t) // 2], r"^cut\.json:\d+: fio JSON does not parse"),
        (lambda t: "", "no JSON object"),
        (lambda t: "<vm> Starting 1 process\n", ":1: no JSON object"),
        (
            lambda t: t.replace('"iops" :', '"iopz" :', 1),
            r"jobs\[0\]\(randread4k\)\.read has no 'iops'",
        ),
        (lambda t: t.replace('"jobs"', '"jerbs"'), "neither 'jobs' nor 'client_stats'"),
    ],
    ids=["truncated", "empty", "no json", "missing key", "unknown layout"],
)
def test_fio_bad_input(mangle, message):
    text = mangle((FIO / "fio_randread_4k.json").read_text())
    with pytest.raises(ParseError, match=message):
        parse_fio_json(text, "cut.json")


def test_fio_truncated_error_line_counts_the_prefix():
    text = (FIO / "fio_client_server_2clients.json").read_text()
    cut = "\n".join(text.splitlines()[:30])
    with pytest.raises(ParseError, match=r"^cs:3[01]: "):
        parse_fio_json(cut, "cs")


def test_fio_old_microsecond_keys():
    """fio < 3.0 wrote clat/lat in µs under "clat"/"lat" and no bw_bytes."""
    old = (
        '{"fio version": "fio-2.2.10", "jobs": [{"jobname": "old", "read": {"io_bytes": 4096,'
        ' "bw": 2048, "iops": 512.0, "runtime": 2000, "total_ios": 1024,'
        ' "clat": {"min": 10, "max": 90, "mean": 20.5, "stddev": 3.0,'
        ' "percentile": {"99.000000": 80}}}}]}'
    )
    (job,) = parse_fio_json(old).jobs
    d = job.directions["read"]
    assert d.bw_bytes_per_s == 2048 * 1024
    assert d.clat.mean_s == pytest.approx(20.5e-6)
    assert d.clat.percentiles[99.0] == pytest.approx(80e-6)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2;fio-2.1;x;0;0\n", "terse version '2'"),
        ("3;fio-3.33;x;0;0;1;2\n", ":1: 7 fields"),
    ],
)
def test_fio_terse_bad(text, message):
    with pytest.raises(ParseError, match=message):
        parse_fio_terse(text, "t")
