"""Command-line entry points behind tasks.py: argument handling, the summary table, exit codes."""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

from .errors import ArrcocError, SettingsError

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


def parse_setting(name: str, value) -> int | None:
    """--grid / --top-k from the command line: None, or a positive integer (SettingsError)."""
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or number <= 0:
        raise SettingsError(f"--{name} must be a positive integer, got {value!r}",
                            f"pass --{name} with a whole number, e.g. --grid 32 --top-k 200")
    return number


def build(targets: str, checkpoint: str | None, out: str | None, verbose: bool, options: dict | None = None) -> int:
    """`invoke build`: returns the process exit code."""
    import targets as target_table

    from .build import run_build

    names = [t.strip() for t in targets.split(",") if t.strip()]
    options = dict(options or {})
    try:
        for key, flag in (("grid", "grid"), ("top_k", "top-k")):
            options[key] = parse_setting(flag, options.get(key))
        requested = target_table.resolve(names)
        result = run_build(
            requested,
            target_table.TARGETS,
            Path(checkpoint) if checkpoint else DEFAULT_CHECKPOINT,
            Path(out) if out else DEFAULT_OUT,
            log=lambda msg: print(msg, flush=True),
            strict=names != ["all"],
            options=options,
        )
    except ArrcocError as exc:
        if verbose:
            traceback.print_exc()
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
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


def verify(out: str | None) -> int:
    """`invoke verify`: every file the manifest lists exists with its bytes and sha256."""
    from .checkpoint import sha256_file
    from .publish import read_manifest

    root = Path(out) if out else DEFAULT_OUT
    try:
        manifest = read_manifest(root)
    except ArrcocError as exc:
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    if not manifest:
        print(f"error: no manifest in {root} -> fix: run `invoke build` first", file=sys.stderr)
        return 2
    bad = 0
    for name, entry in manifest.get("targets", {}).items():
        for f in entry.get("files", []):
            path = root / f["path"]
            if not path.is_file() or path.stat().st_size != f["bytes"] or sha256_file(path) != f["sha256"]:
                print(f"MISMATCH {f['path']}")
                bad += 1
        print(f"{name:12s} {entry.get('status')}: {len(entry.get('files', []))} files checked")
    if bad:
        print(f"error: {bad} file(s) differ from the manifest -> fix: rebuild with `invoke build`", file=sys.stderr)
        return 3
    return 0


def clean(out: str | None) -> None:
    """`invoke clean`: remove what builds wrote (never anything else in the folder)."""
    import shutil

    root = Path(out) if out else DEFAULT_OUT
    manifest_targets = []
    try:
        from .publish import read_manifest

        manifest_targets = list(read_manifest(root).get("targets", {}))
    except ArrcocError:
        pass
    for name in [*manifest_targets, ".staging", ".cache"]:
        shutil.rmtree(root / name, ignore_errors=True)
    for name in ("manifest.json", ".lock", "report.html", "REPORT.md"):
        (root / name).unlink(missing_ok=True)
    print(f"cleaned {root}")


def bench(out: str | None, runs: int) -> int:
    """`invoke bench`: latency of every published runtime side by side; writes OUT/bench.json."""
    import targets as target_table

    from .bench import format_rows, run_bench

    root = Path(out) if out else DEFAULT_OUT
    try:
        result = run_bench(root, target_table.TARGETS, runs=runs, log=lambda m: print(m, flush=True))
    except ArrcocError as exc:
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    print()
    print(format_rows(result["rows"]))
    print(f"\nmedian of {runs} interleaved rounds per case on {result['host']}; "
          f"x = torch eager median / this median at the same batch and threads; written to {root / 'bench.json'}")
    return 0
