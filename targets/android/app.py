"""The Android app compiled by a real Kotlin compiler and its logic run on the JVM.

No APK can be built here (the Android Gradle Plugin, aapt2/d8, Gradle and Google's Maven are out of
reach), so this compiles EVERY Kotlin file of mobile/android (main, test, androidTest) with kotlinc
2.0.21 (the app's Kotlin version) against android.jar API 23 and compile-only stubs of the androidx
and ExecuTorch Android API (mobile/android/jvm-stubs/), then runs the app's JUnit 4 tests
(app/src/test) on a plain JVM against the bundle the android stage has just staged: contract
parsing, the golden reader, the parity metrics and gate equal to pipeline/stages/parity.py's (on the .pte
outputs of ExecuTorch's Python runtime and on perturbed copies), the EXIF re-indexing equal to
PIL's, and the typed-query tokenizer equal to Python's `tokenizers` (targets/shared/tokenizer_cases.py). The toolchain comes from scripts/setup.d/40-android-jvm.sh; when it is missing the record
says "not run" with the command that installs it.

`app_build(assets, runners)` returns the manifest's `app_build` record, or raises GateError on a
compile error or a failing test. Compiled classes are cached by the sha256 of every source and the
toolchain's identity, so a second build with unchanged sources only runs the tests; the cache is the
building user's own (pipeline/stages/private_cache.py) and an entry is re-hashed before it is trusted.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from arrcoc_edge import scratch
from arrcoc_edge.errors import GateError
from arrcoc_edge.relevance.signature import OUTPUT_NAMES
from arrcoc_edge.stages.golden import write_array_bundle
from arrcoc_edge.stages.parity import Gate, parity_metrics

from arrcoc_edge.stages import private_cache
from arrcoc_edge.targets.shared import sources as project_files  # (this module has its own sources(): the Kotlin files)
from arrcoc_edge.targets.shared import tokenizer_cases
from arrcoc_edge.targets.shared.mobile_contract import pil_upright, verdict_cases

ANDROID = project_files.MOBILE / "android"
SOURCE_SETS = {  # Gradle's source sets, plus what only this driver compiles
    "stubs": ANDROID / "jvm-stubs",
    "main": ANDROID / "app" / "src" / "main" / "java",
    "test": ANDROID / "app" / "src" / "test" / "java",
    "androidTest": ANDROID / "app" / "src" / "androidTest" / "java",
    "runner": ANDROID / "jvm-runner",
}
# installed by scripts/setup.d/40-android-jvm.sh in a checkout; an installed package has no tools/
KOTLINC = (project_files.TOOLS or Path("/nonexistent")) / "kotlin" / "node_modules" / "kotlin-compiler"
ANDROID_JAR = (project_files.TOOLS or Path("/nonexistent")) / "android-23" / "android.jar"
JUNIT = Path("/usr/share/java/junit4.jar")
HAMCREST = Path("/usr/share/java/hamcrest-core.jar")
ORG_JSON = Path("/usr/share/java/com.android.json.jar")  # a real org.json: android.jar's throws "Stub!"
SETUP = "run `bash scripts/setup.sh` as root (scripts/setup.d/40-android-jvm.sh installs it)"
KOTLINC_FLAGS = ["-no-jdk", "-jvm-target", "17"]  # android.jar brings java.*, as on a device
# Short JVM runs take the quick (C1) JIT tier only: the optimising tier's own compiling costs more
# than it gains in a run of seconds. kotlinc: the app's compile 27.1 -> 17.9 s, the stubs' 6.86 ->
# 5.49 s; app-tokenize's Kotlin tokenizer on 60 texts 1.34 -> 1.13 s (medians of 3, side by side, idle
# 2-core host). The JIT runs the program, it does not change what it computes or writes (the 81
# class files are the same bytes either way), so the class cache's key leaves it out.
QUICK_JVM = ["-XX:TieredStopAtLevel=1"]
KOTLINC_JVM_FLAGS = ["-J" + flag for flag in QUICK_JVM]
RUNNER_MAIN = "org.arrcoc.jvmrunner.JUnitReportKt"
# the class cache: a folder of the building user's own cache, `<cache>/arrcoc-edge/android-classes`
CACHE_NAME = "android-classes"
# Kotlin's metrics vs pipeline/stages/parity.py's, per metric (the rest: `default`). Both sum float64 abs
# errors, in another order (numpy: pairwise; Kotlin: in sequence), so they differ by ~1e-16 per value;
# 1e-12 leaves room for that and nothing else. weights_sum_max_dev sums three float32 weights on both
# sides, where the order of two float32 additions may move the sum by one float32 ulp at 1.0 (1.2e-7).
TOLERANCE = {"default": 1e-12, "weights_sum_max_dev": 2.4e-7}
NOT_VERIFIED = [
    "APK packaging and resources (Android Gradle Plugin, aapt2, d8: Google's Maven is out of reach here)",
    "the ExecuTorch Android runtime (native libraries for arm64-v8a / x86_64) running the .pte files on a device",
    "BitmapFactory's decoding of real photos and ExifInterface reading EXIF (GoldenParityTest on a device)",
    "androidx activity/exifinterface/test and the ExecuTorch Android API beyond the compile-only stubs' signatures",
    "API 24-35 behaviour: compiled against android.jar API 23, the newest Debian packages",
]


@dataclass(frozen=True)
class Toolchain:
    kotlinc: Path
    java: str
    kotlinc_version: str
    java_version: str
    junit_version: str
    android_jar_version: str

    def identity(self) -> str:
        return f"{self.kotlinc_version}|{self.java_version}|{self.android_jar_version}|{self.junit_version}"


def missing_tools() -> list[str]:
    """What of the toolchain is absent, one short name each."""
    wanted = {"kotlinc 2.0.21 (tools/kotlin)": KOTLINC / "bin" / "kotlinc-jvm",
              "android.jar API 23 (tools/android-23)": ANDROID_JAR,
              "JUnit 4 (Debian junit4)": JUNIT, "hamcrest (Debian libhamcrest-java)": HAMCREST,
              "org.json (Debian libandroid-json-java)": ORG_JSON}
    missing = [name for name, path in wanted.items() if not path.is_file()]
    if not shutil.which("java"):
        missing.append("java (Debian openjdk-17-jdk-headless)")
    return missing


def missing_reason() -> str | None:
    missing = missing_tools()
    if missing and project_files.TOOLS is None:
        return project_files.NO_TOOLS
    return f"{', '.join(missing)} missing: {SETUP}" if missing else None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def toolchain() -> Toolchain:
    kotlinc = KOTLINC / "bin" / "kotlinc-jvm"
    java = shutil.which("java")
    kv = subprocess.run([str(kotlinc), "-version"], capture_output=True, text=True, check=True)
    jv = subprocess.run([java, "-version"], capture_output=True, text=True, check=True)
    with zipfile.ZipFile(JUNIT) as jar:
        manifest = jar.read("META-INF/MANIFEST.MF").decode()
    junit = next(line.split(":", 1)[1].strip() for line in manifest.splitlines()
                 if line.startswith("Implementation-Version:"))
    version_file = ANDROID_JAR.parent / "VERSION"
    sdk = version_file.read_text().strip() if version_file.is_file() else "unknown version"
    # `java -version`'s second line: "OpenJDK Runtime Environment (build 17.0.15+6-Debian-1deb12u1)"
    runtime = (jv.stderr + jv.stdout).splitlines()[1].strip()
    java_version = runtime.replace("Runtime Environment (build ", "").rstrip(")")
    return Toolchain(kotlinc, java, _first_line(kv.stderr + kv.stdout).removeprefix("info: "), java_version, junit, sdk)


def sources(group: str) -> list[Path]:
    return sorted(SOURCE_SETS[group].rglob("*.kt"))


def _rel(path: Path) -> str:
    return project_files.shown(path)


def _cache_key(tc: Toolchain) -> str:
    h = hashlib.sha256(tc.identity().encode() + " ".join(KOTLINC_FLAGS).encode())
    for group in SOURCE_SETS:
        for path in sources(group):
            h.update(f"\0{group}\0{_rel(path)}\0".encode() + path.read_bytes())
    return h.hexdigest()[:32]


def _kotlinc(tc: Toolchain, classpath: list[Path], out: Path, files: list[Path]) -> tuple[str, list[str]]:
    """One kotlinc run; returns (command line, its output lines). A compile error is a GateError."""
    cmd = [str(tc.kotlinc), *KOTLINC_JVM_FLAGS, *KOTLINC_FLAGS, "-classpath", os.pathsep.join(map(str, classpath)), "-d", str(out),
           *(str(f) for f in files)]
    proc = subprocess.run(cmd, cwd=ANDROID, capture_output=True, text=True)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    shown_cp = ":".join(p.name if p.parent == out.parent else _rel(p) for p in classpath)
    shown = " ".join([_rel(tc.kotlinc), *KOTLINC_JVM_FLAGS, *KOTLINC_FLAGS, "-classpath", shown_cp, "-d", out.name,
                      *(_rel(f) for f in files)])
    if proc.returncode != 0:
        first = next((line for line in lines if ": error: " in line or line.startswith("error:")), _first_line(proc.stderr))
        raise GateError(f"the Android app does not compile (kotlinc {tc.kotlinc_version}): {first.replace(str(project_files.ROOT) + '/', '')}",
                        "fix the Kotlin source (mobile/android) and rebuild")
    return shown, lines


def _compile_into(tc: Toolchain, work: Path, log: Callable[[str], None]) -> dict:
    """Every Kotlin file compiled into `work` (stubs/, app/); returns what was run."""
    start = time.monotonic()
    # the stubs first, alone: they are only ever on the app's classpath, never among its classes
    stubs_cmd, stubs_out = _kotlinc(tc, [ANDROID_JAR, JUNIT], work / "stubs", sources("stubs"))
    app_files = [p for group in ("main", "test", "androidTest", "runner") for p in sources(group)]
    log(f"[android] kotlinc {tc.kotlinc_version}: {len(app_files)} app files against android.jar + stubs")
    app_cmd, app_out = _kotlinc(tc, [ANDROID_JAR, work / "stubs", JUNIT, HAMCREST], work / "app", app_files)
    record = {"commands": [stubs_cmd, app_cmd], "output": stubs_out + app_out,
              "seconds": round(time.monotonic() - start, 1)}
    (work / "compile.json").write_text(json.dumps(record))
    return record


def compile_app(tc: Toolchain, log: Callable[[str], None], scratch: Path | None = None) -> tuple[Path, dict]:
    """Every Kotlin file compiled; returns (classes dir, what was run). Cached by content in the
    user's own cache (pipeline/stages/private_cache.py): an entry is used only after its files are re-hashed
    against the manifest sealed for this key; an unusable cache folder or a broken entry is a note
    and a fresh compile (into `scratch`, a folder of the caller's that must not exist yet, when the
    cache folder cannot be used; by default a new private temporary folder the caller removes)."""
    made: dict = {}

    def make(folder: Path) -> None:
        made.update(_compile_into(tc, folder, log))

    folder, reused = private_cache.reuse_or_make(
        CACHE_NAME, _cache_key(tc), make, lambda m: log(f"[android] note: {m}"),
        label="class cache", action="compiling", scratch=scratch)
    record = json.loads((folder / "compile.json").read_text()) if reused else made
    return folder / "app", {**record, "cached": reused}


def compile_ahead(dest: Path, log: Callable[[str], None]) -> None:
    """The AheadJob of AndroidTarget.ahead (listed where the toolchain is): compile_app into the
    user's class cache, in a background process (pipeline/building/ahead.py); AlreadyStored when
    the classes are cached already."""
    from arrcoc_edge.stages.conversion_cache import AlreadyStored

    if compile_app(toolchain(), log)[1]["cached"]:
        raise AlreadyStored(CACHE_NAME)


# ---- fixtures: what the JVM tests compare with (pipeline/stages/parity.py's numbers, PIL's EXIF) ----

def read_bundle(folder: Path, json_name: str = "golden.json", bin_name: str = "golden.bin") -> list[dict]:
    """A golden bundle as one dict of arrays per sample."""
    meta = json.loads((folder / json_name).read_text())
    data = (folder / bin_name).read_bytes()
    return [{name: np.frombuffer(data, dtype=np.dtype(a["dtype"]).newbyteorder("<"), count=a["bytes"] // np.dtype(a["dtype"]).itemsize,
                                 offset=a["offset"]).reshape(a["shape"]).astype(a["dtype"])
             for name, a in s["arrays"].items()} for s in meta["samples"]]


def write_outputs(folder: Path, samples: list[dict]) -> None:
    """Outputs per sample in the golden-bundle format (what GoldenBundle reads)."""
    folder.mkdir(parents=True)
    arrays = {f"{n}/{k}": v for n, s in enumerate(samples) for k, v in s.items()}
    index = write_array_bundle(folder / "golden.bin", arrays)
    meta = {"samples": [{"name": f"sample {n}", "arrays": {k.split("/", 1)[1]: v for k, v in index.items()
                                                           if k.startswith(f"{n}/")}} for n in range(len(samples))]}
    (folder / "golden.json").write_text(json.dumps(meta))


OUTPUTS = OUTPUT_NAMES


def _stack(samples: list[dict]) -> dict:
    return {k: np.concatenate([s[k] for s in samples]) for k in OUTPUTS}


def python_verdict(expected: list[dict], got: list[dict], entry: dict) -> dict:
    """pipeline/stages/parity.py on the same arrays, with the artifact's gate, as Golden.kt judges them."""
    gate = Gate(entry["gate"]["max"], entry["gate"]["min"], entry["gate"]["tie_tolerance"])
    metrics = {**parity_metrics(_stack(expected), _stack(got), gate.tie_tolerance), "size_bytes": entry["bytes"]}
    return {"metrics": metrics, "failing": sorted(f.split("=", 1)[0] for f in gate.failures(metrics))}


