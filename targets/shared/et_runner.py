"""ExecuTorch programs run by the project's C++ runner (et_runner.cpp): the runtime's C++ API with no
Python, as an app's native code runs them, on this host (x86-64) and on the phones' arm64 kernels
(the aarch64 build under the emulation root's qemu-aarch64, one CPU model per process).

scripts/setup.d/65-executorch-runner.sh makes the tree (ROOT/x86_64/arrcoc-et-runner with x86's
executorch libraries; ROOT/aarch64/arrcoc-et-runner with the registry's aarch64 wheel's; ROOT/cross,
the cross compiler whose usr/aarch64-linux-gnu is qemu's -L sysroot). Its marker names the sha256
of the runner source it compiled: a tree built from another source is stale, not used.

A RunnerProcess serves requests (one model after another, every batch of a model on one load) over
its stdin; arrays go through raw files in a private temporary folder. A request line holds only
names this side made, relative to the runner's working folder (that private folder): the model is
reached through a link there, so a tab, newline or any other byte in a user's path (`--out
$'x\ty'`) never enters the tab-separated line, whose fields are checked to hold none. An emulator or runner that
cannot start, or ends without its answer, raises HostCapabilityError (the check is then "not
measured", with the reason); a program that the runtime refuses or that kills the process raises
GateError: measured, it does not run there.
"""
from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from arrcoc_edge import scratch
from arrcoc_edge import subproc
from arrcoc_edge.errors import GateError, HostCapabilityError
from arrcoc_edge.targets.shared import arm64
from arrcoc_edge.targets.shared.trusted_tree import check_tree

DEFAULT_ROOT = "/var/cache/arrcoc-edge/executorch-runner"
READY_MARKER = ".arrcoc-et-runner-ready"  # written by scripts/setup.d/65-executorch-runner.sh
SOURCE = Path(__file__).with_name("et_runner.cpp")
SETUP_FIX = "run bash scripts/setup.sh as root (its step scripts/setup.d/65-executorch-runner.sh makes it)"
# The qemu CPU models the .pte files are checked on: XNNPACK picks its ARM kernels by the CPU's
# features (dot product for int8 GEMMs, else plain NEON). qemu's `max` is left out: it offers SME,
# whose kernels qemu runs about 6x slower, and no phone in use has it.
# On x86 XNNPACK picks them by AVX-512, AVX2 and SSE: the x86-64 levels of arm64.CPUS, run by the
# x86 runner under qemu-x86_64 (PCs run the .pte through ExecuTorch's Python or C++ runtime).
CPUS = {
    "aarch64 dot product (emulated Cortex-A76)": ("cortex-a76", "Cortex-A76: NEON, FP16 and dot product"),
    "aarch64 NEON only (emulated Cortex-A53)": ("cortex-a53", "Cortex-A53: NEON, no dot product"),
    **{isa: arm64.CPUS[isa] for isa in arm64.X86_LEVELS},
}
_DTYPES = {"float32": "f32", "int64": "i64", "int32": "i32", "uint8": "u8"}
_NUMPY = {v: k for k, v in _DTYPES.items()}


def root_path() -> Path:
    return Path(os.path.realpath(os.environ.get("ARRCOC_ET_RUNNER_ROOT", DEFAULT_ROOT)))


def runner_tree() -> Path:
    """The runner tree, checked: complete, built from this source, and trusted whole (trusted_tree)."""
    root = root_path()
    if not (root / READY_MARKER).is_file():
        raise HostCapabilityError(f"no C++ ExecuTorch runner on this host ({root / READY_MARKER} is missing)", SETUP_FIX)
    check_tree(root, READY_MARKER, "the C++ ExecuTorch runner", SETUP_FIX)
    source = hashlib.sha256(SOURCE.read_bytes()).hexdigest() if SOURCE.is_file() else None
    if source is None or f"runner {source}" not in (root / READY_MARKER).read_text():
        raise HostCapabilityError(f"the C++ ExecuTorch runner at {root} was built from another et_runner.cpp", SETUP_FIX)
    return root


