#!/usr/bin/env bash
# An arm64 onnxruntime run under qemu-user, so the phones' ORT files are checked on ARM kernels, and
# the x86-64 emulator, so every .onnx/.ort/.pte is checked on the x86 levels below the host's
# (targets/shared/arm64.py; docs/targets.md, "Emulated CPUs"). No system change: everything is fetched with
# a private apt configuration (own sources.list, lists, cache, status) and unpacked with dpkg -x:
#  - qemu-aarch64 and qemu-x86_64 from Debian trixie's qemu-user (QEMU 10, static): bookworm's QEMU 7.2
#    segfaults inside `import onnxruntime` (it does not emulate the CPU-information files cpuinfo reads);
#  - bookworm's arm64 python3.11 and the libraries it and onnxruntime load, as a sysroot for -L;
#  - the registry's aarch64 wheels of onnxruntime and numpy (and their dependencies), at the
#    versions constraints.txt pins, installed with --target into site/.
# The folder lives outside the repo (CI runs fresh clones on the same machine) and is made whole in a
# temporary folder beside it, then renamed into place; a marker inside it records what it holds, so
# a run whose pins match is a no-op and a pin change makes it again.
#   ARRCOC_ARM64_ROOT  where it lives (default /var/cache/arrcoc-edge/arm64-bookworm)
set -euo pipefail
source "$(dirname "$0")/../setup-common.sh"
cd "$(dirname "$0")/../.."

case "$(uname -m)" in
    aarch64|arm64) exit 0 ;;  # this host's own kernels are arm64's: nothing to emulate
esac
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "setup: no arm64 emulation: this host has no apt-get/dpkg-deb (Debian; macOS runs its own arm64 kernels); see docs/targets.md (arm64)" >&2
    exit 0
fi
root=$(realpath -m "${ARRCOC_ARM64_ROOT:-/var/cache/arrcoc-edge/arm64-bookworm}")
marker=$root/.arrcoc-arm64-ready     # keep in step with targets/shared/arm64.py READY_MARKER
pins=$(grep -E '^(onnxruntime|numpy)==' constraints.txt | sort | tr '\n' ' ')
# RECIPE: bump it when what this script fetches changes, so a root made by the old recipe is made again
RECIPE=2
want="recipe $RECIPE; wheels: ${pins% }"
# the x86-64 emulator came later: a root made without it is made again (its own marker line, so a
# checkout from before still finds the first line and leaves the root alone)
emulators="emulators: qemu-aarch64 qemu-x86_64"
ready() { is_ready "$marker" "$want" && is_ready "$marker" "$emulators"; }
if ready; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup: no arm64 emulation at $root (the onnx-int8 target then records its arm64 check as not measured); as root run: bash scripts/setup.sh" >&2
    exit 0
fi

lock_beside "$root"
if ready; then
    exit 0
fi
# a folder at that path without our marker is not ours: never replaced
if [ -e "$root" ] && [ ! -f "$marker" ]; then
    echo "setup: $root exists and was not made by this script (no $(basename "$marker")); move it away or set ARRCOC_ARM64_ROOT, then run bash scripts/setup.sh again" >&2
    exit 1
fi
start=$(date +%s)
# only our own leftovers (a killed run's temporary folders) are removed
rm -rf --one-file-system "$root".partial.*
new=$(mktemp -d "$root.partial.XXXXXX")
trap 'rm -rf --one-file-system "$new"' EXIT

