# Sourced by the steps in scripts/setup.d/ (never run alone): what several steps do the same way.

# lock_beside ROOT: hold ROOT.lock (on fd 9) for the rest of the step, as the Python side takes the
# same lock (targets/ios/swift.py open_lock): only a regular file of root's, never a link (which
# would be followed) or a FIFO (open would wait forever). Exits the step when it is anything else.
lock_beside() {
    local lock=$1.lock
    mkdir -p "$(dirname "$1")"
    if [ -L "$lock" ] || { [ -e "$lock" ] && { [ ! -f "$lock" ] || [ ! -O "$lock" ]; }; }; then
        echo "setup: $lock is not a regular file of root's (a link, a FIFO or another user's); remove it, then run bash scripts/setup.sh again" >&2
        exit 1
    fi
    exec 9>>"$lock"
    flock 9
}

# is_ready MARKER WANT: the marker a step wrote last holds the line WANT (what it was made from).
is_ready() {
    [ -f "$1" ] && grep -qxF "$2" "$1"
}

# debian_mirror: the system's own Debian mirror (deb.debian.org unless this host says otherwise).
debian_mirror() {
    local mirror
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    echo "${mirror:-http://deb.debian.org/debian}"
}
