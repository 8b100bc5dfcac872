"""One thin adapter over the two TensorRT Python APIs: full TensorRT (`tensorrt`) and TensorRT for
RTX (`tensorrt_rtx_bindings`). Both expose the same Builder / OnnxParser / builder config /
build_serialized_network / Runtime API; the few places where they differ are the methods of
`Backend` marked "differs" below. Everything else (parsing, I/O checks, running a plan) is shared.

Facts this relies on (checked with tensorrt-rtx-cu13 1.7.1.116, see TOOLCHAIN.md):
- TensorRT-RTX builds plans ahead of time on a CPU-only host, for a list of compute capabilities
  (SM75 cannot run this model: "FP32 GEMM is not supported" on Turing, so it is left out).
- TensorRT-RTX networks are strongly typed: there is no FP16 builder flag; precision follows the
  ONNX model's types (FP32 model -> FP32 plan, QDQ model -> INT8 plan).
- TensorRT-RTX's timing-cache calls are deprecated no-ops ("Timing cache operations are no-ops in
  TensorRT-RTX"); full TensorRT keeps and reuses one.
- Deserialising a plan needs a CUDA driver, on both backends.

This module imports only numpy and arrcoc_edge.errors at load time, so scripts/gpu_check.py can use it
on a GPU machine that lacks the rest of the project's dependencies.
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError, HostCapabilityError, MissingExtraError

# (module, display name, is RTX): full TensorRT first, it is the one data-centre GPUs and Jetson run.
_MODULES = (("tensorrt", "TensorRT", False), ("tensorrt_rtx_bindings", "TensorRT-RTX", True))
RTX_COMPUTE_CAPABILITIES = ("8.0", "8.6", "8.9", "12.0", "12.1")
PROFILE = (1, 8, 64)  # min / opt / max batch of the optimization profile
INSTALL_FIX = "pip install -e '.[tensorrt]' (TensorRT-RTX from PyPI), or install NVIDIA's full TensorRT"


def module_available() -> bool:
    """True when either backend's module can be found (without importing its 100 MB of libraries)."""
    import importlib.util

    for module, _, _ in _MODULES:
        try:
            if importlib.util.find_spec(module) is not None:
                return True
        except (ValueError, ImportError):  # sys.modules[module] is None: blocked on purpose
            continue
    return False


class CaptureLogger:
    """Factory for an ILogger that keeps warnings and errors, so they can be reported in one line
    (TensorRT's own logger prints multi-line blocks straight to stderr)."""

    def __new__(cls, trt):
        class _Logger(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)
                self.messages: list[tuple[int, str]] = []

            def log(self, severity, msg):
                if int(severity) <= int(trt.ILogger.Severity.WARNING):
                    self.messages.append((int(severity), str(msg)))

            def errors(self) -> list[str]:
                return [m for s, m in self.messages if s <= int(trt.ILogger.Severity.ERROR)]

        return _Logger()


@dataclass
class Backend:
    trt: object  # the imported module
    name: str
    version: str
    rtx: bool
    logger: object = None

    def __post_init__(self):
        self.logger = CaptureLogger(self.trt)

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    # ---- differs: precision ------------------------------------------------------------
    @property
    def supports_fp16(self) -> bool:
        """Full TensorRT lowers an FP32 network to FP16 with a builder flag; RTX has no such flag."""
        return not self.rtx and hasattr(self.trt.BuilderFlag, "FP16")

    def fp16_unavailable_reason(self) -> str:
        return (f"{self.label} builds strongly typed networks only (no FP16 builder flag): an FP16 plan "
                "would need an FP16 ONNX model, which the pipeline does not produce")

    # ---- differs: compute capabilities ---------------------------------------------------
    def set_compute_capabilities(self, config) -> list[str]:
        """RTX: an explicit list (AOT for several GPU generations). Full TensorRT: the plan runs on
        the GPU it was built on (same compute capability), which is the one in this host."""
        if not self.rtx:
            cc, _ = gpu_compute_capability()
            return [cc] if cc else []
        enum = self.trt.ComputeCapability
        wanted = [getattr(enum, "SM" + cc.replace(".", "")) for cc in RTX_COMPUTE_CAPABILITIES]
        config.num_compute_capabilities = len(wanted)
        for i, cc in enumerate(wanted):
            if not config.set_compute_capability(cc, i):
                raise ExportError(f"{self.label} rejected compute capability {cc}", "check the backend version")
        return list(RTX_COMPUTE_CAPABILITIES)

    # ---- differs: timing cache -------------------------------------------------------------
    def attach_timing_cache(self, config, path: Path | None) -> dict:
        if self.rtx:
            return {"used": False, "reason": f"{self.label}: timing cache operations are no-ops (deprecated since 1.2)"}
        if path is None:
            return {"used": False, "reason": "no cache folder for this build (not built under an out dir)"}
        data = path.read_bytes() if path.is_file() else b""
        config.set_timing_cache(config.create_timing_cache(data), False)
        return {"used": True, "path": str(path), "loaded_bytes": len(data)}

    def save_timing_cache(self, config, path: Path | None) -> None:
        if self.rtx or path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(memoryview(config.get_timing_cache().serialize()))
        os.replace(tmp, path)  # atomic: a concurrent or interrupted build never sees half a cache


