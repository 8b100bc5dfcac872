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
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import time
import uuid
from pathlib import Path

from pipeline.errors import InputError, OutputDirError

STATE_SUFFIX = ".arrcoc-edge"
GENERATIONS = ".generations"
STAGING = ".staging"
CACHE = ".cache"
LEDGER = "ledger.json"
LOCK = ".lock"
SWITCH = ".switch"  # the new link, made here and renamed onto OUT
MANIFEST = "manifest.json"
REPORT_FILES = ("report.html", "REPORT.md")
BENCH = "bench.json"
WRITTEN_BESIDE = (MANIFEST, *REPORT_FILES, BENCH)  # files the tool writes into a generation
# A target (or variant) name as the manifest may use it: one plain path component, 128 at most.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# The names the tool gives its staging runs and generations (about 30 characters): time, process
# id, six hex digits; a taken-over folder's generation starts with "adopted-". A ledger or link
# naming anything else was edited, and nothing is removed on its word.
RUN_NAME = re.compile(r"\d{8}-\d{6}-\d{1,10}-[0-9a-f]{6}")
GENERATION_NAME = re.compile(rf"{RUN_NAME.pattern}|adopted-\d{{8}}-\d{{6}}-[0-9a-f]{{6}}")
# The temporary files the tool's atomic writes leave when killed mid-write (tempfile.mkstemp: a
# prefix, 8 characters of [a-z0-9_], a suffix): write_atomic's and report._write_atomic's (no
# suffix) in a generation; the ledger's and prepare_out_dir's write test in the state folder.
_MKSTEMP = r"[a-z0-9_]{8}"
TEMP_IN_GENERATION = re.compile(rf"\.(?:manifest\.json|bench\.json)\.{_MKSTEMP}\.tmp"
                                rf"|\.(?:report\.html|REPORT\.md)\.{_MKSTEMP}")
TEMP_IN_STATE = re.compile(rf"\.ledger\.json\.{_MKSTEMP}\.tmp|\.write-test-{_MKSTEMP}")
# What the tool writes into each cache folder of the state (.cache/<kind>/), by the name it gives:
# exported programs by their key, saved outputs as <target>.<variant>.npz, TensorRT's timing cache.
CACHE_ENTRIES = {
    "export": re.compile(rf"[0-9a-f]{{16,64}}\.pt2|\.tmp-{_MKSTEMP}\.pt2"),
    "report": re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,127}}\.[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}\.npz|tmp{_MKSTEMP}\.npz"),
    "tensorrt": re.compile(rf"timing\.cache|\.tmp-{_MKSTEMP}"),
}
MAX_MANIFEST_BYTES = 64 * 1024 * 1024

KILL_AT_ENV = "ARRCOC_TEST_KILL_AT"  # tests: SIGKILL this process at the numbered point of publish()


# ---------------------------------------------------------------- where things are


def state_dir(out: Path) -> Path:
    return out.parent / f".{out.name}{STATE_SUFFIX}"


def output_path(value: str, release_ok: bool = False) -> Path:
    """The output folder a user named, resolved once: absolute, with every link in its parent
    folders followed. The last component stays as given when it is this tool's own link (that IS
    the output folder), or, for a task that only reads (release_ok), a link to a generation that
    its output folder's ledger names (a kept release: a renamed or copied OUT); a user's link
    there is followed to the folder it names."""
    if "\0" in value:
        raise OutputDirError(f"--out {value!r} holds a NUL character", "pass a folder name without control characters")
    path = Path(os.path.abspath(value))
    for _ in range(40):
        if path == path.parent:
            break
        path = Path(os.path.realpath(path.parent)) / path.name
        if not path.is_symlink() or _link_generation(path) is not None:
            break
        if release_ok and kept_release(path) is not None:
            return path
        path = Path(os.path.abspath(os.path.join(path.parent, os.readlink(path))))  # one link at a time
    if path == path.parent:
        raise OutputDirError(f"--out {value!r} names the file system root", "pass a folder to write into with --out")
    if any(p.endswith(STATE_SUFFIX) for p in path.parts):
        owner = kept_release(Path(os.path.abspath(value)))
        if owner is not None:
            raise OutputDirError(f"--out {value!r} is a kept release (generation {owner[1]} of {owner[0]}), which "
                                 "only verify reads", f"build into {owner[0]}, or copy the release first "
                                 f"(cp -rL {value} NEW) and pass --out NEW")
        if not os.path.lexists(path):  # `mv OUT sub/v1`: OUT's relative link resolves nowhere there
            raise OutputDirError(f"--out {value!r} is a link to {path}, which does not exist (a release link moved "
                                 "away from its output folder)", "make it resolve: the build that kept its "
                                 "generation named the `ln -sfn` command (or move the link back beside that folder)")
        raise OutputDirError(f"--out {value!r} is inside an output folder's own state ({path})",
                             "pass the output folder itself (the name without the leading dot and suffix)")
    return path


