"""`invoke predict` on many photos: a folder, several --image, several --query, one model load.

Each (photo, query) goes through arrcoc_edge.frontends.api's Model.predict_many, the call a Python caller makes:
one line per prediction on stdout, one JSON line each to --json (a .jsonl file, written whole at the
end), heatmaps into the folder --heatmap names. An unreadable photo is one line on stderr, skipped
and counted; any such photo makes the exit code 2. Nothing is written over a file the user did not
name: a heatmap whose file exists already is refused before the model runs.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from arrcoc_edge.frontends import options as opts
from arrcoc_edge.frontends import predict as pr
from arrcoc_edge.errors import InputError
from arrcoc_edge.publishing.outputs_guard import folder_holding

BATCH = 8  # photos of one size per runtime call (the artifacts' own limit is smaller for some)
HEATMAP_SUFFIX = ".heatmap.png"


def photo_inputs(values: list[str]) -> tuple[list[Path], bool]:
    """(photo files, several): each --image a file or a folder; a folder gives its files whose
    extension Pillow reads as an image (not its subfolders, not hidden files), in name order."""
    files, several = [], len(values) > 1
    for value in values:
        if os.path.isdir(os.path.abspath(str(value))) and str(value).strip():
            folder = opts.existing_folder("image", value)
            found = folder_photos(folder)
            if not found:
                raise InputError(f"--image {str(value)!r}: no photo files in {folder} (.jpg, .png, .webp...)",
                                 "pass a folder that holds photos, or photo files")
            files += found
            several = True
        else:
            files.append(opts.existing_file("image", value))
    return files, several


def folder_photos(folder: Path) -> list[Path]:
    """The folder's entries named as photos, in name order: every one but a subfolder, so that one
    that is no photo file (a FIFO, a link to a device, a link loop) is read, refused and counted
    as a skipped photo, never silently left out."""
    from PIL import Image

    Image.init()
    known = Image.registered_extensions()
    with os.scandir(folder) as entries:  # cheap checks (name, extension) before any stat
        names = sorted(e.name for e in entries if not e.name.startswith(".")
                       and os.path.splitext(e.name)[1].lower() in known and not _folder(e))
    return [folder / name for name in names]


def _folder(entry: os.DirEntry) -> bool:
    """A subfolder (through a link too); an entry that cannot be examined is not (kept, it fails as
    one skipped photo)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def heatmap_folder(value: str, photos: list[Path], inputs: list[Path], root: Path, n_queries: int,
                   given: list[str]) -> tuple[Path, dict]:
    """--heatmap with several photos or queries: a folder (made if missing; its parent must exist),
    never an input folder or inside an output folder. Returns it and (photo index, query index) ->
    heatmap path; every such file must be new (none is overwritten: the user did not name them)."""
    if not str(value).strip():
        raise InputError("--heatmap is empty", "leave --heatmap out, or name a folder for the heatmaps")
    folder = Path(os.path.abspath(value))
    if os.path.lexists(folder) and not folder.is_dir():
        raise InputError(f"--heatmap {value!r} is a file: with several photos or queries it names a folder",
                         "pass --heatmap with a new or empty folder, e.g. --heatmap heatmaps")
    if not folder.parent.is_dir():
        raise InputError(f"--heatmap {value!r}: folder {folder.parent} does not exist",
                         f"create it first (mkdir -p {folder.parent})")
    if not os.path.lexists(folder):  # made after the model runs: its parent must take it now
        pr._probe_folder("heatmap", folder.parent)
    inside = folder_holding(folder / "heatmap.png", [root])  # by identity, as --json and a single --heatmap
    if inside:
        raise InputError(f"--heatmap {value!r} is inside the output folder {inside}",
                         "pass --heatmap with a folder outside it (the tool replaces a publish only whole)")
    for g in given:
        if folder.is_dir() and os.path.isdir(g) and os.path.samefile(folder, g):
            raise InputError(f"--heatmap {value!r} is the photo folder {g}: its heatmaps would be read as photos",
                             "pass --heatmap with another folder")
    if folder.is_dir():
        sweep_staging(folder)  # a killed run's partial heatmaps: never linked to their names
    names = {}
    for i, photo in enumerate(photos):
        for j in range(n_queries):
            names[i, j] = folder / (photo.name + (f".q{j + 1}" if n_queries > 1 else "") + HEATMAP_SUFFIX)
    _check_new(names, photos, value)
    if folder.is_dir():
        pr._probe_folder("heatmap", folder)
    return folder, names


