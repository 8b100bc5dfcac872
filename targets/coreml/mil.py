"""A NumPy reference evaluator for the MIL program inside a saved `.mlpackage`.

CoreML predictions only run on macOS (coremltools has no Linux runtime). On other hosts this
module is the reference check of the CONVERTED program: it reads the package the way CoreML would
(the spec's mlProgram, its `main` function, the weights in `weights/weight.bin`), then evaluates
the operations one by one, in order, with NumPy. It is NOT Apple's runtime: kernels, fusions and
accumulation precision on the CPU / GPU / Neural Engine may differ. It does keep every op in the
dtype the program declares for its output (an fp16 op is rounded to fp16), so an FP16 program's
numerics are exercised rather than silently computed in float32. Matrix products and convolutions
accumulate in float32 and round the result, as GPU and Neural Engine kernels do.

Only the operations our models use are implemented; any other op raises UnsupportedOp naming it.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from arrcoc_edge.errors import ExportError

# MIL.proto DataType names -> NumPy dtypes.
_DTYPES = {
    "BOOL": np.bool_, "FLOAT16": np.float16, "FLOAT32": np.float32, "FLOAT64": np.float64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
}
# Dtype strings used by the `cast` op's `dtype` argument.
_CAST = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int8": np.int8, "uint8": np.uint8,
         "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "int64": np.int64, "bool": np.bool_}
# weight.bin: each blob starts with a 64-byte header (sentinel, dtype, size, data offset, ...).
_BLOB_SENTINEL = 0xDEADBEEF
_BLOB_DTYPES = {1: np.float16, 2: np.float32, 3: np.uint8, 4: np.int8, 5: np.uint16, 6: np.int16,
                7: np.int32, 8: np.uint32}


class UnsupportedOp(ExportError):
    """The program uses a MIL op this evaluator does not implement."""


# ----------------------------------------------------------------------------------------------
# Op implementations: each takes the op's named inputs (a dict) and returns a tuple of outputs.
# ----------------------------------------------------------------------------------------------
OpFn = Callable[[dict], tuple]
OPS: dict[str, OpFn] = {}


def op(*names: str):
    def register(fn):
        for name in names:
            OPS[name] = fn
        return fn

    return register


def _scalar(x, default=None):
    if x is None:
        return default
    return x.item() if isinstance(x, np.ndarray) else x


def _axes(x, ndim):
    if x is None:
        return None
    return tuple(int(a) % ndim for a in np.atleast_1d(x))


_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "floor_div": np.floor_divide, "mod": np.mod,
    "greater": np.greater, "greater_equal": np.greater_equal, "less": np.less,
    "less_equal": np.less_equal, "equal": np.equal, "not_equal": np.not_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
}


def _binary(fn):
    return lambda a: (fn(a["x"], a["y"]),)


for _name, _fn in _BINARY.items():
    OPS[_name] = _binary(_fn)

_UNARY = {
    "sqrt": np.sqrt, "exp": np.exp, "abs": np.abs, "square": np.square, "floor": np.floor,
    "ceil": np.ceil, "sign": np.sign, "tanh": np.tanh, "logical_not": np.logical_not,
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "identity": lambda x: x,
}
for _name, _fn in _UNARY.items():
    OPS[_name] = (lambda f: lambda a: (f(a["x"]),))(_fn)


@op("log")
def _log(a):
    x = a["x"]
    return (np.log(x + x.dtype.type(_scalar(a.get("epsilon"), 0.0))),)


@op("rsqrt")
def _rsqrt(a):
    x = a["x"]
    return (1 / np.sqrt(x + x.dtype.type(_scalar(a.get("epsilon"), 1e-12))),)


@op("inverse")
def _inverse(a):
    x = a["x"]
    return (1 / (x + x.dtype.type(_scalar(a.get("epsilon"), 1e-4))),)


@op("clip")
def _clip(a):
    return (np.clip(a["x"], a["alpha"], a["beta"]),)


@op("select")
def _select(a):
    return (np.where(a["cond"], a["a"], a["b"]),)


@op("cast")
def _cast(a):
    """MIL cast. Float -> integer: the spec leaves fractions and out-of-range values unspecified,
    so the evaluator accepts only values the target type holds and truncates toward zero (C's
    conversion); the programs here cast floor()ed, clamped photo indices, which are whole numbers."""
    x, dtype = a["x"], np.dtype(_CAST[_scalar(a["dtype"])])
    if np.issubdtype(dtype, np.integer) and x.dtype != np.bool_ and x.size:
        # also integer -> narrower integer: coremltools' add_int16_cast pass casts int32 gather
        # indices to int16 / uint16 whatever their run-time values; wrapping would hide that
        info, lo, hi = np.iinfo(dtype), float(x.min()), float(x.max())
        if not (np.isfinite(lo) and np.isfinite(hi)) or lo < info.min or hi > info.max:
            raise ExportError(f"cast of {x.dtype} values {lo:g}..{hi:g} to {dtype}, outside its range "
                              "(undefined in MIL)", "keep such values in int32 (or clamp them before the cast)")
        if np.issubdtype(x.dtype, np.floating):
            return (np.trunc(x).astype(dtype),)
    return (x.astype(dtype),)


def _reduce(fn):
    def run(a):
        x = a["x"]
        keep = bool(_scalar(a.get("keep_dims"), False))
        return (fn(x, axis=_axes(a.get("axes"), x.ndim), keepdims=keep),)

    return run


def _l2(x, axis, keepdims):
    return np.sqrt(np.sum(np.square(x), axis=axis, keepdims=keepdims))


for _name, _fn in {
    "reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min,
    "reduce_prod": np.prod, "reduce_l2_norm": _l2,
    "reduce_sum_square": lambda x, axis, keepdims: np.sum(np.square(x), axis=axis, keepdims=keepdims),
}.items():
    OPS[_name] = _reduce(_fn)


@op("softmax")
def _softmax(a):
    x = a["x"]
    axis = int(_scalar(a.get("axis"), -1))
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True),)


@op("layer_norm")
def _layer_norm(a):
    """(x - mean) / sqrt(var + epsilon) * gamma + beta over `axes`, in float32 (biased variance)."""
    x = a["x"].astype(np.float32)
    axes = _axes(a.get("axes"), x.ndim) or tuple(range(x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = np.square(x - mean).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float32(_scalar(a.get("epsilon"), 1e-5)))
    if a.get("gamma") is not None:
        y = y * a["gamma"].astype(np.float32)
    if a.get("beta") is not None:
        y = y + a["beta"].astype(np.float32)
    return (y.astype(a["x"].dtype),)


@op("gelu")
def _gelu(a):
    """MIL gelu: EXACT (erf), TANH_APPROXIMATION or SIGMOID_APPROXIMATION, in float32."""
    from scipy.special import erf

    x = a["x"].astype(np.float32)
    mode = _scalar(a.get("mode"), "EXACT")
    if mode == "EXACT":
        y = 0.5 * x * (1 + erf(x / np.float32(np.sqrt(2.0))))
    elif mode == "TANH_APPROXIMATION":
        y = 0.5 * x * (1 + np.tanh(np.float32(np.sqrt(2 / np.pi)) * (x + np.float32(0.044715) * x ** 3)))
    elif mode == "SIGMOID_APPROXIMATION":
        y = x / (1 + np.exp(np.float32(-1.702) * x))
    else:
        raise UnsupportedOp(f"gelu mode {mode}", "convert with an exact or tanh gelu")
    return (y.astype(a["x"].dtype),)


@op("range_1d")
def _range_1d(a):
    start, end, step = (_scalar(a[k]) for k in ("start", "end", "step"))
    return (np.arange(start, end, step),)


@op("topk")
def _topk(a):
    x, k = a["x"], int(_scalar(a.get("k"), 1))
    axis = int(_scalar(a.get("axis"), -1))
    ascending = bool(_scalar(a.get("ascending"), False))
    # stable sort: among ties the lower index first, as torch's CPU topk does
    order = np.argsort(x if ascending else -x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int32)


@op("linear")
def _linear(a):
    x, w = a["x"], a["weight"]
    y = x.astype(np.float32) @ w.astype(np.float32).T
    if a.get("bias") is not None:
        y = y + a["bias"].astype(np.float32)
    return (y.astype(x.dtype),)


@op("matmul")
def _matmul(a):
    x, y = a["x"].astype(np.float32), a["y"].astype(np.float32)
    if _scalar(a.get("transpose_x"), False):
        x = np.swapaxes(x, -1, -2)
    if _scalar(a.get("transpose_y"), False):
        y = np.swapaxes(y, -1, -2)
    return ((x @ y).astype(a["x"].dtype),)


def _spatial_pads(a, ndim_spatial, kernel, strides, dilations, in_shape):
    """MIL pad_type (valid / custom / same / same_lower) -> [(before, after)] per spatial dim."""
    pad_type = _scalar(a.get("pad_type"), "valid")
    if pad_type == "valid":
        return [(0, 0)] * ndim_spatial
    if pad_type == "custom":
        p = [int(v) for v in np.atleast_1d(a.get("pad", np.zeros(2 * ndim_spatial)))]
        return [(p[2 * i], p[2 * i + 1]) for i in range(ndim_spatial)]
    pads = []
    for size, k, s, d in zip(in_shape, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        half = total // 2
        pads.append((total - half, half) if pad_type == "same_lower" else (half, total - half))
    return pads


@op("conv")
def _conv(a):
    """2-D convolution (groups supported), accumulated in float32."""
    x, w = a["x"], a["weight"]
    if x.ndim != 4:
        raise UnsupportedOp(f"conv with {x.ndim - 2} spatial dims", "only 2-D convolutions are evaluated")
    strides = [int(v) for v in np.atleast_1d(a.get("strides", np.ones(2)))]
    dil = [int(v) for v in np.atleast_1d(a.get("dilations", np.ones(2)))]
    groups = int(_scalar(a.get("groups"), 1))
    pads = _spatial_pads(a, 2, w.shape[2:], strides, dil, x.shape[2:])
    xp = np.pad(x.astype(np.float32), [(0, 0), (0, 0), *pads])
    n, c, h, wd = xp.shape
    o, cg, kh, kw = w.shape
    oh = (h - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (wd - (kw - 1) * dil[1] - 1) // strides[1] + 1
    wf = w.astype(np.float32)
    out = np.zeros((n, o, oh, ow), np.float32)
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dil[0]: i * dil[0] + strides[0] * (oh - 1) + 1: strides[0],
                           j * dil[1]: j * dil[1] + strides[1] * (ow - 1) + 1: strides[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, wf[g * og:(g + 1) * og, :, i, j])
    if a.get("bias") is not None:
        out += a["bias"].astype(np.float32)[None, :, None, None]
    return (out.astype(x.dtype),)


def _pool_impl(a, reduce_max: bool):
    x = a["x"]
    k = [int(v) for v in np.atleast_1d(a["kernel_sizes"])]
    s = [int(v) for v in np.atleast_1d(a["strides"])]
    if x.ndim != 4 or _scalar(a.get("ceil_mode"), False):
        raise UnsupportedOp("pooling other than 2-D floor mode", "use a 2-D pool without ceil_mode")
    pads = _spatial_pads(a, 2, k, s, [1, 1], x.shape[2:])
    if any(p != (0, 0) for p in pads):
        raise UnsupportedOp("padded pooling", "pool with a fixed kernel and no padding (as the model does)")
    n, c, h, w = x.shape
    oh, ow = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
    windows = np.stack([x[:, :, i: i + s[0] * (oh - 1) + 1: s[0], j: j + s[1] * (ow - 1) + 1: s[1]]
                        for i in range(k[0]) for j in range(k[1])])
    out = windows.max(axis=0) if reduce_max else windows.astype(np.float32).mean(axis=0)
    return (out.astype(x.dtype),)


OPS["avg_pool"] = lambda a: _pool_impl(a, reduce_max=False)
OPS["max_pool"] = lambda a: _pool_impl(a, reduce_max=True)


@op("pad")
def _pad(a):
    x = a["x"]
    p = [int(v) for v in np.atleast_1d(a["pad"])]
    pairs = [(0, 0)] * (x.ndim - len(p) // 2) + [(p[2 * i], p[2 * i + 1]) for i in range(len(p) // 2)]
    mode = _scalar(a.get("mode"), "constant")
    if mode == "constant":
        return (np.pad(x, pairs, constant_values=_scalar(a.get("constant_val"), 0.0)),)
    return (np.pad(x, pairs, mode={"replicate": "edge", "reflect": "reflect"}[mode]),)


@op("concat")
def _concat(a):
    if _scalar(a.get("interleave"), False):
        raise UnsupportedOp("concat with interleave", "convert without interleaved concat")
    values = a["values"] if isinstance(a["values"], list) else [a["values"]]
    # shape arithmetic concatenates scalars (rank 0) into a shape vector
    values = [np.atleast_1d(v) for v in values]
    return (np.concatenate(values, axis=int(_scalar(a["axis"]))),)


@op("stack")
def _stack(a):
    values = a["values"] if isinstance(a["values"], list) else [a["values"]]
    return (np.stack(values, axis=int(_scalar(a["axis"]))),)


@op("reshape")
def _reshape(a):
    return (a["x"].reshape([int(v) for v in np.atleast_1d(a["shape"])]),)


@op("transpose")
def _transpose(a):
    return (np.transpose(a["x"], [int(v) for v in a["perm"]]),)


@op("expand_dims")
def _expand_dims(a):
    x = a["x"]
    axes = sorted(int(v) for v in np.atleast_1d(a["axes"]))
    out_rank = x.ndim + len(axes)
    for ax in sorted(v % out_rank for v in axes):
        x = np.expand_dims(x, ax)
    return (x,)


@op("squeeze")
def _squeeze(a):
    x = a["x"]
    axes = a.get("axes")
    return (np.squeeze(x) if axes is None else np.squeeze(x, axis=_axes(axes, x.ndim)),)


@op("tile")
def _tile(a):
    return (np.tile(a["x"], [int(v) for v in a["reps"]]),)


@op("shape")
def _shape(a):
    return (np.array(a["x"].shape, dtype=np.int32),)


@op("fill")
def _fill(a):
    return (np.full([int(v) for v in np.atleast_1d(a["shape"])], _scalar(a.get("value"), 0.0), np.float32),)


@op("slice_by_index")
def _slice_by_index(a):
    x = a["x"]
    nd = x.ndim
    begin = [int(v) for v in np.atleast_1d(a["begin"])]
    end = [int(v) for v in np.atleast_1d(a["end"])]
    stride = [int(v) for v in np.atleast_1d(a.get("stride", np.ones(nd)))]
    bmask = [bool(v) for v in np.atleast_1d(a.get("begin_mask", np.zeros(nd, bool)))]
    emask = [bool(v) for v in np.atleast_1d(a.get("end_mask", np.zeros(nd, bool)))]
    smask = [bool(v) for v in np.atleast_1d(a.get("squeeze_mask", np.zeros(nd, bool)))]
    index = []
    for i in range(nd):
        if smask[i]:
            index.append(begin[i])
            continue
        index.append(slice(None if bmask[i] else begin[i], None if emask[i] else end[i], stride[i]))
    return (x[tuple(index)],)


@op("slice_by_size")
def _slice_by_size(a):
    x = a["x"]
    begin = [int(v) for v in a["begin"]]
    size = [int(v) for v in a["size"]]
    return (x[tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))],)


def _checked_indices(indices, size: int, what: str) -> np.ndarray:
    """iOS17 gathers: indices in [0, size). A negative or too-large index is out of bounds (with
    validate_indices False its result is undefined), so the evaluator refuses it, never wraps."""
    idx = np.asarray(indices).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise ExportError(f"{what}: index out of bounds [0, {size}) (min {idx.min()}, max {idx.max()}); "
                          "undefined in MIL iOS17", "the program computed an index outside the tensor")
    return idx


@op("gather")
def _gather(a):
    """MIL gather (iOS16+ batch_dims): K = D[:axis] + N[batch_dims:] + D[axis+1:], as tf.gather."""
    x = a["x"]
    axis = int(_scalar(a.get("axis"), 0)) % x.ndim
    batch_dims = int(_scalar(a.get("batch_dims"), 0))
    idx = _checked_indices(a["indices"], x.shape[axis], "gather")
    if batch_dims == 0:
        return (np.take(x, idx, axis=axis),)
    if batch_dims < 0:
        batch_dims += idx.ndim
    if x.shape[:batch_dims] != idx.shape[:batch_dims]:
        raise ExportError("gather: batch dimensions of x and indices differ", "check the program")
    lead = x.shape[:batch_dims]
    xs = x.reshape(-1, *x.shape[batch_dims:])
    ids = idx.reshape(-1, *idx.shape[batch_dims:])
    out = np.stack([np.take(xs[i], ids[i], axis=axis - batch_dims) for i in range(xs.shape[0])])
    return (out.reshape(*lead, *out.shape[1:]),)


@op("gather_along_axis")
def _gather_along_axis(a):
    """MIL gather_along_axis: out[..., i, ...] = x[..., indices[..., i, ...], ...] along `axis`;
    indices have x's rank, and their other dimensions are those of x (no broadcasting)."""
    x = a["x"]
    axis = int(_scalar(a.get("axis"), 0)) % x.ndim
    idx = _checked_indices(a["indices"], x.shape[axis], "gather_along_axis")
    if idx.ndim != x.ndim or any(i != d for k, (i, d) in enumerate(zip(idx.shape, x.shape)) if k != axis):
        raise ExportError(f"gather_along_axis: indices {idx.shape} do not fit x {x.shape} off axis {axis}",
                          "check the program")
    return (np.take_along_axis(x, idx, axis=axis),)


@op("split")
def _split(a):
    x = a["x"]
    axis = int(_scalar(a["axis"]))
    if a.get("split_sizes") is not None:
        cuts = np.cumsum([int(v) for v in a["split_sizes"]])[:-1]
        return tuple(np.split(x, cuts, axis=axis))
    return tuple(np.split(x, int(_scalar(a["num_splits"])), axis=axis))


