"""``drivelab run SCENARIO``: parse the command line, validate the scenario and print
its plan, then hand it to the runner (:mod:`collector.run.conductor`) and print the
report (:mod:`collector.report.publish`).

Interrupted (Ctrl-C, SIGTERM, SIGHUP, a crash, SIGKILL) and run again, it resumes: a
repetition already stored as complete is skipped; one that was cut off is run again from
scratch (its folder is replaced and the store keeps one run per cell and repetition).
Ctrl-C, SIGTERM and SIGHUP stop it cleanly: the playbook stopped, the repetition in
progress stored failed with the reason, the lease released, exit 130, 143 or 129. A
partial or failed run is stored as such and, unless --fail-fast, the scenario goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time

from collector.cli.options import DB_HELP, db_arg, inventory_file
from collector.errors import EXIT_INCOMPLETE, EXIT_OK, DrivelabError, stopped_by_signals
from collector.paths import LOCAL_INVENTORY, host_default, results_dir


def _settings_not_checked(scen, console) -> None:
    """A dry run asks no host: a scenario's PostgreSQL settings are checked by the DB
    host's server when the run starts."""
    from collector import scenario as sc  # noqa: PLC0415

    if scen.postgresql.given():
        console.print(
            f"NOT checked against a server: {sc.NOT_CHECKED_WITHOUT_SERVER}",
            highlight=False,
            soft_wrap=True,
        )


def _import_report() -> None:
    """Imports the HTML report's modules (matplotlib, scipy: a lot of CPU to import) while the
    scenario runs, this thread at a lower priority, so that the report at the end does
    not wait for them. An import that fails here fails again, and is told, there."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # this thread only
    with contextlib.suppress(Exception):
        from collector.report import html  # noqa: F401, PLC0415


def _datasets_fit(cells, inventory: dict, source) -> None:
    """The plan refused, before any host is touched, when a cell's datasets need more
    than its drive's declared size (``size_bytes``: collector.hosts.hostcheck)."""
    from collector.hosts import hostcheck  # noqa: PLC0415

    found, _ = hostcheck.dataset_problems(cells, inventory)
    if found:
        more = f" (and {len(found) - 1} more drives)" if len(found) > 1 else ""
        raise DrivelabError(f"{source}: plan: {found[0].line()}{more}: nothing was touched")


def _against_the_lab(scen, args: argparse.Namespace, console) -> list:
    """The scenario's cells on a stand-in inventory holding the local lab's drives;
    what does not fit them refused when the size is ``lab``, else printed as a note."""
    from collector import scenario as sc  # noqa: PLC0415

    lab_drives = [
        {"name": d["name"], "size_bytes": d["size"]} for d in host_default("lab_drives", role="lab")
    ]
    inventory = sc.inventory_by_count(max(scen.hosts), lab_drives)
    try:
        sc.validate_against_inventory(scen, inventory, args.scenario)
        cells = sc.expand(scen, inventory)
        _datasets_fit(cells, inventory, args.scenario)
    except DrivelabError as err:
        if args.size == "lab":
            raise
        console.print(f"note: not the local lab's (its drives): {err}", highlight=False,
                      soft_wrap=True)  # fmt: skip
        cells = sc.expand(scen, sc.inventory_by_count(max(scen.hosts)))
    return cells


