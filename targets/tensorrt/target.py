"""TensorRT: serialized plans built from the verified ONNX models with TensorRT's own Python API.

Backends (targets/tensorrt/backend.py): full TensorRT when installed, else TensorRT-RTX from PyPI, which
builds plans ahead of time without a GPU. Variants: fp32 (from the onnx stage's model), fp16 where
the backend has an FP16 builder flag (full TensorRT only), int8 from the onnx-int8 stage's QDQ model
when that stage ran in this build and its model is symmetric INT8 (TensorRT takes only zero-point 0).

Verification runs the held-out set through the plan on the GPU when the host has one the plan
supports; otherwise the variant is `unverified` with the precise reason, after the structural
checks (plan written, network I/O vs the contract, the plan's optimization profile) that can run
anywhere.

Whole photos: the ONNX model takes the photo as decoded (uint8 [B,H,W,3], any size MIN_SIDE..MAX_SIDE
a side) and computes the resize itself, so each plan has one optimization profile with a dynamic
batch (PROFILE) and dynamic height and width (min MIN_SIDE, opt 16G, max MAX_SIDE). The network
input `image` stays UINT8; TensorRT layers take no UINT8 tensors, so a Cast to float16 (exact for
bytes) is the network's first layer (trt_backend.cast_uint8_inputs, UINT8_NOTE).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from arrcoc_edge.errors import ExportError
from arrcoc_edge.relevance.signature import MAX_SIDE, MIN_SIDE
from arrcoc_edge.stages.parity import LOSSLESS, LOSSY, Gate
from arrcoc_edge.stages.target import BuildContext, Runner, Target, Variant, expect_file
from arrcoc_edge.targets.shared import onnx_common
from arrcoc_edge.targets.tensorrt import backend as trt_backend

MiB = 1024 * 1024
# TensorRT's names for the contract's dtypes; topk indices may come out INT32 on some versions.
_DTYPES = {"image": ("UINT8",), "query": ("FLOAT",), "relevance": ("FLOAT",),
           "topk_indices": ("INT64", "INT32"), "weights": ("FLOAT",), "evidence": ("FLOAT",)}


class TensorRTTarget(Target):
    name = "tensorrt"
    summary = ("TensorRT plans (FP32, INT8 from QDQ) built with TensorRT or TensorRT-RTX: dynamic batch 1-64 and "
               f"photo size {MIN_SIDE}-{MAX_SIDE} a side")
    extra = "tensorrt"
    modules = ("onnx", "tensorrt_rtx_bindings")
    capability = "NVIDIA GPU (TensorRT-RTX plans: compute capability 8.0, 8.6, 8.9, 12.0, 12.1)"
    depends_on = ("onnx",)
    uses = ("onnx-int8",)

    def missing_modules(self) -> list[str]:
        # either backend will do: full TensorRT where NVIDIA's index is reachable, RTX from PyPI
        missing = [] if trt_backend.module_available() else ["tensorrt_rtx_bindings (or tensorrt)"]
        return missing + [m for m in self.modules[:1] if not _has(m)]

    def build(self, ctx: BuildContext) -> list[Variant]:
        backend = trt_backend.load_backend()
        cache = timing_cache_path(ctx)
        fp32_src = _upstream_model(ctx, "onnx")
        variants = [self._build_variant(ctx, backend, fp32_src, "fp32", cache, primary=True)]
        skipped = {}
        if backend.supports_fp16:
            variants.append(self._build_variant(ctx, backend, fp32_src, "fp16", cache))
        else:
            skipped["fp16"] = backend.fp16_unavailable_reason()
        int8_src, why, int8_info = int8_source(ctx)
        if int8_src is not None:
            variants.append(self._build_variant(ctx, backend, int8_src, "int8", cache))
            variants[-1].info.update(int8_info)
        else:
            skipped["int8"] = why
        for name, reason in skipped.items():
            ctx.log(f"[tensorrt] no {name} plan: {reason}")
        variants[0].info["not_built"] = skipped
        return variants

    def _build_variant(self, ctx, backend, src: Path, precision: str, cache, primary=False) -> Variant:
        ctx.log(f"[tensorrt] {precision}: parsing {src.name} and building the plan with {backend.label}")
        parsed = trt_backend.parse_onnx(backend, trt_backend.prepare_onnx(src), src.name, strongly_typed=precision != "fp16")
        plan = ctx.staging / f"model.{precision}.plan"
        settings = trt_backend.build_plan(parsed, plan, precision, profile_shapes(ctx.config), cache)
        expect_file(plan, f"the {precision} TensorRT plan")
        budget = size_budget(ctx, settings["compute_capabilities"])
        base = LOSSLESS if precision == "fp32" else LOSSY
        gate = Gate({**base.maxima, "size_bytes": budget}, base.minima, base.tie_tolerance)
        info = {
            "backend": backend.name, "backend_module": backend.trt.__name__, "backend_version": backend.version,
            "compute_capabilities": settings["compute_capabilities"], "settings": settings,
            "source_onnx": {"file": src.name, "sha256": _sha256(src)}, "network_io": parsed.io,
            "image_input": {"dtype": "UINT8", "shape": "[B,H,W,3]", "cast": trt_backend.UINT8_NOTE},
        }
        topk = parsed.io.get("topk_indices", {}).get("dtype", "INT64").lower()
        return Variant(precision, [plan], gate, budget, primary=primary, topk_dtype=topk, info=info)

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        plan = expect_file(variant.files[0], "the TensorRT plan")
        checks = [f"plan written: {plan.name}, {plan.stat().st_size} bytes"]
        checks.append(check_io(variant.info["network_io"], ctx.config, "parsed network"))
        checks.append(check_profile(variant.info["settings"]["optimization_profile"], ctx.config))
        ccs = ", ".join(variant.info["compute_capabilities"]) or "the build GPU's"
        checks.append(f"built for compute capability {ccs} by {variant.info['backend']} {variant.info['backend_version']}")
        return checks

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        backend = trt_backend.load_backend()
        label = f"{variant.info['backend']} {variant.info['backend_version']}"
        cc = trt_backend.check_host(variant.info["compute_capabilities"], label)
        if backend.version != variant.info["backend_version"] or backend.name != variant.info["backend"]:
            raise ExportError(f"plan was built by {label} but this process loaded {backend.label}",
                              "build and verify with the same backend")
        runner = trt_backend.PlanRunner(backend, variant.files[0])
        check_io(runner.io(), ctx.config, "deserialised plan")  # the plan's own I/O, now readable
        return Runner(runner.run, f"{backend.label} (GPU compute capability {cc})", max_batch=8, close=runner.close)


# ------------------------------------------------------------------ inputs


def _upstream_model(ctx: BuildContext, stage_name: str) -> Path:
    stage = ctx.upstream.get(stage_name)
    if stage is None or not stage.publishable or stage.primary is None:
        raise ExportError(f"the {stage_name} stage did not produce a verified model",
                          f"build --target {stage_name} and fix its failure first")
    return expect_file(stage.primary.variant.files[0], f"the {stage_name} model")


def int8_source(ctx: BuildContext) -> tuple[Path | None, str, dict]:
    """A QDQ model TensorRT's INT8 path can take: the onnx-int8 stage's own when it is symmetric,
    else the same recipe (op set, calibration split) re-quantised with symmetric activations and
    held to the INT8 gate in onnxruntime on the held-out split first. Returns (model, why not, info
    for the manifest); model is None when there is none."""
    stage = ctx.upstream.get("onnx-int8")
    if stage is None:
        return None, "the onnx-int8 stage did not run in this build (install its extra: pip install -e '.[int8]')", {}
    if not stage.publishable or stage.primary is None:
        return None, f"the onnx-int8 stage did not publish ({stage.reason})", {}
    variant = stage.primary.variant
    if variant.name != "int8":
        return None, f"onnx-int8 published '{variant.name}' (not 8-bit activations), which TensorRT's INT8 path cannot take", {}
    path = expect_file(variant.files[0], "the onnx-int8 QDQ model")
    node = first_nonzero_zero_point(path)
    if node is None:
        return path, "", {}
    ctx.log(f"[tensorrt] {path.name} has asymmetric activations ('{node}'): re-quantising symmetrically")
    return symmetric_int8(ctx, variant.info)


def symmetric_int8(ctx: BuildContext, quant_info: dict) -> tuple[Path | None, str, dict]:
    """Re-quantise with zero-point-0 activations: every candidate, each measured on the calibration
    split and chosen by onnx-int8's own rule (quantize.choose: the most faithful that passes the INT8
    gate); the chosen one is held to the gate on the held-out split before any plan is built. Every
    measurement is the QDQ graph evaluated in float (quantize.measure): what TensorRT's int8 engine
    computes, where onnxruntime's CPU int8 kernels would answer differently on different hosts
    (docs/targets.md), so the same commit builds the same plans on every host."""
    from arrcoc_edge.targets.onnx_int8 import quantize

    split, _ = quantize.calibration_split(ctx)
    fp32, learned, gate = _upstream_model(ctx, "onnx"), quantize.learned_weight_names(ctx), LOSSY
    rows, paths = [], {}
    for order, candidate in enumerate(quantize.CANDIDATES):
        dst = ctx.staging / f"model.int8-symmetric.{candidate.name}.onnx"
        quantize.quantize(fp32, dst, split, candidate, learned, a16=False, symmetric=True)
        metrics = quantize.measure(dst, split, gate.tie_tolerance)
        rows.append({"name": candidate.name, "order": order, "failures": parity_failures(gate, metrics),
                     **{k: metrics[k] for k in ("topk_overlap_mean", "topk_overlap_min", "relevance_mean_abs", "size_bytes")}})
        paths[candidate.name] = dst
        ctx.log(f"[tensorrt] symmetric INT8 '{candidate.name}' on the calibration split (QDQ in float): top-K "
                f"{metrics['topk_overlap_mean']:.3f} (min {metrics['topk_overlap_min']:.3f}), rel mean "
                f"{metrics['relevance_mean_abs']:.1e}{' -> ' + ', '.join(rows[-1]['failures']) if rows[-1]['failures'] else ''}")
    chosen = quantize.choose(rows)
    tried = {r["name"]: r["failures"] or "passed" for r in rows}
    for name, path in paths.items():
        if chosen is None or name != chosen["name"]:
            path.unlink()
    if chosen is None:
        return None, ("every symmetric INT8 candidate fails the INT8 gate on the calibration split: "
                      + "; ".join(f"{n}: {', '.join(f)}" for n, f in tried.items())), \
            {"symmetric_requantised": {"candidate": None, "candidates_tried": tried, "passed_int8_gate": False,
                                       "evaluated": quantize.EVALUATED}}
    dst = paths[chosen["name"]]
    metrics = quantize.measure(dst, ctx.golden.heldout, gate.tie_tolerance)
    failures = parity_failures(gate, metrics)
    ctx.log(f"[tensorrt] symmetric INT8 '{chosen['name']}' on the held-out split (QDQ in float): top-K "
            f"{metrics['topk_overlap_mean']:.3f} (min {metrics['topk_overlap_min']:.3f}), rel mean {metrics['relevance_mean_abs']:.1e}")
    info = {"symmetric_requantised": {
        "candidate": chosen["name"], "candidates_tried": tried, "calibration_sha256": split.sha256,
        "rule": quantize.CHOICE_RULE, "evaluated": quantize.EVALUATED, "passed_int8_gate": not failures,
        "heldout_in_float": {k: metrics[k] for k in ("topk_overlap_mean", "topk_overlap_min",
                                                     "relevance_mean_abs", "relevance_max_abs")}}}
    if failures:
        return None, f"symmetric INT8 re-quantisation fails the INT8 gate on the held-out split ({', '.join(failures)})", info
    final = dst.with_name("model.int8-symmetric.onnx")
    dst.replace(final)
    return final, "", info


def parity_failures(gate: Gate, metrics: dict) -> list[str]:
    """The gate's parity limits on the whole split and on each query kind alone."""
    return gate.parity_failures(metrics) + [f"{kind}: {text}" for kind, m in metrics.get("subsets", {}).items()
                                            for text in gate.subset_failures(m)]


