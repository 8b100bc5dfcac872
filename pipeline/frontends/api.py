"""The Python API: `from arrcoc_edge import build, load` (docs/python.md).

    result = build(targets="onnx", out="artifacts")      # what `invoke build` does, typed result
    model = load("artifacts")                            # what `invoke predict` loads, kept open
    p = model.predict("photo.jpg", "something red")  # p.relevance, p.top_k, p.weights, p.to_json()

`invoke build` and `invoke predict` call these same functions (pipeline/frontends/cli.py, pipeline/frontends/batch.py),
so a number printed by the command line and one returned here cannot drift apart. Errors are the
project's typed errors (arrcoc_edge.errors, exported at the top: `arrcoc_edge.InputError`...), never
SystemExit; nothing is printed on stdout unless progress=True (or verbose=True) asks for it.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from arrcoc_edge.errors import ArrcocError, InputError

# arrcoc_edge.frontends.api is imported on the first use of build or load, never by `import arrcoc_edge`: these
# module imports (torch among them) cost nothing on each call, where an import statement would
from arrcoc_edge.frontends import predict as pr
from arrcoc_edge.frontends import queries
from arrcoc_edge.frontends.photos import decoded_photos, photo_list, photo_pixels, progress_bar
from arrcoc_edge.stages.golden import load_photo

TEXT_CACHE = 64  # sentences whose query vectors a Model keeps (a notebook asks the same few again)


# ---------------------------------------------------------------- build


@dataclass(frozen=True)
class TargetResult:
    """One target of a build: status "published", "unverified", "failed", "skipped" or "not
    published"; the reason when it is not published; each variant's status (verified, ...)."""

    status: str
    reason: str | None
    variants: dict[str, str]
    seconds: float


@dataclass(frozen=True)
class BuildResult:
    ok: bool  # every target published (or skipped as not applicable / not installed under "all")
    out: Path
    targets: dict[str, TargetResult]
    manifest: dict  # the published manifest.json after this build ({} when nothing was ever published)
    seconds: float
    exported_cache_hit: bool


def build(targets: str = "all", out: str | os.PathLike | None = None, checkpoint: str | os.PathLike | None = None, *,
          calibration: str | os.PathLike | None = None, calibration_queries: str | os.PathLike | None = None, grid: int | None = None, top_k: int | None = None,
          base_model: str | os.PathLike | None = None, progress: bool = False, verbose: bool = False) -> BuildResult:
    """`invoke build` as a function: every option of the command, as keyword arguments. Returns a
    typed result (a failed gate is result.ok False, not an exception); bad options raise InputError
    (or another ArrcocError) before anything is built. progress=True shows the live progress.
    It runs in a child process (frontends/child_build.py): the caller's fds 1 and 2, signal
    handlers and threads stay its own, and any thread may call it."""
    from arrcoc_edge.frontends import child_build
    from arrcoc_edge.publishing.reading import read_manifest

    options = {"calibration_dir": calibration, "calibration_queries": calibration_queries, "grid": grid, "top_k": top_k, "base_model": base_model}
    path = _path_argument
    request = {"targets": None if targets is None else str(targets), "checkpoint": path(checkpoint), "out": path(out),
               "options": {k: path(v) for k, v in options.items() if v is not None},
               "verbose": bool(verbose), "progress": bool(progress)}
    raw = child_build.run(request, bool(progress), bool(verbose))["result"]
    root = Path(raw["out"])
    return BuildResult(raw["ok"], root, {name: TargetResult(**t) for name, t in raw["targets"].items()},
                       read_manifest(root), raw["seconds"], raw["exported_cache_hit"])


