"""CoreML: `.mlpackage` (ML Program, iOS17) in FP32, FP16 and 8-bit weights.

Input: the whole photo as decoded, at its own size, with flexible shapes: batch 1..MAX_BATCH and
height and width MIN_SIDE..MAX_SIDE each (ct.RangeDim), one size per batch. The program computes
arr-coc-0-1's resize to 16G itself, exactly as model.py does (PhotoWindows' general path).
What the app hands over is the contract's photo in the one form CoreML can take (IMAGE_INPUT):
uint8 model inputs do not exist in CoreML (its MultiArray types are FLOAT32, DOUBLE, INT32, FLOAT16
and, from iOS26, INT8; coremltools 9.0 refuses `dtype=np.uint8` for a TensorType and its torch
frontend has no mapping for a torch.uint8 input), so the image is FLOAT16 [B,H,W,3]: each value
the decoded byte 0..255 itself, which float16 holds exactly (it holds every integer up to 2048),
at 2 bytes a value (73 MB for a 12 MP photo, against 146 MB as INT32 or FLOAT32). The graph casts
the gathered values to float32 and then does exactly what the contract says (blend, /255).

Converted with coremltools from our own export of the model (coreml_program): the same weights,
without the 16G fast path (torch.cond has no CoreML lowering, so every size takes the general
resize, which is bit for bit the fast path at 16G); tests/test_coreml.py holds the front end, fed
float16 bytes, to model.py's on uint8. coremltools' divide_to_multiply
pass is left out, so `n / 16G` and `/ 255` stay divisions as PyTorch computes them. The contract's
tensor names are kept (`topk_indices` is int32: CoreML's topk gives int32 indices).

Verification: CoreML predictions only exist on macOS. There, each package runs in
`MLModel.predict` (authoritative). Elsewhere the packages are checked structurally (the spec loads,
I/O names/dtypes/shapes, op list, sizes) and their MIL program is evaluated op by op with
arrcoc-edge's NumPy evaluator (targets/coreml/mil.py) on the held-out set: a reference check of
the converted program, NOT Apple's runtime, so the target stays `unverified` while its measured
gates still apply (a failure blocks publishing).

FP16: computing everything in fp16 breaks the ranking (top-K overlap 0.96 mean, 0.84 min on the
held-out set): the per-sample min-max normalisation of nearly flat maps (entropy, edges) magnifies
fp16 rounding. So fp16 is used where the arithmetic is (the texture's window convolution and the
learned layers) and the per-sample statistics on the grid stay in fp32. The photo front end stays
fp32 as well: the resize's indices and weights are computed from H and W in float32, as PyTorch
computes them, and float16 cannot do that (it holds integers exactly only up to 2048 and spaces
them 4 apart between 4096 and 8192, so a source row of an 8192-pixel side would be off by up to 2
pixels; FP16_INDEX_NOTE); the blend is two taps per window value, so fp16 there saves no
arithmetic, and fp16 in the front end broke the ranking at G=32, D=2048 before whole photos (top-K
overlap 0.946 mean, 0.89 min).
"""
from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError, HostCapabilityError
from arrcoc_edge.relevance.signature import EVIDENCE_NAMES, INPUT_NAMES, MAX_SIDE, MIN_SIDE, OUTPUT_NAMES
from arrcoc_edge.relevance.signature import MAX_BATCH
from arrcoc_edge.stages.parity import LOSSLESS, LOSSY, Gate
from arrcoc_edge.stages.target import BuildContext, Runner, Target, Variant
from arrcoc_edge.targets.shared import onnx_common

DEPLOYMENT_TARGET = "iOS17"
PACKAGE_NAMES = {"fp32": "model_fp32.mlpackage", "fp16": "model_fp16.mlpackage", "int8": "model_int8w.mlpackage"}
# bytes per parameter of each variant's weights, for its size budget
_WEIGHT_BYTES = {"fp32": 4, "fp16": 2, "int8": 1}
# Ops the FP16 variant computes in fp16: the convolutions (the texture window and colour maps, and
# the learned 1x1 layers of the direct form) and the learned linear / matmul layers.
_FP16_OPS = ("conv", "linear", "matmul", "relu")
_DTYPE_NAMES = {"image": "FLOAT16", "query": "FLOAT32", "relevance": "FLOAT32", "topk_indices": "INT32",
                "weights": "FLOAT32", "evidence": "FLOAT32"}
NOT_APPLE = ("CoreML predictions need macOS; parity measured with arrcoc-edge's NumPy MIL evaluator, "
             "not Apple's runtime")
