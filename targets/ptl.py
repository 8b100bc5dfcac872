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

from pipeline.errors import ExportError
from pipeline.model import OUTPUT_NAMES
from pipeline.parity import LOSSLESS, Gate
from pipeline.target import BuildContext, Runner, Target, Variant, expect_file

from .onnx_common import param_bytes

PTL_FILE = "model.ptl"


@contextlib.contextmanager
def _quiet():
    # TorchScript tracing and the lite interpreter emit deprecation and tracer warnings on every call.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def trace_to_ptl(model, cfg, path: Path) -> Path:
    """Trace a copy whose parameters do not require grad: saved with requires_grad, every output
    of the .ptl would require grad and an app would pay autograd bookkeeping on each call."""
    import torch

    from pipeline.export import example_inputs, model_form

    # TorchScript's tracer cannot record torch.cond: trace the general resize, which computes the
    # same numbers for every size (a 16G photo only misses the fast path)
    frozen = model_form(model, fast_path=False).eval().requires_grad_(False)
    try:
        with _quiet(), torch.no_grad():
            traced = torch.jit.trace(frozen, example_inputs(cfg, batch=2), check_trace=False)
            traced._save_for_lite_interpreter(str(path))
    except Exception as exc:  # TorchScript raises many unrelated types
        raise ExportError(f"TorchScript trace failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
                          "run with --verbose; the model must stay traceable") from exc
    return expect_file(path, "the .ptl program")


def _load(path: Path):
    from torch.jit.mobile import _load_for_lite_interpreter

    with _quiet():
        return _load_for_lite_interpreter(str(path))


class PtlTarget(Target):
    name = "ptl"
    summary = "PyTorch Lite Interpreter .ptl (TorchScript trace, any batch)"
    extra = None  # torch itself
    modules = ("torch",)
    capability = "cpu (torch.jit.mobile lite interpreter)"
    notes = "deprecated upstream: use executorch for new apps"

    def build(self, ctx: BuildContext) -> list[Variant]:
        path = trace_to_ptl(ctx.checkpoint.model, ctx.config, ctx.staging / PTL_FILE)
        budget = int(param_bytes(ctx.checkpoint.model) * 1.5) + 256 * 1024
        gate = Gate({**LOSSLESS.maxima, "size_bytes": budget}, LOSSLESS.minima, LOSSLESS.tie_tolerance)
        info = {"format": "TorchScript lite interpreter (bytecode)", "traced_batch": 2,
                "program": "general resize for every photo size (the tracer cannot record the 16G fast path's torch.cond)",
                "optimize_for_mobile": False, "parameters_require_grad": False, "deprecated": self.notes}
        return [Variant("fp32", [path], gate, budget, primary=True, info=info)]

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        from torch.jit.mobile import _export_operator_list

        module = _load(variant.files[0])
        ops = sorted(_export_operator_list(module))
        variant.info["operators"] = len(ops)
        return [f"loads in the lite interpreter; {len(ops)} root operators (for a selective LibTorch-Lite build)"]

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        return ptl_runner(variant.files[0])

    def published_runner(self, out: Path, entry: dict, variant: str) -> Runner:
        return ptl_runner(out / entry["variants"][variant]["files"][0])

    def bench_cases(self, out: Path, entry: dict) -> list:
        import torch

        from pipeline.bench import BenchCase

        runner, default = ptl_runner(out / entry["variants"]["fp32"]["files"][0]), torch.get_num_threads()
        cases = []
        for threads in (1, default):
            def run(inputs, n=threads):
                torch.set_num_threads(n)
                return runner.run(inputs)
            cases.append(BenchCase(f"lite interpreter fp32 ({'1 thread' if threads == 1 else 'default threads'})",
                                   run, 1 if threads == 1 else None))
        return cases


def ptl_runner(path: Path) -> Runner:
    import torch

    module = _load(path)

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        image = torch.from_numpy(np.ascontiguousarray(inputs["image"], dtype=np.uint8))
        query = torch.from_numpy(np.ascontiguousarray(inputs["query"], dtype=np.float32))
        with _quiet():  # no torch.no_grad(): called as an app calls it (its parameters need no grad)
            outs = module(image, query)
        return {name: out.numpy() for name, out in zip(OUTPUT_NAMES, outs)}

    return Runner(run, f"torch {torch.__version__} lite interpreter (torch.jit.mobile)")
