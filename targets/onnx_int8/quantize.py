"""onnx-int8's choice by measurement: calibration data, QDQ quantisation of the candidates (which
layers, which scheme), their parity on the held-out set, and the rule that picks one on any host.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError, InputError
from arrcoc_edge.stages.golden import (
    MIN_CALIBRATION,
    QUERY_SEED,
    GoldenSplit,
    load_photo,
    reference_outputs,
    seeded_queries,
)
from arrcoc_edge.stages.parity import LOSSY, Gate, kb, parity_metrics, size_rule
from arrcoc_edge.stages.target import BuildContext
from arrcoc_edge.targets.onnx_int8 import ort_mobile
from arrcoc_edge.targets.shared import fake_quant, onnx_common

# INT8 model bytes vs the FP32 ONNX artifact (both metadata-stripped): 2.5x smaller. At 35% the
# rule rejected the most faithful candidate (learned-float-gram, 35.8%) for 3.5 KB and published one
# whose top-K min on unseen photos and sentences fell to 0.922; within 40% it is published (0.969).
SIZE_RATIO = 0.40
CALIBRATION_METHOD = "MinMax"
CALIBRATION_BATCH = 4


@dataclass(frozen=True)
class Candidate:
    """One choice of what to quantise: op types, optionally only nodes with learned weights."""

    name: str
    op_types: tuple[str, ...]
    learned_only: bool
    # Op types whose OUTPUT stays float (int8 inputs and weights, float result): onnxruntime's
    # OpTypesToExcludeOutputQuantization. The 64->D projection feeds a cosine over D channels,
    # and one int8 scale for all D outputs is what costs the trained checkpoint its ranking.
    float_outputs: tuple[str, ...] = ()
    # Op types whose learned nodes that read the query (the query's projection) compute in float
    # on int8 weights (one scale per output channel, DequantizeLinear on the weight only): no
    # activation of theirs is quantised. See WEIGHT_ONLY_WHY.
    weight_only: tuple[str, ...] = ()
    # Learned weights whose nodes stay wholly float (not quantised at all)
    float_weights: tuple[str, ...] = ()

    def describe(self) -> dict:
        return {"name": self.name, "op_types": list(self.op_types), "learned_only": self.learned_only,
                "float_outputs": list(self.float_outputs), "weight_only": list(self.weight_only),
                "float_weights": list(self.float_weights)}


# From most to least quantised; the selection measures all of them and keeps the best passing one.
# The learned candidates include MatMul: the reduced participatory head reads W2 in a MatMul
# (W2^T q, model.py); quantize_for() makes that weight an initializer the quantiser can see.
CANDIDATES = (
    Candidate("all-ops", (), False),  # () = every op type the quantiser supports
    Candidate("conv-gemm-relu", ("Conv", "Gemm", "Relu"), False),
    Candidate("learned-conv-gemm-relu", ("Conv", "Gemm", "MatMul", "Relu"), True),
    Candidate("learned-conv-gemm-relu-float-conv-out", ("Conv", "Gemm", "MatMul", "Relu"), True, ("Conv",)),
    Candidate("learned-gemm", ("Gemm", "MatMul"), True),
    Candidate("learned-weight-only-query-projection", ("Conv", "Gemm", "MatMul", "Relu"), True, weight_only=("MatMul",)),
    # TensorRT's symmetric (zero-point 0) re-quantisation: the Gram reads a ReLU output, which
    # symmetric int8 gives half its codes; on calibration sentences every symmetric candidate above
    # had top-K min 0.891, this one 0.984 (issue 41). Over onnx-int8's size rule (+12 KB of float Gram).
    Candidate("learned-float-gram", ("Conv", "Gemm", "MatMul", "Relu"), True, weight_only=("MatMul",),
              float_weights=("participatory_scorer.gram",)),
)


WEIGHT_ONLY_WHY = (
    "issue 41, measured on held-out sentences (MiniLM) with the trained checkpoint: the reduced head's "
    "query projection (MatMul q^.W2, W2 [D,64]) is where sentence embeddings lose the ranking. With its "
    "input and output in int8 (one scale each for ranges that sentence embeddings stretch 3.6x beyond "
    "seeded vectors') held-out sentences gave top-K min 0.922 even calibrated on sentences; its output in "
    "float 0.953; the whole node in float 0.969 but 50% of FP32's size (W2 as float); float compute on "
    "int8 per-channel weights 0.969 at 33%. Every other learned node quantised alone moved nothing")


def int8_gate(fp32_bytes: int) -> Gate:
    return Gate({**LOSSY.maxima, "size_bytes": int(fp32_bytes * SIZE_RATIO)}, LOSSY.minima, LOSSY.tie_tolerance)


# ---------------------------------------------------------------- calibration data


def calibration_split(ctx: BuildContext) -> tuple[GoldenSplit, str]:
    """The calibration samples (with eager reference outputs) and where they came from."""
    folder = ctx.options.get("calibration_dir")
    if not folder:
        return ctx.golden.calibration, "golden calibration split (photos disjoint from held-out)"
    split = with_sentences(user_calibration_split(Path(folder), ctx.config), ctx.golden.calibration)
    split.expected = reference_outputs(ctx.checkpoint.model, split)
    return split, f"user folder {folder}" + (" with the golden calibration sentences" if "sentences" in split.subsets else "")


def with_sentences(split: GoldenSplit, golden: GoldenSplit) -> GoldenSplit:
    """The user's photos again, each with the next of the golden calibration split's sentence
    queries (the user's --calibration-queries when given): sentence embeddings are what the
    calibrated ranges must hold. Unchanged when the golden set has no sentences."""
    rows = golden.subsets.get("sentences")
    if not rows:
        return split
    n = max(len(split), len(rows))
    pairs = sorted((i % len(split), rows[i % len(rows)]) for i in range(n))  # same photo stays together
    return GoldenSplit(split.names + [f"sentence:{split.names[i]}#{k}" for k, (i, _) in enumerate(pairs)],
                       split.images + [split.images[i] for i, _ in pairs],
                       np.concatenate([split.queries, golden.queries[[r for _, r in pairs]]]),
                       texts=[None] * len(split) + [golden.texts[r] for _, r in pairs])


def user_calibration_split(folder: Path, cfg) -> GoldenSplit:
    """Every file in the folder must decode as an image: a stray file is an error, not skipped."""
    if not folder.is_dir():
        raise InputError(f"calibration folder {folder} does not exist", "pass --calibration DIR with a folder of photos")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if len(files) < MIN_CALIBRATION:
        raise InputError(
            f"calibration folder {folder} has {len(files)} image(s), fewer than {MIN_CALIBRATION}",
            f"add at least {MIN_CALIBRATION} representative photos (never the held-out ones)",
        )
    images = [load_photo(p) for p in files]  # whole photos, as the artifact takes them
    # Seeded like the golden queries, from a seed of their own so they never repeat the held-out ones.
    queries = seeded_queries(len(files), cfg.query_dim, seed=QUERY_SEED + 1)
    return GoldenSplit([p.name for p in files], images, queries)


class _Reader:
    """onnxruntime CalibrationDataReader over a split, in small batches."""

    def __init__(self, split: GoldenSplit):
        self.batches = [split.inputs(a, b) for a, b in split.runs(CALIBRATION_BATCH, first_alone=False)]
        self.pos = 0

    def get_next(self):
        if self.pos >= len(self.batches):
            return None
        self.pos += 1
        return self.batches[self.pos - 1]

    def rewind(self):
        self.pos = 0


def make_reader(split: GoldenSplit):
    from onnxruntime.quantization import CalibrationDataReader

    # subclass at call time: onnxruntime.quantization is imported only when this target runs
    return type("SplitReader", (_Reader, CalibrationDataReader), {})(split)


# ---------------------------------------------------------------- quantisation


def learned_weight_names(ctx: BuildContext) -> set[str]:
    """Parameters of the checkpoint and the constants computed from them (the reduced head's
    W2^T W2, which its MatMul reads like a weight): learned values. Buffers such as the Sobel
    kernels are fixed. Quantising the Gram lets the reduced form fit the size rule at D=384
    (measured: float Gram 164 KB > 151 KB budget; int8 Gram top-K 0.991 on calibration)."""
    model = ctx.checkpoint.model
    derived = {f"participatory_scorer.{name}" for name in model.participatory_scorer.DERIVED}
    return {name for name, _ in model.named_parameters()} | derived


def nodes_for(candidate: Candidate, model, learned: set[str]) -> list[str] | None:
    """Node names to quantise for a candidate; None = every node of the op types."""
    if not candidate.learned_only:
        return None
    weighted = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul") and any(i in learned for i in n.input)]
    chosen = {n.name for n in weighted if n.op_type in candidate.op_types
              and not any(i in candidate.float_weights for i in n.input)}
    producers = {o: n.name for n in model.graph.node if n.name in chosen for o in n.output}
    # an activation right after a chosen layer is quantised with it (QDQ fuses Conv+Relu)
    chosen |= {n.name for n in model.graph.node if n.op_type in candidate.op_types and n.op_type == "Relu"
               and any(i in producers for i in n.input)}
    return sorted(chosen)


def weight_only_nodes(candidate: Candidate, model, learned: set[str]) -> set[str]:
    """The learned nodes of the candidate's weight_only op types that read the query, directly or
    through other nodes (the graph input `query`): the query's projection."""
    if not candidate.weight_only:
        return set()
    reached, found = {"query"}, set()
    for node in model.graph.node:  # ONNX nodes are stored in topological order
        if any(i in reached for i in node.input):
            reached.update(node.output)
            if node.op_type in candidate.weight_only and any(i in learned for i in node.input):
                found.add(node.name)
    return found


def int8_weights(path: Path, nodes: set[str]) -> None:
    """Rewrite each MatMul(x, W) of `nodes` (x 2-D, W a float initializer [K, N]) as
    Transpose(MatMul(DequantizeLinear(W^T int8), Transpose(x))): float compute on int8 weights,
    symmetric, one scale per output channel. The weight comes first on purpose: onnxruntime's
    optimiser fuses DequantizeLinear -> MatMul's second input into MatMulNBits with a scale per 32
    weights, 3.8 KB more in the .ort than the int8 weight itself, which put the .ort 672 B over its
    budget; as the first input it is left alone (measured with the ORT converter at level extended)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    inits = {t.name: t for t in model.graph.initializer}
    inferred = onnx.shape_inference.infer_shapes(model).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in [*inferred.value_info, *inferred.input]}
    for node in [n for n in model.graph.node if n.name in nodes]:
        x, name = node.input
        if node.op_type != "MatMul" or name not in inits or ranks.get(x) != 2:
            raise ExportError(f"weight-only int8 needs MatMul(2-D input, weight); {node.name} is {node.op_type}"
                              f" on a {ranks.get(x)}-D input", "leave weight_only out of this candidate")
        w = numpy_helper.to_array(inits[name]).astype(np.float32).T  # [N, K]: one row per output channel
        scale = np.abs(w).max(axis=1) / 127.0
        scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
        q = np.clip(np.round(w / scale[:, None]), -127, 127).astype(np.int8)
        model.graph.initializer.remove(inits.pop(name))
        model.graph.initializer.extend([numpy_helper.from_array(q, f"{name}_int8_t"), numpy_helper.from_array(scale, f"{name}_scale"),
                                        numpy_helper.from_array(np.zeros(scale.shape, np.int8), f"{name}_zero_point")])
        at, out = model.graph.node[:].index(node), node.output[0]
        model.graph.node.remove(node)
        for k, new in enumerate([
            helper.make_node("DequantizeLinear", [f"{name}_int8_t", f"{name}_scale", f"{name}_zero_point"], [f"{name}_t"],
                             name=f"{node.name}_weight", axis=0),
            helper.make_node("Transpose", [x], [f"{x}_t"], name=f"{node.name}_input_t", perm=[1, 0]),
            helper.make_node("MatMul", [f"{name}_t", f"{x}_t"], [f"{out}_t"], name=node.name),
            helper.make_node("Transpose", [f"{out}_t"], [out], name=f"{node.name}_output_t", perm=[1, 0]),
        ]):
            model.graph.node.insert(at + k, new)
    onnx.save(model, str(path))


def quantize(src: Path, dst: Path, split: GoldenSplit, candidate: Candidate, learned: set[str], a16: bool,
             symmetric: bool = False) -> dict:
    """Quantise src into dst for one candidate; returns what was quantised (op types, node count).
    symmetric: zero-point-0 activations too (what TensorRT's INT8 path accepts)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    model = onnx.load(str(src))
    nodes = nodes_for(candidate, model, learned)
    if nodes == []:
        raise ExportError(f"candidate {candidate.name} selects no node", "check the model has learned Conv/Gemm layers")
    weight_only = weight_only_nodes(candidate, model, learned)
    nodes = nodes if nodes is None else [n for n in nodes if n not in weight_only]
    with _quiet_quantizer():
        quantize_static(
            str(src), str(dst), make_reader(split),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(candidate.op_types) or None,
            nodes_to_quantize=nodes,
            per_channel=False,
            activation_type=QuantType.QUInt16 if a16 else QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=getattr(CalibrationMethod, CALIBRATION_METHOD),
            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True,
                           "OpTypesToExcludeOutputQuantization": list(candidate.float_outputs)},
        )
    if weight_only:
        int8_weights(dst, weight_only)
    onnx_common.strip_metadata_file(dst)  # stripped like the FP32 file, so the size ratio is fair
    return {**quantized_summary(model, onnx.load(str(dst))), "weight_only_nodes": sorted(weight_only)}


@contextlib.contextmanager
def _quiet_quantizer():
    """The quantiser logs advice on the root logger (pre-processing hints) for every candidate."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def quantized_summary(fp32, quantized) -> dict:
    """Nodes that now compute in the quantised domain: they read a dequantised tensor and their
    output is quantised again (QDQ around them). Their op types and count go in the manifest."""
    dq_out = {o for n in quantized.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    q_in = {i for n in quantized.graph.node if n.op_type == "QuantizeLinear" for i in n.input}
    hit = [n for n in quantized.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
           and any(i in dq_out for i in n.input) and any(o in q_in for o in n.output)]
    counts: dict[str, int] = {}
    for n in hit:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return {
        "quantized_op_types": dict(sorted(counts.items())),
        "quantized_node_count": len(hit),
        "qdq_pairs": sum(1 for n in quantized.graph.node if n.op_type == "QuantizeLinear"),
        "fp32_node_count": len(fp32.graph.node),
    }


def measure(path: Path, split: GoldenSplit, tie_tolerance: float) -> dict:
    """Parity of a QDQ model on a split (the calibration split during selection), evaluated in float
    (fake_quant.float_form): the numbers an exact int8 engine gives, the same on every host, so the
    choice and every gate decided on them is too. The file's size is the QDQ model's own."""
    from arrcoc_edge.stages.target import run_split

    evaluated = fake_quant.float_form(path, path.with_name(f"{path.stem}.in-float.onnx"))
    try:
        got = run_split(onnx_common.ort_runner(evaluated), split)
    finally:
        evaluated.unlink()
    metrics = parity_metrics(split.expected, got, tie_tolerance)
    metrics["size_bytes"] = path.stat().st_size
    # each query kind alone too (sentences, vectors): the published gate holds on each
    metrics["subsets"] = {kind: parity_metrics({k: v[idx] for k, v in split.expected.items()},
                                               {k: v[idx] for k, v in got.items()}, tie_tolerance)
                          for kind, idx in split.subsets.items()}
    return metrics


def select(ctx: BuildContext, fp32: Path, split: GoldenSplit, a16: bool,
           published_fp32: Path | None = None) -> tuple[Path | None, dict | None, list[dict]]:
    """Quantise `fp32` with every candidate, measure on the calibration split, convert the ones that
    pass to ORT format (their .ort is published too, so its budget is part of the choice) and choose
    with `choose`. published_fp32: the FP32 artifact the size rules are ratios of (default: fp32)."""
    published_fp32 = published_fp32 or fp32
    base = published_fp32.stat().st_size
    gate = int8_gate(base)
    learned = learned_weight_names(ctx)
    scratch = ctx.staging / ".candidates"
    scratch.mkdir(exist_ok=True)
    rows, paths = [], {}
    for order, cand in enumerate(CANDIDATES):
        path = scratch / f"{fp32.stem}-{cand.name}{'-a16' if a16 else ''}.onnx"
        summary = quantize(fp32, path, split, cand, learned, a16)
        metrics = measure(path, split, gate.tie_tolerance)
        rows.append({**cand.describe(), **summary, "order": order, "activations": "uint16" if a16 else "int8",
                     **{k: metrics[k] for k in _SELECTION_KEYS},
                     "subsets": {kind: {k: m[k] for k in _SELECTION_KEYS if k in m} for kind, m in metrics["subsets"].items()}})
        paths[cand.name] = path
    passing = {r["name"]: paths[r["name"]] for r in rows if not row_failures(r, gate)}
    if passing:  # only these can be chosen; converting the others would cost time for nothing
        fp32_ort, sizes = ort_sizes(ctx, published_fp32, passing)
        for row in rows:
            if row["name"] in sizes:
                row["ort_bytes"], row["ort_budget"] = sizes[row["name"]], ort_budget(base, fp32_ort)
    for row in rows:
        row["failures"] = row_failures(row, gate)
        row["passed"] = not row["failures"]
        ctx.log(f"[onnx-int8] candidate {row['name']} ({row['activations']} activations): top-K "
                f"{row['topk_overlap_mean']:.3f} (min {row['topk_overlap_min']:.3f}), "
                f"rel mean {row['relevance_mean_abs']:.1e}, {kb(row['size_bytes'])}"
                f"{_sentence_text(row)}"
                f"{'' if 'ort_bytes' not in row else ' (.ort ' + kb(row['ort_bytes']) + ')'}"
                f"{'' if row['passed'] else ' -> rejected: ' + ', '.join(row['failures'])}")
    chosen = choose(rows)
    return (paths[chosen["name"]], chosen, rows) if chosen else (None, None, rows)


def _sentence_text(row: dict) -> str:
    m = (row.get("subsets") or {}).get("sentences")
    return "" if not m else (f"; on sentences top-K {m['topk_overlap_mean']:.3f} (min {m['topk_overlap_min']:.3f}), "
                             f"rel mean {m['relevance_mean_abs']:.1e}")


_SELECTION_KEYS = ("topk_overlap_mean", "topk_overlap_min", "relevance_mean_abs", "relevance_max_abs", "evidence_max_abs",
                   "size_bytes")

# The most faithful candidate wins: the quality metrics in this order (the gate's worst case first),
# each narrowing the field to the candidates within its tolerance of the best left. The metrics are
# measured on the host-independent evaluation of each QDQ model (fake_quant.py), so they move only by
# float rounding between hosts; the tolerances say when two candidates are equally faithful: the same
# top-K overlap (exact fractions of K), relevance mean error within 2%. Sizes break what is left.
FAITHFULNESS = (("topk_overlap_min", "max"), ("topk_overlap_mean", "max"), ("relevance_mean_abs", "min"))
TIE_TOLERANCE = {"topk_overlap_min": 1e-6, "topk_overlap_mean": 1e-6, "relevance_mean_rel": 0.02}


EVALUATED = ("each QDQ model's Q/DQ nodes rewritten as their float arithmetic (fake_quant.float_form) and run in "
             "onnxruntime: the int8 engine's exact numbers up to float rounding, the same on every host")

CHOICE_RULE = ("among the candidates that pass every gate (calibration parity, the .onnx and the .ort size "
               "budgets), the most faithful: the best top-K min, then of those the best top-K mean, then the "
               "lowest relevance mean error (within tie_tolerance, relevance_mean_rel relative); of those equally "
               "faithful the smallest .ort (what phones ship), then the smallest .onnx, then the fixed candidate "
               "order. Metrics come from the QDQ graph evaluated in float, the same on every host")


def row_failures(row: dict, gate: Gate) -> list[str]:
    """Every rule a candidate must pass to be published: its gate on calibration, then its .ort's
    budget (a candidate whose .ort was not converted failed the first already)."""
    failures = gate.failures(row)
    failures += [f"{kind}: {text}" for kind, m in (row.get("subsets") or {}).items() for text in gate.subset_failures(m)]
    if "ort_bytes" in row and row["ort_bytes"] > row["ort_budget"]:
        failures.append(f"ort {size_rule(row['ort_bytes'], row['ort_budget'])}")
    return failures


def choose(rows: list[dict]) -> dict | None:
    """The candidate to publish, by CHOICE_RULE (rows carry their `failures` from row_failures)."""
    field = [r for r in rows if not r["failures"]]
    if not field:
        return None
    for metric, better in FAITHFULNESS:
        best = (max if better == "max" else min)(r[metric] for r in field)
        if metric == "relevance_mean_abs":
            field = [r for r in field if r[metric] <= best * (1 + TIE_TOLERANCE["relevance_mean_rel"])]
        else:
            field = [r for r in field if r[metric] >= best - TIE_TOLERANCE[metric]]
    return min(field, key=lambda r: (r.get("ort_bytes", 0), r["size_bytes"], r["order"]))


# What another host rebuilding from the same checkpoint and pins gets, file by file. Sizes decide
# gates and the choice above, so they must not move; bytes may, and the manifest says where.
REPRODUCIBILITY = {
    "int8": {"size": "same on every host (the candidate's structure fixes it)",
             "bytes": "same from build to build on one host (measured: two builds, same sha256); may differ on "
                      "another CPU: the activation scales are MinMax over onnxruntime outputs computed by this "
                      "host's float kernels, so a scale can move by an ulp"},
    "ort": {"size": "same on every host (measured by issue 28's reporter: AMD EPYC and Intel gave 506,056 and "
                    "232,648 B for the same two .onnx files)",
            "bytes": "same from build to build on one host (fixed memory layout for the converter; measured: two "
                     "builds, same sha256); NOT the same across hosts (the reporter's AMD and Intel files differ): "
                     "compare .ort files from two hosts by size and parity, not by sha256"},
}


def ort_budget(fp32_onnx_bytes: int, fp32_ort_bytes: int) -> int:
    """The quantised .ort's budget: the INT8 rule plus the ORT format's fixed cost per graph (node
    and kernel tables), measured as fp32.ort - fp32.onnx, so it is held to the same SIZE_RATIO rule for
    what it actually stores."""
    return int(fp32_onnx_bytes * SIZE_RATIO) + max(0, fp32_ort_bytes - fp32_onnx_bytes)


def ort_sizes(ctx: BuildContext, fp32: Path, models: dict[str, Path]) -> tuple[int, dict[str, int]]:
    """Bytes of the FP32 model and of each candidate in ORT format, converted together (one
    converter process) exactly as the published .ort files are."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ort-sizes-", dir=ctx.staging / ".candidates") as tmp:
        named = {"fp32.ort": fp32, **{f"{name}.ort": path for name, path in models.items()}}
        written = ort_mobile.convert(named, Path(tmp), lambda _msg: None)
        sizes = {name: written[f"{name}.ort"].stat().st_size for name in models}
        return written["fp32.ort"].stat().st_size, sizes
