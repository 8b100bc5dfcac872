"""Atomic publishing into the output folder, under a lock: one rename switches the whole build.

Layout of an output folder DIR:
  DIR/manifest.json -> .current/manifest.json   what is published (the public paths are symlinks)
  DIR/report.html, DIR/REPORT.md -> .current/...
  DIR/<target>      -> .current/<target>        published artifacts
  DIR/.current      -> .generations/<id>        THE switch: replaced by one rename
  DIR/.generations/<id>/                        one complete publish: manifest, report, every target
  DIR/.staging/<run>/<target>                   where a build writes before verification
  DIR/.cache/                                   exported programs (.pt2) keyed by content
  DIR/.lock                                     held for the whole build: concurrent builds queue

A build writes a complete new generation (targets it did not rebuild are hard links into the
previous one), writes the manifest and report into it, then replaces the `.current` symlink with
os.replace: before that rename every public path shows the old publish, after it the new one, so
SIGKILL at any instant leaves one or the other. The next build removes what a killed one left
(staging, unused generations) before it does anything else. Readers open the public paths and
never need to know about generations.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

from .errors import OutputDirError

CURRENT = ".current"
GENERATIONS = ".generations"
STAGING = ".staging"
MANIFEST = "manifest.json"
REPORT_FILES = ("report.html", "REPORT.md")
# A target name as the manifest may use it: one plain path component (never "..", "/" or hidden).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
KILL_AT_ENV = "ARRCOC_TEST_KILL_AT"  # tests: SIGKILL this process at the numbered point of publish()


def prepare_out_dir(out: Path) -> None:
    """Create DIR if needed and prove it is writable, before any work is done."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise OutputDirError(
            f"cannot write to output folder {out} ({exc.strerror or exc})",
            "pass a writable folder with --out, or fix its permissions",
        ) from exc


@contextlib.contextmanager
def build_lock(out: Path, log=print):
    """Exclusive lock on DIR for one build; a second build waits for the first."""
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another build is publishing to {out}; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def new_staging(out: Path) -> Path:
    run = out / STAGING / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    run.mkdir(parents=True)
    return run


