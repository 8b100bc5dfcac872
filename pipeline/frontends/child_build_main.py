"""The child process of arrcoc_edge.build() (frontends/child_build.py says why there is one): the
request from stdin, the build as `invoke build` runs it, the outcome as JSON on the descriptor
named by argv[1]. Its own module: it imports the API and the command line, which the parent side
(imported by the API) must not.
"""
from __future__ import annotations

import json
import os
import signal
import sys

from arrcoc_edge.errors import ArrcocError, BuildInterrupted


def child_main() -> None:
    """The child: the request from stdin, the build as `invoke build` runs it, the outcome on the
    descriptor named by argv[1]. Its exit code is the command's."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # until guarded's own: nothing is written before it
        signal.signal(sig, lambda signum, frame: os._exit(BuildInterrupted.exit_code))
    from arrcoc_edge.frontends import cli
    from arrcoc_edge.frontends.api import build_stages

    result_fd = int(sys.argv[1])
    request = json.loads(sys.stdin.read())
    outcome: dict = {}

    def task() -> int:
        try:
            raw, root = build_stages(request["targets"], request["checkpoint"], request["out"], request["options"],
                                     request["verbose"], show=request["progress"])
        except ArrcocError as exc:
            outcome["error"] = {"module": type(exc).__module__, "name": type(exc).__qualname__,
                                "problem": exc.problem, "fix": exc.fix}
            return exc.exit_code
        outcome["result"] = {"ok": raw.ok, "out": str(root), "seconds": raw.seconds,
                             "exported_cache_hit": raw.exported_cache_hit,
                             "targets": {s.target.name: {"status": s.status, "reason": s.reason,
                                                         "variants": {r.variant.name: r.status for r in s.variants},
                                                         "seconds": s.seconds} for s in raw.stages}}
        return 0 if raw.ok else 3

    code = cli.guarded(task, request["verbose"], "build")
    with open(result_fd, "w") as f:
        if outcome:
            json.dump(outcome, f)
    sys.stdout.flush()
    os._exit(code)
