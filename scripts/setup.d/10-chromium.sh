#!/usr/bin/env bash
# Debian's Chromium for the browser checks (web target, report test). Playwright drives it via
# executable_path: its own browser download does not work on these machines.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup: /usr/bin/chromium is missing; as root run: apt-get install -y chromium" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "setup: installed $(/usr/bin/chromium --version)"
