"""A publish of the onnx target made by hand around a small real ONNX graph with the artifact
contract's names and shapes: for fast tests of what load(), predict and verify do with a publish
(seconds, no build). The graph's answers are not the relevance model's."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

GRID, TOP_K, DIM = 14, 64, 384


def contract_model(grid: int = GRID, top_k: int = TOP_K, dim: int = DIM, evidence: bool = True) -> bytes:
    """An ONNX graph with the artifact contract's names: relevance [B, grid²] from the query's mean
    (the same value in every cell), its top_k cells, softmax weights [B, 3] and evidence [B, 4]
    (the level four times; evidence=False: none, as a model published before that output existed)."""
    from onnx import TensorProto, helper

    n = grid * grid
    nodes = [
        helper.make_node("ReduceMean", ["query", "axes"], ["mean"], keepdims=1),
        helper.make_node("Sigmoid", ["mean"], ["level"]),
        helper.make_node("Expand", ["level", "cells"], ["relevance"]),
        helper.make_node("TopK", ["relevance", "k"], ["topk_values", "topk_indices"], axis=1),
        helper.make_node("Expand", ["mean", "three"], ["spread"]),
        helper.make_node("Softmax", ["spread"], ["weights"], axis=1),
    ] + ([helper.make_node("Expand", ["level", "four"], ["evidence"])] if evidence else [])
    consts = [helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
              helper.make_tensor("cells", TensorProto.INT64, [2], [1, n]),
              helper.make_tensor("k", TensorProto.INT64, [1], [top_k]),
              helper.make_tensor("three", TensorProto.INT64, [2], [1, 3]),
              helper.make_tensor("four", TensorProto.INT64, [2], [1, 4])]
    graph = helper.make_graph(
        nodes, "contract", [helper.make_tensor_value_info("image", TensorProto.UINT8, ["batch", "height", "width", 3]),
                            helper.make_tensor_value_info("query", TensorProto.FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("relevance", TensorProto.FLOAT, ["batch", n]),
         helper.make_tensor_value_info("topk_indices", TensorProto.INT64, ["batch", top_k]),
         helper.make_tensor_value_info("weights", TensorProto.FLOAT, ["batch", 3]),
         *([helper.make_tensor_value_info("evidence", TensorProto.FLOAT, ["batch", 4])] if evidence else [])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model.SerializeToString()


def publish(out: Path, model: bytes, **claims) -> Path:
    """A publish of the onnx target holding `model` and a golden file, its manifest claiming
    the contract's settings with `claims` over them (a key "model_file" names the variant's model)."""
    (out / "onnx").mkdir(parents=True)
    files = {"onnx/model.onnx": model, "onnx/golden.bin": np.arange(1024, dtype=np.float32).tobytes()}
    for rel, data in files.items():
        (out / rel).write_bytes(data)
    listed = [{"path": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for rel, data in files.items()]
    first = claims.pop("model_file", "onnx/model.onnx")
    settings = {"grid": GRID, "top_k": TOP_K, "query_dim": DIM, "input_size": 16 * GRID, **claims}
    manifest = {"checkpoint": {"model": settings},
                "targets": {"onnx": {"status": "published", "files": listed, "primary_variant": "fp32",
                                     "variants": {"fp32": {"status": "verified", "files": [first]}}}}}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out
