# Keeps Ansible's module payloads (AnsiballZ: a module zipped with the module_utils it
# imports) from one ansible-playbook run to the next. Ansible builds them into a folder of
# its own run's temporary directory, so every run builds each module it uses again: the
# first run of a module in a playbook costs more than the next ones (docs/scaling.md,
# "Why the hot path is shaped as it is"). When a playbook starts, this plugin fills
# that folder from a lasting one, ~/.ansible/drivelab-module-cache/<key>, and when it
# ends, adds to it what the run built. The key is a hash of everything a payload is built
# from: ansible-core's and the collections' versions and install paths, and the content
# of every file in the folders outside them that modules and module_utils come from (each
# role's library/ and module_utils/ under the roles path and beside the playbook, the
# configured library and module_utils paths, collections installed outside the venv). An
# edited module is a new key, never a stale payload. Payloads are hard links put in place
# by rename, so runs at the same time share a key safely, and a run never reads from the
# lasting folder after it started: keys beyond the newest eight that no run used for an
# hour are removed. A folder not this user's own, or any error, leaves Ansible's own
# per-run cache as it is (with a warning for an error).
#
# A payload kept also carries the bytecode of its Python files, compiled once here by the
# controller's Python: on the hosts Python otherwise compiles every module_util the
# module imports from the zip's sources on every module run, most of a small module's
# time on the host (docs/scaling.md). Each .pyc is checked-hash (PEP 552): Python uses it
# only when its magic number is the host Python's own and its hash matches the source
# beside it in the zip, and reads the source otherwise, as it does without one (hosts with
# another Python version gain nothing and lose nothing). Where the hosts run another
# Python version than the controller, the inventory's `drivelab_bytecode_python` (group
# all) names a Python of theirs that runs on the controller, as an argv (the lab's
# container and VM hosts: their Debian image's, under chroot): that Python compiles the
# bytecode instead, in one process for all the sources a run adds; it is part of the key.
# Under an emulated CPU (the VM lab's TCG) compiling from source is most of every module
# run (docs/scaling.md, "Module bytecode"). A compiler that fails leaves the controller's
# bytecode, with a warning. A payload this plugin cannot read (another ansible-core's
# format) is kept as Ansible built it.
from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.util
import io
import json
import marshal
import os
import pickle
import re
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path

from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ANSIBLE_CORE_VERSION

DOCUMENTATION = """
name: drivelab_module_cache
type: aggregate
short_description: Ansible's module payload cache kept between runs, keyed by its sources
description: >-
  fills this run's AnsiballZ cache from ~/.ansible/drivelab-module-cache/<key> when a
  playbook starts and adds what the run built when it ends; the key is a hash of
  ansible-core, the collections and the content of every module and module_utils folder
"""

ROOT = "~/.ansible/drivelab-module-cache"
#: keys kept whatever their age (the newest by use), and the idle time after which others go
KEEP = 8
MAX_AGE_S = 3600
KEY = re.compile(r"^[0-9a-f]{32}$")
#: Ansible's own name for its per-run cache folder (ansible.executor.module_common)
CACHE_NAME = "ansiballz_cache"
#: what this plugin keeps, in the key: payloads kept by a version without bytecode are
#: not served to one that adds it
FORMAT = "payload+bytecode"
#: the inventory variable (group all) naming the hosts' Python on the controller, an argv
BYTECODE_VAR = "drivelab_bytecode_python"
#: seconds the hosts' Python may take to compile a run's new sources
COMPILE_TIMEOUT_S = 300
#: what that Python runs: JSON {name: base64 source} on stdin, {name: base64 .pyc or null}
#: on stdout, each .pyc checked-hash (PEP 552) with its own magic number and source hash
COMPILE = r"""
import base64, importlib.util, json, marshal, sys
head = importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little")
out = {}
for name, text in json.load(sys.stdin).items():
    source = base64.b64decode(text)
    try:
        code = compile(source, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        out[name] = None
        continue
    pyc = head + importlib.util.source_hash(source) + marshal.dumps(code)
    out[name] = base64.b64encode(pyc).decode()
json.dump(out, sys.stdout)
"""


