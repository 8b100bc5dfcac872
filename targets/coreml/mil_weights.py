"""The MIL ops that decompress weights inside the program (affine dequantize, blockwise shift-scale,
palettized lookup tables), registered in mil.OPS like every other op; mil_program imports this module
so a program with compressed weights runs.
"""
from __future__ import annotations

import numpy as np

from arrcoc_edge.targets.coreml.mil import UnsupportedOp, _scalar, op


@op("constexpr_affine_dequantize")
def _affine_dequantize(a):
    """8-bit weights (iOS16/17): (q - zero_point) * scale, broadcast along `axis`."""
    q = a["quantized_data"]
    axis = int(_scalar(a["axis"])) % q.ndim
    shape = [1] * q.ndim
    zp, scale = np.asarray(a["zero_point"]), np.asarray(a["scale"])
    shape[axis] = -1
    zp = zp.reshape(shape) if zp.size > 1 else zp
    scale = scale.reshape(shape) if scale.size > 1 else scale
    return ((q.astype(np.float32) - zp.astype(np.float32)) * scale.astype(np.float32),)


@op("constexpr_blockwise_shift_scale")
def _blockwise_shift_scale(a):
    """8-bit weights (iOS18): (data - offset) * scale, each scale entry covering a block."""
    data = a["data"].astype(np.float32)
    scale = a["scale"]
    offset = a.get("offset")
    reps = [d // s for d, s in zip(data.shape, scale.shape)]
    if offset is not None:
        data = data - _expand_blocks(offset, reps)
    return ((data * _expand_blocks(scale, reps)).astype(scale.dtype),)


def _expand_blocks(x, reps):
    out = x.astype(np.float32)
    for axis, r in enumerate(reps):
        out = np.repeat(out, r, axis=axis)
    return out


@op("constexpr_lut_to_dense")
def _lut_to_dense(a):
    """Palettized weights (iOS16/17 form): lut[indices] with `shape`."""
    if "shape" not in a:
        raise UnsupportedOp("constexpr_lut_to_dense (iOS18 form)", "palettize for iOS17 or use linear 8-bit weights")
    lut, idx = a["lut"], a["indices"]
    n = int(np.prod(a["shape"]))
    bits = int(np.log2(lut.shape[-1]))
    flat = np.unpackbits(idx.astype(np.uint8), bitorder="little").reshape(-1, bits)
    codes = (flat * (1 << np.arange(bits))).sum(axis=1)[:n]
    return (lut[codes].reshape([int(v) for v in a["shape"]]),)
