"""`invoke bench`: latency of every published runtime, measured side by side in one process.

Cases (torch eager plus whatever each published target offers through `Target.bench_cases`) run
interleaved, one call each per round, on the same real held-out photos, so a noisy neighbour
slows every case alike. Reported: median and p90 over many rounds, and the ratio of each
median to torch eager at the same batch and thread setting. Results go to OUT/bench.json (the
build report shows them). A benchmark, not a test: nothing here passes or fails on speed.
"""
from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import InputError


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


def torch_cases(model) -> list[BenchCase]:
    """torch eager of model.py, and the literal reference (pipeline/reference.py): what a user runs
    without this tool, with kornia at full resolution and the direct D-wide projection."""
    import torch

    from . import reference

    default = torch.get_num_threads()
    state = model.state_dict()

    def timed(fn, threads):
        def run(inputs):
            torch.set_num_threads(threads)
            with torch.inference_mode():
                fn(torch.from_numpy(inputs["image"]), torch.from_numpy(inputs["query"]))
        return run

    literal = lambda image, query: reference.forward(state, model.cfg, image, query)
    return [
        BenchCase("torch eager (1 thread)", timed(model, 1), 1),
        BenchCase("torch eager (default threads)", timed(model, default), None),
        BenchCase("reference arr-coc-0-1, literal kornia (1 thread)", timed(literal, 1), 1),
        BenchCase("reference arr-coc-0-1, literal kornia (default threads)", timed(literal, default), None),
    ]


# Idle time before each case's turn: worker pools (XNNPACK's pthreadpool, OpenMP) busy-wait for
# a few ms after their last job, and on a 2-core machine they would slow whichever case runs next.
SETTLE_S = 0.002


def time_cases(cases: list[BenchCase], inputs: dict, runs: int, warmup: int = 3) -> list[list[float]]:
    """Interleaved rounds: every case once per round, starting one case later each round, so no
    case always follows the same neighbour. Each timed call follows an untimed call of the same
    case (steady state: its caches and thread pool warm, as when an app runs frame after frame),
    except for cases that measure a cold start themselves. Returns milliseconds per case."""
    import torch

    # cases set torch's thread count per call; the caller's setting comes back afterwards (a
    # later torch op in the same process would otherwise run on whatever the last case chose)
    threads = torch.get_num_threads()
    try:
        return _time_rounds(cases, inputs, runs, warmup)
    finally:
        torch.set_num_threads(threads)


def _time_rounds(cases: list[BenchCase], inputs: dict, runs: int, warmup: int) -> list[list[float]]:
    for case in cases:
        for _ in range(warmup):
            case.run(inputs)
    times: list[list[float]] = [[] for _ in cases]
    for r in range(runs):
        for k in range(len(cases)):
            case = cases[(r + k) % len(cases)]
            time.sleep(SETTLE_S)
            if case.warm_call:
                case.run(inputs)
            start = time.perf_counter()
            result = case.run(inputs)
            wall = (time.perf_counter() - start) * 1000.0
            times[(r + k) % len(cases)].append(float(result) if case.self_timed else wall)
    return times


def frame(inputs: dict) -> dict:
    """The inputs as an app holds a frame: one contiguous buffer each. The golden split hands out
    views, which every native runtime would copy on each timed call (ORT 0.20 vs 0.13 ms at G=14,
    measured) while the browser case uploads its inputs once."""
    return {name: np.ascontiguousarray(value) for name, value in inputs.items()}


def rows_for(cases: list[BenchCase], times: list[list[float]], batch: int, case: str | None = None,
             inputs: dict | None = None) -> list[dict]:
    label, bytes_in = case, sum(v.nbytes for v in (inputs or {}).values()) or None
    baseline = {c.threads: float(np.median(t)) for c, t in zip(cases, times) if c.runtime.startswith("torch eager")}
    literal = {c.threads: float(np.median(t)) for c, t in zip(cases, times) if c.runtime.startswith("reference")}
    rows = []
    for case, t in zip(cases, times):
        median = float(np.median(t))
        rows.append({"case": label or f"batch {batch}", "runtime": case.runtime, "batch": batch,
                     "input_bytes": bytes_in,
                     "threads": case.threads or "default", "median_ms": round(median, 4),
                     "p90_ms": round(float(np.percentile(t, 90)), 4), "runs": len(t),
                     "clock": "in the runtime (self-timed)" if case.self_timed else "python perf_counter",
                     "vs_torch_eager": round(baseline[case.threads] / median, 3) if case.threads in baseline else None,
                     "vs_reference": round(literal[case.threads] / median, 3) if case.threads in literal else None})
    return rows


