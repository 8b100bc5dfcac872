"""`invoke bench`: latency of every published runtime, measured side by side in one process.

Cases (torch eager plus whatever each published target offers through `Target.bench_cases`) run
interleaved, one call each per round, on the same real held-out photos, so a noisy neighbour
slows every case alike. Reported: median, p10 and p90 over many rounds; on 1-thread rows the ratio
of each median to torch eager and to the literal reference (default-thread rows share the cores
with the host's other work: their spread is shown, not ratios), and the speed goals (SPEED_GOALS)
as time ratios of 1-thread medians of the same run. Results go to OUT/bench.json (the build report
shows them), what the runtimes themselves print to OUT/bench.log. A benchmark, not a test:
nothing here passes or fails on speed.
"""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import numpy as np

from arrcoc_edge import scratch
from arrcoc_edge.errors import InputError
from arrcoc_edge.install import COMMAND
from arrcoc_edge.stages.target import BenchCase


def torch_cases(model) -> list[BenchCase]:
    """torch eager of model.py, and the literal reference (pipeline/relevance/reference.py): what a user runs
    without this tool, with kornia at full resolution and the direct D-wide projection."""
    import torch

    from arrcoc_edge.relevance import reference

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
    """One row per case: median with its spread (p10, p90). Ratios only on 1-thread rows: on the
    default pools every runtime shares the cores with whatever else runs on the host, and their
    ratios swung from 0.00x to 244x on a loaded machine, so default rows carry the spread instead."""
    label, bytes_in = case, sum(v.nbytes for v in (inputs or {}).values()) or None
    one = lambda prefix: next((float(np.median(t)) for c, t in zip(cases, times)  # noqa: E731
                               if c.threads == 1 and c.runtime.startswith(prefix)), None)
    baseline, literal = one("torch eager"), one("reference")
    rows = []
    for case, t in zip(cases, times):
        median = float(np.median(t))
        single = case.threads == 1
        rows.append({"case": label or f"batch {batch}", "runtime": case.runtime, "batch": batch,
                     "input_bytes": bytes_in,
                     "threads": case.threads or "default", "median_ms": round(median, 4),
                     "p10_ms": round(float(np.percentile(t, 10)), 4),
                     "p90_ms": round(float(np.percentile(t, 90)), 4), "runs": len(t),
                     "clock": "in the runtime (self-timed)" if case.self_timed else "python perf_counter",
                     "vs_torch_eager": round(baseline / median, 3) if single and baseline else None,
                     "vs_reference": round(literal / median, 3) if single and literal else None})
    return rows


# The speed goals of issue 30, as time ratios between 1-thread rows of one run (lower is faster):
# (name, runtime prefix, its case, baseline runtime prefix, baseline case, limit). A case of None
# means every case both rows share ("batch 1" matches the 16*G crops at batch 1).
CROPS, PHOTO_1024, PHOTO_12MP = "batch 1", "photo 1024x768", "photo 4032x3024"
SPEED_GOALS = (
    ("ExecuTorch fp32 <= 1.5x onnxruntime fp32 at batch 1", "executorch fp32 (1 thread)", CROPS,
     "onnxruntime fp32 (1 thread)", CROPS, 1.5),
    ("ExecuTorch fp32 <= 1.5x onnxruntime fp32, 1024x768 photo", "executorch fp32 (1 thread)", PHOTO_1024,
     "onnxruntime fp32 (1 thread)", PHOTO_1024, 1.5),
    ("ExecuTorch fp32 <= 1.5x onnxruntime fp32, 12 MP photo", "executorch fp32 (1 thread)", PHOTO_12MP,
     "onnxruntime fp32 (1 thread)", PHOTO_12MP, 1.5),
    ("ExecuTorch fp32 <= 2x onnxruntime fp32 at batch 8", "executorch fp32 (1 thread)", "batch 8",
     "onnxruntime fp32 (1 thread)", "batch 8", 2.0),
    ("onnxruntime fp32: 1024x768 photo <= 1.25x its 16G crop", "onnxruntime fp32 (1 thread)", PHOTO_1024,
     "onnxruntime fp32 (1 thread)", CROPS, 1.25),
    ("Lite Interpreter <= 1x torch eager", "lite interpreter fp32 (1 thread)", None, "torch eager (1 thread)", None, 1.0),
    ("browser fp32 (1 thread) <= 2x onnxruntime fp32 at batch 1", "browser fp32 (1 thread", CROPS,
     "onnxruntime fp32 (1 thread)", CROPS, 2.0),
    ("browser fp32 (1 thread) <= 2x onnxruntime fp32, 12 MP photo", "browser fp32 (1 thread", PHOTO_12MP,
     "onnxruntime fp32 (1 thread)", PHOTO_12MP, 2.0),
    # issue 37: the Python API (arrcoc_edge.load) costs little more than the runtime call it makes
    ("arrcoc_edge.load().predict <= 1.1x its bare runtime call at batch 1 (16G crop)", "api: load()", CROPS,
     "api: bare", CROPS, 1.1),
    ("pipeline predict_many <= 1.05x its bare runtime call per photo at batch 8", "api: load()", "batch 8",
     "api: bare", "batch 8", 1.05),
)