def command(isa: str | None, threads: int = 1) -> tuple[list[str], str]:
    """The runner's command line on this host (isa None) or on CPUS[isa] emulated, and its label."""
    root = runner_tree()
    if isa is None:
        return [str(root / "x86_64/arrcoc-et-runner"), "--threads", str(threads), "--serve"], "C++ runner, x86-64"
    arch = arm64.machine(isa)
    emulation = arm64.emulation_root(arch)
    qemu, cpu = arm64.qemu_name(emulation, arch), CPUS[isa][0]
    sysroot = ["-L", str(root / "cross/usr/aarch64-linux-gnu")] if arch == "aarch64" else []
    return ([str(emulation / f"qemu-{arch}"), "-cpu", cpu, *sysroot,
             str(root / arch / "arrcoc-et-runner"), "--threads", str(threads), "--serve"],
            f"C++ runner, {arch} under {qemu} -cpu {cpu}")


def identity(isa: str) -> dict[str, str]:
    """What an emulated run on CPUS[isa] depends on besides the program and its inputs: the runner
    tree's marker (recipe, executorch and cross-compiler versions, the runner source's sha256), the
    runner binary's and the emulator's bytes, the emulation root's marker, the CPU model. Trees are
    checked first (runner_tree, arm64.emulation_root): HostCapabilityError where they are unusable."""
    from arrcoc_edge.relevance.digest import sha256_file

    arch = arm64.machine(isa)
    root, emulation = runner_tree(), arm64.emulation_root(arch)
    return {"runner_marker": (root / READY_MARKER).read_text(), "runner": sha256_file(root / arch / "arrcoc-et-runner"),
            "emulator": sha256_file(emulation / f"qemu-{arch}"), "emulation_marker": "\n".join(arm64.marker_lines(emulation)),
            "cpu": CPUS[isa][0]}