def kept_release(link: Path) -> tuple[Path, str] | None:
    """(output folder, generation id) when `link` resolves to a generation folder that the ledger
    of the output folder whose state holds it names, else None. The state is found from the
    resolved path and confirmed by identity: the generation folder there is the link's target."""
    try:
        real = Path(os.path.realpath(link))
        state = real.parent.parent
        if not (real.parent.name == GENERATIONS and state.name.startswith(".") and state.name.endswith(STATE_SUFFIX)
                and GENERATION_NAME.fullmatch(real.name)):
            return None
        out = state.parent / state.name[1:-len(STATE_SUFFIX)]
        if real.name not in read_ledger(out)["generations"] or not os.path.samefile(link, state / GENERATIONS / real.name):
            return None
    except (OSError, ValueError, OutputDirError):
        return None
    return out, real.name


def _link_generation(out: Path) -> str | None:
    """The generation id OUT links to when it is this tool's link, else None."""
    try:
        target = os.readlink(out)
    except OSError:
        return None
    prefix = f"{state_dir(out).name}/{GENERATIONS}/"
    name = target[len(prefix):] if target.startswith(prefix) else ""
    return name if GENERATION_NAME.fullmatch(name) else None


def generation_id(out: Path) -> str | None:
    """The published generation's id, when OUT is this tool's link to a generation in its ledger."""
    gen = _link_generation(out)
    return gen if gen is not None and gen in read_ledger(out)["generations"] else None


def current_generation(out: Path) -> Path | None:
    gen = generation_id(out)
    path = state_dir(out) / GENERATIONS / gen if gen else None
    return path if path is not None and path.is_dir() else None


def pinned(folder: Path) -> Path:
    """The one folder a reader should read `folder`'s publish from: the generation its link names
    now (which later publishes never change), an older-layout folder's current generation, or the
    folder itself (a plain copy, a CI part)."""
    gen = current_generation(folder)
    if gen is not None:
        return gen
    old = _old_layout_generation(folder)
    return old if old is not None else folder


def is_output_folder(out: Path) -> bool:
    return generation_id(out) is not None


def cache_root(folder: Path) -> Path:
    """Where `folder`'s caches are: its state's .cache for an output folder, else folder/.cache."""
    return state_dir(folder) / CACHE if (state_dir(folder) / LEDGER).is_file() else folder / CACHE


# ---------------------------------------------------------------- the ledger


MAX_LEDGER_BYTES = 16 * 1024 * 1024  # thousands of entries; a ledger linked to /dev/zero is not read


