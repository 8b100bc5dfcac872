#!/usr/bin/env bash
# The project's C++ ExecuTorch runner (targets/shared/et_runner.cpp), built for x86-64 and aarch64,
# so the .pte files are run by the runtime's C++ API as an app's native code runs them, and on the
# phones' arm64 kernels under the qemu-aarch64 of scripts/setup.d/60-arm64-emulation.sh
# (targets/shared/et_runner.py; docs/targets.md, "arm64"). No system change:
#  - Debian bookworm's g++-12-aarch64-linux-gnu and the arm64-cross libraries, fetched with a private
#    apt configuration (own sources.list, lists, cache, status) and unpacked with dpkg -x; the same
#    tree's usr/aarch64-linux-gnu is qemu's -L sysroot for the aarch64 runner;
#  - the registry's executorch aarch64 wheel at constraints.txt's pin: its lib/ and include/ only;
#  - the x86-64 runner from .venv's executorch wheel (the same pin), its libraries copied beside it.
# Everything is made in a temporary folder beside the root, then renamed into place; a marker records
# the pins and the runner source's sha256, so a run whose pins match is a no-op and a change makes it
# again. The tree is root's, 0755: other users may run it, none may write it.
#   ARRCOC_ET_RUNNER_ROOT  where it lives (default /var/cache/arrcoc-edge/executorch-runner)
set -euo pipefail
source "$(dirname "$0")/../setup-common.sh"
cd "$(dirname "$0")/../.."

case "$(uname -m)" in
    x86_64) ;;
    *) exit 0 ;;  # the cross build is made for x86-64 hosts (an arm64 host runs its own kernels)
esac
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null || ! command -v g++ >/dev/null; then
    echo "setup: no C++ ExecuTorch runner: this host lacks apt-get/dpkg-deb or g++; see docs/targets.md (arm64)" >&2
    exit 0
fi
root=$(realpath -m "${ARRCOC_ET_RUNNER_ROOT:-/var/cache/arrcoc-edge/executorch-runner}")
marker=$root/.arrcoc-et-runner-ready     # keep in step with targets/shared/et_runner.py READY_MARKER
pin=$(grep -E '^executorch==' constraints.txt)
source_sha=$(sha256sum targets/shared/et_runner.cpp | cut -d' ' -f1)
CROSS_VERSION=12.2.0-14cross1   # bookworm's g++-12-aarch64-linux-gnu
RECIPE=1   # bump it when what this script fetches or how it compiles changes
want="recipe $RECIPE; $pin; g++-12-aarch64-linux-gnu $CROSS_VERSION; runner $source_sha"
if is_ready "$marker" "$want"; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup: no C++ ExecuTorch runner at $root (the executorch target then records its arm64 check as not measured); as root run: bash scripts/setup.sh" >&2
    exit 0
fi
# a namespace package: its folder is its search location
x86_et=$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec('executorch').submodule_search_locations[0])" 2>/dev/null || true)
if [ -z "$x86_et" ] || [ ! -f "$x86_et/lib/libexecutorch.so" ]; then
    echo "setup: no C++ ExecuTorch runner: .venv has no executorch (the mobile extra); see docs/targets.md (arm64)" >&2
    exit 0
fi

lock_beside "$root"
if is_ready "$marker" "$want"; then
    exit 0
fi
if [ -e "$root" ] && [ ! -f "$marker" ]; then   # a folder without our marker is not ours: never replaced
    echo "setup: $root exists and was not made by this script (no $(basename "$marker")); move it away or set ARRCOC_ET_RUNNER_ROOT, then run bash scripts/setup.sh again" >&2
    exit 1
fi
start=$(date +%s)
rm -rf --one-file-system "$root".partial.*   # only our own leftovers (a killed run's)
new=$(mktemp -d "$root.partial.XXXXXX")
trap 'rm -rf --one-file-system "$new"' EXIT

mirror=$(debian_mirror)
key=/usr/share/keyrings/debian-archive-keyring.gpg
apt=$new/apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$new/deb"
: >"$apt/status"
echo "deb [arch=amd64 signed-by=$key] $mirror bookworm main" >"$apt/sources.list"
opts=(-o Dir::Etc::sourcelist="$apt/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$apt/lists"
      -o Dir::Cache="$apt/cache" -o Dir::State::status="$apt/status" -o APT::Sandbox::User=root
      -o APT::Architecture=amd64 -o APT::Architectures=amd64)
