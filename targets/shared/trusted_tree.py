"""A folder this tool executes or imports from (the arm64 emulation root, the C++ ExecuTorch runner's
tree), checked whole before it is trusted: every entry owned by root or this user and writable by
no one else, every link resolving inside it, and each folder above it writable only by them (or
sticky, as /tmp). Another user able to write any one of the thousands of files such a tree holds
could run code in this build and forge its measured record, so checking a few top-level paths is
not enough. A walk costs about 0.1 s per 3,000 entries; a tree passes once per process (only its
owners can change it afterwards) and is checked again when its marker changes.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from arrcoc_edge.errors import HostCapabilityError

_passed: set[tuple] = set()


def _identity(root: Path, marker: str) -> tuple:
    st, mk = os.stat(root), os.stat(root / marker)
    return (str(root), st.st_dev, st.st_ino, mk.st_ino, mk.st_mtime_ns)


def _bad(path: str, st: os.stat_result, me: int) -> bool:
    return st.st_uid not in (me, 0) or (not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022)


def check_tree(root: Path, marker: str, what: str, fix: str) -> None:
    """Raise HostCapabilityError naming the first entry of `root` that is another user's, writable
    by others, or a link leading out of it; `marker` is the file whose change makes a new check."""
    key = _identity(root, marker)
    if key in _passed:
        return
    me, prefix = os.getuid(), str(root) + os.sep

    def refuse(path: str, why: str):
        return HostCapabilityError(f"{what} at {root} is not trusted: {path} {why}", f"remove {root}, then {fix}")

    for folder in root.parents:  # a folder above that another user can write lets them swap the tree
        st = os.stat(folder)
        if st.st_uid not in (me, 0) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            raise refuse(str(folder), "(a folder above it) is another user's or writable by others")
    if _bad(str(root), os.lstat(root), me):
        raise refuse(str(root), "is another user's or writable by others")
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if _bad(path, st, me):
                raise refuse(path, "is another user's or writable by others")
            if stat.S_ISLNK(st.st_mode) and not os.path.realpath(path).startswith(prefix):
                raise refuse(path, f"is a link out of it (to {os.readlink(path)})")
    _passed.add(key)
