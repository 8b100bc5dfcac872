"""ONNX and ORT models on the phones' arm64 kernels, here: onnxruntime's aarch64 wheel under qemu-user.

The emulation root is made by scripts/setup.d/60-arm64-emulation.sh (trixie's qemu-aarch64, a
bookworm arm64 python3.11 sysroot, the registry's aarch64 onnxruntime and numpy at the pinned
versions). A model runs as `qemu-aarch64 -L SYSROOT SYSROOT/usr/bin/python3.11 -I arm64_worker.py`,
one emulated process per model for a whole list of batches (start-up takes seconds), arrays
exchanged through .npz files in a private temporary folder. What the worker reports from inside
the emulator (platform.machine(), onnxruntime.__version__) names the runtime.

Honest unavailability: a missing, incomplete or untrusted root, or an emulator that cannot import
onnxruntime, raises HostCapabilityError with the reason and the fix; so does a run that exceeds
its time limit. A model that onnxruntime loads and then fails on arm64 raises GateError: measured.
"""
from __future__ import annotations

import json
import os
import platform
import stat
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline import subproc
from pipeline.errors import GateError, HostCapabilityError
from pipeline.stages.target import Runner

ISA = "aarch64 (emulated)"
# The qemu CPU models each model is checked on. onnxruntime's MLAS picks its int8 GEMM by the CPU's
# features (i8mm: SMMLA; dot product: SDOT; else plain NEON) and its FP32 kernels by SVE and NEON,
# so one run per kernel path phones take: qemu's `max` (SVE2, i8mm: the newest phones' cores) and a
# Cortex-A55 (dot product, no i8mm or SVE: the little core of most phones in use, the A76/A78 class).
CPUS = {
    ISA: ("max", "qemu's max: NEON, dot product, i8mm, SVE2"),
    "aarch64 dot product (emulated Cortex-A55)": ("cortex-a55", "Cortex-A55: NEON and dot product, no i8mm or SVE"),
}
DEFAULT_ROOT = "/var/cache/arrcoc-edge/arm64-bookworm"
READY_MARKER = ".arrcoc-arm64-ready"  # written by scripts/setup.d/60-arm64-emulation.sh
WORKER = Path(__file__).with_name("arm64_worker.py")
DEFAULT_TIMEOUT_S = 600
SETUP_FIX = "run bash scripts/setup.sh as root (its step scripts/setup.d/60-arm64-emulation.sh makes it)"


def root_path() -> Path:
    return Path(os.path.realpath(os.environ.get("ARRCOC_ARM64_ROOT", DEFAULT_ROOT)))