def perturbed_cases(golden: list[dict], entry: dict) -> list[tuple[str, list[dict] | None, list[dict], bool]]:
    """(name, expected or None for the bundle itself, got, should pass) on sample 0: a swap at the K-th
    place within the tie tolerance (the K+1-th score moved to K-th - tol/2), one with the lowest
    score, and every relevance moved by twice the gate's limit."""
    tol = entry["gate"]["tie_tolerance"]
    copy = [{k: v.copy() for k, v in s.items()} for s in golden]
    scores, topk = copy[0]["relevance"][0], copy[0]["topk_indices"][0]
    order = np.argsort(-scores.astype(np.float64), kind="stable")
    k = topk.shape[0]
    kth, nxt, low = order[k - 1], order[k], order[-1]
    if kth not in topk or scores[low] >= scores[kth] - tol:
        raise GateError("the golden sample has no K-th pick to swap (a flat relevance map)", "check the golden set")
    near = [{kk: v.copy() for kk, v in s.items()} for s in copy]
    near[0]["relevance"][0, nxt] = np.float32(scores[kth] - np.float32(tol / 2))
    inside = [{kk: v.copy() for kk, v in s.items()} for s in near]
    inside[0]["topk_indices"][0][inside[0]["topk_indices"][0] == kth] = nxt
    outside = [{kk: v.copy() for kk, v in s.items()} for s in copy]
    outside[0]["topk_indices"][0][outside[0]["topk_indices"][0] == kth] = low
    limit = entry["gate"]["max"].get("relevance_max_abs", entry["gate"]["max"].get("relevance_mean_abs", 0.01))
    offset = [{kk: (v + np.float32(2 * limit) if kk == "relevance" else v.copy()) for kk, v in s.items()} for s in copy]
    return [("tie-swap-within-tolerance", near, inside, True), ("swap-outside-tolerance", None, outside, False),
            ("relevance-offset-beyond-gate", None, offset, False)]


