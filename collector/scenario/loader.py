"""Reading a scenario file: hardened YAML loading, then validation against the schema.

``_read_yaml`` refuses what is not a small regular UTF-8 file, a key given twice, and
alias bombs (``MAX_VALUES``); ``parse`` checks keys, validates the document and every
size of it; ``load`` does both.
"""

from __future__ import annotations

import copy
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from collector.scenario.rules import SCENARIO_NAME
from collector.scenario.schema import Scenario
from collector.scenario.wording import _fail, _first_error, _key, _show

#: a scenario or an inventory is a few KB: a bigger file is not one (/dev/zero)
MAX_FILE_BYTES = 1024**2
#: values in a document once YAML aliases are expanded: a "billion laughs" file is a
#: few lines that expand to 10^9 values, refused before anything walks them
MAX_VALUES = 100_000


# --- reading files ---------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor`: SafeLoader merges it (explicit keys win, as in YAML)
        key = loader.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:
            continue  # an unhashable key: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {_show(key)} given twice", key_node.start_mark
            )
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _TooLarge(Exception):
    pass


def _count_values(doc: Any) -> int:
    """Values in ``doc`` with YAML aliases expanded (a shared list counts once per use),
    counted without expanding them; _TooLarge past MAX_VALUES or on a cycle."""
    done: dict[int, int] = {}

    def count(node: Any) -> int:
        if not isinstance(node, dict | list):
            return 1
        if id(node) in done:
            if done[id(node)] < 0:
                raise _TooLarge("an alias refers to the value that holds it")
            return done[id(node)]
        done[id(node)] = -1
        total = 1
        for child in node.values() if isinstance(node, dict) else node:
            total += count(child)
            if total > MAX_VALUES:
                raise _TooLarge(
                    f"too large: more than {MAX_VALUES} values once YAML aliases are expanded"
                )
        done[id(node)] = total
        return total

    return count(doc)


def _stat(path: Path, source: str) -> int:
    """st_mode of ``path``; a NUL byte in it is said in drivelab's words (os.stat's own
    differ between Python versions)."""
    if "\x00" in str(path):
        raise _fail(source, "cannot read (a NUL byte in the path)")
    return path.stat().st_mode


def _read_yaml(path: Path, source: str) -> Any:
    try:
        mode = _stat(path, source)
        if stat.S_ISDIR(mode):
            raise _fail(source, "is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise _fail(source, "not a regular file (a device, pipe or socket)")
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise _fail(source, "no such file") from None
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise _fail(source, f"cannot read ({exc.__class__.__name__}: {why})") from None
    if len(data) > MAX_FILE_BYTES:
        raise _fail(source, f"too large (over {MAX_FILE_BYTES // 1024**2} MiB): not a YAML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(source, f"cannot read (UnicodeDecodeError: {exc})") from None
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f"line {mark.line + 1}: " if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        raise _fail(source, f"{line}not valid YAML ({problem})") from None
    except yaml.YAMLError as exc:
        first = (str(exc).splitlines() or ["syntax error"])[0]
        raise _fail(source, f"not valid YAML ({first})") from None
    except (ValueError, OverflowError) as exc:  # a date like 2020-02-30, a 5000-digit number
        raise _fail(source, f"not valid YAML ({str(exc).split(';')[0]})") from None
    except RecursionError:
        raise _fail(source, "not valid YAML (nested too deep)") from None
    try:
        _count_values(doc)
    except _TooLarge as exc:
        raise _fail(source, str(exc)) from None
    except RecursionError:
        raise _fail(source, "not valid YAML (nested too deep)") from None
    return doc


def _check_keys(doc: Any, where: str = "") -> None:
    """Every mapping key is a string (YAML also allows numbers, null, dates, lists...)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if not isinstance(key, str):
                raise ValueError(f"{where or 'document'}: key {_show(key)} is not a string")
            _check_keys(value, f"{where}.{_key(key)}" if where else _key(key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            _check_keys(value, f"{where}[{i}]")


def _merge(base: Any, override: Any) -> Any:
    """Mappings merge key by key; anything else (lists included) replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def _validate(doc: Any, source: str, base: Path | None, prefix: str = "") -> Scenario:
    try:
        return Scenario.model_validate(doc, context={"base": base})
    except ValidationError as exc:
        raise _fail(source, _first_error(exc, prefix, root=Scenario)) from None
    except (RecursionError, OverflowError) as exc:
        where = f"{prefix}: " if prefix else ""
        raise _fail(source, f"{where}cannot be read ({exc.__class__.__name__})") from None


def parse(
    doc: Any, source: str = "<scenario>", size: str | None = None, base: Path | None = None
) -> Scenario:
    """Validates an already-read document (what ``load`` does after reading the YAML).

    ``base`` is the folder a custom ``script`` is relative to (None: not checked)."""
    if doc is None:
        raise _fail(source, "empty file")
    if not isinstance(doc, dict):
        raise _fail(source, f"must be a mapping of keys (got {type(doc).__name__})")
    try:
        _check_keys(doc)
    except ValueError as exc:
        raise _fail(source, str(exc)) from None
    except RecursionError:
        raise _fail(source, "nested too deep") from None
    scenario = _validate(doc, source, base)
    sizes = doc.get("sizes") or {}
    for name, override in sizes.items():
        if not SCENARIO_NAME.fullmatch(name):
            raise _fail(
                source, f"sizes: {_show(name)} is not a valid size name ({SCENARIO_NAME.pattern})"
            )
        for key in ("name", "sizes"):
            if key in override:
                raise _fail(source, f"sizes.{name}.{key}: a size cannot change {key}")
        _validate(_merge(doc, override), source, base, prefix=f"sizes.{name}")
    if size is not None:
        if size not in sizes:
            have = ", ".join(sizes) or "none"
            raise _fail(source, f"sizes: no size {size!r} (have: {have})")
        scenario = _validate(_merge(doc, sizes[size]), source, base, prefix=f"sizes.{size}")
        if "description" not in sizes[size] and scenario.description.strip():
            # the file's words describe its full size: said so where they are printed,
            # beside what ran (the report's test line); a size may say its own
            said = f"{scenario.description.strip()} [at full size; its '{size}' size ran]"
            scenario = scenario.model_copy(update={"description": said})
    scenario._source = source
    scenario._size = size
    return scenario


def load(path: Path | str, size: str | None = None) -> Scenario:
    """Reads and validates a scenario file, with ``sizes[size]`` merged over it.

    Every size of the file is validated, whichever is asked for. Raises DrivelabError
    (one line: file, YAML path, problem)."""
    source = str(path)
    path = Path(path)
    doc = _read_yaml(path, source)
    return parse(doc, source, size=size, base=path.parent)
