"""A QDQ model evaluated exactly in float: what an int8 engine computes, the same on every host.

onnxruntime's CPU int8 kernels (MLAS) pick their code by instruction set, and not every path computes
the same numbers: u8s8 on AVX2 without VNNI multiplies pairs into saturating 16-bit sums
(VPMADDUBSW), so a QDQ model measured there can rank differently than on an AVX-512 VNNI host or in
TensorRT, whose int8 products accumulate exactly in 32 bits. A gate that decides which variant is
built must not depend on that, so the quantisation choices are measured on this file instead: each
QuantizeLinear becomes float Div -> Round -> Add(zero point) -> Clip(code range) (the integer code,
held in float), each DequantizeLinear of an activation Sub(zero point) -> Mul(scale), and each
DequantizeLinear of a constant (the int8 weights) its float value. Every value an int8 engine sees
is then exactly representable and every product the engine sums is computed in float32, so the
result is the Q/DQ graph's own arithmetic up to float rounding (about 1e-7 relative), whatever CPU
runs it. The models actually published are still run on the kernels users have: this host's and
the emulated ones (parity.by_isa).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError

# the code range of each quantised element type (ONNX TensorProto data types)
_RANGES = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767)}  # uint8, int8, uint16, int16
_DEFAULT_TYPE = 2  # QuantizeLinear without a zero point quantises to uint8


def float_form(src: Path, dst: Path) -> Path:
    """Write `src` (a QDQ model) to `dst` with every Q/DQ node replaced by its float arithmetic."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    consts = {t.name: t for t in graph.initializer}
    consts.update({n.output[0]: a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"})
    value = lambda name: numpy_helper.to_array(consts[name])  # noqa: E731
    added: dict[str, np.ndarray] = {}

    def as_float(name: str) -> str:  # a float32 copy of a scale or zero point, made once
        key = f"{name}__float"
        if key not in added:
            added[key] = value(name).astype(np.float32)
        return key

    nodes = []
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in consts:
            added[node.output[0]] = dequantized_constant(node, value)  # the weight, in float
        elif node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            nodes += _activation_nodes(node, consts, value, as_float, added, helper)
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(numpy_helper.from_array(a, name) for name, a in added.items())
    _drop_unused(graph)
    onnx.save(model, str(dst))
    return dst


def dequantized_constant(node, value) -> np.ndarray:
    """(q - zero_point) * scale of a constant, per tensor or along the node's axis (default 1)."""
    q = value(node.input[0]).astype(np.float64)
    scale = value(node.input[1]).astype(np.float64)
    zp = value(node.input[2]).astype(np.float64) if len(node.input) > 2 and node.input[2] else np.zeros_like(scale)
    if scale.ndim == 1 and scale.size > 1:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % q.ndim
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return ((q - zp) * scale).astype(np.float32)


def _activation_nodes(node, consts, value, as_float, added: dict, helper) -> list:
    """The float nodes that compute one Q or DQ node of an activation (per-tensor scale only: the
    quantiser's activations are per tensor; a per-axis one is refused rather than approximated)."""
    x, scale = node.input[0], node.input[1]
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if scale not in consts or (zp is not None and zp not in consts) or value(scale).size != 1:
        raise ExportError(f"{node.name}: a {node.op_type} whose scale is not one constant cannot be evaluated in float",
                          "quantise activations per tensor (onnxruntime's quantize_static does)")
    out, name = node.output[0], node.name or out
    zp_f = as_float(zp) if zp is not None else None
    if node.op_type == "DequantizeLinear":
        centred = f"{out}__centred" if zp_f else x
        return ([helper.make_node("Sub", [x, zp_f], [centred], name=f"{name}__sub")] if zp_f else []) + \
            [helper.make_node("Mul", [centred, scale], [out], name=f"{name}__mul")]
    elem = consts[zp].data_type if zp is not None else _DEFAULT_TYPE
    if elem not in _RANGES:
        raise ExportError(f"{node.name}: QuantizeLinear to element type {elem} is not evaluated in float",
                          "quantise to int8, uint8, int16 or uint16")
    low, high = f"{out}__low", f"{out}__high"
    added[low], added[high] = (np.array(v, np.float32) for v in _RANGES[elem])
    steps = [helper.make_node("Div", [x, scale], [f"{out}__scaled"], name=f"{name}__div"),
             helper.make_node("Round", [f"{out}__scaled"], [f"{out}__rounded"], name=f"{name}__round")]  # half to even, as ONNX's QuantizeLinear
    code = f"{out}__rounded"
    if zp_f:
        steps.append(helper.make_node("Add", [code, zp_f], [f"{out}__shifted"], name=f"{name}__add"))
        code = f"{out}__shifted"
    steps.append(helper.make_node("Clip", [code, low, high], [out], name=f"{name}__clip"))
    return steps


def _drop_unused(graph) -> None:
    """Initializers no node reads any more (the int8 weights, once in float), and declare the new ones."""
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for attr_graph in (a.g for n in graph.node for a in n.attribute if a.type == a.GRAPH):
        used |= {i for n in attr_graph.node for i in n.input}
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