def write_parity_fixtures(folder: Path, assets: Path, contract: dict, runners: dict[str, Callable]) -> list[dict]:
    """The cases ParityAgainstPythonTest reads: the .pte outputs in ExecuTorch's Python runtime
    (`runners`: artifact key -> run) and perturbed copies, each with pipeline/stages/parity.py's verdict."""
    golden = read_bundle(assets, contract["golden"]["json"], contract["golden"]["bin"])
    only_outputs = [{k: s[k] for k in OUTPUTS} for s in golden]
    cases = []
    for key, run in sorted(runners.items()):
        got = [{k: v for k, v in run({"image": s["image"], "query": s["query"]}).items() if k in OUTPUTS} for s in golden]
        cases.append((f"executorch-{key}", None, got, True, key))
    default = contract["app"]["default_artifact"]
    cases += [(*c, default) for c in perturbed_cases(only_outputs, contract["artifacts"][default])]
    written = []
    for name, expected, got, should_pass, key in cases:
        write_outputs(folder / name / "got", got)
        if expected is not None:  # a whole bundle, as GoldenCheck.judge reads the inputs from it too
            write_outputs(folder / name / "expected", [{**g, **e} for g, e in zip(golden, expected)])
        verdict = python_verdict(expected or only_outputs, got, contract["artifacts"][key])
        written.append({"name": name, "artifact": key, "expected": f"{name}/expected" if expected is not None else None,
                        "got": f"{name}/got", "expect_pass": should_pass, "python": verdict})
    (folder / "cases.json").write_text(json.dumps({"tolerance": TOLERANCE, "cases": written}, indent=1))
    return written


