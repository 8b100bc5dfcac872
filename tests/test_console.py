"""A build a person can read: third-party noise goes to OUT/build.log unless --verbose.

The executorch target is the one build that loads every noisy library of the list: torch.export
(pytree FutureWarnings), torchao ("Failed to load ... .so", `W... _pytree.py` logging lines) and
the ExecuTorch runtime, whose XNNPACK writes `[cpuinfo_utils.cpp:...]` lines from C++ straight to
file descriptor 2. The test also requires that noise in build.log, so it proves the redirection,
not just a quiet library. onnxruntime's quantisation hint and torchao's no-triton warning do not
appear on this host's pins at all; the same redirection covers them.
"""
from __future__ import annotations

import re

import pytest
from conftest import run_cli

pytestmark = pytest.mark.slow
NOISE = re.compile(r"FutureWarning|UserWarning|Failed to load|triton|cpuinfo|_pytree\.py|pre-process|"
                   r"quant_pre_process|^[WIE]\d{4} ", re.MULTILINE)


def test_non_verbose_executorch_build_prints_no_third_party_noise(tmp_path):
    proc = run_cli("build", "--target", "executorch", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    terminal = proc.stdout + proc.stderr
    assert not NOISE.findall(terminal), terminal
    assert "executorch  fp32     published" in proc.stdout  # the table is still there
    from pipeline.publishing.folder_state import state_dir

    log_path = state_dir(tmp_path) / "build.log"  # beside the output folder, in the tool's state (issue 25)
    assert f"third-party messages (warnings, converter output): {log_path}" in proc.stdout
    log = log_path.read_text()
    for seen in ("[cpuinfo_utils.cpp:", "FutureWarning", "Failed to load"):
        assert seen in log, f"{seen!r} no longer reaches build.log: check the noise list above"
    # not a published file: verify ignores it, and no manifest lists it
    assert run_cli("verify", "--out", str(tmp_path)).returncode == 0