mirror=$(debian_mirror)
security=$(awk '/^URIs:/ {u=$2} /^Suites:.*-security/ {print u; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
security=${security:-http://deb.debian.org/debian-security}
key=/usr/share/keyrings/debian-archive-keyring.gpg

fetch() {  # fetch NAME ARCH "SOURCES LINES" PACKAGE...: download the packages into $new/NAME/deb
    local name=$1 arch=$2 sources=$3 apt
    shift 3
    apt=$new/apt-$name
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$new/$name/deb"
    : >"$apt/status"
    printf '%s\n' "$sources" >"$apt/sources.list"
    local opts=(-o Dir::Etc::sourcelist="$apt/sources.list" -o Dir::Etc::sourceparts=-
                -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache"
                -o Dir::State::status="$apt/status" -o APT::Sandbox::User=root
                -o APT::Architecture="$arch" -o APT::Architectures="$arch")
    apt-get -qq "${opts[@]}" update
    (cd "$new/$name/deb" && apt-get -qq "${opts[@]}" download "$@")
}

# qemu-aarch64 and qemu-x86_64 out of trixie's qemu-user (the package holds every target's emulator)
fetch qemu amd64 "deb [signed-by=$key] $mirror trixie main" qemu-user
dpkg-deb -x "$new"/qemu/deb/qemu-user_*.deb "$new/qemu/x"
cp "$new/qemu/x/usr/bin/qemu-aarch64" "$new/qemu/x/usr/bin/qemu-x86_64" "$new/"
qemu_version=$("$new/qemu-aarch64" --version | head -1)

# python3.11 and what it and onnxruntime's native libraries load (libstdc++6 for onnxruntime)
fetch sysroot arm64 "deb [arch=arm64 signed-by=$key] $mirror bookworm main
deb [arch=arm64 signed-by=$key] $mirror bookworm-updates main
deb [arch=arm64 signed-by=$key] $security bookworm-security main" \
    libc6 gcc-12-base libgcc-s1 libstdc++6 zlib1g libbz2-1.0 liblzma5 libzstd1 libexpat1 libffi8 libssl3 \
    libcrypt1 libdb5.3 libgdbm6 libgdbm-compat4 libncursesw6 libtinfo6 libreadline8 readline-common \
    libsqlite3-0 libuuid1 libnsl2 libtirpc3 libtirpc-common libgssapi-krb5-2 libk5crypto3 libkeyutils1 \
    libkrb5-3 libkrb5support0 libcom-err2 media-types \
    libpython3.11-minimal libpython3.11-stdlib python3.11-minimal python3.11
for deb in "$new"/sysroot/deb/*.deb; do
    dpkg-deb -x "$deb" "$new/sysroot"
done
rm -rf "$new/sysroot/deb" "$new/qemu" "$new"/apt-*
# an absolute link (python3.11's sitecustomize.py -> /etc/...) resolves on the host, not in the
# sysroot: it would run a file from outside the tree, which the run trusts whole (trusted_tree.py)
find "$new/sysroot" -type l -lname '/*' -delete

# the registry's aarch64 wheels, at constraints.txt's pins (pip resolves their dependencies there)
PYTHON=python3.11
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python
"$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-compile --target "$new/site" -c constraints.txt \
    --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
    --platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 \
    --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
    $pins

# it must run: onnxruntime imported inside the emulator, on arm64
check=$("$new/qemu-aarch64" -L "$new/sysroot" "$new/sysroot/usr/bin/python3.11" -I -c \
    "import sys; sys.path.insert(0, '$new/site'); import platform, onnxruntime; print(platform.machine(), onnxruntime.__version__, platform.python_version())" 2>/dev/null || true)
case "$check" in
    "aarch64 "*) ;;
    *) echo "setup: the arm64 onnxruntime does not start under $qemu_version (got: '$check'); see docs/targets.md (arm64)" >&2; exit 1 ;;
esac
read -r machine ort_version py_version <<<"$check"
printf '%s\n%s\n%s\n%s\n' "$want" "$qemu_version" "python $py_version ($machine), onnxruntime $ort_version" "$emulators" \
    >"$new/.arrcoc-arm64-ready"
chmod 755 "$new"   # mktemp made it 0700: other users of this host may run it, none may write it
if [ -e "$root" ]; then   # made by this script for older pins (checked above): replaced whole
    rm -rf --one-file-system "$root"
fi
mv "$new" "$root"
trap - EXIT
echo "setup: arm64 emulation ($qemu_version; onnxruntime $ort_version on $machine) in $root, $(( $(date +%s) - start )) s, $(du -sh "$root" | cut -f1)"
