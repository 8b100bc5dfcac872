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


def test_non_verbose_executorch_build_prints_no_third_party_noise(android_build):
    """On the session's shared android build (executorch first, then the MiniLM encoder .pte and
    the app), non-verbose, as a user runs it: its terminal output and its build.log."""
    out = android_build.out
    terminal = android_build.stdout + android_build.stderr
    assert not NOISE.findall(terminal), terminal
    assert re.search(r"^executorch +fp32 +published", android_build.stdout, re.M)  # the table is still there
    from arrcoc_edge.publishing.folder_state import state_dir

    log_path = state_dir(out) / "build.log"  # beside the output folder, in the tool's state (issue 25)
    assert f"third-party messages (warnings, converter output): {log_path}" in android_build.stdout
    log = log_path.read_text()
    for seen in ("[cpuinfo_utils.cpp:", "FutureWarning", "Failed to load"):
        assert seen in log, f"{seen!r} no longer reaches build.log: check the noise list above"
    # not a published file: verify ignores it, and no manifest lists it
    assert run_cli("verify", "--out", str(out)).returncode == 0