def write_verdict_fixtures(folder: Path, assets: Path, contract: dict) -> None:
    """Python's confidences, verdict lines and strongest cells on the golden bundle's own outputs,
    for VerdictTest (mobile_contract.verdict_cases)."""
    golden = read_bundle(assets, contract["golden"]["json"], contract["golden"]["bin"])
    cases = verdict_cases([s["evidence"] for s in golden], [s["relevance"] for s in golden],
                          [s["topk_indices"] for s in golden])
    folder.mkdir(parents=True)
    (folder / "cases.json").write_text(json.dumps(cases, indent=1))


def write_exif_fixtures(folder: Path, height: int = 5, width: int = 7, pad: int = 3) -> None:
    """A non-square RGBA image (rows padded by `pad` bytes, as a Bitmap's rowBytes may be) and PIL's
    upright RGB bytes for each EXIF orientation, for UprightTest."""
    folder.mkdir(parents=True)
    rgba = np.random.default_rng(28).integers(0, 256, (height, width, 4), dtype=np.uint8)
    stride = width * 4 + pad
    padded = np.zeros((height, stride), dtype=np.uint8)
    padded[:, : width * 4] = rgba.reshape(height, -1)
    (folder / "stored.rgba").write_bytes(padded.tobytes())
    upright = {}
    for o in range(1, 9):
        pil = pil_upright(o, rgba)  # PIL drops alpha in convert("RGB"), keeping the stored colour
        (folder / f"upright_{o}.rgb").write_bytes(np.ascontiguousarray(pil).tobytes())
        upright[str(o)] = {"file": f"upright_{o}.rgb", "height": pil.shape[0], "width": pil.shape[1]}
    spec = {"height": height, "width": width, "stride": stride, "stored": "stored.rgba", "upright": upright}
    (folder / "cases.json").write_text(json.dumps(spec, indent=1))


