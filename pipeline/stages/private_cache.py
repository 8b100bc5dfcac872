"""Caches the stages keep between builds (Kotlin classes, conversions), where only the building user can write them.

A cache another user can write is a way to run their code: the Kotlin class cache used to live in
the world-writable $TMPDIR, so classes planted under a broken source's key passed the build. Here:

- the cache folder is `$XDG_CACHE_HOME/arrcoc-edge/<name>` (`~/.cache/...` when XDG_CACHE_HOME is
  unset or relative), made 0700; it and every folder below the user's cache folder must be a real
  folder (not a link), owned by the building user and writable by no one else, and the folder
  holding it must be the user's or root's, writable by no one else unless sticky (like /tmp).
  Anything else: `user_cache_dir` raises CacheUnusable with the reason, and the caller builds
  without a cache (a note, never a failure);
- an entry is a folder `<key>/` sealed by a manifest, `entry.json`, written last after a
  successful build: its key and the size and sha256 of every file in it. `check_entry` compares
  the sizes, then re-hashes, before use: another key's entry copied here, a manifest that does not
  parse (nested too deeply included), a link, an extra, missing, resized or changed file, or a
  folder not the user's: the reason, and the caller builds afresh and replaces it;
- an entry is built in a fresh `.key.*` folder (mkdtemp, 0700) and renamed into place; a failed
  build removes its folder (`building`).
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable

from arrcoc_edge import scratch
from arrcoc_edge.relevance.digest import sha256_file

MANIFEST = "entry.json"
MANIFEST_MAX_BYTES = 16 << 20


class CacheUnusable(Exception):
    """The cache folder cannot be trusted or made; str() says why in one line."""


class UnsoundEntry(Exception):
    """An entry that cannot be trusted; str() says why in one line."""


def private_dir_problem(path: Path) -> str | None:
    """Why `path` is not a folder only this user can write, or None."""
    try:
        st = path.lstat()
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _parent_problem(path: Path) -> str | None:
    """The folder holding the cache: others must not be able to swap what is in it."""
    st = path.stat()
    if st.st_uid not in (os.geteuid(), 0):
        return f"{path} is owned by uid {st.st_uid}"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"{path} is writable by others and not sticky"
    return None


def cache_base() -> Path:
    """The user's cache folder: $XDG_CACHE_HOME, else ~/.cache. A relative value of either is not a
    place (the XDG spec says to ignore it; it would name a folder under wherever the build runs), so
    HOME falls back to the password database's home, and without an absolute one there is no cache."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(os.path.realpath(xdg))  # the kernel's path, which the write-places guard judges
    home = os.environ.get("HOME", "")
    if not os.path.isabs(home):
        try:
            home = pwd.getpwuid(os.geteuid()).pw_dir
        except KeyError:
            home = ""
    if not os.path.isabs(home):
        raise CacheUnusable("no absolute HOME or XDG_CACHE_HOME to keep a cache in")
    return Path(home) / ".cache"


def user_cache_dir(name: str) -> Path:
    """`<user cache>/arrcoc-edge/<name>`, made 0700 where missing and checked (module docstring).
    Each folder is checked before anything is made inside it: a linked or world-writable folder on
    the way is refused with nothing created in it."""
    base = cache_base()
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = _parent_problem(base)
        folder = base
        for part in ("arrcoc-edge", name):
            if problem:
                break
            folder = folder / part
            with contextlib.suppress(FileExistsError):
                folder.mkdir(mode=0o700)
            problem = private_dir_problem(folder)
    except OSError as exc:
        raise CacheUnusable(f"{base}: {exc.strerror or exc}") from exc
    if problem:
        raise CacheUnusable(problem)
    return folder


def read_seal(entry: Path, key: str) -> dict[str, dict]:
    """The files `entry`'s manifest seals, {relative path: {"bytes", "sha256"}}; raises
    UnsoundEntry (why, in one line) for a manifest this tool did not write for `key`: too large,
    not JSON (nested too deeply included), another key's, or of another shape."""
    manifest = entry / MANIFEST
    try:
        st = manifest.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > MANIFEST_MAX_BYTES:
            raise UnsoundEntry(f"{MANIFEST} is not a file this tool wrote")
        sealed = json.loads(manifest.read_bytes()[:MANIFEST_MAX_BYTES])
        if sealed.get("key") != key:
            raise UnsoundEntry(f"sealed for key {str(sealed.get('key'))[:16]}..., not this one (copied from another entry)")
        files = {str(rel): {"bytes": int(f["bytes"]), "sha256": str(f["sha256"])} for rel, f in sealed["files"].items()}
    except FileNotFoundError as exc:
        raise UnsoundEntry(f"no {MANIFEST} (not sealed after a successful build)") from exc
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise UnsoundEntry(f"{MANIFEST} unreadable ({type(exc).__name__})") from exc
    return files