# The photo as CoreML takes it: the contract's uint8 photo, each byte handed over as a float16.
IMAGE_DTYPE = np.float16
IMAGE_INPUT = {
    "name": "image",
    "multiarray_dtype": "FLOAT16",
    "shape": "[B,H,W,3]",
    "batch": f"1..{MAX_BATCH}",
    "height": f"{MIN_SIDE}..{MAX_SIDE}",
    "width": f"{MIN_SIDE}..{MAX_SIDE}",
    "hand_over": ("the photo as decoded (RGB, rows top to bottom, EXIF orientation applied, alpha dropped), "
                  "no crop, no resampling: each uint8 byte 0..255 written as a float16 of the same value "
                  "(exact), HWC order, one photo size per batch"),
    "why": ("CoreML has no uint8 model inputs (MultiArray types: FLOAT32, DOUBLE, INT32, FLOAT16, INT8 from "
            "iOS26; coremltools 9.0 refuses uint8 TensorTypes and torch.uint8 inputs); float16 holds every "
            "byte value exactly at 2 bytes a value, half of INT32 or FLOAT32"),
}
GENERAL_PROGRAM = ("exported without the 16G fast path (torch.cond has no CoreML lowering): every photo size "
                   "takes the general resize, which computes the same numbers")
FP16_INDEX_NOTE = ("the resize's indices and weights stay float32 in every variant: float16 holds integers exactly "
                   "only up to 2048 (4 apart between 4096 and 8192), so source rows of a large photo would be wrong")
# Passes of coremltools' default pipeline left out:
# - divide_to_multiply rewrites x / c as x * (1 / c), which can differ from PyTorch's division in the
#   last bit (the resize's n / 16G, the / 255);
# - add_int16_cast (run with FP16 compute) casts every int32 index of a gather to int16 / uint16
#   whatever its run-time value: the byte offsets into a photo reach 3 * H * W (201 million at
#   8192 x 8192), so every photo above 65,536 bytes read wrong bytes (measured with the MIL evaluator
#   before it refused such casts: top-K overlap 0.41-0.83 on whole photos, only the 96 x 128 one intact).
_SKIPPED_PASSES = ("common::divide_to_multiply", "common::add_int16_cast")


def coreml_model(model):
    """A copy of the model as CoreML converts it: model.py without the 16G fast path (see
    GENERAL_PROGRAM). PhotoWindows reads any integer-valued photo dtype the same way (CoreML hands
    it float16 bytes); tests/test_coreml.py holds that front end bit for bit to the uint8 one."""
    from arrcoc_edge.stages.export import model_form

    return model_form(model, fast_path=False).eval()


def coreml_program(ctx: BuildContext):
    """coreml_model exported with the contract's dynamic shapes and a float16 photo (IMAGE_INPUT)."""
    import torch  # here: the target table is imported by torch-free inference (arrcoc_edge.load)

    from arrcoc_edge.stages.export import dynamic_shapes, example_inputs

    model = coreml_model(ctx.checkpoint.model)
    image, query = example_inputs(ctx.config)
    try:
        with torch.no_grad():
            return torch.export.export(model, (image.to(torch.float16), query), dynamic_shapes=dynamic_shapes(),
                                       strict=False)
    except Exception as exc:  # torch.export raises many unrelated types
        raise ExportError(f"torch.export of the CoreML form failed: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200]}", "run with --verbose for the trace") from exc


