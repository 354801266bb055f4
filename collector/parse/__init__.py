"""Parsers: raw tool output in, records out. Pure functions, by keys and regexes.

Every parser names its input (``source``: a file name, or ``<stdin>``) and raises
:class:`ParseError` with the file and line when the input is not what it claims to
be or stops short: a figure is never silently zero.
"""

from __future__ import annotations

from collector.errors import DrivelabError


class ParseError(DrivelabError):
    """Input a parser cannot read. ``str(err)`` is ``<source>:<line>: <what is wrong>``."""

    def __init__(self, source: str, line: int | None, message: str) -> None:
        self.source = source
        self.line = line
        self.message = message
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")


def excerpt(text: str, width: int = 60) -> str:
    """A line as quoted in an error message: stripped and shortened."""
    text = text.strip()
    return repr(text if len(text) <= width else text[: width - 3] + "...")
