"""A published .pte in a runtime: ExecuTorch's Python bindings (pte_runner) or the project's C++
runner on this host or an emulated arm64 CPU (cpp_runner), and the program's I/O read back from its
MethodMeta (check_method_meta). The build (target.py), the Android stage and the app's encoder use
these; none of them lowers anything.

The ExecuTorch Python runtime ignores the strides of a non-contiguous input tensor and silently
computes garbage (relevance max abs 0.75 measured): inputs are copied contiguous.
"""
from __future__ import annotations

import importlib.metadata
import time
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError
from arrcoc_edge.relevance.signature import OUTPUT_NAMES
from arrcoc_edge.stages.target import Runner

from arrcoc_edge.targets.shared import et_runner
from arrcoc_edge.targets.shared.run_cache import REUSED, cached_outputs

# ExecuTorch ScalarType codes (as in c10) of the contract's dtypes: 6 = Float, 4 = Long.
_SCALAR_TYPES = {0: "uint8", 6: "float32", 4: "int64", 3: "int32"}
_EXPECTED_DTYPES = {"image": "uint8", "query": "float32", "relevance": "float32", "topk_indices": "int64", "weights": "float32",
                    "evidence": "float32"}
_OUTPUTS = len(OUTPUT_NAMES)
# The .pte's second method: photos of exactly 16G x 16G only, no resize (PhotoWindows.square_only).
# "forward" takes every size; a caller holding a 16G x 16G photo may call this one instead and gets
# the same numbers bit for bit (tests/test_executorch_ptl.py), faster.
SQUARE_METHOD = "forward_16g"


def version() -> str:
    return importlib.metadata.version("executorch")


def _method(path: Path, name: str = "forward"):
    return _program(path).load_method(name)


def _program(path: Path | bytes):
    """path: a .pte file, or its checked bytes. The runtime does NOT copy a buffer: it reads the
    caller's bytes for as long as the program lives, so pte_runner keeps them referenced (a runner
    whose bytes were collected segfaulted on its first call, measured)."""
    from arrcoc_edge.errors import check_torch_loadable
    from arrcoc_edge.install import COMMAND

    check_torch_loadable()
    from executorch.runtime import Runtime

    try:
        return Runtime.get().load_program(path if isinstance(path, bytes) else str(path))
    except Exception as exc:  # the runtime raises RuntimeError / ValueError with a C++ status code
        # checked bytes have no name here: the caller (predict.checked_runner) names the file and folder
        what = "the ExecuTorch runtime refuses the program" if isinstance(path, bytes) else \
            f"{path.name} does not load in the ExecuTorch runtime"
        raise ExportError(f"{what} ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else 'no message'})",
                          f"rebuild it with `{COMMAND} build --target executorch --out FOLDER`") from exc


def check_method_meta(path: Path, cfg) -> list[str]:
    """Input/output count, dtypes and fixed dims of the .pte's forward vs the contract."""
    meta = _method(path).metadata
    if meta.num_inputs() != 2 or meta.num_outputs() != _OUTPUTS:
        raise ExportError(f"{path.name}: forward has {meta.num_inputs()} inputs / {meta.num_outputs()} outputs, expected 2 / {_OUTPUTS}",
                          f"the exported program must take (image, query) and return ({', '.join(OUTPUT_NAMES)})")
    from arrcoc_edge.relevance.signature import EVIDENCE_NAMES, MAX_SIDE

    # Dynamic dimensions show their upper bounds: the photo's height and width up to MAX_SIDE.
    want = {"image": [MAX_SIDE, MAX_SIDE, 3], "query": [cfg.query_dim],
            "relevance": [cfg.num_patches], "topk_indices": [cfg.top_k], "weights": [3], "evidence": [len(EVIDENCE_NAMES)]}
    infos = [meta.input_tensor_meta(i) for i in range(2)] + [meta.output_tensor_meta(i) for i in range(_OUTPUTS)]
    problems = []
    for name, info in zip(want, infos):
        dtype = _SCALAR_TYPES.get(int(info.dtype()), f"ScalarType {info.dtype()}")
        if dtype != _EXPECTED_DTYPES[name] or list(info.sizes())[1:] != want[name]:
            problems.append(f"{name} is {dtype}{list(info.sizes())}")
    lines = [f"I/O contract (MethodMeta): 2 inputs, {_OUTPUTS} outputs, dtypes and dims match (image uint8 up to "
             f"{MAX_SIDE} x {MAX_SIDE}, topk int64)"]
    program = _program(path)
    if SQUARE_METHOD in program.method_names:
        square = program.load_method(SQUARE_METHOD).metadata
        image = square.input_tensor_meta(0)
        want_image = [cfg.image_size, cfg.image_size, 3]
        if square.num_inputs() != 2 or square.num_outputs() != _OUTPUTS or list(image.sizes())[1:] != want_image \
                or _SCALAR_TYPES.get(int(image.dtype())) != "uint8":
            problems.append(f"{SQUARE_METHOD} takes {square.num_inputs()} inputs ({list(image.sizes())}), "
                            f"expected uint8 [B,{cfg.image_size},{cfg.image_size},3] and the query")
        lines.append(f"second method {SQUARE_METHOD}: {cfg.image_size} x {cfg.image_size} photos only (no resize)")
    if problems:
        raise ExportError(f"{path.name}: I/O contract broken: {'; '.join(problems)}",
                          "fix the export so dtypes and shapes match the contract")
    return lines


