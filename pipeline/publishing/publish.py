"""Atomic publishing: the output folder itself is one symlink, switched by one rename.

Layout, for an output folder OUT (e.g. `artifacts`) in a folder P:
  P/OUT -> .OUT.arrcoc-edge/.generations/<id>    THE switch (a relative link, replaced by one rename)
  P/.OUT.arrcoc-edge/                            the tool's own state, beside OUT:
      ledger.json                                what this tool wrote: generations, staging runs
      .lock                                      held for a whole build/merge: concurrent ones queue
      .generations/<id>/                         one complete publish, real files only: manifest.json,
                                                 report.html, REPORT.md, <target>/..., bench.json,
                                                 .cache/export|report (hard links to the cache below)
      .staging/<run>/<target>                    where a build writes before verification
      .cache/export|report|tensorrt              exported programs, saved outputs, TensorRT timing
      build.log                                  third-party output of the builds

Readers open OUT/manifest.json and OUT/<target>/...: everything below OUT is a real folder or
file, so `cp -r OUT/web /srv/`, `find OUT/web`, `tar -C OUT web` copy files, not links. A build
writes a complete new generation (targets it did not rebuild are hard links to the files the
previous one lists), then replaces the OUT link with os.replace: before that rename every reader
sees the old publish, after it the new one; SIGKILL at any instant leaves one or the other.

The tool removes only what it can prove it wrote: the generations and staging runs named in its
ledger, and inside a published generation only the files its manifest lists and the files the tool
itself writes beside them. Anything else found there (a file a user put into OUT/) is kept and
named. A generation that a link other than OUT still leads to (`mv OUT OUT-v1`, `cp -a`) is a
release the user kept: never removed while the link is there (release_links). A folder given as
--out that holds files the tool did not write is refused; one that holds a published manifest (a
copy, a CI part, the older layout) is taken over whole, nothing deleted.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from pathlib import Path

from arrcoc_edge.errors import OutputDirError
from arrcoc_edge.publishing.folder_state import (
    BENCH,
    CACHE,
    GENERATIONS,
    MANIFEST,
    NAME,
    STAGING,
    SWITCH,
    TEMP_IN_GENERATION,
    WRITTEN_BESIDE,
    _link_generation,
    _record,
    _switch,
    current_generation,
    read_ledger,
    state_dir,
    write_json_atomic,
)
from arrcoc_edge.publishing.locking import _kill_point, check_interrupted, remove_tree, signals_deferred
from arrcoc_edge.publishing.reading import open_regular, read_manifest
from arrcoc_edge.publishing.releases import release_links
from arrcoc_edge.publishing.takeover import check_takeover, take_over

# ---------------------------------------------------------------- preparing and locking


# ---------------------------------------------------------------- reading safely


# ---------------------------------------------------------------- writing


def _link_or_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def _carry(prev: Path | None, gen: Path, rels: list[str], log) -> None:
    """Hard-link the files `rels` of the previous generation into the new one: only regular
    files reached without a link (a link planted in a published folder is never carried)."""
    for rel in rels:
        try:
            fd, _ = open_regular(prev, rel) if prev else (None, 0)
        except OSError:
            log(f"note: {rel} is listed but not a file in the published folder; run `invoke verify`")
            continue
        if fd is not None:
            os.close(fd)
            _link_or_copy(prev / rel, gen / rel)


def _cache_files(manifest: dict) -> list[str]:
    """The cache files a generation carries (hard links): its .pt2 and each variant's outputs."""
    rels = []
    program = (manifest.get("exported_program") or {}).get("path")
    if isinstance(program, str) and program.startswith(CACHE + "/"):
        rels.append(program)
    for name, entry in manifest.get("targets", {}).items():
        for variant in (entry.get("variants") or {}) if isinstance(entry.get("variants"), dict) else ():
            if NAME.fullmatch(str(variant)):
                rels.append(f"{CACHE}/report/{name}.{variant}.npz")
    return rels


def _new_generation(out: Path) -> Path:
    gen = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    _record(out, generations={gen: {"published": False}})  # recorded first: a killed build's is tidied
    path = state_dir(out) / GENERATIONS / gen
    path.mkdir(parents=True)
    return path


