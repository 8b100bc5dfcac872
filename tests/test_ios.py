"""iOS target: the app bundle matches its contract and lands where the Swift code looks; the app's
Foundation-only core (mobile/ios/ArrcocCore) is compiled with Swift and its XCTests run on the
bundle the build wrote, with pipeline/stages/parity.py's numbers and PIL's EXIF transposes. The SwiftUI /
CoreML shell cannot be compiled here (no Xcode): the few static checks left are marked as such."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from mobile_build import bundle_in_app, seed_user_files, source_function, user_files_left

from arrcoc_edge.relevance.model import MAX_SIDE, MIN_SIDE

pytestmark = [pytest.mark.slow, pytest.mark.compiler]

IOS = Path(__file__).resolve().parent.parent / "mobile" / "ios"
SWIFT = sorted(p for p in IOS.rglob("*.swift") if ".build" not in p.parts)
SHELL = IOS / "ArrcocDemo"


@pytest.fixture(scope="module")
def built(ios_build):
    """(out dir, app resources dir) of the session's one `invoke build --target android,ios` (conftest
    ios_build, shared with tests/test_coreml.py and test_android.py): the app copy went to a temp
    folder holding the user's seeded files, never the repo's app."""
    if importlib.util.find_spec("coremltools") is None:
        pytest.fail("coremltools is missing (the ios target converts CoreML packages): run `bash scripts/setup.sh`",
                    pytrace=False)
    return ios_build.out, ios_build.ios_app


def swift_or_fail(record: dict) -> dict:
    """The app_build record, or one failing line naming the missing toolchain and how to get it."""
    if record["status"] != "passed":
        pytest.fail(f"iOS core not compiled/tested ({record['status']}): {record['reason']}", pytrace=False)
    return record


@pytest.fixture(scope="module")
def contract(built) -> dict:
    return json.loads((built[0] / "ios" / "contract.json").read_text())


def test_manifest_entry(built):
    entry = json.loads((built[0] / "manifest.json").read_text())["targets"]["ios"]
    assert entry["status"] == "unverified" and "Xcode" in entry["reason"]
    variant = entry["variants"]["app-bundle"]
    assert variant["size"]["bytes"] <= variant["size"]["budget"]
    # carries the default package's gate and the numbers the coreml stage measured on the same bytes
    assert variant["parity"]["passed"] and variant["parity"]["metrics"]["topk_overlap_mean"] >= 0.98
    assert entry["provenance"]["upstream"]["coreml"]


def test_the_build_kept_the_users_files_in_and_beside_the_app_folder(built, tmp_path):
    """Resources/ held the user's font and a nested logo, with backup folders beside it (Resources.old/,
    Resources.new/, Resources-backup/): the build wrote its bundle in and kept every one of them."""
    app = built[1]
    seeded = seed_user_files(tmp_path / "probe" / app.name)  # what the shared build seeded, by the same rule
    assert user_files_left(app, seeded) == seeded
    assert (app / "contract.json").is_file()


def test_swift_core_compiled_and_its_tests_passed_in_the_build(built):
    """The build itself compiled ArrcocCore + CoreTests and ran them on the bundle it staged."""
    from arrcoc_edge.targets.ios import app as ios_app

    record = swift_or_fail(json.loads((built[0] / "manifest.json").read_text())
                           ["targets"]["ios"]["variants"]["app-bundle"]["info"]["app_build"])
    assert set(record) == {"status", "reason", "compiler", "compiled_against", "files_compiled", "products",
                           "tests", "seconds", "not_verified"}
    assert record["products"] in ("compiled in this run", "an earlier run's, of the same sources and compiler (SwiftBuilds)")
    assert record["compiler"].startswith(("Swift version", "swift-driver", "Apple Swift version")), record["compiler"]
    assert record["files_compiled"] == ios_app.repo_files()
    assert {f"mobile/ios/ArrcocCore/{n}.swift" for n in ("Contract", "Golden", "Parity", "Prediction", "Upright")} \
        <= set(record["files_compiled"])
    tests = record["tests"]
    assert tests["failed"] == 0 and tests["run"] == tests["passed"] == len(tests["names"]) >= 7
    assert "ParityTests.testMetricsAndVerdictsEqualPipelineParity" in tests["names"]
    assert "UprightTests.testEveryOrientationIsPilsExifTranspose" in tests["names"]
    assert {"VerdictTests.testConfidenceAndVerdictArePythons", "VerdictTests.testNoCalibrationIsSaidNotGuessed",
            "VerdictTests.testTheOutlinedCellsAreTheStrongestOfTheTopK"} <= set(tests["names"])
    assert any("Xcode" in line for line in record["not_verified"])


def test_swift_metrics_equal_pipeline_parity_and_pil(built, contract, tmp_path):
    """A second real `swift test` on the published app copy (in the chroot from the shared build's
    products of the same sources: SwiftBuilds); Swift's own numbers (its report) against
    pipeline/stages/parity.py recomputed here from the arrays in core_checks, and PIL's exif_transpose."""
    from arrcoc_edge.stages.parity import parity_metrics
    from arrcoc_edge.targets.ios import app as ios_app
    from arrcoc_edge.targets.ios import swift as ios_swift

    record = swift_or_fail(ios_app.build_and_test(built[1], keep_report=tmp_path))
    if ios_swift.Swift.find()[0].chroot is not None:  # the shared build compiled these very sources first
        assert record["products"].startswith("an earlier run's"), record["products"]
    index, data = ios_app.read_bundle(built[1], contract["app"]["core_checks"])
    _, expected, _ = ios_app.golden_outputs(built[1], contract)
    swift = {c["name"]: c for c in json.loads((tmp_path / "parity.json").read_text())}
    assert len(swift) == len(index["parity_cases"]) >= 5
    verdicts = set()
    for case in index["parity_cases"]:
        got = {n: np.concatenate([ios_app.array(data, s["arrays"][n]) for s in case["samples"]]) for n in expected}
        want = parity_metrics(expected, got, case["tie_tolerance"])
        have = swift[case["name"]]["metrics"]
        assert set(have) == set(want), case["name"]
        for name, value in want.items():
            # means: NumPy sums pairwise, Swift in order (a few float64 ulp); all else bit-equal
            tol = ios_app.SUM_RTOL * abs(value) if name in ios_app.SUMMED else 0
            assert abs(have[name] - value) <= tol, (case["name"], name, have[name], value)
        failing = swift[case["name"]]["failing"]
        assert failing == {k: ios_app.failing_metrics(a["gate"], want, case["tie_tolerance"])
                           for k, a in contract["artifacts"].items()}, case["name"]
        verdicts |= {bool(v) for v in failing.values()}
    assert verdicts == {True, False}  # the gate was exercised both ways
    upright = json.loads((tmp_path / "upright.json").read_text())
    stored = np.random.default_rng(23).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    for o in range(1, 9):
        h, w, *values = upright[str(o)]
        assert np.array_equal(np.array(values, np.uint8).reshape(h, w, 3), ios_app.pil_upright(o, stored)), o