def _check_new(names: dict, photos: list[Path], value: str) -> None:
    seen = {}
    for (i, _), path in names.items():
        if path in seen and photos[seen[path]] != photos[i]:
            raise InputError(f"photos {photos[seen[path]]} and {photos[i]} share the name {photos[i].name}: "
                             f"their heatmaps would be one file", "pass photos with distinct file names")
        seen[path] = i
        if os.path.lexists(path):
            raise InputError(f"--heatmap {value!r} holds {path.name} already; it is not overwritten",
                             "pass --heatmap with a new or empty folder")


def run(model, photos: list[Path], queries: list[tuple[str, str, object]], json_file: Path | None,
        heatmaps: tuple[Path, dict] | None, every_cell: bool = False) -> int:
    """Every photo with every query (queries: (JSON key, label, query)); returns the exit code.
    The files come first: a reader of stdout that leaves early (`| head`) stops the lines, not the
    JSON or the heatmaps (the exit is then 141, once they are written). A run that does not finish
    (Ctrl-C, a full disk) removes the heatmaps it wrote and writes no JSON: it changed nothing."""
    failed: dict[Path, str] = {}
    count, started = 0, time.perf_counter() - process_age()  # the rate counts what the user waited for
    show = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    say = StdoutLines()

    def skip(photo, error) -> None:
        if photo not in failed:
            failed[photo] = error.one_line()
            print(failed[photo], file=sys.stderr, flush=True)

    def predict_all(out) -> None:
        nonlocal count
        index = {photo: i for i, photo in enumerate(photos)}
        for j, (key, label, query) in enumerate(queries):
            for p in model.predict_many(photos, query, BATCH, progress=show, on_error=skip):
                count += 1
                if out is not None:
                    out.write((json.dumps({"photo": str(p.source), key: label, **p.to_json()}) + "\n").encode())
                if writer is not None:
                    writer.submit(p, heatmaps[1][index[p.source], j])
                say(line(p, label if len(queries) > 1 else None))
                if every_cell:
                    say(cells_line(p))
        if writer is not None:
            writer.finish()  # every heatmap on disk before the JSON is renamed into place

    writer = HeatmapWriter(heatmaps[0]) if heatmaps else None
    try:
        if json_file is not None:
            pr.save_whole(json_file, predict_all, "json")
        else:
            predict_all(None)
    except BaseException:
        if writer is not None:
            writer.abandon()
        raise
    seconds = time.perf_counter() - started
    say(f"{count} prediction{'s' if count != 1 else ''} of {len(photos)} photo{'s' if len(photos) != 1 else ''} "
        f"x {len(queries)} quer{'ies' if len(queries) != 1 else 'y'} in {seconds:.1f} s "
        f"({count / max(seconds, 1e-9):.1f} photos/s, start-up included), runtime {model.runtime}")
    if json_file is not None:
        say(f"json: {json_file}")
    if heatmaps:
        say(f"heatmaps: {heatmaps[0]}")
    if failed:
        print(f"error: {len(failed)} of {len(photos)} photos could not be read and were skipped -> fix: "
              "see the lines above for each one (convert or remove those files)", file=sys.stderr)
        return 2
    say.check()
    return 0


class StdoutLines:
    """print() for the result lines that outlives the reader: once stdout's pipe is closed
    (`| head`), the lines go nowhere and the run goes on to write its files; check() then ends it
    as a closed pipe does (BrokenPipeError: exit 141, quietly)."""

    def __init__(self):
        self.closed = False

    def __call__(self, text: str) -> None:
        if self.closed:
            return
        try:
            print(text, flush=False)
        except BrokenPipeError:
            self.closed = True
            null = os.open(os.devnull, os.O_WRONLY)  # what is left in the buffer goes nowhere
            os.dup2(null, sys.stdout.fileno())
            os.close(null)

    def check(self) -> None:
        if self.closed:
            raise BrokenPipeError("stdout was closed by its reader")


HEATMAP_THREADS = max(1, min(4, os.cpu_count() or 1))  # Pillow draws and encodes PNG without the GIL


