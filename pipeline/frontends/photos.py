"""What the Python API accepts as a photo: files, PIL images and arrays checked and decoded as the
model takes them, folders listed, files decoded on a thread pool ahead of the runtime, a progress bar."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from arrcoc_edge.errors import ArrcocError, InputError
from arrcoc_edge.stages.golden import check_photo_size, decode_image, load_photo

# Threads decoding photos for predict_many while the runtime runs (Pillow's JPEG decoder releases the GIL):
# one per core, at least 2 so decoding overlaps the runtime even on one core; 0 decodes in the
# caller's thread, one photo after another (what `invoke bench` runs as the route before issue 42).
DECODE_THREADS = max(2, min(8, os.cpu_count() or 2))

def photo_pixels(photo) -> tuple[np.ndarray, Path | None]:
    """(uint8 [H, W, 3], its path or None): a file decoded as `invoke predict` decodes it
    (arrcoc_edge.stages.golden.load_photo), a PIL image decoded the same way (EXIF orientation when it
    carries one), an array taken as RGB pixels exactly as given (no orientation: it has no EXIF)."""
    if isinstance(photo, np.ndarray):
        if photo.dtype != np.uint8 or photo.ndim != 3 or photo.shape[2] != 3:
            raise InputError(f"a photo array is {photo.dtype} {list(photo.shape)}, not uint8 [H, W, 3]",
                             "pass RGB pixels as numpy uint8 [height, width, 3] (drop alpha: a[..., :3])")
        check_photo_size(photo.shape[0], photo.shape[1], f"photo array {list(photo.shape)}")
        return photo, None
    if isinstance(photo, (str, os.PathLike)):
        return _file_pixels(Path(os.fspath(photo))), Path(os.path.abspath(os.fspath(photo)))
    from PIL import Image

    if isinstance(photo, Image.Image):
        return _image_pixels(photo), None
    raise InputError(f"a photo is a file path, a PIL.Image or a uint8 array [H, W, 3], not {type(photo).__name__}",
                     "pass one of those")


def _file_pixels(path: Path) -> np.ndarray:
    if not str(path).strip() or not path.is_file():
        raise InputError(f"photo {str(path)!r} is not a file{_kind(path)}", "pass the path of an existing photo file")
    return load_photo(path)


def _kind(path: Path) -> str:
    """What a path that is no regular file is, for its refusal: ' (a FIFO)', ' (a device)'..."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ""
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a folder" if stat.S_ISDIR(mode) else "")
    return f" ({kind})" if kind else ""


def _image_pixels(image) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    what = f"PIL image {image.mode} {image.width}x{image.height}"
    try:
        return decode_image(image, what)
    except (Image.DecompressionBombError, UnidentifiedImageError, OSError, ValueError) as exc:
        raise InputError(f"{what}: cannot be decoded ({exc.__class__.__name__})",
                         "pass an image whose file is still open and readable (or the file's path)") from exc


def photo_list(photos):
    """predict_many's photos as a sequence: a folder (str or path) is its photo files in name order
    (as `arrcoc-edge predict --image FOLDER` takes it), one file is itself; a missing one says so."""
    if not isinstance(photos, (str, os.PathLike)):
        return photos
    path = Path(os.path.abspath(os.fspath(photos)))
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputError(f"photos {os.fspath(photos)!r}: {path} does not exist",
                         "pass a folder of photos, a photo file, or a list of them")
    from arrcoc_edge.frontends.batch import folder_photos

    found = folder_photos(path)
    if not found:
        raise InputError(f"no photo files in {path} (.jpg, .png, .webp...)", "pass a folder that holds photos")
    return found


def decoded_photos(photos: Iterable, limit: int) -> Iterator[tuple[object, object]]:
    """(photo, (pixels, source)) or (photo, InputError), in the photos' order. They are decoded on a
    pool of DECODE_THREADS threads (Pillow releases the GIL while it decodes), so the next batch is
    decoded while the runtime runs this one; at most limit + DECODE_THREADS photos are held decoded
    ahead (bounded memory). A Ctrl-C reaches the caller's thread as before; the pool's queued work
    is dropped and a running decode ends on its own."""
    import collections
    from concurrent.futures import ThreadPoolExecutor

    def decode(photo):
        try:
            return photo_pixels(photo)
        except ArrcocError as exc:
            return exc

    if DECODE_THREADS == 0:
        yield from ((photo, decode(photo)) for photo in photos)
        return
    ahead = limit + DECODE_THREADS
    pool = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="arrcoc-decode")
    pending: collections.deque = collections.deque()
    try:
        for photo in photos:
            pending.append((photo, pool.submit(decode, photo)))
            if len(pending) >= ahead:
                first, job = pending.popleft()
                yield first, job.result()
        while pending:
            first, job = pending.popleft()
            yield first, job.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------- progress


class progress_bar:
    """`with progress_bar(show, photos) as advance:` a rich progress bar on stderr (transient),
    or a no-op when not shown. Lines printed meanwhile on a terminal stdout appear above it."""

    def __init__(self, show: bool, photos):
        self.show, self.total = show, len(photos) if hasattr(photos, "__len__") else None

    def __enter__(self):
        if not self.show:
            return lambda: None
        import sys

        try:  # rich comes with the build extra; the inference install shows a plain line instead
            import rich  # noqa: F401
        except ImportError:  # (on a terminal stdout the result lines themselves show the progress)
            self.show = False
            if sys.stdout.isatty():
                return lambda: None
            self.bar = PlainProgress(self.total)
            return self.bar.advance
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("photos"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            console=Console(file=sys.stderr, soft_wrap=True), transient=True,
                            redirect_stdout=sys.stdout.isatty(), redirect_stderr=True)
        self.bar.start()
        task = self.bar.add_task("photos", total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc):
        if self.show or isinstance(getattr(self, "bar", None), PlainProgress):
            self.bar.stop()
        return False


class PlainProgress:
    """"photos 12/1000" rewritten in place on stderr (a terminal), at most 5 times a second, and
    cleared at the end: the progress line of an install without rich."""

    def __init__(self, total: int | None):
        self.total, self.done, self.shown = total, 0, 0.0

    def advance(self) -> None:
        import sys
        import time

        self.done += 1
        now = time.monotonic()
        if now - self.shown >= 0.2:
            self.shown = now
            sys.stderr.write(f"\rphotos {self.done}/{self.total if self.total is not None else '?'}")
            sys.stderr.flush()

    def stop(self) -> None:
        import sys

        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