def read_ledger(out: Path) -> dict:
    """The ledger, checked like user input: every name in it is later joined to a state path and
    removed, so a name that is not one plain component ('../../victim.txt', '/home') or an entry
    of the wrong type is refused (OutputDirError, nothing removed). A missing ledger is empty."""
    path = state_dir(out) / LEDGER
    data = read_state_json(path, MAX_LEDGER_BYTES, _ledger_error)
    if data is None:
        return {"tool": "arrcoc-edge", "generations": {}, "staging": []}
    if not (isinstance(data, dict) and isinstance(data.get("generations"), dict)
            and isinstance(data.get("staging"), list)):
        raise _ledger_error(path, "not a ledger (generations {...} and staging [...])")
    for gen, info in data["generations"].items():
        if not GENERATION_NAME.fullmatch(gen):
            raise _ledger_error(path, f"names generation {_cut(gen)} ({len(gen)} characters), not a name the tool "
                                      "gives (YYYYMMDD-HHMMSS-PID-xxxxxx)")
        if not isinstance(info, dict) or not all(isinstance(info.get(k, False), bool) for k in ("published", "kept")):
            raise _ledger_error(path, f"holds {_cut(str(info))} for generation {gen}, not {{'published': true|false}}")
    for run in data["staging"]:
        if not isinstance(run, str) or not RUN_NAME.fullmatch(run):
            raise _ledger_error(path, f"names staging run {_cut(str(run))}, not a name the tool gives "
                                      "(YYYYMMDD-HHMMSS-PID-xxxxxx)")
    return data


def _cut(text: str, keep: int = 60) -> str:
    """A name read from state, quoted and cut short: one bad entry stays one readable line."""
    return repr(text) if len(text) <= keep else repr(text[:keep]) + "..."


def _ledger_error(path: Path, why: str) -> OutputDirError:
    return OutputDirError(
        f"the tool's ledger {path} {why}; nothing was removed",
        f"restore it from a backup, or move {path.parent} and the output folder's link aside, then build again")


def read_state_json(path: Path, cap: int, error):
    """A JSON file of the tool's own state (None when there is none), opened only when it is a
    regular file of at most `cap` bytes: a FIFO there would block the reader forever, a link to
    /dev/zero would fill memory. Anything else is `error(path, why)`, raised."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise error(path, f"cannot be opened ({why_not_regular(exc)})") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # checked on the descriptor: open() of a folder succeeds
        os.close(fd)
        raise error(path, "is not a regular file")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > cap:
            raise error(path, f"is {info.st_size} bytes, more than the {cap} a state file may hold")
        try:
            return json.loads(f.read(cap + 1))
        except (OSError, ValueError, RecursionError) as exc:
            raise error(path, f"is not JSON ({type(exc).__name__})") from exc


def _write_ledger(out: Path, ledger: dict) -> None:
    state_dir(out).mkdir(parents=True, exist_ok=True)
    write_json_atomic(state_dir(out) / LEDGER, ledger)


def _record(out: Path, **change) -> dict:
    """Update the ledger: generations={id: info or None (drop)}, staging_add=run, staging_drop=run."""
    ledger = read_ledger(out)
    for gen, info in (change.get("generations") or {}).items():
        if info is None:
            ledger["generations"].pop(gen, None)
        else:
            ledger["generations"][gen] = {**ledger["generations"].get(gen, {}), **info}
    if change.get("staging_add"):
        ledger["staging"].append(change["staging_add"])
    if change.get("staging_drop"):
        ledger["staging"] = [r for r in ledger["staging"] if r != change["staging_drop"]]
    _write_ledger(out, ledger)
    return ledger


# ---------------------------------------------------------------- preparing and locking


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


@contextlib.contextmanager
def build_lock(out: Path, log=print):
    """Exclusive lock on OUT for one build, merge or clean; a second one waits for the first."""
    state = state_dir(out)
    try:
        state.mkdir(parents=True, exist_ok=True)
        fd = os.open(state / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except (OSError, ValueError) as exc:
        raise OutputDirError(f"cannot lock output folder {out} ({getattr(exc, 'strerror', None) or exc})",
                             f"make {state} writable, or pass another --out") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another build is publishing to {out}; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        if not (state / LEDGER).exists():
            _write_ledger(out, read_ledger(out))
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def new_staging(out: Path) -> Path:
    run = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    _record(out, staging_add=run)  # recorded before it exists: a killed build's run is tidied
    path = state_dir(out) / STAGING / run
    path.mkdir(parents=True)
    return path


def remove_tree(path: Path) -> bool:
    """Remove a folder or file this tool made; False (not an exception) when some of it stays."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return True
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT/SIGTERM until the block ends, so a build never stops between switch and tidy-up."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# An interrupt is recorded here by the task's signal handler before it is raised: Python drops a
# KeyboardInterrupt raised inside a weakref callback or a __del__ ("Exception ignored in
# WeakIdKeyDictionary"), and then a build would go on to publish and exit 0. The record survives;
# check_interrupted() raises it again where a build must not go on (stage boundaries, publishing).
_interrupts: list[str] = []


