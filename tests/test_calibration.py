"""The confidence calibration: the natural photos' labels against their pixels, the logistic fit,
the measures, the calibration a build publishes (calibration.json beside manifest.json), and what
the shipped checkpoint's calibration says on a natural crop (pipeline/stages/natural_photos.py,
pipeline/stages/calibration.py)."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from arrcoc_edge.relevance.evidence import CALIBRATION_FILE, Calibration
from arrcoc_edge.stages import calibration as cal
from arrcoc_edge.stages import natural_photos as nat


def test_pixel_rules_name_the_colours_people_would():
    swatches = {"red": (220, 30, 30), "orange": (245, 140, 20), "yellow": (240, 215, 30), "green": (40, 170, 60),
                "blue": (30, 70, 220), "purple": (135, 40, 190), "pink": (245, 110, 180), "brown": (110, 60, 20),
                "white": (245, 245, 245), "grey": (128, 128, 128), "black": (10, 10, 10)}
    for colour, rgb in swatches.items():
        masks = nat.colour_masks(np.array([[rgb]], dtype=np.uint8))
        assert [name for name, m in masks.items() if m.all()] == [colour], (colour, rgb)
    pale_red = nat.colour_masks(np.array([[(250, 170, 170)]], dtype=np.uint8))
    assert pale_red["pink"].all() and not pale_red["red"].any()


def test_photo_splits_are_disjoint_and_training_keeps_to_its_photos():
    from arrcoc_edge.training import scenes

    splits = [set(photos) for photos in nat.SPLITS.values()]
    assert not (splits[0] & splits[1] or splits[0] & splits[2] or splits[1] & splits[2])
    assert {image for _, image in scenes.PHOTOS.values()} == {nat.PHOTOS[p][1] for p in nat.SPLITS["train"]}


def test_natural_labels_follow_the_pixels():
    """Every colour pair's answer is its crop's pixel share by the rule (present >= 6%, absent <=
    0.5%, nothing between asked); a cell holds the colour by the same rule; places are quadrants."""
    nset = nat.natural_set("calibration", grid=14)
    assert len(nset.images) == len(nat.SPLITS["calibration"]) * nat.CROPS_PER_PHOTO
    asked = {(p.crop, p.word) for p in nset.pairs}
    masks = [nat.colour_masks(image) for image in nset.images]
    for crop, by_colour in enumerate(masks):
        for colour, mask in by_colour.items():
            share = mask.mean()
            assert ((crop, colour) in asked) == (not nat.ABSENT < share < nat.PRESENT), (nset.names[crop], colour)
    for pair in nset.pairs:
        if pair.kind == "colour":
            mask = masks[pair.crop][pair.word]
            assert pair.present == (mask.mean() >= nat.PRESENT) and pair.word in pair.query
            cell = mask.reshape(14, 16, 14, 16).mean(axis=(1, 3)).reshape(-1)
            assert np.array_equal(pair.cells, cell >= nat.CELL_PRESENT)
        else:
            assert pair.present and pair.cells.sum() == 49 and pair.word in pair.query
    counts = nset.counts()
    assert counts["red"][0] >= 10 and counts["black"][0] >= 10 and counts["yellow"][1] >= 10


def test_place_cells_of_an_odd_grid_leave_the_middle_out():
    cells = nat.place_cells("bottom right", 5).reshape(5, 5)
    assert cells.sum() == 4 and cells[3:, 3:].all()
    assert nat.cell_shares(np.eye(10, dtype=bool), 5).reshape(5, 5)[0, 0] == 0.5


def test_fit_separates_separable_evidence_and_recovers_a_known_model():
    rng = np.random.default_rng(0)
    present = rng.random(400) < 0.3
    evidence = rng.uniform(0.45, 0.55, size=(400, 4))
    evidence[present, 0] += 0.2  # top_mean alone separates
    coef, bias = cal.fit_logistic(evidence, present)
    confidence = Calibration(tuple(coef), bias).confidence(evidence)
    assert (confidence[present] >= 0.5).all() and (confidence[~present] < 0.5).all()
    assert cal.measure(confidence, present)["roc_auc"] == 1.0

    x = rng.normal(size=(20000, 4))
    truth = np.array([1.5, -0.5, 0.0, 0.8])
    y = rng.random(20000) < 1 / (1 + np.exp(-(x @ truth)))  # balanced by construction (bias 0)
    coef, bias = cal.fit_logistic(x, y, l2=0.0)
    assert np.allclose(coef, truth, atol=0.08) and abs(bias) < 0.08
    with pytest.raises(ValueError, match="present and absent"):
        cal.fit_logistic(x[:5], np.ones(5, bool))


def test_the_penalty_is_chosen_by_leaving_one_photo_out():
    """Photos whose evidence follows one logistic model: a penalty that pulls every confidence toward
    0.5 calibrates worse on the photo left out, so the choice is among the small ones; a split that
    cannot be cross-validated keeps the default."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1200, 4))
    y = rng.random(1200) < 1 / (1 + np.exp(-(x @ np.array([2.0, 0.0, -1.0, 1.0]) - 0.5)))
    photos = np.repeat(np.array(["a", "b", "c", "d"]), 300)
    l2, scores = cal.choose_penalty(x, y, photos)
    assert set(scores) == {f"{c:g}" for c in cal.L2_CHOICES} and scores[f"{l2:g}"] == min(scores.values())
    assert scores["0.1"] > scores[f"{l2:g}"] and l2 < 0.1
    assert cal.choose_penalty(x, y, np.full(1200, "a")) == (cal.L2, {})
    only_absent_elsewhere = y & (photos == "a")
    assert cal.choose_penalty(x, only_absent_elsewhere, photos) == (cal.L2, {})


