"""Where a task may write: never over one of its own inputs, never inside a published or state folder.

Judged by file-system identity (st_dev, st_ino), never by the spelling of a path: `./p.jpg`, `a/../p.jpg`,
a doubled slash, a hard link, a symlink, `/proc/self/fd/N` and a bind mount all reach the same inode,
and only the inode says what would be overwritten. Every check here only reads: a refused output
leaves nothing behind (no state folder, no log).

A file or folder is protected when it is (by identity) one of a known output folder (the folder
itself, the generation its link names, anything in its `.NAME.arrcoc-edge` state), or, for a
folder, when it shows what it is wherever it is mounted: an output folder (its state's ledger
beside it), a state folder (it holds the ledger and the lock or generations), or a published
folder (it holds this tool's manifest).
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from arrcoc_edge.publishing import folder_state, takeover

# Entries of one output folder's state compared by identity. A state holds a few hundred files per
# generation (the web target's are the most); past this many the walk stops (the markers still hold).
MAX_STATE_ENTRIES = 100_000
MAX_ANCESTORS = 1_000  # folders checked above one path, mount sources included (PATH_MAX allows ~2000)
MAX_MOUNTINFO_BYTES = 16 * 1024 * 1024  # a host with thousands of mounts has a few MB


def identity(path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of what `path` reaches (links followed), or None when nothing is there."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    return info.st_dev, info.st_ino


def input_named(path: Path, inputs: list[Path]) -> Path | None:
    """The input that `path` is (the same inode, however either is named), or None."""
    mine = identity(path)
    return next((given for given in inputs if mine is not None and identity(given) == mine), None)


def ancestors(path: Path, follow: bool = True) -> list[Path]:
    """The folders `path` would be written into, nearest first: as spelled (made absolute, `..`
    taken as written), with the links of its folders followed, with a link at `path` itself
    followed too (unless not `follow`: an output folder that is the tool's own link), and, past a
    bind mount, the folders its source lies in (a mount's `..` is the mount point's parent, never
    the source's), without repeats."""
    spelled = Path(os.path.abspath(path))
    todo = [*spelled.parents, *Path(os.path.realpath(spelled.parent)).joinpath(spelled.name).parents,
            *(Path(os.path.realpath(spelled)).parents if follow else ())]
    found: list[Path] = []
    table = mounts()
    while todo and len(found) < MAX_ANCESTORS:
        p = todo.pop(0)
        if p in found:
            continue
        found.append(p)
        source = mount_source(p, table)
        if source is not None and source != p:
            todo[:0] = [source, *source.parents]
    return found


def mount_source(folder: Path, mounts: list[list[str]]) -> Path | None:
    """The folder a bind mount at `folder` shows (its `root` field in /proc/self/mountinfo, joined
    to where that file system's own root is mounted), or None when `folder` is no mount point or
    its source is not mounted here. os.path.ismount cannot tell: a bind mount within one file
    system has the device of its parent."""
    at = [m for m in mounts if m[4] == str(folder)]
    if not at:
        return None
    device, root = at[-1][2], at[-1][3]  # the last mounted there is the one seen
    bases = [m[4] for m in mounts if m[2] == device and m[3] == "/"]
    return Path(bases[0]) / root.lstrip("/") if bases and root != "/" else None


def mounts() -> list[list[str]]:
    """/proc/self/mountinfo as fields (id, parent, device, root, mount point, ...), paths unescaped;
    empty where there is none (not Linux)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read(MAX_MOUNTINFO_BYTES).splitlines()
    except OSError:
        return []
    octal = re.compile(r"\\([0-7]{3})")  # a space in a path is written \040
    fields = [[octal.sub(lambda m: chr(int(m.group(1), 8)), x) for x in line.split(" ")] for line in lines]
    return [f for f in fields if len(f) > 4]


def known_identities(roots: list[Path]) -> dict[tuple[int, int], Path]:
    """Identity -> output folder, for every folder and file of the output folders `roots`: the
    folder, what its link names, and everything in its state (links not followed)."""
    known = {}
    for root in roots:
        state = folder_state.state_dir(root)
        for path in (root, state):
            if identity(path) is not None:
                known.setdefault(identity(path), root)
        if not state.is_dir() or state.is_symlink():
            continue
        seen = 0
        for folder, dirs, files in os.walk(state):
            for name in dirs + files:
                seen += 1
                mine = identity(Path(folder) / name)
                if mine is not None:
                    known.setdefault(mine, root)
            if seen > MAX_STATE_ENTRIES:
                break
    return known


def marked(folder: Path) -> Path | None:
    """The output folder `folder` belongs to, told by what it holds or what lies beside it: an
    output folder (its ledger beside it), a state folder (named so, or holding a ledger and its
    lock or generations), or a published folder (holding this tool's manifest: a generation,
    however mounted, or a copy)."""
    name = folder.name
    if name.startswith(".") and name.endswith(folder_state.STATE_SUFFIX) and len(name) > len(folder_state.STATE_SUFFIX) + 1:
        return folder.parent / name[1:-len(folder_state.STATE_SUFFIX)]
    if _regular(folder_state.state_dir(folder) / folder_state.LEDGER):
        return folder
    if _regular(folder / folder_state.LEDGER) and any(os.path.lexists(folder / n) for n in (folder_state.LOCK, folder_state.GENERATIONS)):
        return folder  # a state folder (a user's own ledger.json alone is not one)
    if _regular(folder / folder_state.MANIFEST) and _is_manifest(folder / folder_state.MANIFEST):
        return folder
    return None


def folder_holding(path: Path, roots: list[Path]) -> Path | None:
    """The output folder that a write to `path` would land in (see the module's rule), or None."""
    known = known_identities(roots)
    if identity(path) in known:  # a published file itself, reached by a hard link or a link
        return known[identity(path)]
    for folder in ancestors(path):
        found = known.get(identity(folder)) or (marked(folder) if folder.is_dir() else None)
        if found is not None:
            return found
    return None


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def _is_manifest(path: Path) -> bool:
    """A JSON object with `checkpoint` and `targets` objects, as every build and merge writes it."""
    try:
        data = folder_state.read_state_json(path, folder_state.MAX_MANIFEST_BYTES, lambda p, why: ValueError(why))
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("checkpoint"), dict) and isinstance(data.get("targets"), dict)

def build_places() -> list[tuple[str, Path]]:
    """The folders every build writes into besides --out, each with the setting that names it:
    the temporary folder and the user's cache (the targets add theirs: Target.write_places)."""
    import tempfile

    from arrcoc_edge.stages.private_cache import CacheUnusable, cache_base

    resolve_settings()
    places = [("the temporary folder (TMPDIR)", Path(tempfile.gettempdir()))]
    try:
        places.append(("the cache (XDG_CACHE_HOME)", cache_base()))
    except CacheUnusable:  # no cache at all: nothing is written there
        pass
    return places


def resolve_settings() -> None:
    """TMPDIR and XDG_CACHE_HOME set to the paths the kernel resolves them to, for this process and
    its children: what check_places judges is then what the tool and the third-party libraries
    (which read these variables themselves) write into. `LINK/..` spelled in them is lexically one
    folder and really another (LINK's target's parent)."""
    import tempfile

    for name in ("TMPDIR", "XDG_CACHE_HOME"):
        value = os.environ.get(name, "")
        if os.path.isabs(value) and os.path.isdir(value):
            os.environ[name] = os.path.realpath(value)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    tempfile.tempdir = os.path.realpath(tempfile.gettempdir())


def check_places(out: Path, places: list[tuple[str, Path]]) -> None:
    """Every folder a task writes into besides its output (an app folder, the cache, the temporary
    folder: `places`, each with the setting that names it) refused with one line when it is or lies
    inside a publish, a kept release (a renamed or copied output folder) or a state, or inside
    `out` itself, however it is spelled or mounted: the one rule --out, --json and --heatmap keep."""
    from arrcoc_edge.errors import OutputDirError

    ours = {identity(p) for p in (out, folder_state.state_dir(out))} - {None}
    spelled = {Path(os.path.abspath(p)) for p in (out, folder_state.state_dir(out))}
    for what, place in places:
        real = Path(os.path.realpath(place))  # the kernel's path: `LINK/..` is LINK's target's parent
        chain = [Path(os.path.abspath(place)), *ancestors(place), real, *ancestors(real)]
        inside = next((marked(f) for f in chain if f.is_dir() and marked(f)), None)
        if inside is None and (ours & {identity(f) for f in chain} or spelled & set(chain)):
            inside = out
        if inside is not None:
            raise OutputDirError(f"{what} {place} lies inside the output folder {inside} (or its state)",
                                 "point it at a folder outside every published folder and kept release")


def refuse_published(what: str, place: Path) -> None:
    """check_places' rule for one folder, judged again right before it is written (an app folder
    opened and locked: pass /proc/self/fd/N, what the kernel opened): OutputDirError when it is or
    lies inside a publish, a kept release or a state."""
    from arrcoc_edge.errors import OutputDirError

    real = Path(os.path.realpath(place))
    inside = next((marked(f) for f in [real, *ancestors(real)] if f.is_dir() and marked(f)), None)
    if inside is not None:
        raise OutputDirError(f"{what} {real} lies inside the output folder {inside} (or its state)",
                             "point it at a folder outside every published folder and kept release")


def check_out_folder(out: Path, inputs: list[Path], places: list[tuple[str, Path]] = ()) -> None:
    """The output folder of build or merge (as folder_state.output_path resolved it), refused with one
    line before anything is written (no state folder, no build.log): it may not lie inside a
    publish or a state, be a bind mount of one, be or lie inside an input folder, or hold an
    input (`inputs`: the checkpoint, calibration images, the parts); then takeover.check_takeover.
    `places`: the other folders the task writes into (check_places)."""
    from arrcoc_edge.errors import OutputDirError

    check_places(out, places)

    source = mount_source(out, mounts())
    inside = next((marked(f) for f in ([source, *source.parents] if source else []) if marked(f)), None)
    inside = inside or next((marked(f) for f in ancestors(out, follow=False) if f.is_dir() and marked(f)), None)
    if inside is not None:
        raise OutputDirError(f"--out {out} lies inside the output folder {inside} (or its state)",
                             "pass a new folder with --out, outside every published folder")
    mine = {identity(p) for p in (out, folder_state.state_dir(out))} - {None}
    chain = {identity(f) for f in [out, *ancestors(out, follow=False)]} - {None}
    for given in inputs:
        theirs = {identity(given)} | {identity(f) for f in ancestors(given)}
        if identity(given) in chain or mine & theirs:
            raise OutputDirError(f"--out {out} and the input {given} overlap (one is, or holds, the other)",
                                 "pass a new folder with --out, outside every input")
    takeover.check_takeover(out)
