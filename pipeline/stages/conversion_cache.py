"""Conversions that depend only on what they read, kept between builds in the user's own cache.

Conversions take most of a build and give the same files for the same inputs: torch.export of the
checkpoint, its ExecuTorch lowering (FP32 and int8) and CoreML packages, all-MiniLM-L6-v2 to ONNX
(FP32 and int8) for the text-encoder target, all-MiniLM-L6-v2 to the apps' encoders, the INT8
candidate search and the ORT-format conversion (targets/onnx_int8/), and the outputs of emulated
runs (targets/shared/arm64.py, targets/shared/encoder_arm64.py). A second
build that needs the same conversion (another --out, another target list, `--target android` after
`--target executorch`, a rebuild after a failed gate elsewhere) copies the files instead.

Only the conversion is reused. Every inspection and gate still runs on the copied files, against
this build's golden set, so a reused file passes exactly the checks a fresh one would have to.

The key covers what a conversion reads: the inputs the caller names (the checkpoint's export key,
the calibration rows, the MiniLM snapshot's bytes), the versions of the libraries that convert, the
Python version, and the source of this project's own code (every .py file under pipeline/ and
targets/: any change of ours makes new keys). Entries are pipeline/stages/private_cache.py's checked
and sealed folders, `<user cache>/arrcoc-edge/conversions/<kind>-<key>`, so nothing another user
can write is used; each kind keeps its few most recently used entries (the MiniLM ones are
45-110 MB each). ARRCOC_CONVERSION_CACHE=off converts every time.

One conversion of a key at a time among the user's processes: a build that reaches a conversion
another process of the user is making (its own background process, building/ahead.py, or another
build) waits for that one and reuses its entry instead of converting it again beside it.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable

from arrcoc_edge import install
from arrcoc_edge.relevance.digest import sha256_file
from arrcoc_edge.stages import private_cache

CACHE_NAME = "conversions"
INFO = "conversion.json"  # what the conversion returned (the manifest's record of it), beside its files
OFF_VARIABLE = "ARRCOC_CONVERSION_CACHE"
CODE_ROOTS = install.CODE  # folder -> module prefix: the core and the targets
CONVERTING = ".converting"  # suffix of a key's lock file in the cache (_one_at_a_time)


class AlreadyStored(Exception):
    """Raised by convert_cached in a process that only fills the cache (filling_only): the entry is
    there already, so nothing is converted and nothing copied out of it."""


_filling_only = False


@contextlib.contextmanager
def filling_only():
    """convert_cached stores entries and hands out nothing: an entry already there raises
    AlreadyStored instead of being copied (the background process of building/ahead.py)."""
    global _filling_only
    _filling_only = True
    try:
        yield
    finally:
        _filling_only = False


@functools.cache
def code_digest() -> str:
    """sha256 over this project's own Python modules (pipeline/ and targets/), module name and
    bytes: the same in a checkout and in the package installed from it (where targets/ sits inside
    the core's folder, and whose `bundled/` data folders, the checkout's web/ and mobile/, are not
    modules of ours)."""
    h = hashlib.sha256()
    for root, prefix in CODE_ROOTS.items():
        nested = [other for other in CODE_ROOTS if other != root and other.is_relative_to(root)]
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).parts
            if parts[0] == "bundled" or any(path.is_relative_to(other) for other in nested):
                continue
            h.update(f"\0{prefix}/{'/'.join(parts)}\0".encode() + path.read_bytes())
    return h.hexdigest()


def tool_versions(*dists: str) -> dict[str, str]:
    """The installed version of each distribution and of everything it requires, transitively
    ('absent' when it is not installed): a converter's bytes are shaped by the libraries it calls
    (onnxscript's constant folding is onnx-ir's; torch.export's guards are sympy's)."""
    return dict(_closure_versions(tuple(_normal(d) for d in dists)))


# Installers, left out of the closure: torch requires setuptools (for building C++ extensions,
# which no conversion does), and a venv made by `python -m venv` carries its own old copy, so with
# them in the key a package installed beside a checkout (or a setuptools upgrade) converted
# everything again (the installed package's app build: 147 s of conversions redone, measured).
INSTALLERS = frozenset({"pip", "setuptools", "wheel"})


@functools.cache
def _closure_versions(dists: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    todo = list(dists)
    while todo:
        dist = todo.pop()
        if dist in found or dist in INSTALLERS:
            continue
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "absent"
            continue
        todo += _requirements(dist)
    return tuple(sorted(found.items()))


@functools.cache
def _requirements(dist: str) -> tuple[str, ...]:
    """The distributions `dist` requires when installed without extras (normalised names)."""
    from importlib.metadata import requires

    from packaging.requirements import InvalidRequirement, Requirement

    names = []
    for line in requires(dist) or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(_normal(req.name))
    return tuple(names)


def _normal(name: str) -> str:
    """A distribution's name as PEP 503 normalises it (onnx_ir and onnx-ir are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def conversion_key(kind: str, inputs: dict[str, str], tools: tuple[str, ...]) -> str:
    """`<kind>-<32 hex>` for a conversion of `kind` reading `inputs` (name -> digest) with `tools`."""
    parts = {"kind": kind, "inputs": inputs, "tools": tool_versions(*tools), "code": code_digest(),
             "python": sys.version}
    return f"{kind}-{hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]}"


