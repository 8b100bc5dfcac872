"""Invoke tasks: thin wrappers over `pipeline` (run `invoke --list`)."""
from __future__ import annotations

import sys

from invoke import Exit, task


@task(
    help={
        "target": "onnx, onnx-int8, web, tensorrt, coreml, ptl, executorch, android, ios or all (comma-separated)",
        "checkpoint": "checkpoint (.safetensors or reference .pt/.pth); default: the shipped one",
        "out": "output folder; default: artifacts/",
        "verbose": "show tracebacks",
        "calibration": "folder of images to calibrate quantised targets (default: the golden calibration split)",
        "grid": "patch grid G (G x G patches, input 16*G px); default: the checkpoint's (reference .pt: 32)",
        "top_k": "patches selected K, 1..G*G; default: the checkpoint's (reference .pt: 200)",
    }
)
def build(c, target="all", checkpoint=None, out=None, verbose=False, calibration=None, grid=None, top_k=None):
    """Export the checkpoint once, build, verify, gate and publish the target(s)."""
    from pipeline import cli

    options = {"calibration_dir": calibration} if calibration else {}
    options.update(grid=grid, top_k=top_k)
    code = cli.build(target, checkpoint, out, verbose, options)
    if code:
        raise Exit(code=code)


@task(help={"out": "output folder; default: artifacts/"})
def verify(c, out=None):
    """Re-check published files against the manifest's sizes and sha256 hashes."""
    from pipeline import cli

    code = cli.verify(out)
    if code:
        raise Exit(code=code)


@task(help={"out": "output folder holding web/; default: artifacts/", "port": "port on localhost (default 8000)"})
def serve(c, out=None, port=8000):
    """Serve the built web demo on localhost with cross-origin isolation (multi-threaded WASM)."""
    from pathlib import Path

    from pipeline import cli
    from pipeline.errors import ArrcocError
    from pipeline.serve import serve_forever

    try:
        serve_forever((Path(out) if out else cli.DEFAULT_OUT) / "web", int(port))
    except ArrcocError as exc:
        print(exc.one_line(), file=sys.stderr)
        raise Exit(code=exc.exit_code)


@task(help={"out": "output folder to empty; default: artifacts/"})
def clean(c, out=None):
    """Remove published artifacts, the manifest, staging leftovers and the export cache."""
    from pipeline import cli

    cli.clean(out)


@task(help={"out": "output folder with published artifacts; default: artifacts/",
            "runs": "timed rounds per case (median and p90 are reported)"})
def bench(c, out=None, runs=50):
    """Latency of torch eager and every published runtime, side by side (not a test)."""
    from pipeline import cli

    code = cli.bench(out, int(runs))
    if code:
        raise Exit(code=code)


@task(help={"out": "checkpoint to write (default: checkpoints/arrcoc-v0.1-trained.safetensors)",
            "steps": "Adam steps (default: pipeline.train.Recipe.steps)",
            "seed": "initialisation and batch-order seed (default 0); same seed -> same bytes"})
def train(c, out=None, steps=None, seed=None):
    """Train the participatory scorer and tension balancer on scenes with ground truth (CPU, minutes).

    Prints held-out precision@K / R-precision of the trained model next to the untrained
    checkpoint and a query-blind baseline trained in the same run.
    """
    from pipeline.train import main

    code = main(out, steps, seed)
    if code:
        raise Exit(code=code)


@task
def test(c):
    """Run the test suite (same as scripts/test.sh, without the set-up step)."""
    c.run(f"{sys.executable} -m pytest -q tests", pty=False)
