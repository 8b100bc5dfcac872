"""ONNX and ORT models on emulated CPUs: the phones' arm64 and the x86-64 levels users' PCs run.

The phones' arm64: onnxruntime's aarch64 wheel under qemu-aarch64. The x86-64 levels below the
host's: this checkout's own Python and onnxruntime under qemu-x86_64 -cpu Nehalem / Haswell. One
table of CPU models (CPUS) for both.

The emulation root is made by scripts/setup.d/60-arm64-emulation.sh (trixie's qemu-aarch64, a
bookworm arm64 python3.11 sysroot, the registry's aarch64 onnxruntime and numpy at the pinned
versions). Models run in `qemu-aarch64 -L SYSROOT SYSROOT/usr/bin/python3.11 -I arm64_worker.py`:
one emulated process per CPU model serves every model of a stage (Emulator; start-up takes seconds),
each model over a whole list of batches, arrays exchanged through .npz files in a private temporary
folder. What the worker reports from inside the emulator (platform.machine(),
onnxruntime.__version__) names the runtime.

Honest unavailability: a missing, incomplete or untrusted root, or an emulator that cannot import
onnxruntime, raises HostCapabilityError with the reason and the fix; so does a run that exceeds
its time limit. A model that onnxruntime loads and then fails on arm64 raises GateError: measured.
"""
from __future__ import annotations

import json
import math
import os
import platform
import select
import statistics
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import numpy as np

from arrcoc_edge import scratch, subproc
from arrcoc_edge.errors import GateError, HostCapabilityError, SettingsError
from arrcoc_edge.relevance.digest import sha256_file
from arrcoc_edge.stages.target import Runner
from arrcoc_edge.targets.shared.run_cache import REUSED, cached_outputs
from arrcoc_edge.targets.shared.trusted_tree import check_tree

ISA = "aarch64 (emulated)"
X86_V3, X86_V2 = "x86-64-v3 (emulated Haswell)", "x86-64-v2 (emulated Nehalem)"
# The qemu CPU models each model is checked on. onnxruntime's MLAS picks its int8 GEMM by the CPU's
# features (i8mm: SMMLA; dot product: SDOT; else plain NEON) and its FP32 kernels by SVE and NEON,
# so one run per kernel path phones take: qemu's `max` (SVE2, i8mm: the newest phones' cores) and a
# Cortex-A55 (dot product, no i8mm or SVE: the little core of most phones in use, the A76/A78 class).
# On x86 it picks them by AVX-512/VNNI, AVX2 and SSE (u8s8 on AVX2 without VNNI sums pairs of
# products in saturating 16 bits): the levels below an AVX-512 host that PCs in use have, AVX2 without
# VNNI (Haswell, x86-64-v3) and SSE4.2 without AVX (Nehalem, x86-64-v2). Every host checks the same
# levels, its own included, so the outcome does not depend on which CPU builds.
CPUS = {
    ISA: ("max", "qemu's max: NEON, dot product, i8mm, SVE2"),
    "aarch64 dot product (emulated Cortex-A55)": ("cortex-a55", "Cortex-A55: NEON and dot product, no i8mm or SVE"),
    X86_V3: ("Haswell-noTSX", "Haswell: AVX2 and FMA, no AVX-512 or VNNI (x86-64-v3)"),
    X86_V2: ("Nehalem", "Nehalem: SSE4.2, no AVX (x86-64-v2)"),
}
DEFAULT_ROOT = "/var/cache/arrcoc-edge/arm64-bookworm"
READY_MARKER = ".arrcoc-arm64-ready"  # written by scripts/setup.d/60-arm64-emulation.sh
WORKER = Path(__file__).with_name("arm64_worker.py")
DEFAULT_TIMEOUT_S = 600
SETUP_FIX = "run bash scripts/setup.sh as root (its step scripts/setup.d/60-arm64-emulation.sh makes it)"


def root_path() -> Path:
    return Path(os.path.realpath(os.environ.get("ARRCOC_ARM64_ROOT", DEFAULT_ROOT)))


