"""ExecuTorch: XNNPACK-delegated .pte files (FP32 and dynamic-int8), checked in the ExecuTorch runtime.

Both variants keep the exported program's dynamic batch; ExecuTorch plans memory for an
upper bound, which is read back from the .pte's MethodMeta and used as the Runner's max batch
(and recorded in the manifest as info.max_batch).

Pitfalls measured here (see TOOLCHAIN.md, Mobile):
  * lowering mutates the ExportedProgram: every lowering starts from `ctx.program.load()`;
  * static int8 PT2E ruins the ranking; DYNAMIC int8 (weights int8 per channel, activations
    quantised at run time) on the learned nn.Linear layers keeps top-K (quantising every conv
    would take the fixed texture front end to 8 bits too);
  * the ExecuTorch Python runtime ignores the strides of a non-contiguous input tensor and
    silently computes garbage (relevance max abs 0.75 measured): inputs are copied contiguous.
"""
from __future__ import annotations

import contextlib
import copy
import importlib.metadata
import os
import time
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError
from arrcoc_edge.relevance.signature import OUTPUT_NAMES
from arrcoc_edge.stages.parity import LOSSLESS, LOSSY, Gate
from arrcoc_edge.stages.target import BuildContext, Runner, Target, Variant, expect_file

from arrcoc_edge.targets.shared import arm64, et_runner
from arrcoc_edge.targets.shared.onnx_common import param_bytes

FP32_FILE = "model_fp32.pte"
INT8_FILE = "model_int8.pte"
# ExecuTorch ScalarType codes (as in c10) of the contract's dtypes: 6 = Float, 4 = Long.
_SCALAR_TYPES = {0: "uint8", 6: "float32", 4: "int64", 3: "int32"}
_EXPECTED_DTYPES = {"image": "uint8", "query": "float32", "relevance": "float32", "topk_indices": "int64", "weights": "float32"}


def _budgets(ctx: BuildContext) -> tuple[int, int]:
    weights = param_bytes(ctx.checkpoint.model)
    # fp32: the weights plus room for the XNNPACK graph and the portable-op program;
    # int8: a quarter of the weights plus the same fixed room (scales, graph, program).
    return int(weights * 1.5) + 256 * 1024, int(weights * 0.5) + 256 * 1024


def _gate(base: Gate, budget: int) -> Gate:
    return Gate({**base.maxima, "size_bytes": budget}, base.minima, base.tie_tolerance)


def version() -> str:
    return importlib.metadata.version("executorch")


