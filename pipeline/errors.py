"""Typed errors. Each one carries the problem and the fix, printed as one line.

The CLI prints `error: <problem> -> fix: <fix>` and exits non-zero; a traceback
only appears with --verbose. Raise these instead of bare exceptions wherever a
user can act on the cause.
"""
from __future__ import annotations


class ArrcocError(Exception):
    """Base class: `problem` says what went wrong, `fix` says what to do."""

    kind = "error"
    exit_code = 2

    def __init__(self, problem: str, fix: str):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def one_line(self) -> str:
        # a user's value may hold a line break (--target $'a\rb', form feed, U+2028...): the
        # promise is one line, so every character str.splitlines() breaks on is shown escaped
        text = f"{self.kind}: {self.problem} -> fix: {self.fix}"
        return "".join(repr(c)[1:-1] if len(f"a{c}a".splitlines()) > 1 else c for c in text)


class CheckpointError(ArrcocError):
    kind = "checkpoint error"


class ExportError(ArrcocError):
    kind = "export error"


class GateError(ArrcocError):
    kind = "gate failed"
    exit_code = 3


class MissingExtraError(ArrcocError):
    kind = "missing dependency"


class NotApplicableError(ArrcocError):
    """A target that cannot exist for this model (e.g. no query encoder of its width): skipped."""

    kind = "not applicable"


class HostCapabilityError(ArrcocError):
    kind = "host capability"


class OutputDirError(ArrcocError):
    kind = "output error"


class MergeError(ArrcocError):
    """Parts that cannot be joined into one publish: another checkpoint or settings, or a conflict."""

    kind = "merge error"


class InputError(ArrcocError):
    """Bad user input other than the checkpoint (images, calibration data, target names)."""

    kind = "input error"


class SettingsError(InputError):
    """Model settings asked for on the command line (--grid, --top-k) that cannot be built."""

    kind = "settings error"


class BuildInterrupted(ArrcocError):
    kind = "interrupted"
    exit_code = 130


class BuildCrashed(ArrcocError):
    """build()'s child process ended without its outcome: a native crash (SIGSEGV, SIGABRT...), a
    SIGKILL (the kernel's out-of-memory killer, or another process), or an exit of its own."""

    kind = "build process died"
    exit_code = 1


def install_fix(extra: str | None) -> str:
    """How to install an extra, said the way this copy was installed: the pip line for an installed
    package, the checkout's own .venv line (pinned by constraints.txt) in a source checkout."""
    import sys

    from arrcoc_edge.install import BUILD_EXTRAS, BUILD_PYTHON, CHECKOUT

    if not extra:
        return "pip install the missing packages"
    if extra in BUILD_EXTRAS and sys.version_info[:2] != BUILD_PYTHON:
        wanted, here = ".".join(map(str, BUILD_PYTHON)), ".".join(map(str, sys.version_info[:2]))
        return (f"building runs on Python {wanted} only (the pinned torch CPU wheel), this is Python {here}: "
                f"make a Python {wanted} venv and pip install 'arrcoc-edge[{extra}]' there (predicting needs none of it)")
    if CHECKOUT:
        return f".venv/bin/pip install -e '.[{extra}]' -c constraints.txt (or bash scripts/setup.sh)"
    return f"pip install 'arrcoc-edge[{extra}]'"


def check_torch_loadable() -> None:
    """InputError when torch cannot be imported here: in a deleted working folder its MKL exits the
    process from C ("Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so"), before any line of
    ours, however absolute every path is. Called before the first torch import of a task."""
    import os
    import sys

    if "torch" in sys.modules:
        return
    try:
        os.getcwd()
    except OSError:
        raise InputError("the working folder no longer exists (it was deleted after the shell entered it), and "
                         "torch cannot load there", "cd into an existing folder and run the command again") from None