def pte_runner(path: Path | bytes, max_batch: int) -> Runner:
    import torch

    program = _program(path)
    keep = path  # the checked bytes the program reads in place: alive as long as run() is
    method = program.load_method("forward")
    # the 16G method, when the program holds one, for photos of exactly that size
    square = program.load_method(SQUARE_METHOD) if SQUARE_METHOD in program.method_names else None
    side = int(square.metadata.input_tensor_meta(0).sizes()[1]) if square is not None else None

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        # The runtime reads a non-contiguous tensor as if it were contiguous: copy only those (an
        # unconditional copy cost 0.3 ms of 1.8 at G=32 batch 1 and 2.5 of 11 ms at batch 8, measured).
        args = [torch.from_numpy(np.ascontiguousarray(inputs["image"], dtype=np.uint8)),
                torch.from_numpy(np.ascontiguousarray(inputs["query"], dtype=np.float32))]
        shape = args[0].shape
        outs = (square if side is not None and shape[1] == side and shape[2] == side else method).execute(args)
        assert keep is not None  # run() holds the program's buffer
        return {name: out.numpy().copy() for name, out in zip(OUTPUT_NAMES, outs)}

    return Runner(run, f"ExecuTorch {version()} runtime (XNNPACK + portable kernels)", max_batch=max_batch)


def cpp_runner(path: Path, max_batch: int, square_side: int | None, process: et_runner.RunnerProcess,
               isa: str | None = None, cache_log=None) -> Runner:
    """`path` in the project's C++ runner (`process`: this host's or an emulated CPU model's), every
    batch of a split in one request stream; the 16G method for photos of that size, as pte_runner.
    With `cache_log` (a build's log) and an emulated `isa`, an identical earlier run's outputs are
    reused (targets/shared/run_cache.py)."""
    runner = Runner(run=lambda inputs: run_many([inputs])[0], runtime="", max_batch=max_batch)
    runner.facts = {"cpu": et_runner.CPUS[isa][1]} if isa else {}

    def run_many(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        if cache_log is None or isa is None:
            return run_fresh(batches)

        def fresh():
            outputs = run_fresh(batches)
            return outputs, {"runtime": runner.runtime, "facts": runner.facts}

        outputs, record, reused = cached_outputs(f"emulated-pte-{et_runner.CPUS[isa][0]}", et_runner.identity(isa),
                                                 path, batches, fresh, cache_log, extra=f"square {square_side}")
        if reused:
            runner.runtime, runner.facts = record["runtime"], {**record["facts"], "reused": REUSED}
        return outputs

    def run_fresh(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        started, results, calls = time.monotonic(), [], []
        for batch in batches:
            image = np.ascontiguousarray(batch["image"], dtype=np.uint8)
            method = et_runner.method_for(image, square_side)
            outs, answer = process.request(path, method, [image, np.ascontiguousarray(batch["query"], dtype=np.float32)])
            results.append(dict(zip(OUTPUT_NAMES, outs)))
            calls.append({"batch": f"{image.shape[0]} x {image.shape[1]}x{image.shape[2]}", "ms": round(float(answer.get("first_ms", 0)), 1)})
        runner.runtime = f"ExecuTorch {version()} C++ runtime (XNNPACK + portable kernels, 1 thread), {process.label}"
        runner.facts.update(calls=len(calls), call_ms=calls, wall_s=round(time.monotonic() - started, 1),
                            ms_per_call_median=round(float(np.median([c["ms"] for c in calls])), 1) if calls else None)
        return results

    runner.run_many = run_many
    return runner
