"""The one rule for files a user names as outputs (predict --json and --heatmap, train --out), and
the one function that writes them.

The rule: the path names a new file or an existing regular file. A link there is written through:
its target is what gets replaced (the link stays and goes on naming the new content), judged
after every link is followed, one at a time. Refused, with one line: a device, FIFO, socket or
folder (`--json /dev/null` as root would otherwise replace the device node), and a name that
reaches a process's descriptor through /proc (`/dev/stdout`: its target is whatever the shell
opened, which may be a terminal, a pipe, or a file the shell goes on writing).

write_user_file writes a temporary file beside the resolved target, gives it the mode and owner
the target had (a 0600 result stays private), checks the target again, then renames it into
place: the file is whole or unchanged. Each temporary file is locked while its writer lives; one
left by a killed run (SIGKILL, the OOM killer, a power cut) is removed by the next write of the
same name (sweep_temps), as arrcoc_edge.scratch does for folders.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import tempfile
import time
from pathlib import Path

from arrcoc_edge.errors import InputError, OutputDirError

MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup
TEMP_SUFFIX = ".tmp"
FRESH_S = 2.0  # a temporary file younger than this may be between its creation and its lock


def resolve(option: str, value) -> Path:
    """The file a write to `value` replaces: absolute, every link (of its folders and itself)
    followed one at a time. InputError when a link on the way lies in /proc (a descriptor) or
    the chain is a loop, or when what is there is not a regular file."""
    path = Path(os.path.abspath(os.fsdecode(value)))
    for _ in range(MAX_LINKS):
        path = Path(os.path.realpath(path.parent)) / path.name
        if _in_proc(path):
            raise InputError(f"--{option} {str(value)!r} names a process's descriptor ({path}), not a file",
                             f"pass --{option} with a file name (to see the output, open that file afterwards)")
        if not path.is_symlink():
            _check_kind(option, value, path)
            return path
        path = Path(os.path.abspath(os.path.join(path.parent, os.readlink(path))))
    raise InputError(f"--{option} {str(value)!r} is a chain of more than {MAX_LINKS} links (a loop?)",
                     f"pass --{option} with a file name")


def _in_proc(path: Path) -> bool:
    return path.parts[1:2] == ("proc",)


def _check_kind(option: str, value, path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"--{option} {str(value)!r} cannot be examined ({exc.strerror or exc})",
                         f"pass --{option} with a new file name") from exc
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        shown = f" ({path})" if str(path) != os.path.abspath(os.fsdecode(value)) else ""
        raise InputError(f"--{option} {str(value)!r} is {kind}{shown}: only a new or regular file is written",
                         f"pass --{option} with a new file name or a regular file to replace")


def write_user_file(path: Path, write, option: str = "out") -> Path:
    """Write the file a user named, whole or not at all, by the module's rule; returns the file
    written (the link's target when `path` is a link). `write(binary file)` fills it."""
    target = resolve(option, path)
    sweep_temps(target)
    before = _existing(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TEMP_SUFFIX)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held while this process lives: sweep_temps leaves it alone
        _keep_identity(fd, before, option, target)
        with os.fdopen(os.dup(fd), "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        again = resolve(option, path)  # minutes may have passed: judged again right before the rename
        if again != target:
            raise OutputDirError(f"--{option} {path} changed while it was being written ({again})",
                                 f"run again, or pass --{option} with a path nothing else writes")
        os.replace(tmp, target)
    finally:
        os.close(fd)
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return target


def _existing(target: Path):
    try:
        return os.lstat(target)
    except FileNotFoundError:
        return None


def _keep_identity(fd: int, before, option: str, target: Path) -> None:
    """The temporary file takes the replaced file's mode and owner; a new file gets the mode
    open() would give it (0666 less the umask)."""
    if before is None:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        return
    if (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, before.st_uid, before.st_gid)
        except PermissionError:
            if before.st_uid != os.geteuid():
                raise OutputDirError(f"--{option} {target} belongs to user {before.st_uid}: replacing it would "
                                     "make it yours", f"remove it first, or pass --{option} with another name") from None
    os.fchmod(fd, stat.S_IMODE(before.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))  # as a write by another drops them


def temp_pattern(name: str) -> re.Pattern:
    """The names mkstemp gives the temporary files of `name` (a prefix, 8 of [a-z0-9_], .tmp)."""
    return re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}{re.escape(TEMP_SUFFIX)}")


def sweep_temps(target: Path) -> int:
    """Remove the temporary files of `target` that a killed writer left: regular files of this
    user, older than FRESH_S, whose lock nobody holds. Returns how many."""
    pattern, removed = temp_pattern(target.name), 0
    try:
        names = [n for n in os.listdir(target.parent) if pattern.fullmatch(n)]
    except OSError:
        return 0
    for name in names:
        removed += _sweep_one(target.parent / name)
    return removed


def _sweep_one(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or time.time() - info.st_ctime < FRESH_S:
            return 0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return 0  # its writer is alive
            raise
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            return 0
        os.unlink(path)
        return 1
    except OSError:
        return 0
    finally:
        os.close(fd)