def convert_cached(kind: str, inputs: dict[str, str], tools: tuple[str, ...], convert: Callable[[Path], dict],
                   dest: Path, log: Callable[[str], None], keep: int = 3) -> dict:
    """Run `convert(folder)`, which writes its files into `folder` and returns what to record of
    them (JSON), or reuse the files and record of an earlier run with the same key. The files end
    up in `dest` (plain copies); returns the record, as JSON gives it back either way.

    The cache only saves time: whatever fails in reading, checking or writing it (an unsound or
    vanished entry, a full file system, a race with another build) is one note and the conversion
    runs, always into a private folder beside `dest`, never into the cache: a converter that
    cannot write its file aborts the process (torch's zip writer does), so the cache's file
    system never gets the chance. The entry is stored afterwards, as a copy, if it can be."""
    if os.environ.get(OFF_VARIABLE) == "off":
        return _as_stored(convert(dest))
    key = conversion_key(kind, inputs, tools)
    note = lambda message: log(f"note: conversion cache {message}")  # noqa: E731
    try:
        cache = private_cache.user_cache_dir(CACHE_NAME)
    except private_cache.CacheUnusable as exc:
        note(f"not used ({exc}): converting without it")
        cache = None
    with _one_at_a_time(cache, key, kind, log), _scratch(dest, kind) as work:
        if _filling_only and cache is not None and os.path.lexists(cache / key):
            raise AlreadyStored(key)
        record = None if cache is None else _reuse(cache / key, key, work, note)
        if record is not None:
            log(f"{kind}: reused the files of an identical earlier conversion ({cache / key})")
        else:
            started = time.monotonic()
            record = _as_stored(convert(work))
            if cache is not None:
                _store(cache, key, work, record, note)
            # said, so a build that should have reused everything shows what it converted
            log(f"{kind}: converted in {time.monotonic() - started:.0f} s")
        for path in sorted(work.iterdir()):
            os.replace(path, dest / path.name)
    if cache is not None:
        _forget_old(cache, kind, keep)
    return record


