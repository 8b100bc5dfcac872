"""ONNX FP32: the exported program as one .onnx file, checked in onnxruntime here and on older x86.

Older x86: the x86-64 levels below this host's, emulated (targets/shared/arm64.py)."""
from __future__ import annotations

from arrcoc_edge.stages.parity import LOSSLESS, Gate
from arrcoc_edge.stages.target import BuildContext, Runner, Target, Variant

from arrcoc_edge.targets.shared import arm64, onnx_common


def size_budget(ctx: BuildContext) -> int:
    # float32 weights plus room for the graph; anything much larger means duplicated constants
    return int(onnx_common.param_bytes(ctx.checkpoint.model) * 1.5) + 256 * 1024


class OnnxTarget(Target):
    name = "onnx"
    summary = "ONNX FP32 (single file, dynamic batch) for onnxruntime"
    extra = "build"
    modules = ("onnx", "onnxscript", "onnxruntime")
    runtime_modules = ("onnxruntime",)  # the published model runs on the inference install
    capability = "cpu (onnxruntime)"

    def build(self, ctx: BuildContext) -> list[Variant]:
        path = onnx_common.export_onnx_cached(ctx.program.load, {"program": ctx.program.cache_key}, ctx.config,
                                              ctx.staging / "model.onnx", ctx.log)
        budget = size_budget(ctx)
        gate = Gate({**LOSSLESS.maxima, "size_bytes": budget}, LOSSLESS.minima, LOSSLESS.tie_tolerance)
        return [Variant("fp32", [path], gate, budget, primary=True, info={"opset": _opset(path)})]

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        onnx_common.check_onnx(variant.files[0])
        checks = ["onnx.checker (full_check) passed"]
        return checks + onnx_common.check_io_contract(onnx_common.ort_session(variant.files[0]), ctx.config)

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        return onnx_common.ort_runner(variant.files[0])

    def other_isas(self, ctx: BuildContext, variant: Variant) -> dict:
        # PCs run this file on whatever x86 level they have (the phones take the .ort of onnx-int8,
        # checked on arm64 there): onnxruntime's FP32 kernels differ by SSE, AVX2 and AVX-512
        return arm64.other_isas(ctx, variant.files[0], arm64.X86_LEVELS)

    def published_runner(self, out, entry: dict, variant: str, threads: int | None = None,
                         model: bytes | None = None) -> Runner:
        return onnx_common.ort_runner(model or out / entry["variants"][variant]["files"][0], threads=threads or 0)

    def bench_cases(self, out, entry: dict) -> list:
        return onnx_common.ort_bench_cases(out, entry, ("fp32",))


def _opset(path) -> int:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
