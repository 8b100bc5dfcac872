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
    }
)
def build(c, target="all", checkpoint=None, out=None, verbose=False, calibration=None):
    """Export the checkpoint once, build, verify, gate and publish the target(s)."""
    from pipeline import cli

    options = {"calibration_dir": calibration} if calibration else {}
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


@task(help={"out": "output folder to empty; default: artifacts/"})
def clean(c, out=None):
    """Remove published artifacts, the manifest, staging leftovers and the export cache."""
    from pipeline import cli

    cli.clean(out)


@task
def test(c):
    """Run the test suite (same as scripts/test.sh, without the set-up step)."""
    c.run(f"{sys.executable} -m pytest -q tests", pty=False)
