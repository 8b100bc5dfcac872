#!/usr/bin/env bash
# Run the tests. Sets up (or reuses) .venv first, so it works on a clean clone.
#   bash scripts/test.sh          everything (CI and .ci/run run this one)
#   bash scripts/test.sh --fast   unit and property tests: no end-to-end build, browser or compiler
# Other arguments go to pytest (e.g. tests/test_model.py -k topk). Two xdist workers, one test
# file per worker at a time (--dist loadfile: a file's module fixtures are made once), builds
# shared across files and workers (tests/conftest.py); ARRCOC_TEST_WORKERS=0 runs in one process.
# Ends with the 15 slowest tests, the host factor against tests/durations.json's run (a run of whole
# files only) and the wall time (issue 44). The heaviest files start first, by
# tests/durations.json; ARRCOC_RECORD_DURATIONS=1 rewrites it from the run.
set -euo pipefail
cd "$(dirname "$0")/.."
# ARRCOC_SKIP_SETUP=1 (`invoke test`, run from a ready .venv) skips the set-up step
[[ -n "${ARRCOC_SKIP_SETUP:-}" ]] || bash scripts/setup.sh
# The import contracts (.importlinter): one direction through pipeline/, targets as rooms, no cycles,
# checked on the package laid out as it installs.
.venv/bin/python scripts/lint_imports.py
select=()
if [[ "${1:-}" == "--fast" ]]; then
    shift
    select=(-m "not slow and not browser and not compiler")
fi
workers="${ARRCOC_TEST_WORKERS:-2}"
# Two workers share the cores: runtimes sleep between calls instead of spinning (docs/speed.md,
# "Builds beside other work": two builds at once 62.4 -> 54.1 s, measured).
export ARRCOC_ORT_SPINNING="${ARRCOC_ORT_SPINNING:-0}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
started=$(date +%s)
status=0
.venv/bin/python -m pytest -q -n "$workers" --dist loadfile --no-loadscope-reorder --durations=15 "${select[@]}" "$@" || status=$?
took=$(( $(date +%s) - started ))
echo "wall time: $(( took / 60 )) min $(( took % 60 )) s for the tests (pytest exit $status)"
exit "$status"
