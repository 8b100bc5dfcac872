"""The iOS app's Foundation-only core (mobile/ios/ArrcocCore) compiled and tested with Swift.

`invoke build --target ios` stages the app bundle, then `check(staging, ...)`:
1. writes `core_checks.json` + `core_checks.bin` into the bundle (pipeline/stages/golden.py's array-bundle
   format): "got" sets for the parity metrics (the default CoreML package's outputs on the golden
   samples from the build host's runtime, and deliberately perturbed outputs that a gate must
   pass or fail) with pipeline/stages/parity.py's numbers and verdicts for them, and a small non-square
   photo with PIL's `ImageOps.exif_transpose` of it for all eight EXIF orientations;
2. runs `swift build --build-tests` and `swift test` on mobile/ios/Package.swift (ArrcocCore + CoreTests;
   in the chroot from the products of an earlier run of the very same sources and compiler, when
   there is one: SwiftBuilds) against the staged bundle
   (ARRCOC_IOS_RESOURCES), the tests asserting Python's numbers themselves and writing their own
   (ARRCOC_IOS_REPORT), which are compared here once more, the tokenizer's tests against
   Python's ids (ARRCOC_IOS_TOKENIZER_CASES, targets/shared/tokenizer_cases.py), and the typed-query
   tests (TypedQueryTests: contract typed_text, length rules, TokenMeanEncoder against
   targets/ios/encoder.py's numbers in typed_checks.json, compared here once more);
3. returns the `app_build` record for the manifest.

Swift: the host's own `swift` when it works (macOS, a swift.org install); else Debian trixie's
`swiftlang` in the chroot scripts/setup.d/50-swift-trixie.sh makes (this host is bookworm, which
has none), run with /proc and /dev mounted inside it for the run only, under the same lock the setup
step takes (one per real chroot path: `<realpath>.lock`, a regular file of root's, never a link or
FIFO), each command in its own PID namespace so that nothing it started outlives the build.
No Swift: status "not run", and the build goes on (the artifacts are still right).
The SwiftUI / CoreML / UIKit shell cannot be compiled off Apple's platforms: swiftc parses it
(syntax only), and what only a device shows is listed in `not_verified`.
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
import time
from pathlib import Path

import numpy as np

from pipeline import subproc
from pipeline.errors import GateError
from pipeline.stages.golden import write_array_bundle
from pipeline.stages.parity import Gate, parity_metrics
from targets.ios import encoder as ios_encoder
from targets.shared import sources, tokenizer_cases
from targets.shared.mobile_contract import pil_upright

PACKAGE = sources.MOBILE / "ios"
CORE_SOURCES = ("Package.swift", "ArrcocCore", "CoreTests", "TokenizeCLI")
SHELL_SOURCES = ("ArrcocDemo", "Tests")  # CoreML / UIKit / SwiftUI: parsed only
CHECKS = {"json": "core_checks.json", "bin": "core_checks.bin"}
CHROOT = Path(os.environ.get("ARRCOC_SWIFT_CHROOT", "/var/cache/arrcoc-edge/swift-trixie"))
READY_MARKER = ".arrcoc-swift-ready"  # written last by scripts/setup.d/50-swift-trixie.sh
WORK_IN_CHROOT = "/work/arrcoc-ios"  # one run at a time (the lock); emptied at each run
# Compiled products (SwiftPM's .build) of earlier runs in the chroot, one folder per sources key
# (SwiftBuilds): a run of the very same sources with the same compiler starts from them.
BUILDS_IN_CHROOT = "/work/arrcoc-ios-builds"
KEEP_BUILDS = 3
STAGED_MTIME = 946684800  # 2000-01-01: staged sources are older than any product compiled from them
GET_SWIFT = "run `bash scripts/setup.sh` as root (Debian trixie's swiftlang in a chroot) or install Swift 6"
NOT_VERIFIED = [
    "the SwiftUI / CoreML / UIKit shell (ArrcocDemo/*.swift) and the on-device XCTest "
    "(Tests/GoldenParityTests.swift): parsed by swiftc (syntax only), not type-checked or built: Apple's "
    "frameworks and Xcode exist only on macOS",
    "the CoreML runtime on a device or Simulator (GoldenParityTests runs the golden bundle through every package)",
    "the MiniLM query encoder package (query_encoder.mlpackage) in CoreML: checked with the NumPy MIL "
    "evaluator at build time (contract.json typed_text.encoder.host_check), never in Apple's runtime",
    "ImageIO's / CoreGraphics' decode of real photos (RelevanceModel.uprightRGB; its re-index Upright.rgb is tested)",
    "UIImage.Orientation -> EXIF value (RelevanceModel.exifOrientation: a UIKit type)",
]
SUMMED = {"relevance_mean_abs", "weights_mean_abs"}  # summation order differs from NumPy's pairwise sum
SUM_RTOL = 1e-12


# ---- what the Swift tests check against ----------------------------------------------------------

def read_bundle(folder: Path, files: dict) -> tuple[dict, bytes]:
    return json.loads((folder / files["json"]).read_text()), (folder / files["bin"]).read_bytes()


def array(data: bytes, entry: dict) -> np.ndarray:
    raw = data[entry["offset"]:entry["offset"] + entry["bytes"]]
    return np.frombuffer(raw, dtype=np.dtype(entry["dtype"]).newbyteorder("<")).reshape(entry["shape"])


def golden_outputs(folder: Path, contract: dict) -> tuple[list[str], dict, list[dict]]:
    """(sample names, stacked reference outputs, per-sample inputs) of the staged golden bundle."""
    index, data = read_bundle(folder, contract["golden"])
    samples = index["samples"]
    names = ("relevance", "topk_indices", "weights")
    expected = {n: np.concatenate([array(data, s["arrays"][n]) for s in samples]) for n in names}
    inputs = [{n: array(data, s["arrays"][n]) for n in ("image", "query")} for s in samples]
    return [s["name"] for s in samples], expected, inputs


def swap_at_kth(expected: dict, sample: int, m: int) -> tuple[dict, float, float]:
    """The reference's top-K with its last `m` picks replaced by the next `m` patches in rank, and
    two tie tolerances: one wide enough for the tie rule to accept the swap, one too narrow."""
    scores = expected["relevance"][sample]
    k = expected["topk_indices"].shape[1]
    order = np.argsort(-scores.astype(np.float64), kind="stable")
    kth = scores[order[k - 1]]
    dropped, added = order[k - m:k], order[k:k + m]
    gaps = np.abs(np.concatenate([scores[dropped], scores[added]]).astype(np.float64) - float(kth))
    nonzero = gaps[gaps > 0]
    got = {n: v.copy() for n, v in expected.items()}
    picks = got["topk_indices"][sample]
    picks[np.isin(picks, dropped)] = added
    return got, float(gaps.max()) * 2 + 1e-6, float(nonzero.min()) / 4 if nonzero.size else 0.0


def parity_cases(expected: dict, runtime_got: dict | None, runtime_name: str, tie: float) -> list[tuple[str, dict, float]]:
    """(name, got outputs, tie tolerance) for the Swift metrics: a runtime's real outputs, slight
    noise, a tie at the K-th place inside and outside the window, and an offset beyond the gate."""
    rng = np.random.default_rng(28)
    noisy = {n: v.copy() for n, v in expected.items()}
    for n in ("relevance", "weights"):
        noisy[n] = (v := noisy[n]) + rng.uniform(-2e-5, 2e-5, v.shape).astype(np.float32)
    swapped, inside, outside = swap_at_kth(expected, sample=0, m=4)
    offset = {**expected, "relevance": np.clip(expected["relevance"] + np.float32(0.02), 0, 1).astype(np.float32)}
    cases = [("eager + uniform noise 2e-5", noisy, tie),
             (f"4 swapped at the K-th place, tie window {inside:.3g} (inside)", swapped, inside),
             (f"4 swapped at the K-th place, tie window {outside:.3g} (outside)", swapped, outside),
             ("relevance + 0.02", offset, tie)]
    if runtime_got is not None:
        cases.insert(0, (runtime_name, runtime_got, tie))
    return cases


def failing_metrics(gate: dict, metrics: dict, tie: float) -> list[str]:
    """The metrics pipeline.stages.parity.Gate fails (the size rule aside: these outputs have no file)."""
    maxima = {k: v for k, v in gate["max"].items() if k != "size_bytes"}
    return sorted(text.split("=", 1)[0] for text in Gate(maxima, gate["min"], tie).failures(metrics))


def write_core_checks(folder: Path, contract: dict, runner=None, runtime_name: str = "") -> dict:
    """core_checks.json + .bin in `folder` (the staged bundle); returns the json written."""
    entry = contract["artifacts"][contract["app"]["default_artifact"]]
    names, expected, inputs = golden_outputs(folder, contract)
    runtime_got = None
    if runner is not None:
        outs = [runner(x) for x in inputs]
        runtime_got = {n: np.concatenate([o[n] for o in outs]).astype(expected[n].dtype)
                       for n in expected}
    arrays, cases = {}, []
    for c, (name, got, tie) in enumerate(parity_cases(expected, runtime_got, runtime_name, entry["gate"]["tie_tolerance"])):
        for s in range(len(names)):
            arrays.update({f"case{c}/{s}/{n}": got[n][s:s + 1] for n in expected})
        metrics = parity_metrics(expected, got, tie)
        cases.append({"name": name, "tie_tolerance": tie, "python_metrics": metrics,
                      "python_failing": {k: failing_metrics(a["gate"], metrics, tie)
                                         for k, a in contract["artifacts"].items()}})
    stored = np.random.default_rng(23).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    arrays["exif/stored"] = stored[None]
    for o in range(1, 9):
        arrays[f"exif/{o}"] = pil_upright(o, stored)[None]
    index = write_array_bundle(folder / CHECKS["bin"], arrays)
    for c, case in enumerate(cases):
        case["samples"] = [{"name": n, "arrays": {k.rsplit("/", 1)[1]: v for k, v in index.items()
                                                   if k.startswith(f"case{c}/{s}/")}}
                           for s, n in enumerate(names)]
    _check_cases_exercise_the_gate(cases)
    data = {"parity_cases": cases, "exif": [{"orientation": o, "upright": str(o)} for o in range(1, 9)],
            "exif_arrays": {k.split("/", 1)[1]: v for k, v in index.items() if k.startswith("exif/")},
            "note": "fixtures for mobile/ios/CoreTests (targets/ios/app.py): not used by the app"}
    (folder / CHECKS["json"]).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def _check_cases_exercise_the_gate(cases: list[dict]) -> None:
    """The perturbed cases must do what their names say, or the Swift gate is not exercised."""
    verdict = {c["name"].rsplit("(", 1)[-1]: c for c in cases}
    inside, outside = verdict.get("inside)"), verdict.get("outside)")
    if not (inside and outside and inside["python_metrics"]["topk_overlap_min"] == 1.0
            and outside["python_metrics"]["topk_overlap_min"] < 1.0):
        raise GateError("the K-th place swap cases do not straddle the tie rule",
                        "fix targets/ios/app.py swap_at_kth for this golden set")


# ---- the Swift toolchain -------------------------------------------------------------------------

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


# ---- compile + test --------------------------------------------------------------------------------

def repo_files(names=CORE_SOURCES) -> list[str]:
    out = []
    for name in names:
        path = PACKAGE / name
        found = [path] if path.is_file() else sorted(path.rglob("*.swift"))
        out += [sources.shown(p) for p in found]
    return out


def _stage_package(work: Path, resources: Path) -> None:
    """The package's sources and the bundle minus the models the tests skip, in an emptied folder.
    The sources get one fixed, old modification time: products SwiftBuilds puts back for the same
    sources are then newer than them, and SwiftPM compiles nothing again."""
    if mounts_under(work):
        raise GateError(f"{work} has something mounted in it", f"as root: umount -R {work}")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for name in (*CORE_SOURCES, *SHELL_SOURCES):
        src = PACKAGE / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=shutil.ignore_patterns("Resources"))
        else:
            shutil.copy2(src, work / name)
    for path in _staged_sources(work):
        os.utime(path, (STAGED_MTIME, STAGED_MTIME))
    shutil.copytree(resources, work / "resources", ignore=shutil.ignore_patterns("*.mlpackage"))
    (work / "report").mkdir()
    tokenizer_cases.write_cases(work / "tokenizer_cases", copy_tokenizers=True)  # for TokenizerTests


def _staged_sources(work: Path) -> list[Path]:
    return sorted(p for name in (*CORE_SOURCES, *SHELL_SOURCES) for p in ([work / name] if (work / name).is_file()
                                                                          else (work / name).rglob("*")) if p.is_file())


class SwiftBuilds:
    """SwiftPM's .build folders of earlier successful runs in the chroot, under BUILDS_IN_CHROOT/<key>,
    where key is the sha256 of every staged source file (path and bytes), the compiler's version and
    what it compiles against. Only the same sources with the same compiler take a folder back, so
    what `swift test` runs is always what these sources compile to (~30 s of a ~45 s run saved). The
    folder is root's inside root's chroot, used under the chroot's lock; one that another user could
    write is not used. Off the chroot (a native Swift's random work folder) nothing is kept."""

    def __init__(self, swift: "Swift", work: Path, compiler: str, against: list[str]):
        self.root = swift.chroot / BUILDS_IN_CHROOT.lstrip("/") if swift.chroot is not None else None
        h = hashlib.sha256(json.dumps([compiler, against, swift.inside(work)]).encode())
        for path in _staged_sources(work):
            h.update(f"\0{path.relative_to(work).as_posix()}\0".encode() + path.read_bytes())
        self.key = h.hexdigest()[:32]

    def _usable(self) -> bool:
        from pipeline.stages.private_cache import private_dir_problem

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


def first_error(text: str) -> str:
    for line in text.splitlines():
        if re.search(r"\berror:|: error\b|XCTAssert\w* failed|Fatal error", line):
            return re.sub(r"\s+", " ", line.strip())[:400]
    tail = [line for line in text.splitlines() if line.strip()]
    return tail[-1].strip()[:400] if tail else "no output"


def test_results(log: str) -> dict:
    cases = re.findall(r"Test Case '(?:-\[)?([\w.]+)[ .](\w+)\]?' (passed|failed)", log)
    names = sorted({f"{cls.split('.')[-1]}.{name}" for cls, name, _ in cases})
    failed = sorted({f"{cls.split('.')[-1]}.{name}" for cls, name, verdict in cases if verdict == "failed"})
    return {"run": len(names), "passed": len(names) - len(failed), "failed": len(failed), "names": names,
            "failed_names": failed}


def compare_report(report: Path, checks: dict) -> list[str]:
    """Swift's own numbers (written by CoreTests) against pipeline/stages/parity.py's and PIL's: problems."""
    problems = []
    measured = {c["name"]: c for c in json.loads((report / "parity.json").read_text())}
    for case in checks["parity_cases"]:
        swift = measured.get(case["name"])
        if swift is None:
            problems.append(f"{case['name']}: not measured by Swift")
            continue
        for name, want in case["python_metrics"].items():
            have = swift["metrics"].get(name)
            ok = have is not None and (abs(have - want) <= SUM_RTOL * abs(want) if name in SUMMED else have == want)
            if not ok:
                problems.append(f"{case['name']}: {name} Swift {have!r} vs Python {want!r}")
        if {k: sorted(v) for k, v in swift["failing"].items()} != case["python_failing"]:
            problems.append(f"{case['name']}: gate verdicts Swift {swift['failing']} vs Python {case['python_failing']}")
    stored = np.random.default_rng(23).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    upright = json.loads((report / "upright.json").read_text())
    for o in range(1, 9):
        h, w, *values = upright.get(str(o), [0, 0])
        if not np.array_equal(np.array(values, dtype=np.uint8).reshape(h, w, 3), pil_upright(o, stored)):
            problems.append(f"EXIF orientation {o}: Swift's upright photo differs from PIL's exif_transpose")
    return problems


def build_and_test(resources: Path, log=lambda s: None, keep_report: Path | None = None) -> dict:
    """Compile ArrcocCore + CoreTests and run them on `resources` (a staged bundle with core_checks).
    Returns the app_build record; a compile error or failing test raises GateError. `keep_report`:
    a folder to copy the Swift tests' own numbers to (tests/test_ios.py reads them)."""
    swift, why = Swift.find()
    if swift is None:
        return {"status": "not run", "reason": why, "compiler": "", "compiled_against": [],
                "files_compiled": [], "products": "", "tests": {"runner": "", "run": 0, "passed": 0, "failed": 0, "names": []},
                "seconds": 0.0, "not_verified": NOT_VERIFIED}
    start = time.monotonic()
    work = swift.workdir()
    try:
        compiler, against, results = _compile_and_test(swift, work, resources, log, keep_report)
    finally:
        if swift.chroot is None:
            shutil.rmtree(work, ignore_errors=True)
    reused = results.pop("products_reused")
    return {
        "status": "passed", "reason": "", "compiler": compiler, "compiled_against": against,
        "files_compiled": repo_files(),
        "products": "an earlier run's, of the same sources and compiler (SwiftBuilds)" if reused else "compiled in this run",
        "tests": {"runner": f"XCTest (swift test, {compiler})", **results},
        "seconds": round(time.monotonic() - start, 1),
        "not_verified": NOT_VERIFIED,
    }


def _compile_and_test(swift: Swift, work: Path, resources: Path, log, keep_report) -> tuple[str, list[str], dict]:
    """One session: parse the shell, build and run CoreTests, compare their numbers with Python's."""
    with swift.session():
        compiler, against = swift.versions()
        _stage_package(work, resources)
        builds = SwiftBuilds(swift, work, compiler, against)
        reused = builds.take(work / ".build")
        w = swift.inside(work)
        log(f"[ios] swift test ({compiler}) in {w}" + (", from an earlier run's products of these sources" if reused else ""))
        shell = " ".join(f"'{p}'" for p in _shell_files(work, w))
        parse = swift.run(f"cd '{w}' && swiftc -parse {shell} 2>&1", {})
        if parse.returncode:
            raise GateError(f"swiftc -parse of the app shell failed: {first_error(parse.stdout)}",
                            "fix the Swift syntax in mobile/ios/ArrcocDemo or mobile/ios/Tests")
        proc = swift.run(f"cd '{w}' && swift build --build-tests 2>&1 && swift test --skip-build 2>&1",
                         {"ARRCOC_IOS_RESOURCES": f"{w}/resources", "ARRCOC_IOS_REPORT": f"{w}/report",
                          "ARRCOC_IOS_TOKENIZER_CASES": f"{w}/tokenizer_cases"})
        results = test_results(proc.stdout)
        if proc.returncode or results.pop("failed_names") or not results["run"]:
            what = "swift test" if results["run"] else "swift build"
            raise GateError(f"iOS core: {what} failed: {first_error(proc.stdout)}",
                            "fix mobile/ios/ArrcocCore or CoreTests (cd mobile/ios && swift test)")
        results["products_reused"] = reused
        builds.keep(work / ".build")
        problems = compare_report(work / "report", json.loads((resources / CHECKS["json"]).read_text()))
        problems += ios_encoder.compare_swift(work / "report", resources)
        if keep_report is not None:
            shutil.copytree(work / "report", keep_report, dirs_exist_ok=True)
    if problems:
        raise GateError(f"iOS core: Swift's numbers differ from Python's: {problems[0]}",
                        "make ArrcocCore/Parity.swift or Upright.swift compute as pipeline/stages/parity.py and PIL do")
    return compiler, against, results


def _shell_files(work: Path, inside: str) -> list[str]:
    return [f"{inside}/{p.relative_to(work).as_posix()}" for name in SHELL_SOURCES
            for p in sorted((work / name).rglob("*.swift"))]
