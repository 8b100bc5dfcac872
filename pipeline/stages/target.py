"""The contract every target implements. The pipeline core only ever talks to this.

A target is one module in `targets/`, registered in `targets/__init__.py`. It declares:
  name, summary       what it is called and what it makes
  extra, modules      the pip extra that installs its dependencies, and the modules it imports
  capability          what its verifier needs from the host ("cpu", "macOS", "NVIDIA GPU ...")
  depends_on / uses   targets whose staged outputs it needs (hard) or uses when present (soft)
and implements:
  check_options(options, cfg)        validate user options (e.g. --calibration) before ANY stage runs,
                                     so bad input fails the whole build with nothing published
  build(ctx)          -> [Variant]   write files into ctx.staging, one Variant per model flavour
  inspect(ctx, v)     -> [str]       structural checks that always run (I/O contract, op list...)
  load(ctx, v)        -> Runner      the artifact in its real runtime; raise HostCapabilityError
                                     when that runtime cannot exist on this host
  ahead(ctx)          -> [AheadJob]  optional: slow conversions of build() that depend only on what
                                     the build holds before any stage runs, made in the background
The core runs the held-out golden split through each Runner, computes parity metrics and holds
each variant to its Gate (parity and size) before anything is published.
"""
from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from arrcoc_edge.errors import ExportError, MissingExtraError, install_fix
from arrcoc_edge.relevance.signature import OUTPUT_NAMES
from arrcoc_edge.stages.parity import Gate

if TYPE_CHECKING:  # torch lives behind these: a published model runs without it (arrcoc_edge.load)
    from arrcoc_edge.relevance.checkpoint import LoadedCheckpoint
    from arrcoc_edge.stages.export import ExportedProgramFile
    from arrcoc_edge.stages.golden import GoldenSet, GoldenSplit

Arrays = dict[str, np.ndarray]


@dataclass
class Variant:
    """One flavour of a target's artifact (e.g. fp32, int8) and the gate it is held to."""

    name: str
    files: list[Path]
    gate: Gate
    size_budget: int  # bytes, for this variant's files
    primary: bool = False
    topk_dtype: str = "int64"
    info: dict = field(default_factory=dict)  # recorded in the manifest (quantisation, delegation...)
    metrics: dict = field(default_factory=dict)  # extra measured numbers the gate may judge
    # What parity is measured against: by default the eager float32 outputs of the golden set.
    # A target may compare with another runtime instead (the browser vs Python onnxruntime).
    reference: Callable[[GoldenSplit], Arrays] | None = None
    reference_name: str = "eager PyTorch float32"

    @property
    def bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files)


@dataclass
class Runner:
    """An artifact loaded in a runtime: `run` maps input arrays to output arrays."""

    run: Callable[[Arrays], Arrays]
    runtime: str  # e.g. "onnxruntime 1.31.1 (CPUExecutionProvider)"
    authoritative: bool = True  # False: a reference check, not the real runtime; stays unverified
    max_batch: int = 8
    reason: str | None = None  # why it is not authoritative
    close: Callable[[], None] = lambda: None
    # Optional: many batches in one call (a runtime whose start-up is slow: an emulated process
    # per model, not per batch). run_split uses it when present.
    run_many: Callable[[list[Arrays]], list[Arrays]] | None = None
    facts: dict = field(default_factory=dict)  # what the runtime reported of itself (recorded)
    # The model file's own inputs and outputs as the runtime read them from it: name -> dims, an
    # int or None for a dynamic one (onnxruntime's session metadata). None: the runtime exposes
    # none, and declared_io() asks the model by one call instead.
    io: dict[str, list] | None = None


