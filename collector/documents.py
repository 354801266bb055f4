"""The shape of every machine-readable document drivelab writes (``--json``), one model
per verb in :data:`SCHEMAS`: what a script reading them may rely on. ``drivelab schema
VERB`` prints the JSON Schema drawn from the model; the tests validate each verb's real
output against it, so a renamed or dropped key fails there before a user's script does.

A document's own keys and its rows' keys are closed (an unknown key is a change of
shape: :data:`collector.build.SCHEMA_VERSION` goes up); what a host reports about itself
(a check's answers, a device's facts) is open below the keys named here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from collector.build import SCHEMA_VERSION
from collector.errors import DrivelabError

__all__ = ["SCHEMAS", "json_schema", "validate"]

Num = float | None


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Build(_Closed):
    version: str
    commit: str | None = Field(description="the checkout's commit, null outside git")


class _Document(_Closed):
    schema_version: Literal[SCHEMA_VERSION]  # type: ignore[valid-type]
    drivelab: Build


# ------------------------------------------------------------------------- report


class Cell(_Closed):
    """One drive and test of a scenario over its complete runs."""

    scenario: str
    drive: str
    test: str
    tps_mean: Num
    tps_stddev: Num
    tps_ci_low: Num
    tps_ci_high: Num
    tps_cv: Num
    tps_reported_sum_mean: Num
    baseline_drive: str | None
    ratio_to_baseline: Num
    ratio_ci_low: Num
    ratio_ci_high: Num
    latency_p50_s: Num
    latency_p95_s: Num
    latency_p99_s: Num
    latency_p999_s: Num
    latency_avg_s: Num
    clients: int | None
    runs_complete: int
    runs_partial: int
    runs_failed: int
    db_warning: str | None
    client_bound: bool = Field(description="a run measured the clients, not the drive")
    cache_defeated: bool | None = Field(description="null: not known")
    checkpoint_in_window: bool
    caveats: str | None = Field(
        description="the caveats' codes, space-separated (client_bound, cache_not_defeated,"
        " checkpoint, physics, emulated_cpu, unsteady): the row's marks c m k p e t"
    )
    wal_placement: str | None
    drift: str | None = Field(
        description="the cell's repetitions trend (tps falling or rising with the repetition"
        " number beyond the noise: docs/telemetry.md), in words; null: no trend found"
    )
    wal_drive: str | None = Field(description="the drive that held the WAL, when not the data's")
    wal_device: str | None = Field(
        description="the block device the WAL was on, as the DB host's kernel named it"
        " (null: not a block device, or not recorded)"
    )


class Run(_Closed):
    scenario: str
    drive: str
    test: str
    repetition: int
    attempt: int
    status: Literal["complete", "partial", "failed"]
    reason: str | None
    clients: int | None
    tps: Num
    windowed: bool | None
    tps_windowed: Num
    tps_reported_sum: Num
    window_start: Num
    window_end: Num
    start_skew_s: Num
    launch_skew_s: Num
    connect_spread_s: Num
    start_lead_s: Num
    launch_late_s: Num
    latency_avg_s: Num
    latency_p50_s: Num
    latency_p95_s: Num
    latency_p99_s: Num
    failed_transactions: int | None


class SeriesPoint(_Closed):
    scenario: str
    drive: str
    test: str
    repetition: int | None
    client: str
    start: float
    duration_s: float
    tps: float
    latency_avg_s: Num
    failed: int | None
    source: str


class HistogramBucket(_Closed):
    scenario: str
    drive: str
    test: str
    low_s: float
    high_s: float
    count: int


class RateStep(_Closed):
    scenario: str
    drive: str
    test: str
    group: str
    rate_per: str
    rate_per_host: Num
    client_hosts: int
    rate_total: Num
    tps: Num
    p50_ms: Num
    p95_ms: Num
    p99_ms: Num
    max_ms: Num
    late: Num
    skipped: Num
    latency_limit_ms: Num
    runs: int
    runs_not_sustained: int | None
    rate_sustained: bool | None
    lag_reasons: str | None


class LatencyPoint(_Closed):
    scenario: str
    drive: str
    test: str
    repetition: int | None
    client: str
    metric: str
    quantile: str | None
    start: float
    value_s: float


class SweepRow(_Closed):
    """One count of a client sweep's curve (``workload.clients_per_host`` a list)."""

    scenario: str
    drive: str
    test: str = Field(description="the test without its -c and -j")
    connections: int = Field(description="client hosts x -c")
    clients_per_host: int
    threads: int
    client_hosts: int
    tps: float
    latency_p50_s: Num
    latency_p95_s: Num
    latency_p99_s: Num
    knee: bool = Field(description="the knee: beyond it a doubling adds < 10 % tps, p99 grows")


