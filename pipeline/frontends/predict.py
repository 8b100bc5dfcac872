"""`invoke predict`: one whole photo and a query through a published artifact in its real runtime.

The photo goes in as decoded (arrcoc_edge.stages.golden.load_photo: EXIF orientation applied, RGB, alpha
dropped, no crop, no resize): the artifact does the reference's resize itself. The query is a
sentence (when this checkpoint's width has a query encoder here) or a float32 .npy of shape [D].
Published files are checked against the manifest's sha256 before they are loaded.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import InputError, install_fix
from arrcoc_edge.frontends.redirect import fds_to
from arrcoc_edge.publishing.reading import check_variant_files
from arrcoc_edge.relevance.evidence import CALIBRATION_FILE, NO_CALIBRATION, STANDS_OUT, Calibration
from arrcoc_edge.relevance.evidence import verdict as said
from arrcoc_edge.relevance.signature import EVIDENCE_NAMES, WAYS_OF_KNOWING
from arrcoc_edge.stages.target import Target

# When no bench.json says otherwise: the order `invoke bench` measured on CPU at batch 1
# (onnxruntime FP32 fastest; see the README's benchmark table).
PREFERRED = ("onnx", "onnx-int8", "executorch", "ptl")
TIMED_CALLS = 5  # after one untimed warm-up call: the median is what a running app sees per photo
NO_EVIDENCE = "this folder's model has no evidence output (published by an older build)"


@dataclass
class Prediction:
    grid: int
    top_k: int
    image_size: tuple[int, int]  # (H, W)
    runtime: str
    relevance: np.ndarray  # [G*G]
    topk_indices: np.ndarray  # [K]
    weights: np.ndarray  # [3]
    milliseconds: float  # median of TIMED_CALLS warm calls
    # [4] in EVIDENCE_NAMES order: how strongly the query matched, before any min-max (None: a
    # model published before the output existed)
    evidence: np.ndarray | None = None
    calibration: Calibration | None = None  # the folder's calibration.json (None: it has none)

    @property
    def confidence(self) -> float | None:
        """The probability that what the query asks for is in the photo: the folder's calibration
        of the evidence. None when the folder has no calibration (or its model no evidence)."""
        if self.evidence is None or self.calibration is None:
            return None
        return float(self.calibration.confidence(self.evidence))

    @property
    def stands_out(self) -> bool | None:
        """confidence >= STANDS_OUT; None when there is no confidence."""
        value = self.confidence
        return None if value is None else value >= STANDS_OUT

    @property
    def unknown(self) -> str | None:
        """Why there is no confidence (None when there is one)."""
        if self.evidence is None:
            return NO_EVIDENCE
        return NO_CALIBRATION if self.calibration is None else None

    def to_json(self) -> dict:
        found = None if self.evidence is None else dict(zip(EVIDENCE_NAMES, (float(x) for x in self.evidence)))
        return {"grid": self.grid, "top_k": self.top_k, "image_size": list(self.image_size), "runtime": self.runtime,
                "relevance": [float(x) for x in self.relevance], "topk_indices": [int(i) for i in self.topk_indices],
                "weights": [float(w) for w in self.weights], "evidence": found,
                "confidence": self.confidence, "stands_out": self.stands_out, "verdict": verdict(self)}


def verdict(p: Prediction, asked: str = "") -> str:
    """The answer in a few words (arrcoc_edge.relevance.evidence.verdict), or why there is no
    confidence. asked: the query as the sentence names it (" for 'something red'"), or nothing."""
    return said(p.confidence, asked, p.unknown or NO_CALIBRATION)


def read_calibration(folder: Path, shown: Path | None = None) -> Calibration | None:
    """The published folder's calibration.json (None when it has none: published by an older
    build, or by a build without the calibration stage). A file there that is not a calibration
    is one InputError, never a made-up confidence."""
    from arrcoc_edge.publishing.folder_state import read_state_json

    shown_path = (shown or folder) / CALIBRATION_FILE
    fix = "rebuild that folder with `invoke build` (its calibration.json was edited or copied from another build)"
    data = read_state_json(folder / CALIBRATION_FILE, 1 << 20, lambda path, why: InputError(f"{shown_path} {why}", fix))
    if data is None:
        return None
    try:
        return Calibration.from_dict(data)
    except ValueError as exc:
        raise InputError(f"{shown_path} is not a calibration this version reads ({exc})", fix) from exc


def runnable(manifest: dict, targets: dict) -> dict[str, tuple[str, str]]:
    """Runtime name -> (target, variant) for every published variant this process can run.
    A target's name means its primary variant as the manifest declares it (never the first by
    name: `onnx-int8` is its INT8 model, not fp32-ort); `target:variant` names any variant."""
    from arrcoc_edge.publishing.manifest import primary_variant

    names = {}
    for name, entry in (manifest.get("targets") or {}).items():
        target = targets.get(name)
        if target is None or entry.get("status") != "published" or target.missing_runtime_modules():
            continue
        if type(target).published_runner is Target.published_runner:
            continue  # the target offers no runtime here (CoreML off macOS, TensorRT without a GPU)
        variants = [v for v, e in (entry.get("variants") or {}).items() if e.get("status") == "verified"]
        for variant in variants:
            names[f"{name}:{variant}"] = (name, variant)
        primary = primary_variant(entry)
        if primary in variants:
            names[name] = (name, primary)
    return names


def choose_runtime(requested: str | None, names: dict, out: Path, manifest: dict, targets: dict,
                   shown: Path | None = None) -> str:
    """The runtime to run: the one asked for, else the fastest by bench.json, else PREFERRED's
    order. `out` is the folder read (one pinned generation); `shown` the folder the user named,
    the only one a message names."""
    shown = shown or out
    _check_runs_here(requested, names, manifest, targets, shown)
    if not names:
        raise InputError(f"nothing published in {shown} runs in this process",
                         "run `invoke build --target onnx` (or executorch, ptl) first")
    if requested is not None:
        if requested not in names:
            target = targets.get(requested.split(":", 1)[0])
            missing = target is not None and target.missing_runtime_modules()
            fix = (f"install its runtime: {install_fix(target.runtime_extra or target.extra)}, or use one of: "
                   if missing else "use one of: ")
            raise InputError(_not_runnable(requested, manifest, targets, shown), fix + ", ".join(sorted(names)))
        return requested
    measured = _bench_order(out, names)
    return next((n for n in measured + list(PREFERRED) if n in names), sorted(names)[0])


def runs_elsewhere(target) -> bool:
    """A target whose artifacts run only on another kind of host (CoreML needs Apple's systems,
    TensorRT a supported NVIDIA GPU): no runtime in this process, and no pip install gives one.
    (The web page has no Python runtime either, but runs on this host, in a browser.)"""
    return type(target).published_runner is Target.published_runner and not target.capability.startswith("cpu")


def _check_runs_here(requested: str | None, names: dict, manifest: dict, targets: dict, shown: Path) -> None:
    """HostCapabilityError naming what the host needs, when the runtime asked for (or, with none
    asked for and nothing runnable, every target in the folder) runs only elsewhere."""
    from arrcoc_edge.errors import HostCapabilityError

    built = manifest.get("targets") or {}
    if requested is not None:
        asked = [requested.split(":", 1)[0]] if requested not in names else []
    else:
        asked = [] if names else list(built)
    asked = [n for n in asked if n in built and n in targets and runs_elsewhere(targets[n])
             and built[n].get("status") in ("published", "unverified")]
    if not asked:
        return
    needs = "; ".join(f"{n!r} needs {targets[n].capability.split(';')[0].strip()}" for n in asked)
    other = (f"or use one of: {', '.join(sorted(names))}" if names else
             "or build a runtime for this host: `invoke build --target onnx` (or executorch, ptl)")
    raise HostCapabilityError(f"{needs}: it has no runtime in this process ({shown}), whatever is installed",
                              f"run it on such a host, {other}")


def _not_runnable(requested: str, manifest: dict, targets: dict, shown: Path) -> str:
    """Why --runtime `requested` cannot run here, true to the manifest: not published, or
    published but with no runtime in a Python process (its summary says where it runs)."""
    name = requested.split(":", 1)[0]
    entry = (manifest.get("targets") or {}).get(name) or {}
    target = targets.get(name)
    if entry.get("status") != "published" or target is None:
        return f"runtime {requested!r} is not published in {shown}"
    if type(target).published_runner is Target.published_runner:
        return f"{name!r} is published in {shown} but has no runtime in Python ({target.summary})"
    if target.missing_runtime_modules():
        return f"{name!r} is published in {shown} but its runtime ({', '.join(target.missing_runtime_modules())}) is not installed"
    return f"{requested!r} is not a verified variant of {name!r} in {shown}"


def _bench_order(out: Path, names: dict) -> list[str]:
    """Runtime names by their batch-1 median in OUT/bench.json (this host's own measurement)."""
    from arrcoc_edge.publishing.folder_state import read_state_json

    try:  # a regular file of bounded size only: a FIFO or a link to /dev/zero here is no measurement
        data = read_state_json(out / "bench.json", 16 * 1024 * 1024, lambda path, why: ValueError(why))
    except ValueError:
        return []
    rows = data.get("rows") if isinstance(data, dict) else None
    best: dict[str, float] = {}
    for row in rows if isinstance(rows, list) else []:
        for name, ms in _row_times(row, names):
            best[name] = min(best.get(name, float("inf")), ms)
    return sorted(best, key=best.get)


def _row_times(row, names: dict) -> list[tuple[str, float]]:
    """(runtime name, batch-1 median ms) for one bench.json row; nothing for a row of another
    shape (the file is read like user input: a wrong type is skipped, never an internal error)."""
    if not isinstance(row, dict) or row.get("batch") != 1 or not isinstance(row.get("runtime"), str):
        return []
    try:
        ms = float(row["median_ms"])
    except (KeyError, TypeError, ValueError):
        return []
    label, found = row["runtime"], []
    for name, (target, variant) in names.items():
        if name == target and (label.startswith(f"onnxruntime {variant} ") if target.startswith("onnx")
                               else label.startswith(target.replace("ptl", "lite interpreter"))):
            found.append((name, ms))
    return found


def open_runtime(out: Path, manifest: dict, targets: dict, requested: str | None, shown: Path | None = None,
                 threads: int | None = None):
    """(runtime name, Runner): the runtime chosen (choose_runtime), its files checked against the
    manifest's sha256, loaded in its real runtime. `out`: the pinned generation read; `shown`: the
    folder the user named (for messages). The caller closes the runner."""
    names = runnable(manifest, targets)
    name = choose_runtime(requested, names, out, manifest, targets, shown)
    target, variant = names[name]
    return name, checked_runner(out, manifest, targets[target], variant, shown or out, threads)


def checked_runner(out: Path, manifest: dict, target: Target, variant: str, shown: Path,
                   threads: int | None = None):
    """The published variant's model loaded from bytes checked against the manifest's sha256,
    then held to the manifest's description of it (grid, top_k, query_dim): a manifest is a
    claim, the model file's own I/O is the truth. A file that is not a model, or a model other
    than the one described, is one InputError, never a wrong answer."""
    from arrcoc_edge.errors import ArrcocError, ExportError
    from arrcoc_edge.install import COMMAND
    from arrcoc_edge.publishing.reading import model_claim_problems
    from arrcoc_edge.stages.target import declared_io

    entry = manifest["targets"][target.name]
    checked = check_variant_files(out, entry, variant)  # the runtime gets these bytes, not the path
    rel = entry["variants"][variant]["files"][0]
    fix = (f"rebuild that folder with `{COMMAND} build --target {target.name} --out {shown}` (its manifest.json "
           "was edited, or copied from another build)")
    try:
        runner = target.published_runner(out, entry, variant, threads=threads, model=checked[0])
    except ExportError as exc:  # the runtime's own line names neither the file nor the folder
        raise InputError(f"{rel} in {shown} does not load as {target.name}'s {variant} model ({exc.problem})",
                         fix) from exc
    except ArrcocError:
        raise
    except Exception as exc:  # noqa: BLE001 - each runtime has its own error types for a file it cannot load
        why = (str(exc).strip().splitlines() or [""])[0][:160]
        raise InputError(f"{rel} in {shown} does not load as {target.name}'s {variant} model "
                         f"({type(exc).__name__}: {why})", fix) from exc
    settings = manifest["checkpoint"]["model"]
    problems = model_claim_problems(declared_io(runner, settings["grid"], settings["query_dim"]), settings)
    if problems:
        runner.close()
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"{rel} in {shown} is not the model its manifest describes: {problems[0]}{more}", fix)
    return runner


