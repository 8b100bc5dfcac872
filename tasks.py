"""Invoke tasks in a checkout: the tasks of pipeline/frontends/commands.py (`arrcoc-edge` once installed),
plus `invoke test` (run `invoke --list`).
"""
from __future__ import annotations

import sys


def _run_by_invoke() -> bool:
    """This file was loaded by the `invoke` command (its __main__ holds Invoke's Program), not
    imported by a test or a script, whose own Ctrl-C handling stays as it was."""
    program = getattr(sys.modules.get("__main__"), "program", None)
    return type(program).__module__.startswith("invoke.")


if _run_by_invoke():
    # first: a Ctrl-C while the tasks import their modules is one line and exit 130, not Invoke's exit 1
    from pipeline.frontends.commands import install_early_handlers

    install_early_handlers("invoke")

from invoke import task  # noqa: E402

from pipeline.frontends.commands import (  # noqa: E402,F401 - the tasks Invoke collects from this module
    LOADING_ENV,
    app_tokenize,
    bench,
    build,
    clean,
    merge,
    predict,
    serve,
    train,
    verify,
)


@task
def test(c):
    """Run the test suite (same as scripts/test.sh, without the set-up step)."""
    c.run(f"{sys.executable} -m pytest -q tests", pty=False)
