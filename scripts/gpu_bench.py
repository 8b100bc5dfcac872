#!/usr/bin/env python3
"""GPU latency of the relevance model in PyTorch, for a CUDA machine with only torch + safetensors.

    python scripts/gpu_bench.py [--checkpoint checkpoints/arrcoc-v0.1-trained.safetensors]
    python scripts/gpu_bench.py --reference-settings    # G=32, K=200, D=2048 (seeded weights)

Measures batch 1 and 8 for three configurations: eager, torch.compile (default mode) and
torch.compile(mode="reduce-overhead") (CUDA graphs). Each configuration runs in its OWN process:
several compiled configurations in one process have ended in cuDNN "unable to find an engine" /
illegal-memory-access errors on these machines (TOOLCHAIN.md). Prints the median and p90 of
`--runs` timed calls (CUDA-synchronised) after warm-up, and each median's ratio to eager.
This is a benchmark, not a test: nothing here gates a build.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
CONFIGS = ("eager", "compile", "compile-reduce-overhead")


def load_model(checkpoint: str):
    """The checkpoint's model, or with "reference" a seeded model at arr-coc-0-1's own settings
    (G=32, K=200, D=2048 as for Qwen3-VL-2B): latency does not depend on the weights' values."""
    from arrcoc_edge.relevance.checkpoint import REFERENCE_SETTINGS, load_checkpoint
    from arrcoc_edge.relevance.model import ModelConfig, build_model
    from arrcoc_edge.relevance.texture_maths import CELL

    if checkpoint == "reference":
        grid = REFERENCE_SETTINGS["grid"]
        cfg = ModelConfig(image_size=CELL * grid, grid=grid, top_k=REFERENCE_SETTINGS["top_k"], query_dim=2048)
        return build_model(cfg, seed=0)
    return load_checkpoint(checkpoint).model


def measure(config: str, checkpoint: str, batch: int, runs: int, form: str) -> dict:
    import torch

    model = load_model(checkpoint)
    model.participatory_scorer.form = form
    model = model.cuda().eval()
    cfg = model.cfg
    if config != "eager":
        model = torch.compile(model, mode="reduce-overhead" if config.endswith("overhead") else None)
    g = torch.Generator(device="cuda").manual_seed(0)
    image = torch.rand(batch, 3, cfg.image_size, cfg.image_size, device="cuda", generator=g)
    query = torch.nn.functional.normalize(torch.randn(batch, cfg.query_dim, device="cuda", generator=g), dim=-1)
    times = []
    with torch.no_grad():
        for i in range(runs + 20):  # 20 warm-up calls (compilation, CUDA graph capture)
            torch.cuda.synchronize()
            start = time.perf_counter()
            model(image, query)
            torch.cuda.synchronize()
            if i >= 20:
                times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {"config": config, "batch": batch, "form": form, "grid": cfg.grid, "top_k": cfg.top_k,
            "query_dim": cfg.query_dim, "median_ms": statistics.median(times),
            "p90_ms": times[int(0.9 * len(times)) - 1], "runs": runs,
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default=str(REPO / "checkpoints" / "arrcoc-v0.1-trained.safetensors"))
    ap.add_argument("--reference-settings", action="store_true",
                    help="seeded model at G=32, K=200, D=2048 instead of --checkpoint")
    ap.add_argument("--form", choices=("direct", "reduced"), default="reduced",
                    help="participatory head form (pipeline/relevance/model.py ParticipatoryScorer)")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # "config:batch", run in a child process
    args = ap.parse_args()
    checkpoint = "reference" if args.reference_settings else args.checkpoint
    if args.one:
        config, batch = args.one.split(":")
        print(json.dumps(measure(config, checkpoint, int(batch), args.runs, args.form)))
        return 0
    rows = []
    for batch in (1, 8):
        for config in CONFIGS:
            child = subprocess.run([sys.executable, __file__, "--checkpoint", args.checkpoint, "--runs",
                                    str(args.runs), "--form", args.form, "--one", f"{config}:{batch}"]
                                   + (["--reference-settings"] if args.reference_settings else []),
                                   capture_output=True, text=True)
            if child.returncode:
                print(f"{config} batch {batch}: failed: {child.stderr.strip().splitlines()[-1:]}")
                continue
            rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
    eager = {r["batch"]: r["median_ms"] for r in rows if r["config"] == "eager"}
    if rows:
        r0 = rows[0]
        print(f"{r0['gpu']}, torch {r0['torch']}; G={r0['grid']}, K={r0['top_k']}, D={r0['query_dim']}, "
              f"participatory form {r0['form']}")
    print(f"{'config':<26}{'batch':>6}{'median ms':>11}{'p90 ms':>9}{'x eager':>9}")
    for r in rows:
        ratio = eager.get(r["batch"], float("nan")) / r["median_ms"]
        print(f"{r['config']:<26}{r['batch']:>6}{r['median_ms']:>11.3f}{r['p90_ms']:>9.3f}{ratio:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
