"""Releases kept by a link: a generation that a link other than OUT still leads to is never removed.

`mv OUT OUT-v1` or `cp -a OUT OUT-v1` keeps the link, so the generation is a release the user kept;
links are looked for beside OUT and one folder below, without following them, and matched by the
identity of the folder they reach.
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

from arrcoc_edge.publishing.folder_state import GENERATION_NAME, GENERATIONS, state_dir


def release_links(out: Path, ledger: dict) -> dict[str, list[str]]:
    """The generations of OUT's ledger that a link other than OUT still leads to, each with how
    ("OUT-v1 links to it"). `mv OUT OUT-v1` and `cp -a OUT OUT-v1` keep a release this way. Links
    are looked for in the folder holding OUT and in the folders directly inside it, never
    followed while looking; a link is matched to a generation by the identity (st_dev, st_ino) of
    the folder it resolves into, not by its spelling. A copy of OUT's own link moved into a
    subfolder (`mv OUT old/v1`) resolves nowhere from there; it keeps its generation too, and the
    note says how to make it resolve."""
    state = state_dir(out)
    gens = {}
    for gen in ledger["generations"]:
        with contextlib.suppress(OSError):
            info = os.stat(state / GENERATIONS / gen, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                gens[(info.st_dev, info.st_ino)] = gen
    found: dict[str, list[str]] = {}
    if not gens:
        return found
    own_text = re.compile(re.escape(f"{state.name}/{GENERATIONS}/") + f"({GENERATION_NAME.pattern})")
    for link in _links_near(out):
        gen = _generation_reached(link, gens)
        if gen is not None:
            found.setdefault(gen, []).append(f"{_shown_path(link, out)} links to it")
            continue
        moved = own_text.fullmatch(_read_link(link) or "")
        if moved and moved.group(1) in gens.values() and not os.path.exists(link):
            target = os.path.relpath(state / GENERATIONS / moved.group(1), link.parent)
            found.setdefault(moved.group(1), []).append(
                f"{_shown_path(link, out)}, a copy of {out.name}'s link, resolves nowhere where it is now "
                f"(`ln -sfn {target} {link}` makes it a release again)")
    return found


def _links_near(out: Path):
    """The links in OUT's folder (OUT itself and the state folder aside) and in the folders
    directly inside it. Folders that cannot be listed are passed over."""
    skip = {out.name, state_dir(out).name}

    def entries(folder: Path):
        try:
            with os.scandir(folder) as it:
                return list(it)
        except OSError:
            return []

    for entry in entries(out.parent):
        if entry.name in skip:
            continue
        if entry.is_symlink():
            yield Path(entry.path)
        elif entry.is_dir(follow_symlinks=False):
            yield from (Path(e.path) for e in entries(Path(entry.path)) if e.is_symlink())


MAX_DEPTH = 16  # a generation's files lie a few folders below it; a link deeper in keeps nothing
MAX_HOPS = 8  # links to a file followed one by one to find the folder holding it


def _generation_reached(link: Path, gens: dict) -> str | None:
    """The generation (of `gens`, keyed by identity) that `link` resolves to or into, else None.

    The kernel resolves every path here (a stat; ELOOP after 40 hops) and `..` from the folder
    reached (`folder/..` is that folder's own parent, whatever links led to it), so a link costs a
    bounded number of system calls however its target is spelled. os.path.realpath, used before,
    lstat'ed every component in Python: 2,000 crafted links beside OUT cost every build 29.5 s."""
    probe = _folder_reached(link)
    for _ in range(MAX_DEPTH + 1 if probe else 0):
        try:
            info = os.stat(probe)
        except (OSError, ValueError):
            return None
        gen = gens.get((info.st_dev, info.st_ino))
        if gen is not None:
            return gen
        probe = os.path.join(probe, os.pardir)
    return None


def _folder_reached(link: Path) -> str | None:
    """A path the kernel resolves to the folder `link` leads to, or to the folder holding the file it
    leads to (links to a file followed by hand, at most MAX_HOPS); None when it leads nowhere."""
    path = str(link)
    for _ in range(MAX_HOPS):
        try:
            if stat.S_ISDIR(os.stat(path).st_mode):
                return path
            if not stat.S_ISLNK(os.lstat(path).st_mode):
                return os.path.dirname(path) or "."
            path = os.path.join(os.path.dirname(path), os.readlink(path))
        except (OSError, ValueError):
            return None
    return None


def _read_link(link: Path) -> str | None:
    try:
        return os.readlink(link)
    except OSError:
        return None


def _shown_path(link: Path, out: Path) -> str:
    return os.path.relpath(link, out.parent)
