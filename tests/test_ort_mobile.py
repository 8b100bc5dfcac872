"""The ORT-format conversion (onnx-int8's .ort files) writes the same bytes every time, and its
converter child cannot outlive the build."""
from __future__ import annotations

import hashlib

import pytest

from arrcoc_edge.targets.onnx_int8 import ort_mobile

pytestmark = pytest.mark.slow  # exports the model to ONNX and runs the ORT converter (an artifact build)


def _convert(model, root):
    dest = root / "run" / "onnx-int8"
    dest.mkdir(parents=True)
    ort_mobile.convert({"model.fp32.ort": model}, dest, log=lambda m: None)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(dest.iterdir())}


@pytest.fixture(scope="module")
def onnx_model(loaded, exported, tmp_path_factory):
    from arrcoc_edge.targets.shared import onnx_common

    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    return onnx_common.export_onnx(exported.load(), loaded.config, path, lambda m: None)


def test_two_conversions_write_identical_files(onnx_model, tmp_path):
    """The converter names each model by its temporary path in required_operators.config; we keep
    the file name only, and run it without address randomisation, so two conversions in different
    temporary folders (of one path length) agree byte for byte."""
    # Same path length on purpose: the .ort bytes still follow the converter's heap layout, which
    # the length of its working folder's path can shift (seen with ~100 vs ~115 characters).
    first, second = _convert(onnx_model, tmp_path / "a"), _convert(onnx_model, tmp_path / "b")
    assert set(first) == {"model.fp32.ort", ort_mobile.CONFIG_NAME}
    assert first == second
    config = (tmp_path / "a" / "run" / "onnx-int8" / ort_mobile.CONFIG_NAME).read_text()
    assert str(tmp_path) not in config and "# - model.fp32.extended.ort" in config
    assert not list((tmp_path / "a" / "run").glob("ort-convert-*"))  # its temporary folder is gone


def test_converter_child_dies_with_its_parent(tmp_path):
    """arrcoc_edge.subproc.run: a child whose parent is SIGKILLed is killed by the kernel too."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pidfile = tmp_path / "child.pid"
    child_code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", (
        f"import sys; from arrcoc_edge import subproc; subproc.run([sys.executable, '-c', {child_code!r}])")],
        env={**os.environ, "PYTHONPATH": str(ort_mobile.Path(__file__).resolve().parent.parent)})
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        # a zombie still answers kill(0) until init reaps it; /proc says which
        state = open(f"/proc/{child}/stat").read().split()[2] if os.path.exists(f"/proc/{child}/stat") else "X"
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the converter child outlived its SIGKILLed parent")
