"""PyTorch Lite Interpreter (.ptl), checked with torch.jit.mobile._load_for_lite_interpreter.

DEPRECATED UPSTREAM: the Lite Interpreter (PyTorch Mobile) is superseded by ExecuTorch. This
target exists for apps that still embed `org.pytorch:pytorch_android_lite` / LibTorch-Lite;
new apps should use the `executorch` target.

The program is a TorchScript trace of the eager model at batch 2 (a trace at batch 1 would bake
the batch in); the traced graph reads the batch from the input, so any batch runs.
It is the one target not built from the .pt2: TorchScript cannot consume an ExportedProgram, so it
traces the same loaded checkpoint module that torch.export saw (parity is still measured against
the eager reference like every other target).
`optimize_for_mobile` is NOT applied: it fails on these CPU wheels (XNNPACK not enabled in them).
"""
from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError
from arrcoc_edge.relevance.signature import OUTPUT_NAMES
from arrcoc_edge.stages.parity import LOSSLESS, Gate
from arrcoc_edge.stages.target import BuildContext, Runner, Target, Variant, expect_file

from arrcoc_edge.targets.shared.onnx_common import param_bytes

PTL_FILE = "model.ptl"


@contextlib.contextmanager
def _quiet():
    # TorchScript tracing and the lite interpreter emit deprecation and tracer warnings on every call.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# The .ptl's second method: photos of exactly 16G x 16G only, no resize (the fast path the tracer
# cannot record as a branch); the same numbers as forward there, bit for bit.
SQUARE_METHOD = "forward_16g"