def to_image_input(image: np.ndarray) -> np.ndarray:
    """The contract's uint8 photo as the CoreML package takes it: the same values as float16."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise ExportError(f"image must be uint8 (the photo as decoded), got {image.dtype}",
                          "hand over the decoded bytes")
    return np.ascontiguousarray(image, dtype=IMAGE_DTYPE)


@contextlib.contextmanager
def quiet():
    """coremltools prints progress bars, version warnings and 'Failed to load' notices off macOS."""
    loggers = [logging.getLogger(n) for n in ("coremltools", "torch")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), \
                contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def package_files(package: Path) -> list[Path]:
    """The files of an .mlpackage (a folder); the model spec first (it anchors the hash chain)."""
    files = sorted(p for p in package.rglob("*") if p.is_file())
    files.sort(key=lambda p: p.name != "model.mlmodel")
    return files


def size_budget(ctx: BuildContext, variant: str) -> int:
    params = onnx_common.param_bytes(ctx.checkpoint.model) // 4
    # weights at the variant's width, plus room for the program, scales and small fp32 constants
    return int(params * _WEIGHT_BYTES[variant] * 1.5) + 128 * 1024


def fp16_selector():
    """FP16 for the convolutions and learned layers; fp32 for everything else (grid statistics)."""
    return lambda op: op.op_type in _FP16_OPS


def convert(ctx: BuildContext, precision: str):
    """A fresh copy of the exported program -> MLModel (in memory) with the contract's names."""
    import coremltools as ct

    cfg = ctx.config
    batch = ct.RangeDim(1, MAX_BATCH, default=1)
    height = ct.RangeDim(MIN_SIDE, MAX_SIDE, default=cfg.image_size)
    width = ct.RangeDim(MIN_SIDE, MAX_SIDE, default=cfg.image_size)
    inputs = [
        ct.TensorType(name="image", shape=(batch, height, width, 3), dtype=IMAGE_DTYPE),
        ct.TensorType(name="query", shape=(batch, cfg.query_dim), dtype=np.float32),
    ]
    # float32 outputs whatever the compute precision (iOS17 would otherwise return fp16 outputs)
    outputs = [ct.TensorType(name="relevance", dtype=np.float32), ct.TensorType(name="topk_indices"),
               ct.TensorType(name="weights", dtype=np.float32), ct.TensorType(name="evidence", dtype=np.float32)]
    compute = (ct.precision.FLOAT32 if precision == "fp32"
               else ct.transform.FP16ComputePrecision(op_selector=fp16_selector()))
    program = coreml_program(ctx).run_decompositions({})  # a fresh export: lowering mutates it
    passes = ct.PassPipeline.DEFAULT
    passes.remove_passes(_SKIPPED_PASSES)
    try:
        with quiet():
            model = ct.convert(program, convert_to="mlprogram", inputs=inputs, outputs=outputs, compute_precision=compute,
                               minimum_deployment_target=getattr(ct.target, DEPLOYMENT_TARGET), pass_pipeline=passes)
    except Exception as exc:
        raise ExportError(f"coremltools conversion ({precision}) failed: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200] if str(exc) else ''}",
                          "run with --verbose; check coremltools supports every op of the program") from exc
    return rename_outputs(model)


def rename_outputs(model):
    """Older coremltools ignored output names for ExportedPrograms (div_10, topk_1, ...): enforce them."""
    import coremltools as ct

    spec = model.get_spec()
    old = [o.name for o in spec.description.output]
    if len(old) != len(OUTPUT_NAMES):
        raise ExportError(f"converted model has {len(old)} outputs, expected {len(OUTPUT_NAMES)}",
                          f"the model must return ({', '.join(OUTPUT_NAMES)})")
    for before, after in zip(old, OUTPUT_NAMES):
        if before != after:
            ct.utils.rename_feature(spec, before, after)
    with quiet():
        return ct.models.MLModel(spec, weights_dir=model.weights_dir, skip_model_load=sys.platform != "darwin")


def describe(model, ctx: BuildContext, variant: str) -> None:
    cfg = ctx.config
    model.short_description = f"ARR-COC relevance realizer ({variant}), {cfg.grid}x{cfg.grid} patches, top-{cfg.top_k}"
    model.input_description["image"] = (
        f"the photo as decoded, float16 [B,H,W,3] (H, W {MIN_SIDE}..{MAX_SIDE}, one size per batch): RGB, rows "
        "top to bottom, EXIF orientation applied, alpha dropped, no crop, no resize; each value the decoded "
        "byte 0..255 as a float16 (exact). float16 because CoreML has no uint8 inputs; the model resizes to "
        f"{cfg.image_size}x{cfg.image_size} itself")
    model.input_description["query"] = f"query embedding float32 [B,{cfg.query_dim}]"
    model.output_description["relevance"] = f"relevance per patch [B,{cfg.num_patches}] in [0,1], row-major"
    model.output_description["topk_indices"] = f"top-{cfg.top_k} patch indices [B,{cfg.top_k}] int32"
    model.output_description["weights"] = "information, perspectival, participatory weights [B,3]"
    model.output_description["evidence"] = (f"how strongly the query matched [B,{len(EVIDENCE_NAMES)}]: "
                                            f"{', '.join(EVIDENCE_NAMES)} of the participatory map before min-max")
    model.user_defined_metadata.update({
        "arrcoc.variant": variant, "arrcoc.checkpoint_sha256": ctx.checkpoint.sha256,
        "arrcoc.exported_program_sha256": ctx.program.sha256,
        "arrcoc.image_input": IMAGE_INPUT["hand_over"],
    })


