"""``drivelab run SCENARIO``: validate, plan, preflight, then for every cell the drive,
database and pgbench stages, each repetition gathered into the store as it ends.

Interrupted (Ctrl-C, a crash, SIGKILL) and run again, it resumes: a repetition already
stored as complete is skipped; one that was cut off is run again from scratch (its
folder is replaced and the store keeps one run per cell and repetition). A partial or
failed run is stored as such and, unless --fail-fast, the scenario goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from collector import pretest, runner
from collector.errors import DrivelabError
from collector.gather import gather_run, record
from collector.paths import LOCAL_INVENTORY, REPO, results_dir
from collector.playbook import ansible_bin
from collector.report import PRETEST_PREFIXES
from collector.stats import summarize
from collector.store import Store


def completed_reps(store: Store, scenario: str, cell_id: str) -> dict[int, str]:
    """{repetition: status} of the stored runs of one planned cell."""
    rows = store.conn.execute(
        """SELECT r.repetition, r.status FROM runs r
           JOIN cells c ON c.id = r.cell_id JOIN scenarios s ON s.id = c.scenario_id
           JOIN facts f ON f.run_id = r.id AND f.scope = 'run' AND f.key = 'cell_id'
           WHERE s.name = ? AND f.value_json = ?""",
        (scenario, json.dumps(cell_id)),
    ).fetchall()
    return {int(rep): status for rep, status in rows}


def preflight(inventory: Path, console: Console) -> None:
    """Every host answers over SSH before any drive is touched; else one line naming it."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    argv = [
        ansible_bin("ansible"),
        "all",
        "-i",
        str(inventory),
        "-m",
        "ansible.builtin.ping",
        "-o",
        "-T",
        "10",
    ]
    proc = subprocess.run(
        argv,
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    bad = [line for line in proc.stdout.splitlines() if "UNREACHABLE" in line or "FAILED" in line]
    if proc.returncode != 0:
        first = bad[0] if bad else (proc.stderr.strip().splitlines() or ["no output"])[-1]
        host = first.split("|")[0].strip()
        raise DrivelabError(
            f"preflight: host {host} does not answer over SSH: nothing was touched ({first[:200]})"
        )
    console.print(f"preflight: {proc.stdout.count('SUCCESS')} hosts answer over SSH")


def inventory_file(arg: str | None) -> Path:
    path = Path(arg) if arg else LOCAL_INVENTORY
    if path.is_dir():
        path = path / "hosts.yml"
    if not path.exists():
        hint = (
            "run 'drivelab lab up' first"
            if not arg
            else "give an inventory folder holding hosts.yml"
        )
        raise DrivelabError(f"inventory {path} does not exist: {hint}")
    return path


class Session:
    """One `drivelab run`: where things are, and counts for the progress line."""

    def __init__(
        self, args: argparse.Namespace, console: Console, inv_path: Path, inventory: dict
    ) -> None:
        self.args = args
        self.console = console
        self.inv_path = inv_path
        self.inventory = inventory
        self.db_path = Path(args.db) if args.db else results_dir() / "drivelab.db"
        self.db_host = next(iter(inventory["all"]["children"]["db"]["hosts"]))
        self.clients = sorted(
            inventory["all"]["children"]["clients"]["hosts"], key=lambda h: (len(h), h)
        )
        self.started = time.monotonic()
        self.done = 0
        self.total = 0
        self.estimate = 0.0
        self.problems = 0
        #: "<cell>: not run: <why>" of every cell whose drive or database stage failed
        self.not_run: list[str] = []
        self.last_request: tuple | None = None
        self.last_facts_dir: Path | None = None
        self.prom_url: str | None = None

    def progress(self) -> str:
        elapsed = time.monotonic() - self.started
        eta = max(0.0, self.estimate - elapsed)
        minutes = f"{elapsed / 60:.1f} min elapsed, ~{eta / 60:.1f} min left"
        return f"[run {self.done}/{self.total}, {minutes}]"

    def run_cell(self, planned) -> None:
        cell = planned.cell
        head = f"[{planned.index}/{planned.total}] {cell.cell_id}"
        with Store.open(self.db_path) as store:
            have = completed_reps(store, cell.scenario, cell.cell_id)
        want = planned.repetitions if planned.adaptive is None else planned.adaptive.max
        if all(have.get(r) == "complete" for r in range(want)):
            self.console.print(f"{head}: all {want} repetitions stored, skipped")
            self.done += want
            return
        try:
            self.prepare(planned)
        except DrivelabError as err:
            # a refused drive, an md set where md is absent, a failed init: this cell is
            # not run, the others are (unless --fail-fast)
            self.problems += 1
            self.not_run.append(f"{cell.cell_id}: not run: {err}")
            self.console.print(f"{head}: not run: {err}")
            if self.args.fail_fast:
                raise
            return
        skip = write_cache_skip(cell.cell_dir() / "db")
        if planned.write_cache in ("on", "off") and skip:
            self.console.print(f"{head}: skipped: {skip}")
            return
        tps = list(stored_tps(cell).values())
        for rep in range(want):
            if have.get(rep) == "complete":
                self.done += 1
                continue
            if planned.adaptive and rep >= planned.adaptive.min and enough(tps, planned.adaptive):
                self.console.print(
                    f"{head}: 95% CI ±{ci_pct(tps):.1f}% of the mean after {rep} runs: enough"
                )
                break
            self.run_one(planned, rep, head, tps)
        if planned.adaptive and ci_pct(tps) is not None:
            self.console.print(
                f"{head}: {len(tps)} complete runs, 95% CI ±{ci_pct(tps):.1f}% of the mean"
            )

    def prepare(self, planned) -> None:
        cell = planned.cell
        facts_dir = cell.cell_dir() / "db"
        # the drives stage again when the filesystem request or the write cache changes
        # (the same request leaves the filesystem as it is: no reformatting)
        request = (planned.drive_request, planned.write_cache)
        if request != self.last_request:
            self.last_request = None
            drives = {
                "facts_dir": facts_dir,
                "write_cache": planned.write_cache,
                "inventory": self.inv_path,
                "stream": self.args.verbose,
            }
            try:
                runner.prepare_drives(planned.drive_request, **drives)
            except DrivelabError as err:
                if "holds PostgreSQL data" not in str(err):
                    raise
                # drivelab's own databases from an earlier cell are on the drive: release
                # them (and only them), then the gate lets it be reformatted
                names = [r["name"] for r in planned.drive_request]
                self.console.print(f"releasing drivelab's PostgreSQL data on {', '.join(names)}")
                runner.release(names, inventory=self.inv_path, stream=self.args.verbose)
                runner.prepare_drives(planned.drive_request, **drives)
            self.last_request = request
            self.last_facts_dir = facts_dir
        elif self.last_facts_dir is not None and self.last_facts_dir != facts_dir:
            # same drives as the previous cell: its device facts hold for this one too
            facts_dir.mkdir(parents=True, exist_ok=True)
            for f in self.last_facts_dir.glob("*.json"):
                if f.name != "database.json":
                    shutil.copy2(f, facts_dir / f.name)
        if planned.pretests:
            self.pretests(planned)
        runner.prepare_database(
            cell, inventory=self.inv_path, stream=self.args.verbose, provisioned=True
        )

    def run_telemetry(self, gathered, run_id: int) -> None:
        """After a run: its per-second device and CPU figures from Prometheus, stored
        with it, and the verdicts drawn from them (cache defeated or not, client-bound).
        A problem here is one line: the run itself stands."""
        from collector import telemetry  # noqa: PLC0415

        run = gathered.run
        facts = run.facts
        starts = [c.start for c in run.clients if c.start is not None]
        ends = [c.end for c in run.clients if c.end is not None]
        start = min(starts) if starts else run.started_at
        end = max(ends) if ends else run.ended_at
        cell = gathered.cell
        hosts = list(facts.get("client_hosts") or [])
        try:
            if start is None or end is None:
                raise DrivelabError("the run has no start or end time")
            dev = next(
                (f.facts[cell.drive] for f in gathered.facts
                 if f.scope == "device" and cell.drive in f.facts),
                None,
            )  # fmt: skip
            if dev is None:
                raise DrivelabError(f"no device facts for {cell.drive}")
            devices = telemetry.devices_from_facts(dev)
            samples = telemetry.run_telemetry(
                self.prom_url, start - 1, end + 1, db_instance=self.db_host,
                client_instances={h: h for h in hosts}, devices=devices, db_host=self.db_host,
                instance_label="drivelab_host",
            )  # fmt: skip
            verdicts: dict[str, Any] = {
                "telemetry_devices": devices,
                "telemetry_missing": telemetry.missing(
                    samples, db_host=self.db_host, clients=hosts, devices=devices
                ),
                "client_bound": telemetry.client_bound(samples),
            }
            cache = self.cache_verdict(gathered.run_dir, facts, samples, devices)
            if cache is not None:
                verdicts["cache"] = cache
            with Store.open(self.db_path) as store:
                store.add_samples(samples, run_id=run_id)
                sid = store.add_scenario(gathered.scenario)
                store.add_facts(sid, verdicts, scope="run", run_id=run_id)
        except DrivelabError as err:
            self.console.print(f"telemetry of {cell.drive} rep {run.repetition}: {err}")
            return
        if verdicts["client_bound"]:
            self.console.print(
                f"  {telemetry.CLIENT_BOUND_NOTE} ({', '.join(verdicts['client_bound'])})"
            )
        if cache is not None:
            self.console.print(f"  {cache['verdict']}: {cache['reason']}", highlight=False)

    @staticmethod
    def cache_verdict(run_dir: Path, facts, samples, devices) -> dict[str, Any] | None:
        from collector import cachedefeat  # noqa: PLC0415

        snaps = {}
        for when in ("before", "after"):
            path = run_dir / f"pg_stat-{when}.json"
            if not path.exists():
                return None
            snaps[when] = cachedefeat.counters(json.loads(path.read_text())["databases"])
        sizes = facts.get("db_sizes_bytes") or {}
        memory = facts.get("db_memory_bytes")
        if not sizes or not memory:
            return None
        hosts = set(facts.get("client_hosts") or [])
        keep = {f"drivelab_{h}" for h in hosts}
        before = {k: v for k, v in snaps["before"].items() if k in keep}
        after = {k: v for k, v in snaps["after"].items() if k in keep}
        v = cachedefeat.analyse(
            before, after, drive_samples=samples, devices=devices,
            dataset_bytes=int(sum(sizes.values())), memory_bytes=int(memory),
        )  # fmt: skip
        return {
            "verdict": v.verdict,
            "reason": v.reason,
            "hit_ratio": v.hit_ratio,
            "drive_share": v.drive_share,
            "blks_read": v.blks_read,
            "blks_hit": v.blks_hit,
            "drive_read_bytes": v.drive_read_bytes,
            "dataset_bytes": v.dataset_bytes,
            "memory_bytes": v.memory_bytes,
            "clients": {
                c.client: {"hit_ratio": c.hit_ratio, "blks_read": c.blks_read} for c in v.clients
            },
        }

    @contextmanager
    def live_view(self, planned, rep: int, run_dir: Path, hosts: list[str]) -> Iterator[None]:
        """Follows the clients' progress lines over SSH while the playbook runs: a live
        table on a terminal, metrics for Prometheus and `drivelab watch`. Best effort:
        a client it cannot reach is marked, the results come from the fetched files."""
        from collector import live  # noqa: PLC0415

        cell = planned.cell
        targets = []
        for h in hosts:
            ssh = ssh_settings(self.inventory, h)
            if ssh is None:
                self.console.print(f"live view: no SSH key or known_hosts for {h}: not followed")
                continue
            stderr = live.remote_run_dir(run_dir, h) / "stderr.txt"
            targets.append(live.ClientTarget(h, ssh["host"], str(stderr), ssh["key"],
                                             ssh["known_hosts"], port=ssh["port"],
                                             user=ssh["user"]))  # fmt: skip
        labels = live.RunLabels(cell.scenario, cell.cell_id, str(rep), cell.drive)
        duration = float(cell.pgbench.duration) if cell.pgbench.duration else None
        with live.LiveSession(
            targets, labels, duration, metrics_addr=self.args.metrics_addr,
            metrics_port=self.args.metrics_port, console=self.console,
            display=False if self.args.verbose else None,
        ) as session:  # fmt: skip
            yield
            session.wait(timeout=5)

    def pretests(self, planned) -> None:
        """The drive's raw pre-tests, once per cell that carries them (just formatted):
        skipped when the store has them from an earlier attempt, stored in one go."""
        cell = planned.cell
        with Store.open(self.db_path) as store:
            sid = store.add_scenario(cell.scenario)
            if any(
                s.labels.get("cell") == cell.cell_id
                for p in PRETEST_PREFIXES
                for s in store.samples(sid, metric_prefix=p)
            ):
                self.console.print(f"{cell.cell_id}: pre-tests stored earlier, skipped")
                return
        out = cell.cell_dir() / "pretests"
        if out.exists():
            shutil.rmtree(out)  # a cut-off attempt's outputs: run again from scratch
        started = time.monotonic()
        self.console.print(f"{cell.cell_id}: raw pre-tests ({_pretest_kinds(planned)})")
        runner.run_pretests(
            planned.drive_request, planned.pretests, out, inventory=self.inv_path,
            stream=self.args.verbose,
        )  # fmt: skip
        labels = {"cell": cell.cell_id, "filesystem": cell.filesystem}
        samples = pretest.collect(out, labels)
        with Store.open(self.db_path) as store:
            store.add_samples(samples, scenario_id=store.add_scenario(cell.scenario))
        self.console.print(
            f"{cell.cell_id}: pre-tests done in {time.monotonic() - started:.0f} s,"
            f" {len(samples)} figures stored"
        )

    def run_one(self, planned, rep: int, head: str, tps: list[float]) -> None:
        cell = planned.cell
        run_dir = runner.run_pgbench(
            cell, rep, client_hosts=self.clients, db_host=self.db_host, inventory=self.inv_path,
            stream=self.args.verbose,
            live=None if self.args.no_live else partial(self.live_view, planned, rep),
        )  # fmt: skip
        gathered = gather_run(run_dir)
        with Store.open(self.db_path) as store:
            run_id = record(store, gathered)
        if self.prom_url:
            self.run_telemetry(gathered, run_id)
        st = gathered.stats()
        self.done += 1
        figure = f"{st.tps:,.1f} tps" if st.tps else "no tps"
        reason = f" ({st.reason})" if st.reason else ""
        self.console.print(
            f"{head} rep {rep}: {st.status.value}, {figure}{reason}  {self.progress()}"
        )
        if st.status.value == "complete" and st.tps:
            tps.append(st.tps)
            return
        self.problems += 1
        if self.args.fail_fast:
            raise DrivelabError(
                f"{cell.cell_id} rep {rep}: {st.status.value} ({st.reason}); --fail-fast"
            )


def cmd_run(args: argparse.Namespace) -> int:
    from collector import scenario as sc  # noqa: PLC0415

    console = Console()
    scen = sc.load(args.scenario, size=args.size)
    inv_path = inventory_file(args.inventory)
    inventory = sc.load_inventory(inv_path)
    sc.validate_against_inventory(scen, inventory, args.scenario)
    cells = sc.expand(scen, inventory)
    console.print(sc.plan_text(scen, cells))
    if args.dry_run:
        return 0
    session = Session(args, console, inv_path, inventory)
    session.total = sum(c.repetitions if c.adaptive is None else c.adaptive.max for c in cells)
    session.estimate = sum(sc.estimate_seconds(c) for c in cells)
    preflight(inv_path, console)
    if args.reprovision:
        runner.provision(inventory=inv_path, stream=args.verbose)
    else:
        _, unchanged = runner.provision_unless_unchanged(inventory=inv_path, stream=args.verbose)
        if unchanged:
            # one line under 80 columns: rich wraps at 80 when not on a terminal
            console.print("provisioning skipped: every host is current (--reprovision forces it)")
    if not args.no_telemetry:
        live_target = "" if args.no_live else f"{args.metrics_addr}:{args.metrics_port}"
        runner.telemetry(live_target=live_target, inventory=inv_path, stream=args.verbose)
        session.prom_url = prometheus_url(inventory)
        console.print(f"telemetry: Prometheus at {session.prom_url}")
    console.print(f"provisioned in {time.monotonic() - session.started:.0f} s")
    for planned in cells:
        session.run_cell(planned)
    console.print(
        f"scenario {scen.name}: {time.monotonic() - session.started:.0f} s, "
        f"{session.problems} partial or failed runs"
    )
    if session.not_run and len(session.not_run) == len(cells):
        # nothing ran at all (a refused drive, say): the reason is the last word
        more = f" (and {len(cells) - 1} more cells)" if len(cells) > 1 else ""
        raise DrivelabError(f"scenario {scen.name}: {session.not_run[0]}{more}")
    from collector.reportcmd import cmd_report  # noqa: PLC0415

    report_args = argparse.Namespace(
        db=session.db_path, scenario=scen.name, baseline=getattr(scen, "baseline", None),
        html=results_dir() / f"{scen.name}.html", csv=None, json=None,
    )  # fmt: skip
    cmd_report(report_args)
    return 0


def prometheus_url(inventory: dict) -> str:
    """The Prometheus the telemetry playbook set up or checked: the inventory's
    ``prometheus_server_url``, else drivelab's own at ``prometheus_server_listen``."""
    hv = inventory["all"].get("vars") or {}
    url = hv.get("prometheus_server_url")
    if url:
        return str(url).rstrip("/")
    return "http://" + str(hv.get("prometheus_server_listen", "127.0.0.1:9490"))


def ssh_settings(inventory: dict, host: str) -> dict[str, Any] | None:
    """How Ansible reaches ``host`` (from the inventory file's vars): address, port,
    user, key file, and the known_hosts file its ssh args name. None: no key or no
    known_hosts file named (the live view needs both; host keys are never trusted
    blindly)."""
    groups = inventory["all"].get("children", {})
    hv: dict[str, Any] = dict(inventory["all"].get("vars") or {})
    for g in groups.values():
        if host in (g.get("hosts") or {}):
            hv.update(g.get("vars") or {})
            hv.update((g.get("hosts") or {})[host] or {})
    args = str(hv.get("ansible_ssh_common_args", "")) + " " + str(hv.get("ansible_ssh_args", ""))
    known = re.search(r"UserKnownHostsFile=(\S+)", args)
    key = hv.get("ansible_ssh_private_key_file")
    if not key or not known:
        return None
    return {
        "host": str(hv.get("ansible_host", host)),
        "port": int(hv.get("ansible_port", 22)),
        "user": str(hv.get("ansible_user", "root")),
        "key": str(key),
        "known_hosts": known.group(1),
    }


def _pretest_kinds(planned) -> str:
    return " and ".join(k for k in ("fio", "pg_test_fsync") if planned.pretests[k])


def enough(tps: list[float], policy) -> bool:
    pct = ci_pct(tps)
    return pct is not None and pct <= policy.target_ci_pct


def write_cache_skip(facts_dir: Path) -> str | None:
    for path in sorted(facts_dir.glob("*.json")) if facts_dir.is_dir() else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        for wc in doc.get("write_cache", []) if isinstance(doc, dict) else []:
            if wc.get("skip_cells"):
                return wc.get("msg") or "write cache cannot be changed on this drive"
    return None


def stored_tps(cell: runner.Cell) -> dict[int, float]:
    out = {}
    for run_dir in sorted(cell.cell_dir().glob("rep-*")):
        try:
            st = gather_run(run_dir).stats()
        except DrivelabError:
            continue
        if st.status.value == "complete" and st.tps:
            out[st.repetition] = st.tps
    return out


def ci_pct(values: list[float]) -> float | None:
    s = summarize(values)
    if s is None or s.ci_low is None or not s.mean:
        return None
    return (s.mean - s.ci_low) / s.mean * 100


def port_arg(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (1 to 65535)")
    return port


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a scenario (resumes where it stopped)")
    p.add_argument("scenario", help="scenario file, e.g. scenarios/seed-two-clients.yml")
    p.add_argument("--inventory", help="inventory folder or file (default: the local lab's)")
    p.add_argument("--size", help="a named size of the scenario, e.g. lab")
    p.add_argument("--dry-run", action="store_true", help="validate and print the plan only")
    p.add_argument("--db", help="results store (default results/drivelab.db)")
    p.add_argument(
        "--fail-fast", action="store_true", help="stop at the first partial or failed run"
    )
    p.add_argument(
        "--no-live", action="store_true",
        help="do not follow the clients live (no live table, no live metrics)",
    )  # fmt: skip
    p.add_argument(
        "--no-telemetry", action="store_true",
        help="no node_exporter/Prometheus, no device figures or cache verdicts",
    )  # fmt: skip
    p.add_argument(
        "--metrics-addr", default="127.0.0.1",
        help="address the live metrics are served on (default 127.0.0.1)",
    )  # fmt: skip
    p.add_argument(
        "--metrics-port", type=port_arg, default=9479,
        help="port of the live metrics, for Prometheus and `drivelab watch` (default 9479)",
    )  # fmt: skip
    p.add_argument(
        "--reprovision", action="store_true",
        help="provision every host even if nothing drivelab provisions with has changed",
    )  # fmt: skip
    p.add_argument("-v", "--verbose", action="store_true", help="show Ansible's output")
    p.set_defaults(func=cmd_run)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0)