class Ambiguous(Exception):
    """Two folders hold a module (or module_util) of the same name: which one a run gets
    depends on the roles it loads, so one key cannot stand for both."""


def module_dirs(basedir: str) -> list[tuple[str, Path]]:
    """Every folder outside the installed packages that modules (``library``) or
    module_utils of a run of a playbook in ``basedir`` can come from, by kind."""
    base = Path(basedir)
    dirs = [("library", Path(p)) for p in C.DEFAULT_MODULE_PATH]
    dirs += [("module_utils", Path(p)) for p in C.DEFAULT_MODULE_UTILS_PATH]
    dirs += [("library", base / "library"), ("module_utils", base / "module_utils")]
    for roles in [*C.DEFAULT_ROLES_PATH, str(base / "roles")]:
        root = Path(roles)
        if root.is_dir():
            for role in sorted(root.iterdir()):
                dirs += [("library", role / "library"), ("module_utils", role / "module_utils")]
    for path in C.COLLECTIONS_PATHS:
        found = Path(path) / "ansible_collections"
        if found.is_dir() and not found.resolve().is_relative_to(Path(sys.prefix).resolve()):
            dirs += [("collection", d) for d in sorted(found.glob("*/*/plugins/modules"))]
            dirs += [("collection", d) for d in sorted(found.glob("*/*/plugins/module_utils"))]
    unique: dict[Path, str] = {}
    for kind, folder in dirs:
        if folder.is_dir():
            unique.setdefault(folder.resolve(), kind)
    return [(kind, folder) for folder, kind in unique.items()]


def cache_key(basedir: str, compiler: list[str] | None = None) -> str:
    """A hash of what this run's payloads are built from (and the Python that compiles
    their bytecode, when not this one); :class:`Ambiguous` when two folders hold a module
    or module_util of the same name."""
    h = hashlib.sha256()
    try:
        collections = metadata.version("ansible")
    except metadata.PackageNotFoundError:
        collections = "none"
    parts = [FORMAT, ANSIBLE_CORE_VERSION, collections, sys.prefix, C.__file__]
    if compiler:
        parts.append(json.dumps(compiler))
    for part in parts:
        h.update(f"{part}\0".encode())
    seen: dict[tuple[str, str], Path] = {}
    for kind, folder in module_dirs(basedir):
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, folder)
                # a module by its name without extension, a module_util by its path
                named = (kind, os.path.splitext(rel)[0] if kind == "library" else rel)
                if kind != "collection" and name != "__init__.py":
                    if named in seen:
                        raise Ambiguous(f"{kind} {rel} is in both {seen[named]} and {folder}")
                    seen[named] = folder
                h.update(f"{path}\0".encode())
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:32]


def own_folder(path: Path) -> bool:
    """Made if missing; a folder of this user's that no one else can write to."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def payloads(folder: Path) -> list[Path]:
    """The payloads in a cache folder (not Ansible's lock files or part-written ones)."""
    return sorted(
        p for p in folder.iterdir()
        if p.is_file() and not p.name.endswith((".lock", "-part", ".tmp"))
    )  # fmt: skip


def link_or_copy(src: Path, dest: Path) -> None:
    """``dest`` as ``src``, put in place at once (a hard link where it can be)."""
    part = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    try:
        os.link(src, part)
    except OSError:
        shutil.copyfile(src, part)
    os.replace(part, dest)


def pyc(source: bytes, name: str) -> bytes | None:
    """``source``'s checked-hash bytecode file for this Python (PEP 552: magic number,
    flags 0b11, the source's hash, the marshalled code), None where this Python cannot
    compile it (the host's Python reads the source then, as ever)."""
    try:
        code = compile(source, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    head = importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little")
    return head + importlib.util.source_hash(source) + marshal.dumps(code)


def source_key(name: str, data: bytes) -> bytes:
    """The key of a source file of a payload in ``compiled`` (its path and content)."""
    return hashlib.sha256(name.encode() + b"\0" + data).digest()


def sources(payload: bytes) -> dict[str, bytes]:
    """The Python sources in the pickled AnsiballZ payload ``payload`` that lack a .pyc,
    by their path in its zip; none when it is not Ansible's (another ansible-core's
    format: :func:`keep` keeps it as built) or has bytecode already."""
    try:
        cached = pickle.loads(payload)  # noqa: S301 - Ansible's own cache file, in a folder of ours
        zip_data = getattr(cached, "zip_data", None)
        if not dataclasses.is_dataclass(cached) or not isinstance(zip_data, bytes):
            return {}
        with zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data))) as z:
            names = set(z.namelist())
            if any(name.endswith(".pyc") for name in names):
                return {}
            return {name: z.read(name) for name in sorted(names) if name.endswith(".py")}
    except Exception:  # whatever it is, it is not a payload to compile
        return {}