class Sample(_Closed):
    scenario: str
    metric: str
    labels: str = Field(description="the sample's labels as a JSON object, in a string")
    value: float
    unit: str
    timestamp: Num


class Fact(_Closed):
    scenario: str
    scope: str
    host: str | None
    key: str
    value: str = Field(description="the fact's value as JSON, in a string")
    run_id: int | None


class Report(_Document):
    """``drivelab report --json``: every table the report draws from."""

    scenarios: list[str]
    cells: list[Cell]
    runs: list[Run]
    series: list[SeriesPoint]
    latency_histogram: list[HistogramBucket]
    latency_steps: list[RateStep]
    latency_series: list[LatencyPoint]
    client_sweeps: list[SweepRow]
    telemetry: list[Sample]
    pretests: list[Sample]
    facts: list[Fact]


# ------------------------------------------------------------------------ compare


class Pair(_Closed):
    test: str
    baseline_tps_mean: Num
    contender_tps_mean: Num
    diff_pct: Num
    t: Num
    df: Num
    p_value: Num
    significant: bool | None
    ratio: Num
    ratio_ci_low: Num
    ratio_ci_high: Num
    baseline_client_bound: bool
    baseline_cache_defeated: bool | None
    baseline_caveats: list[str]
    contender_client_bound: bool
    contender_cache_defeated: bool | None
    contender_caveats: list[str]


class Difference(_Closed):
    setting: str
    baseline: Any
    contender: Any
    tests: list[str]


class Environment(_Closed):
    pairs_known: int
    differences: list[Difference]


class Compare(_Document):
    """``drivelab compare --json``: baseline against contender, test by test."""

    baseline: str
    contender: str
    pairs: list[Pair]
    unmatched: list[str]
    environment: Environment


# --------------------------------------------------------------------------- plan


class PlannedCell(_Closed):
    index: int
    cell: str
    drive: str
    scale: int
    hosts: list[str]
    repetitions: int
    repetitions_at_most: int
    rate_search: bool
    write_cache: str
    raid: str
    pretests: list[str]
    estimated_seconds: float


class Plan(_Document):
    """``drivelab run --dry-run --json``: the cells in the order they will run."""

    scenario: str
    size: str | None
    estimated_seconds: float
    overhead_per_repetition_seconds: float
    calibrated_on_runs: int
    estimate_is: str
    cells: list[PlannedCell]
    hosts_by_count: bool


# ------------------------------------------------------------------ hosts and lab


class Status(_Document):
    """``drivelab status --json``: the lease on the DB host."""

    db_host: str
    lease: dict[str, Any] | None = Field(description="the holder, null when free")
    stale: Num = Field(description="seconds past its time to live, or null")
    text: str


class LabHost(_Closed):
    name: str
    group: str
    address: str
    netns: str
    netns_exists: bool
    ssh_answers: bool
    container: str


class LabDrive(_Closed):
    name: str
    device: str
    cls: str
    size_bytes: int
    iops_cap: int
    backing_file: str
    attached: bool
    cliff_after_bytes: int = 0
    cliff_iops: int = 0


class LeaseOrError(BaseModel):
    db_host: str
    lease: dict[str, Any] | None = None
    stale: Num = None
    text: str | None = None
    error: str | None = None


class LabStatus(_Document):
    """``drivelab lab status --json``: the local lab's hosts, drives and lease."""

    inventory: str
    subnet: str
    db_memory_bytes: int
    kind: str
    release: str
    vm_accel: str
    cgroup: str
    results_store: str
    results_store_answers: bool
    hosts: list[LabHost]
    drives: list[LabDrive]
    lease: LeaseOrError


class Problem(BaseModel):
    host: str
    message: str


class Check(_Document):
    """``drivelab check --json``: every host's answers and the problems found."""

    inventory: str
    ok: bool
    seconds: float
    hosts: dict[str, dict[str, Any]]
    problems: list[Problem]
    notes: list[str] | None = None


class Device(BaseModel):
    kname: str
    path: str
    size_bytes: int | None
    would_format: bool
    refusal: str | None


class Drives(_Document):
    """``drivelab drives --json``: the DB host's block devices and the gate's verdicts."""

    host: str
    devices: list[Device]


#: verb -> the model of its ``--json`` document
SCHEMAS: dict[str, type[_Document]] = {
    "report": Report,
    "compare": Compare,
    "plan": Plan,
    "status": Status,
    "lab-status": LabStatus,
    "check": Check,
    "drives": Drives,
}


def json_schema(verb: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``verb``'s document."""
    doc = SCHEMAS[verb].model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **doc}


def validate(verb: str, doc: Any) -> None:
    """Raises :class:`DrivelabError` naming the first key that does not fit (its path)."""
    try:
        SCHEMAS[verb].model_validate(doc, strict=True)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(the document)"
        raise DrivelabError(f"{verb} document: {where}: {first['msg']}") from None
