"""Writing a built bundle into an app's own folder without touching anything of the user's.

The android and ios stages copy their bundle into a folder the user owns: the sample apps'
(mobile/android/app/src/main/assets, mobile/ios/ArrcocDemo/Resources) or their own app's
(ARRCOC_ANDROID_APP_DIR, ARRCOC_IOS_APP_DIR). That folder may hold the user's files too (fonts,
images) and sit beside the user's backups, so the copy writes file by file, never the folder whole:

- RECORD (`.arrcoc-edge-files.json` inside the folder) lists every file the tool wrote there with
  its sha256, and the folders it made. A file is the tool's only while its content still matches
  the record; anything else is the user's.
- A file of ours that the new bundle has again is replaced (a temporary file beside it, then
  os.replace: each file is swapped whole); one it no longer has is removed, and a folder the tool
  made is removed once empty. A recorded file whose content the user changed is left alone and
  dropped from the record.
- A path the bundle needs that holds the user's file (a name the tool never wrote, or one whose
  content changed since) is refused with one line naming it, before anything is written: the
  user moves it, the build never decides which of two files the app should load. A file that
  already holds the very bytes the bundle writes there is taken as the tool's (nothing is lost;
  this is also how a folder written before the record existed is taken over). The same for a
  link or a non-folder where the bundle needs a folder: nothing is written through a link.
- The record is written before the files with both the old and the new sha256 of every path, so a
  build killed half way leaves a folder whose every file the next build still knows; its
  temporary files are named with a random token and recorded too, and only those are removed.
- The record is a claim, never an order: a file it names (a pending temporary one too) is removed
  or replaced only while its content is a sha256 the record lists; every folder on the way is
  opened by descriptor without following links (os.open O_NOFOLLOW|O_DIRECTORY, dir_fd=), so a
  subfolder swapped for a link never leads outside; every name (the record's and the bundle's) is
  checked (NUL, a component over 255 bytes, depth, `..`, absolute) before anything is written.
- Nothing beside the folder is read, written or removed; two builds into one folder take turns
  (flock on the folder itself).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import stat
from pathlib import Path

from arrcoc_edge.errors import OutputDirError
from arrcoc_edge.publishing.outputs_guard import refuse_published
from arrcoc_edge.relevance.digest import sha256_file

RECORD = ".arrcoc-edge-files.json"
RECORD_VERSION = 1
RECORD_MAX_BYTES = 4 << 20  # a record lists a few dozen files: anything larger is not ours
MAX_DEPTH = 32  # a bundle nests 5 deep (an .mlpackage); deeper names are not ours
MAX_NAME_BYTES = 255  # NAME_MAX of every file system the apps build on
MAX_PATH_BYTES = 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LINKED = (errno.ELOOP, errno.ENOTDIR)


def _refuse(problem: str, fix: str):
    raise OutputDirError(problem, fix)


def _empty() -> dict:
    return {"files": {}, "dirs": [], "pending": {}}


def read_record(dest: Path) -> dict:
    """{"files": {rel: [sha256, ...]}, "dirs": [rel, ...], "pending": {rel: sha256 | None}} or an
    empty record. Every name is checked here, before the caller writes anything."""
    path = dest / RECORD
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return _empty()
    except OSError:
        fd = None
    try:
        st = os.fstat(fd) if fd is not None else None
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > RECORD_MAX_BYTES:
            _refuse(f"{path} is not a record this tool wrote (a link, a folder or too large)",
                    f"move {path} away, then rebuild")
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(RECORD_MAX_BYTES + 1)
    finally:
        if fd is not None:
            os.close(fd)
    try:
        data = json.loads(raw)
        pending = data["pending"]  # [[rel, sha], ...]; a record of an older build: [rel, ...]
        record = {"files": {str(k): [str(s) for s in v] for k, v in data["files"].items()},
                  "dirs": [str(d) for d in data["dirs"]],
                  "pending": {str(p): None if isinstance(p, str) else str(p[1]) for p in pending}
                  if all(isinstance(p, str) for p in pending) else {str(r): str(s) for r, s in pending}}
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        _refuse(f"{path} is not a record this tool wrote ({type(exc).__name__})", f"move {path} away, then rebuild")
    for rel in [*record["files"], *record["dirs"], *record["pending"]]:
        _check_rel(rel, path)
    return record


def _check_rel(rel: str, where: Path) -> None:
    """A relative path of plain names inside the folder, short and shallow enough to write."""
    try:
        encoded = rel.encode("utf-8")
        parts = rel.split("/")
        bad = (not rel or "\0" in rel or rel.startswith("/") or rel == RECORD or len(parts) > MAX_DEPTH
               or len(encoded) > MAX_PATH_BYTES
               or any(p in ("", ".", "..") or len(p.encode("utf-8")) > MAX_NAME_BYTES for p in parts))
    except UnicodeEncodeError:
        bad = True
    if bad:
        _refuse(f"{where} names {rel[:80]!r}, which is not a path inside the folder "
                f"(NUL, '..', absolute, a name over {MAX_NAME_BYTES} bytes or deeper than {MAX_DEPTH})",
                f"move {where} away, then rebuild")


@contextlib.contextmanager
def _parent_fd(root_fd: int, dest: Path, rel: str, create: list[str] | None = None):
    """The folder holding `rel`, opened component by component without following a link; None if
    a folder on the way is missing (and `create` is None). `create` lists the folders the tool may
    make (recorded before). A link or a non-folder on the way: OutputDirError."""
    parts = rel.split("/")[:-1]
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(parts):
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if create is None or "/".join(parts[:i + 1]) not in create:
                    os.close(fd)
                    fd = None
                    break
                os.mkdir(name, 0o777, dir_fd=fd)
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in _LINKED:
                    raise
                where = dest.joinpath(*parts[:i + 1])
                _refuse(f"{where} is not a folder (a link or a file of yours), on the way to {rel}",
                        f"move {where} away, then rebuild")
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _sha_at(dir_fd: int, name: str) -> str | None:
    """sha256 of a regular file `name` in `dir_fd` (not followed if a link); None if absent or not one."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        h = hashlib.sha256()
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _write_record(root_fd: int, record: dict) -> None:
    tmp = f".{RECORD}.{secrets.token_hex(8)}.tmp"
    data = {"version": RECORD_VERSION, "note": "files `invoke build` wrote here (targets/shared/app_folder.py); "
            "it removes or replaces only these, and only while their sha256 is one listed",
            "files": record["files"], "dirs": record["dirs"],
            "pending": sorted([rel, sha] for rel, sha in record["pending"].items())}
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=root_fd)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, RECORD, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=root_fd)


