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
ONNX Runtime Mobile, with required_operators.config), each verified in onnxruntime on this host's
kernels and, where this host can emulate them, on arm64's and on the x86-64 levels below its own
(other_isas: targets/shared/arm64.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError, GateError
from arrcoc_edge.stages.golden import GoldenSplit
from arrcoc_edge.stages.parity import LOSSLESS, LOSSY, Gate
from arrcoc_edge.stages.target import BuildContext, Runner, Target, Variant, expect_file
from arrcoc_edge.targets.onnx_int8 import ort_mobile
from arrcoc_edge.targets.onnx_int8.quantize import (
    CALIBRATION_METHOD,
    CHOICE_RULE,
    REPRODUCIBILITY,
    TIE_TOLERANCE,
    calibration_split,
    int8_gate,
    learned_weight_names,
    ort_budget,
    select,
    user_calibration_split,
)
from arrcoc_edge.targets.shared import arm64, onnx_common

# ---------------------------------------------------------------- the target


class OnnxInt8Target(Target):
    name = "onnx-int8"
    summary = "ONNX INT8 (static QDQ, learned layers chosen on calibration data) + ORT-format for ORT Mobile"
    extra = "int8"
    modules = ("onnx", "onnxruntime", "onnxruntime.quantization")
    runtime_modules = ("onnxruntime",)  # the published models run on the inference install
    capability = "cpu (onnxruntime)"
    depends_on = ("onnx",)

    def check_options(self, options: dict, config) -> None:
        arm64.timeout_s()  # a bad ARRCOC_ARM64_TIMEOUT is one line before any stage runs
        if options.get("calibration_dir"):
            user_calibration_split(Path(options["calibration_dir"]), config)  # every file must decode

    def build(self, ctx: BuildContext) -> list[Variant]:
        split, source = calibration_split(ctx)
        fp32 = upstream_fp32(ctx)
        fp32_bytes = fp32.stat().st_size
        calibration = {"source": source, "count": len(split), "sha256": split.sha256, "method": CALIBRATION_METHOD,
                       "heldout_sha256": ctx.golden.heldout.sha256}
        chosen, row, tried, flavour = cached_selection(ctx, fp32, split)
        if chosen is None:
            raise GateError(
                "no quantisation candidate (INT8 or A16W8) passes the gate on the calibration split: "
                + "; ".join(f"{r['name']}/{r['activations']}: {', '.join(r['failures'])}" for r in tried),
                "keep the FP32 onnx target for this checkpoint, or calibrate with more representative photos",
            )
        model = ctx.staging / f"model.{flavour}.onnx"
        chosen.replace(model)
        _remove_tree(ctx.staging / ".candidates")
        _remove_tree(ctx.staging / ".selection")
        quant_info = {
            "format": "QDQ", "per_channel": False, "activations": row["activations"], "weights": "int8",
            "weight_only_nodes": row.get("weight_only_nodes", []),
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

    def other_isas(self, ctx: BuildContext, variant: Variant) -> dict:
        # every variant is what a phone or a PC runs (the .ort files through ORT Mobile, the INT8 .onnx
        # through onnxruntime or the page): its gate also holds on onnxruntime's arm64 kernels and on
        # the x86 levels below this host's (arm64.CPUS, emulated)
        return arm64.other_isas(ctx, variant.files[0])

    def published_runner(self, out: Path, entry: dict, variant: str, threads: int | None = None,
                         model: bytes | None = None) -> Runner:
        # .onnx or .ort: onnxruntime takes either format's bytes
        return onnx_common.ort_runner(model or out / entry["variants"][variant]["files"][0], threads=threads or 0)

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


CHOSEN = "chosen.onnx"  # the selection's one file, in its cache entry


class _NonePassed(Exception):
    def __init__(self, tried: list[dict]):
        self.tried = tried


def cached_selection(ctx: BuildContext, fp32: Path, split: GoldenSplit):
    """select_form_and_flavour, or the outcome of an identical earlier selection (conversion_cache):
    it reads the FP32 model's bytes, the checkpoint's program (the other form's export, the learned
    weights' names) and the calibration split, all in the key, and its measurements are the
    host-independent float evaluation of each QDQ graph (fake_quant.py). The chosen model is gated
    afresh on the held-out split either way; a search where no candidate passes is never kept."""
    from arrcoc_edge.relevance.digest import sha256_file
    from arrcoc_edge.stages.conversion_cache import convert_cached
    from arrcoc_edge.targets.onnx_int8 import quantize

    def search(folder: Path) -> dict:
        chosen, row, tried, flavour = select_form_and_flavour(ctx, fp32, split)
        if chosen is None:
            raise _NonePassed(tried)
        chosen.replace(folder / CHOSEN)
        return {"row": row, "tried": tried, "flavour": flavour}

    # what the search tries and holds them to, as this process has them (the module's settings)
    rules = json.dumps({"candidates": [c.describe() for c in quantize.CANDIDATES],
                        "gate": int8_gate(fp32.stat().st_size).maxima}, sort_keys=True)
    inputs = {"fp32": sha256_file(fp32), "program": ctx.program.cache_key, "split": split.sha256, "rules": rules}
    dest = ctx.staging / ".selection"
    dest.mkdir(exist_ok=True)
    try:
        record = convert_cached("onnx-int8-selection", inputs, ("onnxruntime", "onnx", "torch"), search, dest, ctx.log,
                                keep=4)
    except _NonePassed as none:
        return None, None, none.tried, None
    chosen = expect_file(dest / CHOSEN, "the chosen INT8 candidate")
    ctx.log(f"[onnx-int8] chosen: {record['row']['name']} ({record['flavour']}), of {len(record['tried'])} candidates tried")
    return chosen, record["row"], record["tried"], record["flavour"]


def other_form_fp32(ctx: BuildContext, form: str) -> Path:
    """The FP32 ONNX model of the checkpoint with the other participatory form (same weights)."""
    from arrcoc_edge.stages.export import export_form

    scratch = ctx.staging / ".candidates"
    scratch.mkdir(exist_ok=True)
    ctx.log(f"[onnx-int8] exporting the {form}-form FP32 model to quantise")
    return onnx_common.export_onnx_cached(lambda: export_form(ctx.checkpoint.model, form),
                                          {"program": ctx.program.cache_key, "form": form}, ctx.config,
                                          scratch / f"fp32-{form}.onnx", ctx.log)


def upstream_fp32(ctx: BuildContext) -> Path:
    """The FP32 model the onnx stage just verified in this run: quantise exactly that file."""
    stage = ctx.upstream.get("onnx")
    if stage is None or not stage.publishable or stage.primary is None:
        raise ExportError("the onnx stage did not produce a verified FP32 model", "build --target onnx and fix its failure first")
    return expect_file(stage.primary.variant.files[0], "the FP32 ONNX model")


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
