# The lab's lease, kept in one file on the DB host: who measures or writes there now.
# Used by the module drivelab_lease (playbooks) and, sent over SSH as it is, by drivelab run's
# heartbeat (collector/hosts/lease.py): one rule book for both. Python standard library only.
#
# The file holds one JSON record (the holder); no file is a free lab. Every change happens under
# flock on "<file>.lock" (never removed), and is written to a temporary file in the same folder,
# fsync'd and renamed over the lease: a reader sees the old record or the new one, never half.
# All times in the record are the DB host's clock (since, renewed, expected_end), so two
# controllers with different clocks judge a lease alike.
#
# The file is readable by every user of the DB host (drivelab status reads it), so it holds
# the sha256 of the holder's token, never the token: only the holder, who has the token, can
# renew or release it. A holder whose process is gone is taken over early only by a holder
# of the same controller (its controller_id: machine id and boot, not its host name, which
# cloned controllers share), which is the one that could see the process gone; any other
# waits until the holder is stale by this host's clock.
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import tempfile
import time

#: what a holder record says (besides the token's digest, the holder's identity)
FIELDS = ("user", "controller", "controller_id", "pid", "pid_start", "purpose", "scenario", "cell")
#: the refusal codes a failed take or check carries (collector/hosts/lease.py decides on them)
HELD = "lease_held"
LOST = "lease_lost"


def read(path):
    """The holder record, or None when the lab is free."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return None
    except ValueError:
        return None  # cannot happen with the rename; a hand-edited file counts as free
    return doc if isinstance(doc, dict) and (doc.get("token_sha256") or doc.get("token")) else None


def digest(token):
    """What the file keeps of a token."""
    return hashlib.sha256(str(token).encode("utf-8")).hexdigest()


def holds(doc, token):
    """Whether ``token`` is the holder of record ``doc`` (a record of before the digest
    kept the token itself)."""
    if doc.get("token_sha256"):
        return doc["token_sha256"] == digest(token)
    return doc.get("token") == token


def _write(path, doc):
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".lease-", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class _Locked:
    """flock on <path>.lock for one read-modify-write."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        folder = os.path.dirname(self.path) or "."
        os.makedirs(folder, mode=0o755, exist_ok=True)
        self.fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def stale(doc, now):
    """Seconds since the holder last renewed beyond its time to live, or None while valid."""
    over = now - float(doc.get("renewed", 0)) - float(doc.get("ttl", 0))
    return round(over, 1) if over > 0 else None


def describe(doc, now=None):
    """The holder in a few words: who, what, since when, expected end."""
    now = time.time() if now is None else now
    what = doc.get("purpose") or "drivelab"
    if doc.get("scenario"):
        what += " of scenario {!r}".format(doc["scenario"])
    if doc.get("cell"):
        what += ", cell {}".format(doc["cell"])
    text = "{} by {}@{} (pid {}), since {}".format(
        what,
        doc.get("user") or "?",
        doc.get("controller") or "?",
        doc.get("pid") or "?",
        _utc(doc.get("since")),
    )
    end = doc.get("expected_end")
    if end:
        text += f", expected to end about {_utc(end)}"
        if end < now:
            text += f" ({_span(now - end)} ago)"
    renewed = doc.get("renewed")
    if renewed is not None:
        text += f", renewed {_span(max(0.0, now - renewed))} ago"
    return text


def _utc(ts):
    if not ts:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(ts)))


def _span(seconds):
    seconds = round(seconds)
    if seconds < 600:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600.0:.1f} h"


def take(path, holder, ttl, *, expected_seconds=None, takeover=None, must_hold=False, now=None):
    """Take or renew the lease for ``holder`` (a dict with token and FIELDS).

    Returns a result dict: ``held`` (bool), ``lease`` (the record now), ``changed``,
    ``took_over`` ({record, why} of a holder replaced) and, when not held, ``refusal``
    (HELD: someone else holds it; LOST: ``must_hold`` and the token no longer holds it).
    A holder is replaced when the lease is free, when it has not renewed within its own
    time to live by this host's clock, or when ``takeover`` is its token's digest and
    ``holder`` comes from its very controller (``controller_id``), which saw its process
    gone. ``must_hold``: only renew; a lease that is not this token's is not taken (a
    stage of a run checks that its run still holds the lab)."""
    token = holder["token"]
    with _Locked(path):
        now = time.time() if now is None else now
        cur = read(path)
        took_over = None
        if cur is not None and holds(cur, token):
            doc = {k: v for k, v in cur.items() if k != "token"}
        elif must_hold:
            why = "it is now held by " + describe(cur, now) if cur else "it was released"
            return {"held": False, "refusal": LOST, "lease": cur, "changed": False, "why": why}
        elif cur is None:
            doc = {"since": now}
        else:
            late = stale(cur, now)
            if late is not None:
                why = "not renewed for {} (time to live {})".format(
                    _span(now - float(cur.get("renewed", 0))),
                    _span(float(cur.get("ttl", 0))),
                )
            elif (
                takeover
                and takeover in (cur.get("token_sha256"), digest(cur.get("token") or ""))
                and cur.get("controller_id")
                and holder.get("controller_id") == cur.get("controller_id")
            ):
                why = "its process {} on {} is gone".format(cur.get("pid"), cur.get("controller"))
            else:
                return {"held": False, "refusal": HELD, "lease": cur, "changed": False}
            took_over = {"record": cur, "why": why}
            doc = {"since": now}
        doc.update({k: holder.get(k) for k in FIELDS if k in holder})
        doc.update(token_sha256=digest(token), renewed=now, ttl=float(ttl))
        if expected_seconds is not None:
            doc["expected_end"] = now + float(expected_seconds)
        _write(path, doc)
        out = {"held": True, "lease": doc, "changed": True}
        if took_over:
            out["took_over"] = took_over
        return out


def release(path, token):
    """Free the lease if ``token`` holds it; another holder's lease is left alone."""
    with _Locked(path):
        cur = read(path)
        if cur is None or not holds(cur, token):
            return {"released": False, "lease": cur, "changed": False}
        os.unlink(path)
        return {"released": True, "lease": None, "changed": True}


def query(path, now=None):
    """The record (None: free), whether it is stale, and the host's clock."""
    now = time.time() if now is None else now
    cur = read(path)
    return {"lease": cur, "stale": stale(cur, now) if cur else None, "now": now}


def request(doc):
    """One operation from a JSON request (the heartbeat's way in, over SSH):
    {"op": "take"|"release"|"query", "path": ..., ...the arguments of that function}."""
    op = doc.pop("op")
    if op == "take":
        return take(
            doc["path"],
            doc["holder"],
            doc["ttl"],
            expected_seconds=doc.get("expected_seconds"),
            takeover=doc.get("takeover"),
            must_hold=bool(doc.get("must_hold")),
        )
    if op == "release":
        return release(doc["path"], doc["token"])
    if op == "query":
        return query(doc["path"])
    raise ValueError(f"unknown lease operation {op!r}")


def main_stdin():
    """python3 - <this file + a call of main_stdin()>: one request line in, JSON out."""
    try:
        out = request(json.loads(sys.stdin.readline()))
    except (OSError, ValueError, KeyError) as err:
        out = {"error": f"{err.__class__.__name__}: {err}"}
    sys.stdout.write(json.dumps(out) + "\n")