def first_nonzero_zero_point(path: Path) -> str | None:
    """Name of the first Q/DQ node whose zero point is not all zeros (TensorRT rejects those)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    consts = {i.name: i for i in model.graph.initializer}
    consts.update({n.output[0]: a.t for n in model.graph.node if n.op_type == "Constant"
                   for a in n.attribute if a.name == "value"})
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 2 and node.input[2]:
            zp = consts.get(node.input[2])
            if zp is not None and np.any(numpy_helper.to_array(zp) != 0):
                return node.name
    return None


# ------------------------------------------------------------------ checks and settings


def profile_shapes(cfg) -> dict[str, tuple]:
    """The plan's optimization profile: (min, opt, max) per input; batch 1 / 8 / 64, the photo's
    height and width MIN_SIDE / 16G / MAX_SIDE."""
    inputs = {n: s for n, s in onnx_common.contract_shapes(cfg).items() if n in ("image", "query")}
    return trt_backend.profile_shapes(inputs, cfg.image_size, MIN_SIDE, MAX_SIDE)


def check_profile(held: dict, cfg) -> str:
    """The profile the builder holds (read back from it) vs profile_shapes."""
    want = {n: dict(zip(("min", "opt", "max"), ([int(v) for v in s] for s in shapes)))
            for n, shapes in profile_shapes(cfg).items()}
    if held != want:
        raise ExportError(f"TensorRT optimization profile {held} differs from the contract's {want}",
                          "build the plan with profile_shapes(cfg)")
    image = held["image"]
    return (f"optimization profile: image {image['min']} .. {image['max']} (opt {image['opt']}), "
            f"query batch {held['query']['min'][0]}..{held['query']['max'][0]}")


def check_io(io: dict, cfg, what: str) -> str:
    """Names, modes, dtypes and shapes (dynamic batch, photo height and width; fixed other dims)
    vs the contract."""
    problems = []
    for name, shape in onnx_common.contract_shapes(cfg).items():
        t = io.get(name)
        if t is None:
            problems.append(f"missing '{name}'")
            continue
        want_mode = "input" if name in ("image", "query") else "output"
        if t["mode"] != want_mode:
            problems.append(f"{name} is an {t['mode']}, expected an {want_mode}")
        if t["dtype"] not in _DTYPES[name]:
            problems.append(f"{name} is {t['dtype']}, expected {'/'.join(_DTYPES[name])}")
        expected = [-1 if d is None else d for d in shape]
        if list(t["shape"]) != expected:
            problems.append(f"{name} has shape {t['shape']}, expected {expected}")
    if problems:
        raise ExportError(f"TensorRT {what} breaks the I/O contract: {'; '.join(problems)}",
                          "fix the ONNX model so names, dtypes and shapes match the contract")
    return (f"I/O contract ({what}): names, dtypes (image UINT8), dynamic batch / photo height / width and "
            f"fixed dims match; topk_indices is {io['topk_indices']['dtype']}")


def size_budget(ctx: BuildContext, ccs: list[str]) -> int:
    """float32 weights plus compiled kernels, which a plan carries once per compute capability
    (measured: 2.8 MB FP32 / 3.4 MB INT8 for 5 capabilities with a 0.4 MB model)."""
    return int(onnx_common.param_bytes(ctx.checkpoint.model) * 1.5) + MiB * max(len(ccs), 4)


def timing_cache_path(ctx: BuildContext) -> Path | None:
    """`<out>/.cache/tensorrt/timing.cache`, kept between builds. The core stages each target in
    `<out>/.staging/<run>/<target>` (pipeline/publishing/publish.py), so the out dir is three levels up; an
    explicit `trt_timing_cache` option wins, and a staging folder elsewhere (tests) gets none."""
    if ctx.options.get("trt_timing_cache"):
        return Path(ctx.options["trt_timing_cache"])
    parents = ctx.staging.parents
    if len(parents) >= 3 and parents[1].name == ".staging":
        return parents[2] / ".cache" / "tensorrt" / "timing.cache"
    return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
