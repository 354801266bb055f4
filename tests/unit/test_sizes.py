"""The collector's modules and functions stay readable: no module over 500 lines, no
function over 80 (docs/architecture.md, "Sizes"). A stage that grows past them is split
by what it does, as run/, gather/ and records/ were."""

import ast

from collector.paths import REPO

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules():
    return sorted((REPO / "collector").rglob("*.py"))


def test_no_module_is_over_500_lines():
    long = {
        str(p.relative_to(REPO)): n
        for p in _modules()
        if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_is_over_80_lines():
    long = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(REPO)}:{node.name}"] = n
    assert long == {}