@pytest.mark.parametrize("broken", ["compile", "metric"])
def test_broken_swift_fails_the_stage(built, tmp_path, monkeypatch, broken):
    """A compile error or a Swift metric that drifts from pipeline/stages/parity.py raises GateError (the
    stage fails, nothing published): the real compiler and tests on a broken copy of the package,
    with the shared build's products of the good sources kept in the chroot (SwiftBuilds: a changed
    source is another key, so they are never used for it)."""
    from arrcoc_edge.errors import GateError
    from arrcoc_edge.targets.ios import app as ios_app
    from arrcoc_edge.targets.ios import swift as ios_swift

    copy = tmp_path / "ios"
    shutil.copytree(IOS, copy, ignore=shutil.ignore_patterns(".build", "Resources"))
    parity = copy / "ArrcocCore" / "Parity.swift"
    text = parity.read_text()
    if broken == "compile":
        text = text.replace("let k = refIdx.count", "let k: String = refIdx.count")
    else:  # the tie window on the wrong side: a swap just inside it stops counting
        text = text.replace("scores[$0] <= kth + window", "scores[$0] <= kth - window")
    assert text != parity.read_text()
    parity.write_text(text)
    monkeypatch.setattr(ios_app, "PACKAGE", copy)
    swift = ios_swift.Swift.find()[0]
    if swift is None:
        pytest.fail(f"iOS core not compiled/tested: {ios_swift.Swift.find()[1]}", pytrace=False)
    if swift.chroot is not None:  # the good sources' products are there to take, and must not be taken
        assert any((swift.chroot / ios_swift.BUILDS_IN_CHROOT.lstrip("/")).iterdir())
    with pytest.raises(GateError) as err:
        ios_app.build_and_test(built[1])
    assert ("error:" if broken == "compile" else "testMetricsAndVerdictsEqualPipelineParity") in err.value.problem


