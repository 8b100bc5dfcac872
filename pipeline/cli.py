"""Command-line entry points behind tasks.py: argument handling, the summary table, exit codes."""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

from . import options as opts
from .errors import ArrcocError

REPO = Path(__file__).resolve().parent.parent
# The trained checkpoint (`invoke train`, metrics in its metadata). arrcoc-v0.1-default is the
# seeded initialisation it started from, kept as the untrained baseline (pipeline/train.py).
DEFAULT_CHECKPOINT = REPO / "checkpoints" / "arrcoc-v0.1-trained.safetensors"
DEFAULT_OUT = REPO / "artifacts"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def parity_cell(report) -> str:
    if report is None:
        return "-"
    m = report.metrics
    if "topk_overlap_mean" not in m:
        return "not measured"
    text = f"rel max {m['relevance_max_abs']:.1e}, top-K {m['topk_overlap_mean']:.3f}"
    source = report.variant.info.get("parity_from")  # numbers measured by another stage (app bundles)
    if source:
        return f"{text} (from {source.split(',')[0]})"
    return text if report.status != "unverified" else text + " (reference check)"


def summary_rows(result) -> list[list[str]]:
    rows = []
    for stage in result.stages:
        reports = stage.variants or [None]
        for i, report in enumerate(reports):
            name = stage.target.name if i == 0 else ""
            variant = report.variant.name if report else "-"
            status = stage.status if i == 0 else ""
            if report and report.status != ("verified" if stage.status == "published" else stage.status):
                status = (status + f" ({report.status})").strip()
            rows.append([
                name, variant, status,
                human_bytes(report.metrics.get("size_bytes")) if report else "-",
                parity_cell(report),
                f"{stage.seconds:.1f}s" if i == 0 else "",
            ])
    return rows


def format_table(rows: list[list[str]], header=("target", "variant", "status", "size", "parity", "time")) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def print_reasons(result) -> None:
    for stage in result.stages:
        if stage.reason and stage.status != "published":
            print(f"  {stage.target.name}: {stage.status}: {stage.reason}")


def guarded(task, verbose: bool) -> int:
    """Run a task body and return its exit code. A typed error prints its one line; anything else
    (a bug or a library error nobody anticipated) prints one line too: tracebacks need --verbose."""
    try:
        return task() or 0
    except ArrcocError as exc:
        if verbose:
            traceback.print_exc()
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the promise is one line, whatever went wrong
        if verbose:
            traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        print(f"internal error: {type(exc).__name__}: {first} -> fix: rerun with --verbose and report the traceback",
              file=sys.stderr)
        return 1


def build(targets: str, checkpoint: str | None, out: str | None, verbose: bool, options: dict | None = None) -> int:
    """`invoke build`: returns the process exit code."""
    return guarded(lambda: _build(targets, checkpoint, out, verbose, options or {}), verbose)


def _build(targets, checkpoint, out, verbose, options) -> int:
    import targets as target_table

    from .build import run_build

    names = opts.target_names(targets)
    requested = target_table.resolve(names)
    if options.get("calibration_dir") is not None:
        options = {**options, "calibration_dir": opts.existing_folder("calibration", options["calibration_dir"])}
    options = {**options, "grid": opts.optional_positive("grid", options.get("grid")),
               "top_k": opts.optional_positive("top-k", options.get("top_k"))}
    from .console import LOG_NAME, build_console

    root = Path(out) if out else DEFAULT_OUT
    with build_console(root, verbose) as console:
        result = run_build(
            requested,
            target_table.TARGETS,
            Path(checkpoint) if checkpoint else DEFAULT_CHECKPOINT,
            root,
            log=console.log,
            strict=names != ["all"],
            options=options,
        )
    if not verbose:
        print(f"third-party messages (warnings, converter output): {root / LOG_NAME}")
    print()
    print(format_table(summary_rows(result)))
    print_reasons(result)
    if verbose:
        for stage in result.stages:
            if stage.error is not None:
                traceback.print_exception(stage.error)
    cache = "cache hit" if result.exported_cache_hit else "fresh export"
    print(f"\n{len(result.stages)} target(s) in {result.seconds:.1f}s ({cache}); manifest: {result.out / 'manifest.json'}")
    if not result.ok:
        failed = [s.target.name for s in result.stages if s.status == "failed"]
        print(f"error: {', '.join(failed)} failed; nothing of those was published -> fix: see the reasons above", file=sys.stderr)
        return 3
    return 0