def _plan(staging: Path, dest: Path, root_fd: int, record: dict) -> dict[str, str]:
    """{rel: sha256} of every staged file; refuses (before anything is written) a name that is not
    a plain path, a path that holds the user's file, or a link or non-folder where a folder is needed."""
    wanted = {p.relative_to(staging).as_posix(): sha256_file(p) for p in sorted(staging.rglob("*")) if p.is_file()}
    for rel in wanted:
        _check_rel(rel, staging / rel)
    for rel, sha in wanted.items():
        with _parent_fd(root_fd, dest, rel) as fd:
            name = rel.rsplit("/", 1)[-1]
            if fd is None or not _exists_at(fd, name):
                continue
            have = _sha_at(fd, name)
            if have is not None and (have in record["files"].get(rel, []) or have == sha):
                continue  # ours, or already the very bytes the build writes: nothing of the user's to lose
        _refuse(f"{dest / rel} is not a file this build wrote (yours, or changed since), and the build writes {rel} there",
                f"move {dest / rel} out of {dest}, then rebuild")
    return wanted


def _missing_dirs(root_fd: int, dest: Path, wanted: dict[str, str]) -> list[str]:
    """The folders the bundle needs that do not exist yet, parents first: the ones the tool makes."""
    missing = set()
    for rel in wanted:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            with _parent_fd(root_fd, dest, sub + "/x") as fd:  # opens every folder of `sub`
                if fd is None:
                    missing.add(sub)
    return sorted(missing, key=lambda r: (r.count("/"), r))


def _place(staging: Path, dest: Path, root_fd: int, rel: str, tmp_rel: str, made: list[str]) -> None:
    """One file into the app: written beside its place, then swapped in whole."""
    name, tmp_name = rel.rsplit("/", 1)[-1], tmp_rel.rsplit("/", 1)[-1]
    with _parent_fd(root_fd, dest, rel, create=made) as dir_fd:
        try:
            fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=dir_fd)
            with open(staging / rel, "rb") as src, os.fdopen(fd, "wb") as out:
                while block := src.read(1 << 20):
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:  # a full disk, Ctrl-C: our temporary file goes, the app's file is as it was
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name, dir_fd=dir_fd)
            raise


