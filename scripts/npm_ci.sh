#!/usr/bin/env bash
# `npm ci` in DIR from its committed lockfile, only when DIR/node_modules is missing, older than the
# lockfile, or lacks MARKER (a file the project uses). Used by the npm steps in scripts/setup.d/.
#   bash scripts/npm_ci.sh DIR MARKER WHAT
set -euo pipefail
dir=$1 marker=$2 what=$3
cd "$(dirname "$0")/../$dir"
stamp=node_modules/.package-lock.json   # npm writes it on every install
if [ -f "$stamp" ] && [ ! package-lock.json -nt "$stamp" ] && [ -f "$marker" ]; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    echo "setup: npm is missing (needed for $what); as root run: apt-get install -y npm" >&2
    exit 0
fi
# --ignore-scripts: nothing in these trees needs an install script (only shipped files are used)
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
touch "$stamp"
echo "setup: $dir/node_modules ready"
