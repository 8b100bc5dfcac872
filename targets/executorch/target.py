"""ExecuTorch: lowering the exported program to XNNPACK-delegated .pte files (FP32 and dynamic
int8), and the target that builds, gates and publishes them (runtime.py runs them, bench.py times them).

Both variants keep the exported program's dynamic batch; ExecuTorch plans memory for an
upper bound, which is read back from the .pte's MethodMeta and used as the Runner's max batch
(and recorded in the manifest as info.max_batch).

Pitfalls measured here (see TOOLCHAIN.md, Mobile):
  * lowering mutates the ExportedProgram: every lowering starts from `ctx.program.load()`;
  * static int8 PT2E ruins the ranking; DYNAMIC int8 (weights int8 per channel, activations
    quantised at run time) on the learned nn.Linear layers keeps top-K (quantising every conv
    would take the fixed texture front end to 8 bits too).
"""
from __future__ import annotations

import copy
from pathlib import Path

from arrcoc_edge.errors import ExportError
from arrcoc_edge.stages.parity import LOSSLESS, LOSSY, Gate
from arrcoc_edge.stages.target import AheadJob, BuildContext, Runner, Target, Variant, expect_file

from arrcoc_edge.targets.executorch.bench import PoolWorker, cpp_bench_case
from arrcoc_edge.targets.executorch.runtime import SQUARE_METHOD, _program, check_method_meta, cpp_runner, pte_runner
from arrcoc_edge.targets.shared import arm64, et_runner
from arrcoc_edge.targets.shared.onnx_common import param_bytes

FP32_FILE = "model_fp32.pte"
INT8_FILE = "model_int8.pte"


def _budgets(ctx: BuildContext) -> tuple[int, int]:
    weights = param_bytes(ctx.checkpoint.model)
    # fp32: the weights plus room for the XNNPACK graph and the portable-op program;
    # int8: a quarter of the weights plus the same fixed room (scales, graph, program).
    return int(weights * 1.5) + 256 * 1024, int(weights * 0.5) + 256 * 1024


def _gate(base: Gate, budget: int) -> Gate:
    return Gate({**base.maxima, "size_bytes": budget}, base.minima, base.tie_tolerance)


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


def general_program(model, log):
    """The checkpoint's model exported without the torch.cond fast path, its general resize reading
    whole rows (see GENERAL_PROGRAM and model.PhotoWindows.resized_by_rows)."""
    from arrcoc_edge.stages.export import export_form

    log("[executorch] exporting the program without its 16G fast path (no control flow), reading rows")
    return export_form(model, fast_path=False, general="rows")


INT8_SPEED_NOTE = ("dynamic int8 quantises the activations of every int8 linear layer at run time, and the "
                   "layers it quantises (the balancer) are a small part of the work: the texture front end and "
                   "the reduced participatory head stay float")


def square_program(model, log):
    """The checkpoint's model exported for 16G x 16G photos only (SQUARE_METHOD)."""
    from arrcoc_edge.stages.export import export_square

    log(f"[executorch] exporting the {SQUARE_METHOD} method (16G x 16G photos, no resize)")
    return export_square(model)


def quantize_dynamic_int8(program, rows: dict, model_config, square: bool = False):
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
    # Dynamic quantisation needs no calibration statistics; one pass on the calibration split's
    # first rows (calibration_rows: never the held-out split) runs the observers once, as PT2E expects.
    image, query = torch.from_numpy(rows["image"]), torch.from_numpy(rows["query"])
    if square:
        image = image[:, : model_config.image_size, : model_config.image_size].contiguous()
    with torch.no_grad():
        prepared(image, query)
    converted = convert_pt2e(prepared)
    if square:
        from torch.export import Dim

        batch = Dim("batch", min=1, max=MAX_BATCH)
        return torch.export.export(converted, (image[:2], query[:2]), dynamic_shapes={"image": {0: batch}, "query": {0: batch}},
                                   strict=False)
    return torch.export.export(converted, example_inputs(model_config), dynamic_shapes=dynamic_shapes(), strict=False)


LOWERING_TOOLS = ("torch", "executorch", "torchao")
CALIBRATION_ROWS = 4  # quantize_dynamic_int8's one observer pass


def calibration_rows(ctx: BuildContext) -> dict:
    """The calibration rows the int8 lowering runs its observers on."""
    return ctx.golden.calibration.inputs(0, CALIBRATION_ROWS)


