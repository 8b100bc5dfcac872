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
- Nothing beside the folder is read, written or removed; two builds into one folder take turns
  (flock on the folder itself).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
from pathlib import Path

from pipeline.errors import OutputDirError
from pipeline.relevance.digest import sha256_file

RECORD = ".arrcoc-edge-files.json"
RECORD_VERSION = 1
RECORD_MAX_BYTES = 4 << 20  # a record lists a few dozen files: anything larger is not ours


def _refuse(problem: str, fix: str):
    raise OutputDirError(problem, fix)


def read_record(dest: Path) -> dict:
    """{"files": {rel: [sha256, ...]}, "dirs": [rel, ...], "pending": [rel, ...]} or an empty record."""
    path = dest / RECORD
    try:
        st = path.lstat()
    except FileNotFoundError:
        return {"files": {}, "dirs": [], "pending": []}
    if not stat.S_ISREG(st.st_mode) or st.st_size > RECORD_MAX_BYTES:
        _refuse(f"{path} is not a record this tool wrote (a link, a folder or too large)",
                f"move {path} away, then rebuild")
    try:
        data = json.loads(path.read_text())
        record = {"files": {str(k): [str(s) for s in v] for k, v in data["files"].items()},
                  "dirs": [str(d) for d in data["dirs"]], "pending": [str(p) for p in data["pending"]]}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        _refuse(f"{path} is not a record this tool wrote ({type(exc).__name__})", f"move {path} away, then rebuild")
    for rel in [*record["files"], *record["dirs"], *record["pending"]]:
        _check_rel(rel, path)
    return record


def _check_rel(rel: str, where: Path) -> None:
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts or rel == RECORD:
        _refuse(f"{where} names {rel!r}, which is not a path inside the folder", f"move {where} away, then rebuild")


def _write_record(dest: Path, record: dict) -> None:
    tmp = dest / f".{RECORD}.{secrets.token_hex(8)}.tmp"
    data = {"version": RECORD_VERSION, "note": "files `invoke build` wrote here (targets/shared/app_folder.py); "
            "it removes or replaces only these, and only while their sha256 is one listed", **record}
    try:
        with open(tmp, "x") as f:
            f.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest / RECORD)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _is_ours(path: Path, shas: list[str]) -> bool:
    """A regular file (not a link) whose content is one the record lists."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and sha256_file(path) in shas


def _plan(staging: Path, dest: Path, record: dict) -> dict[str, str]:
    """{rel: sha256} of every staged file; refuses (before anything is written) a path that holds
    the user's file, or a link or non-folder where a folder is needed."""
    wanted = {p.relative_to(staging).as_posix(): sha256_file(p) for p in sorted(staging.rglob("*")) if p.is_file()}
    for rel, sha in wanted.items():
        for parent in reversed(Path(rel).parents[:-1]):
            try:
                mode = (dest / parent).lstat().st_mode
            except FileNotFoundError:
                break
            if not stat.S_ISDIR(mode):
                _refuse(f"{dest / parent} is not a folder (a link or a file of yours), where the build writes {rel}",
                        f"move {dest / parent} away, then rebuild")
        target = dest / rel
        if not os.path.lexists(target):
            continue
        if _is_ours(target, record["files"].get(rel, [])):
            continue
        st = target.lstat()
        if stat.S_ISREG(st.st_mode) and st.st_size == os.stat(staging / rel).st_size and sha256_file(target) == sha:
            continue  # already the very bytes the build writes: nothing of the user's to lose
        _refuse(f"{target} is not a file this build wrote (yours, or changed since), and the build writes {rel} there",
                f"move {target} out of {dest}, then rebuild")
    return wanted


def _missing_dirs(dest: Path, wanted: dict[str, str]) -> list[str]:
    """The folders the bundle needs that do not exist yet, parents first: the ones the tool makes."""
    missing = {parent.as_posix() for rel in wanted for parent in Path(rel).parents[:-1]
               if not os.path.lexists(dest / parent)}
    return sorted(missing, key=lambda r: (r.count("/"), r))


def _place(staging: Path, dest: Path, rel: str, tmp_name: str) -> None:
    """One file into the app: written beside its place, then swapped in whole."""
    target = dest / rel
    target.parent.mkdir(parents=True, exist_ok=True)  # only folders _missing_dirs recorded
    tmp = target.parent / tmp_name
    try:
        with open(staging / rel, "rb") as src, open(tmp, "xb") as out:
            while block := src.read(1 << 20):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:  # a full disk, Ctrl-C: our temporary file goes, the app's file is as it was
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def _remove_stale(dest: Path, record: dict, wanted: dict[str, str]) -> list[str]:
    """Recorded files the bundle no longer has, while still ours; then recorded folders left empty.
    Returns the files kept because the user changed them."""
    kept = []
    for rel, shas in record["files"].items():
        if rel in wanted:
            continue
        if _is_ours(dest / rel, shas):
            (dest / rel).unlink()
        elif os.path.lexists(dest / rel):
            kept.append(rel)
    for rel in sorted(record["dirs"], key=lambda r: -r.count("/")):
        path = dest / rel
        with contextlib.suppress(OSError):  # not empty (a file of yours), or gone: kept as it is
            if stat.S_ISDIR(path.lstat().st_mode):
                path.rmdir()
    return kept


def _remove_pending(dest: Path, record: dict) -> None:
    """Temporary files a killed build left: recorded by their random names before they were made."""
    for rel in record["pending"]:
        path = dest / rel
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(path.lstat().st_mode):
                path.unlink()


@contextlib.contextmanager
def _folder_lock(dest: Path):
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def copy_to_app(staging: Path, dest: Path) -> list[str]:
    """Write the staged bundle's files into the app folder `dest` (see the module docstring).
    Returns the names of files once ours that the user changed and that were therefore kept.
    Raises OutputDirError for a path of the user's that the bundle needs, OSError when `dest`
    cannot be written (both leave the user's files as they were)."""
    staging, dest = Path(staging), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with _folder_lock(dest):
        record = read_record(dest)
        _remove_pending(dest, record)
        wanted = _plan(staging, dest, record)
        tmp_name = f".arrcoc-edge-{secrets.token_hex(8)}.tmp"
        pending = sorted({(Path(rel).parent / tmp_name).as_posix() for rel in wanted})
        dirs = sorted(set(record["dirs"]) | set(_missing_dirs(dest, wanted)))
        # Before any file changes: every path with its old and new content, the folders the tool
        # makes and its temporary names, so a build killed at any point leaves nothing unknown.
        files = {rel: sorted(set(record["files"].get(rel, [])) | {sha}) for rel, sha in wanted.items()}
        files.update({rel: shas for rel, shas in record["files"].items() if rel not in wanted})
        _write_record(dest, {"files": files, "dirs": dirs, "pending": pending})
        for rel in sorted(wanted, key=lambda r: r == "contract.json"):  # contract.json, naming the rest, last
            _place(staging, dest, rel, tmp_name)
        kept = _remove_stale(dest, record, wanted)
        _write_record(dest, {"files": {rel: [sha] for rel, sha in wanted.items()},
                             "dirs": [d for d in dirs if (dest / d).is_dir()], "pending": []})
    return kept
