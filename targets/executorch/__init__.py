"""executorch: the exported program lowered to XNNPACK-delegated .pte files (target.py), run in
ExecuTorch's Python runtime or the project's C++ runner (runtime.py) and timed by invoke bench (bench.py).
"""
