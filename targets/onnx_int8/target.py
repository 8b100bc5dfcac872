"""ONNX INT8: static QDQ quantisation of the verified FP32 ONNX model, plus ORT-format copies.

What gets quantised is chosen from data, not hard-coded: each candidate (a set of op types,
optionally limited to the nodes that carry the checkpoint's learned weights) is quantised and
measured on the calibration split; the best one that passes the INT8 gate is kept. TOOLCHAIN.md:
quantising every op wrecks the ranking (the fixed colour/Sobel front end is the sensitive part),
quantising only the learned layers works. If no INT8 candidate passes, 16-bit activations with
8-bit weights (A16W8) are tried on the same candidates and published instead, named "a16w8".

The calibration split (or the user's --calibration folder) is never the held-out split; the
held-out split is what the core verifies every variant on, in onnxruntime.

Variants: int8 (primary; a16w8 when INT8 cannot pass), fp32-ort and int8-ort (ORT format for
ONNX Runtime Mobile, with required_operators.config), each verified in onnxruntime.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import ExportError, GateError, InputError
from pipeline.stages.golden import MIN_CALIBRATION, QUERY_SEED, GoldenSplit, load_photo, reference_outputs, seeded_queries
from pipeline.stages.parity import LOSSLESS, LOSSY, Gate, kb, parity_metrics, size_rule
from pipeline.stages.target import BuildContext, Runner, Target, Variant, expect_file

from targets.shared import onnx_common
from targets.onnx_int8 import ort_mobile

SIZE_RATIO = 0.35  # INT8 model bytes vs the FP32 ONNX artifact (both metadata-stripped)
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

    def describe(self) -> dict:
        return {"name": self.name, "op_types": list(self.op_types), "learned_only": self.learned_only,
                "float_outputs": list(self.float_outputs)}


# From most to least quantised; the selection measures all of them and keeps the best passing one.
# The learned candidates include MatMul: the reduced participatory head reads W2 in a MatMul
# (W2^T q, model.py); quantize_for() makes that weight an initializer the quantiser can see.
CANDIDATES = (
    Candidate("all-ops", (), False),  # () = every op type the quantiser supports
    Candidate("conv-gemm-relu", ("Conv", "Gemm", "Relu"), False),
    Candidate("learned-conv-gemm-relu", ("Conv", "Gemm", "MatMul", "Relu"), True),
    Candidate("learned-conv-gemm-relu-float-conv-out", ("Conv", "Gemm", "MatMul", "Relu"), True, ("Conv",)),
    Candidate("learned-gemm", ("Gemm", "MatMul"), True),
)


def int8_gate(fp32_bytes: int) -> Gate:
    return Gate({**LOSSY.maxima, "size_bytes": int(fp32_bytes * SIZE_RATIO)}, LOSSY.minima, LOSSY.tie_tolerance)


# ---------------------------------------------------------------- calibration data


def calibration_split(ctx: BuildContext) -> tuple[GoldenSplit, str]:
    """The calibration samples (with eager reference outputs) and where they came from."""
    folder = ctx.options.get("calibration_dir")
    if not folder:
        return ctx.golden.calibration, "golden calibration split (photos disjoint from held-out)"
    split = user_calibration_split(Path(folder), ctx.config)
    split.expected = reference_outputs(ctx.checkpoint.model, split)
    return split, f"user folder {folder}"


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
    chosen = {n.name for n in weighted if n.op_type in candidate.op_types}
    producers = {o: n.name for n in model.graph.node if n.name in chosen for o in n.output}
    # an activation right after a chosen layer is quantised with it (QDQ fuses Conv+Relu)
    chosen |= {n.name for n in model.graph.node if n.op_type in candidate.op_types and n.op_type == "Relu"
               and any(i in producers for i in n.input)}
    return sorted(chosen)


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
    onnx_common.strip_metadata_file(dst)  # stripped like the FP32 file, so the size ratio is fair
    return quantized_summary(model, onnx.load(str(dst)))


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
    """Parity of a model on a split (the calibration split during selection), in onnxruntime."""
    from pipeline.stages.target import run_split

    runner = onnx_common.ort_runner(path)
    got = run_split(runner, split)
    metrics = parity_metrics(split.expected, got, tie_tolerance)
    metrics["size_bytes"] = path.stat().st_size
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
                     **{k: metrics[k] for k in _SELECTION_KEYS}})
        paths[cand.name] = path
    passing = {r["name"]: paths[r["name"]] for r in rows if not gate.failures(r)}
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
                f"{'' if 'ort_bytes' not in row else ' (.ort ' + kb(row['ort_bytes']) + ')'}"
                f"{'' if row['passed'] else ' -> rejected: ' + ', '.join(row['failures'])}")
    chosen = choose(rows)
    return (paths[chosen["name"]], chosen, rows) if chosen else (None, None, rows)


_SELECTION_KEYS = ("topk_overlap_mean", "topk_overlap_min", "relevance_mean_abs", "relevance_max_abs", "size_bytes")

# How far apart two candidates' calibration metrics may be and still count as equal quality. The
# choice must not depend on the build host: measured between a 2-core AMD EPYC (AVX-512 VNNI) and
# an Intel host, relevance_mean_abs of the same candidate moved by 0.14% (int8 kernels round
# differently) while top-K overlap did not move. The tolerances are 70x that, and two opposite
# patch swaps on the top-K metrics (2/K on the min at K=64; 2/(K*n) on the mean). Below them a
# difference is noise, and the smaller file wins.
TIE_TOLERANCE = {"topk_overlap_mean": 0.005, "topk_overlap_min": 0.04, "relevance_mean_rel": 0.10}


CHOICE_RULE = ("among the candidates that pass every gate (calibration parity, the .onnx and the .ort size "
               "budgets), those equal to the best within tie_tolerance on every quality metric; of those the "
               "smallest .ort (what phones ship), then the smallest .onnx, then the fixed candidate order. Sizes "
               "are the same on every host, so the choice only changes when a metric moves by more than its "
               "tolerance")


def row_failures(row: dict, gate: Gate) -> list[str]:
    """Every rule a candidate must pass to be published: its gate on calibration, then its .ort's
    budget (a candidate whose .ort was not converted failed the first already)."""
    failures = gate.failures(row)
    if "ort_bytes" in row and row["ort_bytes"] > row["ort_budget"]:
        failures.append(f"ort {size_rule(row['ort_bytes'], row['ort_budget'])}")
    return failures


def choose(rows: list[dict]) -> dict | None:
    """The candidate to publish, by CHOICE_RULE (rows carry their `failures` from row_failures)."""
    passing = [r for r in rows if not r["failures"]]
    if not passing:
        return None
    best_mean = max(r["topk_overlap_mean"] for r in passing)
    best_min = max(r["topk_overlap_min"] for r in passing)
    best_rel = min(r["relevance_mean_abs"] for r in passing)
    equal = [r for r in passing
             if r["topk_overlap_mean"] >= best_mean - TIE_TOLERANCE["topk_overlap_mean"]
             and r["topk_overlap_min"] >= best_min - TIE_TOLERANCE["topk_overlap_min"]
             and r["relevance_mean_abs"] <= best_rel * (1 + TIE_TOLERANCE["relevance_mean_rel"])]
    return min(equal, key=lambda r: (r.get("ort_bytes", 0), r["size_bytes"], r["order"]))


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
    and kernel tables), measured as fp32.ort - fp32.onnx, so it is held to the same 35% rule for
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


# ---------------------------------------------------------------- the target


class OnnxInt8Target(Target):
    name = "onnx-int8"
    summary = "ONNX INT8 (static QDQ, learned layers chosen on calibration data) + ORT-format for ORT Mobile"
    extra = "int8"
    modules = ("onnx", "onnxruntime", "onnxruntime.quantization")
    capability = "cpu (onnxruntime)"
    depends_on = ("onnx",)

    def check_options(self, options: dict, config) -> None:
        if options.get("calibration_dir"):
            user_calibration_split(Path(options["calibration_dir"]), config)  # every file must decode

    def build(self, ctx: BuildContext) -> list[Variant]:
        split, source = calibration_split(ctx)
        fp32 = upstream_fp32(ctx)
        fp32_bytes = fp32.stat().st_size
        calibration = {"source": source, "count": len(split), "sha256": split.sha256, "method": CALIBRATION_METHOD,
                       "heldout_sha256": ctx.golden.heldout.sha256}
        chosen, row, tried, flavour = select_form_and_flavour(ctx, fp32, split)
        if chosen is None:
            raise GateError(
                "no quantisation candidate (INT8 or A16W8) passes the gate on the calibration split: "
                + "; ".join(f"{r['name']}/{r['activations']}: {', '.join(r['failures'])}" for r in tried),
                "keep the FP32 onnx target for this checkpoint, or calibrate with more representative photos",
            )
        model = ctx.staging / f"model.{flavour}.onnx"
        chosen.replace(model)
        _remove_tree(ctx.staging / ".candidates")
        quant_info = {
            "format": "QDQ", "per_channel": False, "activations": row["activations"], "weights": "int8",
            "candidate": row["name"], "participatory_form": row["participatory_form"],
            "quantized_op_types": row["quantized_op_types"],
            "quantized_node_count": row["quantized_node_count"], "calibration": calibration,
            "candidates": tried, "fp32_onnx_bytes": fp32_bytes,
            "size_ratio_vs_fp32": round(model.stat().st_size / fp32_bytes, 4),
            "speed_note": speed_note(row, ctx.checkpoint.model.participatory_scorer.form),
            "selection": {"rule": CHOICE_RULE, "tie_tolerance": dict(TIE_TOLERANCE)},
            "reproducibility": REPRODUCIBILITY["int8"],
        }
        gate = int8_gate(fp32_bytes)
        variants = [Variant(flavour, [model], gate, gate.maxima["size_bytes"], primary=True, info=quant_info)]
        variants += self._ort_variants(ctx, fp32, model, flavour, fp32_bytes)
        q_ort = variants[-1]
        q_ort.info["speed_note"] = quant_info["speed_note"] + (
            f"; this .ort's QDQ graph is pre-optimised for {q_ort.info['target_platform']} phones (ORT Mobile), "
            f"not for the host it is benchmarked on")
        return variants

    def _ort_variants(self, ctx, fp32: Path, quantized: Path, flavour: str, fp32_bytes: int) -> list[Variant]:
        ctx.log("[onnx-int8] converting FP32 and quantised models to ORT format")
        converted = ort_mobile.convert(
            {"model.fp32.ort": fp32, f"model.{flavour}.ort": quantized}, ctx.staging, ctx.log
        )
        fp32_ort, q_ort = converted["model.fp32.ort"], converted[f"model.{flavour}.ort"]
        info = ort_mobile.describe(ctx.staging)
        fp32_budget = int(fp32_bytes * 1.25)  # the FP32 .ort re-serialises the same weights
        fp32_gate = Gate({**LOSSLESS.maxima, "size_bytes": fp32_budget}, LOSSLESS.minima, LOSSLESS.tie_tolerance)
        overhead = max(0, fp32_ort.stat().st_size - fp32_bytes)
        q_budget = ort_budget(fp32_bytes, fp32_ort.stat().st_size)  # the rule select() already held it to
        q_gate = Gate({**LOSSY.maxima, "size_bytes": q_budget}, LOSSY.minima, LOSSY.tie_tolerance)
        info["ort_format_overhead_bytes"] = overhead
        ratio = lambda p: round(p.stat().st_size / fp32_bytes, 4)  # noqa: E731
        return [
            Variant("fp32-ort", [fp32_ort], fp32_gate, fp32_budget,
                    info={**info, "source": "onnx/model.onnx", "size_ratio_vs_fp32_onnx": ratio(fp32_ort),
                          "reproducibility": REPRODUCIBILITY["ort"]}),
            Variant(f"{flavour}-ort", [q_ort], q_gate, q_budget,
                    info={**info, "source": quantized.name, "size_ratio_vs_fp32_onnx": ratio(q_ort),
                          "size_ratio_vs_fp32_ort": round(q_ort.stat().st_size / fp32_ort.stat().st_size, 4),
                          "reproducibility": REPRODUCIBILITY["ort"]}),
        ]

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        path = variant.files[0]
        checks = []
        if path.suffix == ".onnx":
            onnx_common.check_onnx(path)
            checks.append("onnx.checker (full_check) passed")
        else:
            checks.append(f"ORT format {ort_mobile.ort_format_version(path)}; operators listed in required_operators.config")
        return checks + onnx_common.check_io_contract(onnx_common.ort_session(path), ctx.config)

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        return onnx_common.ort_runner(variant.files[0])

    def published_runner(self, out: Path, entry: dict, variant: str, threads: int | None = None) -> Runner:
        return onnx_common.ort_runner(out / entry["variants"][variant]["files"][0], threads=threads or 0)  # .onnx or .ort

    def bench_cases(self, out: Path, entry: dict) -> list:
        # every published flavour: the quantised .onnx and both .ort files, timed in onnxruntime,
        # each quantised one compared with its FP32 (the onnx target's model, or the FP32 .ort)
        variants = tuple(entry.get("variants", {}))
        baselines = {name: "fp32-ort" if name.endswith("-ort") else "fp32" for name in variants if not name.startswith("fp32")}
        return onnx_common.ort_bench_cases(out, entry, variants, baselines)


def speed_note(row: dict, program_form: str) -> str:
    """Why this INT8 model can run slower than its FP32, in one line, from what was quantised."""
    types = ", ".join(f"{op} {n}" for op, n in row["quantized_op_types"].items())
    note = (f"only the learned layers compute in int8 ({row['quantized_node_count']} of {row['fp32_node_count']} "
            f"nodes: {types}); the texture front end, softmax, min-max and top-K stay float, and every int8 "
            f"node adds quantise/dequantise steps")
    if row["participatory_form"] != program_form:
        note += (f"; it computes the {row['participatory_form']} participatory form (the {program_form}-form "
                 f"candidates failed the gate on calibration), which projects every patch into the query space")
    return note


def _constant(model, name: str):
    """The value of `name` when it is an initializer, a Constant or a Concat of those; else None."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    if name in inits:
        return numpy_helper.to_array(inits[name])
    node = producers.get(name)
    if node is not None and node.op_type == "Constant" and node.attribute[0].name == "value":
        return numpy_helper.to_array(node.attribute[0].t)
    if node is not None and node.op_type == "Constant" and node.attribute[0].name == "value_ints":
        return np.array(list(node.attribute[0].ints), np.int64)
    if node is not None and node.op_type == "Concat":
        parts = [_constant(model, i) for i in node.input]
        return None if any(p is None for p in parts) else np.concatenate(parts, axis=node.attribute[0].i)
    return None