def test_contract_matches_the_published_files_and_the_app_copy(built, contract):
    from arrcoc_edge.targets.ios import target as ios
    from arrcoc_edge.targets.shared import mobile_contract

    out, app = built
    assert ios.check_packages(contract, out / "ios")
    assert ios.check_packages(contract, app)
    published = {p.relative_to(out / "ios").as_posix(): p.read_bytes() for p in (out / "ios").rglob("*") if p.is_file()}
    assert published == bundle_in_app(app)  # the build's files in the app: those, besides the user's
    manifest = json.loads((out / "manifest.json").read_text())["targets"]["coreml"]
    for key, art in contract["artifacts"].items():
        assert art["file"] == manifest["variants"][key]["info"]["package"]
        assert art["sha256"] == mobile_contract.tree_sha256(out / "coreml" / art["file"])  # the very same package
        assert [t["name"] for t in art["inputs"]] == ["image", "query"]
        assert [t["name"] for t in art["outputs"]] == ["relevance", "topk_indices", "weights", "evidence"]
        assert art["topk_dtype"] == "int32"
    assert contract["app"]["default_artifact"] in contract["artifacts"]


def test_golden_bundle_is_keyed_by_the_contract_tensor_names(built, contract):
    golden = json.loads((built[1] / contract["golden"]["json"]).read_text())
    entry = contract["artifacts"][contract["app"]["default_artifact"]]
    # CoreML's image input is float16 holding the photo's byte values; the bundle keeps the uint8
    # photo as decoded and the app writes each byte as a float16 (RelevanceModel.photoArray)
    assert entry["inputs"][0]["dtype"] == "float16" and entry["image_input"]["multiarray_dtype"] == "FLOAT16"
    for sample in golden["samples"]:
        for tensor in entry["inputs"] + entry["outputs"]:
            arr = sample["arrays"][tensor["name"]]
            want = "uint8" if tensor["name"] == entry["inputs"][0]["name"] else tensor["dtype"]
            assert arr["dtype"] == want and arr["shape"][0] == 1
    assert any(s["arrays"]["image"]["shape"][1] != s["arrays"]["image"]["shape"][2] for s in golden["samples"])


def test_app_looks_where_the_build_copies():
    from arrcoc_edge.targets.ios import target as ios

    project = (IOS / "project.yml").read_text()
    rel = ios.APP_RESOURCES.relative_to(IOS).as_posix()  # ArrcocDemo/Resources
    assert f"path: {rel}" in project and "type: folder" in project
    assert "- path: ArrcocCore" in project  # the app target compiles the core CoreTests test
    contract_swift = (IOS / "ArrcocCore" / "Contract.swift").read_text()
    assert f'resourcesFolder = "{ios.APP_RESOURCES.name}"' in contract_swift
    assert 'fileName = "contract"' in contract_swift


# Static from here on: these hold the SwiftUI / CoreML shell (ArrcocDemo/) and the project file,
# which cannot be compiled or run off macOS (no Xcode, no XcodeGen, no UIKit/CoreGraphics). That the
# Swift code decodes only keys the build writes is no longer read from the sources: CoreTests decode
# the real contract.json with the app's own Decodable types.