def _print_plan(scen, cells, console, as_json: bool, *, by_count: bool, db) -> None:
    """The plan, as text on the console, or as a JSON document alone on stdout; its
    estimate calibrated on the results store ``db``'s runs where it has any."""
    from collector import build  # noqa: PLC0415
    from collector import scenario as sc  # noqa: PLC0415
    from collector.run import calibrate  # noqa: PLC0415

    calibration = calibrate.repetition_overhead(db)
    if as_json:
        plan = sc.plan_doc(scen, cells, calibration)
        doc = build.stamped({**plan, "hosts_by_count": by_count})
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        console.print(sc.plan_text(scen, cells, hosts_by_count=by_count, calibration=calibration))


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415  (keep --help fast)

    from collector import scenario as sc  # noqa: PLC0415
    from collector.run import conductor as scenariorun  # noqa: PLC0415
    from collector.store.target import default_target  # noqa: PLC0415

    if args.json and not args.dry_run:
        raise DrivelabError("run: --json is the plan's form: give it with --dry-run")
    # with --json, stdout is the plan's document alone: every other line on stderr
    console = Console(stderr=args.json)
    scen = sc.load(args.scenario, size=args.size)
    if args.dry_run and args.inventory is None and not (LOCAL_INVENTORY / "hosts.yml").exists():
        # checking a scenario file before any lab exists: the plan, hosts by count, the
        # drives and datasets against the local lab's drives (names and sizes): refused
        # for the lab size (--size lab is for the local lab), else said as a note (the
        # scenario may be a real lab's, whose drives only its inventory knows)
        cells = _against_the_lab(scen, args, console)
        _print_plan(scen, cells, console, args.json, by_count=True, db=args.db)
        console.print(
            "not checked (no inventory: give --inventory, or 'drivelab lab up'): "
            + "; ".join(sc.NOT_CHECKED_WITHOUT_INVENTORY),
            highlight=False,
            soft_wrap=True,
        )
        _settings_not_checked(scen, console)
        return 0
    inv_path = inventory_file(args.inventory)
    inventory = sc.load_inventory(inv_path)
    sc.validate_against_inventory(scen, inventory, args.scenario)
    cells = sc.expand(scen, inventory)
    _datasets_fit(cells, inventory, args.scenario)
    _print_plan(scen, cells, console, args.json, by_count=False, db=args.db)
    if args.dry_run:
        _settings_not_checked(scen, console)
        return 0
    options = scenariorun.RunOptions(
        inventory=inv_path, db=args.db if args.db is not None else default_target(),
        verbose=args.verbose, fail_fast=args.fail_fast, live=not args.no_live,
        telemetry=not args.no_telemetry, metrics_addr=args.metrics_addr,
        metrics_port=args.metrics_port, reprovision=args.reprovision, wait=args.wait,
        check=not args.no_check,
    )  # fmt: skip
    run = scenariorun.ScenarioRun(scen, cells, inventory, options, console)
    threading.Thread(target=_import_report, name="drivelab-report-import", daemon=True).start()
    with stopped_by_signals():  # SIGTERM, SIGHUP: as Ctrl-C, the repetition stored failed
        progress = run.run()
    console.print(
        f"scenario {scen.name}: {time.monotonic() - progress.started:.0f} s, "
        f"{progress.problems} partial or failed runs"
    )
    from collector.report.publish import publish  # noqa: PLC0415

    html = results_dir() / f"{scen.name}.html"
    publish(options.db, scen.name, scen.baseline, html=html, verbose=args.verbose)
    # stored and reported, but a repetition ended partial or failed, or a cell was not run
    return EXIT_INCOMPLETE if progress.incomplete else EXIT_OK


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
    p.add_argument("-i", "--inventory", help="inventory folder or file (default: the local lab's)")
    p.add_argument("--size", help="a named size of the scenario, e.g. lab")
    p.add_argument("--dry-run", action="store_true", help="validate and print the plan only")
    p.add_argument(
        "--json", action="store_true",
        help="with --dry-run: the plan as a JSON document on stdout (the rest on stderr)",
    )  # fmt: skip
    p.add_argument("--db", type=db_arg, default=None, help=DB_HELP)
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
        help="provision every host and set telemetry up again even if nothing they depend on"
        " has changed",
    )  # fmt: skip
    p.add_argument(
        "--wait", action="store_true",
        help="wait for the lab's lease while another run or playbook holds the DB host"
        " (default: refuse in one line naming it)",
    )  # fmt: skip
    p.add_argument(
        "--no-check", action="store_true",
        help="leave `drivelab check` out of the preflight (about 10 s on three hosts), for"
        " runs again on hosts just checked; the datasets are still held against the drives",
    )  # fmt: skip
    p.add_argument("-v", "--verbose", action="store_true", help="show Ansible's output")
    p.set_defaults(func=cmd_run)