def quantize_for(fp32: Path, learned: set[str], dest: Path) -> Path:
    """A copy of `fp32` where a learned weight read only through Reshape(weight, constant shape) is
    stored reshaped under its own name: onnxruntime's quantiser quantises initializers, not the
    output of a Reshape, so without this the 64->D weight of the reduced head stays float32."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(fp32))
    inits = {t.name: t for t in model.graph.initializer}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for i in node.input:
            readers[i] = readers.get(i, 0) + 1
    for node in [n for n in model.graph.node if n.op_type == "Reshape"]:
        weight, shape = node.input[0], _constant(model, node.input[1])
        if weight not in learned or weight not in inits or readers.get(weight) != 1 or shape is None:
            continue
        reshaped = numpy_helper.to_array(inits[weight]).reshape(shape)
        model.graph.initializer.remove(inits[weight])
        model.graph.initializer.append(numpy_helper.from_array(reshaped, weight))
        for other in model.graph.node:
            other.input[:] = [weight if i == node.output[0] else i for i in other.input]
        model.graph.node.remove(node)
        for infos in (model.graph.value_info, model.graph.input):  # shapes of the old 4-D weight
            for info in [v for v in infos if v.name in (weight, node.output[0])]:
                infos.remove(info)
    onnx.save(model, str(dest))
    return dest


def select_form_and_flavour(ctx: BuildContext, fp32: Path, split: GoldenSplit):
    """INT8 before A16W8; within each, the exported program's participatory form first, then the
    other exact form (model.py) exported just for this: the two quantise differently (the reduced
    head's int8 W2^T W2 can cost more precision than the direct projection), so a form that fails
    the gate does not end the search. Returns (path, row, every row tried, flavour)."""
    fp32_bytes, tried = fp32.stat().st_size, []
    (ctx.staging / ".candidates").mkdir(exist_ok=True)
    visible = lambda path: quantize_for(path, learned_weight_names(ctx), ctx.staging / ".candidates" / f"q-{path.name}")  # noqa: E731
    forms = [(ctx.checkpoint.model.participatory_scorer.form, lambda: visible(fp32))]
    forms.append(("direct" if forms[0][0] == "reduced" else "reduced", lambda: visible(other_form_fp32(ctx, forms[1][0]))))
    sources: dict[str, Path] = {}
    for a16, flavour in ((False, "int8"), (True, "a16w8")):
        for form, make in forms:
            if form not in sources:
                sources[form] = make()
            source = sources[form]
            chosen, row, rows = select(ctx, source, split, a16=a16, published_fp32=fp32)
            tried += [{**r, "participatory_form": form} for r in rows]
            if chosen is not None:
                return chosen, {**row, "participatory_form": form}, tried, flavour
            ctx.log(f"[onnx-int8] no {flavour} candidate of the {form} form passes on the calibration split")
    return None, None, tried, None


def other_form_fp32(ctx: BuildContext, form: str) -> Path:
    """The FP32 ONNX model of the checkpoint with the other participatory form (same weights)."""
    from pipeline.stages.export import export_form

    scratch = ctx.staging / ".candidates"
    scratch.mkdir(exist_ok=True)
    ctx.log(f"[onnx-int8] exporting the {form}-form FP32 model to quantise")
    program = export_form(ctx.checkpoint.model, form)
    return onnx_common.export_onnx(program, ctx.config, scratch / f"fp32-{form}.onnx", ctx.log)


def upstream_fp32(ctx: BuildContext) -> Path:
    """The FP32 model the onnx stage just verified in this run: quantise exactly that file."""
    stage = ctx.upstream.get("onnx")
    if stage is None or not stage.publishable or stage.primary is None:
        raise ExportError("the onnx stage did not produce a verified FP32 model", "build --target onnx and fix its failure first")
    return expect_file(stage.primary.variant.files[0], "the FP32 ONNX model")


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