def speed_goals(rows: list[dict]) -> list[dict]:
    """Each goal of SPEED_GOALS that this run's rows can answer: the time ratio of the two medians
    (same run, same thread count), the limit, and whether it was met."""
    def find(prefix, case):
        return {r["case"]: r for r in rows if r["threads"] == 1 and r["runtime"].startswith(prefix)
                and (case is None or r["case"].startswith(case))}

    out = []
    for name, runtime, case, base_runtime, base_case, limit in SPEED_GOALS:
        mine, base = find(runtime, case), find(base_runtime, base_case)
        pairs = ([(mine[c], base[c]) for c in mine if c in base] if case is None or case == base_case
                 else [(m, b) for m in mine.values() for b in base.values()][:1])
        for m, b in pairs:
            ratio = m["median_ms"] / b["median_ms"]
            out.append({"goal": name + (f" ({m['case']})" if case is None else ""), "ratio": round(ratio, 3),
                        "limit": limit, "met": ratio <= limit, "runtime": m["runtime"], "case": m["case"],
                        "median_ms": m["median_ms"], "baseline": b["runtime"], "baseline_case": b["case"],
                        "baseline_median_ms": b["median_ms"]})
    return out


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


def api_cases(model) -> list[BenchCase]:
    """The Python API's overhead (arrcoc_edge.frontends.api, issue 37): model.predict at batch 1 and
    predict_many at batch B on the inputs as arrays (the batch as one [B, H, W, 3] array, as an app
    holds its frames; a list of B separate arrays adds one copy into a batch), beside the bare call of the very runtime the
    model holds (same session, 1 thread). Their ratio is what the API adds to each call."""
    runner = model._runner

    def through_api(inputs):
        images, query = inputs["image"], inputs["query"][0]
        if len(images) == 1:
            return model.predict(images[0], query)
        return list(model.predict_many(images, query, batch_size=len(images)))  # [B, H, W, 3]: sliced, not copied

    return [BenchCase(f"api: bare runtime call, {model.name} (1 thread)", runner.run, 1, max_batch=runner.max_batch),
            BenchCase(f"api: load().predict / predict_many, {model.name} (1 thread)", through_api, 1,
                      max_batch=runner.max_batch)]


def api_model(out: Path, log):
    """arrcoc_edge.load(out) on 1 thread: the runtime it picks by default, as a caller gets it; None
    (no API rows) when nothing published runs in Python here (a web-only folder)."""
    from arrcoc_edge.frontends.api import load

    try:
        return load(out, threads=1)
    except InputError as exc:
        log(f"bench: no Python API rows: {exc.problem}")
        return None


# A folder of photos through `invoke predict --image FOLDER` in one process (issue 37)
FOLDER_PHOTOS, FOLDER_PHOTO_SIZE = 1000, (1024, 768)


