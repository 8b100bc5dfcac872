#!/usr/bin/env python3
"""GPU latency of the relevance model in PyTorch, for a CUDA machine with only torch + safetensors.

    python scripts/gpu_bench.py [--checkpoint checkpoints/arrcoc-v0.1-trained.safetensors]

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


def measure(config: str, checkpoint: Path, batch: int, runs: int) -> dict:
    import torch

    from pipeline.checkpoint import load_checkpoint

    model = load_checkpoint(checkpoint).model.cuda().eval()
    if config != "eager":
        model = torch.compile(model, mode="reduce-overhead" if config.endswith("overhead") else None)
    g = torch.Generator(device="cuda").manual_seed(0)
    image = torch.rand(batch, 3, 224, 224, device="cuda", generator=g)
    query = torch.nn.functional.normalize(torch.randn(batch, 384, device="cuda", generator=g), dim=-1)
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
    return {"config": config, "batch": batch, "median_ms": statistics.median(times),
            "p90_ms": times[int(0.9 * len(times)) - 1], "runs": runs,
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default=str(REPO / "checkpoints" / "arrcoc-v0.1-trained.safetensors"))
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # "config:batch", run in a child process
    args = ap.parse_args()
    if args.one:
        config, batch = args.one.split(":")
        print(json.dumps(measure(config, Path(args.checkpoint), int(batch), args.runs)))
        return 0
    rows = []
    for batch in (1, 8):
        for config in CONFIGS:
            child = subprocess.run([sys.executable, __file__, "--checkpoint", args.checkpoint, "--runs",
                                    str(args.runs), "--one", f"{config}:{batch}"], capture_output=True, text=True)
            if child.returncode:
                print(f"{config} batch {batch}: failed: {child.stderr.strip().splitlines()[-1:]}")
                continue
            rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
    eager = {r["batch"]: r["median_ms"] for r in rows if r["config"] == "eager"}
    print(f"{rows[0]['gpu'] if rows else '?'}, torch {rows[0]['torch'] if rows else '?'}")
    print(f"{'config':<26}{'batch':>6}{'median ms':>11}{'p90 ms':>9}{'x eager':>9}")
    for r in rows:
        ratio = eager.get(r["batch"], float("nan")) / r["median_ms"]
        print(f"{r['config']:<26}{r['batch']:>6}{r['median_ms']:>11.3f}{r['p90_ms']:>9.3f}{ratio:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