def predictions(outs: dict, sizes: list[tuple[int, int]], grid: int, top_k: int, runtime: str,
                ms: float, checked: bool = True, calibration: Calibration | None = None) -> list[Prediction]:
    """One Prediction per row of a batch's outputs (sizes: each photo's (H, W)), each checked
    (check_finite) unless the caller checks the rows itself (finite_rows)."""
    relevance, topk, weights = (np.asarray(outs[name]) for name in ("relevance", "topk_indices", "weights"))
    found_evidence = outs.get("evidence")
    rows = [None] * len(sizes) if found_evidence is None else np.asarray(found_evidence)
    found = [Prediction(grid, top_k, size, runtime, relevance[i], topk[i], weights[i], ms, rows[i], calibration)
             for i, size in enumerate(sizes)]
    if checked and not all(finite_rows(outs)):
        for p in found:
            check_finite(p)
    return found


def finite_rows(outs: dict) -> list[bool]:
    """Per row of a batch: are its relevance and weights finite? One reduction when all are (a sum
    of finite values of order 1 stays finite), row by row only when not."""
    relevance, weights = np.asarray(outs["relevance"]), np.asarray(outs["weights"])
    found = np.asarray(outs["evidence"]) if "evidence" in outs else np.zeros((len(relevance), 1), np.float32)
    if np.isfinite(relevance.sum() + weights.sum() + found.sum()):
        return [True] * len(relevance)
    return [bool(np.isfinite(r).all() and np.isfinite(w).all() and np.isfinite(e).all())
            for r, w, e in zip(relevance, weights, found)]


