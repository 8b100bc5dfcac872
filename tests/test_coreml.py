"""CoreML target on the whole-photo contract: built once through the CLI; manifest, packages and the
NumPy MIL evaluator checked, on the 16G crops and on every whole photo of the held-out split.

Off macOS there is no CoreML runtime: the target must say so (status unverified, reason naming
macOS) while still holding every variant's reference-check metrics to its gate. The packages take
the photo at its own size (flexible batch, height and width) as float16 bytes (CoreML has no uint8
inputs; coreml.IMAGE_INPUT) and compute arr-coc-0-1's resize themselves.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("coremltools")
pytestmark = pytest.mark.slow

VARIANTS = ("fp32", "fp16", "int8")


@pytest.fixture(scope="module")
def built(ios_build) -> Path:
    """The session's apps build (`--target android,ios`, conftest ios_build), whose coreml stage is
    the same conversion a `--target coreml` build runs: one conversion for this file and test_ios.py."""
    return ios_build.out


@pytest.fixture(scope="module")
def entry(built) -> dict:
    return json.loads((built / "manifest.json").read_text())["targets"]["coreml"]


def package(built: Path, entry: dict, variant: str) -> Path:
    return built / "coreml" / entry["variants"][variant]["info"]["package"]


def _run(program, inputs: dict) -> dict:
    """The package's program on the contract's inputs, the photo handed over as the app does."""
    from arrcoc_edge.targets.coreml.target import to_image_input

    return program.run({**inputs, "image": to_image_input(inputs["image"])})


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS CoreML itself verifies")
def test_status_is_unverified_with_the_reason(entry):
    assert entry["status"] == "unverified"
    assert "macOS" in entry["reason"] and "not Apple's runtime" in entry["reason"]
    for name in VARIANTS:
        parity = entry["variants"][name]["parity"]
        assert parity["measured"] and "MIL evaluator" in parity["runtime"]


def test_every_variant_measured_and_within_its_gate(entry, golden):
    assert set(entry["variants"]) == set(VARIANTS)
    for name, v in entry["variants"].items():
        metrics, gate = v["parity"]["metrics"], v["parity"]["gate"]
        assert v["parity"]["passed"], (name, metrics)
        # every held-out sample, the whole photos (12 MP included) among them
        assert metrics["samples"] == len(golden.heldout) >= 20
        for key, limit in gate["max"].items():
            assert metrics[key] <= limit, (name, key)
        for key, limit in gate["min"].items():
            assert metrics[key] >= limit, (name, key)
        assert v["size"]["bytes"] <= v["size"]["budget"]
    # FP16 and 8-bit weights: the lossy gate (top-K overlap mean >= 0.98, min >= 0.95)
    for name in ("fp16", "int8"):
        gate = entry["variants"][name]["parity"]["gate"]
        assert gate["min"]["topk_overlap_mean"] >= 0.98 and gate["min"]["topk_overlap_min"] >= 0.95
    assert entry["variants"]["fp32"]["parity"]["gate"]["max"]["relevance_max_abs"] <= 1e-3


def test_variants_are_what_they_claim(built, entry):
    from arrcoc_edge.targets.coreml.mil_program import MilProgram, _tensor_type

    fp32, fp16, int8 = (entry["variants"][n] for n in VARIANTS)
    assert fp16["info"]["compute_dtypes"].get("fp16", 0) > fp32["info"]["compute_dtypes"].get("fp16", 0)
    # FP32 computes nothing in fp16: its only fp16 values are the photo's bytes, moved, not computed
    program = MilProgram(package(built, entry, "fp32"))
    fp16_ops = {o.type for o in program.operations if o.type != "const" and o.outputs
                and _tensor_type(o.outputs[0].type)[0] == np.float16}
    assert fp16_ops and fp16_ops <= {"slice_by_index", "reshape", "gather_along_axis", "gather"}, fp16_ops
    assert int8["info"]["op_counts"].get("constexpr_affine_dequantize", 0) >= 3
    assert int8["size"]["bytes"] < fp16["size"]["bytes"] < fp32["size"]["bytes"]


def test_packages_keep_the_contracts_io(built, entry):
    """Names, float16 photo bytes with flexible batch / height / width, int32 top-K; the manifest
    and the model description say what the app hands over and why."""
    import coremltools as ct

    from arrcoc_edge.relevance.model import MAX_SIDE, MIN_SIDE
    from arrcoc_edge.stages.export import MAX_BATCH
    from arrcoc_edge.targets.coreml.target import IMAGE_INPUT

    types = ct.proto.FeatureTypes_pb2.ArrayFeatureType
    for name in VARIANTS:
        spec = ct.utils.load_spec(str(package(built, entry, name)))
        assert [i.name for i in spec.description.input] == ["image", "query"]
        assert [o.name for o in spec.description.output] == ["relevance", "topk_indices", "weights", "evidence"]
        image = spec.description.input[0].type.multiArrayType
        assert image.dataType == types.FLOAT16
        ranges = [(r.lowerBound, r.upperBound) for r in image.shapeRange.sizeRanges]
        assert ranges == [(1, MAX_BATCH), (MIN_SIDE, MAX_SIDE), (MIN_SIDE, MAX_SIDE), (3, 3)]
        assert spec.description.output[1].type.multiArrayType.dataType == types.INT32
        description = spec.description.input[0].shortDescription
        assert "float16" in description and "no crop" in description and "uint8" in description
        info = entry["variants"][name]["info"]
        assert info["image_input"] == IMAGE_INPUT and "no resampling" in info["image_input"]["hand_over"]
        assert "resize" in info["resize_indices"] and "float32" in info["resize_indices"]
    bundle = json.loads((built / "coreml" / "golden.json").read_text())
    assert {s["arrays"]["topk_indices"]["dtype"] for s in bundle["samples"]} == {"int32"}
    assert any(s["arrays"]["image"]["shape"][1] != s["arrays"]["image"]["shape"][2] for s in bundle["samples"])


def test_front_end_is_model_py_bit_for_bit(loaded, golden):
    """The CoreML form of the resize (the general path, float16 bytes in) reads the same bytes
    and blends them in the same order as model.py on uint8: equal windows on every held-out size."""
    import torch

    from arrcoc_edge.targets.coreml.target import coreml_model

    front = coreml_model(loaded.model).texture.windows
    sizes = {}
    for i, image in enumerate(golden.heldout.images):
        sizes.setdefault(image.shape, i)
    for i in sizes.values():
        photo = torch.from_numpy(np.array(golden.heldout.images[i]))[None]
        with torch.no_grad():
            assert torch.equal(front(photo.half()), loaded.model.texture.windows(photo)), golden.heldout.names[i]


def test_mil_evaluator_agrees_with_eager(built, entry, loaded, golden):
    """One held-out crop through the saved FP32 program, op by op, vs eager PyTorch."""
    import torch

    from arrcoc_edge.targets.coreml.mil_program import MilProgram

    program = MilProgram(package(built, entry, "fp32"))
    inputs = golden.heldout.inputs(0, 1)
    got = _run(program, inputs)
    with torch.no_grad():
        rel, idx, w, ev = loaded.model(torch.from_numpy(inputs["image"]), torch.from_numpy(inputs["query"]))
    assert got["topk_indices"].dtype == np.int32
    assert np.abs(got["relevance"] - rel.numpy()).max() < 1e-4
    assert np.abs(got["weights"] - w.numpy()).max() < 1e-5
    assert np.abs(got["evidence"] - ev.numpy()).max() < 1e-5
    assert set(got["topk_indices"][0].tolist()) == set(idx[0].tolist())


@pytest.mark.parametrize("variant", ["fp32", "fp16"])
def test_whole_non_square_photos_match_eager(built, entry, loaded, golden, variant):
    """Every whole photo of the held-out split that is not square (landscape, portrait, panorama,
    smaller than 16G, 12 MP), one at a time through the saved program, against eager model.py:
    relevance max abs and top-K overlap with the pipeline's tie rule, held to the variant's gate."""
    import torch

    from arrcoc_edge.stages.parity import parity_metrics
    from arrcoc_edge.targets.coreml.mil_program import MilProgram

    program = MilProgram(package(built, entry, variant))
    gate = entry["variants"][variant]["parity"]["gate"]
    whole = [i for i in golden.heldout.whole if golden.heldout.images[i].shape[0] != golden.heldout.images[i].shape[1]]
    assert {golden.heldout.images[i].shape[:2] for i in whole} >= {(300, 451), (250, 1000), (3024, 4032)}
    got, want = [], []
    for i in whole:
        inputs = golden.heldout.inputs(i, i + 1)
        got.append(_run(program, inputs))
        with torch.no_grad():
            out = loaded.model(torch.from_numpy(inputs["image"]), torch.from_numpy(inputs["query"]))
        want.append(dict(zip(("relevance", "topk_indices", "weights", "evidence"), (t.numpy() for t in out))))
    cat = lambda rows: {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}  # noqa: E731
    metrics = parity_metrics(cat(want), cat(got), gate["tie_tolerance"])
    if variant == "fp32":  # the bar for an exact artifact at batch 1
        assert metrics["relevance_max_abs"] <= 1e-4 and metrics["topk_overlap_min"] == 1.0, metrics
    for key, limit in gate["max"].items():
        if key != "size_bytes":
            assert metrics[key] <= limit, (key, metrics)
    for key, limit in gate["min"].items():
        assert metrics[key] >= limit, (key, metrics)


def test_fp16_keeps_grid_statistics_and_photo_indices_in_fp32(built, entry):
    """The fixes for FP16 ranking errors: per-sample min-max / entropy on the grid stay fp32, and so
    does the resize's index and weight arithmetic (float16 cannot count past 2048 in steps of 1);
    no gather index is narrowed to 16 bits (add_int16_cast would break every photo over 64 KB)."""
    from arrcoc_edge.targets.coreml.mil_program import MilProgram, _tensor_type

    program = MilProgram(package(built, entry, "fp16"))
    dtype = lambda o: _tensor_type(o.outputs[0].type)[0]  # noqa: E731
    stats = [o for o in program.operations if o.type in ("reduce_min", "reduce_max", "softmax", "log")]
    assert stats and all(dtype(o) == np.float32 for o in stats)
    index_maths = [o for o in program.operations if o.type in ("floor", "minimum", "maximum")]
    assert any(o.type == "floor" for o in index_maths) and all(dtype(o) == np.float32 for o in index_maths)
    assert not [o for o in program.operations if o.outputs and dtype(o) in (np.int16, np.uint16)]
    learned = [o for o in program.operations if o.type in ("conv", "linear")]
    assert any(dtype(o) == np.float16 for o in learned)


def test_fp16_indices_would_be_wrong():
    """Why the index maths stays float32: the same resize_taps computed in float16 picks other
    source rows for large photos (at G=32 on an 8192-pixel side, most of the 128 rows)."""
    import torch

    from arrcoc_edge.relevance.texture_maths import _window_offsets, resize_taps

    dst = _window_offsets(32)
    for n in (4032, 8192):
        exact = resize_taps(dst, torch.tensor(float(n)), 512)[0]
        half = resize_taps(dst.half(), torch.tensor(float(n)).half(), 512)[0]
        assert (exact != half).sum() > 0, n


def test_evaluator_refuses_out_of_range_indices_and_casts():
    """MIL leaves out-of-bounds gathers and out-of-range casts undefined: the evaluator refuses
    them instead of wrapping (a wrapped uint16 photo offset reads a wrong but plausible byte)."""
    from arrcoc_edge.errors import ExportError
    from arrcoc_edge.targets.coreml.mil import OPS

    x = np.arange(24, dtype=np.float16).reshape(2, 12)
    idx = np.array([[0, 11], [3, 4]], np.int32)
    np.testing.assert_array_equal(OPS["gather_along_axis"]({"x": x, "indices": idx, "axis": 1})[0],
                                  np.take_along_axis(x, idx, axis=1))
    with pytest.raises(ExportError, match="out of bounds"):
        OPS["gather_along_axis"]({"x": x, "indices": idx + 1, "axis": 1})
    with pytest.raises(ExportError, match="out of bounds"):
        OPS["gather"]({"x": np.arange(4), "indices": np.array([-1], np.int32), "axis": 0})
    # batch_dims: each row gathers with its own indices (tf.gather semantics)
    got = OPS["gather"]({"x": x, "indices": idx, "axis": 1, "batch_dims": 1})[0]
    np.testing.assert_array_equal(got, np.stack([x[0, [0, 11]], x[1, [3, 4]]]))
    with pytest.raises(ExportError, match="outside its range"):
        OPS["cast"]({"x": np.array([70000], np.int32), "dtype": "uint16"})
    assert OPS["cast"]({"x": np.array([4031.0, 2.0], np.float32), "dtype": "int32"})[0].tolist() == [4031, 2]


def test_fp16_program_computes_in_fp16(built, entry, golden):
    """The evaluator keeps declared fp16 ops in fp16: the FP16 program differs from the FP32 one."""
    from arrcoc_edge.targets.coreml.mil_program import MilProgram

    inputs = golden.heldout.inputs(0, 2)
    fp32 = _run(MilProgram(package(built, entry, "fp32")), inputs)["relevance"]
    fp16 = _run(MilProgram(package(built, entry, "fp16")), inputs)["relevance"]
    diff = np.abs(fp16 - fp32).max()
    assert 1e-5 < diff < 0.05


def test_unknown_op_is_named(built, entry, golden):
    from arrcoc_edge.targets.coreml.mil import UnsupportedOp
    from arrcoc_edge.targets.coreml.mil_program import MilProgram

    program = MilProgram(package(built, entry, "fp32"))
    victim = next(o for o in program.operations if o.type == "softmax")
    victim.type = "softmax_v99"
    with pytest.raises(UnsupportedOp, match="softmax_v99"):
        _run(program, golden.heldout.inputs(0, 1))


def test_reference_settings_pass_on_whole_photos(reference_checkpoint_path, tmp_path):
    """G=32, K=200, D=2048 (the reference layout): FP32 and FP16 pass their gates on every held-out
    sample, whole photos included. Before whole photos, FP16 with the full-resolution ops in fp16
    failed here (top-K overlap 0.946 mean, 0.89 min)."""
    from arrcoc_edge.building.build import run_build
    from arrcoc_edge.targets import TARGETS

    out = tmp_path / "out"
    run_build([TARGETS["coreml"]], TARGETS, reference_checkpoint_path, out, log=lambda m: None,
              options={"grid": 32, "top_k": 200})
    manifest = json.loads((out / "manifest.json").read_text())
    variants = manifest["targets"]["coreml"]["variants"]
    for name in ("fp32", "fp16"):
        parity = variants[name]["parity"]
        assert parity["measured"] and parity["passed"], (name, parity)
    assert variants["fp32"]["parity"]["metrics"]["relevance_max_abs"] <= 1e-4
    assert variants["fp32"]["parity"]["metrics"]["topk_overlap_min"] == 1.0


@pytest.fixture(scope="module")
def seeded_ctx(tmp_path_factory):
    """A context for the seeded (untrained) checkpoint, whose balancer weights the nearly flat
    entropy map: there, min-max in fp16 breaks the ranking. The trained default leans on the
    participatory map and survives all-fp16, so it cannot show why the statistics stay fp32."""
    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.stages.export import export_cached
    from arrcoc_edge.stages.golden import build_golden_set
    from arrcoc_edge.stages.target import BuildContext
    from arrcoc_edge.training.train import UNTRAINED_CHECKPOINT

    loaded = load_checkpoint(UNTRAINED_CHECKPOINT)
    root = tmp_path_factory.mktemp("seeded")
    staging = root / "coreml"
    staging.mkdir()
    return BuildContext(loaded, export_cached(loaded, root / "cache"), build_golden_set(loaded.model, loaded.config),
                        staging, {}, lambda m: None, {})


def test_all_fp16_fails_the_gate_and_is_not_published(seeded_ctx, monkeypatch):
    """Why FP16 keeps the grid statistics in fp32: computing everything in fp16 breaks the ranking
    of a checkpoint that weights the entropy map, and that measured (reference-check) failure fails
    the variant, although the runner is not authoritative."""
    from arrcoc_edge.building.build import verify_variant
    from arrcoc_edge.targets.coreml import target as coreml

    monkeypatch.setattr(coreml, "fp16_selector", lambda: (lambda op: True))
    ctx = seeded_ctx
    target = coreml.CoremlTarget()
    model = coreml.convert(ctx, "fp16")
    files = coreml.save(model, ctx.staging / coreml.PACKAGE_NAMES["fp16"])
    budget = coreml.size_budget(ctx, "fp16")
    variant = coreml.Variant("fp16", files, coreml.gate_for("fp16", budget), budget, topk_dtype="int32",
                             info={"package": coreml.PACKAGE_NAMES["fp16"]})
    report = verify_variant(target, ctx, variant)
    assert report.status == "failed"
    assert any(f.startswith("topk_overlap") for f in report.failures), report.failures
