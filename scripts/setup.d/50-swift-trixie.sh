#!/usr/bin/env bash
# Swift for compiling and testing the iOS app's Foundation-only core (targets/ios/app.py).
# This host is Debian bookworm, which has no Swift; Debian trixie's `swiftlang` (Swift 6.0.3, with
# Foundation and XCTest) runs in a minimal trixie chroot made from Debian's own packages. The chroot
# lives outside the repo (CI runs in fresh clones on the same machine) and is reused; a marker
# written last tells a complete chroot from one a killed run left half made.
#   ARRCOC_SWIFT_CHROOT  where the chroot lives (default /var/cache/arrcoc-edge/swift-trixie)
set -euo pipefail
source "$(dirname "$0")/../setup-common.sh"

# A host with a working Swift of its own (macOS with Xcode, a Linux swift.org install) needs none.
if command -v swift >/dev/null && swift --version >/dev/null 2>&1; then
    exit 0
fi
# The real path, as targets/ios/swift.py uses it: mounts are listed by it, and the lock beside it is
# one file per real chroot however ARRCOC_SWIFT_CHROOT spells it (a link, a relative path).
root=$(realpath -m "${ARRCOC_SWIFT_CHROOT:-/var/cache/arrcoc-edge/swift-trixie}")
marker=$root/.arrcoc-swift-ready     # keep in step with targets/ios/swift.py READY_MARKER
if [ -f "$marker" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "setup: no Swift toolchain (needed for the iOS app's tests); as root run: bash scripts/setup.sh" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v debootstrap >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

# The same lock targets/ios/swift.py holds while /proc and /dev are mounted in the chroot: nothing
# below may delete or populate it while a compile is running in it.
# Like targets/ios/swift.py open_lock: only a regular file of root's, never a link (followed) or a
# FIFO (open would wait forever).
lock_beside "$root"
[ -f "$marker" ] && exit 0

mounts_under() {  # mount points at or below the chroot, deepest first
    awk -v r="$root" '$5 == r || index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | sort -r
}
unmount_all() {
    local m
    for m in $(mounts_under); do umount "$m" || umount -l "$m"; done
}
trap unmount_all EXIT

if [ -e "$root" ]; then
    echo "setup: $root is incomplete (an interrupted setup); making it again" >&2
    unmount_all
    if [ -n "$(mounts_under)" ]; then
        echo "setup: cannot unmount $(mounts_under | head -1); unmount it, then run bash scripts/setup.sh again" >&2
        exit 1
    fi
    # --one-file-system: even a mount missed above (/dev, /proc) is never descended into
    rm -rf --one-file-system "$root"
fi

# The system's own Debian mirror (deb.debian.org unless this host is configured otherwise).
mirror=$(debian_mirror)
start=$(date +%s)
debootstrap --variant=minbase trixie "$root" "$mirror" >"$root.debootstrap.log" 2>&1 || {
    echo "setup: debootstrap trixie failed; see $root.debootstrap.log" >&2
    exit 1
}
# dpkg's maintainer scripts and swiftc both need /proc and /dev inside the chroot.
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev"
chroot "$root" apt-get update -qq
chroot "$root" apt-get install -y -qq --no-install-recommends swiftlang libc6-dev >/dev/null
chroot "$root" apt-get clean
version=$(chroot "$root" swift --version 2>&1 | head -1)
unmount_all
echo "$version" >"$marker"
echo "setup: $version in $root, $(( $(date +%s) - start )) s, $(du -sh --one-file-system "$root" | cut -f1)"