def verify(out: str | None, verbose: bool = False) -> int:
    """`invoke verify`: every file the manifest lists exists with its bytes and sha256, and the
    published folders hold no file the manifest does not list."""
    return guarded(lambda: _verify(Path(out) if out else DEFAULT_OUT), verbose)


def _verify(root: Path) -> int:
    from .checkpoint import sha256_file
    from .errors import InputError
    from .publish import read_manifest

    manifest = read_manifest(root)
    if not manifest:
        raise InputError(f"no manifest in {root}", "run `invoke build` first")
    bad = 0
    for name, entry in manifest.get("targets", {}).items():
        listed = {f["path"] for f in entry.get("files", [])}
        for f in entry.get("files", []):
            path = root / f["path"]
            if not path.is_file() or path.stat().st_size != f["bytes"] or sha256_file(path) != f["sha256"]:
                print(f"MISMATCH {f['path']}")
                bad += 1
        for rel in sorted(on_disk(root, name) - listed) if listed else []:
            print(f"UNLISTED {rel}")
            bad += 1
        print(f"{name:12s} {entry.get('status')}: {len(listed)} files checked")
    if bad:
        print(f"error: {bad} file(s) differ from the manifest -> fix: rebuild with `invoke build`", file=sys.stderr)
        return 3
    return 0


def on_disk(root: Path, name: str) -> set[str]:
    """Every file under root/name (through the public symlink), as manifest-style paths."""
    import os

    found = set()
    for folder, _, files in os.walk(root / name):
        for f in files:
            found.add((Path(folder, f).relative_to(root)).as_posix())
    return found


def merge(parts: str | None, out: str | None, checkpoint: str | None = None, verbose: bool = False) -> int:
    """`invoke merge`: join published folders of one checkpoint (built on several hosts) into one."""
    return guarded(lambda: _merge(parts, out, checkpoint), verbose)


def _merge(parts, out, checkpoint) -> int:
    folders = opts.part_folders(parts)
    root = Path(out) if out else DEFAULT_OUT
    ckpt = opts.existing_file("checkpoint", checkpoint) if checkpoint is not None else None
    from .merge import run_merge

    data = run_merge(folders, root, ckpt, DEFAULT_CHECKPOINT, log=lambda m: print(m, flush=True))
    rows = [[name, e.get("status"), e["merge"]["from_part"], _host_cell(e["merge"]["built_and_verified_on"])]
            for name, e in data["targets"].items()]
    print()
    print(format_table(rows, header=("target", "status", "from part", "built and verified on")))
    same = "identical" if data["merge"]["exported_program_reproducible"] else "DIFFERENT (not reproducible)"
    print(f"\n{len(rows)} target(s) from {len(folders)} parts; .pt2 across parts: {same}; "
          f"manifest: {root / 'manifest.json'}")
    return 0


def _host_cell(host: dict) -> str:
    return f"{host.get('os')} {host.get('machine')}, Python {host.get('python')}"


def clean(out: str | None, verbose: bool = False) -> int:
    """`invoke clean`: remove what builds wrote (never anything else in the folder)."""
    return guarded(lambda: _clean(Path(out) if out else DEFAULT_OUT), verbose)


def _clean(root: Path) -> int:
    import os

    from . import publish
    from .errors import OutputDirError

    if not root.is_dir():
        print(f"nothing to clean: {root} is not a folder")
        return 0
    try:
        names = list(publish.read_manifest(root).get("targets", {}))
    except OutputDirError:
        names = []  # a broken manifest: remove what we know by layout, never follow its names
    links = [p.name for p in root.iterdir() if p.is_symlink() and os.readlink(p).startswith(publish.CURRENT + "/")]
    try:
        with publish.build_lock(root, lambda m: print(m, flush=True)):
            for name in [*names, *links, publish.MANIFEST, *publish.REPORT_FILES, "build.log", publish.CURRENT,
                         publish.GENERATIONS, publish.STAGING, ".cache"]:
                if not publish.remove_tree(root / name):
                    raise OSError(f"{root / name} stays")
        (root / ".lock").unlink(missing_ok=True)
    except OSError as exc:
        raise OutputDirError(f"cannot clean {root} ({exc.strerror or exc})",
                             "fix its permissions (chmod, chattr -i) and run clean again") from exc
    print(f"cleaned {root}")
    return 0