def timed(runner, inputs: dict) -> tuple[dict, float]:
    """The outputs and the median of TIMED_CALLS warm calls in ms (the first call of a runtime
    allocates and plans: a cold time is no measure of the artifact)."""
    outs = runner.run(inputs)
    times = []
    for _ in range(TIMED_CALLS):
        start = time.perf_counter()
        runner.run(inputs)
        times.append((time.perf_counter() - start) * 1000.0)
    return outs, float(np.median(times))


def check_finite(p: Prediction) -> None:
    """Never print or save NaN as an answer: non-finite outputs are refused with one line."""
    finite_evidence = p.evidence is None or np.isfinite(p.evidence).all()
    if not (np.isfinite(p.relevance).all() and np.isfinite(p.weights).all() and finite_evidence):
        raise InputError(f"the model's output for this photo and query holds NaN or infinite values ({p.runtime})",
                         "check the query (an embedding of ordinary, finite values) and the photo")


@contextlib.contextmanager
def third_party_quiet(verbose: bool):
    """Runtimes talk on their own (XNNPACK's `[cpuinfo_utils.cpp:..]` from C++ straight to fd 2,
    torch's UserWarnings): unless --verbose, file descriptors 1 and 2 go to /dev/null while they
    load and run, as the build sends them to its log. predict's own lines are printed after.
    fds 1 and 2 belong to the process, not the thread: the first of overlapping users saves and
    redirects them, the last one out restores them (a lock and a count), so two threads on one
    Model never leave the process writing to /dev/null."""
    if verbose:
        yield
        return
    with fds_to(None):  # pipeline/frontends/redirect.py: one lock and a count for every user of fds 1, 2
        yield


