"""Gathered runs into the store. Gathering (:mod:`collector.gather`) reads a run folder
and returns records; storing them is the conductor's (and ``drivelab gather``'s), here."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from collector import build
from collector.errors import DrivelabError
from collector.gather.folder import GatheredRun, gather_run
from collector.runfolder import find_run_dirs
from collector.store import Store


def record(store: Store, gathered: GatheredRun) -> int:
    """Store a gathered run (scenario and cell created if new); an earlier gathering
    of the same repetition is replaced, with its device facts. Returns the run id. The
    run fact ``drivelab`` names the build that stored it (:func:`collector.build.info`:
    for ``drivelab run``, the one that ran it)."""
    info = gathered.scenario_info
    sid = store.add_scenario(
        gathered.scenario,
        baseline_drive=info.get("baseline") or None,
        description=info.get("description") or None,
    )
    cid = store.add_cell(sid, gathered.cell)
    run_id = store.record_run(
        cid,
        gathered.run,
        replace=True,
        scoped_facts=[(f.scope, f.host, f.facts) for f in gathered.facts],
    )
    store.add_facts(sid, {"drivelab": build.info()}, scope="run", run_id=run_id)
    return run_id


def gather_folders(
    target: Any, folders: Sequence[Path]
) -> Iterator[tuple[Path, GatheredRun | DrivelabError]]:
    """Every run folder in or under ``folders`` gathered and stored in the store at
    ``target`` (made if new), one at a time: each folder with its gathered run, or the
    one-line error that kept it out (the others are still stored)."""
    with Store.open(target) as store:
        for run_dir in find_run_dirs(folders):
            try:
                gathered = gather_run(run_dir)
                record(store, gathered)
            except DrivelabError as err:
                yield run_dir, err
                continue
            yield run_dir, gathered


def record_run_dir(store: Store, run_dir: Path | str) -> int:
    """Gather ``run_dir`` and store it: idempotent, a partial or failed run is stored
    as such. Returns the run id."""
    return record(store, gather_run(run_dir))