def compile_with(compiler: list[str], files: dict[str, bytes]) -> dict[bytes, bytes | None]:
    """``files`` (path: source) compiled by the Python ``compiler`` runs, in one process,
    by :func:`source_key`; OSError when it cannot run or says nothing usable."""
    if not files:
        return {}
    request = json.dumps({n: base64.b64encode(d).decode() for n, d in files.items()})
    try:
        proc = subprocess.run(
            [*compiler, "-I", "-B", "-c", COMPILE], input=request, capture_output=True,
            text=True, timeout=COMPILE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as err:
        raise OSError(f"{compiler[0]}: no answer in {COMPILE_TIMEOUT_S} s") from err
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise OSError(f"{' '.join(compiler)}: exit {proc.returncode}: {last}")
    try:
        answer = json.loads(proc.stdout)
        return {
            source_key(name, data): None if answer[name] is None else base64.b64decode(answer[name])
            for name, data in files.items()
        }
    except (ValueError, KeyError, TypeError) as err:
        raise OSError(f"{' '.join(compiler)}: unreadable answer ({err})") from err


def with_bytecode(payload: bytes, compiled: dict[bytes, bytes | None]) -> bytes | None:
    """The pickled AnsiballZ payload ``payload`` (ansible-core's _CachedModule: its zip,
    base64-encoded, in ``zip_data``) with a .pyc beside each .py in its zip; None when
    it is not that, or has bytecode already. ``compiled`` holds the .pyc of each source
    seen so far (module_utils are in most payloads)."""
    cached = pickle.loads(payload)  # noqa: S301 - Ansible's own cache file, in a folder of ours
    zip_data = getattr(cached, "zip_data", None)
    if not dataclasses.is_dataclass(cached) or not isinstance(zip_data, bytes):
        return None
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data))) as zin,
        zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zout,
    ):
        names = set(zin.namelist())
        if any(name.endswith(".pyc") for name in names):
            return None
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, data)
            if not info.filename.endswith(".py") or f"{info.filename}c" in names:
                continue
            key = source_key(info.filename, data)
            if key not in compiled:
                compiled[key] = pyc(data, info.filename)
            if compiled[key] is not None:
                entry = zipfile.ZipInfo(f"{info.filename}c", date_time=info.date_time)
                zout.writestr(entry, compiled[key], compress_type=zipfile.ZIP_DEFLATED)
    return pickle.dumps(dataclasses.replace(cached, zip_data=base64.b64encode(out.getvalue())))


def keep(src: Path, dest: Path, compiled: dict[bytes, bytes | None]) -> None:
    """The payload ``src`` as ``dest``, with bytecode where :func:`with_bytecode` can add
    it, as Ansible built it otherwise; put in place at once."""
    with open(src, "rb") as fh:
        payload = fh.read()
    try:
        data = with_bytecode(payload, compiled)
    except Exception:  # another ansible-core's format: kept as built
        data = None
    if data is None:
        link_or_copy(src, dest)
        return
    part = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    with open(part, "wb") as fh:
        fh.write(data)
    os.replace(part, dest)