def publish(out: Path, staged_targets: dict[str, Path], manifest: dict, write_extras=None, log=print) -> None:
    """Publish the staged target folders and `manifest` as one new generation, switched in at once.

    Targets not staged keep their published files (hard links). `write_extras(folder)` writes
    derived files (the report) into the new generation before the switch. Runs under build_lock.
    Numbered _kill_point calls mark every step, for the SIGKILL test.
    """
    take_over(out, log)
    try:
        check_takeover(out)
        prev = current_generation(out)
        gen = _new_generation(out)
        _kill_point(1)
        for name, entry in manifest.get("targets", {}).items():
            if name not in staged_targets:
                _carry(prev, gen, [f["path"] for f in entry.get("files", [])], log)
        _kill_point(2)
        for name, staged in staged_targets.items():
            os.rename(staged, gen / name)
        _kill_point(3)
        write_json_atomic(gen / MANIFEST, manifest)
        _carry(prev, gen, [BENCH] if prev and (prev / BENCH).is_file() else [], log)
        if write_extras:
            write_extras(gen)  # the report: it also saves this build's outputs into the cache
        for rel in _cache_files(manifest):
            if (state_dir(out) / rel).is_file():
                _link_or_copy(state_dir(out) / rel, gen / rel)
        _kill_point(4)
        check_interrupted()  # a Ctrl-C lost in a callback while the generation was written
        _record(out, generations={gen.name: {"published": True}})  # from here on, removed file by file
        _kill_point(5)
    except OSError as exc:
        raise OutputDirError(
            f"cannot publish into {out} ({exc.strerror or exc}: {exc.filename or ''})",
            "make the output folder and everything in it writable (chmod, chattr -i), then build again",
        ) from exc
    with signals_deferred():
        check_interrupted()  # the last moment: once signals are held, none can arrive unseen
        try:
            _switch(out, gen)
        except OSError as exc:
            raise OutputDirError(f"cannot switch {out} to the new publish ({exc.strerror or exc})",
                                 f"make {out.parent} writable, then build again") from exc
        _kill_point(6)
        tidy(out, log)
        _kill_point(7)


# ---------------------------------------------------------------- removing what the tool wrote


def _known_files(gen: Path) -> set[str]:
    """What the tool wrote into a published generation: what its manifest lists, and the files it
    writes beside them."""
    known = set(WRITTEN_BESIDE)
    try:
        data = read_manifest(gen)
    except OutputDirError:
        return known
    for entry in data.get("targets", {}).values():
        known.update(f["path"] for f in entry.get("files", []))
    known.update(_cache_files(data))
    return known


def remove_generation(gen: Path, published: bool) -> list[str]:
    """Remove a generation the ledger names. One never published was never reachable by anyone:
    removed whole. A published one: only the files the tool wrote, then the folders left empty.
    Returns what stays (files it did not write)."""
    if not published:
        return [] if remove_tree(gen) else [f"{gen} (could not remove)"]
    if not gen.is_dir():
        return []
    known, kept = _known_files(gen), []
    for folder, dirs, files in os.walk(gen, topdown=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = Path(folder, name)
            rel = path.relative_to(gen).as_posix()
            if rel in known or TEMP_IN_GENERATION.fullmatch(rel):
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    kept.append(f"{path} (could not remove: {exc.strerror})")
            else:
                kept.append(f"{path} (not written by arrcoc-edge)")
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    return kept


def tidy(out: Path, log=print) -> None:
    """Remove the generations and staging runs the ledger names that no reader can reach: not
    the one OUT links to, nor one that a link of yours still leads to (a renamed or copied OUT,
    see release_links). Only call it under build_lock: then no other build is using any of them."""
    ledger = read_ledger(out)
    current = _link_generation(out)
    state = state_dir(out)
    linked = release_links(out, ledger)
    for gen, info in list(ledger["generations"].items()):
        if gen == current:
            continue
        if gen in linked:
            if not info.get("kept"):  # named once, when it is first kept
                log(f"note: kept generation {gen}: {'; '.join(linked[gen])}; it is removed by the first build or "
                    f"clean of {out} after no link leads to it")
                _record(out, generations={gen: {"kept": True}})
            continue
        kept = remove_generation(state / GENERATIONS / gen, bool(info.get("published")))
        if kept:
            log(f"note: kept {len(kept)} file(s) of an old publish: {kept[0]}{' ...' if len(kept) > 1 else ''}; "
                "move out what you put there, fix the permissions of the rest (they are removed next time)")
        else:
            if info.get("kept"):
                log(f"removed kept generation {gen}: no link leads to it any more")
            _record(out, generations={gen: None})
    for run in list(ledger["staging"]):
        if not remove_tree(state / STAGING / run):
            log(f"note: could not remove {state / STAGING / run} (not writable); remove it by hand")
            continue
        _record(out, staging_drop=run)
    (state / SWITCH).unlink(missing_ok=True)


# ---------------------------------------------------------------- releases kept by a link


def recover(out: Path, manifest: dict | None = None, log=print) -> None:
    """Before a build or merge does anything else (under build_lock): tidy what a killed one left,
    and take over a folder that holds a publish but is not this tool's link yet: a plain copy or
    CI part (the folder itself becomes a generation), or the older layout (.current)."""
    tidy(out, log)
    take_over(out, log)