class RunnerProcess:
    """One runner process (this host's, or one emulated CPU model) serving models one after another.
    A process that dies (a measured failure) is gone; the next request starts a fresh one."""

    def __init__(self, isa: str | None = None, threads: int = 1, timeout: float | None = None):
        self.isa, self.threads = isa, threads
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.folder: scratch.TemporaryFolder | None = None
        self.label = ""

    def __enter__(self) -> RunnerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        cmd, self.label = command(self.isa, self.threads)
        self.folder = self.folder or scratch.TemporaryFolder("arrcoc-arm64-et-", family="arrcoc-")  # swept after a kill -9
        home = Path(self.folder.name)
        # a clean environment (no QEMU_* or LD_* of the user's); OpenMP's pool sized as XNNPACK's
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "OMP_NUM_THREADS": str(self.threads)}
        self.stderr = open(home / "stderr.txt", "w+")
        try:
            self.proc = subproc.popen(cmd, env=env, cwd=home, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self.stderr)
        except OSError as exc:
            raise HostCapabilityError(f"the C++ ExecuTorch runner does not start ({exc.strerror}): {cmd[0]}", SETUP_FIX) from None

    def request(self, model: Path, method: str, inputs: list[np.ndarray], repeat: int = 0) -> tuple[list[np.ndarray], dict]:
        """`method` of `model` on `inputs` (in the method's order): its outputs, and what the runner
        reported (load_ms, first_ms, call_ms of `repeat` more timed calls, threads)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        with tempfile.TemporaryDirectory(dir=self.folder.name) as tmp:
            specs, here = [], os.path.basename(tmp)  # relative to the runner's working folder
            for i, array in enumerate(inputs):
                array = np.ascontiguousarray(array)
                (Path(tmp) / f"in{i}.bin").write_bytes(array.tobytes())
                specs.append(f"{_DTYPES[array.dtype.name]}:{'x'.join(map(str, array.shape))}:{here}/in{i}.bin")
            line = request_line([self._model_name(model), method, here, str(repeat), *specs])
            answer = self._ask(line, model)
            if "error" in answer:
                raise GateError(f"{Path(model).name} does not run in the C++ ExecuTorch runtime ({self.label}): "
                                f"{answer['error']}", "do not ship it; see the build log")
            try:
                outputs = [np.fromfile(Path(tmp) / f"out{i}.bin", dtype=_NUMPY[o["dtype"]]).reshape(o["shape"])
                           for i, o in enumerate(answer["outputs"])]
            except (OSError, ValueError, KeyError, TypeError) as exc:  # what it says cannot be trusted
                self._stop(kill=True)
                raise HostCapabilityError(f"the C++ ExecuTorch runner ({self.label}) answered {Path(model).name} "
                                          f"without readable outputs ({type(exc).__name__})", SETUP_FIX) from None
        return outputs, answer

    def _model_name(self, model: Path) -> str:
        """The model's name in the runner's working folder: a link to the resolved file, one per
        file (the runner keeps a model loaded while requests name it the same)."""
        real = os.path.realpath(model)
        name = f"model-{hashlib.sha256(os.fsencode(real)).hexdigest()[:24]}.pte"
        link = Path(self.folder.name) / name
        if not link.is_symlink():
            os.symlink(real, link)
        return name

    def _ask(self, line: str, model: Path) -> dict:
        limit = self.timeout or arm64.timeout_s()
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], limit)
        except (BrokenPipeError, ValueError):
            ready = [self.proc.stdout]
        if not ready:
            self._stop(kill=True)
            raise HostCapabilityError(f"the C++ ExecuTorch run of {Path(model).name} ({self.label}) did not finish in {limit:g} s",
                                      "on a slow or busy host set ARRCOC_ARM64_TIMEOUT to more seconds")
        text = self.proc.stdout.readline().decode().strip()
        try:
            answer = json.loads(text) if text else None
        except json.JSONDecodeError:
            answer = None
        if isinstance(answer, dict) and ("error" in answer or isinstance(answer.get("outputs"), list)):
            return answer
        code = self._stop()
        self.stderr.seek(0)
        tail = (self.stderr.read().strip().splitlines() or [f"exit status {code}"])[-1][:200]
        if code is not None and code < 0:  # killed by a signal on the model: measured, it does not run
            return {"error": f"the runner was killed by signal {-code} ({tail})"}
        raise HostCapabilityError(f"the C++ ExecuTorch runner ({self.label}) ended without an answer: {tail}", SETUP_FIX)

    def _stop(self, kill: bool = False) -> int | None:
        proc, self.proc = self.proc, None
        return None if proc is None else subproc.stop(proc, kill)

    def close(self) -> None:
        self._stop()
        if getattr(self, "stderr", None) is not None:
            self.stderr.close()
            self.stderr = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


def request_line(fields: list[str]) -> str:
    """The runner's request: tab-separated fields, one line. Every field is a name this module made;
    one holding a tab, a line break or a NUL would split or shift the request (and every answer
    after it), so it is refused here, never sent."""
    for field in fields:
        if any(c in field for c in "\t\n\r\0"):
            raise HostCapabilityError(f"a request field for the C++ ExecuTorch runner holds a control character "
                                      f"({field!r})", "report it: the runner's requests carry only names of its own folder")
    return "\t".join(fields)


def method_for(image: np.ndarray, square_side: int | None) -> str:
    """The .pte's 16G method for photos of exactly that size (as the Python runner picks), else forward."""
    return "forward_16g" if square_side is not None and image.shape[1] == image.shape[2] == square_side else "forward"


def timed(process: RunnerProcess, model: Path, inputs: list[np.ndarray], method: str = "forward") -> float:
    """Milliseconds of one steady-state call (one untimed call first), as the bench times a case."""
    started = time.perf_counter()
    _, answer = process.request(model, method, inputs, repeat=1)
    return answer["call_ms"][0] if answer["call_ms"] else (time.perf_counter() - started) * 1000.0