# ---- the tests and the record ----

def test_classes() -> list[str]:
    """The JUnit classes of app/src/test: one per file, named as the file (Kotlin's convention here)."""
    names = []
    for path in sources("test"):
        package = next(line.split()[1] for line in path.read_text().splitlines() if line.startswith("package "))
        if path.stem.endswith("Test"):
            names.append(f"{package}.{path.stem}")
    return names


def run_tests(tc: Toolchain, classes: Path, assets: Path, fixtures: Path) -> dict:
    runtime = [classes, KOTLINC / "lib" / "kotlin-stdlib.jar", JUNIT, HAMCREST, ORG_JSON]  # no android.jar, no stubs
    report = fixtures / "junit.json"
    cmd = [tc.java, f"-Darrcoc.assets={assets}", f"-Darrcoc.fixtures={fixtures}",
           "-cp", os.pathsep.join(map(str, runtime)), RUNNER_MAIN, str(report), *test_classes()]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if not report.is_file():
        raise GateError(f"the Android app's JVM tests did not run: {_first_line(proc.stderr) or proc.returncode}",
                        "see `java ... org.junit.runner.JUnitCore` in targets/android/app.py")
    result = json.loads(report.read_text())
    if result["failures"]:
        first = result["failures"][0]
        raise GateError(f"the Android app's JVM test {first['name']} failed: {first['message']}",
                        "fix mobile/android (app/src/main or app/src/test) and rebuild")
    if result["skipped"] or proc.returncode != 0:
        raise GateError(f"the Android app's JVM tests skipped {result['skipped_names']} (exit {proc.returncode})",
                        "every test must run here: the build passes -Darrcoc.assets and -Darrcoc.fixtures")
    return result


