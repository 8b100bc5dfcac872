"""Training data (pipeline/training/scenes.py) and the training run (pipeline/training/train.py)."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from arrcoc_edge.errors import CheckpointError
from arrcoc_edge.relevance.checkpoint import load_checkpoint
from arrcoc_edge.relevance.model import ModelConfig, TextureArray, build_model
from arrcoc_edge.training import features
from arrcoc_edge.training import scenes as sc
from arrcoc_edge.training import evaluation as ev
from arrcoc_edge.training import train as tr

REPO = Path(__file__).resolve().parent.parent
TRAINED = REPO / "checkpoints" / "arrcoc-v0.1-trained.safetensors"
QUIET = dict(log=lambda message: None)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_scenes_are_deterministic_with_sound_ground_truth():
    a, b = sc.make_scene(sc.HELDOUT_SEED_BASE + 3), sc.make_scene(sc.HELDOUT_SEED_BASE + 3)
    np.testing.assert_array_equal(a.image, b.image)
    assert a.queries == b.queries and (a.masks == b.masks).all()
    assert a.image.shape == (3, 224, 224) and 0.0 <= a.image.min() and a.image.max() <= 1.0
    assert a.masks.shape == (len(a.queries), 196) and a.masks.any(axis=1).all()
    # the seed ranges of training and held-out scenes never meet
    assert sc.TRAIN_SEED_BASE + 100_000 < sc.HELDOUT_SEED_BASE


def test_every_query_names_one_item_and_place_queries_stay_in_their_quadrant():
    quadrant_of = {"top left": (0, 0), "top right": (0, 1), "bottom left": (1, 0), "bottom right": (1, 1)}
    for seed in range(sc.HELDOUT_SEED_BASE, sc.HELDOUT_SEED_BASE + 20):
        scene = sc.make_scene(seed)
        items = {m.tobytes() for m in scene.masks}
        assert 2 <= len(items) <= 4 and len(scene.queries) == 3 * len(items)
        for query, mask in zip(scene.queries, scene.masks):
            # a repeated phrase would have to name the same item
            same = [m for q, m in zip(scene.queries, scene.masks) if q == query]
            assert all((m == mask).all() for m in same), (seed, query)
            place = next((p for p in quadrant_of if p in query), None)
            if place:
                qy, qx = quadrant_of[place]
                grid = mask.reshape(14, 14)
                assert grid[qy * 7 : qy * 7 + 7, qx * 7 : qx * 7 + 7].sum() == grid.sum(), (seed, query)


def test_a_red_shape_query_points_at_red_pixels():
    for seed in range(sc.HELDOUT_SEED_BASE, sc.HELDOUT_SEED_BASE + 40):
        scene = sc.make_scene(seed)
        if "something red" in scene.queries:
            mask = scene.masks[scene.queries.index("something red")].reshape(14, 14)
            patches = scene.image.reshape(3, 14, 16, 14, 16).mean(axis=(2, 4))
            red = (patches[0] > 0.7) & (patches[1] < 0.3) & (patches[2] < 0.3)
            assert red[mask].mean() > 0.9 and not red[~mask].any()
            return
    pytest.fail("no 'something red' query in 40 held-out scenes")


def test_query_kinds_follow_the_templates():
    for seed in range(sc.HELDOUT_SEED_BASE, sc.HELDOUT_SEED_BASE + 10):
        scene = sc.make_scene(seed)
        assert len(scene.kinds) == len(scene.queries)
        for query, kind in zip(scene.queries, scene.kinds):
            assert (kind == "place") == any(p in query for p in sc.QUADRANTS), (query, kind)
            if kind == "shape":
                assert any(w in query for w in (*sc.COLOURS, *sc.SHAPES)), query
    assert set(sc.KINDS) == {k for members in sc.FAMILIES.values() for k in members}


def test_open_scenes_are_deterministic_and_their_targets_are_what_the_query_asks_for():
    a, b = sc.make_open_scene(sc.OPEN_HELDOUT_SEED_BASE + 4), sc.make_open_scene(sc.OPEN_HELDOUT_SEED_BASE + 4)
    np.testing.assert_array_equal(a.image, b.image)
    assert a.queries == b.queries and a.kinds == b.kinds and (a.masks == b.masks).all()
    assert sc.OPEN_TRAIN_SEED_BASE + 100_000 < sc.OPEN_HELDOUT_SEED_BASE
    texture = TextureArray(ModelConfig())
    seen = set()
    for seed in range(sc.OPEN_HELDOUT_SEED_BASE, sc.OPEN_HELDOUT_SEED_BASE + 30):
        scene = sc.make_open_scene(seed)
        kind = scene.kinds[0]
        seen.add(kind)
        assert kind == sc.OPEN_KINDS[seed % 3] and set(scene.kinds) == {kind} and len(scene.queries) == 2
        assert scene.masks.any(axis=1).all() and (scene.masks[0] == scene.masks[1]).all()
        mask = scene.masks[0]
        patches = scene.image.reshape(3, 14, 16, 14, 16)
        if kind == "detail":
            assert all(q in sc.DETAIL_TEMPLATES for q in scene.queries)
            # the target holds the scene's fine detail: the largest change between neighbouring
            # 2 x 2 blocks (pooled first, so the background's pixel noise does not count as detail)
            grey = scene.image.mean(axis=0).reshape(112, 2, 112, 2).mean(axis=(1, 3))
            step = (np.pad(np.abs(np.diff(grey, axis=1)), ((0, 0), (0, 1)))
                    + np.pad(np.abs(np.diff(grey, axis=0)), ((0, 1), (0, 0))))
            busy = step.reshape(14, 8, 14, 8).mean(axis=(1, 3)).reshape(-1)
            assert busy[mask].mean() > 1.4 * busy[~mask].mean(), seed  # 1.5 at least in 150 scenes
        elif kind == "unusual":
            assert all(q in sc.UNUSUAL_TEMPLATES for q in scene.queries)
            # the target is the colourless item: the least saturated patches
            sat = (patches.max(axis=0) - patches.min(axis=0)).mean(axis=(1, 3)).reshape(-1)
            assert sat[mask].mean() < 0.5 * sat[~mask].mean() and np.median(sat[~mask]) > 0.2, seed
        else:
            # salient: the query names an item shown twice (one sharp, one blurred); the target is the sharp one
            assert not any(q in sc.DETAIL_TEMPLATES + sc.UNUSUAL_TEMPLATES for q in scene.queries)
    assert seen == set(sc.OPEN_KINDS)
    # the perspectival map alone finds the detail targets well above chance (what the balancer can use)
    data = sc.make_scenes(0, 0, 30, sc.OPEN_HELDOUT_SEED_BASE)
    feats = features.features(texture, data)
    detail = torch.from_numpy(feats.kinds == "detail")
    persp = feats.fixed_maps[feats.scene_of[detail], 1]
    chance = float(feats.masks[detail].sum(dim=1).mean() / 196)
    assert ev.precision_at_k(persp, feats.masks[detail], 64)["r_precision"] > chance + 0.25


def test_natural_scenes_ask_the_colours_their_pixels_hold_or_lack():
    """Natural scenes (crops of the training photos only): each query names one basic colour; a
    "natural" one is present by the natural photo set's pixel rule and its cells hold the colour, an
    "absent" one is absent by that rule and has no cells. Deterministic."""
    from arrcoc_edge.stages import natural_photos as nat

    assert set(sc.PHOTOS) and {image for _, image in sc.PHOTOS.values()} == {nat.PHOTOS[p][1] for p in nat.SPLITS["train"]}
    kinds = set()
    for seed in range(sc.NATURAL_TRAIN_SEED_BASE, sc.NATURAL_TRAIN_SEED_BASE + 25):
        a, b = sc.make_natural_scene(seed), sc.make_natural_scene(seed)
        np.testing.assert_array_equal(a.image, b.image)
        assert a.queries == b.queries and (a.masks == b.masks).all() and a.kinds == b.kinds
        pixels = np.rint(a.image.transpose(1, 2, 0) * 255).astype(np.uint8)
        masks = nat.colour_masks(pixels)
        for query, kind, cells in zip(a.queries, a.kinds, a.masks):
            (colour,) = [c for c in nat.COLOURS if c in query.split(" ") or f"{c}?" in query]
            share = masks[colour].mean()
            if kind == "natural":
                assert share >= nat.PRESENT and cells.any(), (seed, query)
                assert (nat.cell_shares(masks[colour], sc.GRID)[cells] >= nat.CELL_PRESENT).all(), (seed, query)
            else:
                assert kind == sc.ABSENT_KIND and share <= nat.ABSENT and not cells.any(), (seed, query)
            kinds.add(kind)
    assert kinds == {"natural", sc.ABSENT_KIND}


def test_presence_loss_rewards_evidence_that_follows_presence():
    high, low = torch.full((2, 196), 0.2), torch.full((2, 196), 0.2)
    high[0, :8], low[1, :8] = 0.9, 0.9  # the present pair's strongest cells match, or the absent one's
    present = torch.tensor([True, False])
    assert tr._presence_loss(high, present) < tr._presence_loss(low, present)


def test_metric_definitions():
    relevance = torch.tensor([[0.9, 0.8, 0.1, 0.7, 0.0], [0.0, 0.1, 0.2, 0.3, 0.4]])
    masks = torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0]])
    got = ev.precision_at_k(relevance, masks, k=2)
    # top2: row 0 {0,1} -> 1 hit, row 1 {4,3} -> 0 hits
    assert got["precision_at_k"] == pytest.approx(0.25)  # (1/2 + 0/2) / 2
    assert got["recall_at_k"] == pytest.approx(0.25)  # hits / min(K, |gt|) = (1/2 + 0/2) / 2
    assert got["precision_ceiling"] == pytest.approx(1.0)  # |gt| >= K in both rows
    # R-precision: row 0 top2 {0,1} -> 1/2; row 1 top3 {4,3,2} -> 1/3
    assert got["r_precision"] == pytest.approx((0.5 + 1 / 3) / 2, abs=1e-4)
    perfect = ev.precision_at_k(masks, masks, k=4)
    assert perfect["recall_at_k"] == perfect["r_precision"] == 1.0
    assert perfect["precision_at_k"] == perfect["precision_ceiling"] == pytest.approx((2 + 3) / 8)


def test_cached_training_path_equals_the_model_forward():
    model = build_model(ModelConfig(), seed=3)
    data = sc.make_scenes(6, sc.HELDOUT_SEED_BASE, 3, sc.OPEN_HELDOUT_SEED_BASE)
    feats = features.features(TextureArray(model.cfg), data)
    scenes = torch.tensor([1, 4, 7])
    pairs = features.pairs_of(feats, scenes)
    relevance = features.relevance_of(model, feats, scenes, pairs)
    with torch.no_grad():
        images = features.as_photos(data.images[data.scene_of[pairs.numpy()]])
        expected, _, expected_weights, _ = model(images, feats.queries[pairs])
    torch.testing.assert_close(relevance.detach(), expected, atol=1e-5, rtol=0)
    # the evaluation's path (maps + weights of every pair, then `ablated`) is the same model
    maps, weights = ev.outputs(model, feats)
    torch.testing.assert_close(weights[pairs], expected_weights, atol=1e-6, rtol=0)
    torch.testing.assert_close(features.ablated(maps, weights, None)[pairs], expected, atol=1e-5, rtol=0)


def test_ablation_zeroes_one_way_of_knowing():
    maps = torch.rand(4, 3, 196)
    weights = torch.softmax(torch.randn(4, 3), dim=1)
    for drop in range(3):
        others = [i for i in range(3) if i != drop]
        expected = (weights[:, others, None] * maps[:, others]).sum(dim=1)
        lo, hi = expected.amin(dim=1, keepdim=True), expected.amax(dim=1, keepdim=True)
        torch.testing.assert_close(features.ablated(maps, weights, drop), (expected - lo) / (hi - lo + 1e-8))
    # a map with weight one is the relevance itself (min-maxed)
    onehot = torch.tensor([[0.0, 1.0, 0.0]]).expand(4, 3)
    m = maps[:, 1]
    expected = (m - m.amin(1, True)) / (m.amax(1, True) - m.amin(1, True) + 1e-8)
    torch.testing.assert_close(features.ablated(maps, onehot, None), expected)


@pytest.mark.slow  # trains twice, once in a fresh process
def test_same_seed_writes_the_same_bytes(tmp_path):
    tiny = dict(steps=3, train_scenes=6, heldout_scenes=3, open_train_scenes=3, open_heldout_scenes=3,
                natural_train_scenes=3, natural_heldout_scenes=3)
    tr.train(tmp_path / "a.safetensors", tr.Recipe(seed=7, **tiny), **QUIET)
    # the second run in a fresh process: safetensors orders its metadata differently per process
    code = ("import sys; from pathlib import Path; from arrcoc_edge.training import train as tr; "
            f"tr.train(Path(sys.argv[1]), tr.Recipe(seed=7, **{tiny!r}), log=lambda m: None)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "b.safetensors")], cwd=REPO, check=True,
                   capture_output=True, timeout=300)
    tr.train(tmp_path / "c.safetensors", tr.Recipe(seed=8, **tiny), **QUIET)
    assert _sha256(tmp_path / "a.safetensors") == _sha256(tmp_path / "b.safetensors")
    assert _sha256(tmp_path / "a.safetensors") != _sha256(tmp_path / "c.safetensors")
    loaded = load_checkpoint(tmp_path / "a.safetensors")
    prov = loaded.provenance
    assert prov["trained"] is True and prov["seed"] == 7 and prov["recipe"]["steps"] == 3
    assert set(prov["data_sha256"]) == {"train", "heldout"} and set(tr.MODELS) <= set(prov["metrics"])
    assert set(prov["metrics"]["ablation"]["by_family"]) == set(sc.FAMILIES)
    # a trained checkpoint is refused as the "untrained" baseline
    with pytest.raises(CheckpointError):
        tr.load_untrained(tmp_path / "a.safetensors")


@pytest.mark.slow
def test_short_training_beats_the_query_blind_baseline_on_heldout_scenes(tmp_path):
    recipe = tr.Recipe(steps=300, seed=5, train_scenes=200, heldout_scenes=50, open_train_scenes=60,
                       open_heldout_scenes=30)
    result = tr.train(tmp_path / "short.safetensors", recipe, **QUIET)
    m = result["provenance"]["metrics"]
    for baseline in ("query_blind", "untrained", "trained_const_query"):
        assert m["trained"]["r_precision"] > m[baseline]["r_precision"] + 0.15, (baseline, m)
        assert m["trained"]["precision_at_k"] > m[baseline]["precision_at_k"] + 0.02, (baseline, m)
    # the query-blind model learned something from the image (items vs background)
    assert m["query_blind"]["r_precision"] > m["untrained"]["r_precision"]


def test_shipped_trained_checkpoint_records_its_run():
    if not TRAINED.exists():
        pytest.skip(f"{TRAINED.name} not written yet (run `invoke train`)")
    loaded = load_checkpoint(TRAINED)
    prov, m = loaded.provenance, loaded.provenance["metrics"]
    assert prov["trained"] is True and loaded.config == ModelConfig()
    assert {"recipe", "seed", "data_sha256", "metrics"} <= set(prov)
    for baseline in ("query_blind", "untrained"):
        assert m["trained"]["r_precision"] > m[baseline]["r_precision"] + 0.15, m


def test_shipped_checkpoint_uses_each_way_of_knowing_where_the_task_needs_it():
    """Issue 31: the ablation recorded in the shipped checkpoint (held-out scenes)."""
    if not TRAINED.exists():
        pytest.skip(f"{TRAINED.name} not written yet (run `invoke train`)")
    m = load_checkpoint(TRAINED).provenance["metrics"]
    fam, kind = m["ablation"]["by_family"], m["ablation"]["by_kind"]
    # naming and position: as good as the checkpoint before issue 31 (0.797 on these same 1851 pairs)
    named = fam["naming"]["pairs"] * fam["naming"]["r_precision"]["all"]
    placed = fam["position"]["pairs"] * fam["position"]["r_precision"]["all"]
    assert (named + placed) / (fam["naming"]["pairs"] + fam["position"]["pairs"]) >= 0.797
    # ...and they need the participatory map: zeroing it costs most of their R-precision
    for name in ("naming", "position"):
        r = fam[name]["r_precision"]
        assert r["no_participatory"] < r["all"] - 0.4 and fam[name]["weights_mean"][2] > 0.95, (name, fam[name])
    # fine detail needs the perspectival map, the colourless odd one out the information map
    detail, unusual = kind["detail"]["r_precision"], kind["unusual"]["r_precision"]
    assert detail["no_perspectival"] < detail["all"] - 0.15, kind["detail"]
    assert unusual["no_information"] < unusual["all"] - 0.1, kind["unusual"]
    # the weights follow the query: open queries put most of their weight on the fixed maps
    assert sum(fam["open"]["weights_mean"][:2]) > 0.6
    assert kind["detail"]["weights_mean"][1] > kind["unusual"]["weights_mean"][1]
    assert kind["unusual"]["weights_mean"][0] > kind["detail"]["weights_mean"][0]