def delegation_summary(edge_program) -> dict:
    """Nodes delegated to XNNPACK vs left to ExecuTorch's portable kernels, by operator."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(edge_program.graph_module)
    not_delegated = {op: b.non_delegated for op, b in info.delegation_by_operator.items() if b.non_delegated}
    return {
        "backend": "XnnpackBackend",
        "delegated_subgraphs": info.num_delegated_subgraphs,
        "delegated_nodes": info.num_delegated_nodes,
        "non_delegated_nodes": info.num_non_delegated_nodes,
        "non_delegated_ops": dict(sorted(not_delegated.items())),
    }


def planned_batch(path: Path) -> int:
    """The batch ExecuTorch planned memory for (its intermediates; inputs are the caller's): the
    largest batch the .pte accepts.

    Read from the program's MethodMeta, not from the exported range (the lowering keeps the
    .pt2's symbolic bound of 64 but the memory plan settles lower, 15 measured here)."""
    program = _program(path)
    return min(int(program.load_method(name).metadata.input_tensor_meta(0).sizes()[0])
               for name in program.method_names)


def _backend_config():
    """Graph inputs are not memory-planned: the caller hands over the photo's own buffer. Planned,
    the input would be sized for the upper bounds (15 x 8192 x 8192 x 3 bytes), which does not even
    fit the planner's int32 sizes; every intermediate the model makes is small (the gathered
    8G x 8G bytes, the G x G maps)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    return ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))


# The .pte's second method: photos of exactly 16G x 16G only, no resize (PhotoWindows.square_only).
# "forward" takes every size; a caller holding a 16G x 16G photo may call this one instead and gets
# the same numbers bit for bit (tests/test_executorch_ptl.py), faster.
SQUARE_METHOD = "forward_16g"


def _edge_config():
    """Dtype casts as aten._to_copy, not dim_order_ops._to_dim_order_copy. XNNPACK takes no dtype
    conversion, so the photo's uint8 -> float32 casts run on a portable kernel either way, and the
    dim-order one costs 8x more: 97.6 against 11.5 us for the 37,632 gathered bytes of a general
    resize (ExecuTorch 1.5.1, 1 thread, side by side). The program has no memory-format changes
    (every tensor is contiguous), which is all the dim-order form adds."""
    from executorch.exir import EdgeCompileConfig

    return EdgeCompileConfig(_skip_dim_order=True)


def lower(program, path: Path, square=None) -> dict:
    """ExportedProgram -> XNNPACK-delegated .pte (with `square` as its SQUARE_METHOD when given);
    returns what the manifest records about it."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    try:
        programs = {"forward": program, **({SQUARE_METHOD: square} if square is not None else {})}
        edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()],
                                           compile_config=_edge_config())
        lowered = edge.exported_program("forward")
        info = {"delegation": delegation_summary(lowered), "graph_inputs_planned": False}
        if square is not None:
            info["methods"] = {"forward": "any photo size (the general resize)",
                               SQUARE_METHOD: "photos of exactly 16G x 16G only: no resize, the same numbers bit for bit, "
                                              "faster; the runner calls it for such photos"}
            info["delegation_" + SQUARE_METHOD] = delegation_summary(edge.exported_program(SQUARE_METHOD))
        path.write_bytes(edge.to_executorch(_backend_config()).buffer)
    except Exception as exc:  # the lowering raises many unrelated types
        raise ExportError(
            f"ExecuTorch lowering failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
            "run with --verbose; check every op of the model has an ExecuTorch kernel",
        ) from exc
    expect_file(path, "the .pte program")
    info["max_batch"] = planned_batch(path)
    return info


GENERAL_PROGRAM = ("the build's program without its 16G fast path (torch.cond): ExecuTorch's emitter rejects "
                   "the shape predicate ('invalid target for call_function and_'); every photo size takes the "
                   "general resize, which computes the same numbers, in its row-reading form (whole rows, "
                   "then columns: index_select instead of an element gather, which ran on a slow portable kernel)")


def general_program(ctx: BuildContext):
    """The checkpoint exported without the torch.cond fast path, its general resize reading whole
    rows (see GENERAL_PROGRAM and model.PhotoWindows.resized_by_rows)."""
    from arrcoc_edge.stages.export import export_form

    ctx.log("[executorch] exporting the program without its 16G fast path (no control flow), reading rows")
    return export_form(ctx.checkpoint.model, fast_path=False, general="rows")


INT8_SPEED_NOTE = ("dynamic int8 quantises the activations of every int8 linear layer at run time, and the "
                   "layers it quantises (the balancer) are a small part of the work: the texture front end and "
                   "the reduced participatory head stay float")


def square_program(ctx: BuildContext):
    """The checkpoint exported for 16G x 16G photos only (SQUARE_METHOD)."""
    from arrcoc_edge.stages.export import export_square

    ctx.log(f"[executorch] exporting the {SQUARE_METHOD} method (16G x 16G photos, no resize)")
    return export_square(ctx.checkpoint.model)


