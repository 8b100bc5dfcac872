"""Helpers shared by the targets that produce or run ONNX models (onnx, onnx-int8, web, tensorrt)."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError
from arrcoc_edge.relevance.signature import EVIDENCE_NAMES, INPUT_NAMES, OUTPUT_NAMES, ModelConfig
from arrcoc_edge.stages.target import Runner

_ONNX_DTYPES = {"image": "tensor(uint8)", "query": "tensor(float)", "relevance": "tensor(float)",
                "topk_indices": "tensor(int64)", "weights": "tensor(float)",
                "evidence": "tensor(float)"}


def contract_shapes(cfg: ModelConfig) -> dict[str, list]:
    """The I/O contract; None marks a dynamic dimension (batch; the photo's height and width)."""
    return {
        "image": [None, None, None, 3],
        "query": [None, cfg.query_dim],
        "relevance": [None, cfg.num_patches],
        "topk_indices": [None, cfg.top_k],
        "weights": [None, 3],
        "evidence": [None, len(EVIDENCE_NAMES)],
    }


def strip_metadata(model) -> None:
    """Drop per-node metadata (stack traces with local paths) for smaller, reproducible files, and
    the intermediate shape annotations (value_info: every runtime infers them again at load; 7.5 KB
    of a 420 KB model, 4.3 KB of its .ort). Graph inputs and outputs keep their types."""
    def clean(graph):
        for node in graph.node:
            del node.metadata_props[:]
            node.doc_string = ""
            for attr in node.attribute:
                if attr.g is not None and attr.type == attr.GRAPH:
                    clean(attr.g)
                for g in attr.graphs:
                    clean(g)
        for value in list(graph.input) + list(graph.output):
            del value.metadata_props[:]
        del graph.value_info[:]
        del graph.metadata_props[:]
        graph.doc_string = ""

    clean(model.graph)
    for fn in model.functions:
        for node in fn.node:
            del node.metadata_props[:]
    del model.metadata_props[:]
    model.doc_string = ""


@contextlib.contextmanager
def quiet_torch_onnx():
    """The exporter's progress lines, torchvision notices and deprecation warnings are noise here."""
    import logging
    import warnings

    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def export_onnx(program, cfg: ModelConfig, path: Path, log) -> Path:
    """ExportedProgram -> single-file ONNX with the contract's names and a dynamic batch."""
    import onnx
    import torch
    from torch.export import Dim

    from arrcoc_edge.stages.export import dynamic_shapes, example_inputs

    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), quiet_torch_onnx():
            torch.onnx.export(
                program,
                example_inputs(cfg),
                str(path),
                input_names=list(INPUT_NAMES),
                output_names=list(OUTPUT_NAMES),
                dynamic_shapes=dynamic_shapes(),
                external_data=False,
                # onnxscript's optimiser (0.7.2) folds `x + c` to `x` when c is allclose to 0,
                # deleting every 1e-8 epsilon: flat images then give NaN (0/0 in min-max) and
                # the Sobel magnitude shifts by 2e-3. onnxruntime optimises at load time anyway.
                optimize=False,
            )
    except Exception as exc:
        raise ExportError(
            f"torch.onnx.export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
            "run with --verbose; check the ONNX exporter supports every op of the model",
        ) from exc
    model = onnx.load(str(path))
    fold_shape_constants(model)
    strip_metadata(model)
    onnx.save(model, str(path))
    check_onnx(path)
    return path


ONNX_TOOLS = ("torch", "onnx", "onnxscript")  # what export_onnx's output depends on


def export_onnx_cached(make_program, inputs: dict[str, str], cfg: ModelConfig, path: Path, log) -> Path:
    """export_onnx(make_program(), ...) to `path`, or the file of an identical earlier export from
    the conversion cache (pipeline/stages/conversion_cache.py): `inputs` names the program (its
    export key, and the form when it is not the exported program's). The exporter takes 7-10 s of
    an onnx build; every check of the file still runs on the copy."""
    from arrcoc_edge.stages.conversion_cache import convert_cached
    from arrcoc_edge.stages.target import expect_file

    def convert(folder: Path) -> dict:
        export_onnx(make_program(), cfg, folder / path.name, log)
        return {}

    path.parent.mkdir(parents=True, exist_ok=True)
    convert_cached("onnx-fp32", {**inputs, "file": path.name}, ONNX_TOOLS, convert, path.parent, log, keep=8)
    return expect_file(path, "exported ONNX model")


def fold_shape_constants(model) -> None:
    """Constant folding only (onnxscript's fold_constants, not its rewriter): the exporter spells
    every dynamic-batch reshape as Shape/Gather/Concat/Cast chains, ~120 of ~320 nodes, which every
    runtime re-derives at load and which weigh on the INT8 and ORT-format files' size. Folding
    evaluates what is constant and nothing else: outputs are bit-identical with onnxruntime's
    optimisations off, and the 1e-8 epsilons stay (the rewriter is what deleted them)."""
    from onnxscript import optimizer

    optimizer.fold_constants(model)
    optimizer.remove_unused_nodes(model)


