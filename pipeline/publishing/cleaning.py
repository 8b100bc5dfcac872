"""invoke clean: remove what the tool wrote for an output folder, by the names it gives, and name
everything it keeps.
"""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from arrcoc_edge.publishing.folder_state import (
    CACHE,
    CACHE_ENTRIES,
    GENERATIONS,
    LEDGER,
    LOCK,
    STAGING,
    SWITCH,
    TEMP_IN_STATE,
    _old_layout_generation,
    _write_ledger,
    is_output_folder,
    read_ledger,
    state_dir,
)
from arrcoc_edge.publishing.locking import build_lock, remove_tree
from arrcoc_edge.publishing.publish import recover, remove_generation
from arrcoc_edge.publishing.releases import release_links


def clean(out: Path, log=print) -> list[str]:
    """Remove what the tool wrote for OUT: its link, the generations and staging runs its ledger
    names (not one a link still leads to: release_links), the cache entries it made, its log,
    lock and ledger. The ledger is read, and refused when edited, before anything is removed; it
    stays, naming only the kept generations, while a link leads to one (the next build or clean
    collects it once none does). Returns everything it kept, each named."""
    state = state_dir(out)
    kept: list[str] = []
    with build_lock(out, log):
        recover(out, None, log) if _old_layout_generation(out) is not None else None
        ledger = read_ledger(out)
        if is_output_folder(out):
            out.unlink()
        linked = release_links(out, ledger)
        staying = {}
        for gen, info in ledger["generations"].items():
            if gen in linked:
                kept.append(f"{state / GENERATIONS / gen} (generation {gen}: {'; '.join(linked[gen])}; "
                            "remove that link, then clean again)")
                staying[gen] = info
                continue
            kept += remove_generation(state / GENERATIONS / gen, bool(info.get("published")))
        runs_left = [run for run in ledger["staging"] if not remove_tree(state / STAGING / run)]
        kept += [f"{state / STAGING / run} (could not remove)" for run in runs_left]
        if staying:
            _write_ledger(out, {**ledger, "generations": staying, "staging": []})
        kept += _clean_cache(state / CACHE)
        for entry in _entries(state):
            kept += _clean_state_entry(entry, staying, set(ledger["generations"]) | set(runs_left))
    if stat.S_ISREG(_lstat_mode(state / LOCK)):
        (state / LOCK).unlink()
    with contextlib.suppress(OSError):
        state.rmdir()
    return kept


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _clean_cache(cache: Path) -> list[str]:
    """Remove the cache entries the tool writes (regular files named as CACHE_ENTRIES says) and
    the folders left empty; returns everything else there, named."""
    if not stat.S_ISDIR(_lstat_mode(cache)):
        return [f"{cache} (not written by arrcoc-edge)"] if os.path.lexists(cache) else []
    kept = []
    for kind in _entries(cache):
        shape = CACHE_ENTRIES.get(kind.name)
        if shape is None or not kind.is_dir(follow_symlinks=False):
            kept.append(f"{kind.path} (not written by arrcoc-edge)")
            continue
        for entry in _entries(Path(kind.path)):
            if shape.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
            else:
                kept.append(f"{entry.path} (not written by arrcoc-edge)")
        with contextlib.suppress(OSError):
            os.rmdir(kind.path)
    with contextlib.suppress(OSError):
        cache.rmdir()
    return kept


def _clean_state_entry(entry: os.DirEntry, staying: dict, named: set[str]) -> list[str]:
    """One entry of the state folder, at clean: the tool's own files removed, the rest named."""
    name = entry.name
    if name in (LOCK, CACHE) or (name == LEDGER and staying):
        return []  # the lock goes once released, the cache was cleaned, the ledger stays
    if (name in ("build.log", LEDGER) or TEMP_IN_STATE.fullmatch(name)) and entry.is_file(follow_symlinks=False) \
            or name == SWITCH and entry.is_symlink():
        os.unlink(entry.path)
        return []
    if name in (GENERATIONS, STAGING) and entry.is_dir(follow_symlinks=False):
        return _unknown_in(Path(entry.path), named)
    return [f"{entry.path} (not written by arrcoc-edge)"]


def _unknown_in(folder: Path, named: set[str]) -> list[str]:
    """Remove `folder` (the state's .generations or .staging) once empty; else name each entry
    in it that the caller did not name already: one its ledger does not name, kept."""
    with contextlib.suppress(OSError):
        folder.rmdir()
        return []
    what = "generation" if folder.name == GENERATIONS else "staging run"
    return [f"{entry.path} (a {what} folder its ledger does not name: not written by arrcoc-edge)"
            for entry in _entries(folder) if entry.name not in named]
