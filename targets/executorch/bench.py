"""`invoke bench`'s ExecuTorch rows: a .pte timed on one thread in a worker process whose XNNPACK
pool was sized before it loaded anything (PoolWorker), and in the project's C++ runner
(cpp_bench_case): what an app's native code pays without Python.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError

from arrcoc_edge.targets.executorch.runtime import SQUARE_METHOD, _program, pte_runner
from arrcoc_edge.targets.shared import et_runner


def cpp_bench_case(path: Path, max_batch: int, name: str, note: str | None) -> list:
    """The .pte in the project's C++ runner on one thread: what an app's native code pays with no
    Python, beside the Python bindings' 1-thread row. None where set-up built no runner here."""
    from arrcoc_edge.errors import HostCapabilityError
    from arrcoc_edge.stages.target import BenchCase

    try:
        et_runner.runner_tree()
    except HostCapabilityError:
        return []
    import atexit

    process = et_runner.RunnerProcess(None, threads=1)
    atexit.register(process.close)
    program = _program(path)  # the 16G method's side, read as pte_runner reads it
    side = (int(program.load_method(SQUARE_METHOD).metadata.input_tensor_meta(0).sizes()[1])
            if SQUARE_METHOD in program.method_names else None)

    def run(inputs: dict) -> float:  # an untimed call, then the timed one, both in the runner
        image = np.ascontiguousarray(inputs["image"], dtype=np.uint8)
        method = et_runner.method_for(image, side)
        return et_runner.timed(process, path, [image, np.ascontiguousarray(inputs["query"], dtype=np.float32)], method)

    label = lambda n: f"executorch {n} (C++ runner, 1 thread)"  # noqa: E731
    return [BenchCase(label(name), run, 1, self_timed=True, warm_call=False, max_batch=max_batch,
                      compare_to=label("fp32") if name != "fp32" else None, speed_note=note)]


class PoolWorker:
    """A .pte run in a child process whose XNNPACK pool was sized once, at start, before any program
    was loaded (and its OpenMP pool by OMP_NUM_THREADS): the only safe way to time ExecuTorch on a
    pool other than this process's (above).

    run(inputs) hands the worker the inputs once per distinct input (a pipe, untimed), then asks
    for an untimed call and a timed one back to back (steady state, as the other cases); it returns
    the milliseconds the worker measured around the timed call (the same runner as in-process:
    tensors from numpy, execute, outputs copied out)."""

    def __init__(self, path: Path, max_batch: int, threads: int):
        import atexit
        import subprocess
        import sys

        from arrcoc_edge import subproc

        to_child, self._send = (subproc.high_fd(fd) for fd in os.pipe())  # fds 0-2 closed by the caller
        self._recv, from_child = (subproc.high_fd(fd) for fd in os.pipe())
        # the same interpreter, isolated (subproc.python_command): it imports arrcoc_edge as this
        # process did, never a module of the caller's working folder
        code = ("from arrcoc_edge.targets.executorch.bench import _serve_pool_worker; "
                "_serve_pool_worker(%r, %d, %d, %d, %d)" % (str(path), max_batch, threads, to_child, from_child))
        # The kernels outside XNNPACK (libexecutorch_kernels_optimized) parallelise with OpenMP, a
        # second pool that _unsafe_reset_threadpool does not size: OMP_NUM_THREADS does. Without it
        # a "1-thread" run used 2 OpenMP threads, and on this 2-core host a batch of 8 took 16.5 ms
        # instead of 1.8 ms (the windows alone, measured): the threads contended with the pool.
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        # the child's own output (cpuinfo, XNNPACK, import warnings) goes where this process's does
        exe = subproc.interpreter()
        if exe is None:
            raise ExportError(f"no Python interpreter to start the ExecuTorch worker (sys.executable is {sys.executable!r})",
                              "set sys.executable to the path of this Python's interpreter")
        self._proc = subprocess.Popen(subproc.python_command(exe, code), pass_fds=(to_child, from_child), env=env)
        os.close(to_child)
        os.close(from_child)
        self._w, self._r = os.fdopen(self._send, "wb"), os.fdopen(self._recv, "rb")
        atexit.register(self.close)
        self._key = None
        self.threads = self._ask(("threads",))

    def _ask(self, message):
        import pickle

        pickle.dump(message, self._w, protocol=pickle.HIGHEST_PROTOCOL)
        self._w.flush()
        try:
            status, value = pickle.load(self._r)
        except EOFError:
            raise ExportError(f"the ExecuTorch worker process stopped (exit {self._proc.wait()})",
                              "run the bench with --verbose and read OUT/bench.log") from None
        if status != "ok":
            raise ExportError(f"the ExecuTorch worker failed: {value}", "read OUT/bench.log")
        return value

    def run(self, inputs: dict) -> float:
        key = (id(inputs["image"]), inputs["image"].shape, id(inputs["query"]))
        if key != self._key:
            self._ask(("inputs", {k: np.ascontiguousarray(v) for k, v in inputs.items()}))
            self._key = key
        return self._ask(("run",))

    def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                self._w.close()
            try:
                self._proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - a stuck worker must not hang the exit
                self._proc.kill()


def _serve_pool_worker(path: str, max_batch: int, threads: int, rfd: int, wfd: int) -> None:
    """The worker's loop (PoolWorker): size the pool, load the program, answer until the pipe closes."""
    import pickle
    import time

    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(threads)
    runner = pte_runner(Path(path), max_batch)
    r, w = os.fdopen(rfd, "rb"), os.fdopen(wfd, "wb")
    inputs = None
    while True:
        try:
            message = pickle.load(r)
        except EOFError:
            return
        try:
            if message[0] == "threads":
                reply = portable_lib._threadpool_get_thread_count()
            elif message[0] == "inputs":
                inputs, reply = message[1], None
            else:
                runner.run(inputs)
                start = time.perf_counter()
                runner.run(inputs)
                reply = (time.perf_counter() - start) * 1000.0
            pickle.dump(("ok", reply), w)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
            pickle.dump(("error", f"{type(exc).__name__}: {exc}"), w)
        w.flush()