def test_swift_hard_codes_no_artifact_or_tensor_name(contract):
    names = {a["file"] for a in contract["artifacts"].values()}
    names |= {Path(a["file"]).stem for a in contract["artifacts"].values()}
    for art in contract["artifacts"].values():
        names |= {t["name"] for t in art["inputs"] + art["outputs"]}
    names |= {contract["app"]["sample_image"], *contract["golden"].values()}
    for path in [*SWIFT, IOS / "project.yml"]:
        text = path.read_text()
        found = sorted(n for n in names if f'"{n}"' in text or f"{n}" in text and n.endswith(".mlpackage"))
        assert not found, f"{path.name} hard-codes {found}: read them from contract.json"


# Anything that crops, scales or resamples the photo itself (UIGraphicsImageRenderer draws at the
# screen's scale in its own colour space; UIImage.draw(in:) scales to the rect; CIImage filters resample).
RESAMPLING_SWIFT = ("UIGraphicsImageRenderer", "image.draw(in:", ".draw(in: rect", "cropping(to:", "scaledToFill",
                    "squareRGBA", "resize(", "resized(", "CILanczos", "transformed(by:", "preparingThumbnail", "byPreparingThumbnail",
                    "interpolationQuality = .high", "interpolationQuality = .medium", "interpolationQuality = .low",
                    "/ 255")


def swift_function(text: str, name: str) -> str:
    return source_function(text, "func", name)


def test_swift_hands_over_the_photo_as_decoded(contract):
    """No crop, no resample, no /255 in the app: the package does the reference's resize. The array
    it builds is [1,H,W,3] of exactly the image dtype contract.json lists for each package (CoreML
    has no uint8 input: float16 holding the byte values, coreml.IMAGE_INPUT)."""
    pre = contract["preprocessing"]
    assert pre["crop"] is None and pre["resize"] is None and pre["scale"] is None
    assert (pre["layout"], pre["min_side"], pre["max_side"]) == ("NHWC", MIN_SIDE, MAX_SIDE)
    sources = {p.name: p.read_text() for p in SWIFT}
    for name, text in sources.items():
        found = [t for t in RESAMPLING_SWIFT if t in text]
        assert not found, f"{name} crops or resamples the photo: {found}"
        assert "image_size" not in text or name == "Contract.swift", name  # 16G is the package's business
    model = sources["RelevanceModel.swift"]
    upright = swift_function(model, "uprightRGB")
    # one draw of the stored CGImage at its own pixel size into a context of that size, nothing scaled
    assert upright.count(".draw(") == 1 and "ctx.draw(cg, in: CGRect(x: 0, y: 0, width: sw, height: sh))" in upright
    assert "CGContext(data: raw.baseAddress, width: sw, height: sh," in upright
    assert "let sw = cg.width, sh = cg.height" in upright
    for needed in ("ctx.setBlendMode(.copy)", "ctx.interpolationQuality = .none", "CGImageAlphaInfo.premultipliedLast",
                   "CGBitmapInfo.byteOrder32Big", "image.imageOrientation"):
        assert needed in upright, needed
    # the tensor: [1,H,W,3] of the dtype the contract lists, for every package
    array = swift_function(model, "photoArray")
    assert "let shape = [1, height, width, 3]" in array
    assert "dtype: entry.imageInput.dtype" in swift_function(model, "preprocess")
    tests = (IOS / "Tests" / "GoldenParityTests.swift").read_text()
    assert "photoArray(rgb, height: height, width: width, dtype: entry.imageInput.dtype)" in tests
    for key, art in contract["artifacts"].items():
        image = art["inputs"][0]
        assert image["shape"] == ["batch", "height", "width", 3], key
        assert image["dtype"] == art["image_input"]["multiarray_dtype"].lower(), key
        assert f'case "{image["dtype"]}": return try fill(MLMultiArray(shape: shape, dataType: .{image["dtype"]})' in array, key


def test_uikit_orientation_maps_to_the_exif_value():
    """RelevanceModel.exifOrientation (UIImage.Orientation, UIKit: static) feeds Upright.rgb the EXIF
    value whose re-index CoreTests hold to PIL; Apple's CGImagePropertyOrientation raw values."""
    model = (SHELL / "RelevanceModel.swift").read_text()
    table = model[model.index("static let exifOrientation"):]
    table = table[:table.index("]\n")]
    assert {k: int(v) for k, v in re.findall(r"\.(\w+): (\d)", table)} == {
        "up": 1, "upMirrored": 2, "down": 3, "downMirrored": 4, "leftMirrored": 5, "right": 6, "rightMirrored": 7, "left": 8}
    assert "orientation: exifOrientation[image.imageOrientation] ?? 1" in swift_function(model, "uprightRGB")


