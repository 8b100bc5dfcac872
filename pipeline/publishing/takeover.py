"""A folder named by --out: refused when it holds what the tool did not write, or taken over whole.

A plain copy or a CI part (a folder holding a published manifest) becomes a generation as it is; an
output folder of the older layout (OUT/.current) moves its current generation across. Nothing of
the user's is deleted.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
import uuid
from pathlib import Path

from arrcoc_edge.errors import OutputDirError
from arrcoc_edge.publishing.folder_state import (
    BENCH,
    CACHE,
    GENERATIONS,
    LOCK,
    MANIFEST,
    STAGING,
    _old_layout_generation,
    _record,
    _switch,
    is_output_folder,
    state_dir,
)
from arrcoc_edge.publishing.locking import remove_tree, signals_deferred


def prepare_out_dir(out: Path) -> None:
    """Before any work: the state folder beside OUT can be written, and OUT is this tool's (or
    new, empty, or a published folder to take over)."""
    state = state_dir(out)
    try:
        state.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=state, prefix=".write-test-"):
            pass
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise OutputDirError(
            f"cannot write to output folder {out} ({getattr(exc, 'strerror', None) or exc}; "
            f"its state goes beside it, in {state.name})",
            "pass a writable folder with --out (one whose parent folder is writable too), or fix its permissions",
        ) from exc
    check_takeover(out)


def check_takeover(out: Path) -> None:
    """Refuse an OUT this tool may not replace with its link: a file, or a folder holding files the
    tool did not write (anything but a published manifest and what it lists)."""
    if is_output_folder(out) or not os.path.lexists(out):
        return
    if out.is_symlink():
        raise OutputDirError(f"{out} is a link this tool did not make (to {os.readlink(out)})",
                             "pass the folder it points to with --out, or remove the link")
    if not out.is_dir():
        raise OutputDirError(f"{out} is a file, not an output folder", "pass a folder with --out")
    if _old_layout_generation(out) is not None or _plain_manifest(out):
        return  # taken over whole by recover()
    entries = sorted(os.listdir(out))
    if entries:
        raise OutputDirError(
            f"{out} holds files arrcoc-edge did not write ({', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''})",
            "pass a new or empty folder with --out (the tool replaces the folder with its own link)")


def _plain_manifest(folder: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(folder / MANIFEST).st_mode)
    except OSError:
        return False


def take_over(out: Path, log=print) -> None:
    """Make a folder holding a publish (not yet this tool's link) a generation, nothing deleted."""
    if is_output_folder(out) or not out.is_dir() or out.is_symlink():
        return
    try:
        old = _old_layout_generation(out)
        if old is not None:
            _take_over_old_layout(out, old, log)
        elif _plain_manifest(out):
            log(f"taking over {out} as a generation (same files, moved, nothing deleted)")
            _adopt_caches(out / CACHE, state_dir(out) / CACHE)
            gen = f"adopted-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
            _record(out, generations={gen: {"published": True, "adopted": True}})
            (state_dir(out) / GENERATIONS).mkdir(parents=True, exist_ok=True)
            with signals_deferred():
                os.rename(out, state_dir(out) / GENERATIONS / gen)
                _switch(out, state_dir(out) / GENERATIONS / gen)
    except OSError as exc:
        raise OutputDirError(
            f"cannot take over {out} ({exc.strerror or exc}: {exc.filename or ''})",
            "make the output folder and everything in it writable (chmod, chattr -i), then build again",
        ) from exc


def _adopt_caches(src: Path, dest: Path) -> None:
    """Move a taken-over folder's export and report caches into the state's (cache hits stay)."""
    for kind in ("export", "report", "tensorrt"):
        folder = src / kind
        if not folder.is_dir() or folder.is_symlink():
            continue
        (dest / kind).mkdir(parents=True, exist_ok=True)
        for f in folder.iterdir():
            if f.is_file() and not f.is_symlink() and not (dest / kind / f.name).exists():
                os.rename(f, dest / kind / f.name)


def _take_over_old_layout(out: Path, old_gen: Path, log) -> None:
    """OUT of the older layout: its current generation moves into the state (one rename), OUT
    becomes the link to it, and of the old folder the tool removes what the older version wrote
    there (its links, other generations, staging, lock, log); anything else is kept and named."""
    log(f"moving {out} to the current layout (the output folder becomes one link; same files)")
    state = state_dir(out)
    _adopt_caches(out / CACHE, state / CACHE)
    gen = f"adopted-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    _record(out, generations={gen: {"published": True, "adopted": True}})
    (state / GENERATIONS).mkdir(parents=True, exist_ok=True)
    os.rename(old_gen, state / GENERATIONS / gen)
    for name in (BENCH,):
        if (out / name).is_file() and not (out / name).is_symlink():
            os.rename(out / name, state / GENERATIONS / gen / name)
    if (out / "build.log").is_file() and not (state / "build.log").exists():
        os.rename(out / "build.log", state / "build.log")
    aside = state / f"older-layout-{uuid.uuid4().hex[:6]}"
    with signals_deferred():
        os.rename(out, aside)
        _switch(out, state / GENERATIONS / gen)
    for entry in list(aside.iterdir()):
        if entry.is_symlink() or entry.name in (LOCK, "build.log", GENERATIONS, STAGING):
            remove_tree(entry)
        elif entry.name == CACHE:
            for kind in ("export", "report", "tensorrt"):
                with contextlib.suppress(OSError):
                    (entry / kind).rmdir()
            with contextlib.suppress(OSError):
                entry.rmdir()
    with contextlib.suppress(OSError):
        aside.rmdir()
    if aside.exists():
        log(f"note: kept what the older layout's folder held besides the build's own files: {aside}")