def quantize_weights(model):
    """8-bit linear (symmetric, per channel) weights; compute stays float."""
    import coremltools as ct
    from coremltools.optimize.coreml import OpLinearQuantizerConfig, OptimizationConfig, linear_quantize_weights

    config = OptimizationConfig(global_config=OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8"))
    with quiet():
        return linear_quantize_weights(model, config=config)


def convert_all(ctx: BuildContext, dest: Path) -> None:
    """The fp32, fp16 and int8 packages (PACKAGE_NAMES) in `dest`. The same program, code and
    coremltools convert to the same packages: reused across builds (conversion_cache); the gates
    still run on them."""
    from arrcoc_edge.stages.conversion_cache import convert_cached

    def convert_into(folder: Path) -> dict:
        fp32 = convert(ctx, "fp32")
        for name, model in {"fp32": fp32, "fp16": convert(ctx, "fp16"), "int8": quantize_weights(fp32)}.items():
            describe(model, ctx, name)
            save(model, folder / PACKAGE_NAMES[name])
        return {}

    # describe() records the checkpoint's and the .pt2's sha256: both are inputs
    inputs = {"program": ctx.program.cache_key, "program_sha256": ctx.program.sha256, "checkpoint": ctx.checkpoint.sha256}
    convert_cached("coreml-relevance", inputs, ("torch", "coremltools"), convert_into, dest, ctx.log, keep=8)


def save(model, path: Path) -> list[Path]:
    with quiet():
        model.save(str(path))
    return saved_files(path)


def saved_files(path: Path) -> list[Path]:
    """The files of a saved package; a package without its model is an ExportError."""
    files = package_files(path)
    if not files or not any(p.name == "model.mlmodel" for p in files):
        raise ExportError(f"{path.name} was not written", "run with --verbose to see coremltools' output")
    return files


def gate_for(variant: str, budget: int) -> Gate:
    base = LOSSLESS if variant == "fp32" else LOSSY
    return Gate({**base.maxima, "size_bytes": budget}, base.minima, base.tie_tolerance)


# Why the package is checked as a MIL program here, never on ARM kernels (recorded in the manifest)
ARM64_NOTE = ("not run on arm64 here: Core ML's runtime exists only on Apple's systems (macOS, iOS); this host "
              "evaluates the MIL program with the project's NumPy evaluator (a reference check) on its own kernels")


class CoremlTarget(Target):
    name = "coreml"
    summary = ("CoreML .mlpackage (ML Program, iOS17, flexible batch and photo size): FP32, FP16 and "
               "8-bit weights")
    extra = "mobile"
    modules = ("coremltools",)
    capability = "macOS (CoreML runtime); elsewhere a NumPy MIL reference check, not Apple's runtime"

    def build(self, ctx: BuildContext) -> list[Variant]:
        with quiet():  # coremltools prints 'Failed to load ...' for every macOS-only binding at import
            import coremltools  # noqa: F401
        ctx.log(f"[{self.name}] converting fp32 and fp16 ({DEPLOYMENT_TARGET}, batch 1..{MAX_BATCH}, "
                f"photos {MIN_SIDE}..{MAX_SIDE} a side, float16 bytes in)")
        convert_all(ctx, ctx.staging)
        variants = []
        for name in PACKAGE_NAMES:
            files = saved_files(ctx.staging / PACKAGE_NAMES[name])
            budget = size_budget(ctx, name)
            variants.append(Variant(
                name, files, gate_for(name, budget), budget, primary=name == "fp32", topk_dtype="int32",
                info={**self._info(ctx.staging / PACKAGE_NAMES[name], name), "arm64": ARM64_NOTE},
            ))
        return variants

    @staticmethod
    def _info(package: Path, variant: str) -> dict:
        from arrcoc_edge.targets.coreml.mil_program import MilProgram

        program = MilProgram(package)
        return {
            "package": package.name,
            "format": "mlprogram",
            "minimum_deployment_target": DEPLOYMENT_TARGET,
            "opset": program.opset,
            "batch": f"1..{MAX_BATCH} (flexible)",
            "photo_size": f"{MIN_SIDE}..{MAX_SIDE} a side (flexible height and width)",
            "image_input": IMAGE_INPUT,
            "program": GENERAL_PROGRAM,
            "skipped_passes": list(_SKIPPED_PASSES),
            "precision": {"fp32": "float32 weights and compute",
                          "fp16": ("float16 weights; fp16 convolutions and learned layers, fp32 photo front end "
                                   "(resize indices and weights) and grid statistics"),
                          "int8": "8-bit linear symmetric per-channel weights, float32 compute"}[variant],
            "resize_indices": FP16_INDEX_NOTE,
            "op_counts": dict(sorted(program.op_counts().items())),
            "compute_dtypes": program.compute_dtype_counts(),
        }

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        from arrcoc_edge.targets.coreml.mil_program import MilProgram

        package = ctx.staging / variant.info["package"]
        with quiet():
            program = MilProgram(package)
        checks = [f"{package.name}: spec loads (ML Program, opset {program.opset}, "
                  f"{sum(program.op_counts().values())} ops)"]
        checks.append(check_io_contract(program.spec, ctx.config))
        missing = program.unsupported_ops()
        if missing:
            raise ExportError(f"{package.name} uses ops the MIL reference evaluator lacks: {', '.join(missing)}",
                              "add them to targets/coreml/mil.py")
        checks.append("every MIL op is covered by the reference evaluator")
        if variant.name == "int8" and "constexpr_affine_dequantize" not in program.op_counts():
            raise ExportError("int8 package has no 8-bit weights", "check linear_quantize_weights' config")
        if variant.name == "fp16" and not program.compute_dtype_counts().get("fp16"):
            raise ExportError("fp16 package computes nothing in fp16", "check the FP16 op selector")
        return checks

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        package = ctx.staging / variant.info["package"]
        if sys.platform == "darwin":
            return mlmodel_runner(package)
        return mil_runner(package)


def check_io_contract(spec, cfg) -> str:
    """Names, dtypes and shapes vs the contract: flexible batch 1..MAX_BATCH, the photo's height and
    width MIN_SIDE..MAX_SIDE, fixed other dims; the image as float16 (IMAGE_INPUT)."""
    from coremltools.proto import FeatureTypes_pb2

    want = onnx_common.contract_shapes(cfg)
    have = {f.name: f for f in [*spec.description.input, *spec.description.output]}
    problems = []
    for name in (*INPUT_NAMES, *OUTPUT_NAMES):
        feature = have.get(name)
        if feature is None:
            problems.append(f"missing '{name}'")
            continue
        arr = feature.type.multiArrayType
        dtype = FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(arr.dataType)
        if dtype != _DTYPE_NAMES[name]:
            problems.append(f"{name} is {dtype}, expected {_DTYPE_NAMES[name]}")
        if name in INPUT_NAMES:
            ranges = [(r.lowerBound, r.upperBound) for r in arr.shapeRange.sizeRanges]
            expected = [(1, MAX_BATCH)] + [(MIN_SIDE, MAX_SIDE) if d is None else (d, d) for d in want[name][1:]]
            if ranges != expected:
                problems.append(f"{name} has shape ranges {ranges}, expected {expected}")
    if problems:
        raise ExportError(f"CoreML I/O contract broken: {'; '.join(problems)}",
                          "fix the conversion so names, dtypes and shapes match the contract")
    return (f"I/O contract: names, dtypes (image float16 bytes, topk_indices int32), flexible batch 1..{MAX_BATCH}, "
            f"photo height and width {MIN_SIDE}..{MAX_SIDE}, fixed dims match")


def mil_runner(package: Path) -> Runner:
    """The NumPy MIL evaluator: a reference check of the converted program, not CoreML itself."""
    import coremltools as ct

    from arrcoc_edge.targets.coreml.mil_program import MilProgram

    with quiet():
        program = MilProgram(package)

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return program.run({**inputs, "image": to_image_input(inputs["image"])})

    return Runner(run, f"arrcoc-edge NumPy MIL evaluator (coremltools {ct.__version__} spec reader)",
                  authoritative=False, max_batch=8, reason=NOT_APPLE)


def mlmodel_runner(package: Path) -> Runner:
    """Apple's runtime (macOS only): MLModel.predict on the CPU, so results are reproducible."""
    import coremltools as ct

    try:
        model = ct.models.MLModel(str(package), compute_units=ct.ComputeUnit.CPU_ONLY)
    except Exception as exc:
        raise HostCapabilityError(f"CoreML could not load {package.name}: {exc}",
                                  "run on macOS 14+ (iOS17 ML Programs need it)") from exc

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = model.predict({"image": to_image_input(inputs["image"]),
                             "query": np.ascontiguousarray(inputs["query"], dtype=np.float32)})
        return {name: np.asarray(out[name]) for name in OUTPUT_NAMES}

    return Runner(run, f"CoreML MLModel.predict (coremltools {ct.__version__}, CPU_ONLY)", max_batch=8)
