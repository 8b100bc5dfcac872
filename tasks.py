"""Invoke tasks in a checkout: the tasks of pipeline/frontends/commands.py (`arrcoc-edge` once installed),
plus the checkout's own `invoke test` and `invoke package` (run `invoke --list`).
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
    from arrcoc_edge.frontends.commands import install_early_handlers

    install_early_handlers("invoke")
    from arrcoc_edge.frontends.commands import suggest_the_nearest

    suggest_the_nearest(sys.modules["__main__"].program)  # `invoke prdict`: names `invoke predict`

from invoke import task  # noqa: E402

from arrcoc_edge.frontends.commands import (  # noqa: E402,F401 - the tasks Invoke collects from this module
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


@task(help={"fast": "the fast tier only: unit and property tests, no end-to-end build, browser or compiler",
            "args": "more pytest arguments, e.g. 'tests/test_model.py -k topk'"})
def test(c, fast=False, args=""):
    """Run the tests as scripts/test.sh does, without its set-up step.

    Both tiers unless --fast; two workers; ends with the 15 slowest tests and the wall time."""
    import shlex
    from pathlib import Path

    script = Path(__file__).resolve().parent / "scripts" / "test.sh"
    c.run(shlex.join(["bash", str(script), *(["--fast"] if fast else []), *shlex.split(args)]),
          env={"ARRCOC_SKIP_SETUP": "1"}, pty=False)


@task(help={"out": "where the checked sdist and wheel go (default dist/)"})
def package(c, out=""):
    """Build the sdist and wheel with `python -m build` and check them (scripts/package.py).

    The wheel is built from the sdist and must equal the tree's; twine check; one top-level name."""
    import shlex
    from pathlib import Path

    script = Path(__file__).resolve().parent / "scripts" / "package.py"
    c.run(shlex.join([sys.executable, str(script), *(["--out", out] if out else [])]), pty=False)
