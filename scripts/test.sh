#!/usr/bin/env bash
# Run the whole test suite. Sets up (or reuses) .venv first, so it works on a clean clone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The import contracts (.importlinter): one direction through pipeline/, targets as rooms, no cycles.
.venv/bin/lint-imports
exec .venv/bin/python -m pytest -q "$@"