def prune(root: Path, now: float) -> None:
    """Keys beyond the newest KEEP that were not used for MAX_AGE_S (a run reads its
    payloads from its own folder: removing a key never disturbs one)."""
    keys = sorted(
        (p for p in root.iterdir() if KEY.match(p.name) and p.is_dir() and not p.is_symlink()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in keys[KEEP:]:
        if now - old.stat().st_mtime > MAX_AGE_S:
            shutil.rmtree(old, ignore_errors=True)


class Cache:
    """This run's payload folder filled from root/<key> when the playbook starts, and
    what the run built added to it when the playbook ends (its bytecode compiled by
    ``compiler``, the hosts' Python, where one is given)."""

    def __init__(self, basedir: str, root: Path, compiler: list[str] | None = None) -> None:
        self.run = Path(C.DEFAULT_LOCAL_TMP) / CACHE_NAME
        self.kept: Path | None = None
        self.compiler = compiler
        if self.run.exists() or not own_folder(root):
            return  # built something already (a second playbook of this run), or unsafe
        kept = root / cache_key(basedir, compiler)
        if not own_folder(kept):
            return
        now = time.time()
        os.utime(kept, (now, now))
        self.run.mkdir(mode=0o700)
        for payload in payloads(kept):
            link_or_copy(payload, self.run / payload.name)
        self.kept = kept
        prune(root, now)

    def save(self, warn=None) -> int:
        """The payloads this run built, into the kept folder; how many. With a compiler,
        their sources are compiled by it first, all at once; where it fails, ``warn`` is
        told and the controller's Python compiles them."""
        if self.kept is None or not self.run.is_dir():
            return 0
        self.kept.mkdir(mode=0o700, exist_ok=True)  # pruned meanwhile by another run
        have = {p.name for p in payloads(self.kept)}
        new = [p for p in payloads(self.run) if p.name not in have]
        compiled: dict[bytes, bytes | None] = {}
        if self.compiler and new:
            files: dict[str, bytes] = {}
            for payload in new:
                files.update(sources(payload.read_bytes()))
            try:
                compiled = compile_with(self.compiler, files)
            except OSError as err:
                if warn is not None:
                    warn(f"the payloads' bytecode compiled by the controller's Python: {err}")
        for payload in new:
            keep(payload, self.kept / payload.name, compiled)
        return len(new)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "drivelab_module_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cache: Cache | None = None
        self._basedir: str | None = None

    def _warn(self, err: Exception) -> None:
        self._display.warning(f"drivelab_module_cache: payloads not kept between runs: {err}")

    def v2_playbook_on_start(self, playbook):
        self._basedir = playbook._basedir

    # At the first play's start, before any module is built: the inventory is read then
    # (the hosts' Python for the bytecode, drivelab_bytecode_python)
    def v2_playbook_on_play_start(self, play):
        if self._cache is not None or self._basedir is None:
            return
        basedir, self._basedir = self._basedir, None
        try:
            self._cache = Cache(basedir, Path(ROOT).expanduser(), hosts_python(play))
        except (OSError, Ambiguous, ValueError) as err:
            self._warn(err)

    def v2_playbook_on_stats(self, stats):
        if self._cache is None:
            return
        try:
            self._cache.save(self._display.warning)
        except OSError as err:
            self._warn(err)


def hosts_python(play) -> list[str] | None:
    """drivelab_bytecode_python for ``play``'s run (as Ansible merges it for the
    inventory's first host: the inventory, group_vars, host_vars, -e): an argv of one or
    more words, or None; ValueError for anything else."""
    variables = getattr(play, "_variable_manager", None)
    inventory = getattr(variables, "_inventory", None)
    hosts = inventory.get_hosts("all") if inventory is not None else []
    if not hosts:
        return None
    value = variables.get_vars(play=play, host=hosts[0], include_hostvars=False).get(BYTECODE_VAR)
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{BYTECODE_VAR} is not a list of words: {value!r}")
    return [str(v) for v in value]