def quantize_dynamic_int8(ctx: BuildContext, program, square: bool = False):
    """Dynamic int8 (PT2E, XNNPACKQuantizer): int8 per-channel weights for the learned layers,
    activations quantised at run time, so the fixed colour/Sobel front end stays float.

    It quantises the exported program itself (the reduced participatory form), and only its
    nn.Linear layers: the balancer's, most of the bytes. The head's W1 and W2 stay float, so the
    file is about half of FP32 instead of a third. The direct form would quantise them too, but it projects every patch into the
    query space: measured 13.6x slower than FP32 at D=2048 (30.6 vs 2.25 ms, batch 1; reduced
    int8 2.49 ms) and 2.4x at D=384, so it is not used."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from arrcoc_edge.stages.export import MAX_BATCH, dynamic_shapes, example_inputs

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    # nn.Linear modules only: the balancer (most of the bytes). set_global would also quantise the
    # fixed texture convolutions, whose 8-bit activations are what ruins the ranking (TOOLCHAIN.md).
    prepared = prepare_pt2e(program.module(), XNNPACKQuantizer().set_module_type(torch.nn.Linear, config))
    # Dynamic quantisation needs no calibration statistics; one pass on the calibration split
    # (never the held-out one) runs the observers once, as PT2E expects.
    cal = ctx.golden.calibration.inputs(0, CALIBRATION_ROWS)
    image, query = torch.from_numpy(cal["image"]), torch.from_numpy(cal["query"])
    if square:
        image = image[:, : ctx.config.image_size, : ctx.config.image_size].contiguous()
    with torch.no_grad():
        prepared(image, query)
    converted = convert_pt2e(prepared)
    if square:
        from torch.export import Dim

        batch = Dim("batch", min=1, max=MAX_BATCH)
        return torch.export.export(converted, (image[:2], query[:2]), dynamic_shapes={"image": {0: batch}, "query": {0: batch}},
                                   strict=False)
    return torch.export.export(converted, example_inputs(ctx.config), dynamic_shapes=dynamic_shapes(), strict=False)


LOWERING_TOOLS = ("torch", "executorch", "torchao")
CALIBRATION_ROWS = 4  # quantize_dynamic_int8's one observer pass


def calibration_digest(ctx: BuildContext) -> str:
    """sha256 of the calibration rows the int8 lowering runs its observers on."""
    import hashlib

    cal = ctx.golden.calibration.inputs(0, CALIBRATION_ROWS)
    return hashlib.sha256(b"".join(cal[k].tobytes() for k in sorted(cal))).hexdigest()


def lower_both(ctx: BuildContext, folder: Path) -> dict:
    """FP32 and dynamic int8 .pte files of the checkpoint in `folder`; returns their manifest info."""
    # each program exported once (3 and 2.6 s here) for both variants: the lowering changes the
    # program it is given, so FP32 lowers copies and int8 quantises the originals
    general, square = general_program(ctx), square_program(ctx)
    ctx.log("[executorch] lowering FP32 to XNNPACK")
    fp32_info = lower(copy.deepcopy(general), folder / FP32_FILE, copy.deepcopy(square))
    fp32_info["program"] = GENERAL_PROGRAM
    ctx.log("[executorch] quantising (dynamic int8) and lowering")
    int8_info = lower(quantize_dynamic_int8(ctx, general), folder / INT8_FILE,
                      quantize_dynamic_int8(ctx, square, square=True))
    int8_info["quantization"] = ("PT2E dynamic int8, XNNPACKQuantizer symmetric per-channel weights "
                                 "(the balancer's nn.Linear layers), activations quantised at run time")
    int8_info["participatory_form"] = ctx.checkpoint.model.participatory_scorer.form
    int8_info["speed_note"] = INT8_SPEED_NOTE
    int8_info["program"] = GENERAL_PROGRAM
    return {"fp32": fp32_info, "int8": int8_info}


class ExecutorchTarget(Target):
    name = "executorch"
    summary = "ExecuTorch .pte, XNNPACK-delegated: FP32 and dynamic int8 (bounded dynamic batch)"
    extra = "mobile"
    modules = ("executorch", "torchao")
    capability = "cpu (ExecuTorch Python runtime with XNNPACK)"

    def check_options(self, options: dict, config) -> None:
        arm64.timeout_s()  # a bad ARRCOC_ARM64_TIMEOUT is one line before any stage runs

    def build(self, ctx: BuildContext) -> list[Variant]:
        from arrcoc_edge.stages.conversion_cache import convert_cached

        fp32_budget, int8_budget = _budgets(ctx)
        # the same checkpoint, code and calibration rows lower to the same .pte files: reused
        # across builds (the gates below still run on them)
        inputs = {"program": ctx.program.cache_key, "calibration": calibration_digest(ctx)}
        infos = convert_cached("executorch-relevance", inputs, LOWERING_TOOLS, lambda folder: lower_both(ctx, folder),
                               ctx.staging, ctx.log, keep=8)
        return [
            Variant("fp32", [ctx.staging / FP32_FILE], _gate(LOSSLESS, fp32_budget), fp32_budget,
                    primary=True, info=infos["fp32"]),
            Variant("int8", [ctx.staging / INT8_FILE], _gate(LOSSY, int8_budget), int8_budget, info=infos["int8"]),
        ]

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        d = variant.info["delegation"]
        return check_method_meta(variant.files[0], ctx.config) + [
            f"delegation: {d['delegated_nodes']} nodes in {d['delegated_subgraphs']} XNNPACK subgraphs, "
            f"{d['non_delegated_nodes']} on portable kernels; batch bound {variant.info['max_batch']}"
        ]

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        return pte_runner(variant.files[0], variant.info["max_batch"])

    def other_isas(self, ctx: BuildContext, variant: Variant) -> dict:
        # the phone runs the .pte on XNNPACK's ARM kernels: the same gate there, through the C++ runner
        # (the runtime's C++ API) under qemu-user, one emulated process per CPU model for the stage
        if arm64.host_runs_arm64():
            return {}
        side = ctx.config.image_size if SQUARE_METHOD in variant.info.get("methods", {}) else None
        process = lambda isa: ctx.kept(f"et-runner {isa}", lambda: et_runner.RunnerProcess(isa))  # noqa: E731
        return {isa: (lambda isa=isa: cpp_runner(variant.files[0], variant.info["max_batch"], side, process(isa), isa))
                for isa in et_runner.CPUS}

    def published_runner(self, out: Path, entry: dict, variant: str, threads: int | None = None,
                         model: bytes | None = None) -> Runner:
        # threads is not applied: the XNNPACK pool is process-wide (see bench_cases)
        v = entry["variants"][variant]
        return pte_runner(model or out / v["files"][0], v["info"]["max_batch"])

    def bench_cases(self, out: Path, entry: dict) -> list:
        """Each published .pte in the ExecuTorch runtime: on one thread and on the default XNNPACK
        pool (one thread per core).

        ExecuTorch's pool is process-wide and torch.set_num_threads does not govern it; resizing it
        between calls (_unsafe_reset_threadpool) corrupted the heap when interleaved with the other
        runtimes (malloc abort, measured). So the 1-thread rows run in a worker process whose pool
        is sized once, before it loads the program (PoolWorker), and the default rows in this one."""
        from executorch.extension.pybindings import portable_lib

        from arrcoc_edge.stages.target import BenchCase

        pool = portable_lib._threadpool_get_thread_count()
        cases = []
        for name, variant in entry.get("variants", {}).items():
            if variant.get("status") == "failed":
                continue
            path, max_batch = out / variant["files"][0], variant["info"]["max_batch"]
            worker = PoolWorker(path, max_batch, threads=1)
            runner = pte_runner(path, max_batch)
            one = lambda n, t=worker.threads: f"executorch {n} ({t} thread{'s' if t > 1 else ''})"  # noqa: E731
            default = lambda n: f"executorch {n} (default threads: XNNPACK pool of {pool})"  # noqa: E731
            note = variant["info"].get("speed_note")
            cases.append(BenchCase(one(name), worker.run, worker.threads if worker.threads == 1 else None,
                                   self_timed=True, warm_call=False, max_batch=max_batch,
                                   compare_to=one("fp32") if name != "fp32" else None, speed_note=note))
            cases.append(BenchCase(default(name), runner.run, None, max_batch=runner.max_batch,
                                   compare_to=default("fp32") if name != "fp32" else None, speed_note=note))
            cases += cpp_bench_case(path, max_batch, name, note)
        return cases


def cpp_bench_case(path: Path, max_batch: int, name: str, note: str | None) -> list:
    """The .pte in the project's C++ runner on one thread: what an app's native code pays with no
    Python, beside the Python bindings' 1-thread row. None where set-up built no runner here."""
    from arrcoc_edge.errors import HostCapabilityError
    from arrcoc_edge.stages.target import BenchCase

    try:
        et_runner.runner_tree()
    except HostCapabilityError:
        return []
    import atexit

    process = et_runner.RunnerProcess(None, threads=1)
    atexit.register(process.close)
    program = _program(path)  # the 16G method's side, read as pte_runner reads it
    side = (int(program.load_method(SQUARE_METHOD).metadata.input_tensor_meta(0).sizes()[1])
            if SQUARE_METHOD in program.method_names else None)

    def run(inputs: dict) -> float:  # an untimed call, then the timed one, both in the runner
        image = np.ascontiguousarray(inputs["image"], dtype=np.uint8)
        method = et_runner.method_for(image, side)
        return et_runner.timed(process, path, [image, np.ascontiguousarray(inputs["query"], dtype=np.float32)], method)

    label = lambda n: f"executorch {n} (C++ runner, 1 thread)"  # noqa: E731
    return [BenchCase(label(name), run, 1, self_timed=True, warm_call=False, max_batch=max_batch,
                      compare_to=label("fp32") if name != "fp32" else None, speed_note=note)]