SHOWN_CELLS = 5  # the strongest cells the summary lists (--all: every selected cell)


def describe(p: Prediction, query: str | None = None, every_cell: bool = False) -> str:
    """What the terminal shows: the photo and runtime, the weights, the strongest cells with where
    they lie, whether anything stands out for `query` (its text; None for an embedding), and
    every selected cell only when every_cell (--all)."""
    h, w = p.image_size  # height first, as the JSON's image_size and numpy's shape say it
    order = sorted(p.topk_indices.tolist(), key=lambda i: -p.relevance[i])
    lines = [f"photo {h} x {w} px (height x width), grid {p.grid} x {p.grid} (cell {h / p.grid:.1f} x {w / p.grid:.1f} px), "
             f"runtime {p.runtime}, {p.milliseconds:.2f} ms (median of {TIMED_CALLS} warm calls)",
             "weights: " + ", ".join(f"{k} {v:.3f}" for k, v in zip(WAYS_OF_KNOWING, p.weights)),
             answer_line(p, query)]
    if every_cell:
        lines.append(f"top-{p.top_k} cells (row, col: relevance), most relevant first:")
        cells = [f"({i // p.grid},{i % p.grid}: {p.relevance[i]:.3f})" for i in order]
        lines += ["  " + " ".join(cells[k : k + 8]) for k in range(0, len(cells), 8)]
        return "\n".join(lines)
    shown = order[:SHOWN_CELLS]
    lines.append(f"strongest {len(shown)} of the top-{p.top_k} cells (row, col: relevance, where in the photo):")
    lines += [f"  ({i // p.grid},{i % p.grid}: {p.relevance[i]:.3f}) {where(i // p.grid, i % p.grid, p.grid)}"
              for i in shown]
    lines.append(f"every top-{p.top_k} cell: --all (or --json)")
    return "\n".join(lines)


def answer_line(p: Prediction, query: str | None) -> str:
    """Whether what the query asks for is in the photo (relevance is normalised per photo, its top
    cell always 1: the confidence is read from the evidence output, through the folder's calibration)."""
    said = verdict(p, f" for {query!r}" if query is not None else " for this query embedding")
    if p.stands_out is False:
        return f"{said}: the cells below are only the least unlikely"
    if p.stands_out is None:
        return f"{said} (the cells below are where the model looks, whatever is there)"
    return said


