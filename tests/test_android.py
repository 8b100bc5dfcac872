"""Android target: a real `invoke build --target android` (which builds executorch first). The app's
assets match contract.json byte for byte, land where the Kotlin code opens them, the Kotlin code
reads only keys the build writes and hard-codes no artifact or tensor name, and a build whose app
copy cannot be written leaves the previously published artifacts untouched.
(The app cannot be compiled or run here: no Android SDK, no emulator.)"""
from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.metadata
import json
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from mobile_build import ANDROID, exif_upright_reference, reindex, source_function
from pipeline.model import MAX_SIDE, MIN_SIDE

pytest.importorskip("executorch")
pytestmark = pytest.mark.slow

KOTLIN_MAIN = sorted((ANDROID / "app" / "src" / "main").rglob("*.kt"))
KOTLIN_ALL = sorted(ANDROID.rglob("*.kt"))
# org.json reads: o.getString("key"), o.getJSONObject("key"), o.optInt("key"), o.isNull("key"), o.has("key")
JSON_READ = re.compile(r'\.(?:(?:get|opt)(?:String|Int|Long|Double|Boolean|JSONObject|JSONArray)?|has|isNull)\(\s*"([^"]*)"')


@functools.lru_cache(maxsize=1)
def built_android() -> tuple[Path, Path]:
    """(out dir, app assets dir); the app copy goes to a temp folder, never the repo's app."""
    root = Path(tempfile.mkdtemp(prefix="arrcoc-android-test-"))
    atexit.register(shutil.rmtree, root, True)
    out, app = root / "out", root / "app" / "assets"
    proc = run_cli("build", "--target", "android", "--out", str(out), env={"ARRCOC_ANDROID_APP_DIR": str(app)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, app


@pytest.fixture(scope="module")
def built():
    return built_android()


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
    from targets import android, mobile_contract

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
        assert [t["name"] for t in art["outputs"]] == ["relevance", "topk_indices", "weights"]
        assert art["topk_dtype"] == "int64" and art["outputs"][1]["dtype"] == "int64"
        assert art["inputs"][0]["shape"] == ["batch", "height", "width", 3] and art["inputs"][0]["dtype"] == "uint8"
    assert contract["app"]["default_artifact"] in contract["artifacts"]
    assert mobile_contract.check_files(contract, out / "android") and android.check_bundle(contract, app)
    # the app copy is exactly what was published, nothing more, nothing less
    assert tree(out / "android") == tree(app)
    assert set(tree(app)) == {mobile_contract.CONTRACT_FILE, contract["app"]["sample_image"],
                              *contract["golden"].values(), *(a["file"] for a in contract["artifacts"].values())}


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


KOTLIN_MODEL_PATH = ("RelevanceModel.kt", "Golden.kt", "Contract.kt")  # everything between a photo and the .pte
# Anything that crops, scales, resamples or converts the photo to floats itself
RESAMPLING_KOTLIN = ("createScaledBitmap", "createBitmap", "inSampleSize", "inDensity", "inTargetDensity", "Matrix",
                     "Canvas", "drawBitmap", "extractThumbnail", "getPixels", "255f", "/ 255", "fromBlob(photo", "Rect(")


def kotlin_function(text: str, name: str) -> str:
    return source_function(text, "fun", name)


def test_kotlin_hands_over_the_photo_as_decoded(contract):
    """No crop, no resample, no float conversion between a photo and the .pte: the artifact does
    the reference's resize. The tensor the app builds is uint8 [1,H,W,3] as contract.json says."""
    pre = contract["preprocessing"]
    assert pre["crop"] is None and pre["resize"] is None and pre["scale"] is None
    assert (pre["layout"], pre["min_side"], pre["max_side"]) == ("NHWC", MIN_SIDE, MAX_SIDE)
    sources = {p.name: p.read_text() for p in KOTLIN_ALL}
    for name in KOTLIN_MODEL_PATH:
        found = [t for t in RESAMPLING_KOTLIN if t in sources[name]]
        assert not found, f"{name} resamples or converts the photo: {found}"
    for name, text in sources.items():
        assert "createScaledBitmap" not in text, name
        # the model's 16G input size is the artifact's business: parsed, never used to resize
        assert "imageSize" not in text or name == "Contract.kt", name
    assert sources["Contract.kt"].count("imageSize") == 2  # the field and its parse
    # the screen's own copy (inSampleSize, Matrix) is confined to decodeForDisplay and never reaches the model
    activity = sources["MainActivity.kt"]
    display = kotlin_function(activity, "decodeForDisplay")
    outside = activity.replace(display, "")
    assert "inSampleSize" in display and not any(t in outside for t in ("inSampleSize", "createBitmap", "Matrix()"))
    assert re.findall(r"\bval input = ([\w.]+)\(", outside) == ["Preprocess.decodePhoto"]
    assert "photo = input" in outside and "m.predict(input," in outside
    # the model's input: full-size decode, unpremultiplied, the decoder's RGBA bytes, R G B kept, A dropped
    model = sources["RelevanceModel.kt"]
    decode = kotlin_function(model, "decodePhoto")
    for needed in ("inPremultiplied = false", "inScaled = false", "Bitmap.Config.ARGB_8888", "copyPixelsToBuffer",
                   "exifOrientation(open)"):
        assert needed in decode, needed
    upright = kotlin_function(model, "upright")
    for needed in ("rgb.put(out, rgba.get(s))", "rgb.put(out + 1, rgba.get(s + 1))", "rgb.put(out + 2, rgba.get(s + 2))",
                   "val s = a * stride + b * 4", "out += 3", "Tensor.allocateByteBuffer(h * w * 3)"):
        assert needed in upright, needed
    # uint8 [1,H,W,3]: the contract's dynamic dims, in order, filled with 1, the photo's height and width
    for key, art in contract["artifacts"].items():
        image = art["inputs"][0]
        assert image["dtype"] == "uint8" and image["shape"] == ["batch", "height", "width", 3], key
    assert "Tensor.fromBlobUnsigned(photo.rgb, imageSpec.shapeFor(1, photo.height, photo.width))" in model
    assert 'entry.imageInput.dtype != "uint8"' in model
    contract_kt = sources["Contract.kt"]
    assert "(it ?: dims[next++])" in contract_kt and "shape.get(j) as? Int" in contract_kt


def test_kotlin_orientation_table_is_pils_exif_transpose():
    """Preprocess.ORIENTATIONS, read from the Kotlin source, applied as Preprocess.upright does, gives
    PIL's exif_transpose for all eight EXIF orientations (non-square, so swapped sides show)."""
    model = (ANDROID / "app" / "src" / "main" / "java" / "org" / "arrcoc" / "demo" / "RelevanceModel.kt").read_text()
    table = {int(k): tuple(v == "true" for v in flags) for k, *flags in
             re.findall(r"(\d) to Orientation\((true|false), (true|false), (true|false)\)", model)}
    assert sorted(table) == list(range(1, 9))
    upright = kotlin_function(model, "upright")
    for line in ("val h = if (o.transpose) storedWidth else storedHeight", "val w = if (o.transpose) storedHeight else storedWidth",
                 "var a = if (o.transpose) c else r", "var b = if (o.transpose) r else c",
                 "if (o.flipRows) a = storedHeight - 1 - a", "if (o.flipCols) b = storedWidth - 1 - b"):
        assert line in upright, line
    stored = np.random.default_rng(23).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    for orientation, flags in table.items():
        assert np.array_equal(reindex(stored, *flags), exif_upright_reference(orientation, stored)), orientation


def test_sample_photo_is_the_golden_whole_photo(built, contract, golden):
    """sample.png decodes (PIL, as load_photo) to exactly the golden sample contract.app.sample_golden
    names: a whole non-square photo at its own size. GoldenParityTest.samplePhotoDecodesToTheGoldenBytes
    makes the same comparison with the app's own decoder on the device."""
    from pipeline.golden import load_photo

    app = contract["app"]
    sample = next(s for s in golden["samples"] if s["name"] == app["sample_golden"])
    arr = sample["arrays"]["image"]
    data = (built[1] / contract["golden"]["bin"]).read_bytes()[arr["offset"]:arr["offset"] + arr["bytes"]]
    expected = np.frombuffer(data, dtype=np.uint8).reshape(arr["shape"])[0]
    photo = load_photo(built[1] / app["sample_image"])
    assert photo.shape[0] != photo.shape[1] and np.array_equal(photo, expected)


def test_app_looks_where_the_build_copies():
    from targets import android, mobile_contract

    # Gradle's default assets folder, not redefined by the app's build script
    assert android.APP_ASSETS == ANDROID / "app" / "src" / "main" / "assets"
    gradle = (ANDROID / "app" / "build.gradle.kts").read_text()
    assert "srcDirs" not in gradle and "assets.srcDir" not in gradle
    assert "app/src/main/assets/" in (ANDROID / ".gitignore").read_text().splitlines()
    sources = {p.name: p.read_text() for p in KOTLIN_ALL}
    # the only asset name written in the Kotlin code is contract.json (a const in Contract.kt)
    assert f'const val FILE_NAME = "{mobile_contract.CONTRACT_FILE}"' in sources["Contract.kt"]
    literals = {m for text in sources.values() for m in re.findall(r'"([^"\s$]+\.(?:json|pte|bin|png|jpe?g))"', text)}
    assert literals == {mobile_contract.CONTRACT_FILE}
    opened = [a.strip() for text in sources.values() for a in re.findall(r"assets\.open\(([^)]*)\)", text)]
    assert opened and set(opened) <= {"FILE_NAME", "name"}, opened
    # ... and every other file is opened through Contract.openAsset with a name read from the contract
    calls = [a.split(",")[1].strip() for text in sources.values() for a in re.findall(r"(?<!fun )openAsset\(([^)]*)\)", text)
             if "," in a]
    assert calls and all(re.fullmatch(r"(?:contract|c)\.(?:golden\.(?:json|bin)|app\.sampleImage)|entry\.file", c)
                         for c in calls), calls


def test_kotlin_reads_only_keys_the_build_writes(contract, golden):
    used = set()
    for path in KOTLIN_MAIN:
        used |= set(JSON_READ.findall(path.read_text()))
    assert {"artifacts", "inputs", "outputs", "preprocessing", "default_artifact", "sample_image", "gate",
            "tie_tolerance", "file", "sha256", "bytes", "presets", "embedding", "arrays", "offset"} <= used
    keys = all_keys(contract) | all_keys(golden)
    assert used <= keys, f"Kotlin reads keys the build does not write: {sorted(used - keys)}"


def test_kotlin_hard_codes_no_artifact_or_tensor_name(contract):
    names = {a["file"] for a in contract["artifacts"].values()}
    names |= {Path(a["file"]).stem for a in contract["artifacts"].values()}
    for art in contract["artifacts"].values():
        names |= {t["name"] for t in art["inputs"] + art["outputs"]}
    names |= {contract["app"]["sample_image"], *contract["golden"].values()}
    for path in KOTLIN_ALL:
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


def test_kotlin_tie_rule_fixture_agrees_with_pipeline_parity():
    """GoldenParityTest.tieRuleMatchesPipelineParity asserts these numbers on the device."""
    from pipeline.parity import topk_overlap

    text = (ANDROID / "app" / "src" / "androidTest" / "java" / "org" / "arrcoc" / "demo" / "GoldenParityTest.kt").read_text()
    assert "floatArrayOf(0.9f, 0.5f, 0.5004f, 0.1f)" in text
    scores = np.array([[0.9, 0.5, 0.5004, 0.1]], dtype=np.float32)
    with_ties, strict = topk_overlap(scores, np.array([[0, 2]]), np.array([[0, 1]]), 1e-3)
    assert (with_ties[0], strict[0]) == (1.0, 0.5)
    no_tie, _ = topk_overlap(scores, np.array([[0, 2]]), np.array([[0, 3]]), 1e-3)
    assert no_tie[0] == 0.5


def test_failed_app_copy_leaves_the_published_artifacts_untouched(built, tmp_path):
    """ARRCOC_ANDROID_APP_DIR that cannot be written (its parent is a file): the android stage
    fails with one line naming the fix, nothing is published for it, and the previous
    artifacts/android/ and its manifest entry stay exactly as they were."""
    out = tmp_path / "out"
    shutil.copytree(built[0], out)  # with .cache: the export is a cache hit
    before_files, before_entry = tree(out / "android"), json.loads((out / "manifest.json").read_text())["targets"]["android"]
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the app folder's parent should be")
    proc = run_cli("build", "--target", "android", "--out", str(out),
                   env={"ARRCOC_ANDROID_APP_DIR": str(blocker / "assets")})
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    assert "ARRCOC_ANDROID_APP_DIR" in text and "cannot write the Android app's assets" in text, text[-3000:]
    assert tree(out / "android") == before_files
    after = json.loads((out / "manifest.json").read_text())["targets"]
    assert after["android"] == before_entry
    assert after["executorch"]["status"] == "published"  # the independent upstream stage still published
    assert blocker.read_text().startswith("a file")