def folder_throughput(out: Path, heldout, count: int, log, heatmaps: bool = False) -> dict:
    """`count` JPEG photos of FOLDER_PHOTO_SIZE in a temporary folder through the real command, as a
    user runs it: photos per second over its whole wall time (process start, model load, decoding,
    the runtime, the JSON lines; with heatmaps, `--heatmap FOLDER` too: one PNG per photo)."""
    import io
    import subprocess
    import sys

    from PIL import Image

    base = heldout.images[heldout.names.index("stereo_motorcycle/whole")]
    encoded = io.BytesIO()
    Image.fromarray(base).resize(FOLDER_PHOTO_SIZE, Image.Resampling.LANCZOS).save(encoded, format="JPEG", quality=90)
    with scratch.folder("arrcoc-bench-folder-", family="arrcoc-") as tmp:  # up to 100,000 photos: swept after a kill -9
        folder, lines = Path(tmp) / "photos", Path(tmp) / "predictions.jsonl"
        folder.mkdir()
        for i in range(count):
            (folder / f"{i:05d}.jpg").write_bytes(encoded.getvalue())
        np.save(Path(tmp) / "query.npy", heldout.queries[0])
        # `python -m arrcoc_edge` is the command in a checkout and once installed (`invoke` needs the
        # checkout's tasks.py, which an installed package has not: the folder run failed there)
        cmd = [sys.executable, "-m", "arrcoc_edge", "predict", "--image", str(folder), "--query-embedding",
               str(Path(tmp) / "query.npy"), "--out", str(out), "--json", str(lines)]
        cmd += ["--heatmap", str(Path(tmp) / "heatmaps")] if heatmaps else []
        log(f"bench: {count} photos through `{COMMAND} predict --image FOLDER{' --heatmap DIR' if heatmaps else ''}` "
            "in one process")
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        rows = lines.read_text().splitlines() if proc.returncode == 0 else []
        drawn = len(list((Path(tmp) / "heatmaps").glob("*.png"))) if heatmaps and proc.returncode == 0 else count
    if proc.returncode != 0 or len(rows) != count or drawn != count:
        raise InputError(f"`{COMMAND} predict --image FOLDER` failed in the bench (exit {proc.returncode}): "
                         f"{(proc.stderr.strip().splitlines() or [''])[-1][:200]}", "run it by hand to see why")
    width, height = FOLDER_PHOTO_SIZE
    command = f"{COMMAND} predict --image FOLDER --query-embedding Q.npy --json P.jsonl" + (" --heatmap DIR" if heatmaps else "")
    return {"command": command, "photos": count,
            "photo": f"{width}x{height} JPEG", "runtime": json.loads(rows[0])["runtime"], "seconds": round(seconds, 3),
            "photos_per_s": round(count / seconds, 2), "clock": "wall time of the whole process (start and load included)"}


HEATMAP_PHOTOS = 300  # the folder run with --heatmap takes at most this many (a PNG per photo)
FELT_PHOTOS = 300  # the folder of issue 42's figure (fewer when --photos asks for fewer; 0 skips it)


def felt_figures(out: Path, manifest: dict, heldout, photos: int, log) -> dict | None:
    """pipeline/frontends/bench_felt.py's figures, when the folder publishes the onnx runtime and a
    sentence encoder (text-encoder) to compare with sentence-transformers; None otherwise."""
    published = {n for n, e in (manifest.get("targets") or {}).items() if e.get("status") == "published"}
    if not {"onnx", "text-encoder"} <= published:
        log("bench: no figures of what a user waits for: they need onnx and text-encoder published")
        return None
    from arrcoc_edge.frontends.bench_felt import run_felt

    photo = heldout.images[heldout.names.index("stereo_motorcycle/whole")]
    return run_felt(out, photo, min(photos, FELT_PHOTOS), log)