@dataclass
class BuildContext:
    checkpoint: LoadedCheckpoint
    program: ExportedProgramFile
    golden: GoldenSet
    staging: Path  # this target's own staging folder: write artifacts here
    upstream: dict  # name -> StageResult of targets built earlier in this run
    log: Callable[[str], None]
    options: dict = field(default_factory=dict)  # user options, e.g. {"calibration_dir": Path}
    # what the stage keeps open while its variants are verified (kept()); run_stage closes it
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _kept: dict = field(default_factory=dict)
    target: str = ""  # the stage's target name, which its progress lines start with

    def counter(self, what: str, total: int):
        """A progress.Counter for a step of the stage that takes more than a few seconds: each
        advance() shows `[target] what: done/total (elapsed)` (in place on a terminal)."""
        from arrcoc_edge.stages.progress import Counter

        return Counter(self.log, f"[{self.target}] {what}" if self.target else what, total)

    @property
    def config(self):
        return self.checkpoint.config

    def kept(self, key: str, make: Callable[[], Any]) -> Any:
        """The stage's one `make()` for `key`, a context manager made on first use and shared by
        every variant of the stage (an emulator process that is slow to start), closed when the
        stage's verification ends. Safe from side_by_side's threads, each keeping its own keys
        (a dict's and a deque's single operations are atomic)."""
        if key not in self._kept:
            self._kept[key] = self.resources.enter_context(make())
            self.resources.callback(self._kept.pop, key, None)
        return self._kept[key]

    def side_by_side(self, work: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """Each key's `work()` at the same time, on that key's own thread of the stage; the results in
        `work`'s order, after every one has ended (the first exception raised, if any).

        For the emulated ISAs: each emulator is one single-threaded process, so two CPU models side
        by side take both cores. One thread per key for the whole stage, not one per call: an
        emulator process (kept()) is tied to the thread that started it (subproc.popen's
        PR_SET_PDEATHSIG), so every request to it comes from that thread while the stage lasts."""
        from concurrent.futures import ThreadPoolExecutor, wait

        if len(work) < 2:
            return {key: run() for key, run in work.items()}
        pools = {key: self.kept(f"thread {key}", lambda key=key: ThreadPoolExecutor(1, thread_name_prefix=key[:20]))
                 for key in work}  # made before the emulators the work keeps: closed after them
        futures = {key: pools[key].submit(run) for key, run in work.items()}
        wait(futures.values())  # none still runs when one's exception ends the stage
        return {key: future.result() for key, future in futures.items()}


@dataclass(frozen=True)
class AheadJob:
    """A conversion a stage's build() will ask the conversion cache for, which depends only on what
    the build holds before its stages run (the checkpoint, its export, the golden set's calibration
    rows, the MiniLM snapshot): building/ahead.py makes it in a background process while earlier
    stages build, and the stage finds the entry made. `function` ("module:function") is called there
    as function(dest=<a scratch folder>, log=<a callable>, **arguments) and must reach the very
    conversion build() makes (the same kind, inputs and tools: the same key), typically by being the
    function build() calls. arguments: JSON (arrays go in a file under the ctx.staging ahead() got).
    seconds: what the conversion takes alone on one core (a measured guess): the longest start
    first, so that none is left to the end, when the stages that need it are waiting."""

    kind: str  # the conversion's kind in the cache, for the log
    function: str
    arguments: dict = field(default_factory=dict)
    seconds: float = 10.0


class Target:
    name: str = ""
    summary: str = ""
    extra: str | None = None
    modules: tuple[str, ...] = ()
    capability: str = "cpu"
    depends_on: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    notes: str = ""  # shown in the build table (e.g. "deprecated upstream")

    # What the published files need to run here (published_runner, query_encoder): None means
    # `modules`. Narrower for targets whose artifacts run on the inference install (no torch, no onnx).
    runtime_modules: tuple[str, ...] | None = None
    runtime_extra: str | None = None  # the extra that installs runtime_modules (None: `extra`)

    def missing_modules(self) -> list[str]:
        return [m for m in self.modules if importlib.util.find_spec(m.split(".")[0]) is None]

    def missing_runtime_modules(self) -> list[str]:
        wanted = self.modules if self.runtime_modules is None else self.runtime_modules
        return [m for m in wanted if importlib.util.find_spec(m.split(".")[0]) is None]

    def require(self) -> None:
        missing = self.missing_modules()
        if missing:
            raise MissingExtraError(f"target '{self.name}' needs {', '.join(missing)}, which is not installed",
                                    install_fix(self.extra or "build"))

    def check_options(self, options: dict, config) -> None:
        """Raise InputError for bad user options; runs before any stage of the build."""

    def write_places(self) -> list[tuple[str, Path]]:
        """Folders this target writes into besides --out, each with the setting that names it
        (e.g. an app folder): outputs_guard refuses one inside a publish before the build starts."""
        return []

    def build(self, ctx: BuildContext) -> list[Variant]:
        raise NotImplementedError

    def ahead(self, ctx: BuildContext) -> list[AheadJob]:
        """Optional: the conversions of build() to make ahead, in the background (AheadJob). `ctx`
        has no upstream stages yet; its staging folder is shared by every target's jobs (name files
        after the target). A job build() turns out not to need costs background time only."""
        return []

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        return []

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        raise NotImplementedError

    def other_isas(self, ctx: BuildContext, variant: Variant) -> dict[str, Callable[[], Runner]]:
        """Optional: instruction sets other than this host's whose kernels `variant` also runs on
        (the phones' arm64, emulated), each a label -> a loader of the artifact there. The core runs
        the same held-out split through each and holds it to the variant's gate; a loader or run
        raising HostCapabilityError is recorded as not measured, with its reason."""
        return {}

    def published_runner(self, out: Path, entry: dict, variant: str, threads: int | None = None,
                         model: bytes | None = None) -> Runner | None:
        """Optional: published variant `variant` (its files listed in `entry`, under `out`) loaded in
        this target's real runtime, for `invoke predict` and `arrcoc_edge.load`. None: no runtime for it
        in this process. threads: the runtime's intra-op threads (None: its default); a runtime whose
        pool is process-wide and cannot be resized safely (ExecuTorch's XNNPACK) keeps its own.
        model: the variant's first file's bytes, already checked against the manifest's sha256: when
        given, the runtime loads these bytes and never re-opens the file (None: read the path)."""
        return None

    def query_encoder(self, out: Path, entry: dict) -> Callable[[str], np.ndarray] | None:
        """Optional: this target's published query encoder (files listed in `entry`, under `out`),
        loaded once: a callable text -> float32 [1, D], for `invoke predict --query` and
        `Model.predict(photo, "a sentence")`, with a close() that frees it. None: no encoder."""
        return None

    def encode_query(self, out: Path, entry: dict, text: str) -> np.ndarray | None:
        """`text` as the checkpoint's query, float32 [1, D], through query_encoder (None: no encoder)."""
        encoder = self.query_encoder(out, entry)
        return None if encoder is None else encoder(text)

    def bench_cases(self, out: Path, entry: dict) -> list:
        """Optional: `arrcoc_edge.frontends.bench.BenchCase`s for `invoke bench`, built from this target's
        published files in `out` (`entry` is its manifest entry). The harness times every
        target's cases side by side, interleaved, on the same real inputs."""
        return []


def expect_file(path: Path, what: str) -> Path:
    if not path.is_file() or path.stat().st_size == 0:
        raise ExportError(f"{what} was not written ({path.name})", "run with --verbose to see the converter's output")
    return path


@dataclass
class BenchCase:
    runtime: str  # what the table shows, e.g. "onnxruntime int8 (1 thread)"
    run: Callable[[dict], Any]  # inputs {"image", "query"} -> anything
    threads: int | None  # 1 or None (the runtime's default)
    # run() returns its own milliseconds, measured where it ran (the page's performance.now()):
    # a browser call timed from Python would also count the automation round trip.
    self_timed: bool = False
    max_batch: int | None = None  # the largest batch the artifact takes (ExecuTorch plans memory for one)
    # The FP32 case this one is a variant of (its runtime label) and the target's one-line reason
    # why this variant can be slower than it: the bench prints that reason where it is.
    compare_to: str | None = None
    speed_note: str | None = None
    # False for a case that times a cold start (a page load), or whose run() makes its own untimed
    # call right before the timed one (the browser: one page round trip for both)
    warm_call: bool = True


def declared_io(runner: Runner, grid: int, query_dim: int) -> dict[str, list]:
    """The model's own I/O shapes: what its runtime read from the file (Runner.io), else the
    output shapes of one call on a 16*grid square photo and a query of query_dim (the batch
    dimension reported as dynamic). A call the model refuses declares only the image input."""
    if runner.io is not None:
        return runner.io
    side = 16 * grid
    query = np.zeros((1, query_dim), np.float32)
    query[0, 0] = 1.0
    try:
        outs = runner.run({"image": np.full((1, side, side, 3), 128, np.uint8), "query": query})
    except Exception:  # noqa: BLE001 - the runtime's own error type: the model does not take this query
        return {"image": [None, None, None, 3]}
    found = {name: [None, *np.shape(value)[1:]] for name, value in outs.items()}
    return {"image": [None, None, None, 3], "query": [None, query_dim], **found}


def run_split(runner: Runner, split: GoldenSplit) -> dict[str, np.ndarray]:
    """Run a split through a runner: the first sample alone (dynamic batch), the rest in batches
    of one photo size (the crops together, each whole photo alone)."""
    parts: dict[str, list] = {n: [] for n in OUTPUT_NAMES}
    runs = split.runs(runner.max_batch)
    if runner.run_many:
        outs = runner.run_many([split.inputs(start, stop) for start, stop in runs])
    else:  # one batch at a time: only one batch's inputs in memory (a 12 MP photo is 36 MB)
        outs = (runner.run(split.inputs(start, stop)) for start, stop in runs)
    for out in outs:
        for name in OUTPUT_NAMES:
            parts[name].append(np.asarray(out[name]))
    return {n: np.concatenate(p) for n, p in parts.items()}
