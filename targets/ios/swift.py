"""The Swift toolchain the iOS core is compiled and tested with (targets/ios/app.py runs it).

Swift: the host's own `swift` when it works (macOS, a swift.org install); else Debian trixie's
`swiftlang` in the chroot scripts/setup.d/50-swift-trixie.sh makes (this host is bookworm, which
has none), run with /proc and /dev mounted inside it for the run only, under the same lock the setup
step takes (one per real chroot path: `<realpath>.lock`, a regular file of root's, never a link or
FIFO), each command in its own PID namespace so that nothing it started outlives the build.
SwiftBuilds keeps a successful run's compiled products in the chroot for a later run of the very
same sources and compiler.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

from arrcoc_edge import subproc
from arrcoc_edge.errors import GateError

CHROOT = Path(os.environ.get("ARRCOC_SWIFT_CHROOT", "/var/cache/arrcoc-edge/swift-trixie"))
READY_MARKER = ".arrcoc-swift-ready"  # written last by scripts/setup.d/50-swift-trixie.sh
WORK_IN_CHROOT = "/work/arrcoc-ios"  # one run at a time (the lock); emptied at each run
# Compiled products (SwiftPM's .build) of earlier runs in the chroot, one folder per sources key
# (SwiftBuilds): a run of the very same sources with the same compiler starts from them.
BUILDS_IN_CHROOT = "/work/arrcoc-ios-builds"
KEEP_BUILDS = 3
GET_SWIFT = "run `bash scripts/setup.sh` as root (Debian trixie's swiftlang in a chroot) or install Swift 6"


class Swift:
    """Runs commands with Swift 6: natively, or inside the trixie chroot (root only)."""

    def __init__(self, chroot: Path | None):
        # The real path: mounts are listed by it in /proc/self/mountinfo, and the lock is one file
        # per real chroot however ARRCOC_SWIFT_CHROOT spells it (a link, a relative path).
        self.chroot = Path(os.path.realpath(chroot)) if chroot is not None else None

    @classmethod
    def find(cls) -> tuple[Swift | None, str]:
        """(toolchain, why not) for this host."""
        native = shutil.which("swift")
        if native and subprocess.run([native, "--version"], capture_output=True).returncode == 0:
            return cls(None), ""
        if not (CHROOT / READY_MARKER).is_file():
            return None, f"no Swift toolchain (no `swift` on PATH, no chroot at {CHROOT}): {GET_SWIFT}"
        if os.geteuid() != 0:
            return None, f"Swift is in the chroot {CHROOT}, which only root can enter: run the build as root"
        if not shutil.which("unshare"):
            return None, "util-linux's `unshare` is missing (Swift runs in its own PID namespace): apt-get install util-linux"
        return cls(CHROOT), ""

    def workdir(self) -> Path:
        """Where the package is copied to run (inside the chroot, when there is one)."""
        if self.chroot is None:
            return Path(tempfile.mkdtemp(prefix="arrcoc-ios-swift-"))
        return self.chroot / WORK_IN_CHROOT.lstrip("/")

    def inside(self, path: Path) -> str:
        return str(path) if self.chroot is None else "/" + path.relative_to(self.chroot).as_posix()

    def run(self, script: str, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
        """`script` under sh, tied to the build's life (pipeline/subproc.py: SIGKILL when the build
        dies). In the chroot it runs as PID 1 of its own PID namespace (unshare --kill-child): when
        the build dies, is interrupted or times out, unshare dies, its child is killed, and the
        kernel kills every process left in the namespace: no swift-build or swift-frontend goes on
        compiling."""
        if self.chroot is None:
            return subproc.run(["sh", "-c", script], env={**os.environ, **env}, capture_output=True,
                               text=True, timeout=timeout)
        base = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": "/root", "LANG": "C.UTF-8"}
        # --mount-proc: the chroot's /proc shows this namespace's processes (in a mount namespace of
        # its own, gone with it): swift-build matches its compilers' messages by their PIDs
        cmd = ["unshare", "--pid", "--fork", "--kill-child=SIGKILL", f"--mount-proc={self.chroot / 'proc'}",
               "chroot", str(self.chroot), "/bin/sh", "-c", script]
        return subproc.run(cmd, env={**base, **env}, capture_output=True, text=True, timeout=timeout)

    def versions(self) -> tuple[str, list[str]]:
        """(compiler version line, what the code is compiled against)."""
        out = self.run("swift --version 2>&1", {}).stdout.strip().splitlines()
        version = " ".join(line.strip() for line in out if line.strip())
        if self.chroot is None:
            return version, [f"Foundation and XCTest of the host's toolchain ({version})"]
        pkgs = self.run("dpkg-query -W -f '${Package} ${Version}\\n' swiftlang libc6-dev", {}).stdout.split("\n")
        found = dict(line.split(" ", 1) for line in pkgs if " " in line)
        return version, [f"swift-corelibs-foundation and swift-corelibs-xctest of Debian trixie swiftlang "
                         f"{found.get('swiftlang', '?')}", f"glibc (Debian trixie libc6-dev {found.get('libc6-dev', '?')})"]

    @contextlib.contextmanager
    def session(self):
        """/proc and /dev mounted in the chroot for the duration, under the setup step's lock."""
        if self.chroot is None:
            yield
            return
        with open_lock(lock_path(self.chroot)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another build, or setup remaking the chroot
            with _signals_as_exceptions():
                unmount_all(self.chroot)  # left by a run killed with SIGKILL: nobody else holds the lock
                try:
                    _mount(["-t", "proc", "proc", str(self.chroot / "proc")])
                    _mount(["--rbind", "/dev", str(self.chroot / "dev")])
                    _mount(["--make-rslave", str(self.chroot / "dev")])
                    yield
                finally:
                    unmount_all(self.chroot)


def lock_path(chroot: Path) -> Path:
    """One lock per real chroot, beside it (scripts/setup.d/50-swift-trixie.sh takes the same)."""
    return Path(f"{os.path.realpath(chroot)}.lock")


@contextlib.contextmanager
def open_lock(path: Path):
    """The lock file, opened without following a link or waiting on a FIFO, and only when it is a
    regular file of this user's: anything else at that path is refused in one line."""
    fix = f"remove {path} (as root), then rebuild"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise GateError(f"cannot open the Swift chroot's lock {path}: {exc.strerror}"
                        + (" (a link)" if os.path.islink(path) else ""), fix) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise GateError(f"the Swift chroot's lock {path} is not a regular file of yours "
                            f"(mode {st.st_mode:o}, uid {st.st_uid})", fix)
        yield fd
    finally:
        os.close(fd)


def _mount(args: list[str]) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode:
        raise GateError(f"mount {' '.join(args)} failed: {proc.stderr.strip()}",
                        "run the build as root on a host that allows mounts (or install Swift natively)")


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first (/proc/self/mountinfo escapes spaces as \\040
    and lists real paths: `root` is compared by its own)."""
    root = Path(os.path.realpath(root))
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if point == str(root) or point.startswith(f"{root}/"):
            points.append(point)
    return sorted(points, key=lambda p: -p.count("/"))


def unmount_all(root: Path) -> None:
    for point in mounts_under(root):
        if subprocess.run(["umount", point], capture_output=True).returncode:
            subprocess.run(["umount", "-l", point], capture_output=True)  # busy: detach it now
    left = mounts_under(root)
    if left:
        raise GateError(f"could not unmount {left[0]} from the Swift chroot", f"as root: umount -l {left[0]}")


@contextlib.contextmanager
def _signals_as_exceptions():
    """SIGTERM/SIGHUP (CI cancelling a job) unwind like Ctrl-C, so the mounts come off."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


# ---- compiled products kept for the same sources -------------------------------------------------

class SwiftBuilds:
    """SwiftPM's .build folders of earlier successful runs in the chroot, under BUILDS_IN_CHROOT/<key>,
    where key is the sha256 of every staged source file (path and bytes), the compiler's version and
    what it compiles against. Only the same sources with the same compiler take a folder back, so
    what `swift test` runs is always what these sources compile to (~30 s of a ~45 s run saved). The
    folder is root's inside root's chroot, used under the chroot's lock; one that another user could
    write is not used. Off the chroot (a native Swift's random work folder) nothing is kept."""

    def __init__(self, swift: Swift, work: Path, staged: list[Path], compiler: str, against: list[str]):
        """`staged`: the source files staged in `work` (what the build compiles)."""
        self.root = swift.chroot / BUILDS_IN_CHROOT.lstrip("/") if swift.chroot is not None else None
        h = hashlib.sha256(json.dumps([compiler, against, swift.inside(work)]).encode())
        for path in staged:
            h.update(f"\0{path.relative_to(work).as_posix()}\0".encode() + path.read_bytes())
        self.key = h.hexdigest()[:32]

    def _usable(self) -> bool:
        from arrcoc_edge.stages.private_cache import private_dir_problem

        if self.root is None:
            return False
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return private_dir_problem(self.root) is None

    def take(self, dest: Path) -> bool:
        """Move the products of this key to `dest` (SwiftPM's .build); False when there are none."""
        if not self._usable() or not (self.root / self.key).is_dir() or (self.root / self.key).is_symlink():
            return False
        os.rename(self.root / self.key, dest)
        return True

    def keep(self, build: Path) -> None:
        """Keep `build` (a successful run's .build) for this key, and the KEEP_BUILDS newest keys."""
        if not self._usable() or not build.is_dir():
            return
        _remove(self.root / self.key)
        os.rename(build, self.root / self.key)
        os.utime(self.root / self.key)
        kept = sorted(self.root.iterdir(), key=lambda p: p.lstat().st_mtime, reverse=True)
        for old in kept[KEEP_BUILDS:]:
            _remove(old)


def _remove(path: Path) -> None:
    """Whatever is at `path`: a link or file itself, a folder with its content."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