def check_onnx(path: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:
        raise ExportError(f"{path.name} fails onnx.checker: {str(exc).splitlines()[0][:200]}",
                          "the exported graph is invalid: rerun with --verbose") from exc


def check_io_contract(session, cfg: ModelConfig) -> list[str]:
    """Names, dtypes and shapes of an onnxruntime session vs the contract; raises on mismatch."""
    want = contract_shapes(cfg)
    have = {a.name: a for a in [*session.get_inputs(), *session.get_outputs()]}
    problems = []
    for name, shape in want.items():
        arg = have.get(name)
        if arg is None:
            problems.append(f"missing '{name}'")
            continue
        if arg.type != _ONNX_DTYPES[name]:
            problems.append(f"{name} is {arg.type}, expected {_ONNX_DTYPES[name]}")
        if not _shape_matches(list(arg.shape), shape):
            problems.append(f"{name} has shape {arg.shape}, expected {_shape_text(shape)}")
    if problems:
        raise ExportError(f"I/O contract broken: {'; '.join(problems)}", "fix the export so names and shapes match the contract")
    return ["I/O contract: names, dtypes, dynamic batch / photo height / width and fixed dims match"]


def _shape_matches(have: list, want: list) -> bool:
    """A None in `want` must be dynamic (a name or unknown) in `have`; an int must be that int."""
    return len(have) == len(want) and all(
        (not isinstance(h, int)) if w is None else h == w for h, w in zip(have, want))


def _shape_text(shape: list) -> str:
    return "[" + ", ".join("dynamic" if d is None else str(d) for d in shape) + "]"


# ARRCOC_ORT_SPINNING=0: no session spins (as spinning=False), for a host whose cores other work
# shares. onnxruntime's pool busy-waits between calls by default, burning a core that another
# process could use: two `build --target onnx,onnx-int8,text-encoder` at once on 2 cores took a
# median 62.4 s with it and 54.1 s without (and libgomp's OMP_WAIT_POLICY=PASSIVE), one alone 45 s
# either way. scripts/test.sh sets both; docs/speed.md says so.
SPINNING_VARIABLE = "ARRCOC_ORT_SPINNING"


def ort_session(path: Path | bytes, level: str = "ORT_ENABLE_ALL", threads: int = 0, spinning: bool = True):
    """A model file, or a serialized model's bytes. spinning=False: the intra-op pool sleeps between
    calls instead of busy-waiting, for runs that share the cores with other runtimes (`invoke bench`),
    and for every session where ARRCOC_ORT_SPINNING=0."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    if not spinning or os.environ.get(SPINNING_VARIABLE) == "0":
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    model = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def ort_runner(path: Path | bytes, level: str = "ORT_ENABLE_ALL", threads: int = 0) -> Runner:
    """path: a model file or its checked bytes; threads: intra-op threads, 0 for onnxruntime's default (one per core)."""
    import onnxruntime as ort

    session = ort_session(path, level, threads=threads)
    # the contract's outputs the file has: one published before `evidence` existed runs without it
    names = [n for n in OUTPUT_NAMES if n in {o.name for o in session.get_outputs()}]

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = session.run(names, {k: np.ascontiguousarray(v) for k, v in inputs.items()})
        return dict(zip(names, outs))

    pool = f", {threads} thread{'s' if threads > 1 else ''}" if threads else ""
    return Runner(run, f"onnxruntime {ort.__version__} (CPUExecutionProvider, {level}{pool})", io=session_io(session))


def session_io(session) -> dict[str, list]:
    """The model file's own inputs and outputs, name -> dims (None for a dynamic one)."""
    return {a.name: [d if isinstance(d, int) else None for d in a.shape]
            for a in [*session.get_inputs(), *session.get_outputs()]}


def param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def strip_metadata_file(path: Path) -> None:
    """strip_metadata on a file in place (quantised models carry the same stack traces)."""
    import onnx

    model = onnx.load(str(path))
    strip_metadata(model)
    onnx.save(model, str(path))


def ort_bench_cases(out: Path, entry: dict, variants: tuple[str, ...], baselines: dict[str, str] | None = None) -> list:
    """Benchmark cases for published ONNX/.ort variants of a manifest entry: one per variant and
    thread count, each a callable taking the input dict (the harness times them side by side).
    baselines: variant -> the FP32 variant it is compared with (its info's speed_note explains
    why it can be slower)."""
    from arrcoc_edge.stages.target import BenchCase

    label = lambda name, threads: f"onnxruntime {name}" + (" (1 thread)" if threads == 1 else " (default threads)")  # noqa: E731
    cases = []
    for name in variants:
        v = entry.get("variants", {}).get(name)
        if not v or v.get("status") == "failed":
            continue
        path = out / v["files"][0]
        base = (baselines or {}).get(name)
        for threads in (1, 0):
            # A spinning pool keeps both cores busy after each call and slows whichever runtime
            # runs next (measured: the Lite Interpreter on 2 threads 4.6 ms after ORT vs 1.5 ms).
            session = ort_session(path, threads=threads, spinning=False)
            run = lambda inputs, s=session: s.run(None, inputs)
            cases.append(BenchCase(label(name, threads), run, threads or None,
                                   compare_to=label(base, threads) if base else None,
                                   speed_note=(v.get("info") or {}).get("speed_note")))
    return cases
