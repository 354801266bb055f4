"""SSH trust for the followers: :class:`KnownHostsPolicy` accepts a client only if
an OpenSSH ``known_hosts`` file lists its key, read as OpenSSH reads it
(:func:`host_matches`)."""

from __future__ import annotations

import base64
import fnmatch
from pathlib import Path

import paramiko

__all__ = ["KnownHostsPolicy", "host_matches"]


class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """Accepts a server only if an OpenSSH ``known_hosts`` file lists its key.

    Paramiko's own ``load_host_keys`` matches names literally, so the lab's
    ``10.213.0.* ssh-ed25519 ...`` line would reject every client. This reads the file
    the way OpenSSH does: comma-separated patterns with ``*`` and ``?``, ``!``
    negation, hashed names (``|1|salt|hash``), ``[host]:port`` for ports other than 22
    (paramiko asks with that form), ``@revoked`` keys refused wherever their line is
    (revocation is checked first, over the whole file), ``@cert-authority`` lines
    skipped. Everything else is refused with a one-line reason."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def missing_host_key(self, client, hostname: str, key: paramiko.PKey) -> None:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            raise paramiko.SSHException(
                f"cannot read known_hosts {self.path}: {err.strerror or err}"
            ) from None
        blob = key.asbytes()
        # (marker, same key) for every line whose names match, in file order
        entries: list[tuple[str | None, bool]] = []
        for line in text.splitlines():
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            marker = fields.pop(0) if fields[0].startswith("@") else None
            if len(fields) < 3 or marker == "@cert-authority":
                continue
            if not host_matches(hostname, fields[0]):
                continue
            try:
                same = base64.b64decode(fields[2], validate=True) == blob
            except ValueError:
                continue
            entries.append((marker, same))
        # as OpenSSH does: a revoked key is refused wherever its line is in the file
        if ("@revoked", True) in entries:
            raise paramiko.SSHException(f"host key of {hostname} is marked @revoked in {self.path}")
        plain = [same for marker, same in entries if marker != "@revoked"]
        if any(plain):
            return
        if plain:
            raise paramiko.SSHException(
                f"host key of {hostname} ({key.get_name()}) does not match {self.path}"
            )
        raise paramiko.SSHException(
            f"{hostname} is not in {self.path}: refusing its unknown {key.get_name()} key"
        )


def host_matches(name: str, patterns: str) -> bool:
    """OpenSSH's ``match_hostname``: ``name`` against a known_hosts pattern list."""
    positive = False
    for item in patterns.split(","):
        negate = item.startswith("!")
        pattern = item.removeprefix("!")
        if pattern.startswith("|1|"):
            hit = paramiko.HostKeys.hash_host(name, pattern) == pattern
        else:
            # fnmatch's [...] classes are not OpenSSH's; escape them, keep * and ?
            escaped = pattern.lower().replace("[", "[[]")
            hit = fnmatch.fnmatchcase(name.lower(), escaped)
        if hit and negate:
            return False
        positive = positive or hit
    return positive
