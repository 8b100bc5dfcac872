#!/usr/bin/env python3
"""GPU check for the tensorrt target, for a GPU machine that has only torch (CUDA), numpy and
the TensorRT(-RTX) Python packages (no project install, no package index):

    pip install --no-deps tensorrt_rtx_cu13_libs-*.whl tensorrt_rtx_cu13_bindings-*-cp3XX-*.whl
    python scripts/gpu_check.py artifacts/tensorrt/model.fp32.plan --onnx model.onnx

It uses the target's own adapter (targets/tensorrt/backend.py, loaded by path so the rest of the
project's dependencies are not needed) and prints, one line each: the GPU and its compute
capability; the backend; the target's host check (what `load()` would raise); the plan header's
validity and diagnostics; whether the plan deserialises; if it does, the plan's I/O and a
comparison with onnxruntime (CPU) on random inputs; and (TensorRT-RTX) whether a plan can be built
for this GPU's own compute capability. Exit code 0 means every step ran (not that the plan ran).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # for arrcoc_edge.errors (plain Python, no dependencies)


def load_adapter():
    spec = importlib.util.spec_from_file_location("trt_backend", REPO / "targets" / "trt_backend.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["trt_backend"] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def header_validity(backend, data: bytes) -> str:
    runtime = backend.trt.Runtime(backend.logger)
    validity, diagnostics = runtime.get_engine_validity(data[: runtime.engine_header_size])
    flags = [n for n, v in backend.trt.EngineInvalidityDiagnostics.__members__.items() if diagnostics & int(v)]
    return f"{validity.name} (diagnostics={diagnostics}: {', '.join(flags) or 'none'})"


def compare_with_onnxruntime(runner, onnx_path: str) -> None:
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    # the contract's photo: uint8 [B,H,W,3] at its own size (16G square, a landscape, 12 MP)
    for batch, (height, width) in ((1, (224, 224)), (8, (224, 224)), (1, (300, 451)), (1, (3024, 4032))):
        feeds = {"image": rng.integers(0, 256, (batch, height, width, 3), dtype=np.uint8),
                 "query": rng.standard_normal((batch, 384)).astype(np.float32)}
        want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        got = runner.run(feeds)
        rel = float(np.abs(got["relevance"] - want["relevance"]).max())
        overlap = np.mean([len(set(a) & set(b)) / a.size for a, b in zip(got["topk_indices"], want["topk_indices"])])
        print(f"run batch {batch}, {width}x{height}: relevance max abs vs onnxruntime CPU {rel:.3g}, "
              f"top-K overlap {overlap:.3f}")


def build_for_this_gpu(backend, onnx_path: str, dst: Path) -> str:
    """TensorRT-RTX only: can it build a plan for the GPU in this host (ComputeCapability.CURRENT)?"""
    trt = backend.trt
    builder = trt.Builder(backend.logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, backend.logger)
    if not parser.parse(sys.modules["trt_backend"].prepare_onnx(Path(onnx_path))):  # as the target does
        return f"parse failed: {parser.get_error(0).desc()}"
    config = builder.create_builder_config()
    config.num_compute_capabilities = 1
    config.set_compute_capability(trt.ComputeCapability.CURRENT, 0)
    profile = builder.create_optimization_profile()
    tb = sys.modules["trt_backend"]  # the target's own profile: batch and photo sides dynamic
    contract = {"image": [None, None, None, 3], "query": [None, 384]}
    for name, (low, opt, high) in tb.profile_shapes(contract, 224, 16, 8192).items():
        profile.set_shape(name, low, opt, high)
    config.add_optimization_profile(profile)
    backend.logger.messages.clear()
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        return "failed: " + " ".join((backend.logger.errors() or ["no message"])[-1].split())[:300]
    dst.write_bytes(memoryview(plan))
    return f"built {plan.nbytes} bytes"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plan", help="a plan built by `invoke build --target tensorrt`")
    ap.add_argument("--onnx", help="the ONNX model the plan came from (artifacts/onnx/model.onnx), for comparison and a CURRENT build; "
                         "constant subgraphs are folded as the target does")
    ap.add_argument("--ccs", default=None, help="the plan's compute capabilities (default: TensorRT-RTX's list)")
    args = ap.parse_args()
    tb = load_adapter()
    from arrcoc_edge.errors import ArrcocError

    import torch

    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), Python {sys.version.split()[0]}")
    cc, desc = tb.gpu_compute_capability()
    print(f"GPU: {desc}, compute capability {cc}")
    backend = tb.load_backend()
    print(f"backend: {backend.label} (module {backend.trt.__name__})")
    ccs = args.ccs.split(",") if args.ccs else list(tb.RTX_COMPUTE_CAPABILITIES)
    try:
        tb.check_host(ccs, backend.label)
        print("target host check: this GPU is supported by the plan")
    except ArrcocError as exc:
        print(f"target host check: {exc.one_line()}")
    data = Path(args.plan).read_bytes()
    print(f"plan: {args.plan}, {len(data)} bytes; header validity: {header_validity(backend, data)}")
    started = time.monotonic()
    try:
        runner = tb.PlanRunner(backend, Path(args.plan))
    except ArrcocError as exc:
        runner = None
        print(f"deserialize: {exc.one_line()}")
    if runner is not None:
        try_runner(runner, args.onnx, started)
    if backend.rtx and args.onnx:
        current = Path("/tmp/gpu_check.current.plan")
        print(f"build for this GPU (ComputeCapability.CURRENT): {build_for_this_gpu(backend, args.onnx, current)}")
        if current.is_file():
            started = time.monotonic()
            try:
                try_runner(tb.PlanRunner(backend, current), args.onnx, started)
            except ArrcocError as exc:
                print(f"deserialize (CURRENT plan): {exc.one_line()}")
    return 0


def try_runner(runner, onnx_path, started) -> None:
    print(f"deserialize: OK in {time.monotonic() - started:.2f}s; plan I/O: {runner.io()}")
    if onnx_path:
        compare_with_onnxruntime(runner, onnx_path)
    runner.close()


if __name__ == "__main__":
    sys.exit(main())