def rows_digest(rows: dict) -> str:
    """sha256 of calibration rows, for the conversion's key."""
    import hashlib

    return hashlib.sha256(b"".join(rows[k].tobytes() for k in sorted(rows))).hexdigest()


def convert_relevance(model, config, rows: dict, program_key: str, dest: Path, log) -> dict:
    """The FP32 and int8 .pte files of the checkpoint's model in `dest` (lower_both); returns their
    manifest info. The same program, code and calibration rows lower to the same .pte files: reused
    across builds, and made ahead of the stage (convert_ahead); the gates still run on them."""
    from arrcoc_edge.stages.conversion_cache import convert_cached

    inputs = {"program": program_key, "calibration": rows_digest(rows)}
    return convert_cached("executorch-relevance", inputs, LOWERING_TOOLS,
                          lambda folder: lower_both(model, config, rows, folder, log), dest, log, keep=8)


def convert_ahead(dest: Path, log, checkpoint: str, grid: int | None, top_k: int | None, program_key: str,
                  calibration: str) -> dict:
    """The AheadJob of ExecutorchTarget.ahead: convert_relevance in the background process
    (building/ahead.py), from the checkpoint file and the calibration rows saved by ahead()."""
    import numpy as np

    from arrcoc_edge.relevance.checkpoint import load_checkpoint

    ckpt = load_checkpoint(Path(checkpoint), grid=grid, top_k=top_k)
    with np.load(calibration, allow_pickle=False) as data:
        rows = {k: data[k] for k in data.files}
    return convert_relevance(ckpt.model, ckpt.config, rows, program_key, dest, log)


def lower_both(model, config, rows: dict, folder: Path, log) -> dict:
    """FP32 and dynamic int8 .pte files of the checkpoint's model in `folder`; returns their manifest info."""
    # each program exported once (3 and 2.6 s here) for both variants: the lowering changes the
    # program it is given, so FP32 lowers copies and int8 quantises the originals
    general, square = general_program(model, log), square_program(model, log)
    log("[executorch] lowering FP32 to XNNPACK")
    fp32_info = lower(copy.deepcopy(general), folder / FP32_FILE, copy.deepcopy(square))
    fp32_info["program"] = GENERAL_PROGRAM
    log("[executorch] quantising (dynamic int8) and lowering")
    int8_info = lower(quantize_dynamic_int8(general, rows, config), folder / INT8_FILE,
                      quantize_dynamic_int8(square, rows, config, square=True))
    int8_info["quantization"] = ("PT2E dynamic int8, XNNPACKQuantizer symmetric per-channel weights "
                                 "(the balancer's nn.Linear layers), activations quantised at run time")
    int8_info["participatory_form"] = model.participatory_scorer.form
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
        fp32_budget, int8_budget = _budgets(ctx)
        infos = convert_relevance(ctx.checkpoint.model, ctx.config, calibration_rows(ctx), ctx.program.cache_key,
                                  ctx.staging, ctx.log)
        return [
            Variant("fp32", [ctx.staging / FP32_FILE], _gate(LOSSLESS, fp32_budget), fp32_budget,
                    primary=True, info=infos["fp32"]),
            Variant("int8", [ctx.staging / INT8_FILE], _gate(LOSSY, int8_budget), int8_budget, info=infos["int8"]),
        ]

    def ahead(self, ctx: BuildContext) -> list[AheadJob]:
        """The lowering (55 s of a cold build here), made while the stages before this one build."""
        import numpy as np

        rows = ctx.staging / f"{self.name}-calibration-rows.npz"
        np.savez(rows, **calibration_rows(ctx))
        return [AheadJob("executorch-relevance", f"{__name__}:convert_ahead",
                         {"checkpoint": str(ctx.checkpoint.path), "grid": ctx.options.get("grid"),
                          "top_k": ctx.options.get("top_k"), "program_key": ctx.program.cache_key,
                          "calibration": str(rows)}, seconds=55)]

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
        # (and PCs run it on whatever x86 level they have: the x86-64 levels, the same way)
        side = ctx.config.image_size if SQUARE_METHOD in variant.info.get("methods", {}) else None
        process = lambda isa: ctx.kept(f"et-runner {isa}", lambda: et_runner.RunnerProcess(isa))  # noqa: E731
        return {isa: (lambda isa=isa: cpp_runner(variant.files[0], variant.info["max_batch"], side, process(isa), isa,
                                                       cache_log=ctx.log))
                for isa in arm64.emulated(et_runner.CPUS)}

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


