"""iOS target: the app bundle matches its contract, lands where the Swift code looks, and the Swift
code takes every name from contract.json. (The app cannot be compiled here: no Xcode.)"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from mobile_build import ANDROID, built_ios, exif_upright_reference, reindex, source_function
from pipeline.model import MAX_SIDE, MIN_SIDE

pytest.importorskip("coremltools")
pytestmark = pytest.mark.slow

IOS = Path(__file__).resolve().parent.parent / "mobile" / "ios"
SWIFT = sorted(IOS.rglob("*.swift"))


@pytest.fixture(scope="module")
def built():
    return built_ios()


@pytest.fixture(scope="module")
def contract(built) -> dict:
    return json.loads((built[0] / "ios" / "contract.json").read_text())


def all_keys(node) -> set[str]:
    if isinstance(node, dict):
        return set(node) | set().union(*(all_keys(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(all_keys(v) for v in node)) if node else set()
    return set()


def swift_properties(source: str) -> set[str]:
    """Stored properties (`let name:`) of the Decodable structs in a Swift file."""
    names = set()
    for body in re.findall(r"struct \w+: Decodable[^{]*\{(.*?)\n\}", source, re.S):
        names |= set(re.findall(r"^\s+let (\w+):", body, re.M))
    return names


def test_manifest_entry(built):
    entry = json.loads((built[0] / "manifest.json").read_text())["targets"]["ios"]
    assert entry["status"] == "unverified" and "Xcode" in entry["reason"]
    variant = entry["variants"]["app-bundle"]
    assert variant["size"]["bytes"] <= variant["size"]["budget"]
    # carries the default package's gate and the numbers the coreml stage measured on the same bytes
    assert variant["parity"]["passed"] and variant["parity"]["metrics"]["topk_overlap_mean"] >= 0.98
    assert entry["provenance"]["upstream"]["coreml"]


def test_contract_matches_the_published_files_and_the_app_copy(built, contract):
    from targets import ios

    out, app = built
    assert ios.check_packages(contract, out / "ios")
    assert ios.check_packages(contract, app)
    published = {p.relative_to(out / "ios"): p.read_bytes() for p in (out / "ios").rglob("*") if p.is_file()}
    copied = {p.relative_to(app): p.read_bytes() for p in app.rglob("*") if p.is_file()}
    assert published == copied
    manifest = json.loads((out / "manifest.json").read_text())["targets"]["coreml"]
    for key, art in contract["artifacts"].items():
        assert art["file"] == manifest["variants"][key]["info"]["package"]
        assert art["sha256"] == ios.tree_sha256(out / "coreml" / art["file"])  # the very same package
        assert [t["name"] for t in art["inputs"]] == ["image", "query"]
        assert [t["name"] for t in art["outputs"]] == ["relevance", "topk_indices", "weights"]
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
    from targets import ios

    project = (IOS / "project.yml").read_text()
    rel = ios.APP_RESOURCES.relative_to(IOS).as_posix()  # ArrcocDemo/Resources
    assert f"path: {rel}" in project and "type: folder" in project
    contract_swift = (IOS / "ArrcocDemo" / "Contract.swift").read_text()
    assert f'resourcesFolder = "{ios.APP_RESOURCES.name}"' in contract_swift
    assert 'fileName = "contract"' in contract_swift


def test_swift_reads_every_key_it_uses_from_the_build(built, contract):
    golden = json.loads((built[1] / contract["golden"]["json"]).read_text())
    keys = all_keys(contract) | all_keys(golden)
    used = set()
    for path in SWIFT:
        used |= swift_properties(path.read_text())
    assert {"artifacts", "inputs", "outputs", "preprocessing", "default_artifact", "sample_image", "gate"} <= used
    assert used <= keys, f"Swift decodes keys the build does not write: {sorted(used - keys)}"


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


def test_swift_orientation_table_is_pils_exif_transpose():
    """RelevanceModel.orientations and exifOrientation, read from the Swift source, applied as
    uprightRGB does, give PIL's exif_transpose for all eight orientations, and the table is the
    Android app's."""
    model = (IOS / "ArrcocDemo" / "RelevanceModel.swift").read_text()
    table_src = model[model.index("static let orientations"):]
    table_src = table_src[:table_src.index("]\n")]
    table = {int(k): tuple(v == "true" for v in flags) for k, *flags in
             re.findall(r"(\d): \((true|false), (true|false), (true|false)\)", table_src)}
    assert sorted(table) == list(range(1, 9))
    upright = swift_function(model, "uprightRGB")
    for line in ("let height = o.transpose ? sw : sh, width = o.transpose ? sh : sw", "var a = o.transpose ? c : r",
                 "var b = o.transpose ? r : c", "if o.flipRows { a = sh - 1 - a }", "if o.flipCols { b = sw - 1 - b }",
                 "let s = a * stride + b * 4", "rgb[out + k] ="):
        assert line in upright, line
    stored = np.random.default_rng(23).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    for orientation, flags in table.items():
        assert np.array_equal(reindex(stored, *flags), exif_upright_reference(orientation, stored)), orientation
    kotlin = (ANDROID / "app" / "src" / "main" / "java" / "org" / "arrcoc" / "demo" / "RelevanceModel.kt").read_text()
    kotlin_table = {int(k): tuple(v == "true" for v in flags) for k, *flags in
                    re.findall(r"(\d) to Orientation\((true|false), (true|false), (true|false)\)", kotlin)}
    assert table == kotlin_table
    # UIImage.Orientation -> EXIF value: Apple's CGImagePropertyOrientation raw values
    mapping = dict(re.findall(r"\.(\w+): (\d)", model[model.index("static let exifOrientation"):model.index("static let orientations")]))
    assert {k: int(v) for k, v in mapping.items()} == {
        "up": 1, "upMirrored": 2, "down": 3, "downMirrored": 4, "leftMirrored": 5, "right": 6, "rightMirrored": 7, "left": 8}


def test_sample_photo_is_the_golden_whole_photo(built, contract):
    """sample.png decodes (PIL, as load_photo) to exactly the golden sample contract.app.sample_golden
    names; GoldenParityTests.testSamplePhotoDecodesToTheGoldenBytes compares the app's own decode."""
    from pipeline.golden import load_photo

    golden = json.loads((built[1] / contract["golden"]["json"]).read_text())
    sample = next(s for s in golden["samples"] if s["name"] == contract["app"]["sample_golden"])
    arr = sample["arrays"]["image"]
    data = (built[1] / contract["golden"]["bin"]).read_bytes()[arr["offset"]:arr["offset"] + arr["bytes"]]
    expected = np.frombuffer(data, dtype=np.uint8).reshape(arr["shape"])[0]
    photo = load_photo(built[1] / contract["app"]["sample_image"])
    assert photo.shape[0] != photo.shape[1] and np.array_equal(photo, expected)