def check_entry(entry: Path, key: str) -> str | None:
    """Why the entry `entry` (for `key`) cannot be trusted, or None when its files are exactly the
    ones its manifest seals, with their sizes (compared first: an oversize file is refused before
    a byte of it is read) and sha256. A file vanishing meanwhile (another build of the user's
    discarding the entry) is a reason too, never an error."""
    problem = private_dir_problem(entry)
    if problem:
        return problem
    try:
        files = read_seal(entry, key)
        found = entry_files(entry)
        if set(found) != set(files):
            extra, missing = sorted(set(found) - set(files)), sorted(set(files) - set(found))
            return f"files not sealed: {extra[:3]}, sealed files missing: {missing[:3]}"
        resized = [rel for rel, size in sorted(found.items()) if size != files[rel]["bytes"]]
        if resized:
            return f"{resized[0]} is {found[resized[0]]} bytes, sealed as {files[resized[0]]['bytes']}"
        changed = [rel for rel in sorted(found) if sha256_file(entry / rel) != files[rel]["sha256"]]
    except UnsoundEntry as exc:
        return str(exc)
    except OSError as exc:
        return f"unreadable ({exc.strerror or type(exc).__name__}: it changed while it was checked)"
    return f"{changed[0]} changed since it was sealed" if changed else None


def entry_files(entry: Path) -> dict[str, int]:
    """{relative path: bytes} of the entry's regular files (its manifest aside), from lstat alone;
    raises UnsoundEntry for a link or anything that is neither a folder nor a regular file."""
    found = {}
    for folder, dirs, names in os.walk(entry, onerror=_raise):
        for name in dirs + names:
            path = Path(folder) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode) or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise UnsoundEntry(f"{path.relative_to(entry)} is a link or not a plain file")
            if stat.S_ISREG(st.st_mode) and path != entry / MANIFEST:
                found[path.relative_to(entry).as_posix()] = st.st_size
    return found


def _raise(exc: OSError) -> None:
    raise exc


def seal(entry: Path, key: str) -> None:
    """Write the manifest: the key and the size and sha256 of every file now in `entry`."""
    files = {p.relative_to(entry).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
             for p in sorted(entry.rglob("*")) if p.is_file()}
    (entry / MANIFEST).write_text(json.dumps({"key": key, "files": files}, indent=1, sort_keys=True) + "\n")


def discard(path: Path) -> None:
    """Remove an entry of the user's own cache folder: a link itself, never what it points to.
    Never fails: other builds of the user remove and rename entries meanwhile, so what lstat saw may
    be gone, or replaced by another build's fresh folder (unlink's EISDIR), by the time it is removed;
    either way there is nothing of this call's left to remove."""
    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return
    if is_dir:
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(path)


@contextlib.contextmanager
def building(cache: Path, key: str):
    """A fresh 0700 folder to build `key`'s entry in; removed unless the body renamed it away. Its
    lock file beside it (arrcoc_edge.scratch) lets the next build remove it after a kill -9: the
    dot-folders of killed builds, whatever their key, never match an entry's name."""
    work = scratch.make(f".{key}.", cache, family=".")
    try:
        yield work
    finally:
        scratch.remove(work)


def new_scratch(scratch: Path | None) -> Path:
    """A private folder for work kept outside the cache: the caller's (which must not exist yet),
    or a new temporary one the caller removes."""
    if scratch is None:
        return Path(tempfile.mkdtemp(prefix="arrcoc-edge-uncached-"))
    scratch.mkdir(mode=0o700)
    return scratch


def reuse_or_make(name: str, key: str, make: Callable[[Path], None], note: Callable[[str], None], *,
                  label: str, action: str, scratch: Path | None = None) -> tuple[Path, bool]:
    """The entry `key` of the cache `name`, reused when `check_entry` finds it sound, else made by
    `make(folder)` in a fresh folder, sealed and renamed into place. Returns (folder, reused).

    A cache folder that cannot be trusted, an unsound entry, or an entry another build of the user
    sealed unsoundly while this one was making it: one `note` naming the reason (`label` names the
    cache, `action` what `make` does, for the note's wording), and `make` runs outside the cache, in
    `new_scratch(scratch)`. Never a failure: a cache only saves time."""
    try:
        cache = user_cache_dir(name)
    except CacheUnusable as exc:
        note(f"{label} not used ({exc}): {action} without it")
        folder = new_scratch(scratch)
        make(folder)
        return folder, False
    done = cache / key
    if os.path.lexists(done):
        problem = check_entry(done, key)
        if problem is None:
            return done, True
        note(f"{label} entry {done} not used ({problem}): {action} afresh")
        discard(done)
    with building(cache, key) as work:  # a failed `make` leaves nothing behind
        make(work)
        try:
            seal(work, key)
            work.rename(done)
        except OSError as exc:  # another build of the user's sealed the same key first: theirs is as good, if sound
            why = check_entry(done, key) if os.path.lexists(done) else exc.strerror or type(exc).__name__
            if why is not None:
                note(f"{label} entry {done} not stored ({why}): not cached")
                folder = new_scratch(scratch)
                shutil.copytree(work, folder, dirs_exist_ok=True)
                return folder, False
    return done, False