def where(row: int, col: int, grid: int) -> str:
    """A cell's place in words, by thirds of the photo: "top left", "centre", "bottom"..."""
    third = lambda i: min(2, 3 * i // grid)
    vertical = ("top", "middle", "bottom")[third(row)]
    horizontal = ("left", "centre", "right")[third(col)]
    if vertical == "middle":
        return "centre" if horizontal == "centre" else f"middle {horizontal}"
    return vertical if horizontal == "centre" else f"{vertical} {horizontal}"


# ---------------------------------------------------------------- where predict may write


def output_file(option: str, value: str, inputs: list[Path], root: Path) -> Path:
    """--json/--heatmap, checked before the model runs: a new or regular file in an existing,
    writable folder, never one of the inputs and never inside an output folder or its state (the
    publish is the tool's, replaced only whole), each judged by the file system's identity of
    files and folders (arrcoc_edge.publishing.outputs_guard), however they are named or mounted."""
    from arrcoc_edge.publishing.outputs_guard import folder_holding, input_named
    from arrcoc_edge.publishing.user_files import resolve

    if not str(value).strip():
        raise InputError(f"--{option} is empty", f"leave --{option} out, or name a file to write")
    path = Path(os.path.abspath(value))
    folder = path.parent
    if not folder.is_dir():
        raise InputError(f"--{option} {value!r}: folder {folder} does not exist",
                         f"create it first (mkdir -p {folder}) or pass --{option} in an existing folder")
    resolve(option, value)  # the one rule for user-named files: new or regular, through a link
    given = input_named(path, inputs)
    if given is not None:
        raise InputError(f"--{option} {value!r} is the input file {given}: it would be overwritten",
                         f"pass --{option} with another file name")
    inside = folder_holding(path, [root])
    if inside:
        raise InputError(f"--{option} {value!r} is inside the output folder {inside}",
                         f"pass --{option} with a path outside it (the tool replaces a publish only whole)")
    _probe_folder(option, folder)
    return path


def _probe_folder(option: str, folder: Path) -> None:
    """A temporary file made and removed in the folder: a read-only or vanished folder is found
    before the model runs, not after."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".arrcoc-probe-"):
            pass
    except OSError as exc:
        raise InputError(f"cannot write into {folder} for --{option} ({exc.strerror or exc})",
                         f"pass --{option} with a path in a writable folder") from exc


def heatmap_format(option: str, path: Path) -> str:
    """The PIL format for the heatmap's file name, from its extension."""
    from PIL import Image

    Image.init()
    fmt = Image.registered_extensions().get(path.suffix.lower())
    if fmt is None or fmt not in Image.SAVE or fmt not in ("PNG", "JPEG", "WEBP", "BMP", "TIFF", "GIF"):
        raise InputError(f"--{option} {path.name!r}: the extension {path.suffix or '(none)'!r} is not an image format",
                         f"name the file .png (or .jpg, .webp), e.g. --{option} heat.png")
    return fmt


def save_outputs(result, json_file: Path | None, heatmap_file: Path | None, heatmap_fmt: str | None,
                 say=print) -> list[str]:
    """Write the JSON and the heatmap of `result` (a arrcoc_edge.frontends.api.Prediction: its to_json() and
    heatmap(), what a Python caller gets), each whole or not at all (save_whole). Each written file
    is said at once."""
    jobs = []
    if json_file:
        jobs.append(("json", json_file, lambda f: f.write((json.dumps(result.to_json()) + "\n").encode())))
    if heatmap_file:
        picture = result.heatmap()
        jobs.append(("heatmap", heatmap_file, lambda f: picture.save(f, format=heatmap_fmt)))
    said = []
    for label, path, write in jobs:
        save_whole(path, write, label)
        said.append(f"{label}: {path}")
        if say is not None:  # None: the caller prints the returned lines itself, after its summary
            say(said[-1])
    return said


def save_whole(path: Path, write, option: str = "json") -> None:
    """user_files.write_user_file (the one rule for a file the user named) with the one-line
    error: an error or a Ctrl-C while saving leaves the previous file, or none."""
    from arrcoc_edge.errors import OutputDirError
    from arrcoc_edge.publishing.user_files import write_user_file

    try:
        write_user_file(path, write, option)
    except OSError as exc:
        raise OutputDirError(f"cannot write {path} ({exc.strerror or exc}); it was left as it was",
                             "free space on that device or pass another path") from exc