def run_bench(out: Path, targets: dict, runs: int = 50, batches=(1, 8), log=print,
              photos: int = 0) -> dict:
    """photos: how many photos the folder run takes (folder_throughput); 0 skips it (`invoke bench`
    asks for FOLDER_PHOTOS unless --photos says otherwise)."""
    from arrcoc_edge.publishing.folder_state import pinned, write_json_atomic
    from arrcoc_edge.publishing.locking import build_lock
    from arrcoc_edge.publishing.reading import check_published, read_manifest
    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.stages.golden import build_golden_set

    base = pinned(out)  # one generation: a build publishing meanwhile changes nothing benched here
    manifest = read_manifest(base)
    if not manifest.get("targets"):
        raise InputError(f"no published artifacts in {out}", f"run `{COMMAND} build` first")
    check_published(out, base, manifest, targets)
    settings = manifest["checkpoint"].get("model") or {}
    ckpt = load_checkpoint(manifest["checkpoint"]["path"], grid=settings.get("grid"), top_k=settings.get("top_k"))
    heldout = build_golden_set(ckpt.model, ckpt.config).heldout
    rows, commit = [], code_commit()  # the code that times, as it was when the run began
    log_path = out / "bench.log"
    log(f"bench: third-party output (runtime loaders, browser, warnings) goes to {log_path}")
    with third_party_output_to(log_path):
        cases = torch_cases(ckpt.model)
        for name, entry in manifest["targets"].items():
            if entry.get("status") in ("published",) and name in targets:
                cases += targets[name].bench_cases(base, entry)
        model = api_model(out, log)
        cases += api_cases(model) if model else []
        for label, inputs in bench_inputs(heldout, ckpt.config, batches):
            batch = len(inputs["image"])
            fit = [c for c in cases if c.max_batch is None or batch <= c.max_batch]
            log(f"bench: {label}, {len(fit)} cases x {runs} interleaved rounds")
            rows += rows_for(fit, time_cases(fit, inputs, runs), batch, label, inputs)
        folder = folder_heatmaps = felt = None
        if model:
            model.close()
            folder = folder_throughput(out, heldout, photos, log) if photos else None
            folder_heatmaps = folder_throughput(out, heldout, min(photos, HEATMAP_PHOTOS), log, heatmaps=True) if photos else None
            felt = felt_figures(out, manifest, heldout, photos, log)
    result = {"host": host_description(),
              "commit": commit,
              "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": runs,
              "checkpoint_sha256": ckpt.sha256,
              "settings": {"grid": ckpt.config.grid, "top_k": ckpt.config.top_k, "query_dim": ckpt.config.query_dim},
              "rows": rows, "goals": speed_goals(rows), "notes": speed_notes(cases, rows), "folder": folder,
              "folder_heatmaps": folder_heatmaps,
              "felt": felt, "int8_vs_fp32": int8_vs_fp32(rows)}
    from arrcoc_edge.publishing import report

    with build_lock(out, log):  # a build publishing now would otherwise remove the report's folder
        write_json_atomic(out / "bench.json", result)
        with report.never_fails(log):  # the report shows the latest latencies next to the parity
            report.write_report(out, heldout, log)
    if folder:
        log(f"bench: folder of {folder['photos']} photos ({folder['photo']}) through `invoke predict` in one process: "
            f"{folder['photos_per_s']:.1f} photos/s ({folder['seconds']:.1f} s, start and model load included)")
    if folder_heatmaps:
        log(f"bench: the same with --heatmap, {folder_heatmaps['photos']} photos: {folder_heatmaps['photos_per_s']:.1f} "
            f"photos/s ({folder_heatmaps['seconds']:.1f} s, start and model load included)")
    if result["goals"]:
        log("bench: speed goals, time ratios of 1-thread medians of this run:\n" + format_goals(result["goals"]))
    if result["int8_vs_fp32"]:
        log("bench: INT8 against FP32 in onnxruntime, 1 thread, medians of this run (the seed promised INT8 "
            "'2-3x faster'; measured, whichever way it comes out):\n" + format_int8(result["int8_vs_fp32"]))
    return result


# (INT8 runtime, its FP32 runtime) pairs of one target, timed side by side in one run (1 thread)
INT8_PAIRS = (("onnxruntime int8 (1 thread)", "onnxruntime fp32 (1 thread)"),
              ("onnxruntime int8-ort (1 thread)", "onnxruntime fp32-ort (1 thread)"))


