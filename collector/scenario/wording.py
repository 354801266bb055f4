"""Pydantic's errors, and every other problem with a file, as one line.

``_fail`` makes the ``DrivelabError`` every module of the package raises: the file, then
the YAML path and what is wrong, cut to ``MAX_MESSAGE`` characters and with control
characters escaped. ``_first_error`` turns a pydantic ``ValidationError`` into that
path and message; it is given the model the document was validated as (``root``, the
schema's ``Scenario``), so this module imports nothing of the package.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError

from collector.errors import DrivelabError

#: an error line is the file, then at most this many characters
MAX_MESSAGE = 300


class PathError(ValueError):
    """A check's problem at a path below the value it checks (``sets.fast.port`` of
    ``postgresql``): ``_first_error`` adds ``path`` to the YAML path it reports."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _show(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key(part: Any, limit: int = 40) -> str:
    """A mapping key as an error's YAML path shows it (a long one cut)."""
    text = str(part)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes an annotation may hold (through Annotated, list, dict, unions)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (list, dict, typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _unwrap(arg)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _model_at(loc: tuple[Any, ...], root: type[BaseModel]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and part.startswith("<")):
            continue
        if model is None or part not in model.model_fields:
            return None
        models = _unwrap(model.model_fields[part].annotation)
        model = models[0] if models else None
    return model


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.startswith("<"):
            continue  # a union tag, not a key of the file
        else:
            out += f".{_key(part)}" if out else _key(part)
    return out


#: pydantic error types, by prefix, and the line they become ({got} is the input)
_MESSAGES = {
    "greater_than_equal": "must be at least {ge} (got {got})",
    "greater_than": "must be greater than {gt} (got {got})",
    "less_than_equal": "must be at most {le} (got {got})",
    "less_than": "must be less than {lt} (got {got})",
    "literal_error": "must be one of {expected} (got {got})",
    "too_long": "at most {max_length} items",
    "string_too_long": "at most {max_length} characters",
    "int_": "must be an integer (got {got})",
    "float_": "must be a number (got {got})",
    "string_": "must be a string (got {got})",
    "bool_": "must be true or false (got {got})",
    "list_": "must be a list (got {got})",
    "dict_": "must be a mapping (got {got})",
    "model_": "must be a mapping (got {got})",
    "missing": "required, missing",
}


def _unknown_key(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    model = _model_at(loc[:-1], root)
    known = list(model.model_fields) if model else []
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    if close:
        return f"unknown key (did you mean {close[0]!r}?)"
    return f"unknown key (allowed: {', '.join(known)})" if known else "unknown key"


def _message(err: Any, root: type[BaseModel]) -> str:
    kind, ctx = err["type"], dict(err.get("ctx") or {})
    got = _show(err.get("input"))
    if kind == "extra_forbidden":
        return _unknown_key(tuple(err["loc"]), root)
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", err["msg"]))
    if kind == "too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"needs at least {ctx['min_length']} items (got {ctx.get('actual_length')})"
    for prefix, text in _MESSAGES.items():
        if kind.startswith(prefix):
            try:
                return text.format(got=got, **ctx)
            except (KeyError, IndexError):
                break
    msg = str(err["msg"])
    return f"{msg[:1].lower()}{msg[1:]} (got {got})"


def _first_error(exc: ValidationError, prefix: str = "", *, root: type[BaseModel]) -> str:
    err = exc.errors(include_url=False)[0]
    where = _path(tuple(err["loc"]))
    message = _message(err, root)
    below = (err.get("ctx") or {}).get("error")
    if isinstance(below, PathError):  # a check names the key below its value at fault
        joint = "" if below.path.startswith("[") else "."  # an item: filesystems[1]
        where = f"{where}{joint}{below.path}" if where else below.path
    if not where and re.match(r"[a-z_]+(\[\d+\])?(\.[a-z_]+(\[\d+\])?)*: ", message):
        # a model-level check names its own path ("raid[0].name: ...")
        where, message = message.split(": ", 1)
    index = re.match(r"\[(\d+)\]: ", message)
    if index:  # a list check names the item at fault
        where, message = f"{where}[{index.group(1)}]", message[index.end() :]
    where = ".".join(p for p in (prefix, where) if p)
    return f"{where}: {message}" if where else message


def _printable(text: str) -> str:
    """``text`` with control and line-separating characters (newline, NUL, ESC, U+2028...)
    escaped, so an error stays one line on a terminal and in a log."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _fail(source: str, message: str) -> DrivelabError:
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return DrivelabError(_printable(f"{source}: {message}"))