def _two_methods(model):
    """A module whose `forward` is the model (general resize) and whose `forward_16g` is the same
    model reading a 16G photo's own pixels (PhotoWindows.square_only), sharing one set of weights."""
    import torch

    class TwoMethods(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.model = inner

        def forward(self, image, query):
            return self.model(image, query)

        def forward_16g(self, image, query):
            windows = self.model.texture.windows
            windows.square_only = True
            try:
                return self.model(image, query)
            finally:
                windows.square_only = False

    return TwoMethods(model)


def trace_to_ptl(model, cfg, path: Path) -> Path:
    """Trace a copy whose parameters do not require grad: saved with requires_grad, every output
    of the .ptl would require grad and an app would pay autograd bookkeeping on each call."""
    import torch

    from arrcoc_edge.stages.export import example_inputs, model_form

    # TorchScript's tracer cannot record torch.cond: trace the general resize, which computes the
    # same numbers for every size, as forward, and the 16G path as a second method
    frozen = model_form(model, fast_path=False).eval().requires_grad_(False)
    general = example_inputs(cfg, batch=2)
    square = (general[0][:, : cfg.image_size, : cfg.image_size].contiguous(), general[1])
    try:
        with _quiet(), torch.no_grad():
            traced = torch.jit.trace_module(_two_methods(frozen), {"forward": general, SQUARE_METHOD: square},
                                            check_trace=False)
            traced._save_for_lite_interpreter(str(path))
    except Exception as exc:  # TorchScript raises many unrelated types
        raise ExportError(f"TorchScript trace failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
                          "run with --verbose; the model must stay traceable") from exc
    return expect_file(path, "the .ptl program")


def _load(path: Path | bytes):
    """path: a .ptl file, or its checked bytes (read from memory, never re-opened)."""
    import io

    from arrcoc_edge.errors import check_torch_loadable

    check_torch_loadable()
    from torch.jit.mobile import _load_for_lite_interpreter

    with _quiet():
        return _load_for_lite_interpreter(io.BytesIO(path) if isinstance(path, bytes) else str(path))


# Why the .ptl is checked on this host's kernels only (the manifest records it beside the variant)
ARM64_NOTE = ("not checked on arm64 here: the Lite Interpreter runs inside torch, and the registry's aarch64 "
              "torch wheel is a CUDA build (several GB of NVIDIA libraries) that qemu-user cannot usefully run")


class PtlTarget(Target):
    name = "ptl"
    summary = "PyTorch Lite Interpreter .ptl (TorchScript trace, any batch)"
    extra = "build"  # torch itself
    modules = ("torch",)
    capability = "cpu (torch.jit.mobile lite interpreter)"
    notes = "deprecated upstream: use executorch for new apps"

    def build(self, ctx: BuildContext) -> list[Variant]:
        path = trace_to_ptl(ctx.checkpoint.model, ctx.config, ctx.staging / PTL_FILE)
        budget = int(param_bytes(ctx.checkpoint.model) * 1.5) + 256 * 1024
        gate = Gate({**LOSSLESS.maxima, "size_bytes": budget}, LOSSLESS.minima, LOSSLESS.tie_tolerance)
        info = {"format": "TorchScript lite interpreter (bytecode)", "traced_batch": 2,
                "program": "general resize for every photo size (the tracer cannot record the 16G fast path's torch.cond)",
                "methods": {"forward": "any photo size (the general resize)",
                            SQUARE_METHOD: "photos of exactly 16G x 16G only: no resize, the same numbers bit for bit, "
                                           "faster; the runner calls it for such photos"},
                "square_side": ctx.config.image_size,
                "optimize_for_mobile": False, "parameters_require_grad": False, "deprecated": self.notes,
                "arm64": ARM64_NOTE}
        return [Variant("fp32", [path], gate, budget, primary=True, info=info)]

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        from torch.jit.mobile import _export_operator_list

        module = _load(variant.files[0])
        ops = sorted(_export_operator_list(module))
        variant.info["operators"] = len(ops)
        return [f"loads in the lite interpreter; {len(ops)} root operators (for a selective LibTorch-Lite build)"]

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        return ptl_runner(variant.files[0], variant.info.get("square_side"))

    def published_runner(self, out: Path, entry: dict, variant: str, threads: int | None = None,
                         model: bytes | None = None) -> Runner:
        v = entry["variants"][variant]
        return ptl_runner(model or out / v["files"][0], (v.get("info") or {}).get("square_side"), threads)

    def bench_cases(self, out: Path, entry: dict) -> list:
        import torch

        from arrcoc_edge.stages.target import BenchCase

        runner, default = self.published_runner(out, entry, "fp32"), torch.get_num_threads()
        cases = []
        for threads in (1, default):
            def run(inputs, n=threads):
                torch.set_num_threads(n)
                return runner.run(inputs)
            cases.append(BenchCase(f"lite interpreter fp32 ({'1 thread' if threads == 1 else 'default threads'})",
                                   run, 1 if threads == 1 else None))
        return cases


def ptl_runner(path: Path | bytes, square_side: int | None = None, threads: int | None = None) -> Runner:
    """threads: torch's intra-op threads for each call (torch's pool is process-wide, so it is set
    per call, as the bench's rows do); None leaves torch's setting alone."""
    import torch

    module = _load(path)
    # the 16G method, when the file holds one and its side is known (info.square_side)
    side = square_side if square_side and module.find_method(SQUARE_METHOD) else None

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        image = torch.from_numpy(np.ascontiguousarray(inputs["image"], dtype=np.uint8))
        query = torch.from_numpy(np.ascontiguousarray(inputs["query"], dtype=np.float32))
        if threads:
            torch.set_num_threads(threads)
        with _quiet():  # no torch.no_grad(): called as an app calls it (its parameters need no grad)
            if side is not None and image.shape[1] == side and image.shape[2] == side:
                outs = module.run_method(SQUARE_METHOD, image, query)
            else:
                outs = module(image, query)
        return {name: out.numpy() for name, out in zip(OUTPUT_NAMES, outs)}

    pool = f", {threads} thread{'s' if threads > 1 else ''}" if threads else ""
    return Runner(run, f"torch {torch.__version__} lite interpreter (torch.jit.mobile{pool})")