def int8_vs_fp32(rows: list[dict]) -> list[dict]:
    """INT8 vs FP32 in onnxruntime at the 16*G crop (batch 1) and the 1024x768 photo: both medians
    and the speed-up (fp32 / int8; below 1 means INT8 is slower). Empty when onnx-int8 is not published."""
    median = {(r["runtime"], r["case"]): r["median_ms"] for r in rows if r["threads"] == 1}
    cases = [c for c in dict.fromkeys(r["case"] for r in rows) if c.startswith((CROPS, PHOTO_1024))]
    out = []
    for int8, fp32 in INT8_PAIRS:
        for case in cases:
            a, b = median.get((int8, case)), median.get((fp32, case))
            if a is not None and b is not None:
                out.append({"case": case, "int8": int8, "fp32": fp32, "int8_ms": a, "fp32_ms": b,
                            "speedup": round(b / a, 3)})
    return out


def format_int8(pairs: list[dict]) -> str:
    return "\n".join(f"{p['case']}: {p['int8']} {p['int8_ms']:.3f} ms vs {p['fp32']} {p['fp32_ms']:.3f} ms: "
                     + (f"INT8 {p['speedup']:.2f}x faster" if p["speedup"] >= 1 else f"INT8 {1 / p['speedup']:.2f}x slower")
                     for p in pairs)


def host_description() -> str:
    """OS, machine, the CPU's model name and the cores this process may use (the numbers depend on all)."""
    import os

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{platform.system()} {platform.machine()}, {cpu}, {cores} cores".replace(", ,", ",")


def code_commit() -> str | None:
    """The commit of the code that ran the bench (with '-dirty' for uncommitted changes), or None
    outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


class third_party_output_to:
    """While open, what runtimes and libraries print goes to `path`, not to the terminal: file
    descriptors 1 and 2 (C++ loaders such as cpuinfo's, child processes) and Python's sys.stderr
    (warnings, logging). sys.stdout is re-pointed to the terminal, so the bench's own lines still
    show there."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        import logging
        import os
        import sys
        import warnings

        from arrcoc_edge.frontends.redirect import fds_to

        self._file = open(self.path, "a", buffering=1)
        self._file.write(f"--- invoke bench {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        self._streams = sys.stdout, sys.stderr
        # fds 1 and 2 to the log, shared with other threads' users (pipeline/frontends/redirect.py)
        self._fds = fds_to(self._file.fileno(), terminal=True)
        sys.stdout = os.fdopen(self._fds.__enter__(), "w", buffering=1)
        sys.stderr = self._file
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("default")
        logging.captureWarnings(True)
        return self

    def __exit__(self, *exc):
        import logging
        import sys

        logging.captureWarnings(False)
        self._warnings.__exit__(*exc)
        sys.stdout.flush()
        self._file.flush()
        terminal = sys.stdout
        sys.stdout, sys.stderr = self._streams
        terminal.close()
        self._fds.__exit__(*exc)
        self._file.close()
        return False


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
    """The terminal's table: ratios only on 1-thread rows (default-thread rows show their spread)."""
    head = ("case", "input bytes", "runtime", "median ms", "p10-p90 ms", "x vs torch eager", "x vs reference")
    ratio = lambda v: "" if v is None else f"{v:.2f}x"  # noqa: E731
    spread = lambda r: f"{r.get('p10_ms', r['median_ms']):.3f}-{r['p90_ms']:.3f}"  # noqa: E731
    table = [head] + [(r["case"], f"{r.get('input_bytes') or 0:,}", r["runtime"], f"{r['median_ms']:.3f}",
                       spread(r), ratio(r["vs_torch_eager"]), ratio(r.get("vs_reference"))) for r in rows]
    widths = [max(len(str(r[i])) for r in table) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)


def format_goals(goals: list[dict]) -> str:
    """One line per speed goal: the time ratio of two 1-thread medians of this run and its limit."""
    return "\n".join(f"{'met    ' if g['met'] else 'NOT met'}  {g['ratio']:.2f}x (limit {g['limit']:g}x)  {g['goal']}: "
                     f"{g['median_ms']:.3f} / {g['baseline_median_ms']:.3f} ms" for g in goals)
