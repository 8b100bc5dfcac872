"""The held-out split holds the photos users hold beside camera photos (greyscale files, fine
textures, a document scan, small and upscaled pictures), and every quantised variant's record says
how it does on each kind."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from arrcoc_edge.relevance.signature import ModelConfig
from arrcoc_edge.stages import golden

KINDS = {"greyscale", "fine texture", "document scan", "small or upscaled"}


@pytest.fixture(scope="module")
def heldout():
    return golden._split(golden.HELDOUT_PHOTOS, golden.WHOLE_HELDOUT, ModelConfig(), 0)


def test_every_photo_kind_is_held_out_and_never_calibrated(heldout):
    kinds = heldout.photo_kinds
    assert set(kinds) == KINDS and all(kinds.values())
    sources = set(golden.HELDOUT_PHOTOS) | {photo for _, photo, _ in golden.WHOLE_HELDOUT}
    calibrated = set(golden.CALIBRATION_PHOTOS) | {photo for _, photo, _ in golden.WHOLE_CALIBRATION}
    assert not sources & calibrated  # split by photo: a calibrator never sees a held-out pixel
    sizes = {name: image.shape[:2] for name, image in zip(heldout.names, heldout.images)}
    assert sizes["page/scan"] == (191, 384) and sizes["microaneurysms/small"] == (102, 102)
    assert sizes["chelsea/upscaled"] == (853, 1280) and sizes["gravel/texture"] == (512, 512)


def test_greyscale_samples_are_the_single_channel_files_as_predict_decodes_them(heldout, tmp_path):
    """A greyscale sample is what load_photo makes of a one-channel PNG of the photo: grey repeated."""
    grey = [i for i in heldout.photo_kinds["greyscale"] if heldout.names[i] in dict((n, 0) for n, _, _ in golden.WHOLE_HELDOUT)]
    assert {heldout.names[i] for i in grey} == {"camera/grey", "page/scan", "gravel/texture", "microaneurysms/small"}
    for i in grey:
        photo = golden._photo(heldout.names[i].split("/")[0])
        assert photo.ndim == 2  # stored with one channel
        path = tmp_path / "grey.png"
        Image.fromarray(photo).save(path)
        assert Image.open(path).mode == "L"
        assert np.array_equal(golden.load_photo(path), heldout.images[i])
    for i in heldout.photo_kinds["greyscale"]:
        image = heldout.images[i]
        assert np.array_equal(image[..., 0], image[..., 1]) and np.array_equal(image[..., 0], image[..., 2])


def test_the_upscaled_photo_is_a_thumbnail_blown_up(heldout):
    """Enlarged from 120 x 80: its detail is the thumbnail's, so it is far smoother than the photo."""
    big = heldout.images[heldout.names.index("chelsea/upscaled")].astype(np.float64)
    whole = heldout.images[heldout.names.index("chelsea/whole")].astype(np.float64)
    roughness = lambda im: np.abs(np.diff(im, axis=1)).mean()  # noqa: E731
    assert roughness(big) < 0.25 * roughness(whole)


@pytest.mark.slow
@pytest.mark.parametrize("target, build", [("onnx-int8", "onnx-int8"), ("executorch", "executorch,ptl")])
def test_each_quantised_variants_record_has_every_photo_kind(shared_build, target, build):
    """The manifest's parity.photos: each kind's numbers within the variant's gate, the hardest
    samples named, on this host and on each emulated arm64 CPU model."""
    manifest = json.loads((shared_build(build).out / "manifest.json").read_text())
    counts = manifest["golden"]["heldout"]["photo_kinds"]
    assert set(counts) == KINDS
    for name, variant in manifest["targets"][target]["variants"].items():
        if "int8" not in name:
            continue
        parity = variant["parity"]
        records = [(parity["photos"], parity["metrics"])] + [
            (r["photos"], r["metrics"]) for r in parity.get("by_isa", {}).values() if "photos" in r]
        assert len(records) >= 3, f"{target} {name}: no arm64 record"  # this host and the two emulated CPUs
        minimum = parity["gate"]["min"]["topk_overlap_min"]
        for photos, metrics in records:
            assert {k: v["samples"] for k, v in photos["kinds"].items()} == counts
            assert all(v["topk_overlap_min"] >= minimum for v in photos["kinds"].values()), photos
            assert photos["hardest"]["topk_overlap"]["value"] == metrics["topk_overlap_min"]
            assert photos["hardest"]["relevance_max_abs"]["value"] == pytest.approx(metrics["relevance_max_abs"])


def test_the_report_shows_each_variants_photo_kinds_and_hardest_sample():
    from arrcoc_edge.publishing.report import render_html

    photos = {"kinds": {"greyscale": {"samples": 14, "topk_overlap_min": 0.96875, "relevance_max_abs": 0.0315,
                                      "topk_overlap_mean": 0.99}},
              "hardest": {"topk_overlap": {"sample": "brick/start", "value": 0.96875},
                          "relevance_max_abs": {"sample": "sentence:logo/centre", "value": 0.049}}}
    manifest = {"targets": {"onnx-int8": {"status": "published", "variants": {"int8": {
        "status": "verified", "parity": {"metrics": {"topk_overlap_min": 0.96875}, "photos": photos}}}}}}
    page = render_html(manifest, None, [], None)
    table = page[page.index("Parity per photo kind"):page.index("Parity per instruction set")]
    assert "greyscale" in table and "0.9688 | 0.0315" in table and "brick/start 0.9688" in table
