"""tensorrt: one real CLI build per session (onnx + onnx-int8 + tensorrt, TensorRT-RTX plans built
on this CPU-only host; conftest published_with_encoder, which the torch-free tests read too), then the manifest, the honest `unverified` status, the whole-photo contract
(UINT8 input cast to float16 first, one profile with dynamic batch, height and width), an INT8 plan
from a symmetric QDQ model, and bad input (parser-rejected node, missing backend) that publishes
nothing. The plans cannot be deserialised here (no CUDA driver) nor on the lent H100/H200
(TensorRT-RTX plans run on compute capability 8.0-8.9 and 12.x only)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("tensorrt_rtx_bindings", reason="the tensorrt extra is not installed")


@pytest.fixture(scope="session")
def trt_out(published_with_encoder):
    """The session's shared build with tensorrt (read only: a test that changes it copies it)."""
    return published_with_encoder


def _entry(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["targets"]["tensorrt"]


def test_plan_published_unverified_with_precise_reason(trt_out):
    entry = _entry(trt_out)
    # this host has no NVIDIA GPU: never a parity claim, the reason names the GPU situation
    assert entry["status"] == "unverified"
    fp32 = entry["variants"]["fp32"]
    assert fp32["status"] == "unverified"
    for reason in (entry["reason"], fp32["reason"]):
        assert "compute capability 8.0, 8.6, 8.9, 12.0, 12.1" in reason and "no NVIDIA GPU" in reason
    parity = fp32["parity"]
    assert parity["measured"] is False and parity["runtime"] is None
    assert set(parity["metrics"]) == {"size_bytes"}  # no parity number that was not measured
    assert parity["gate"]["max"]["relevance_max_abs"] == 1e-3 and parity["gate"]["min"]["topk_overlap_min"] == 1.0
    plan = trt_out / fp32["files"][0]
    assert plan.suffix == ".plan" and plan.stat().st_size == fp32["size"]["bytes"] > 0
    assert fp32["size"]["bytes"] <= fp32["size"]["budget"]
    assert any("I/O contract (parsed network)" in c for c in fp32["checks"])
    assert any(c.startswith("optimization profile: image [1, 16, 16, 3] .. [64, 8192, 8192, 3]") for c in fp32["checks"])


def test_manifest_records_backend_capabilities_settings(trt_out):
    import tensorrt_rtx_bindings

    info = _entry(trt_out)["variants"]["fp32"]["info"]
    assert info["backend"] == "TensorRT-RTX" and info["backend_version"] == tensorrt_rtx_bindings.__version__
    assert info["compute_capabilities"] == ["8.0", "8.6", "8.9", "12.0", "12.1"]
    settings = info["settings"]
    assert settings["precision"] == "fp32" and settings["network"] == "strongly typed"
    # one profile: dynamic batch, the photo's height and width 16 .. 8192 tuned for 16G (read back
    # from the profile object the builder held)
    size, dim = info["network_io"]["image"], info["network_io"]["query"]["shape"][1]
    g16 = _entry(trt_out)["variants"]["fp32"]["info"]["settings"]["optimization_profile"]["image"]["opt"][1]
    assert settings["optimization_profile"] == {
        "image": {"min": [1, 16, 16, 3], "opt": [8, g16, g16, 3], "max": [64, 8192, 8192, 3]},
        "query": {"min": [1, dim], "opt": [8, dim], "max": [64, dim]}}
    assert g16 % 16 == 0 and size["dtype"] == "UINT8"
    assert settings["timing_cache"]["used"] is False and "no-ops" in settings["timing_cache"]["reason"]
    onnx_file = trt_out / "onnx" / "model.onnx"
    import hashlib

    assert info["source_onnx"]["sha256"] == hashlib.sha256(onnx_file.read_bytes()).hexdigest()
    io = info["network_io"]
    assert io["image"] == {"mode": "input", "shape": [-1, -1, -1, 3], "dtype": "UINT8"}
    assert io["topk_indices"]["dtype"] in ("INT64", "INT32")
    assert "UINT8" in info["image_input"]["cast"] and "float16" in info["image_input"]["cast"]
    # every flavour that was not built says why
    assert set(info["not_built"]) >= {"fp16"} and "strongly typed" in info["not_built"]["fp16"]
    assert "int8" in _entry(trt_out)["variants"] or "int8" in info["not_built"]


def test_int8_plan_from_symmetric_qdq(make_ctx, trt_out, golden):
    """A symmetric INT8 QDQ model (what TensorRT accepts) becomes an INT8 plan; an asymmetric one
    is refused with the node that has a non-zero zero point."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from arrcoc_edge.errors import HostCapabilityError
    from arrcoc_edge.targets.tensorrt.target import TensorRTTarget, first_nonzero_zero_point

    fp32 = trt_out / "onnx" / "model.onnx"
    qdq = make_ctx(name="qdq").staging / "model.int8.onnx"
    quantize_static(str(fp32), str(qdq), _Reader(golden.calibration), quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=["Conv", "Gemm"], activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    assert first_nonzero_zero_point(qdq) is None
    target = TensorRTTarget()
    ctx = make_ctx(upstream={"onnx": _stage("onnx", "fp32", fp32), "onnx-int8": _stage("onnx-int8", "int8", qdq)})
    variants = {v.name: v for v in target.build(ctx)}
    assert set(variants) == {"fp32", "int8"}
    int8 = variants["int8"]
    assert int8.files[0].stat().st_size > 0 and int8.info["settings"]["precision"] == "int8"
    assert int8.gate.minima == {"topk_overlap_mean": 0.98, "topk_overlap_min": 0.95}
    assert any("I/O contract" in c for c in target.inspect(ctx, int8))
    with pytest.raises(HostCapabilityError, match="compute capability"):
        target.load(ctx, int8)


def test_asymmetric_qdq_is_requantised_symmetrically_and_gated_first(make_ctx, trt_out):
    """onnx-int8's own model has asymmetric activations (TensorRT takes zero point 0 only): it is
    re-quantised symmetrically (every candidate measured on the calibration split, the most faithful
    chosen by onnx-int8's rule) and must pass the INT8 gate on the held-out split first, each
    measured as the QDQ graph in float (what TensorRT computes, the same on every host)."""
    from arrcoc_edge.targets.onnx_int8 import quantize
    from arrcoc_edge.targets.tensorrt.target import first_nonzero_zero_point, int8_source

    entry = json.loads((trt_out / "manifest.json").read_text())["targets"]
    if "onnx-int8" not in entry:
        pytest.skip("onnx-int8 was not built in this session")
    published = trt_out / "onnx-int8" / "model.int8.onnx"
    assert first_nonzero_zero_point(published) is not None  # why the re-quantisation exists
    stage = _stage("onnx-int8", "int8", published)
    stage.primary.variant.info = entry["onnx-int8"]["variants"]["int8"]["info"]
    ctx = make_ctx(upstream={"onnx": _stage("onnx", "fp32", trt_out / "onnx" / "model.onnx"), "onnx-int8": stage})
    path, why, info = int8_source(ctx)
    sym = info["symmetric_requantised"]
    assert list(sym["candidates_tried"]) == [c.name for c in quantize.CANDIDATES]
    assert "float" in sym["evaluated"]
    if path is None:  # a measured failure: no plan, and the reason carries the gate's verdict
        assert not sym["passed_int8_gate"] and "fails the INT8 gate" in why
    else:
        held = sym["heldout_in_float"]
        assert sym["candidates_tried"][sym["candidate"]] == "passed"
        assert first_nonzero_zero_point(path) is None and sym["passed_int8_gate"]
        assert held["topk_overlap_mean"] >= 0.98 and held["topk_overlap_min"] >= 0.95


def test_parser_rejection_names_the_node(make_ctx):
    """An op TensorRT cannot import: one-line ExportError naming the node; no plan is written."""
    import onnx
    from onnx import TensorProto, helper

    from arrcoc_edge.errors import ExportError
    from arrcoc_edge.targets.tensorrt.target import TensorRTTarget

    node = helper.make_node("FancyOp", ["image"], ["relevance"], name="my_unsupported_node", domain="com.example")
    graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("relevance", TensorProto.FLOAT, [None, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.example", 1)])
    ctx = make_ctx(name="bad")
    bad = ctx.staging.parent / "bad.onnx"
    onnx.save(model, str(bad))
    with pytest.raises(ExportError) as info:
        TensorRTTarget().build(make_ctx(upstream={"onnx": _stage("onnx", "fp32", bad)}))
    line = info.value.one_line()
    assert "\n" not in line and "my_unsupported_node" in line and "FancyOp" in line
    assert not list(ctx.staging.parent.rglob("*.plan"))


def test_missing_backend_is_one_line_and_publishes_nothing(trt_out, tmp_path):
    """Both backend modules blocked: the CLI prints a MissingExtraError line before any stage runs
    (not after building onnx and onnx-int8 for it); the previously published plan in the out dir
    is untouched."""
    out = tmp_path / "out"
    shutil.copytree(trt_out, out)
    plan = next((out / "tensorrt").glob("*.plan"))
    before = (plan.read_bytes(), (out / "manifest.json").read_text())
    code = ("import sys; sys.modules['tensorrt_rtx_bindings'] = None; sys.modules['tensorrt'] = None; "
            "from invoke.main import program; "
            f"sys.argv = ['invoke', 'build', '--target', 'tensorrt', '--out', {str(out)!r}]; program.run()")
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "missing dependency" in ln]
    assert len(lines) == 1 and "tensorrt_rtx_bindings (or tensorrt)" in lines[0] and ".[tensorrt]" in lines[0], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "[onnx] building" not in proc.stdout, "the missing backend was found only after the stages it needs"
    assert (plan.read_bytes(), (out / "manifest.json").read_text()) == before


def test_load_backend_without_modules(monkeypatch):
    from arrcoc_edge.errors import MissingExtraError
    from arrcoc_edge.targets.tensorrt import backend as trt_backend
    from arrcoc_edge.targets.tensorrt.target import TensorRTTarget

    monkeypatch.setitem(sys.modules, "tensorrt_rtx_bindings", None)
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(MissingExtraError) as info:
        trt_backend.load_backend()
    assert "no TensorRT backend is importable" in info.value.one_line() and ".[tensorrt]" in info.value.one_line()
    assert TensorRTTarget().missing_modules() == ["tensorrt_rtx_bindings (or tensorrt)"]


def test_prepared_model_keeps_outputs_identical(trt_out, golden):
    """What TensorRT's parser is given (constants folded, the uint8 photo cast to float16 first)
    computes the same values as the published model: onnxruntime, same inputs, the 16G crops and
    every whole photo (12 MP included), bit for bit."""
    import onnxruntime as ort

    from arrcoc_edge.targets.tensorrt.backend import prepare_onnx

    src = trt_out / "onnx" / "model.onnx"
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(prepare_onnx(src), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in b.get_inputs()] == [(i.name, i.type) for i in a.get_inputs()]
    assert b.get_inputs()[0].type == "tensor(uint8)"
    split = golden.heldout
    for start, stop in [(0, 4)] + [(i, i + 1) for i in split.whole]:
        feeds = split.inputs(start, stop)
        for x, y in zip(a.run(None, feeds), b.run(None, feeds)):
            np.testing.assert_array_equal(x, y)


def test_uint8_input_is_cast_before_any_layer(trt_out):
    """TensorRT layers take no UINT8 tensors: the network input stays UINT8 and its only reader,
    in the graph and in the 16G fast path's If branches, is the inserted Cast to float16; without
    it TensorRT-RTX's parser refuses the model, naming the UINT8 gather."""
    import onnx
    from onnx import TensorProto

    from arrcoc_edge.errors import ExportError
    from arrcoc_edge.targets.tensorrt import backend as trt_backend

    src = trt_out / "onnx" / "model.onnx"
    model = onnx.load_from_string(trt_backend.prepare_onnx(src))
    readers = []

    def walk(graph):
        for node in graph.node:
            if "image" in node.input:
                readers.append(node)
            for attr in node.attribute:
                if attr.type == attr.GRAPH:
                    walk(attr.g)

    walk(model.graph)
    assert [(n.op_type, n.attribute[0].i) for n in readers] == [("Cast", TensorProto.FLOAT16)]
    assert model.graph.node[0].op_type == "Cast"
    assert any(n.op_type == "If" for n in model.graph.node)  # the fast path's branches were rewired too
    backend = trt_backend.load_backend()
    raw = onnx.load(str(src))
    trt_backend.fold_constants(raw)  # folded, but no Cast
    with pytest.raises(ExportError, match="UINT8"):
        trt_backend.parse_onnx(backend, raw.SerializeToString(), "uncast.onnx")


def test_io_contract_check(loaded):
    from arrcoc_edge.errors import ExportError
    from arrcoc_edge.targets.tensorrt.target import check_io

    cfg = loaded.config
    io = {"image": {"mode": "input", "shape": [-1, -1, -1, 3], "dtype": "UINT8"},
          "query": {"mode": "input", "shape": [-1, cfg.query_dim], "dtype": "FLOAT"},
          "relevance": {"mode": "output", "shape": [-1, cfg.num_patches], "dtype": "FLOAT"},
          "topk_indices": {"mode": "output", "shape": [-1, cfg.top_k], "dtype": "INT32"},
          "weights": {"mode": "output", "shape": [-1, 3], "dtype": "FLOAT"},
          "evidence": {"mode": "output", "shape": [-1, 4], "dtype": "FLOAT"}}
    assert "topk_indices is INT32" in check_io(io, cfg, "test")
    without = {k: v for k, v in io.items() if k != "evidence"}  # a plan of a graph without the evidence output
    with pytest.raises(ExportError, match="missing 'evidence'"):
        check_io(without, cfg, "test")
    io["weights"] = {"mode": "output", "shape": [8, 3], "dtype": "HALF"}
    with pytest.raises(ExportError, match="weights is HALF.*weights has shape"):
        check_io(io, cfg, "test")
    io["weights"] = {"mode": "output", "shape": [-1, 3], "dtype": "FLOAT"}
    io["image"] = {"mode": "input", "shape": [-1, 3, 224, 224], "dtype": "FLOAT"}  # the square float contract
    with pytest.raises(ExportError, match=r"image is FLOAT, expected UINT8.*image has shape \[-1, 3, 224, 224\]"):
        check_io(io, cfg, "test")


def test_profile_check(loaded):
    from arrcoc_edge.errors import ExportError
    from arrcoc_edge.targets.tensorrt.target import check_profile, profile_shapes

    cfg = loaded.config
    held = {n: dict(zip(("min", "opt", "max"), (list(s) for s in shapes))) for n, shapes in profile_shapes(cfg).items()}
    assert held["image"]["opt"] == [8, cfg.image_size, cfg.image_size, 3]
    assert "image [1, 16, 16, 3] .. [64, 8192, 8192, 3]" in check_profile(held, cfg)
    held["image"]["max"] = [64, 224, 224, 3]  # a square-only plan
    with pytest.raises(ExportError, match="optimization profile"):
        check_profile(held, cfg)


def test_timing_cache_path_under_out_dir(make_ctx, tmp_path):
    from arrcoc_edge.targets.tensorrt.target import timing_cache_path

    ctx = make_ctx(name="plain")
    assert timing_cache_path(ctx) is None  # not under <out>/.staging/<run>/: no cache to keep
    ctx.staging = tmp_path / "out" / ".staging" / "run1" / "tensorrt"
    assert timing_cache_path(ctx) == tmp_path / "out" / ".cache" / "tensorrt" / "timing.cache"


# ------------------------------------------------------------------ helpers


class _Reader:
    def __init__(self, split):
        self.batches = iter([split.inputs(a, b) for a, b in split.runs(4)])  # one photo size per batch

    def get_next(self):
        return next(self.batches, None)


def _stage(name, variant, path):
    """A StageResult as the core hands it to later stages: published, with one primary variant."""
    from arrcoc_edge.building.build import StageResult, VariantReport
    from arrcoc_edge.stages.parity import LOSSLESS
    from arrcoc_edge.stages.target import Target, Variant

    target = Target()
    target.name = name
    report = VariantReport(Variant(variant, [Path(path)], LOSSLESS, 0, primary=True), "verified")
    return StageResult(target, "published", staging=Path(path).parent, variants=[report])