def _remove_if_ours(root_fd: int, dest: Path, rel: str, shas: list[str]) -> bool:
    """Unlink `rel` only while it is a regular file whose content the record lists, reached through
    real folders; True if removed. A link on the way or changed content: left as it is."""
    name = rel.rsplit("/", 1)[-1]
    try:
        with _parent_fd(root_fd, dest, rel) as fd:
            if fd is None or _sha_at(fd, name) not in shas:
                return False
            os.unlink(name, dir_fd=fd)
            return True
    except OutputDirError:
        return False


def _remove_stale(root_fd: int, dest: Path, record: dict, wanted: dict[str, str]) -> list[str]:
    """Recorded files the bundle no longer has, while still ours; then recorded folders left empty.
    Returns the files kept because the user changed them."""
    kept = []
    for rel, shas in record["files"].items():
        if rel not in wanted and not _remove_if_ours(root_fd, dest, rel, shas) and os.path.lexists(dest / rel):
            kept.append(rel)
    for rel in sorted(record["dirs"], key=lambda r: -r.count("/")):
        with contextlib.suppress(OSError, OutputDirError), _parent_fd(root_fd, dest, rel) as fd:
            if fd is not None:  # not empty (a file of yours), a link, or gone: kept as it is
                os.rmdir(rel.rsplit("/", 1)[-1], dir_fd=fd)
    return kept


def _remove_pending(root_fd: int, dest: Path, record: dict) -> list[str]:
    """Temporary files a killed build left, recorded with the sha256 of the whole file before they
    were made: removed only when complete; a partial one is kept and named (it may be anything)."""
    kept = []
    for rel, sha in record["pending"].items():
        if not _remove_if_ours(root_fd, dest, rel, [sha] if sha else []) and os.path.lexists(dest / rel):
            kept.append(rel)
    return kept


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def _folder_lock(dest: Path):
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def copy_to_app(staging: Path, dest: Path) -> list[str]:
    """Write the staged bundle's files into the app folder `dest` (see the module docstring).
    Returns the names of files once ours that the user changed (or a killed build's partial
    temporary file) and that were therefore kept. Raises OutputDirError for a name or path of the
    user's that the bundle needs, OSError when `dest` cannot be written (both leave the user's files
    as they were)."""
    staging, dest = Path(staging), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with _folder_lock(dest) as root_fd:
        # judged again on the folder the kernel opened (every write below is relative to it): the
        # build's check was minutes ago, and a link on the way may have moved since
        refuse_published("the app folder", Path(f"/proc/self/fd/{root_fd}") if os.path.isdir("/proc/self/fd") else dest)
        record = read_record(dest)
        wanted = _plan(staging, dest, root_fd, record)
        kept = _remove_pending(root_fd, dest, record)
        tmp = {rel: "/".join([*rel.split("/")[:-1], f".arrcoc-edge-{secrets.token_hex(8)}.tmp"]) for rel in wanted}
        pending = {tmp[rel]: sha for rel, sha in wanted.items()}
        made = _missing_dirs(root_fd, dest, wanted)
        dirs = sorted(set(record["dirs"]) | set(made))
        # Before any file changes: every path with its old and new content, the folders the tool
        # makes and its temporary names with their content, so a build killed at any point leaves
        # nothing unknown.
        files = {rel: sorted(set(record["files"].get(rel, [])) | {sha}) for rel, sha in wanted.items()}
        files.update({rel: shas for rel, shas in record["files"].items() if rel not in wanted})
        _write_record(root_fd, {"files": files, "dirs": dirs, "pending": pending})
        for rel in sorted(wanted, key=lambda r: r == "contract.json"):  # contract.json, naming the rest, last
            _place(staging, dest, root_fd, rel, tmp[rel], made)
        kept += _remove_stale(root_fd, dest, record, wanted)
        _write_record(root_fd, {"files": {rel: [sha] for rel, sha in wanted.items()},
                                "dirs": [d for d in dirs if _is_dir(dest / d)], "pending": {}})
    return kept
