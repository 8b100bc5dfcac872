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

Swift (targets/ios/swift.py): the host's own or Debian trixie's in a root-only chroot.
No Swift: status "not run", and the build goes on (the artifacts are still right).
The SwiftUI / CoreML / UIKit shell cannot be compiled off Apple's platforms: swiftc parses it
(syntax only), and what only a device shows is listed in `not_verified`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import GateError
from arrcoc_edge.relevance.signature import OUTPUT_NAMES
from arrcoc_edge.stages.golden import write_array_bundle
from arrcoc_edge.stages.parity import Gate, parity_metrics
from arrcoc_edge.targets.ios import encoder as ios_encoder
from arrcoc_edge.targets.ios.swift import Swift, SwiftBuilds, mounts_under
from arrcoc_edge.targets.shared import sources, tokenizer_cases
from arrcoc_edge.targets.shared.mobile_contract import pil_upright, verdict_cases

PACKAGE = sources.MOBILE / "ios"
CORE_SOURCES = ("Package.swift", "ArrcocCore", "CoreTests", "TokenizeCLI")
SHELL_SOURCES = ("ArrcocDemo", "Tests")  # CoreML / UIKit / SwiftUI: parsed only
CHECKS = {"json": "core_checks.json", "bin": "core_checks.bin"}
STAGED_MTIME = 946684800  # 2000-01-01: staged sources are older than any product compiled from them
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
    names = OUTPUT_NAMES
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
    """The metrics arrcoc_edge.stages.parity.Gate fails (the size rule aside: these outputs have no file)."""
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
            "verdict": verdict_cases(expected["evidence"], expected["relevance"], expected["topk_indices"]),
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
        builds = SwiftBuilds(swift, work, _staged_sources(work), compiler, against)
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