class PoolWorker:
    """A .pte run in a child process whose XNNPACK pool was sized once, at start, before any program
    was loaded (and its OpenMP pool by OMP_NUM_THREADS): the only safe way to time ExecuTorch on a
    pool other than this process's (above).

    run(inputs) hands the worker the inputs once per distinct input (a pipe, untimed), then asks
    for an untimed call and a timed one back to back (steady state, as the other cases); it returns
    the milliseconds the worker measured around the timed call (the same runner as in-process:
    tensors from numpy, execute, outputs copied out)."""

    def __init__(self, path: Path, max_batch: int, threads: int):
        import atexit
        import subprocess
        import sys

        root = str(Path(__file__).resolve().parents[1])
        to_child, self._send = os.pipe()
        self._recv, from_child = os.pipe()
        code = ("import sys; sys.path.insert(0, %r); from arrcoc_edge.targets.executorch import _serve_pool_worker; "
                "_serve_pool_worker(%r, %d, %d, %d, %d)" % (root, str(path), max_batch, threads, to_child, from_child))
        # The kernels outside XNNPACK (libexecutorch_kernels_optimized) parallelise with OpenMP, a
        # second pool that _unsafe_reset_threadpool does not size: OMP_NUM_THREADS does. Without it
        # a "1-thread" run used 2 OpenMP threads, and on this 2-core host a batch of 8 took 16.5 ms
        # instead of 1.8 ms (the windows alone, measured): the threads contended with the pool.
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        # the child's own output (cpuinfo, XNNPACK, import warnings) goes where this process's does
        self._proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(to_child, from_child), env=env)
        os.close(to_child)
        os.close(from_child)
        self._w, self._r = os.fdopen(self._send, "wb"), os.fdopen(self._recv, "rb")
        atexit.register(self.close)
        self._key = None
        self.threads = self._ask(("threads",))

    def _ask(self, message):
        import pickle

        pickle.dump(message, self._w, protocol=pickle.HIGHEST_PROTOCOL)
        self._w.flush()
        try:
            status, value = pickle.load(self._r)
        except EOFError:
            raise ExportError(f"the ExecuTorch worker process stopped (exit {self._proc.wait()})",
                              "run the bench with --verbose and read OUT/bench.log") from None
        if status != "ok":
            raise ExportError(f"the ExecuTorch worker failed: {value}", "read OUT/bench.log")
        return value

    def run(self, inputs: dict) -> float:
        key = (id(inputs["image"]), inputs["image"].shape, id(inputs["query"]))
        if key != self._key:
            self._ask(("inputs", {k: np.ascontiguousarray(v) for k, v in inputs.items()}))
            self._key = key
        return self._ask(("run",))

    def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                self._w.close()
            try:
                self._proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - a stuck worker must not hang the exit
                self._proc.kill()