def record_interrupt(signum, frame) -> None:
    """Signal handler for SIGINT/SIGTERM: note the signal, then raise as Python's own handler does."""
    name = signal.Signals(signum).name
    _interrupts.append(name)
    raise KeyboardInterrupt(name)


def interrupted() -> str | None:
    """The first interrupt recorded since reset_interrupts(), or None."""
    return _interrupts[0] if _interrupts else None


def reset_interrupts() -> None:
    _interrupts.clear()


def check_interrupted() -> None:
    """Raise KeyboardInterrupt when an interrupt was recorded, even one whose exception was lost."""
    if _interrupts:
        raise KeyboardInterrupt(_interrupts[0])


def _kill_point(n: int) -> None:
    """Test hook: die here, as `kill -9` would, when ARRCOC_TEST_KILL_AT names this point."""
    if os.environ.get(KILL_AT_ENV) == str(n):
        os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------- reading safely


def safe_relative(rel, what: str, error=OutputDirError) -> str:
    """A manifest's path: a relative, normalised path of plain components (no '..', no '.',
    nothing absolute, no NUL; 1024 characters at most, 255 bytes a component), or `error`."""
    parts = rel.split("/") if isinstance(rel, str) and len(rel) <= 1024 else []
    if not parts or any(p in ("", ".", "..") or "\0" in p or len(p.encode()) > 255 for p in parts) \
            or rel.startswith("/"):
        raise error(f"{what} names {str(rel)[:80]!r}, not a path inside its folder",
                    "rebuild that folder with `invoke build` (its manifest was edited or damaged)")
    return rel


def open_regular(base: Path, rel: str):
    """Open base/rel for reading without following any link below base and without blocking on a
    FIFO. Returns (fd, size) for a regular file; raises OSError otherwise (errno ELOOP for a link,
    EINVAL for something that is not a regular file)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        *dirs, name = rel.split("/")
        for part in dirs:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    info = os.fstat(handle)
    if not stat.S_ISREG(info.st_mode):
        os.close(handle)
        raise OSError(errno.EINVAL, "not a regular file", str(base / rel))
    return handle, info.st_size


def why_not_regular(exc: OSError) -> str:
    return {errno.ENOENT: "missing", errno.ELOOP: "a link", errno.ENOTDIR: "a link or file on its way",
            errno.EINVAL: "not a regular file"}.get(exc.errno, exc.strerror or str(exc))


def check_file(base: Path, entry: dict) -> str | None:
    """None when base/entry['path'] is a regular file (no link on the way) with the manifest's
    bytes and sha256, else why not. The size is compared before a byte is read."""
    try:
        fd, size = open_regular(base, entry["path"])
    except OSError as exc:
        return why_not_regular(exc)
    with os.fdopen(fd, "rb") as f:
        if size != entry["bytes"]:
            return f"{size} bytes, the manifest says {entry['bytes']}"
        digest = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return None if digest.hexdigest() == entry["sha256"] else "sha256 differs"


def check_published(out: Path, base: Path, manifest: dict, targets: dict) -> None:
    """Before a task loads published artifacts (bench): each one's runtime is installed and each
    listed file is there with its size and sha256, else one line naming the fix (exit 2)."""
    from pipeline.errors import InputError

    for name, entry in manifest.get("targets", {}).items():
        if entry.get("status") != "published" or name not in targets:
            continue
        targets[name].require()  # a missing runtime: MissingExtraError with the install command
        for f in entry.get("files", []):
            why = check_file(base, f)
            if why:
                raise InputError(f"published file {f['path']} in {out} is {why}",
                                 f"run `invoke verify --out {out}`, then rebuild it: "
                                 f"invoke build --target {name} --out {out}")


def read_manifest(out: Path) -> dict:
    """The manifest published in `out` ({} when there is none), read from one pinned generation."""
    from pipeline.publishing.manifest import check_shape

    base = pinned(out) if out.is_dir() else out
    path = base / MANIFEST
    try:
        if not os.path.lexists(path) and not path.exists():
            return {}
        real = Path(os.path.realpath(path))
        if not real.is_relative_to(os.path.realpath(out)) and not real.is_relative_to(os.path.realpath(base)):
            raise OSError(errno.ELOOP, "a link out of the folder")
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            if info.st_size > MAX_MANIFEST_BYTES:
                raise OSError(errno.EFBIG, f"{info.st_size} bytes")
            data = json.loads(f.read())
    except (OSError, ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else (getattr(exc, "strerror", None) or exc)
        raise OutputDirError(
            f"{out / MANIFEST} cannot be read as a manifest ({why})",
            "rebuild that folder with `invoke build` (or restore its manifest.json)",
        ) from exc
    check_shape(data, out / MANIFEST)
    return data


# ---------------------------------------------------------------- writing


def write_json_atomic(path: Path, data: dict) -> None:
    def dump(f):
        f.write((json.dumps(data, indent=2, sort_keys=True) + "\n").encode())

    write_atomic(path, dump)


def write_atomic(path: Path, write) -> None:
    """Write `path` whole or not at all: `write(binary file)` fills a temporary file in the same
    folder, which replaces `path` with one rename once it is on disk. An error or a Ctrl-C while
    writing leaves the previous file (or none) and no temporary file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; what the tool writes is read by other tools and users
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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