def check_kotlin_metrics(fixtures: Path, cases: list[dict]) -> dict:
    """Kotlin's numbers next to Python's, held to TOLERANCE once more (the JUnit test did, too)."""
    kotlin = json.loads((fixtures / "parity" / "kotlin-metrics.json").read_text())
    side_by_side = {}
    for case in cases:
        mine, theirs = kotlin[case["name"]]["metrics"], case["python"]["metrics"]
        for name, value in theirs.items():
            if abs(mine[name] - value) > TOLERANCE.get(name, TOLERANCE["default"]):
                raise GateError(f"Kotlin's {name} for {case['name']} is {mine[name]}, pipeline/stages/parity.py's {value}",
                                "make Golden.kt's Parity compute what pipeline/stages/parity.py computes")
        side_by_side[case["name"]] = {"kotlin": mine, "python": theirs, "passed": kotlin[case["name"]]["passed"]}
    return side_by_side


def not_run(reason: str) -> dict:
    return {"status": "not run", "reason": reason, "compiler": "", "compiled_against": [], "files_compiled": [],
            "tests": {"runner": "", "run": 0, "passed": 0, "failed": 0, "names": []}, "seconds": 0.0,
            "not_verified": NOT_VERIFIED}


def compiled_against(tc: Toolchain) -> list[str]:
    return [f"android.jar API 23 (Debian libandroid-23-java {tc.android_jar_version}, tools/android-23)",
            "kotlin-stdlib 2.0.21 (with kotlinc)",
            f"JUnit {tc.junit_version} + hamcrest-core (Debian junit4, libhamcrest-java)",
            "org.json for the JVM tests (Debian libandroid-json-java)",
            "ExecuTorch Android API 1.5.1 (org.pytorch.executorch Tensor, EValue, Module): compile-only stubs, "
            "mobile/android/jvm-stubs/executorch",
            "androidx activity 1.9.3, exifinterface 1.3.7, test ext-junit 1.2.1 / runner 1.6.2: compile-only stubs, "
            "mobile/android/jvm-stubs/androidx"]


def app_build(assets: Path, contract: dict, runners: Callable[[], dict[str, Callable]],
              log: Callable[[str], None]) -> tuple[dict, dict]:
    """Compile the app and run its JVM tests on the staged `assets`: (the manifest's app_build record,
    details: the compile commands and their output, Kotlin's parity numbers next to Python's)."""
    reason = missing_reason()
    if reason:
        log(f"[android] app not compiled: {reason}")
        return not_run(f"toolchain not installed: {reason}"), {}
    start = time.monotonic()
    tc = toolchain()
    with scratch.folder("arrcoc-android-jvm-", family="arrcoc-") as tmp:  # swept after a kill -9
        classes, compiled = compile_app(tc, log, scratch=Path(tmp) / "classes")
        tests_start = time.monotonic()
        fixtures = Path(tmp) / "fixtures"
        cases = write_parity_fixtures(fixtures / "parity", assets, contract, runners())
        write_exif_fixtures(fixtures / "exif")
        write_verdict_fixtures(fixtures / "verdict", assets, contract)
        tokenizer_cases.write_cases(fixtures / "tokenizer", copy_tokenizers=False)  # TokenizerTest
        result = run_tests(tc, classes, assets, fixtures)
        parity = check_kotlin_metrics(fixtures, cases)
    end = time.monotonic()
    seconds = round(end - start, 1)
    log(f"[android] compiled {'(cached) ' if compiled['cached'] else ''}in {compiled['seconds']} s; "
        f"JVM tests {result['run']} run, {result['run'] - result['failed']} passed; {seconds} s")
    files = [_rel(p) for group in SOURCE_SETS for p in sources(group)]
    record = {
        "status": "passed",
        "reason": "",
        "compiler": f"kotlinc-jvm {tc.kotlinc_version.removeprefix('kotlinc-jvm ')}",
        "compiled_against": compiled_against(tc),
        "files_compiled": files,
        "tests": {"runner": f"JUnit {tc.junit_version} (JUnitCore) on {tc.java_version}", "run": result["run"],
                  "passed": result["run"] - result["failed"], "failed": result["failed"], "names": result["names"]},
        "seconds": seconds,
        "not_verified": NOT_VERIFIED,
    }
    detail = {"compile": {"commands": compiled["commands"], "output": compiled["output"],
                          "seconds": compiled["seconds"], "cached": compiled["cached"]},
              "fixtures_and_tests_seconds": round(end - tests_start, 1),
              "parity_vs_python": parity}
    return record, detail
