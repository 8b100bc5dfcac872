"""The gate blocks publication, and an interrupted stage leaves the published state intact.

These run the real build core in-process with a target that sabotages itself, so the failure is
certain and happens exactly where the test wants it.
"""
from __future__ import annotations

import os
import shutil
import signal

import numpy as np
import pytest

from arrcoc_edge import targets as target_table
from arrcoc_edge.frontends import cli
from arrcoc_edge.building.build import run_build
from arrcoc_edge.errors import BuildInterrupted
from arrcoc_edge.targets.onnx import OnnxTarget
from test_build import manifest, previous, published, snapshot, staging_left  # noqa: F401

pytestmark = pytest.mark.slow


class PerturbedOnnx(OnnxTarget):
    """Builds the real ONNX model, then nudges one learned weight before verification."""

    def build(self, ctx):
        import onnx
        from onnx import numpy_helper

        variants = super().build(ctx)
        path = variants[0].files[0]
        model = onnx.load(str(path))
        init = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
        arr = numpy_helper.to_array(init).copy()
        arr += np.random.default_rng(0).normal(0, 0.05, arr.shape).astype(arr.dtype)
        init.CopyFrom(numpy_helper.from_array(arr, init.name))
        onnx.save(model, str(path))
        return variants


class InterruptedOnnx(OnnxTarget):
    """Writes part of its artifact, then receives a signal as if the user pressed Ctrl-C / kill."""

    def __init__(self, signum):
        self.signum = signum

    def build(self, ctx):
        (ctx.staging / "model.onnx").write_bytes(b"half a model")
        os.kill(os.getpid(), self.signum)
        raise AssertionError("the signal should have interrupted the build")


def test_gate_failure_blocks_publication_and_exits_3(previous, monkeypatch, capsys):
    before = snapshot(previous)
    monkeypatch.setitem(target_table.TARGETS, "onnx", PerturbedOnnx())
    code = cli.build("onnx", None, str(previous), verbose=False)
    out, err = capsys.readouterr()
    assert code == 3
    assert "failed" in out and "relevance_max_abs" in out
    assert "onnx failed; nothing of those was published" in err
    assert snapshot(previous) == before
    assert manifest(previous)["targets"]["onnx"]["status"] == "published"  # the previous, good entry
    assert staging_left(previous) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_stage_keeps_previous_artifacts(signum, previous, checkpoint_path):
    before = snapshot(previous)
    target = InterruptedOnnx(signum)
    with pytest.raises(BuildInterrupted) as info:
        run_build([target], {"onnx": target}, checkpoint_path, previous, log=lambda m: None)
    assert info.value.exit_code == 130 and "nothing was published" in info.value.problem
    assert snapshot(previous) == before
    assert staging_left(previous) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


class GateFailsAfterOnnx(PerturbedOnnx):
    """A target built from the onnx stage that then fails its own gate, as onnx-int8 can."""

    name = "needs-onnx"
    depends_on = ("onnx",)


def test_failed_gate_republishes_no_dependency(previous, checkpoint_path):
    """The onnx stage passes, the target that needed it fails: nothing is published, so the
    manifest and report stay byte for byte (the dependency is not re-published with new times)."""
    before = snapshot(previous)
    target = GateFailsAfterOnnx()
    registry = {"onnx": OnnxTarget(), target.name: target}
    result = run_build([target], registry, checkpoint_path, previous, log=lambda m: None)
    assert {s.target.name: s.status for s in result.stages} == {"onnx": "not published", "needs-onnx": "failed"}
    assert not result.ok
    assert snapshot(previous) == before  # manifest.json and report.html included
    assert staging_left(previous) == []
