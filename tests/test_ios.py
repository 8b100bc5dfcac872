"""iOS target: the app bundle matches its contract, lands where the Swift code looks, and the Swift
code takes every name from contract.json. (The app cannot be compiled here: no Xcode.)"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mobile_build import built_ios

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