apt-get -qq "${opts[@]}" update
(cd "$new/deb" && apt-get -qq "${opts[@]}" download "g++-12-aarch64-linux-gnu=$CROSS_VERSION" \
    "gcc-12-aarch64-linux-gnu=$CROSS_VERSION" "cpp-12-aarch64-linux-gnu=$CROSS_VERSION" \
    "gcc-12-aarch64-linux-gnu-base=$CROSS_VERSION" binutils-aarch64-linux-gnu \
    libc6-arm64-cross libc6-dev-arm64-cross linux-libc-dev-arm64-cross libgcc-s1-arm64-cross \
    libgcc-12-dev-arm64-cross libstdc++6-arm64-cross libstdc++-12-dev-arm64-cross \
    libisl23 libmpc3 libmpfr6 libgmp10 libzstd1 zlib1g libjansson4)
cross=$new/cross
for deb in "$new"/deb/*.deb; do
    dpkg-deb -x "$deb" "$cross"
done
rm -rf "$new/deb" "$apt"

# the registry's aarch64 executorch wheel: its runtime libraries and headers
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$new/wheel" \
    --python-version 3.11 --implementation cp --abi cp311 --platform manylinux_2_28_aarch64 "$pin"
.venv/bin/python - "$new/wheel" "$new/aarch64" <<'EOF'
import sys, zipfile, pathlib
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith(("executorch/lib/", "executorch/include/"))])
EOF
rm -rf "$new/wheel"
mkdir -p "$new/x86_64/executorch"
cp -a "$x86_et/lib" "$new/x86_64/executorch/lib"

# the flags executorch's lib/cmake/executorch/executorch-config.cmake names; --no-as-needed keeps
# the kernel and XNNPACK libraries whose static initialisers register them
LIBS=(-Wl,--no-as-needed -lexecutorch -lexecutorch_backend_xnnpack -lexecutorch_kernels_optimized
      -lexecutorch_kernels_quantized -lexecutorch_threadpool -Wl,--as-needed)
flags() {  # flags EXECUTORCH_DIR
    echo -O2 -std=c++17 -Wno-deprecated-declarations -DC10_USING_CUSTOM_GENERATED_MACROS -DET_EVENT_TRACER_ENABLED \
        -DET_USE_THREADPOOL -I"$1/include" -I"$1/include/executorch/runtime/core/portable_type/c10" -L"$1/lib"
}
# shellcheck disable=SC2046
g++ $(flags "$x86_et") targets/shared/et_runner.cpp -o "$new/x86_64/arrcoc-et-runner" "${LIBS[@]}" \
    -Wl,-rpath,'$ORIGIN/executorch/lib'
gxx=$cross/usr/bin/aarch64-linux-gnu-g++-12
# shellcheck disable=SC2046
# (the unpacked driver finds its cc1plus, as, ld and headers relative to itself; LD_LIBRARY_PATH
# gives cc1plus and ld the tree's host libraries: libisl, libmpc, binutils' libbfd)
LD_LIBRARY_PATH=$cross/usr/lib/x86_64-linux-gnu "$gxx" --sysroot="$cross" $(flags "$new/aarch64/executorch") targets/shared/et_runner.cpp \
    -o "$new/aarch64/arrcoc-et-runner" "${LIBS[@]}" -Wl,-rpath,'$ORIGIN/executorch/lib'

# both must run: the x86 one here, the aarch64 one under the emulation root's qemu-aarch64
"$new/x86_64/arrcoc-et-runner" >/dev/null 2>&1 || [ $? = 1 ]   # a request of nothing: its one error line
qemu=$(realpath -m "${ARRCOC_ARM64_ROOT:-/var/cache/arrcoc-edge/arm64-bookworm}")/qemu-aarch64
arm_check="not checked (no $qemu)"
if [ -x "$qemu" ]; then
    arm_check=$("$qemu" -cpu cortex-a53 -L "$cross/usr/aarch64-linux-gnu" "$new/aarch64/arrcoc-et-runner" 2>&1 | head -1 || true)
    case "$arm_check" in
        '{"error"'*) arm_check="starts under $("$qemu" --version | head -1)" ;;
        *) echo "setup: the aarch64 ExecuTorch runner does not start under $qemu (got: '$arm_check')" >&2; exit 1 ;;
    esac
fi
printf '%s\n%s\n' "$want" "aarch64: $arm_check" >"$new/.arrcoc-et-runner-ready"
chmod -R go-w "$new"
chmod 755 "$new"   # mktemp made it 0700: other users of this host may run it, none may write it
if [ -e "$root" ]; then   # made by this script for older pins (checked above): replaced whole
    rm -rf --one-file-system "$root"
fi
mv "$new" "$root"
trap - EXIT
echo "setup: C++ ExecuTorch runner (x86-64; aarch64 $arm_check) in $root, $(( $(date +%s) - start )) s, $(du -sh "$root" | cut -f1)"
