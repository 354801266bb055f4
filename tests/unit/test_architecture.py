"""The collector's tree is its architecture: every module in a room, the imports
between rooms only where docs/architecture.md draws them, no verb importing another
verb, no import circle. Read from the source (every ``import`` and ``from ... import``,
those inside functions and under ``TYPE_CHECKING`` included), nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from collector.paths import REPO

COLLECTOR = REPO / "collector"

#: module prefix -> room, the longest prefix wins (docs/architecture.md, "The tree")
ROOMS = {
    "collector.cli": "verbs",
    "collector.run": "run",
    "collector.hosts": "hosts",
    "collector.live": "live",
    "collector.scenario": "scenario",
    "collector.runfolder": "run folder",
    "collector.gather": "gather",
    "collector.verdicts": "verdicts",
    "collector.stats": "stats",
    "collector.parse": "parse",
    "collector.store": "store",
    "collector.report": "report",
    "collector.records": "types",
    "collector.cell": "types",
    "collector.errors": "types",
    "collector.paths": "types",
    "collector.units": "types",
    "collector.build": "types",
    "collector.documents": "types",
    "collector.ansible_plugins": "plugins",
}

#: (from room, to room): why that import must never be
NEVER = {
    ("gather", "store"): "gathering is pure: the conductor stores",
    ("gather", "run"): "gathering knows no runner",
    ("parse", "store"): "parsers are pure",
    ("parse", "run"): "parsers know no hosts",
    ("stats", "gather"): "statistics take records",
    ("stats", "run"): "statistics know no hosts",
    ("stats", "store"): "statistics take records",
    ("report", "run"): "reports read the store only",
    ("report", "gather"): "reports read the store only",
    ("run", "report"): "a runner knows no report",
    ("store", "report"): "the store knows no presentation",
    ("scenario", "run"): "a scenario is data",
    ("scenario", "hosts"): "a scenario is data; hosts are the inventory's",
    ("hosts", "plugins"): "plugins run inside Ansible only",
    ("types", "run"): "records are plain types",
    ("verbs", "store"): "verbs hold no SQL",
    ("verbs", "gather"): "verbs call a service",
}

#: module -> module arrows that cross a NEVER on purpose, and why
ALLOWED = {
    ("collector.cli.options", "collector.store.target"): "--db parsed: an address, no SQL",
    ("collector.cli.main", "collector.store.target"): "--db parsed: an address, no SQL",
    ("collector.cli.runcmd", "collector.store.target"): "the default store: an address",
    ("collector.cli.gathercmd", "collector.store.target"): "the default store: an address",
    ("collector.cli.transfercmd", "collector.store.target"): "the default store: an address",
    ("collector.cli.transfercmd", "collector.store.transfer"): (
        "export and import are the store's own service: a module between would only forward"
    ),
    ("collector.hosts.lease", "collector.ansible_plugins.filter.drivelab"): (
        "one definition of who a controller and a process are, shared with the filter that"
        " writes the same lease record inside Ansible"
    ),
}

#: the verbs' own shared module and the module that registers every verb
VERB_COMMONS = {"collector.cli", "collector.cli.options"}


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(COLLECTOR.rglob("*.py")):
        parts = f.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The collector modules ``path`` imports (``from pkg import mod`` is ``pkg.mod``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(f, modules) for m, f in modules.items()}


def room(module: str) -> str | None:
    best = max(
        (p for p in ROOMS if module == p or module.startswith(p + ".")), key=len, default=None
    )
    return ROOMS[best] if best else None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (Tarjan's strongly connected components of more
    than one module, or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert circles(graph) == [["a", "b", "c"], ["e"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    assert circles(_graph()) == []


def test_every_module_is_in_a_room():
    assert [m for m in _modules() if m != "collector" and room(m) is None] == []


def test_no_verb_imports_another_verb():
    graph = _graph()
    found = [
        (m, t)
        for m, targets in graph.items()
        if room(m) == "verbs" and m != "collector.cli.main"
        for t in targets
        if room(t) == "verbs" and t not in VERB_COMMONS
    ]
    assert found == []


@pytest.mark.parametrize("rule", sorted(NEVER), ids=lambda r: f"{r[0]}-not-{r[1]}")
def test_no_import_crosses_a_never(rule):
    """Gathering imports nothing of the store or the runner, nothing below the reports
    imports a report, and the other arrows docs/architecture.md says must never be."""
    graph = _graph()
    found = [
        (m, t)
        for m, targets in graph.items()
        for t in targets
        if (room(m), room(t)) == rule and (m, t) not in ALLOWED
    ]
    assert found == [], NEVER[rule]


def test_every_allowed_crossing_still_exists():
    """An exception outlives its import only as a stale line: the list shrinks with the code."""
    graph = _graph()
    assert [pair for pair in ALLOWED if pair[1] not in graph.get(pair[0], ())] == []
