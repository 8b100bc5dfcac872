"""The library owns no process-wide state; the command line owns its process.

A program that imports arrcoc_edge keeps its file descriptors 1 and 2, its signal handlers and its
threads' prints; the commands `arrcoc-edge` and `invoke` stop quietly when their reader leaves.
Each case runs in a child process, as a user's program or a shell runs it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

VENV_BIN = Path(sys.executable).parent


def _with_stdout_closed(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run cmd with stdout a pipe whose reader has already gone (`cmd | head` after head exited)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, cwd=REPO)
    finally:
        os.close(write)


@pytest.mark.parametrize("argv", [["arrcoc-edge", "--list"], ["arrcoc-edge", "--help"],
                                  ["arrcoc-edge", "predict", "--help"], ["invoke", "-r", str(REPO), "--list"]],
                         ids=" ".join)
def test_a_command_whose_reader_left_exits_quietly(argv):
    """`arrcoc-edge --list | head`: no BrokenPipeError traceback, exit 141 (as SIGPIPE) or 0."""
    tool = VENV_BIN / argv[0]
    if not tool.exists():
        pytest.skip(f"{tool} is not installed in this venv")
    proc = _with_stdout_closed([str(tool), *argv[1:]])
    assert proc.returncode in (0, 141), (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr == "", proc.stderr[-2000:]
