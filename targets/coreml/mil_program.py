"""A saved `.mlpackage`'s MIL program, loaded and run op by op with the NumPy ops of coreml/mil.py: a
reference check of the converted program on Linux (not Apple's runtime).
"""
from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError
from arrcoc_edge.targets.coreml import mil_weights  # noqa: F401 - registers the weight-decompression ops in OPS
from arrcoc_edge.targets.coreml.mil import _BLOB_DTYPES, _BLOB_SENTINEL, _DTYPES, OPS, UnsupportedOp


# ----------------------------------------------------------------------------------------------
class MilProgram:
    """The `main` function of a saved mlpackage, ready to evaluate op by op."""

    def __init__(self, package: Path):
        self.package = Path(package)
        self.spec = load_spec(self.package)
        if self.spec.WhichOneof("Type") != "mlProgram":
            raise ExportError(f"{self.package.name} is not an ML Program", "convert with convert_to='mlprogram'")
        fn = self.spec.mlProgram.functions["main"]
        self.opset = fn.opset
        block = fn.block_specializations[fn.opset]
        self.inputs = {v.name: _tensor_type(v.type) for v in fn.inputs}
        self.operations = list(block.operations)
        self.outputs = list(block.outputs)
        self.weights = WeightFile(self.package / "Data" / "com.apple.CoreML" / "weights" / "weight.bin")
        self.consts = self._decode_consts()

    def _decode_consts(self) -> dict[str, object]:
        """const ops are decoded once (weights read from weight.bin), not on every run."""
        out = {}
        for o in self.operations:
            if o.type == "const":
                out[o.outputs[0].name] = decode_value(o.attributes["val"], self.weights)
        return out

    def op_counts(self) -> Counter:
        return Counter(o.type for o in self.operations)

    def compute_dtype_counts(self) -> dict[str, int]:
        """How many non-const ops produce each dtype (e.g. {'fp16': 40, 'fp32': 60})."""
        names = {np.float16: "fp16", np.float32: "fp32", np.int32: "int32", np.bool_: "bool"}
        counts = Counter()
        for o in self.operations:
            if o.type != "const" and not o.type.startswith("constexpr_") and o.outputs:
                dtype = _tensor_type(o.outputs[0].type)[0]
                counts[names.get(dtype, np.dtype(dtype).name)] += 1
        return dict(sorted(counts.items()))

    def unsupported_ops(self) -> list[str]:
        return sorted({o.type for o in self.operations if o.type != "const" and o.type not in OPS})

    def _resolve(self, arg, env):
        vals = [env[b.name] if b.WhichOneof("binding") == "name" else decode_value(b.value, self.weights)
                for b in arg.arguments]
        return vals if len(vals) != 1 else vals[0]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = self.unsupported_ops()
        if missing:
            raise UnsupportedOp(f"MIL ops not implemented by the reference evaluator: {', '.join(missing)}",
                                "add them to targets/coreml/mil.py OPS, or change the conversion")
        env: dict[str, object] = dict(self.consts)
        for name, (dtype, _) in self.inputs.items():
            env[name] = np.asarray(feeds[name]).astype(dtype)
        for o in self.operations:
            if o.type == "const":
                continue
            args = {k: self._resolve(v, env) for k, v in o.inputs.items()}
            # iOS16/17 constexpr ops carry their operands as attributes, not inputs
            args.update({k: decode_value(v, self.weights) for k, v in o.attributes.items()
                         if k not in args and k != "name"})
            results = OPS[o.type](args)
            for spec_out, value in zip(o.outputs, results):
                dtype, _ = _tensor_type(spec_out.type)
                # keep the declared precision: an fp16 op yields fp16, whatever NumPy promoted to
                env[spec_out.name] = np.asarray(value).astype(dtype, copy=False)
        return {name: env[name] for name in self.outputs}


def load_spec(package: Path):
    import coremltools as ct

    return ct.utils.load_spec(str(package))


class WeightFile:
    """Reads blobs from an mlpackage's weight.bin (the MILBlob storage format)."""

    def __init__(self, path: Path):
        self.data = path.read_bytes() if path.is_file() else b""

    def read(self, offset: int, dtype, shape: tuple[int, ...]) -> np.ndarray:
        sentinel, code, size, data_offset = struct.unpack_from("<IIQQ", self.data, offset)
        if sentinel != _BLOB_SENTINEL:
            raise ExportError(f"weight.bin: no blob header at offset {offset}", "re-save the .mlpackage")
        stored = _BLOB_DTYPES.get(code)
        if stored is None:
            raise UnsupportedOp(f"weight.bin blob dtype code {code} is not supported", "use 8-bit or float weights")
        arr = np.frombuffer(self.data, dtype=stored, count=size // np.dtype(stored).itemsize, offset=data_offset)
        if np.dtype(dtype).itemsize != arr.itemsize:
            raise ExportError(f"weight.bin blob at {offset} holds {arr.dtype}, the program declares {np.dtype(dtype)}",
                              "re-save the .mlpackage")
        return arr.view(dtype).reshape(shape)


def _tensor_type(value_type):
    from coremltools.proto import MIL_pb2

    which = value_type.WhichOneof("type")
    if which != "tensorType":
        raise UnsupportedOp(f"MIL value of kind '{which}' is not supported", "only tensor values are evaluated")
    tt = value_type.tensorType
    dtype = _DTYPES[MIL_pb2.DataType.Name(tt.dataType)] if tt.dataType != MIL_pb2.STRING else str
    dims = tuple(d.constant.size if d.WhichOneof("dimension") == "constant" else -1 for d in tt.dimensions)
    return dtype, dims


def decode_value(value, weights: WeightFile):
    """A MIL Value (immediate or in weight.bin) -> NumPy array (or str/list of str)."""
    dtype, shape = _tensor_type(value.type)
    kind = value.WhichOneof("value")
    if kind == "blobFileValue":
        return weights.read(value.blobFileValue.offset, dtype, shape)
    tensor = value.immediateValue.tensor
    which = tensor.WhichOneof("value")
    if which == "strings":
        vals = list(tensor.strings.values)
        return vals[0] if not shape else vals
    if which == "bytes":
        arr = np.frombuffer(tensor.bytes.values, dtype=dtype)
    elif which is None:
        arr = np.zeros(0, dtype=dtype)
    else:
        arr = np.asarray(list(getattr(tensor, which).values)).astype(dtype)
    return arr.reshape(shape)
