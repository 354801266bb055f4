"""What drivelab build made a document: its version and, in a git checkout, the commit
its HEAD names, read once per process. Every machine-
readable document (``--json``) and every run's facts carry it, with the version of
the documents' own shape, :data:`SCHEMA_VERSION`."""

from __future__ import annotations

import functools

from collector import __version__
from collector.paths import REPO

#: the shape of drivelab's JSON documents; raised when a key changes meaning or goes
SCHEMA_VERSION = 1


@functools.cache
def commit() -> str | None:
    """The commit the checkout's HEAD names, read from its git folder (no git process:
    a report runs none), None when the package is not run from a git checkout. Changes
    not committed are not seen: the commit is the build's base."""
    git = REPO / ".git"
    try:
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            git = (REPO / git.read_text(encoding="utf-8").split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref: "):
            return head or None  # a detached HEAD names the commit itself
        ref = head[5:]
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text(encoding="utf-8").strip()).resolve()
        for folder in (git, common):
            if (folder / ref).is_file():
                return (folder / ref).read_text(encoding="utf-8").strip() or None
        for line in (common / "packed-refs").read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    return None


def info() -> dict[str, str | None]:
    """``{"version": ..., "commit": ...}``: the run fact ``drivelab`` and the ``drivelab``
    key of every JSON document."""
    return {"version": __version__, "commit": commit()}


def stamped(doc: dict) -> dict:
    """``doc`` with ``schema_version`` and ``drivelab`` (:func:`info`) first."""
    return {"schema_version": SCHEMA_VERSION, "drivelab": info(), **doc}
