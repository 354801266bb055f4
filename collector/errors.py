"""The one exception type a user ever sees: a clear, one-line message, no traceback."""


class DrivelabError(Exception):
    """A user-facing error. ``str(err)`` is the whole message: it names the culprit
    (file, YAML path, device, host) and what is wrong with it."""