def load_backend() -> Backend:
    """The first backend that imports; MissingExtraError when neither does."""
    problems = []
    for module, name, rtx in _MODULES:
        try:
            trt = importlib.import_module(module)
        except (ImportError, OSError) as exc:  # OSError: the wheel is there but its libraries are not
            problems.append(f"{module}: {type(exc).__name__}")
            continue
        return Backend(trt, name, getattr(trt, "__version__", "unknown"), rtx)
    raise MissingExtraError(f"no TensorRT backend is importable ({'; '.join(problems)})", INSTALL_FIX)


# ------------------------------------------------------------------ parsing


@dataclass
class Parsed:
    """A parsed network and the objects that must stay alive while it is built."""

    backend: Backend
    builder: object
    network: object
    parser: object
    source: str
    io: dict = field(default_factory=dict)
    strongly_typed: bool = True


def parse_onnx(backend: Backend, model_bytes: bytes, source: str, strongly_typed: bool = True) -> Parsed:
    """Parse an ONNX model into a network; a rejected node raises one line naming it. Strongly typed
    (precision = the model's types) except for full TensorRT's FP16 flag, which needs weak typing."""
    trt = backend.trt
    builder = trt.Builder(backend.logger)
    flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if strongly_typed else 0
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, backend.logger)
    if not parser.parse(model_bytes):
        raise ExportError(f"{backend.label} cannot import {source}: {parser_error(parser)}",
                          "change the model so the node uses ops/attributes TensorRT supports, or export with another opset")
    return Parsed(backend, builder, network, parser, source, network_io(network), strongly_typed)


def parser_error(parser) -> str:
    """The first parser error as one line: node name, op type, and TensorRT's description."""
    if parser.num_errors == 0:
        return "parse failed without an error message"
    err = parser.get_error(0)
    desc = " ".join(str(err.desc()).split())[:240]
    more = f" (+{parser.num_errors - 1} more)" if parser.num_errors > 1 else ""
    return f"node '{err.node_name()}' ({err.node_operator()}, #{err.node()}): {desc}{more}"


def network_io(network) -> dict:
    """name -> {mode, shape (-1 = dynamic), dtype} of a parsed network's inputs and outputs."""
    io = {}
    for mode, count, get in (("input", network.num_inputs, network.get_input),
                             ("output", network.num_outputs, network.get_output)):
        for i in range(count):
            t = get(i)
            io[t.name] = {"mode": mode, "shape": list(t.shape), "dtype": t.dtype.name}
    return io


# ------------------------------------------------------------------ building


def profile_shapes(contract: dict[str, list], opt_side: int, min_side: int, max_side: int) -> dict[str, tuple]:
    """(min, opt, max) shapes of each input for one optimization profile, from the contract's
    shapes (None = dynamic): the batch over PROFILE, a dynamic photo side over min..max with
    `opt_side` (16G, the size the model resizes to) as the shape TensorRT tunes for."""
    shapes = {}
    for name, dims in contract.items():
        picks = []
        for batch, side in zip(PROFILE, (min_side, opt_side, max_side)):
            picks.append(tuple(batch if i == 0 else side if d is None else d for i, d in enumerate(dims)))
        shapes[name] = tuple(picks)
    return shapes


