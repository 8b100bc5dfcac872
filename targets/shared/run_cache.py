"""The outputs of a verification run, kept by content in the conversion cache.

Some runs read nothing but the model's bytes, its input arrays and what the runtime is made of: an
emulated run (a model on an ARM CPU model or an older x86 level under qemu-user: the emulator and
runner binaries, the emulation root, the CPU model) and a run in the page in headless Chromium (the
site's files, the browser's binary). Given the same, they give the same outputs. A build that runs
an identical one again (a warm build into another folder, the test suite's builds) takes the
earlier outputs and holds them to its gate afresh. Only a run that finished is kept: a failure, an
overrun or a page error raises before anything is stored.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np

OUTPUTS = "outputs.npz"
REUSED = ("the outputs of an identical earlier run (same model bytes, inputs and runtime: emulator, runner and "
          "CPU model, or site files and browser); the times are that run's")


def arrays_digest(batches: list[dict[str, np.ndarray]], extra: str = "") -> str:
    """sha256 over every batch's arrays: names, dtypes, shapes and bytes, in order."""
    h = hashlib.sha256(extra.encode())
    for i, batch in enumerate(batches):
        for name in sorted(batch):
            array = np.ascontiguousarray(batch[name])
            h.update(f"\0{i}\0{name}\0{array.dtype.str}\0{array.shape}\0".encode() + array.tobytes())
    return h.hexdigest()


def cached_outputs(kind: str, identity: dict[str, str], model: Path, batches: list[dict[str, np.ndarray]],
                   run: Callable[[], tuple[list[dict[str, np.ndarray]], dict]], log, extra: str = "",
                   tools: tuple[str, ...] = ("numpy",)) -> tuple[list[dict[str, np.ndarray]], dict, bool]:
    """(outputs per batch, the record `run` returned with them, reused) for `model` over `batches`:
    `run()` -> (outputs, record JSON), or an identical earlier run's, from the conversion cache under
    `kind` and a key of the model's bytes, the batches, `extra`, `identity` (what the runtime is)
    and the versions of `tools` (the libraries the run uses where they are this host's)."""
    from arrcoc_edge import scratch
    from arrcoc_edge.relevance.digest import sha256_file
    from arrcoc_edge.stages.conversion_cache import convert_cached

    ran = []

    def run_and_keep(folder: Path) -> dict:
        outputs, record = run()
        ran.append(outputs)
        np.savez(folder / OUTPUTS, **{f"b{i}_{k}": v for i, out in enumerate(outputs) for k, v in out.items()})
        return {**record, "batches": len(outputs)}

    inputs = {"model": sha256_file(model), "inputs": arrays_digest(batches, extra), **identity}
    with scratch.folder("arrcoc-run-", family="arrcoc-") as dest:
        record = convert_cached(kind, inputs, tools, run_and_keep, Path(dest), log, keep=24)
        if ran:
            return ran[0], record, False
        with np.load(Path(dest) / OUTPUTS, allow_pickle=False) as data:
            outputs = [{k.split("_", 1)[1]: data[k] for k in data.files if k.startswith(f"b{i}_")}
                       for i in range(record["batches"])]
    return outputs, record, True