def timeout_s() -> float:
    """ARRCOC_ARM64_TIMEOUT, seconds a stage's emulated run may take (unset or empty: the default).
    A value that is not a finite number > 0 is the user's setting to fix, refused before any work
    (the targets call this from check_options), never a gate failure later."""
    text = os.environ.get("ARRCOC_ARM64_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise SettingsError(f"ARRCOC_ARM64_TIMEOUT={text[:40]!r} is not a number of seconds > 0",
                            f"set it to a positive number of seconds (default {DEFAULT_TIMEOUT_S}) or unset it")
    return value


def host_runs_arm64() -> bool:
    """True when this host's own kernels are already arm64 (nothing to emulate)."""
    return platform.machine().lower() in ("aarch64", "arm64")


def machine(isa: str) -> str:
    """The instruction set of a CPUS entry: x86_64 or aarch64."""
    return "x86_64" if isa.startswith("x86-64") else "aarch64"


def emulated(isas=None) -> list[str]:
    """The entries of `isas` (default: every CPUS entry) this host checks: on an x86-64 host all of
    them (the x86 levels run this checkout's own interpreter); on an arm64 host none (its own run is
    arm64's, and there is no x86 interpreter to emulate)."""
    if host_runs_arm64() or platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    return list(CPUS if isas is None else isas)


X86_LEVELS = tuple(isa for isa in CPUS if machine(isa) == "x86_64")


def other_isas(ctx, model: Path, isas=None) -> dict:
    """Target.other_isas for an .onnx or .ort file: a loader per emulated CPU of `isas` (default:
    every CPUS entry) this host checks; one emulated process per CPU model serves all of a stage's models
    (BuildContext.kept: start-up is most of the time)."""
    emulator = lambda isa: ctx.kept(f"emulated {isa}", lambda: Emulator(isa))  # noqa: E731
    return {isa: (lambda isa=isa: arm64_runner(model, isa=isa, emulator=emulator(isa), cache_log=ctx.log))
            for isa in emulated(isas)}


def emulation_root(arch: str = "aarch64") -> Path:
    """The emulation root, checked before it is trusted: complete (marker, the files the run of
    `arch` starts), and trusted whole (trusted_tree.check_tree: every one of its thousands of files
    owned by this user or root and writable by no one else, no link out of it), once per process and marker."""
    root, what = root_path(), "arm64" if arch == "aarch64" else "x86-64"
    if not root.is_dir():
        raise HostCapabilityError(f"no {what} emulation on this host ({root} is missing)", SETUP_FIX)
    if not (root / READY_MARKER).is_file():
        raise HostCapabilityError(f"the {what} emulation at {root} is incomplete (no {READY_MARKER})", SETUP_FIX)
    needed = [root / "qemu-x86_64"] if arch == "x86_64" else [
        root / "qemu-aarch64", root / "sysroot/usr/bin/python3.11", root / "site/onnxruntime", root / "site/numpy"]
    for path in needed:
        if not os.path.lexists(path):
            raise HostCapabilityError(f"the {what} emulation at {root} lacks {path.relative_to(root)}", SETUP_FIX)
    check_tree(root, READY_MARKER, "the arm64 emulation", SETUP_FIX)
    return root


def marker_lines(root: Path) -> list[str]:
    return (root / READY_MARKER).read_text().splitlines()


def qemu_name(root: Path, arch: str = "aarch64") -> str:
    """The emulator and its version as the runtime names it, e.g. 'qemu-x86_64 version 10.0.13' (both
    binaries come from one qemu-user package, whose version the marker's second line records)."""
    lines = marker_lines(root)
    text = lines[1].split(" (")[0] if len(lines) > 1 else "qemu-aarch64"
    return text.replace("qemu-aarch64", f"qemu-{arch}")


