"""onnx-int8: one real build per session (onnx + onnx-int8 through the CLI), then the manifest,
the ORT-format files, the candidate selection, and bad calibration input that must publish nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def int8_out(shared_build):
    """The session's one `invoke build --target onnx-int8` (conftest shared_build, also a part in
    test_merge.py): read-only."""
    return shared_build("onnx-int8").out


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _entry(out: Path) -> dict:
    return _manifest(out)["targets"]["onnx-int8"]


def test_int8_published_within_gate(int8_out, golden):
    entry = _entry(int8_out)
    assert entry["status"] == "published"
    variants = entry["variants"]
    assert set(variants) == {"int8", "fp32-ort", "int8-ort"}
    for name, v in variants.items():
        assert v["status"] == "verified" and v["parity"]["passed"], name
        assert v["parity"]["metrics"]["samples"] == len(golden.heldout)
    int8 = variants["int8"]
    m = int8["parity"]["metrics"]
    assert m["topk_overlap_mean"] >= 0.98 and m["topk_overlap_min"] >= 0.95 and m["relevance_mean_abs"] <= 0.01
    fp32_bytes = (int8_out / _manifest(int8_out)["targets"]["onnx"]["variants"]["fp32"]["files"][0]).stat().st_size
    int8_bytes = (int8_out / int8["files"][0]).stat().st_size
    assert int8_bytes <= 0.40 * fp32_bytes  # quantize.SIZE_RATIO
    assert int8["info"]["size_ratio_vs_fp32"] == round(int8_bytes / fp32_bytes, 4)


def test_quantisation_choice_recorded(int8_out, golden):
    info = _entry(int8_out)["variants"]["int8"]["info"]
    cal = info["calibration"]
    # calibrated on the calibration split, which is disjoint from the held-out split
    assert cal["sha256"] == golden.calibration.sha256 != golden.heldout.sha256
    assert cal["count"] == len(golden.calibration) and cal["method"] == "MinMax"
    # candidates of both participatory forms are measured; the chosen one names its form
    chosen = next(c for c in info["candidates"]
                  if c["name"] == info["candidate"] and c["participatory_form"] == info["participatory_form"])
    assert chosen["passed"] and info["quantized_node_count"] == chosen["quantized_node_count"] > 0
    assert set(info["quantized_op_types"]) <= {"Conv", "Gemm", "Relu", "MatMul"}
    # every candidate was measured; quantising every op is measured to fail (TOOLCHAIN.md)
    everything = next(c for c in info["candidates"] if c["name"] == "all-ops" and c["participatory_form"] == info["participatory_form"])
    assert not everything["passed"] and everything["topk_overlap_mean"] < chosen["topk_overlap_mean"]


def test_ort_files_load_and_list_operators(int8_out):
    import onnxruntime as ort

    folder = int8_out / "onnx-int8"
    config = (folder / "required_operators.config").read_text()
    assert "ai.onnx" in config and "TopK" in config
    for name in ("model.fp32.ort", "model.int8.ort"):
        path = folder / name
        assert path.read_bytes()[4:8] == b"ORTM"
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert [o.name for o in session.get_outputs()] == ["relevance", "topk_indices", "weights", "evidence"]


def _write_photos(folder: Path, split, count: int) -> None:
    folder.mkdir()
    for i in range(count):  # the crops first, then whole photos of their own sizes
        index = (list(range(len(split) - len(split.whole))) + split.whole)[i % len(split)]
        Image.fromarray(split.images[index]).save(folder / f"photo{i}.png")


def _snapshot(out: Path) -> tuple:
    entry = _entry(out)
    return json.dumps(entry, sort_keys=True), {f["path"]: (out / f["path"]).read_bytes() for f in entry["files"]}


def test_undecodable_calibration_image_publishes_nothing(shared_build, golden, tmp_path, cli):
    int8_out = shared_build("onnx-int8").copy(tmp_path / "published")  # this test builds into it
    folder = tmp_path / "cal"
    _write_photos(folder, golden.calibration, 8)
    (folder / "notes.png").write_text("not a picture")
    before = _snapshot(int8_out)
    manifest = (int8_out / "manifest.json").read_bytes()
    proc = cli("build", "--target", "onnx-int8", "--out", str(int8_out), "--calibration", str(folder))
    assert proc.returncode == 2  # input error, found before any stage ran
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "cannot be decoded" in line]
    assert len(lines) == 1 and "input error" in lines[0] and "notes.png" in lines[0] and "-> fix:" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert _snapshot(int8_out) == before  # the previous onnx-int8 entry and its files are untouched
    assert (int8_out / "manifest.json").read_bytes() == manifest  # not even the onnx stage republished


@pytest.mark.parametrize("count", [0, 3])
def test_too_small_calibration_folder(golden, loaded, tmp_path, count):
    # same stage code path as the CLI test above; checked in-process to keep the suite short
    from arrcoc_edge.errors import InputError
    from arrcoc_edge.targets.onnx_int8.quantize import user_calibration_split

    folder = tmp_path / "cal"
    _write_photos(folder, golden.calibration, count)
    with pytest.raises(InputError, match=f"has {count} image"):
        user_calibration_split(folder, loaded.config)
    with pytest.raises(InputError, match="does not exist"):
        user_calibration_split(tmp_path / "missing", loaded.config)


def test_user_calibration_folder_is_used(golden, loaded, tmp_path):
    from arrcoc_edge.stages.golden import MIN_CALIBRATION
    from arrcoc_edge.targets.onnx_int8.quantize import user_calibration_split

    folder = tmp_path / "cal"
    _write_photos(folder, golden.calibration, MIN_CALIBRATION)
    split = user_calibration_split(folder, loaded.config)
    assert len(split) == MIN_CALIBRATION and split.images[0].shape == (224, 224, 3)
    assert split.sha256 != golden.calibration.sha256


def test_unreachable_gate_fails_clearly(int8_out, make_ctx, monkeypatch):
    """A size budget no candidate can meet: a GateError naming every candidate, INT8 and A16W8."""
    from arrcoc_edge.building.build import StageResult, VariantReport
    from arrcoc_edge.errors import GateError
    from arrcoc_edge.stages.parity import LOSSLESS
    from arrcoc_edge.stages.target import Variant
    from arrcoc_edge.targets import TARGETS
    from arrcoc_edge.targets.onnx_int8 import quantize
    from arrcoc_edge.targets.onnx_int8 import target as onnx_int8

    fp32 = int8_out / "onnx" / "model.onnx"
    upstream = StageResult(TARGETS["onnx"], "published",
                           variants=[VariantReport(Variant("fp32", [fp32], LOSSLESS, 0, primary=True), "verified")])
    monkeypatch.setattr(quantize, "SIZE_RATIO", 0.05)
    monkeypatch.setattr(quantize, "CANDIDATES", quantize.CANDIDATES[2:3])  # keep the test short
    ctx = make_ctx(upstream={"onnx": upstream})
    with pytest.raises(GateError) as err:
        TARGETS["onnx-int8"].build(ctx)
    msg = err.value.one_line()
    assert "learned-conv-gemm-relu/int8" in msg and "learned-conv-gemm-relu/uint16" in msg and "budget: over by" in msg
    assert not list(ctx.staging.glob("model.*"))


def test_a16w8_candidate_measured(int8_out, make_ctx, golden):
    """The A16W8 fallback really quantises (16-bit activations) and is at least as close as INT8."""
    from arrcoc_edge.targets.onnx_int8 import quantize
    from arrcoc_edge.targets.onnx_int8 import target as onnx_int8

    ctx = make_ctx()
    cand = next(c for c in quantize.CANDIDATES if c.name == "learned-conv-gemm-relu")
    # the other exact participatory form, which the target also quantises (model.py)
    fp32 = onnx_int8.other_form_fp32(ctx, "direct")
    path = ctx.staging / "a16.onnx"
    summary = quantize.quantize(fp32, path, golden.calibration, cand, quantize.learned_weight_names(ctx), a16=True)
    metrics = quantize.measure(path, golden.calibration, 1e-3)
    assert summary["quantized_node_count"] > 0
    assert metrics["topk_overlap_mean"] >= 0.98 and metrics["size_bytes"] <= 0.40 * fp32.stat().st_size


def test_bench_times_int8_runtimes(shared_build, tmp_path):
    from arrcoc_edge import targets
    from arrcoc_edge.frontends.bench import run_bench

    # a copy: bench writes bench.json (which `predict` then picks its runtime by) and the report
    # into the folder it reads, and the shared build is read by other tests
    out = shared_build("onnx-int8").copy(tmp_path / "out")
    result = run_bench(out, targets.TARGETS, runs=2, batches=(1,), log=lambda m: None)
    runtimes = {r["runtime"] for r in result["rows"]}
    for name in ("int8", "fp32-ort", "int8-ort"):
        assert f"onnxruntime {name} (1 thread)" in runtimes
    assert all(r["median_ms"] > 0 and r["runs"] == 2 for r in result["rows"])


def test_choice_holds_under_host_noise(int8_out):
    """The real build's own candidate rows, perturbed by what float rounding on another host can move
    (tests/test_int8_choice.py says how much), give the candidate this build published, every time."""
    import random

    from arrcoc_edge.targets.onnx_int8.quantize import choose, int8_gate, row_failures

    info = _entry(int8_out)["variants"]["int8"]["info"]
    rows = [c for c in info["candidates"]
            if c["activations"] == "int8" and c["participatory_form"] == info["participatory_form"]]
    gate, rng = int8_gate(info["fp32_onnx_bytes"]), random.Random(28)
    for _ in range(300):
        noisy = [{**r, "relevance_mean_abs": r["relevance_mean_abs"] * (1 + rng.uniform(-0.005, 0.005))} for r in rows]
        for r in noisy:
            r["failures"] = row_failures(r, gate)
        assert choose(noisy)["name"] == info["candidate"]