def remove_tree(path: Path) -> bool:
    """Remove a folder or file; False (not an exception) when something in it cannot be removed."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return True
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM until the block ends, so a build never stops between switch and tidy-up."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _kill_point(n: int) -> None:
    """Test hook: die here, as `kill -9` would, when ARRCOC_TEST_KILL_AT names this point."""
    if os.environ.get(KILL_AT_ENV) == str(n):
        os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------- reading


def current_generation(out: Path) -> Path | None:
    link = out / CURRENT
    return link.resolve() if link.is_symlink() and link.resolve().is_dir() else None


def read_manifest(out: Path) -> dict:
    from .manifest import check_shape

    path = out / MANIFEST
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise OutputDirError(
            f"{path} is not valid JSON ({exc})",
            "restore it from version control or delete it (it is rebuilt by the next build)",
        ) from exc
    check_shape(data, path)
    return data


# ---------------------------------------------------------------- writing


def write_json_atomic(path: Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the manifest is read by other tools and users
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _link_tree(src: Path, dest: Path) -> None:
    """Copy a published folder or file into a new generation as hard links (no bytes copied);
    a real copy where the filesystem or an immutable file refuses the link."""
    def link_or_copy(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, copy_function=link_or_copy)
    else:
        link_or_copy(src, dest)


def _link(out: Path, name: str) -> None:
    """Make DIR/<name> the symlink .current/<name>; a real file or folder there (an older layout,
    or a copy made without symlinks) is exchanged with the link in one step, showing the same bytes."""
    path, target = out / name, f"{CURRENT}/{name}"
    if path.is_symlink() and os.readlink(path) == target:
        return
    tmp = out / f".link-{name}-{uuid.uuid4().hex[:6]}"
    os.symlink(target, tmp)
    if path.is_symlink() or not path.exists():
        os.replace(tmp, path)
    elif _exchange(tmp, path):
        remove_tree(tmp)  # tmp now holds the old real folder
    else:  # no renameat2 here: two renames, the path is missing for an instant
        old = out / f".trash-{name}-{uuid.uuid4().hex[:6]}"
        os.rename(path, old)
        os.replace(tmp, path)
        remove_tree(old)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False where the kernel or filesystem cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(b))


def _switch(out: Path, generation: Path) -> None:
    """The one atomic step: point .current at `generation`."""
    tmp = out / f".current-{uuid.uuid4().hex[:6]}"
    os.symlink(f"{GENERATIONS}/{generation.name}", tmp)
    current = out / CURRENT
    if current.exists() and not current.is_symlink():  # a copy that dereferenced the link
        current.rename(out / f".trash-current-{uuid.uuid4().hex[:6]}")
    os.replace(tmp, current)


def _public_names(manifest: dict) -> list[str]:
    return [MANIFEST, *REPORT_FILES, *manifest.get("targets", {})]


def _new_generation(out: Path) -> Path:
    gen = out / GENERATIONS / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    gen.mkdir(parents=True)
    return gen


def publish(out: Path, staged_targets: dict[str, Path], manifest: dict, write_extras=None, log=print) -> None:
    """Publish the staged target folders and `manifest` as one new generation, switched in at once.

    Targets not staged keep their published files (hard links). `write_extras(folder)` writes
    derived files (the report) into the new generation before the switch. Runs under build_lock.
    Numbered _kill_point calls mark every step, for the SIGKILL test.
    """
    try:
        gen = _new_generation(out)
        _kill_point(1)
        for name in manifest.get("targets", {}):
            if name not in staged_targets and (out / name).exists():
                _link_tree(out / name, gen / name)
        _kill_point(2)
        for name, staged in staged_targets.items():
            os.rename(staged, gen / name)
        _kill_point(3)
        write_json_atomic(gen / MANIFEST, manifest)
        if write_extras:
            write_extras(gen)
        _kill_point(4)
        for name in _public_names(manifest):  # a new name's link dangles until the switch
            if (gen / name).exists():
                _link(out, name)
        _kill_point(5)
    except OSError as exc:
        raise OutputDirError(
            f"cannot publish into {out} ({exc.strerror or exc}: {exc.filename or ''})",
            "make the output folder and everything in it writable (chmod, chattr -i), then build again",
        ) from exc
    with signals_deferred():
        _switch(out, gen)
        _kill_point(6)
        tidy(out, log)
        _kill_point(7)


def tidy(out: Path, log=print) -> None:
    """Remove what no reader can reach: other generations, staging and leftovers of killed builds.
    Only call it under build_lock: then no other build is using any of these."""
    keep = current_generation(out)
    leftovers = [g for g in (out / GENERATIONS).glob("*") if g != keep] if (out / GENERATIONS).is_dir() else []
    leftovers += list((out / STAGING).glob("*")) if (out / STAGING).is_dir() else []
    leftovers += [p for p in out.glob(".trash-*")] + [p for p in out.glob(".link-*")] + list(out.glob(".current-*"))
    leftovers += [p for p in out.glob(".*.old-*")]  # the per-target swap of earlier versions
    # a public link into .current that leads nowhere: made by a build killed before its switch,
    # or a report the last build could not draw
    leftovers += [p for p in out.iterdir() if p.is_symlink() and not p.exists()
                  and os.readlink(p).startswith(CURRENT + "/")]
    for path in leftovers:
        if not remove_tree(path):
            log(f"note: could not remove {path} (not writable); remove it by hand")


def recover(out: Path, manifest: dict, log=print) -> None:
    """Before a build does anything else (under build_lock): tidy what a killed build left, and
    move an output folder of the older layout (real folders at DIR/<target>) to generations."""
    tidy(out, log)
    names = [n for n in _public_names(manifest) if (out / n).exists()]
    if not any((out / n).exists() and not (out / n).is_symlink() for n in names):
        return
    log(f"moving {out} to the generation layout (same files, hard links)")
    try:
        gen = _new_generation(out)
        for name in names:
            _link_tree(out / name, gen / name)
        with signals_deferred():
            _switch(out, gen)
            for name in names:  # each exchange shows identical bytes before and after
                _link(out, name)
    except OSError as exc:
        raise OutputDirError(
            f"cannot reorganise {out} ({exc.strerror or exc}: {exc.filename or ''})",
            "make the output folder and everything in it writable (chmod, chattr -i), then build again",
        ) from exc
    tidy(out, log)