def _switch(out: Path, gen: Path) -> None:
    """The one atomic step: OUT becomes the link to `gen`."""
    tmp = state_dir(out) / SWITCH
    tmp.unlink(missing_ok=True)
    os.symlink(f"{state_dir(out).name}/{GENERATIONS}/{gen.name}", tmp)
    if out.is_dir() and not out.is_symlink():
        os.rmdir(out)  # an empty folder named by --out (check_takeover allowed nothing else)
    os.replace(tmp, out)


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


def _generation_reached(link: Path, gens: dict) -> str | None:
    """The generation (of `gens`, keyed by identity) that `link` resolves to or into, else None."""
    try:
        path = Path(os.path.realpath(link))
    except (OSError, ValueError, RuntimeError):
        return None
    for folder in (path, *path.parents):
        try:
            info = os.stat(folder)
        except OSError:
            continue
        gen = gens.get((info.st_dev, info.st_ino))
        if gen is not None:
            return gen
    return None


def _read_link(link: Path) -> str | None:
    try:
        return os.readlink(link)
    except OSError:
        return None


def _shown_path(link: Path, out: Path) -> str:
    return os.path.relpath(link, out.parent)


def recover(out: Path, manifest: dict | None = None, log=print) -> None:
    """Before a build or merge does anything else (under build_lock): tidy what a killed one left,
    and take over a folder that holds a publish but is not this tool's link yet: a plain copy or
    CI part (the folder itself becomes a generation), or the older layout (.current)."""
    tidy(out, log)
    take_over(out, log)


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


def _old_layout_generation(out: Path) -> Path | None:
    """The current generation of an output folder of the older layout (OUT/.current ->
    .generations/<id>, public paths linked through it), or None."""
    try:
        target = os.readlink(out / ".current")
    except OSError:
        return None
    name = target[len(GENERATIONS) + 1:] if target.startswith(GENERATIONS + "/") else ""
    gen = out / GENERATIONS / name
    return gen if NAME.fullmatch(name) and gen.is_dir() and not gen.is_symlink() else None


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


def check_variant_files(out: Path, entry: dict, variant: str) -> None:
    """The variant's files are regular files with the manifest's bytes and sha256 (publish.check_file,
    as bench checks them): never run a file that changed."""
    from pipeline.publishing.publish import check_file

    for rel in entry["variants"][variant]["files"]:
        listed = next((f for f in entry.get("files", []) if f["path"] == rel), None)
        why = "not listed" if listed is None else check_file(out, listed)
        if why:
            raise InputError(f"published file {rel} is missing or differs from the manifest ({why})",
                             "run `invoke verify` to see what changed, then rebuild with `invoke build`")