def build_plan(parsed: Parsed, dst: Path, precision: str, input_shapes: dict[str, tuple],
               timing_cache: Path | None, opt_level: int = 3) -> dict:
    """Build and write a serialized plan with one optimization profile (`input_shapes`: name ->
    (min, opt, max) shapes, see profile_shapes); returns the settings to record in the manifest,
    the profile as the builder holds it read back from the profile object."""
    backend, trt = parsed.backend, parsed.backend.trt
    config = parsed.builder.create_builder_config()
    config.builder_optimization_level = opt_level
    if precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)  # full TensorRT only (supports_fp16)
    profile = parsed.builder.create_optimization_profile()
    for name, shapes in input_shapes.items():
        profile.set_shape(name, *shapes)
    if not profile:  # an IOptimizationProfile is falsy when its shapes are inconsistent
        raise ExportError(f"{backend.label} rejected the optimization profile {input_shapes}",
                          "check the profile against the network's inputs")
    config.add_optimization_profile(profile)
    held = {name: dict(zip(("min", "opt", "max"), ([int(v) for v in s] for s in profile.get_shape(name))))
            for name in input_shapes}
    ccs = backend.set_compute_capabilities(config)
    cache = backend.attach_timing_cache(config, timing_cache)
    backend.logger.messages.clear()
    plan = parsed.builder.build_serialized_network(parsed.network, config)
    if plan is None:
        errors = backend.logger.errors() or ["no message"]
        raise ExportError(f"{backend.label} failed to build the {precision} plan from {parsed.source}: "
                          f"{' '.join(errors[-1].split())[:240]}", "rerun with --verbose; check the model's ops")
    dst.write_bytes(memoryview(plan))
    backend.save_timing_cache(config, timing_cache)
    return {
        "precision": precision,
        "network": "strongly typed" if parsed.strongly_typed else "weakly typed + FP16 flag",
        "optimization_profile": held,
        "builder_optimization_level": opt_level,
        "compute_capabilities": ccs,
        "timing_cache": cache,
    }


# ------------------------------------------------------------------ running


def gpu_compute_capability() -> tuple[str | None, str]:
    """(compute capability like "9.0", description) of GPU 0, or (None, why there is none)."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return f"{major}.{minor}", torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - a broken CUDA torch is the same as none here
        pass
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap,name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        line = proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else ""
        if line:
            cc, name = (s.strip() for s in line.split(",", 1))
            return cc, name
        return None, f"nvidia-smi found no usable GPU ({(proc.stderr or proc.stdout).strip()[:120]})"
    return None, "no NVIDIA GPU on this host (no nvidia-smi, torch has no CUDA device)"


def check_host(plan_ccs: list[str], backend_label: str) -> str:
    """The GPU's compute capability when the plan can run here; HostCapabilityError otherwise."""
    supported = ", ".join(plan_ccs) or "the build GPU's only"
    cc, desc = gpu_compute_capability()
    if cc is None:
        raise HostCapabilityError(f"{backend_label} plans run on compute capability {supported} and {desc}",
                                  "verify on a host with a supported NVIDIA GPU")
    if plan_ccs and cc not in plan_ccs:
        raise HostCapabilityError(f"{backend_label} plans run on compute capability {supported} and this "
                                  f"host's GPU ({desc}) has {cc}", "verify on a host with a supported NVIDIA GPU")
    return cc


_TORCH_DTYPES = {"FLOAT": "float32", "HALF": "float16", "INT32": "int32", "INT64": "int64", "BOOL": "bool",
                 "UINT8": "uint8"}


class PlanRunner:
    """A deserialised plan run through an execution context, with torch CUDA tensors as buffers."""

    def __init__(self, backend: Backend, plan: Path):
        import torch

        if not torch.cuda.is_available():
            raise HostCapabilityError("torch in this environment has no CUDA, so no device buffers can be "
                                      "allocated for the plan", "install a CUDA build of torch to verify")
        self.torch, self.backend = torch, backend
        backend.logger.messages.clear()
        self.runtime = backend.trt.Runtime(backend.logger)
        self.engine = self.runtime.deserialize_cuda_engine(plan.read_bytes())
        if self.engine is None:
            errors = backend.logger.errors() or ["no message"]
            raise ExportError(f"{plan.name} failed to deserialize in {backend.label}: "
                              f"{' '.join(errors[-1].split())[:240]}", "rebuild the plan with the backend version and for the GPU that will run it")
        self.context = self.engine.create_execution_context()
        self.names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]

    def io(self) -> dict:
        """The plan's own I/O (names, shapes, dtypes), read from the deserialised engine."""
        mode_in = self.backend.trt.TensorIOMode.INPUT
        return {n: {"mode": "input" if self.engine.get_tensor_mode(n) == mode_in else "output",
                    "shape": list(self.engine.get_tensor_shape(n)), "dtype": self.engine.get_tensor_dtype(n).name}
                for n in self.names}

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch, trt = self.torch, self.backend.trt
        keep = {}
        for name, arr in inputs.items():
            keep[name] = torch.from_numpy(np.ascontiguousarray(arr)).cuda()
            self.context.set_input_shape(name, tuple(arr.shape))
        for name in self.names:
            if self.engine.get_tensor_mode(name) == trt.TensorIOMode.OUTPUT:
                dtype = getattr(torch, _TORCH_DTYPES[self.engine.get_tensor_dtype(name).name])
                keep[name] = torch.empty(tuple(self.context.get_tensor_shape(name)), dtype=dtype, device="cuda")
            self.context.set_tensor_address(name, keep[name].data_ptr())
        stream = torch.cuda.current_stream()
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise ExportError(f"{self.backend.label} execution failed: {self.backend.logger.errors()[-1:]}",
                              "rerun with --verbose")
        stream.synchronize()
        return {n: keep[n].cpu().numpy() for n in self.names if n not in inputs}

    def close(self) -> None:
        self.context = self.engine = self.runtime = None


