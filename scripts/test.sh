#!/usr/bin/env bash
# Run the whole test suite. Sets up (or reuses) .venv first, so it works on a clean clone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