# Whole photos timed at batch 1 besides the 16*G crops: a phone photo at 1024 x 768, and 12 MP.
WHOLE_PHOTO_SIZES = ((1024, 768), (4032, 3024))  # (width, height)


def bench_inputs(heldout, cfg, batches) -> list[tuple[str, dict]]:
    """(case label, contiguous inputs): 16*G crops at each batch, then whole photos at batch 1
    (a held-out photo resized to each size with Lanczos; the 12 MP one is the golden set's own)."""
    from PIL import Image

    out = [(f"batch {b}" + (f" ({cfg.image_size}x{cfg.image_size} crops)" if b == batches[0] else ""),
            frame(heldout.inputs(0, b))) for b in batches]
    base = heldout.images[heldout.names.index("stereo_motorcycle/whole")]
    for width, height in WHOLE_PHOTO_SIZES:
        photo = np.asarray(Image.fromarray(base).resize((width, height), Image.Resampling.LANCZOS))
        query = heldout.queries[:1]
        out.append((f"photo {width}x{height}", frame({"image": photo[None], "query": query})))
    return out


def run_bench(out: Path, targets: dict, runs: int = 50, batches=(1, 8), log=print) -> dict:
    from .checkpoint import load_checkpoint
    from .golden import build_golden_set
    from .publish import build_lock, check_published, pinned, read_manifest, write_json_atomic

    base = pinned(out)  # one generation: a build publishing meanwhile changes nothing benched here
    manifest = read_manifest(base)
    if not manifest.get("targets"):
        raise InputError(f"no published artifacts in {out}", "run `invoke build` first")
    check_published(out, base, manifest, targets)
    settings = manifest["checkpoint"].get("model") or {}
    ckpt = load_checkpoint(manifest["checkpoint"]["path"], grid=settings.get("grid"), top_k=settings.get("top_k"))
    heldout = build_golden_set(ckpt.model, ckpt.config).heldout
    cases = torch_cases(ckpt.model)
    for name, entry in manifest["targets"].items():
        if entry.get("status") in ("published",) and name in targets:
            cases += targets[name].bench_cases(base, entry)
    rows = []
    for label, inputs in bench_inputs(heldout, ckpt.config, batches):
        batch = len(inputs["image"])
        fit = [c for c in cases if c.max_batch is None or batch <= c.max_batch]
        log(f"bench: {label}, {len(fit)} cases x {runs} interleaved rounds")
        rows += rows_for(fit, time_cases(fit, inputs, runs), batch, label, inputs)
    result = {"host": f"{platform.system()} {platform.machine()}, {platform.processor() or ''}".strip(", "),
              "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": runs,
              "checkpoint_sha256": ckpt.sha256, "rows": rows, "notes": speed_notes(cases, rows)}
    from . import report

    with build_lock(out, log):  # a build publishing now would otherwise remove the report's folder
        write_json_atomic(out / "bench.json", result)
        with report.never_fails(log):  # the report shows the latest latencies next to the parity
            report.write_report(out, heldout, log)
    return result


def speed_notes(cases: list[BenchCase], rows: list[dict]) -> list[str]:
    """One line per row slower than the FP32 case it is a variant of (same batch and threads),
    with the reason its target recorded at build time (e.g. what INT8 leaves in float)."""
    median = {(r["runtime"], r["batch"]): r["median_ms"] for r in rows}
    notes = []
    for case in cases:
        if not (case.compare_to and case.speed_note):
            continue
        for batch in sorted({r["batch"] for r in rows}):
            mine, base = median.get((case.runtime, batch)), median.get((case.compare_to, batch))
            if mine is not None and base is not None and mine > base:
                notes.append(f"{case.runtime}, batch {batch}: {mine / base:.2f}x {case.compare_to}: {case.speed_note}")
    return notes


def format_rows(rows: list[dict]) -> str:
    head = ("case", "input bytes", "runtime", "median ms", "p90 ms", "x vs torch eager", "x vs reference")
    ratio = lambda v: "-" if v is None else f"{v:.2f}x"
    table = [head] + [(r["case"], f"{r.get('input_bytes') or 0:,}", r["runtime"], f"{r['median_ms']:.3f}",
                       f"{r['p90_ms']:.3f}", ratio(r["vs_torch_eager"]), ratio(r.get("vs_reference"))) for r in rows]
    widths = [max(len(str(r[i])) for r in table) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)