# ------------------------------------------------------------------ what the parser is given


def prepare_onnx(path: Path) -> bytes:
    """The model's bytes as TensorRT's parser can take them, computing the same values:
    - constant-only subgraphs folded. Why: the exporter (optimize=False, see onnx_common.export_onnx)
      leaves ReduceL2's axes as Reshape(Constant), and TensorRT's parser requires reduce axes that are
      plain initializers. Folding evaluates exactly those nodes with ONNX's reference implementation,
      so no value changes (unlike a general optimiser, which rewrites `x + eps`); a node that cannot
      be evaluated is left for the parser to report;
    - a Cast after each uint8 graph input (cast_uint8_inputs): the network input stays UINT8."""
    import onnx

    model = onnx.load(str(path))
    fold_constants(model)
    cast_uint8_inputs(model)
    return model.SerializeToString()


# What a uint8 network input is cast to before any other layer reads it: float16 holds every byte
# value exactly (every integer up to 2048) in half the bytes of float32 or int32.
UINT8_CAST_TO = "FLOAT16"
UINT8_NOTE = ("TensorRT layers take no UINT8 tensors (TensorRT-RTX 1.7's parser: 'Gather: Found unsupported "
              "input type of UINT8'); UINT8 is accepted as a network input followed by a Cast, so the plan's "
              "`image` input is UINT8 as the contract says and its first layer casts the photo to float16, which "
              "holds every byte value exactly (a float16 copy of the photo on the GPU: 2 bytes per byte handed "
              "over, 73 MB at 12 MP)")


def cast_uint8_inputs(model) -> list[str]:
    """Insert `Cast(to=UINT8_CAST_TO)` after every uint8 graph input and point its readers, in the
    graph and in If / Loop subgraphs, at the cast. Values are unchanged (uint8 -> float16 is exact);
    the graph input keeps its name and type. Returns the inputs cast."""
    from onnx import TensorProto, helper

    to = getattr(TensorProto, UINT8_CAST_TO)
    cast = [i.name for i in model.graph.input if i.type.tensor_type.elem_type == TensorProto.UINT8]
    renamed = {name: f"{name}__as_{UINT8_CAST_TO.lower()}" for name in cast}

    def rewire(graph):
        for node in graph.node:
            for k, name in enumerate(node.input):
                if name in renamed:
                    node.input[k] = renamed[name]
            for attr in node.attribute:
                if attr.type == attr.GRAPH:
                    rewire(attr.g)
                for g in attr.graphs:
                    rewire(g)

    if cast:
        rewire(model.graph)
        nodes = [helper.make_node("Cast", [name], [renamed[name]], name=f"cast_{name}_uint8", to=to) for name in cast]
        rest = list(model.graph.node)
        del model.graph.node[:]
        model.graph.node.extend(nodes + rest)
    return cast


def fold_constants(model) -> int:
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    init_names = {i.name for i in graph.initializer}
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    kept, folded = [], 0
    for node in graph.node:
        if node.domain in ("", "ai.onnx") and all(i == "" or i in values for i in node.input):
            outs = _evaluate(node, values, model.opset_import)
            if outs is not None:
                values.update(zip(node.output, outs))
                folded += 1
                continue
        kept.append(node)
    needed = {o.name for o in graph.output}
    live = []
    for node in reversed(kept):  # drop what no output needs any more
        if any(o in needed for o in node.output):
            live.append(node)
            needed.update(i for i in node.input if i)
    consts = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(values[name]), name))
              for name in values if name in needed and name not in init_names]
    del graph.node[:]
    graph.node.extend(consts + live[::-1])
    return folded


def _evaluate(node, values, opsets):
    import numpy as np
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    try:
        inits = [numpy_helper.from_array(np.asarray(values[i]), i) for i in dict.fromkeys(node.input) if i]
        outs = [helper.make_tensor_value_info(o, 0, None) for o in node.output]
        graph = helper.make_graph([node], "fold", [], outs, initializer=inits)
        return ReferenceEvaluator(helper.make_model(graph, opset_imports=opsets)).run(None, {})
    except Exception:  # noqa: BLE001 - not evaluable here: leave it in the graph for TensorRT to judge
        return None