def _serve_pool_worker(path: str, max_batch: int, threads: int, rfd: int, wfd: int) -> None:
    """The worker's loop (PoolWorker): size the pool, load the program, answer until the pipe closes."""
    import pickle
    import time

    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(threads)
    runner = pte_runner(Path(path), max_batch)
    r, w = os.fdopen(rfd, "rb"), os.fdopen(wfd, "wb")
    inputs = None
    while True:
        try:
            message = pickle.load(r)
        except EOFError:
            return
        try:
            if message[0] == "threads":
                reply = portable_lib._threadpool_get_thread_count()
            elif message[0] == "inputs":
                inputs, reply = message[1], None
            else:
                runner.run(inputs)
                start = time.perf_counter()
                runner.run(inputs)
                reply = (time.perf_counter() - start) * 1000.0
            pickle.dump(("ok", reply), w)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
            pickle.dump(("error", f"{type(exc).__name__}: {exc}"), w)
        w.flush()


def _method(path: Path, name: str = "forward"):
    return _program(path).load_method(name)


def _program(path: Path | bytes):
    """path: a .pte file, or its checked bytes. The runtime does NOT copy a buffer: it reads the
    caller's bytes for as long as the program lives, so pte_runner keeps them referenced (a runner
    whose bytes were collected segfaulted on its first call, measured)."""
    from executorch.runtime import Runtime

    try:
        return Runtime.get().load_program(path if isinstance(path, bytes) else str(path))
    except Exception as exc:  # the runtime raises RuntimeError / ValueError with a C++ status code
        raise ExportError(f"{'the checked .pte' if isinstance(path, bytes) else path.name} does not load in the ExecuTorch runtime ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:160] if str(exc) else 'no message'})",
                          "rebuild it with `invoke build --target executorch`") from exc