def test_sample_photo_is_the_golden_whole_photo(built, contract):
    """sample.png decodes (PIL, as load_photo) to exactly the golden sample contract.app.sample_golden
    names; GoldenParityTests.testSamplePhotoDecodesToTheGoldenBytes compares the app's own decode."""
    from arrcoc_edge.stages.golden import load_photo

    golden = json.loads((built[1] / contract["golden"]["json"]).read_text())
    sample = next(s for s in golden["samples"] if s["name"] == contract["app"]["sample_golden"])
    arr = sample["arrays"]["image"]
    data = (built[1] / contract["golden"]["bin"]).read_bytes()[arr["offset"]:arr["offset"] + arr["bytes"]]
    expected = np.frombuffer(data, dtype=np.uint8).reshape(arr["shape"])[0]
    photo = load_photo(built[1] / contract["app"]["sample_image"])
    assert photo.shape[0] != photo.shape[1] and np.array_equal(photo, expected)


# Typed queries (issue 38): the shipped checkpoint's encoder is all-MiniLM-L6-v2 as a CoreML package,
# checked with the NumPy MIL evaluator (no CoreML runtime here), the ids are the app tokenizer's own.

TYPED_QUERIES = ("where is the cat?", "the cat's eyes", "猫在哪里？", "a furry animal lying on the floor " * 60)


def test_typed_text_ships_minilm_as_a_coreml_package_held_to_the_python_encoder(built, contract, tmp_path):
    from arrcoc_edge.relevance.text_encoder import embed, tokenize
    from arrcoc_edge.targets.coreml.mil_program import MilProgram
    from arrcoc_edge.targets.shared.mobile_contract import tree_sha256

    out, app = built
    typed = contract["typed_text"]
    assert typed["supported"] is True, typed.get("why")
    enc, tok = typed["encoder"], typed["tokenizer"]
    assert (enc["kind"], tok["kind"], tok["max_length"]) == ("minilm", "wordpiece", 256)
    assert enc["host_check"]["status"] == "unverified" and "macOS" in enc["host_check"]["reason"]
    assert enc["info"]["structure"]["unsupported_ops"] == []
    assert tree_sha256(app / enc["file"]) == enc["sha256"]
    entry = json.loads((out / "manifest.json").read_text())["targets"]["ios"]["variants"]["app-bundle"]
    assert entry["info"]["typed_text"]["encoder"] == enc["file"]
    record = swift_or_fail(entry["info"]["app_build"])
    assert {"TypedQueryTests.testLengthRulesOfTheShippedEncoder", "TypedQueryTests.testTypedTextNamesFilesTheBundleHolds"} <= set(record["tests"]["names"])
    # the app's tokenizer ids (Swift, `invoke app-tokenize --app ios`) through the shipped package
    lines = tmp_path / "q.txt"
    lines.write_text("\n".join(TYPED_QUERIES), encoding="utf-8")
    proc = run_cli("app-tokenize", "--app", "ios", "--tokenizer", str(app / tok["file"]), "--text-file", str(lines))
    assert proc.returncode == 0, proc.stderr[-2000:]
    ids = [json.loads(line) for line in proc.stdout.splitlines()]
    assert ids == [tokenize([q])["input_ids"][0].tolist() for q in TYPED_QUERIES] and len(ids[-1]) == 256
    program = MilProgram(app / enc["file"])
    got = np.stack([program.run({"input_ids": np.asarray([i], np.int32)})["sentence_embedding"].reshape(-1) for i in ids])
    ref = embed(list(TYPED_QUERIES))
    cosine = (got * ref).sum(1) / np.linalg.norm(got, axis=1)
    assert cosine.min() >= enc["gate"]["min"]["cosine_min"], cosine
