"""all-MiniLM-L6-v2 -> ONNX: the FP32 export (BERT, mean pooling and L2 inside the graph) and its
INT8 quantisation, converted once per snapshot, tools and code (pipeline/stages/conversion_cache.py).
The text-encoder target (target.py) gates and publishes what these write."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError
from arrcoc_edge.stages.target import expect_file
from arrcoc_edge.targets.shared import onnx_common
from arrcoc_edge.targets.text_encoder.published import OUTPUT

INPUTS = ("input_ids", "attention_mask")


def queries_from_minilm(ctx) -> bool:
    """Whether this build's typed queries go through all-MiniLM-L6-v2 (a 384-d checkpoint without
    --base-model), as the text encoder and the apps' encoders decide: for their AheadJobs, which a
    rarer case (a table inside a reference checkpoint) only makes unneeded."""
    return ctx.config.query_dim == 384 and not ctx.options.get("base_model")


class _Encoder:
    """torch module factory kept out of import time (torch/transformers load lazily)."""

    @staticmethod
    def module():
        import torch
        import torch.nn.functional as F

        from arrcoc_edge.relevance.text_encoder import sentence_model

        bert = sentence_model()[0].auto_model

        class MeanPooledMiniLM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask):
                tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
                pooled = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                return F.normalize(pooled, dim=1)

        return MeanPooledMiniLM().eval()


def export_fp32(path: Path, log) -> Path:
    """torch.onnx.export (dynamo) with dynamic batch and sequence length, metadata stripped."""
    import contextlib
    import io

    import onnx
    import torch
    from torch.export import Dim

    from arrcoc_edge.relevance.text_encoder import MAX_TOKENS, tokenize

    example = {k: torch.from_numpy(v) for k, v in tokenize(["a red circle", "the cat"]).items()}
    batch, tokens = Dim("batch", min=1, max=1024), Dim("tokens", min=2, max=MAX_TOKENS)
    log(f"exporting all-MiniLM-L6-v2 to ONNX ({path.name})")
    try:
        with contextlib.redirect_stdout(io.StringIO()), onnx_common.quiet_torch_onnx():
            torch.onnx.export(
                _Encoder.module(), (example["input_ids"], example["attention_mask"]), str(path),
                input_names=list(INPUTS), output_names=[OUTPUT],
                dynamic_shapes={"input_ids": {0: batch, 1: tokens}, "attention_mask": {0: batch, 1: tokens}},
                external_data=False, optimize=True,
            )
    except Exception as exc:
        raise ExportError(f"MiniLM ONNX export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
                          "run with --verbose; check the transformers/torch versions of the text extra") from exc
    model = onnx.load(str(path))
    onnx_common.strip_metadata(model)
    onnx.save(model, str(path))
    return expect_file(path, "text encoder ONNX")


def convert_minilm_onnx(dest: Path, log) -> tuple[Path, Path]:
    """text_encoder.onnx and text_encoder.int8.onnx in `dest`. They depend on the MiniLM snapshot,
    not on the checkpoint: converted once per snapshot, tools and code (conversion_cache)."""
    from arrcoc_edge.stages.conversion_cache import convert_cached, minilm_inputs

    def convert(folder: Path) -> dict:
        quantize_int8(export_fp32(folder / "text_encoder.onnx", log), folder / "text_encoder.int8.onnx", log)
        return {}

    convert_cached("minilm-onnx", minilm_inputs(), MINILM_TOOLS, convert, dest, log, keep=2)
    return (expect_file(dest / "text_encoder.onnx", "text encoder ONNX"),
            expect_file(dest / "text_encoder.int8.onnx", "text encoder INT8 ONNX"))


MINILM_TOOLS = ("torch", "onnx", "onnxscript", "onnxruntime", "transformers", "sentence-transformers")


MATMUL_BLOCK = 16  # weights per MatMulNBits scale (see quantize_int8)


def quantize_int8(fp32: Path, path: Path, log) -> Path:
    """Weight-only INT8: MatMul weights as MatMulNBits (8 bits, blocks of 32, activations stay
    float32, onnxruntime.quantization) and the word-embedding table as int8 with one scale per row.

    Measured on SENTENCES (cosine min vs the Python encoder): dynamic int8 MatMul (activations
    quantised at run time) 0.84 per-tensor / 0.977 per-channel, below the 0.99 gate: BERT's
    activations have outliers. Weight-only 8-bit MatMuls keep 0.998.
    Measured with the faithful trained checkpoint (held-out relevance top-K min, gate >= 0.95):
    the embedding table per tensor at 8 bits (all onnxruntime.quantization offers for Gather at
    8 bits; blockwise it only does 4 bits: 0.83-0.88) 0.906-0.922 with MatMul blocks of 32; one
    int8 scale per row (rowwise_int8_gather) 0.906 with blocks of 32 and 0.984 with blocks of 16
    (24.9 MB), where the float32 table gives 0.938 and 0.969: the MatMul block size is what the
    ranking feels. Blocks of 16 and row-wise embeddings: the most precise weights that fit the budget.
    """
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    log(f"quantising {fp32.name} -> {path.name} (weight-only int8: MatMulNBits bits=8 block {MATMUL_BLOCK}, int8 embedding rows)")
    # the quantizer logs one INFO line per skipped node
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    config = DefaultWeightOnlyQuantConfig(block_size=MATMUL_BLOCK, is_symmetric=True, bits=8)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), algo_config=config)
    quantizer.process()
    model = rowwise_int8_gather(quantizer.model.model, "word_embeddings")
    onnx.save(model, str(path))
    onnx_common.strip_metadata_file(path)
    return expect_file(path, "text encoder INT8 ONNX")


def rowwise_int8_gather(model, table_part: str):
    """Gather(table, ids) -> Gather(int8 table, ids) * Gather(row scales, ids): symmetric int8 with
    one scale per row, in standard ONNX ops (every runtime, onnxruntime-web included)."""
    from onnx import TensorProto, helper, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    for node in [n for n in model.graph.node if n.op_type == "Gather" and table_part in n.input[0]]:
        table_name, ids, p = node.input[0], node.input[1], node.name
        table = numpy_helper.to_array(inits[table_name]).astype(np.float32)
        scale = (np.maximum(np.abs(table).max(axis=1), 1e-12) / 127.0).astype(np.float32)
        q = np.clip(np.round(table / scale[:, None]), -127, 127).astype(np.int8)
        model.graph.initializer.remove(inits[table_name])
        model.graph.initializer.extend([numpy_helper.from_array(q, f"{table_name}_int8"),
                                        numpy_helper.from_array(scale, f"{table_name}_scale"),
                                        numpy_helper.from_array(np.array([-1], np.int64), f"{p}_axes")])
        rewritten = [
            helper.make_node("Gather", [f"{table_name}_int8", ids], [f"{p}_q"], name=f"{p}_q", axis=0),
            helper.make_node("Cast", [f"{p}_q"], [f"{p}_qf"], name=f"{p}_cast", to=TensorProto.FLOAT),
            helper.make_node("Gather", [f"{table_name}_scale", ids], [f"{p}_s"], name=f"{p}_s", axis=0),
            helper.make_node("Unsqueeze", [f"{p}_s", f"{p}_axes"], [f"{p}_s1"], name=f"{p}_unsqueeze"),
            helper.make_node("Mul", [f"{p}_qf", f"{p}_s1"], [node.output[0]], name=f"{p}_dequantize"),
        ]
        at = list(model.graph.node).index(node)
        model.graph.node.remove(node)
        for k, n in enumerate(rewritten):
            model.graph.node.insert(at + k, n)
    return model
