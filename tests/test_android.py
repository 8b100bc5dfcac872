"""Android target: a real build of it (the session's apps build, `invoke build --target android,ios`;
android builds executorch first). The app's assets match contract.json byte for byte and land where
the Kotlin code opens them; the build compiles every Kotlin file of the app with kotlinc 2.0.21
against android.jar and runs its JUnit tests on the JVM against the bundle it staged (contract
parsing, golden reader, parity metrics and gate equal to pipeline/stages/parity.py's, EXIF
re-indexing equal to PIL's), and a build whose app copy cannot be written leaves the previously
published artifacts untouched. The app's typed-query path for the shipped checkpoint is here too
(tests/test_app_typed_query.py has the helpers and the reference checkpoint's case).
What is still read from the sources is only what nothing here can run: the Android shell's decoder
calls (BitmapFactory on a device) and the asset names the APK opens."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from mobile_build import ANDROID, bundle_in_app, seed_user_files, source_function, user_files_left
from arrcoc_edge.relevance.model import MAX_SIDE, MIN_SIDE
from test_app_typed_query import QUERIES, app_ids, check_typed_queries
from arrcoc_edge.targets.shared import sources

pytest.importorskip("executorch")
pytestmark = [pytest.mark.slow, pytest.mark.compiler]

# What runs on a device: the app and its instrumented test (the JVM tests name their fixture files)
KOTLIN_APP = sorted(p for folder in ("main", "androidTest") for p in (ANDROID / "app" / "src" / folder).rglob("*.kt"))


def require_jvm_toolchain() -> None:
    """The app's compile and JVM tests are part of this suite: without their toolchain it fails, in one line."""
    from arrcoc_edge.targets.android import app as android_app

    reason = android_app.missing_reason()
    if reason:
        pytest.fail(f"Android app toolchain missing: {reason}", pytrace=False)


@pytest.fixture(scope="module")
def built(android_build):
    """(out dir, app assets dir) of the session's one `invoke build --target android,ios` (conftest
    android_build): the app copy went to a temp folder holding the user's seeded files, never the
    repo's app. Read-only: tests that rebuild copy it first."""
    return android_build.out, android_build.android_app


@pytest.fixture(scope="module")
def contract(built) -> dict:
    return json.loads((built[0] / "android" / "contract.json").read_text())