class HeatmapWriter:
    """Heatmaps drawn and saved on HEATMAP_THREADS threads while the model goes on (a PNG costs more
    than a prediction). They are saved into a hidden staging folder of this run inside the heatmap
    folder (locked while the run lives) and linked to their names by finish(), never over a file:
    a run killed before (SIGKILL, the OOM killer) leaves only its staging folder, which the next
    run removes (sweep_staging), so its partial heatmaps never block a rerun. abandon() removes
    exactly the files this run linked (and the folder, when it made it and it is empty again)."""

    def __init__(self, folder: Path):
        import fcntl
        import tempfile
        import threading
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self.folder, self.made = folder, not os.path.lexists(folder)
        folder.mkdir(exist_ok=True)
        self.staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=folder))
        self.lock_fd = os.open(self.staging / STAGING_LOCK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        self.pool = ThreadPoolExecutor(HEATMAP_THREADS, thread_name_prefix="arrcoc-heatmap")
        self.pending, self.staged, self.written, self.lock = deque(), [], {}, threading.Lock()

    def submit(self, p, path: Path) -> None:
        self.pending.append(self.pool.submit(self._save, p, path))
        while len(self.pending) > 2 * HEATMAP_THREADS:  # a bounded queue: photos are not all held
            self.pending.popleft().result()  # re-raises a failed save

    def _save(self, p, path: Path) -> None:
        picture = p.heatmap()
        staged = self.staging / path.name
        with open(staged, "xb") as f:  # the run's own folder (0700): nothing else is there
            picture.save(f, format="PNG", compress_level=HEATMAP_PNG_LEVEL)
        with self.lock:
            self.staged.append((staged, path))

    def finish(self) -> None:
        """Every heatmap saved, then linked to its name (refused, never replaced, if one appeared)."""
        while self.pending:
            self.pending.popleft().result()
        self.pool.shutdown()
        for staged, path in self.staged:
            try:
                os.link(staged, path)
            except FileExistsError:
                raise InputError(f"--heatmap {self.folder}: {path.name} appeared while the run went on; it is not "
                                 "overwritten", "pass --heatmap with a new or empty folder") from None
            st = os.lstat(path)
            self.written[path] = (st.st_dev, st.st_ino)
        self._drop_staging()

    def abandon(self) -> None:
        for job in self.pending:
            job.cancel()
        self.pool.shutdown(wait=True)  # a save under way ends (whole) before it is removed
        for path, identity in dict(self.written).items():
            try:
                st = os.lstat(path)
                if (st.st_dev, st.st_ino) == identity:
                    os.unlink(path)
            except OSError:
                pass
        self._drop_staging()
        if self.made:
            try:
                self.folder.rmdir()  # only when empty: nothing of anyone else's goes with it
            except OSError:
                pass

    def _drop_staging(self) -> None:
        import shutil

        if self.lock_fd is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            os.close(self.lock_fd)
            self.lock_fd = None


STAGING_PREFIX = ".arrcoc-heatmaps-"
STAGING_LOCK = ".lock"


def sweep_staging(folder: Path) -> int:
    """Remove the staging folders that killed runs left in the heatmap folder: this user's, whose
    lock nobody holds (a folder without its lock yet is left for FRESH_S, then taken as dead)."""
    import fcntl
    import shutil
    import stat

    from arrcoc_edge.publishing.user_files import FRESH_S

    removed = 0
    try:
        names = [n for n in os.listdir(folder) if n.startswith(STAGING_PREFIX)]
    except OSError:
        return 0
    for name in names:
        path = folder / name
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            try:
                fd = os.open(path / STAGING_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except FileNotFoundError:
                if time.time() - info.st_mtime < FRESH_S:
                    continue
                fd = None
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its run is alive
                finally:
                    os.close(fd)
            shutil.rmtree(path)
            removed += 1
        except OSError:
            continue
    return removed


HEATMAP_PNG_LEVEL = 1  # zlib level: a few percent larger files than the default 6, several times faster


def cells_line(p) -> str:
    """--all: every selected cell of one prediction, most relevant first, on one indented line."""
    order = sorted(p.record.topk_indices.tolist(), key=lambda i: -p.record.relevance[i])
    return "  top-{} cells (row, col: relevance): {}".format(
        p.k, " ".join(f"({i // p.grid},{i % p.grid}: {p.record.relevance[i]:.3f})" for i in order))


def process_age() -> float:
    """Seconds since this process started (Linux: /proc), so a printed rate includes Python's start,
    the imports and the model load; 0 where /proc is not there (the rate then starts at the call)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def line(p, query: str | None) -> str:
    """One prediction as one line: the photo, its size (height x width, as the JSON), whether
    anything stands out (with the confidence, or why there is none), the top cell and the three weights."""
    h, w = p.image_size
    (row, col), weights = p.top_k[0], p.weights
    asked = f", query {query!r}" if query is not None else ""
    return (f"{one_line_name(p.source)}: {h} x {w} px{asked}, {p.verdict}, "
            f"top cell ({row},{col}) {p.relevance[row, col]:.3f}, "
            + ", ".join(f"{k} {v:.3f}" for k, v in weights.items()))


def one_line_name(path) -> str:
    """A photo's path as it stays on one line: a character that breaks a line (a newline in a file
    name, a carriage return, U+2028) is written as its escape, as error lines write it."""
    text = str(path)
    return "".join(repr(c)[1:-1] if len(f"a{c}a".splitlines()) > 1 else c for c in text)
