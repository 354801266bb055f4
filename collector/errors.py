"""The one exception type a user ever sees: a clear, one-line message, no traceback."""


class DrivelabError(Exception):
    """A user-facing error. ``str(err)`` is the whole message: it names the culprit
    (file, YAML path, device, host) and what is wrong with it."""


def one_line(text: str) -> str:
    """``text`` with newlines, NUL, ESC, U+2028 and other unprintable characters escaped:
    a path or argument holding them (the messages quote what was given) stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