def test_measures_agree_with_their_definitions():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(1)
    labels = rng.random(300) < 0.4
    scores = np.round(rng.random(300) + 0.3 * labels, 2)  # ties included
    assert cal.roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert cal.balanced_accuracy(np.array([1, 0, 0, 0], bool), np.array([1, 1, 0, 0], bool)) == 0.75
    # two bins: 0.2 said for 2 pairs (1 present: |0.2 - 0.5|), 0.9 for 2 (2 present: |0.9 - 1|)
    ece = cal.expected_calibration_error(np.array([0.2, 0.2, 0.9, 0.9]), np.array([1, 0, 1, 1], bool))
    assert ece == pytest.approx(0.5 * 0.3 + 0.5 * 0.1)


@pytest.fixture(scope="module")
def shipped_calibration(loaded):
    """The shipped checkpoint's calibration, fitted as a build fits it (without the held-out run)."""
    from arrcoc_edge.stages.sentences import cached_minilm_embed

    return cal.fit(loaded.model.eval(), loaded.config, cached_minilm_embed, "all-MiniLM-L6-v2", heldout=False)


def test_shipped_checkpoint_is_confident_of_the_red_it_sees_and_not_of_absent_blue(loaded, shipped_calibration):
    """A held-out crop (the motorcycle, a photo no training or fit saw) with a red object: "something
    red" reads confidence >= 0.5, the same crop asked for blue (none of its pixels) < 0.5."""
    from arrcoc_edge.stages.sentences import cached_minilm_embed

    name, crop = next((n, c) for n, c in nat.crops("stereo_motorcycle") if n == "stereo_motorcycle/0.35@0.5,0.5")
    masks = nat.colour_masks(crop)
    assert masks["red"].mean() >= nat.PRESENT and masks["blue"].mean() <= nat.ABSENT
    cells = np.zeros(loaded.config.num_patches, bool)
    pairs = [nat.Pair(0, q, "colour", w, w == "red", cells) for q, w in (("something red", "red"),
                                                                           ("is there anything blue?", "blue"))]
    outcome = cal.run_pairs(loaded.model.eval(), nat.NaturalSet("heldout", 14, [name], [crop], pairs),
                            cached_minilm_embed)
    red, blue = shipped_calibration.confidence(outcome.evidence)
    assert red >= 0.5 > blue, (red, blue)
    record = shipped_calibration.to_dict()
    assert Calibration.from_dict(json.loads(json.dumps(record))) == shipped_calibration
    assert record["fitted_on"]["split"] == "calibration" and record["fitted_on"]["photos"] == list(nat.SPLITS["calibration"])


@pytest.mark.slow
def test_a_build_publishes_its_fitted_calibration_beside_the_manifest(onnx_build):
    manifest = json.loads((onnx_build.out / "manifest.json").read_text())
    entry = manifest["calibration"]
    raw = (onnx_build.out / CALIBRATION_FILE).read_bytes()
    assert entry["file"] == CALIBRATION_FILE and entry["bytes"] == len(raw)
    assert entry["sha256"] == hashlib.sha256(raw).hexdigest()
    calibration = Calibration.read(onnx_build.out / CALIBRATION_FILE)
    fitted = calibration.fitted_on
    assert fitted["checkpoint_sha256"] == manifest["checkpoint"]["sha256"] and fitted["pairs"] > 500
    assert fitted["heldout"]["measured"] and fitted["heldout"]["photos"] == list(nat.SPLITS["heldout"])
    assert any(abs(c) > 0.1 for c in calibration.coef)  # fitted, not a placeholder


def _script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "measure_stands_out.py"
    spec = importlib.util.spec_from_file_location("measure_stands_out", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_measured_table_in_the_docs_is_the_scripts_and_its_misses_follow_the_targets():
    """docs/model.md's natural-photo table: every checkpoint's row for every colour and place, in the
    script's format, and each row's "misses" what the script's targets say of its own numbers."""
    from pathlib import Path

    script = _script()
    page = (Path(__file__).resolve().parents[1] / "docs" / "model.md").read_text()
    table = page.split("<!-- natural table: printed by scripts/measure_stands_out.py -->\n")[1].split("<!--")[0]
    lines = table.strip().splitlines()
    assert "\n".join(lines[:2]) == script.HEADER
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    words = [*nat.COLOURS, *nat.PLACES, "all colours"]
    assert [r[1] for r in rows] == words * 2 and {r[0] for r in rows} == {"shipped (G=14, K=64)",
                                                                           "reference layout (G=32, K=200)"}
    number = lambda text: float("nan") if text == "—" else float(text)  # noqa: E731
    for name, word, counts, auc, bacc, ece, hold, missed in rows:
        present, absent = (int(v) for v in counts.split(" / "))
        row = {"word": word, "present": present, "absent": absent, "roc_auc": number(auc),
               "balanced_accuracy": number(bacc), "ece": number(ece), "strongest_8": number(hold)}
        assert script.misses(row) == missed, (name, word)
        assert script.markdown(name.split(" (")[0], [row])[0].split("|")[3:] == \
            f"| {name} | {word} | {counts} | {auc} | {bacc} | {ece} | {hold} | {missed} |".split("|")[3:]