def check_method_meta(path: Path, cfg) -> list[str]:
    """Input/output count, dtypes and fixed dims of the .pte's forward vs the contract."""
    meta = _method(path).metadata
    if meta.num_inputs() != 2 or meta.num_outputs() != 3:
        raise ExportError(f"{path.name}: forward has {meta.num_inputs()} inputs / {meta.num_outputs()} outputs, expected 2 / 3",
                          "the exported program must take (image, query) and return (relevance, topk_indices, weights)")
    from arrcoc_edge.relevance.signature import MAX_SIDE

    # Dynamic dimensions show their upper bounds: the photo's height and width up to MAX_SIDE.
    want = {"image": [MAX_SIDE, MAX_SIDE, 3], "query": [cfg.query_dim],
            "relevance": [cfg.num_patches], "topk_indices": [cfg.top_k], "weights": [3]}
    infos = [meta.input_tensor_meta(i) for i in range(2)] + [meta.output_tensor_meta(i) for i in range(3)]
    problems = []
    for name, info in zip(want, infos):
        dtype = _SCALAR_TYPES.get(int(info.dtype()), f"ScalarType {info.dtype()}")
        if dtype != _EXPECTED_DTYPES[name] or list(info.sizes())[1:] != want[name]:
            problems.append(f"{name} is {dtype}{list(info.sizes())}")
    lines = ["I/O contract (MethodMeta): 2 inputs, 3 outputs, dtypes and dims match (image uint8 up to "
             f"{MAX_SIDE} x {MAX_SIDE}, topk int64)"]
    program = _program(path)
    if SQUARE_METHOD in program.method_names:
        square = program.load_method(SQUARE_METHOD).metadata
        image = square.input_tensor_meta(0)
        want_image = [cfg.image_size, cfg.image_size, 3]
        if square.num_inputs() != 2 or square.num_outputs() != 3 or list(image.sizes())[1:] != want_image \
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
               isa: str | None = None) -> Runner:
    """`path` in the project's C++ runner (`process`: this host's or an emulated CPU model's), every
    batch of a split in one request stream; the 16G method for photos of that size, as pte_runner."""
    runner = Runner(run=lambda inputs: run_many([inputs])[0], runtime="", max_batch=max_batch)
    runner.facts = {"cpu": et_runner.CPUS[isa][1]} if isa else {}

    def run_many(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
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
