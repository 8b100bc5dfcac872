#!/usr/bin/env bash
# Python 3.13 for testing the inference install where users have it (Debian 13, current macOS
# installers): Debian trixie's python3.13-venv inside the trixie chroot that 50-swift-trixie.sh makes,
# and a wheelhouse of the registry's cp313 wheels of the inference dependencies at constraints.txt's
# pins (plus the registry's unrelated `pipeline` distribution, which the tests install beside ours),
# so tests/test_python313.py makes fresh venvs there offline. No system change on the host.
#   ARRCOC_SWIFT_CHROOT  the chroot (default /var/cache/arrcoc-edge/swift-trixie)
set -euo pipefail
source "$(dirname "$0")/../setup-common.sh"
cd "$(dirname "$0")/../.."

root=$(realpath -m "${ARRCOC_SWIFT_CHROOT:-/var/cache/arrcoc-edge/swift-trixie}")
if [ ! -f "$root/.arrcoc-swift-ready" ]; then
    echo "setup: no trixie chroot at $root (50-swift-trixie.sh makes it as root): the Python 3.13 tests will say so" >&2
    exit 0
fi
wheels=$root/opt/arrcoc-wheels-cp313
marker=$wheels/.arrcoc-py313-ready   # keep in step with tests/test_python313.py READY_MARKER
# the inference dependencies (pyproject.toml's `dependencies`) and the clashing `pipeline` dist
deps=$(grep -E '^(numpy|pillow|onnxruntime|tokenizers|invoke)==' constraints.txt | sort | tr '\n' ' ')
CLASH="pipeline==0.1.0"
RECIPE=1
want="recipe $RECIPE; wheels: ${deps% } $CLASH"
if is_ready "$marker" "$want"; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup: Python 3.13 for the tests needs root (the trixie chroot); as root run: bash scripts/setup.sh" >&2
    exit 0
fi

# the chroot's own lock (50-swift-trixie.sh, targets/ios/swift.py): nobody mounts or remakes it meanwhile
lock_beside "$root"
start=$(date +%s)
mounts_under() { awk -v r="$root" '$5 == r || index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | sort -r; }
unmount_all() { local m; for m in $(mounts_under); do umount "$m" || umount -l "$m"; done; }
trap unmount_all EXIT
unmount_all
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"
chroot "$root" sh -c 'command -v python3.13 >/dev/null && python3.13 -c "import ensurepip, venv"' 2>/dev/null || {
    chroot "$root" apt-get update -qq
    chroot "$root" apt-get install -y -qq --no-install-recommends python3.13-venv >/dev/null
    chroot "$root" apt-get clean
}
py_version=$(chroot "$root" python3.13 -c 'import platform; print(platform.python_version())')
unmount_all

# the registry's cp313 manylinux wheels, resolved by pip for Python 3.13 at the pinned versions
PYTHON=python3.11
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python
rm -rf --one-file-system "$wheels".partial.*
new=$(mktemp -d "$wheels.partial.XXXXXX")
trap 'unmount_all; rm -rf --one-file-system "$new"' EXIT
"$PYTHON" -m pip download -q --disable-pip-version-check -d "$new" -c constraints.txt \
    --only-binary=:all: --python-version 3.13 --implementation cp --abi cp313 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any \
    $deps "$CLASH"
printf '%s\npython %s\n' "$want" "$py_version" >"$new/.arrcoc-py313-ready"
chmod 755 "$new"
rm -rf --one-file-system "$wheels"
mv "$new" "$wheels"
trap unmount_all EXIT
echo "setup: Python $py_version in $root with $(ls "$wheels"/*.whl | wc -l) cp313 wheels, $(( $(date +%s) - start )) s"
