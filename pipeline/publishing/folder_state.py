"""Where an output folder's things are, and the ledger of what the tool wrote there.

For an output folder OUT in a folder P: P/OUT is a link to P/.OUT.arrcoc-edge/.generations/<id>; the
state folder beside it holds the ledger, lock, generations, staging runs, caches and build.log
(publishing/publish.py describes the layout). Everything here reads or records; nothing removes.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
import tempfile
from pathlib import Path

from arrcoc_edge.errors import OutputDirError

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
CALIBRATION = "calibration.json"  # relevance/evidence.py CALIBRATION_FILE: the confidence calibration
WRITTEN_BESIDE = (MANIFEST, *REPORT_FILES, BENCH, CALIBRATION)  # files the tool writes into a generation
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
            raise OutputDirError(f"--out {value!r} is a kept release (generation {owner[1]} of {owner[0]}): the tool "
                                 "only reads it (verify, predict, serve), never writes into it or removes it",
                                 f"pass --out {owner[0]} to build or clean there (the release stays while this link "
                                 f"leads to it; delete the link to let the next build remove it), or copy the release "
                                 f"first (cp -rL {value} NEW) and pass --out NEW")
        if not os.path.lexists(path):  # `cp -r OUT DEST` or `mv OUT sub/v1`: OUT's relative link resolves nowhere there
            state = next(p for p in path.parts if p.endswith(STATE_SUFFIX))
            source = f"{state[1:-len(STATE_SUFFIX)]}/"  # the output folder the link was copied from
            raise OutputDirError(f"--out {value!r} is a copied or moved link to a build ({path}, which does not "
                                 "exist here), not the published files", f"copy the files it points at instead: "
                                 f"`rm {value} && cp -r PATH/{source} {value}` (the trailing slash follows the link), "
                                 "or make the link resolve with the `ln -sfn` command the build that kept it printed")
        inside = _inside_generation(value, path)
        if inside is not None:
            raise OutputDirError(f"--out {value!r} is the {path.name!r} folder inside a published folder",
                                 f"pass --out {inside} (the folder with manifest.json; predict's --runtime picks a target)")
        raise OutputDirError(f"--out {value!r} is inside an output folder's own state ({path})",
                             "pass the output folder itself (the name without the leading dot and suffix)")
    return path


def _inside_generation(value: str, path: Path) -> str | None:
    """The published folder as the user would name it, when `path` (value resolved) lies inside a
    generation (`--out artifacts/onnx`: artifacts' link led into it), else None."""
    parts = path.parts
    for i in range(1, len(parts) - 2):
        if parts[i] == GENERATIONS and parts[i - 1].endswith(STATE_SUFFIX) and GENERATION_NAME.fullmatch(parts[i + 1]):
            depth = len(parts) - (i + 2)  # components below the generation folder
            given = Path(value.rstrip("/") or "/")
            return str(given.parents[depth - 1]) if depth <= len(given.parents) else str(Path(*parts[:i + 2]))
    return None


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
    folder itself (a plain copy, a CI part). A kept release reads its generation's own folder, not
    through the link (which its owner may point elsewhere between two reads)."""
    gen = current_generation(folder)
    if gen is not None:
        return gen
    release = kept_release(folder) if folder.is_symlink() else None
    if release is not None:
        return state_dir(release[0]) / GENERATIONS / release[1]
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


def why_not_regular(exc: OSError) -> str:
    return {errno.ENOENT: "missing", errno.ELOOP: "a link", errno.ENOTDIR: "a link or file on its way",
            errno.EINVAL: "not a regular file"}.get(exc.errno, exc.strerror or str(exc))


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


def _switch(out: Path, gen: Path) -> None:
    """The one atomic step: OUT becomes the link to `gen`."""
    tmp = state_dir(out) / SWITCH
    tmp.unlink(missing_ok=True)
    os.symlink(f"{state_dir(out).name}/{GENERATIONS}/{gen.name}", tmp)
    if out.is_dir() and not out.is_symlink():
        os.rmdir(out)  # an empty folder named by --out (check_takeover allowed nothing else)
    os.replace(tmp, out)
