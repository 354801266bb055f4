"""Just enough of the PostgreSQL wire protocol (v3) to see which authentication the
server asks for and to answer it the wrong way: a test of pg_hba's method, which libpq
15 cannot do (require_auth arrived in 16)."""

from __future__ import annotations

import socket
import struct

AUTH_NAMES = {0: "ok", 3: "cleartext", 5: "md5", 10: "SASL"}


def _recv_message(sock: socket.socket) -> tuple[bytes, bytes]:
    head = b""
    while len(head) < 5:
        chunk = sock.recv(5 - len(head))
        if not chunk:
            raise ConnectionError("server closed the connection")
        head += chunk
    kind, length = head[:1], struct.unpack("!I", head[1:])[0]
    body = b""
    while len(body) < length - 4:
        chunk = sock.recv(length - 4 - len(body))
        if not chunk:
            raise ConnectionError("server closed the connection")
        body += chunk
    return kind, body


def _error_text(body: bytes) -> str:
    fields = dict((f[:1].decode(), f[1:].decode(errors="replace")) for f in body.split(b"\0") if f)
    return fields.get("M", "")


def try_plaintext(host: str, port: int, user: str, database: str, password: str) -> dict:
    """Starts a session, notes the authentication request, answers it with a cleartext
    password message (what a 'password' or downgraded client sends), and reports."""
    out: dict = {"requested": None, "mechanisms": [], "error": None, "authenticated": False}
    with socket.create_connection((host, port), timeout=10) as sock:
        params = b"user\0" + user.encode() + b"\0database\0" + database.encode() + b"\0\0"
        sock.sendall(struct.pack("!II", 8 + len(params), 196608) + params)
        kind, body = _recv_message(sock)
        if kind == b"E":
            out["error"] = _error_text(body)
            return out
        code = struct.unpack("!I", body[:4])[0]
        out["requested"] = AUTH_NAMES.get(code, str(code))
        if code == 10:
            out["mechanisms"] = [m.decode() for m in body[4:].split(b"\0") if m]
        pw = password.encode() + b"\0"
        sock.sendall(b"p" + struct.pack("!I", 4 + len(pw)) + pw)
        kind, body = _recv_message(sock)
        if kind == b"E":
            out["error"] = _error_text(body)
        elif kind == b"R" and struct.unpack("!I", body[:4])[0] == 0:
            out["authenticated"] = True
    return out


if __name__ == "__main__":  # run inside a client's namespace by the tests
    import json
    import sys

    host, port, user, database = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    print(json.dumps(try_plaintext(host, port, user, database, sys.stdin.readline().strip())))