@pytest.fixture(scope="module")
def golden(built, contract) -> dict:
    return json.loads((built[1] / contract["golden"]["json"]).read_text())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def all_keys(node) -> set[str]:
    if isinstance(node, dict):
        return set(node) | set().union(*(all_keys(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(all_keys(v) for v in node)) if node else set()
    return set()


def test_manifest_entry(built):
    """Over 60 s as the first reader of the session's apps build (conftest android_build, `--target
    android,ios`: the ExecuTorch lowering, MiniLM's two .pte lowerings, kotlinc, the CoreML
    conversions and the Swift core, cold; ~6.5 min in a whole run)."""
    manifest = json.loads((built[0] / "manifest.json").read_text())
    entry = manifest["targets"]["android"]
    assert entry["status"] == "unverified" and "Android" in entry["reason"]
    variant = entry["variants"]["app-assets"]
    assert variant["size"]["bytes"] <= variant["size"]["budget"]
    # carries the default .pte's gate and the numbers the executorch stage measured on the same bytes
    assert variant["parity"]["passed"] and variant["parity"]["metrics"]["topk_overlap_min"] == 1.0
    assert entry["provenance"]["upstream"]["executorch"]
    assert manifest["targets"]["executorch"]["status"] == "published"  # measured in the ExecuTorch runtime


def test_contract_matches_the_published_pte_files_byte_for_byte(built, contract):
    from arrcoc_edge.targets.android import target as android
    from arrcoc_edge.targets.shared import mobile_contract

    out, app = built
    manifest = json.loads((out / "manifest.json").read_text())["targets"]["executorch"]
    assert set(contract["artifacts"]) == set(manifest["variants"])
    for key, art in contract["artifacts"].items():
        # the very file the executorch stage published and measured, by name, bytes and sha256
        assert manifest["variants"][key]["files"] == [f"executorch/{art['file']}"]
        for folder in (out / "executorch", out / "android", app):
            path = folder / art["file"]
            assert path.stat().st_size == art["bytes"] and sha256(path) == art["sha256"], path
        assert art["gate"] == manifest["variants"][key]["parity"]["gate"]
        assert art["max_batch"] == manifest["variants"][key]["info"]["max_batch"] >= 1
        assert [t["name"] for t in art["inputs"]] == ["image", "query"]
        assert [t["name"] for t in art["outputs"]] == ["relevance", "topk_indices", "weights", "evidence"]
        assert art["outputs"][3] == {"name": "evidence", "dtype": "float32", "shape": ["batch", 4]}
        assert "evidence_max_abs" in art["gate"]["max"]  # held to parity like the other outputs
        assert art["topk_dtype"] == "int64" and art["outputs"][1]["dtype"] == "int64"
        assert art["inputs"][0]["shape"] == ["batch", "height", "width", 3] and art["inputs"][0]["dtype"] == "uint8"
        # the method the app calls for 16G x 16G photos exists in that very file (issue 30)
        from executorch.runtime import Runtime

        names = Runtime.get().load_program(out / "executorch" / art["file"]).method_names
        assert art["square_method"] == "forward_16g" and set(names) == {"forward", "forward_16g"}
    assert contract["app"]["default_artifact"] in contract["artifacts"]
    # the calibration the build published beside manifest.json, carried for the app's verdict
    published = out / "calibration.json"
    assert contract["calibration"] == (json.loads(published.read_text()) if published.exists() else None)
    assert mobile_contract.check_files(contract, out / "android") and android.check_bundle(contract, app)
    # the app copy is exactly what was published, nothing more, nothing less (besides the user's files)
    assert tree(out / "android") == bundle_in_app(app)
    typed = contract["typed_text"]
    typed_files = {typed["tokenizer"]["file"], typed["encoder"]["file"]} if typed["supported"] else set()
    assert set(bundle_in_app(app)) == {mobile_contract.CONTRACT_FILE, contract["app"]["sample_image"],
                              *contract["golden"].values(), *(a["file"] for a in contract["artifacts"].values()),
                              *typed_files}


def test_presets_are_real_embeddings_or_absent_with_a_reason(contract):
    presets = contract["presets"]
    if not presets["items"]:
        assert presets["note"]
        return
    for item in presets["items"]:
        v = np.asarray(item["embedding"], dtype=np.float64)
        assert v.shape == (contract["model"]["query_dim"],) and abs(np.linalg.norm(v) - 1.0) < 1e-3


def test_golden_bundle_is_keyed_by_the_contract_tensor_names(built, contract, golden):
    entry = contract["artifacts"][contract["app"]["default_artifact"]]
    data = (built[1] / contract["golden"]["bin"]).read_bytes()
    for sample in golden["samples"]:  # one batch-1 run each, photos of their own sizes
        for tensor in entry["inputs"] + entry["outputs"]:
            arr = sample["arrays"][tensor["name"]]
            assert arr["dtype"] == tensor["dtype"] and arr["shape"][0] == 1
            assert all(d is None or isinstance(want, str) or d == want
                       for d, want in zip(arr["shape"][1:], tensor["shape"][1:]))
            assert arr["offset"] + arr["bytes"] <= len(data)
    shapes = [s["arrays"]["image"]["shape"] for s in golden["samples"]]
    assert any(h != w for _, h, w, _ in shapes), "the self-check includes a whole non-square photo"


KOTLIN_MODEL_PATH = ("RelevanceModel.kt", "Photo.kt", "Golden.kt", "Contract.kt", "Assets.kt")  # photo -> .pte
# Anything that crops, scales, resamples or converts the photo to floats itself
RESAMPLING_KOTLIN = ("createScaledBitmap", "createBitmap", "inSampleSize", "inDensity", "inTargetDensity", "Matrix",
                     "Canvas", "drawBitmap", "extractThumbnail", "getPixels", "255f", "/ 255", "fromBlob(photo", "Rect(")


def kotlin_function(text: str, name: str) -> str:
    return source_function(text, "fun", name)


def test_kotlin_hands_over_the_photo_as_decoded(contract):
    """No crop, no resample, no float conversion between a photo and the .pte: the artifact does
    the reference's resize. Static on purpose: these are the Android shell's calls into BitmapFactory
    and ExecuTorch, which only a device runs (GoldenParityTest); the re-indexing they feed runs on the
    JVM against PIL (UprightTest) and the tensor shapes are the ones ContractTest checks."""
    pre = contract["preprocessing"]
    assert pre["crop"] is None and pre["resize"] is None and pre["scale"] is None
    assert (pre["layout"], pre["min_side"], pre["max_side"]) == ("NHWC", MIN_SIDE, MAX_SIDE)
    sources = {p.name: p.read_text() for p in KOTLIN_APP}
    for name in KOTLIN_MODEL_PATH:
        found = [t for t in RESAMPLING_KOTLIN if t in sources[name]]
        assert not found, f"{name} resamples or converts the photo: {found}"
    for name, text in sources.items():
        assert "createScaledBitmap" not in text, name
        # the model's 16G input size is the artifact's business: parsed, never used to resize; the one
        # other use picks the .pte's square-photo method for a photo already of that size
        allowed = ("photo.height == imageSize && photo.width == imageSize", "private val imageSize: Int",
                   "contract.model.imageSize)", "/** contract.model.image_size")
        rest = text
        for use in allowed if name == "RelevanceModel.kt" else ():
            assert use in rest, use
            rest = rest.replace(use, "")
        assert "imageSize" not in rest or name == "Contract.kt", name
    assert sources["Contract.kt"].count("imageSize") == 2  # the field and its parse
    # the screen's own copy (inSampleSize, Matrix) is confined to decodeForDisplay and never reaches the model
    activity = sources["MainActivity.kt"]
    display = kotlin_function(activity, "decodeForDisplay")
    outside = activity.replace(display, "")
    assert "inSampleSize" in display and not any(t in outside for t in ("inSampleSize", "createBitmap", "Matrix()"))
    assert re.findall(r"\bval input = ([\w.]+)\(", outside) == ["Preprocess.decodePhoto"]
    assert "photo = input" in outside and "m.predict(input," in outside
    # the model's input: full-size decode, unpremultiplied, the decoder's RGBA bytes, then Upright.rgb
    decode = kotlin_function(sources["RelevanceModel.kt"], "decodePhoto")
    for needed in ("inPremultiplied = false", "inScaled = false", "Bitmap.Config.ARGB_8888", "copyPixelsToBuffer",
                   "Upright.rgb(rgba, bitmap.height, bitmap.width, bitmap.rowBytes, exifOrientation(open))"):
        assert needed in decode, needed
    assert "Tensor.fromBlobUnsigned(photo.rgb, imageSpec.shapeFor(1, photo.height, photo.width))" in sources["RelevanceModel.kt"]
    assert 'entry.imageInput.dtype != "uint8"' in sources["RelevanceModel.kt"]


def test_sample_photo_is_the_golden_whole_photo(built, contract, golden):
    """sample.png decodes (PIL, as load_photo) to exactly the golden sample contract.app.sample_golden
    names: a whole non-square photo at its own size. GoldenParityTest.samplePhotoDecodesToTheGoldenBytes
    makes the same comparison with the app's own decoder on the device."""
    from arrcoc_edge.stages.golden import load_photo

    app = contract["app"]
    sample = next(s for s in golden["samples"] if s["name"] == app["sample_golden"])
    arr = sample["arrays"]["image"]
    data = (built[1] / contract["golden"]["bin"]).read_bytes()[arr["offset"]:arr["offset"] + arr["bytes"]]
    expected = np.frombuffer(data, dtype=np.uint8).reshape(arr["shape"])[0]
    photo = load_photo(built[1] / app["sample_image"])
    assert photo.shape[0] != photo.shape[1] and np.array_equal(photo, expected)


def test_app_looks_where_the_build_copies():
    """Static: which asset names the APK opens is only seen on a device (Assets.kt's AssetManager calls)."""
    from arrcoc_edge.targets.android import target as android
    from arrcoc_edge.targets.shared import mobile_contract

    # Gradle's default assets folder, not redefined by the app's build script
    assert android.APP_ASSETS == ANDROID / "app" / "src" / "main" / "assets"
    gradle = (ANDROID / "app" / "build.gradle.kts").read_text()
    assert "srcDirs" not in gradle and "assets.srcDir" not in gradle
    assert "app/src/main/assets/" in (ANDROID / ".gitignore").read_text().splitlines()
    sources = {p.name: p.read_text() for p in KOTLIN_APP}
    # the only asset name written in the Kotlin code is contract.json (a const in Contract.kt)
    assert f'const val FILE_NAME = "{mobile_contract.CONTRACT_FILE}"' in sources["Contract.kt"]
    literals = {m for text in sources.values() for m in re.findall(r'"([^"\s$]+\.(?:json|pte|bin|png|jpe?g))"', text)}
    assert literals == {mobile_contract.CONTRACT_FILE}
    opened = [a.strip() for text in sources.values() for a in re.findall(r"assets\.open\(([^)]*)\)", text)]
    assert opened and set(opened) <= {"Contract.FILE_NAME", "name"}, opened
    # ... and every other file is opened through Contract.openAsset with a name read from the contract
    calls = [a.split(",")[1].strip() for text in sources.values() for a in re.findall(r"(?<!fun )(?<!fun Contract\.)openAsset\(([^)]*)\)", text)
             if "," in a]
    assert calls and all(c in ("name", "file") for c in calls), calls
    # `name` is Contract.checkedAsset's parameter (issue 43): the golden files and the sample photo, each
    # taken only as the bytes contract.json's `files` records
    assets = [a.split(",")[1].strip() for text in sources.values()
              for a in re.findall(r"(?<!fun Contract\.)checkedAsset\(([^)]*)\)", text) if "," in a]
    assert assets and all(re.fullmatch(r"(?:(?:contract|c)\.)?(?:golden\.(?:json|bin)|app\.sampleImage)", a)
                          for a in assets), assets
    # `file` above is Contract.checkedFile's parameter (issue 38): its callers pass an artifact entry's
    # file or typed_text's tokenizer and encoder files, each with the contract's bytes and sha256
    checked = [a.split(",")[1].strip() for text in sources.values()
               for a in re.findall(r"(?<!fun Contract\.)checkedFile\(([^)]*)\)", text) if "," in a]
    assert checked and all(re.fullmatch(r"(?:entry|tok|enc)\.file", c) for c in checked), checked
    assert "val tok = typed.tokenizer!!" in sources["QueryEncoder.kt"] and "val enc = typed.encoder!!" in sources["QueryEncoder.kt"]


def test_kotlin_hard_codes_no_artifact_or_tensor_name(contract):
    names = {a["file"] for a in contract["artifacts"].values()}
    names |= {Path(a["file"]).stem for a in contract["artifacts"].values()}
    for art in contract["artifacts"].values():
        names |= {t["name"] for t in art["inputs"] + art["outputs"]}
    names |= {contract["app"]["sample_image"], *contract["golden"].values()}
    for path in KOTLIN_APP:
        text = path.read_text()
        found = sorted(n for n in names if f'"{n}"' in text)
        assert not found, f"{path.name} hard-codes {found}: read them from contract.json"


def test_gradle_pins_the_executorch_runtime_that_wrote_the_pte(contract):
    version = importlib.metadata.version("executorch")
    assert contract["app"]["runtime_maven"] == f"org.pytorch:executorch-android:{version}"
    gradle = (ANDROID / "app" / "build.gradle.kts").read_text()
    assert f'implementation("{contract["app"]["runtime_maven"]}")' in gradle
    wrapper = (ANDROID / "gradle" / "wrapper" / "gradle-wrapper.properties").read_text()
    assert re.search(r"distributionUrl=.*gradle-[\d.]+-bin\.zip", wrapper)
    assert not list(ANDROID.rglob("*.jar")), "no binary wrapper jar in the repo"


def test_an_app_folder_that_cannot_be_written_fails_the_stage_in_one_line(built, tmp_path, monkeypatch):
    """ARRCOC_ANDROID_APP_DIR whose parent is a file: the stage's copy into the app (its last step,
    after every check) is an output error naming ARRCOC_ANDROID_APP_DIR, and nothing is written. What
    the core does when a stage fails there (nothing published for android, the previous publish and
    manifest entry kept, executorch still published) runs end to end in the next test, whose stage
    fails at the same step; each used to rebuild android (~5 min each)."""
    from types import SimpleNamespace

    from arrcoc_edge.errors import OutputDirError
    from arrcoc_edge.targets.android.target import AndroidTarget

    staged = tmp_path / "staging"
    shutil.copytree(built[0] / "android", staged)
    data = json.loads((staged / "contract.json").read_text())
    ctx = SimpleNamespace(staging=staged, config=SimpleNamespace(**data["model"]), log=lambda line: None)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the app folder's parent should be")
    monkeypatch.setenv("ARRCOC_ANDROID_APP_DIR", str(blocker / "assets"))
    with pytest.raises(OutputDirError) as caught:
        AndroidTarget()._publish_to_app(ctx, SimpleNamespace(bytes=0, size_budget=1), data)
    line = caught.value.one_line()
    assert "cannot write the Android app's assets" in line and "ARRCOC_ANDROID_APP_DIR" in line, line
    assert blocker.read_text().startswith("a file")


def test_the_build_kept_the_users_files_in_and_beside_the_app_folder(built, tmp_path):
    """The app folder held the user's font and a nested logo, with backup folders beside it: the
    build wrote its bundle in and kept every one of them. A rebuild with a file of the user's under
    one of the bundle's names fails the stage in one line naming it, changes nothing in the folder
    and publishes nothing: the previous artifacts/android/ and the whole manifest stay exactly as they
    were, executorch's entry included (built only for the failed android target, it is not
    republished: build.to_publish). ~1-5 min: a real android rebuild (export cache hit)."""
    app = built[1]
    seeded = seed_user_files(tmp_path / "probe" / app.name)  # what the fixture seeded, by the same rule
    assert user_files_left(app, seeded) == seeded
    out = tmp_path / "out"
    shutil.copytree(built[0], out)  # with .cache: the export is a cache hit
    before_manifest = (out / "manifest.json").read_bytes()
    before_files = tree(out / "android")
    mine = tmp_path / "app" / "assets"
    shutil.copytree(app, mine)
    (mine / "golden.json").write_bytes(b"the user's own golden.json")
    before = tree(mine)
    proc = run_cli("build", "--target", "android", "--out", str(out), env={"ARRCOC_ANDROID_APP_DIR": str(mine)})
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if str(mine / "golden.json") in line]
    assert lines and "move" in lines[0] and "-> fix:" in lines[0], text[-3000:]
    assert tree(mine) == before
    assert tree(out / "android") == before_files
    assert (out / "manifest.json").read_bytes() == before_manifest  # executorch's and android's entries too
    assert json.loads(before_manifest)["targets"]["executorch"]["status"] == "published"
    assert "executorch: not published: passed, but built only for targets that failed" in text, text[-3000:]


@pytest.fixture(scope="module")
def app_build(built) -> dict:
    require_jvm_toolchain()
    info = json.loads((built[0] / "manifest.json").read_text())["targets"]["android"]["variants"]["app-assets"]["info"]
    return info


def test_every_kotlin_file_compiles_and_the_jvm_tests_pass(app_build):
    """The build compiled main, test and androidTest (and the stubs) with kotlinc 2.0.21 and ran the
    JUnit tests on the bundle it staged: all ran, none skipped, none failed."""
    from arrcoc_edge.targets.android import app as android_app

    record = app_build["app_build"]
    assert record["status"] == "passed", record["reason"]
    assert set(record) == {"status", "reason", "compiler", "compiled_against", "files_compiled", "tests", "seconds",
                           "not_verified"}
    assert record["compiler"].startswith("kotlinc-jvm 2.0.21 (JRE 17")
    every_kt = {sources.shown(p) for p in ANDROID.rglob("*.kt")}
    assert set(record["files_compiled"]) == every_kt
    assert any("/androidTest/" in f for f in every_kt) and any("/src/test/" in f for f in every_kt)
    tests = record["tests"]
    assert tests["failed"] == 0 and tests["run"] == tests["passed"] == len(tests["names"]) >= 14
    assert {"ParityAgainstPythonTest.everyMetricAndVerdictEqualsPipelineParity",
            "UprightTest.everyOrientationEqualsPilExifTranspose",
            "ContractTest.parsesTheContractTheBuildWrote", "GoldenTest.readsEverySampleOfTheBundle",
            "VerdictTest.confidenceAndVerdictArePythons", "VerdictTest.noCalibrationIsSaidNotGuessed",
            "VerdictTest.theOutlinedCellsAreTheStrongestOfTheTopK"} <= set(tests["names"])
    assert tests["runner"].startswith("JUnit 4.13.2")
    assert record["not_verified"] and all(isinstance(x, str) for x in record["not_verified"])


def test_kotlin_parity_equals_pipeline_parity_both_ways(app_build):
    """Kotlin's metrics, printed by the JVM test, next to pipeline/stages/parity.py's on the same arrays: the
    .pte outputs of ExecuTorch's Python runtime pass, the perturbed copies pass or fail as designed."""
    from arrcoc_edge.targets.android.app import TOLERANCE

    cases = app_build["app_build_detail"]["parity_vs_python"]
    assert {"executorch-fp32", "executorch-int8", "tie-swap-within-tolerance", "swap-outside-tolerance",
            "relevance-offset-beyond-gate"} <= set(cases)
    for name, case in cases.items():
        assert case["kotlin"].keys() == case["python"].keys(), name
        for metric, value in case["python"].items():
            assert abs(case["kotlin"][metric] - value) <= TOLERANCE.get(metric, TOLERANCE["default"]), (name, metric)
    assert {c["passed"] for c in cases.values()} == {True, False}
    assert cases["tie-swap-within-tolerance"]["passed"] and cases["tie-swap-within-tolerance"]["python"]["topk_overlap_strict_mean"] < 1
    assert not cases["swap-outside-tolerance"]["passed"] and not cases["relevance-offset-beyond-gate"]["passed"]


def test_a_compile_error_is_a_gate_error_naming_the_line(tmp_path):
    from arrcoc_edge.errors import GateError
    from arrcoc_edge.targets.android import app as android_app

    require_jvm_toolchain()
    broken = tmp_path / "Broken.kt"
    broken.write_text("package org.arrcoc.demo\nfun f(t: org.pytorch.executorch.Tensor) = t.getDataAsFloatArray()\n")
    with pytest.raises(GateError) as err:
        android_app._kotlinc(android_app.toolchain(), [android_app.ANDROID_JAR], tmp_path / "out", [broken])
    line = err.value.one_line()
    assert "does not compile" in line and "Broken.kt:2" in line and "unresolved reference" in line and "\n" not in line


def test_a_number_unlike_pythons_fails_the_jvm_tests(built, tmp_path):
    """The JVM parity test is not vacuous: one of Python's numbers changed by more than the tolerance
    and the run is a GateError naming the test."""
    from arrcoc_edge.errors import GateError
    from arrcoc_edge.targets.android import app as android_app

    require_jvm_toolchain()
    assets = built[1]
    contract = json.loads((assets / "contract.json").read_text())
    tc = android_app.toolchain()
    classes, _ = android_app.compile_app(tc, lambda _: None, tmp_path / "classes")  # the build's classes: a cache hit
    android_app.write_parity_fixtures(tmp_path / "parity", assets, contract, {})
    android_app.write_exif_fixtures(tmp_path / "exif")
    spec = json.loads((tmp_path / "parity" / "cases.json").read_text())
    spec["cases"][0]["python"]["metrics"]["relevance_mean_abs"] += 1e-9
    (tmp_path / "parity" / "cases.json").write_text(json.dumps(spec))
    with pytest.raises(GateError) as err:
        android_app.run_tests(tc, classes, assets, tmp_path)
    assert "ParityAgainstPythonTest" in err.value.one_line() and "relevance_mean_abs" in err.value.one_line()


def test_a_missing_toolchain_is_not_run_with_the_command_that_installs_it(monkeypatch, tmp_path):
    from arrcoc_edge.targets.android import app as android_app

    monkeypatch.setattr(android_app, "ANDROID_JAR", tmp_path / "absent" / "android.jar")
    record, detail = android_app.app_build(tmp_path, {}, dict, lambda _: None)
    assert record["status"] == "not run" and detail == {}
    assert "android.jar" in record["reason"] and "bash scripts/setup.sh" in record["reason"]


def test_pipeline_parity_gives_the_tie_example_numbers_the_jvm_test_asserts():
    """GoldenTest.tieRuleMatchesPipelineParity (and GoldenParityTest on a device) assert these numbers."""
    from arrcoc_edge.stages.parity import topk_overlap

    scores = np.array([[0.9, 0.5, 0.5004, 0.1]], dtype=np.float32)
    with_ties, strict = topk_overlap(scores, np.array([[0, 2]]), np.array([[0, 1]]), 1e-3)
    assert (with_ties[0], strict[0]) == (1.0, 0.5)
    no_tie, _ = topk_overlap(scores, np.array([[0, 2]]), np.array([[0, 3]]), 1e-3)
    assert no_tie[0] == 0.5


def test_minilm_typed_query_selects_what_predict_selects(android_build, tmp_path):
    """The app's typed-query path (tests/test_app_typed_query.py) for the shipped checkpoint, on the
    session's android build."""
    from arrcoc_edge.relevance.text_encoder import tokenize

    out, app = android_build.out, android_build.android_app
    typed = json.loads((app / "contract.json").read_text())["typed_text"]
    assert typed["tokenizer"]["kind"] == "wordpiece" and typed["encoder"]["kind"] == "minilm"
    # the stand-in ids are the Python encoder's own (special tokens, cut at 256 with [SEP] last)
    ids = app_ids(typed, app, list(QUERIES), tmp_path)
    assert ids == [tokenize([q])["input_ids"][0].tolist() for q in QUERIES]
    assert len(ids[-1]) == 256
    times = check_typed_queries(out, app, tmp_path)
    print(f"MiniLM {typed['encoder']['variant']} encoder .pte: {typed['encoder']['bytes']} bytes, "
          f"{np.median(times):.2f} ms median per query in ExecuTorch's runtime")