def timeout_s() -> float:
    try:
        return float(os.environ.get("ARRCOC_ARM64_TIMEOUT", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def host_runs_arm64() -> bool:
    """True when this host's own kernels are already arm64 (nothing to emulate)."""
    return platform.machine().lower() in ("aarch64", "arm64")


def emulation_root() -> Path:
    """The emulation root, checked before it is trusted: complete (marker), and every path the run
    executes or imports owned by this user or root and writable by no one else (a shared cache
    another user could write would run their code in this build)."""
    root = root_path()
    if not root.is_dir():
        raise HostCapabilityError(f"no arm64 emulation on this host ({root} is missing)", SETUP_FIX)
    if not (root / READY_MARKER).is_file():
        raise HostCapabilityError(f"the arm64 emulation at {root} is incomplete (no {READY_MARKER})", SETUP_FIX)
    me = os.getuid()
    for path in (root, root / READY_MARKER, root / "qemu-aarch64", root / "sysroot", root / "sysroot/usr/bin/python3.11",
                 root / "site", root / "site/onnxruntime", root / "site/numpy"):
        try:
            st = os.lstat(path)
        except OSError:
            raise HostCapabilityError(f"the arm64 emulation at {root} lacks {path.relative_to(root)}", SETUP_FIX) from None
        if stat.S_ISLNK(st.st_mode) or st.st_uid not in (me, 0) or st.st_mode & 0o022:
            raise HostCapabilityError(
                f"the arm64 emulation at {root} is not trusted: {path} is a link, another user's, or writable by others",
                f"remove {root}, then {SETUP_FIX}")
    return root


def marker_lines(root: Path) -> list[str]:
    return (root / READY_MARKER).read_text().splitlines()


def arm64_runner(model: Path, timeout: float | None = None, isa: str = ISA) -> Runner:
    """`model` (.onnx or .ort) in the aarch64 onnxruntime under qemu-user, on `isa`'s CPU model (CPUS).
    Runner.run_many runs a list of batches in one emulated process; Runner.facts then holds what the
    emulator reported (machine, onnxruntime version, the CPU features it saw) and the time per call."""
    root = emulation_root()
    lines = marker_lines(root)
    qemu = lines[1].split(" (")[0] if len(lines) > 1 else "qemu-aarch64"
    limit = timeout or timeout_s()
    cpu, cpu_text = CPUS[isa]
    runner = Runner(run=lambda inputs: run_many([inputs])[0],
                    runtime=f"onnxruntime (aarch64 wheel, 1 thread) under {qemu} -cpu {cpu}")
    runner.facts = {"emulator": qemu, "cpu": cpu_text}

    def run_many(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="arrcoc-arm64-") as tmp:
            folder = Path(tmp)
            arrays = {f"b{i}_{name}": np.ascontiguousarray(a) for i, b in enumerate(batches) for name, a in b.items()}
            shapes = [f"{len(b['image'])} x {b['image'].shape[1]}x{b['image'].shape[2]}" if "image" in b else "-"
                      for b in batches]
            np.savez(folder / "inputs.npz", count=np.array(len(batches)), **arrays)
            facts = _emulate(root, model, folder, limit, cpu)
            with np.load(folder / "outputs.npz") as data:
                results = [{key.split("_", 1)[1]: data[key] for key in data.files if key.startswith(f"b{i}_")}
                           for i in range(len(batches))]
        runner.runtime = (f"onnxruntime {facts['onnxruntime']} (CPUExecutionProvider, ORT_ENABLE_ALL, 1 thread) "
                          f"on {facts['machine']} under {qemu} -cpu {cpu}")
        calls = facts["call_ms"]
        runner.facts.update(machine=facts["machine"], onnxruntime=facts["onnxruntime"], python=facts["python"],
                            cpu_features=facts.get("cpu_features"),
                            load_ms=facts["load_ms"], calls=len(calls),
                            ms_per_call_median=round(statistics.median(calls), 1) if calls else None,
                            ms_per_call_max=max(calls) if calls else None,
                            # each call's batch (photos x height x width) and time, first call included
                            call_ms=[{"batch": shape, "ms": ms} for shape, ms in zip(shapes, calls)],
                            wall_s=round(time.monotonic() - started, 1))
        return results

    runner.run_many = run_many
    return runner


def _emulate(root: Path, model: Path, folder: Path, limit: float, cpu: str) -> dict:
    """One emulated process: the worker over folder/inputs.npz. Returns the facts it wrote."""
    sysroot, facts_path = root / "sysroot", folder / "facts.json"
    cmd = [str(root / "qemu-aarch64"), "-cpu", cpu, "-L", str(sysroot), str(sysroot / "usr/bin/python3.11"), "-I", str(WORKER),
           str(root / "site"), str(Path(model).resolve()), str(folder / "inputs.npz"), str(folder / "outputs.npz"),
           str(facts_path)]
    # a clean environment: the user's QEMU_* or PYTHON* variables must not change what runs
    env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "LANG": "C.UTF-8"}
    try:
        proc = subproc.run(cmd, env=env, cwd=folder, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise HostCapabilityError(f"the emulated arm64 run of {model.name} did not finish in {limit:g} s",
                                  "on a slow or busy host set ARRCOC_ARM64_TIMEOUT to more seconds") from None
    except OSError as exc:
        raise HostCapabilityError(f"the arm64 emulator at {root} does not start ({exc.strerror})", SETUP_FIX) from None
    facts = json.loads(facts_path.read_text()) if facts_path.is_file() else {}
    tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1][:200]
    if facts.get("stage") is None:
        raise HostCapabilityError(f"the arm64 emulation at {root} does not import onnxruntime ({tail})", SETUP_FIX)
    if proc.returncode != 0 or facts.get("stage") != "done":
        step = "loading" if facts["stage"] == "imported" else "running"
        raise GateError(f"{model.name} failed on arm64 kernels ({ISA}) while {step} in onnxruntime "
                        f"{facts.get('onnxruntime')}: {_exit(proc.returncode)}: {tail}",
                        "the model does not run on the phones' arm64 onnxruntime: do not ship it; see the build log")
    return facts


def _exit(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"