def arm64_runner(model: Path, timeout: float | None = None, isa: str = ISA, emulator: Emulator | None = None,
                 cache_log=None) -> Runner:
    """`model` (.onnx or .ort) in the aarch64 onnxruntime under qemu-user, on `isa`'s CPU model (CPUS).
    Runner.run_many runs a list of batches in one request to `emulator` (a stage's shared one, see
    Emulator; None: a process of its own, ended after the run); Runner.facts then holds what the
    emulator reported (machine, onnxruntime version, the CPU features it saw) and the time per call.
    With `cache_log` (a build's log), the outputs of an identical earlier run are reused (targets/shared/run_cache.py)."""
    arch = machine(isa)
    root = emulation_root(arch)
    qemu = qemu_name(root, arch)
    limit = timeout or timeout_s()
    cpu, cpu_text = CPUS[isa]
    wheel = "aarch64 wheel" if arch == "aarch64" else "this checkout's"
    runner = Runner(run=lambda inputs: run_many([inputs])[0],
                    runtime=f"onnxruntime ({wheel}, 1 thread) under {qemu} -cpu {cpu}")
    runner.facts = {"emulator": qemu, "cpu": cpu_text}

    def run_many(batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        started = time.monotonic()
        arrays = {f"b{i}_{name}": np.ascontiguousarray(a) for i, b in enumerate(batches) for name, a in b.items()}
        shapes = [f"{len(b['image'])} x {b['image'].shape[1]}x{b['image'].shape[2]}" if "image" in b else "-"
                  for b in batches]

        def fresh() -> tuple[list[dict[str, np.ndarray]], dict]:
            with scratch.TemporaryFolder("arrcoc-arm64-", family="arrcoc-") as tmp:  # swept after a kill -9
                folder = Path(tmp)
                np.savez(folder / "inputs.npz", count=np.array(len(batches)), **arrays)
                if emulator is None:
                    with Emulator(isa, root) as own:
                        facts = own.run(model, folder, limit)
                else:
                    facts = emulator.run(model, folder, limit)
                return _read_outputs(folder / "outputs.npz", len(batches), root), facts

        if cache_log is None:
            results, facts = fresh()
        else:
            identity = {"cpu": cpu, "emulator": sha256_file(root / f"qemu-{arch}"),
                        "emulation_marker": "\n".join(marker_lines(root))}
            results, facts, reused = cached_outputs(f"emulated-onnx-{cpu}", identity, model, batches, fresh, cache_log,
                                                    tools=("onnxruntime", "numpy"))
            facts = {**facts, "reused": REUSED} if reused else facts
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
        runner.facts.pop("reused", None)
        if "reused" in facts:
            runner.facts["reused"] = facts["reused"]
        return results

    runner.run_many = run_many
    return runner


def _read_outputs(path: Path, count: int, root: Path) -> list[dict[str, np.ndarray]]:
    """Each batch's outputs from the worker's outputs.npz; an unreadable file or a batch without
    outputs is the emulation's failure to report (not measured), not the model's."""
    try:
        with np.load(path, allow_pickle=False) as data:
            results = [{key.split("_", 1)[1]: data[key] for key in data.files if key.startswith(f"b{i}_")}
                       for i in range(count)]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise HostCapabilityError(f"the arm64 emulation at {root} wrote an unreadable outputs.npz ({type(exc).__name__})",
                                  f"remove {root}, then {SETUP_FIX}") from None
    if not all(results):
        raise HostCapabilityError(f"the arm64 emulation at {root} wrote outputs.npz without every batch's outputs",
                                  f"remove {root}, then {SETUP_FIX}")
    return results


class Emulator:
    """One emulated aarch64 Python on one CPU model, serving models one after another
    (arm64_worker.py). Its start-up, the emulated interpreter importing numpy and onnxruntime, took
    4 of the 5.5 s a variant's held-out run took here, so a stage's variants share one per CPU
    model (BuildContext.kept). A process that dies on a model (a measured failure) or overruns its
    limit is gone; the next model starts a fresh one. Closed: stdin ends, the worker exits."""

    def __init__(self, isa: str = ISA, root: Path | None = None):
        self.isa, self.cpu, self.arch = isa, CPUS[isa][0], machine(isa)
        self.root = root
        self.proc: subprocess.Popen | None = None
        self.folder: scratch.TemporaryFolder | None = None
        self.stderr = None  # the worker's stderr, a file in `folder`: the last line names a failure

    def __enter__(self) -> Emulator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> subprocess.Popen:
        self.root = self.root or emulation_root(self.arch)
        self.folder = self.folder or scratch.TemporaryFolder("arrcoc-arm64-emu-", family="arrcoc-")
        home, sysroot = Path(self.folder.name), self.root / "sysroot"
        if self.arch == "x86_64":  # this checkout's interpreter and onnxruntime on an older x86 CPU model
            cmd = [str(self.root / "qemu-x86_64"), "-cpu", self.cpu, sys.executable, "-I", str(WORKER),
                   sysconfig.get_paths()["purelib"]]
        else:
            cmd = [str(self.root / "qemu-aarch64"), "-cpu", self.cpu, "-L", str(sysroot), str(sysroot / "usr/bin/python3.11"),
                   "-I", str(WORKER), str(self.root / "site")]
        # a clean environment: the user's QEMU_* or PYTHON* variables must not change what runs
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
        if self.stderr is None:
            self.stderr = open(home / "stderr.txt", "w+")
        self.stderr.seek(0)
        self.stderr.truncate()
        try:
            return subproc.popen(cmd, env=env, cwd=home, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=self.stderr)
        except OSError as exc:
            raise HostCapabilityError(f"the arm64 emulator at {self.root} does not start ({exc.strerror})", SETUP_FIX) from None

    def run(self, model: Path, folder: Path, limit: float) -> dict:
        """`model` over folder/inputs.npz into folder/outputs.npz. Returns the facts the worker wrote."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        facts_path = folder / "facts.json"
        request = {"model": str(Path(model).resolve()), "inputs": str(folder / "inputs.npz"),
                   "outputs": str(folder / "outputs.npz"), "facts": str(facts_path)}
        answer = self._ask(json.dumps(request), limit, model)
        facts = _read_facts(facts_path)
        if answer == "done" and not facts:
            self._stop(kill=True)
            raise HostCapabilityError(f"the arm64 emulation at {self.root} answered {Path(model).name} with an unreadable "
                                      "facts.json", f"remove {self.root}, then {SETUP_FIX}")
        if answer == "done" and facts.get("stage") == "done":
            missing = [k for k, kind in FACTS.items() if not isinstance(facts.get(k), kind)]
            if missing or not (folder / "outputs.npz").is_file():
                self._stop(kill=True)  # what it says cannot be trusted: the next model starts a fresh one
                what = f"facts.json without {', '.join(missing)}" if missing else "no outputs.npz"
                raise HostCapabilityError(f"the arm64 emulation at {self.root} answered {Path(model).name} with {what}",
                                          f"remove {self.root}, then {SETUP_FIX}")
            return facts
        code = self._stop()
        self.stderr.seek(0)
        tail = (self.stderr.read().strip().splitlines() or [f"exit status {code}"])[-1][:200]
        if facts.get("stage") is None:
            raise HostCapabilityError(f"the arm64 emulation at {self.root} does not import onnxruntime ({tail})", SETUP_FIX)
        step = "loading" if facts["stage"] == "imported" else "running"
        raise GateError(f"{Path(model).name} failed on {self.isa}'s kernels while {step} in onnxruntime "
                        f"{facts.get('onnxruntime')}: {_exit(code)}: {tail}",
                        f"the model does not run on {self.isa}'s onnxruntime: do not ship it; see the build log")

    def _ask(self, request: str, limit: float, model: Path) -> str:
        """Send one request line; the answer line, or "" when the worker ended first."""
        try:
            self.proc.stdin.write(request.encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return ""
        ready, _, _ = select.select([self.proc.stdout], [], [], limit)
        if not ready:
            self._stop(kill=True)  # the next model starts a fresh process
            raise HostCapabilityError(f"the emulated arm64 run of {Path(model).name} did not finish in {limit:g} s",
                                      "on a slow or busy host set ARRCOC_ARM64_TIMEOUT to more seconds")
        return self.proc.stdout.readline().decode().strip()

    def _stop(self, kill: bool = False) -> int:
        """End the worker (subproc.stop): its exit status."""
        proc, self.proc = self.proc, None
        return subproc.stop(proc, kill)

    def close(self) -> None:
        if self.proc is not None:
            self._stop()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


# what a finished run's facts.json must hold, and of which type (arm64_worker.py writes them)
FACTS = {"machine": str, "onnxruntime": str, "python": str, "load_ms": (int, float), "call_ms": list}


def _read_facts(path: Path) -> dict:
    """The worker's facts.json; {} when it is missing or is not a JSON object (nothing is trusted)."""
    try:
        facts = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return facts if isinstance(facts, dict) else {}


def _exit(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"
