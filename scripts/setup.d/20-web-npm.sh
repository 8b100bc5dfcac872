#!/usr/bin/env bash
# onnxruntime-web for the web target: `npm ci` in web/ from the committed lockfile, only when
# web/node_modules is missing or older than the lockfile (the build vendors its WASM files).
set -euo pipefail
cd "$(dirname "$0")/../../web"
stamp=node_modules/.package-lock.json   # npm writes it on every install
if [ -f "$stamp" ] && [ ! package-lock.json -nt "$stamp" ] && [ -f node_modules/onnxruntime-web/dist/ort-wasm-simd-threaded.wasm ]; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    echo "setup: npm is missing (needed for the web target); as root run: apt-get install -y npm" >&2
    exit 0
fi
# --ignore-scripts: nothing in the tree needs an install script (only the vendored dist files are used)
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
touch "$stamp"
echo "setup: web/node_modules ready (onnxruntime-web $(node -p "require('./node_modules/onnxruntime-web/package.json').version"))"