def _path_argument(value):
    """A path argument as the text the child gets: str, bytes and os.PathLike (of either) decoded as
    the file system would (b"/abs/path" is that path, never the folder "b'/abs/path'"); None stays."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, os.PathLike)):
        return os.fsdecode(value)
    from arrcoc_edge.errors import InputError

    raise InputError(f"a path argument is {type(value).__name__} {value!r}, not a path",
                     "pass a str, bytes or pathlib.Path")


def build_stages(targets, checkpoint, out, options: dict, verbose: bool, show: bool = True):
    """(arrcoc_edge.building.build.BuildResult, output folder): the options checked (as `invoke build` checks
    them), then the build with third-party output in OUT's build.log. `invoke build` prints its
    table from this; build() turns it into the typed BuildResult."""
    from arrcoc_edge import targets as target_table
    from arrcoc_edge.building.build import build_inputs, run_build, write_places
    from arrcoc_edge.frontends import options as opts
    from arrcoc_edge.frontends.console import build_console
    from arrcoc_edge.frontends.options import DEFAULT_CHECKPOINT, DEFAULT_OUT
    from arrcoc_edge.publishing.folder_state import state_dir
    from arrcoc_edge.publishing.outputs_guard import check_out_folder

    names = opts.target_names(None if targets is None else str(targets))
    requested = target_table.resolve(names)
    options = dict(options)
    for key, name in (("calibration_dir", "calibration"), ("base_model", "base-model")):
        if options.get(key) is not None:
            options[key] = opts.existing_folder(name, os.fspath(options[key]))
    if options.get("calibration_queries") is not None:  # the whole file checked now: a bad one builds nothing
        options["calibration_queries"] = opts.sentence_file("calibration-queries", os.fspath(options["calibration_queries"]))
    options.update(grid=opts.optional_positive("grid", options.get("grid")),
                   top_k=opts.optional_positive("top-k", options.get("top_k")))
    root = opts.out_folder(None if out is None else os.fspath(out), DEFAULT_OUT)
    ckpt = opts.checkpoint_path(None if checkpoint is None else os.fspath(checkpoint), DEFAULT_CHECKPOINT)
    # a refused --out writes nothing: checked before the console creates the state and its build.log
    check_out_folder(root, build_inputs(ckpt, options), write_places(requested, target_table.TARGETS))
    with build_console(state_dir(root), verbose, show) as console:
        result = run_build(requested, target_table.TARGETS, ckpt, root, log=console.log, strict=names != ["all"],
                           options=options, ahead=True)
    return result, root


# ---------------------------------------------------------------- load and predict


class Prediction:
    """One photo and query through a published artifact.

    relevance: float32 [G, G] (row-major cells over the whole photo); top_k: [(row, col), ...] the
    selected cells, most relevant first (the JSON's topk_indices as cells); k: how many (K, the
    number the JSON calls "top_k"); weights: {"information", "perspectival", "participatory"};
    evidence: {"top_mean", "mean", "min", "max"}, how strongly the query matched before the
    per-photo normalisation (the model's `evidence` output); confidence: the probability that what
    the query asks for is in the photo, from the folder's calibration.json (None when the folder has
    none: `verdict` says so); stands_out: confidence >= 0.5 (None without a confidence);
    verdict: the answer in a few words, as `invoke predict` prints it;
    image_size: (height, width) of the photo as decoded; source: the photo's path when it was a file.
    to_json() is the dict `invoke predict --json` writes; heatmap() the picture `--heatmap` saves."""

    __slots__ = ("record", "source", "_pixels")

    def __init__(self, record, source: Path | None, pixels):
        self.record = record  # arrcoc_edge.frontends.predict.Prediction: the flat outputs the JSON holds
        self.source = source
        self._pixels = pixels  # the decoded photo, or its path (decoded again by heatmap())

    grid = property(lambda self: self.record.grid)
    k = property(lambda self: self.record.top_k)  # K: len(top_k), the JSON's "top_k"
    image_size = property(lambda self: tuple(self.record.image_size))
    runtime = property(lambda self: self.record.runtime)
    milliseconds = property(lambda self: self.record.milliseconds)  # the runtime call's wall time
    # relevance is normalised per photo (its top cell is always 1); these say whether what the
    # query asks for is in the photo (the evidence output through the folder's calibration)
    confidence = property(lambda self: self.record.confidence)
    stands_out = property(lambda self: self.record.stands_out)
    verdict = property(lambda self: pr.verdict(self.record))

    @property
    def evidence(self) -> dict[str, float] | None:
        from arrcoc_edge.relevance.signature import EVIDENCE_NAMES

        found = self.record.evidence
        return None if found is None else {name: float(v) for name, v in zip(EVIDENCE_NAMES, found)}

    @property
    def relevance(self) -> np.ndarray:
        return self.record.relevance.reshape(self.record.grid, self.record.grid)

    @property
    def top_k(self) -> list[tuple[int, int]]:
        r = self.record  # most relevant first; ties keep the model's order (as `invoke predict` prints)
        return [divmod(i, r.grid) for i in sorted(r.topk_indices.tolist(), key=lambda i: -r.relevance[i])]

    @property
    def weights(self) -> dict[str, float]:
        from arrcoc_edge.relevance.signature import WAYS_OF_KNOWING

        return {name: float(w) for name, w in zip(WAYS_OF_KNOWING, self.record.weights)}

    def to_json(self) -> dict:
        return self.record.to_json()

    def heatmap(self):
        """PIL.Image: the photo with the relevance map, the top-K cells outlined and a legend."""
        from arrcoc_edge.publishing.overlay import heatmap

        pixels = load_photo(self._pixels) if isinstance(self._pixels, Path) else self._pixels
        r = self.record
        return heatmap(pixels, r.relevance, r.topk_indices, r.grid, r.top_k)

    def __repr__(self) -> str:
        h, w = self.image_size
        return (f"Prediction({self.source or 'array'}, {h} x {w} px, grid {self.grid}, top cell {self.top_k[0]}, "
                f"{self.verdict}, runtime {self.runtime!r})")


def load(folder: str | os.PathLike, runtime: str | None = None, *, threads: int | None = None,
         verbose: bool = False, sentences: bool = False) -> "Model":
    """A published folder's runtime, loaded once and kept open: the runtime `invoke predict
    --runtime` names (None: the fastest published, by the folder's bench.json). Its files are
    checked against the manifest's sha256 first. threads: the runtime's intra-op threads (None:
    its default; ExecuTorch's process-wide pool keeps its own). sentences=True: a typed query is
    coming, so the sentence encoder loads on a thread meanwhile (its files' check and session
    overlap the model's), instead of on the first sentence."""
    from arrcoc_edge import targets as target_table
    from arrcoc_edge.publishing.folder_state import output_path, pinned
    from arrcoc_edge.publishing.reading import read_manifest

    if runtime is not None and not isinstance(runtime, str):
        raise InputError(f"runtime={runtime!r} is not a name", "pass runtime='onnx' (or None for the fastest)")
    check_threads(threads)
    if folder is None:
        raise InputError("load() needs the published folder", "pass load('artifacts') (or its path)")
    root = output_path(_path_argument(folder), release_ok=True)  # only read: a kept release too
    _check_exists(root)
    base = pinned(root)  # one generation: a build publishing meanwhile changes nothing read here
    manifest = read_manifest(base)
    if not manifest.get("targets"):
        raise InputError(f"nothing is published in {root}",
                         "build first: arrcoc_edge.build(targets='onnx', out=...) or `invoke build --target onnx`")
    if not manifest.get("checkpoint", {}).get("model"):
        raise InputError(f"{root}'s manifest.json names no checkpoint.model (grid, top_k, query_dim)",
                         "rebuild that folder with `invoke build`")
    calibration = pr.read_calibration(base, root)  # checked before anything loads
    encoder = _encoder_ahead(manifest["checkpoint"]["model"]["query_dim"], base, manifest, target_table.TARGETS,
                             verbose) if sentences else None
    try:
        with pr.third_party_quiet(verbose):
            name, runner = pr.open_runtime(base, manifest, target_table.TARGETS, runtime, shown=root, threads=threads)
    except BaseException:
        if encoder is not None:
            _close_ahead(encoder)
        raise
    model = Model(root, base, manifest, target_table.TARGETS, name, runner, verbose, calibration)
    model._encoder_load = encoder
    return model


def _encoder_ahead(dim: int, base: Path, manifest: dict, targets: dict, verbose: bool):
    """queries.sentence_encoder started on a thread: a Future whose result() waits and re-raises."""
    from concurrent.futures import ThreadPoolExecutor

    def run():
        with pr.third_party_quiet(verbose):
            return queries.sentence_encoder(dim, base, manifest, targets)

    pool = ThreadPoolExecutor(1, thread_name_prefix="arrcoc-sentence-encoder")
    future = pool.submit(run)
    pool.shutdown(wait=False)  # the one job still runs; nothing else is queued
    return future


def _close_ahead(future) -> None:
    """Wait for an encoder loading ahead and free it (or drop what it raised)."""
    if future.exception() is None:
        getattr(future.result(), "close", lambda: None)()


def _check_exists(root: Path) -> None:
    """A folder that is not there is said as such, not as an empty publish."""
    if not os.path.lexists(root):
        raise InputError(f"folder {root} does not exist",
                         "pass the folder a build published into (arrcoc_edge.build(..., out=FOLDER) or "
                         "`arrcoc-edge build --out FOLDER`)")
    if not root.is_dir():
        raise InputError(f"{root} is not a folder", "pass the folder a build published into")


MAX_THREADS = 4 * (os.cpu_count() or 1)  # more intra-op threads than this only oversubscribe the cores


def check_threads(threads) -> None:
    """load(threads=N): None or a whole number 1..MAX_THREADS, else one typed line."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise InputError(f"threads={threads!r} is not a whole number from 1 to {MAX_THREADS} (4 per core here)",
                         "pass threads=1 (or None for the runtime's default)")


class Model:
    """A published runtime kept open: predict() costs the model's time plus a small overhead
    (`invoke bench` measures it). Close it (or use `with load(...) as model:`) to free the runtime."""

    def __init__(self, folder: Path, base: Path, manifest: dict, targets: dict, name: str, runner, verbose: bool,
                 calibration=None):
        settings = manifest["checkpoint"]["model"]
        self.folder, self.manifest, self.name = folder, manifest, name
        self.grid, self.top_k, self.query_dim = settings["grid"], settings["top_k"], settings["query_dim"]
        self.runtime = f"{name} ({runner.runtime})"  # as the JSON's "runtime" says it
        self._base, self._targets, self._runner, self._verbose = base, targets, runner, verbose
        self._texts: dict[str, np.ndarray] = {}
        self.calibration = calibration  # the folder's calibration.json (None: it has none)
        self._encoder = None  # the sentence encoder, loaded on the first sentence (queries.sentence_encoder)
        self._encoder_load = None  # or on a thread since load(..., sentences=True): a Future
        self._quiet_calls = True  # the first call of a runtime prints its own notices (XNNPACK's cpuinfo)
        # one Model may be shared between threads: its runtime calls and text cache take turns (not
        # every runtime's session is safe to run from two threads at once; ONNX Runtime's is)
        self._lock = threading.RLock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        """Free the runtime and the sentence encoder: a later predict raises InputError."""
        with self._lock:  # not under a call another thread is making
            runner, encoder, self._runner, self._encoder = self._runner, self._encoder, None, None
            loading, self._encoder_load = self._encoder_load, None
            self._texts.clear()
        if loading is not None:
            _close_ahead(loading)
        if runner is not None:
            runner.close()
        getattr(encoder, "close", lambda: None)()

    def _open_runner(self):
        if self._runner is None:
            raise InputError(f"{self!r} was closed", "load the folder again: model = arrcoc_edge.load(folder)")
        return self._runner

    def __repr__(self) -> str:
        closed = ", closed" if self._runner is None else ""
        return f"Model({str(self.folder)!r}, runtime={self.runtime!r}, grid={self.grid}, top_k={self.top_k}{closed})"

    def predict(self, photo, query) -> Prediction:
        """photo: a file path, a PIL.Image or a uint8 array [H, W, 3] (RGB, used as given); query:
        a sentence or a float array [D]. Raises InputError (an ArrcocError) for a bad one.
        Written straight through (no batch bookkeeping): `invoke bench` holds its cost beside the
        bare runtime call to 10% on a 16*G photo, whose call takes 0.25 ms."""
        pixels, source = photo_pixels(photo)
        inputs = {"image": pixels[None], "query": self._query_row(query)}
        outs, ms = self._call(inputs)
        relevance, weights = outs["relevance"][0], outs["weights"][0]
        found = outs.get("evidence")
        record = pr.Prediction(self.grid, self.top_k, pixels.shape[:2], self.runtime, relevance,
                               outs["topk_indices"][0], weights, ms, None if found is None else found[0], self.calibration)
        if not math.isfinite(float(relevance.sum()) + float(weights.sum()) + (0.0 if found is None else float(found.sum()))):
            pr.check_finite(record)
        return Prediction(record, source, source or pixels)

    def _predict_one(self, photo, query, timed: bool = False) -> Prediction:
        """timed: the median of arrcoc_edge.frontends.predict.TIMED_CALLS warm calls, as `invoke predict` prints."""
        pixels, source = photo_pixels(photo)
        inputs = {"image": pixels[None], "query": self._query_row(query)}
        if timed:
            with self._lock, pr.third_party_quiet(self._verbose):
                outs, ms = pr.timed(self._open_runner(), inputs)
        else:
            outs, ms = self._call(inputs)
        record = pr.predictions(outs, [pixels.shape[:2]], self.grid, self.top_k, self.runtime, ms,
                                calibration=self.calibration)[0]
        return Prediction(record, source, source or pixels)

    def predict_many(self, photos: Iterable, query, batch_size: int = 8, progress: bool = False,
                     on_error: Callable[[object, ArrcocError], None] | None = None) -> Iterator[Prediction]:
        """Predictions in the photos' order, consecutive photos of one size run together in batches
        of up to batch_size (and the artifact's own limit). A photo that cannot be read raises its
        InputError once the photos before it are yielded, or, with on_error, is passed to
        on_error(photo, error) and skipped. progress=True: a progress bar on stderr. photos: paths,
        PIL images or arrays, a uint8 array [N, H, W, 3], or one folder (its photo files, by name).
        Files are decoded on DECODE_THREADS threads while the runtime runs (decoded_photos)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size={batch_size!r} is not a whole number >= 1", "pass batch_size=8 (or 1)")
        vector = self._query_row(query)
        limit = min(batch_size, self._open_runner().max_batch or batch_size)
        photos = photo_list(photos)
        if isinstance(photos, np.ndarray) and photos.ndim == 4:
            yield from self._array_batches(photos, vector, limit, progress)
            return
        with progress_bar(progress, photos) as advance:
            batch: list = []
            for photo, decoded in decoded_photos(photos, limit):
                if isinstance(decoded, ArrcocError):
                    yield from self._run_batch(batch, vector, on_error, advance)
                    batch = []
                    if on_error is None:
                        raise decoded
                    on_error(photo, decoded)
                    advance()
                    continue
                pixels, source = decoded
                if batch and (len(batch) == limit or pixels.shape != batch[0][1].shape):
                    yield from self._run_batch(batch, vector, on_error, advance)
                    batch = []
                batch.append((photo, pixels, source))
            yield from self._run_batch(batch, vector, on_error, advance)

    def _array_batches(self, photos: np.ndarray, vector: np.ndarray, limit: int, progress: bool) -> Iterator[Prediction]:
        """N photos of one size in one uint8 array [N, H, W, 3]: each batch is a slice of it (no
        copy when the array is contiguous, as an app's frame buffer is)."""
        if len(photos):
            photo_pixels(photos[0])  # dtype, channels and size, checked once for all
        with progress_bar(progress, photos) as advance:
            for start in range(0, len(photos), limit):
                images = photos[start:start + limit]
                yield from self._run_batch([(None, pixels, None) for pixels in images], vector, None, advance, images)

    def _run_batch(self, batch: list, vector: np.ndarray, on_error, advance, images=None) -> Iterator[Prediction]:
        """One runtime call for photos of one size; a row with non-finite outputs is that photo's
        error (raised, or given to on_error)."""
        if not batch:
            return
        if images is None:
            images = batch[0][1][None] if len(batch) == 1 else np.stack([pixels for _, pixels, _ in batch])
        outs, ms = self._call({"image": images, "query": np.repeat(vector, len(batch), axis=0)})
        rows = pr.predictions(outs, [pixels.shape[:2] for _, pixels, _ in batch], self.grid, self.top_k,
                              self.runtime, ms / len(batch), checked=False, calibration=self.calibration)
        finite = pr.finite_rows(outs)
        for (photo, pixels, source), record, ok in zip(batch, rows, finite):
            if not ok:
                try:
                    pr.check_finite(record)
                except ArrcocError as exc:
                    if on_error is None:
                        raise
                    on_error(photo, exc)
                    advance()
                    continue
            advance()
            yield Prediction(record, source, source or pixels)

    def _call(self, inputs: dict) -> tuple[dict, float]:
        """One runtime call and its wall time in ms; the first one with third-party output silenced."""
        with self._lock:
            return self._locked_call(inputs)

    def _locked_call(self, inputs: dict) -> tuple[dict, float]:
        runner = self._open_runner()
        if self._quiet_calls:
            with pr.third_party_quiet(self._verbose):
                outs, ms = self._timed_call(inputs)
            self._quiet_calls = False
            return outs, ms
        start = time.perf_counter()
        outs = runner.run(inputs)
        return outs, (time.perf_counter() - start) * 1000.0

    def _timed_call(self, inputs: dict) -> tuple[dict, float]:
        start = time.perf_counter()
        outs = self._open_runner().run(inputs)
        return outs, (time.perf_counter() - start) * 1000.0

    def query_vector(self, query) -> np.ndarray:
        """The query as predict takes it, float32 [D]: a sentence through the encoder this checkpoint
        has (as `arrcoc-edge predict --query`), or a float array [D] (any float dtype, cast)."""
        return self._query_row(query)[0]

    def _query_row(self, query) -> np.ndarray:
        """The query as the model takes it, float32 [1, D]."""
        if type(query) is np.ndarray and query.dtype == np.float32 and query.shape == (self.query_dim,) and \
                np.abs(query).max() <= queries.MAX_QUERY_ABS:
            return query[None]  # the common case in one reduction (NaN compares False: it is checked below)
        if isinstance(query, str):
            return self._text_vector(query)
        if isinstance(query, np.ndarray) or hasattr(query, "__array__") or isinstance(query, (list, tuple)):
            return self._array_vector(np.asarray(query))
        raise InputError(f"a query is a sentence or a float array [{self.query_dim}], not {type(query).__name__}",
                         "pass text, e.g. 'something red', or a numpy float32 vector")

    def _array_vector(self, vec: np.ndarray) -> np.ndarray:
        if vec.dtype.kind != "f" or vec.shape != (self.query_dim,):
            raise InputError(f"the query array is {vec.dtype} {list(vec.shape)}, this checkpoint takes a float "
                             f"array [{self.query_dim}]",
                             f"pass a float vector of shape [{self.query_dim}] (the checkpoint's query width)")
        vec = vec.astype(np.float32, copy=False)
        queries.check_query_values(vec, "the query array")
        return vec[None]

    def _text_vector(self, text: str) -> np.ndarray:
        with self._lock:
            return self._cached_text_vector(text)

    def _cached_text_vector(self, text: str) -> np.ndarray:
        vector = self._texts.get(text)
        if vector is None:
            queries.check_query_text(text, "the query")
            self._open_runner()
            with pr.third_party_quiet(self._verbose):
                if self._encoder is None and self._encoder_load is not None:  # load(..., sentences=True)
                    loading, self._encoder_load = self._encoder_load, None
                    self._encoder = loading.result()
                if self._encoder is None:  # loaded once: a new sentence then costs milliseconds
                    self._encoder = queries.sentence_encoder(self.query_dim, self._base, self.manifest, self._targets)
                vector = self._encoder(text)
            if len(self._texts) >= TEXT_CACHE:
                self._texts.pop(next(iter(self._texts)))
            self._texts[text] = vector
        return vector