def bench(out: str | None, runs, verbose: bool = False) -> int:
    """`invoke bench`: latency of every published runtime side by side; writes OUT/bench.json."""
    return guarded(lambda: _bench(Path(out) if out else DEFAULT_OUT, opts.integer("runs", runs, 1, opts.MAX_BENCH_RUNS, 50)), verbose)


def _bench(root: Path, runs: int) -> int:
    import targets as target_table

    from .bench import format_rows, run_bench

    result = run_bench(root, target_table.TARGETS, runs=runs, log=lambda m: print(m, flush=True))
    print()
    print(format_rows(result["rows"]))
    for note in result.get("notes") or []:
        print(f"note: {note}")
    print(f"\nmedian of {runs} interleaved rounds per case on {result['host']} (rotating order, each timed "
          f"call right after an untimed one of the same case, onnxruntime pools not spinning); x = torch eager median / this median at the same batch and threads; "
          f"written to {root / 'bench.json'}")
    return 0


def predict(image, query, query_embedding, out, runtime, json_path, heatmap, verbose: bool = False) -> int:
    """`invoke predict`: one whole photo and a query through a published artifact."""
    return guarded(lambda: _predict(image, query, query_embedding, out, runtime, json_path, heatmap), verbose)


def _predict(image, query, query_embedding, out, runtime, json_path, heatmap) -> int:
    import json

    import targets as target_table

    from . import predict as pr
    from .publish import read_manifest

    if (query is None) == (query_embedding is None):
        from .errors import InputError

        raise InputError("give exactly one of --query TEXT and --query-embedding FILE.npy",
                         "e.g. --query 'where is the cat?' or --query-embedding q.npy (float32 [D])")
    photo = opts.existing_file("image", image)
    embedding = opts.existing_file("query-embedding", query_embedding) if query_embedding is not None else None
    json_file = opts.writable_file("json", json_path) if json_path is not None else None
    heatmap_file = opts.writable_file("heatmap", heatmap) if heatmap is not None else None
    root = Path(out) if out else DEFAULT_OUT
    manifest = read_manifest(root)
    if not manifest.get("targets"):
        from .errors import InputError

        raise InputError(f"nothing is published in {root}", "run `invoke build --target onnx` first (or pass --out)")
    result = pr.predict(root, manifest, target_table.TARGETS, photo, query, embedding, runtime)
    print(pr.describe(result))
    if json_file:
        json_file.write_text(json.dumps(result.to_json()) + "\n")
        print(f"json: {json_file}")
    if heatmap_file:
        from .golden import load_photo
        from .overlay import heatmap as draw

        draw(load_photo(photo), result.relevance, result.topk_indices, result.grid).save(heatmap_file)
        print(f"heatmap: {heatmap_file}")
    return 0


def serve(out: str | None, port, verbose: bool = False) -> int:
    """`invoke serve`: the built web demo on localhost until Ctrl-C."""
    from .serve import serve_forever

    def run():
        number = opts.port(port)
        serve_forever((Path(out) if out else DEFAULT_OUT) / "web", number, tracebacks=verbose)

    return guarded(run, verbose)


def train(out: str | None, steps, seed, verbose: bool = False) -> int:
    """`invoke train`: options checked here, before minutes of training."""
    def run():
        path = opts.writable_file("out", out) if out else None
        n_steps = opts.integer("steps", steps, 1, opts.MAX_TRAIN_STEPS) if steps is not None else None
        n_seed = opts.integer("seed", seed, 0, opts.MAX_SEED) if seed is not None else None
        from .train import main

        return main(str(path) if path else None, n_steps, n_seed)

    return guarded(run, verbose)