@contextlib.contextmanager
def _one_at_a_time(cache: Path | None, key: str, kind: str, log: Callable[[str], None]):
    """Hold `key`'s lock (flock on `<cache>/.<key>.converting`, which the kernel drops when its
    process ends, however it ends) while the entry is reused or made: a process that finds it held
    waits, then reuses what the holder stored. No lock (no cache, or the file cannot be opened):
    convert without it, as the cache only saves time."""
    fd = None
    if cache is not None:
        with contextlib.suppress(OSError):
            fd = os.open(cache / f".{key}{CONVERTING}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if fd is not None:
            _wait_for(fd, kind, log)
        yield
    finally:
        if fd is not None:
            os.close(fd)


WAIT_POLL_S, WAIT_TELL_S = 0.25, 5.0


def _wait_for(fd: int, kind: str, log: Callable[[str], None]) -> None:
    """Take the key's lock, telling the log while another process holds it: a progress line
    (stages/progress.py) every WAIT_TELL_S, so a terminal shows the wait's seconds in place."""
    from arrcoc_edge.stages.progress import Progress

    started = told = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            now = time.monotonic()
            if started is None:
                started = now
                log(f"{kind}: another process of yours is making the same conversion (this build's background "
                    "conversions or another build): waiting for it, then reusing it")
            if told is None or now - told >= WAIT_TELL_S:
                told = now
                log(Progress(f"{kind}: waiting for the conversion in progress", 0, 1, now - started))
            time.sleep(WAIT_POLL_S)
    if started is not None:
        log(Progress(f"{kind}: waiting for the conversion in progress", 1, 1, time.monotonic() - started))


def _as_stored(record: dict) -> dict:
    """`record` as an entry gives it back (JSON, keys sorted): a fresh conversion and a reused one
    hand the caller the same object, down to key order (which a file written from it shows)."""
    return json.loads(json.dumps(record, sort_keys=True))


@contextlib.contextmanager
def _scratch(dest: Path, kind: str):
    """A fresh private folder inside `dest` (the same file system: its files are renamed into
    place), removed with whatever is left in it."""
    work = Path(tempfile.mkdtemp(prefix=f".{kind}-converting-", dir=dest))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _reuse(entry: Path, key: str, work: Path, note: Callable[[str], None]) -> dict | None:
    """The record of the cache entry `entry`, its files copied into `work` and checked there (the
    copy is what is used, so the copy is what is hashed), or None: no entry (quietly), or one that
    is unsound or vanished meanwhile (a note; an unsound one is discarded)."""
    if not os.path.lexists(entry):
        return None
    try:
        problem = private_cache.private_dir_problem(entry)
        sealed = private_cache.read_seal(entry, key) if problem is None else {}
        if problem is None:
            problem = _copy_checked(entry, sealed, work)
        if problem is None:
            record = json.loads((work / INFO).read_bytes())
            os.unlink(work / INFO)
            with contextlib.suppress(OSError):
                os.utime(entry)  # last use, for `_forget_old`
            return record
    except private_cache.UnsoundEntry as exc:
        problem = str(exc)
    except (OSError, ValueError, RecursionError) as exc:
        problem = f"unreadable ({getattr(exc, 'strerror', None) or type(exc).__name__})"
    note(f"entry {entry} not used ({problem}): converting afresh")
    private_cache.discard(entry)
    for path in list(work.iterdir()):
        private_cache.discard(path)
    return None


def _copy_checked(entry: Path, sealed: dict[str, dict], work: Path) -> str | None:
    """Copy the entry's sealed files into `work`, then hash the copies; why they are not exactly
    what the seal says (sizes first, from lstat, before a byte is copied), or None."""
    found = private_cache.entry_files(entry)
    if set(found) != set(sealed) or INFO not in sealed:
        extra, missing = sorted(set(found) - set(sealed)), sorted(set(sealed) - set(found))
        return f"files not sealed: {extra[:3]}, sealed files missing: {missing[:3]}"
    for rel in sorted(sealed):
        if found[rel] != sealed[rel]["bytes"]:
            return f"{rel} is {found[rel]} bytes, sealed as {sealed[rel]['bytes']}"
    for rel in sorted(sealed):
        copy = work / rel
        copy.parent.mkdir(parents=True, exist_ok=True)
        _copy_regular(entry / rel, copy)
        if copy.stat().st_size != sealed[rel]["bytes"] or sha256_file(copy) != sealed[rel]["sha256"]:
            return f"{rel} changed since it was sealed"
    return None


def _copy_regular(source: Path, copy: Path) -> None:
    """Copy `source` only when it is a regular file: never through a link, never blocking on a FIFO
    (an entry's files were checked by lstat, but what is opened is what counts)."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise private_cache.UnsoundEntry(f"{source.name} is not a plain file")
        with open(copy, "xb") as out:
            shutil.copyfileobj(f, out, 1 << 20)


def _store(cache: Path, key: str, work: Path, record: dict, note: Callable[[str], None]) -> None:
    """Keep a copy of `work`'s files and `record` as the sealed entry `key`, when the cache's file
    system takes it; another build of the user's storing the same key first is as good."""
    try:
        with private_cache.building(cache, key) as entry:
            for path in sorted(work.rglob("*")):  # file by file: a full disk is ENOSPC, not shutil.Error's list
                target = entry / path.relative_to(work)
                target.mkdir() if path.is_dir() else shutil.copyfile(path, target)
            (entry / INFO).write_text(json.dumps(record, sort_keys=True))
            private_cache.seal(entry, key)
            with contextlib.suppress(OSError):  # the same key sealed meanwhile: theirs is kept
                entry.rename(cache / key)
    except OSError as exc:
        note(f"entry not stored ({exc.strerror or type(exc).__name__}): this build's files are used, uncached")


def _forget_old(cache: Path, kind: str, keep: int) -> None:
    """Remove all but the `keep` most recently used entries of `kind` (never a link's target).
    Other builds may be reading or removing entries meanwhile: an entry gone is skipped, and a
    reader that loses an entry converts afresh (_reuse)."""
    entries = []
    with contextlib.suppress(OSError):
        for path in cache.iterdir():
            if path.name.rsplit("-", 1)[0] == kind:
                with contextlib.suppress(OSError):
                    st = path.lstat()
                    if not stat.S_ISLNK(st.st_mode):
                        entries.append((st.st_mtime, path))
    entries.sort(reverse=True)
    for _, old in entries[keep:]:
        private_cache.discard(old)
        private_cache.discard(old.with_name(f".{old.name}{CONVERTING}"))


@functools.cache
def minilm_inputs() -> dict[str, str]:
    """What every all-MiniLM-L6-v2 conversion reads (`inputs`): the snapshot's bytes, hashed once per
    process (88 MB, 0.3 s; a mobile build converts MiniLM up to four times and embeds its sentences)."""
    from arrcoc_edge.relevance.text_encoder import model_dir

    return {"minilm": folder_digest(model_dir())}


def folder_digest(folder: Path) -> str:
    """sha256 over every file under `folder` (path and bytes), for `inputs`."""
    from arrcoc_edge.relevance.digest import sha256_file

    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f"\0{path.relative_to(folder).as_posix()}\0{sha256_file(path)}".encode())
    return h.hexdigest()
