#!/usr/bin/env bash
# Create .venv at the repo root (reused when present) and install everything pinned.
# Idempotent: safe to run again. Needs Python 3.11; as root it also installs Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
if ! command -v "$PY" >/dev/null; then
    if [ -n "${PYTHON:-}" ]; then
        echo "setup: PYTHON=$PYTHON is not a command -> fix: PYTHON=python3.11 bash scripts/setup.sh (or the path of a Python 3.11)" >&2
        exit 2
    fi
    PY=python3
fi
# One line, no traceback: which Python this is and how to choose a 3.11 (the pinned torch wheel's)
if ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
    found=$("$PY" -c 'import platform; print("is Python", platform.python_version())' 2>/dev/null) || found="does not run"
    echo "setup: $PY $found; the build needs Python 3.11 -> fix: PYTHON=python3.11 bash scripts/setup.sh (apt-get install python3.11, or pass the path of any Python 3.11)" >&2
    exit 2
fi

if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
EXTRAS=$(cat scripts/extras.txt | tr -d ' \n')
# constraints.txt pins every transitive dependency, so a fresh machine gets the same set.
# strict: the editable install is a tree of links laid out as the wheel installs (targets/ inside
# arrcoc_edge/), so lint-imports and every import see the package as users get it; a module added
# to pipeline/ or targets/ is importable after this step runs again.
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[${EXTRAS}]" --config-settings editable_mode=strict

# System packages and npm modules for targets that need them (each script is a no-op when done).
for step in scripts/setup.d/*.sh; do
    [ -e "$step" ] && bash "$step"
done
echo "setup: .venv ready"
