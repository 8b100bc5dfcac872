"""The app's query encoder .pte on the phones' arm64 kernels, its emulated outputs kept between builds.

The C++ ExecuTorch runner under qemu-user runs it on each CPU model of et_runner.CPUS, held to the
encoder's own gate (targets/app_encoder.py chooses the encoder and computes its metrics; this module
supplies the embeddings they are computed from).

Each distinct token sequence runs once per CPU model, and the outputs are kept in the conversion
cache under the .pte's bytes, the token ids and et_runner.identity (runner, emulator, CPU model):
a later build of the same encoder re-applies the gate to them without emulating again. The record
of each CPU model says how its outputs were obtained (`run`), which contract.json leaves out.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from arrcoc_edge import scratch
from arrcoc_edge.errors import GateError, HostCapabilityError
from arrcoc_edge.relevance.digest import sha256_file
from arrcoc_edge.stages.conversion_cache import convert_cached
from arrcoc_edge.stages.parity import Gate
from arrcoc_edge.stages.target import BuildContext
from arrcoc_edge.targets.shared import arm64, et_runner


def arm64_checks(ctx: BuildContext, path: Path, gate: Gate, metrics_of, batch_dim: bool,
                 ids_needed: list[list[int]]) -> tuple[dict, list[str]]:
    """The encoder .pte on the phones' arm64 kernels (the C++ runner under qemu-user, each CPU model of
    et_runner.CPUS), held to the same gate: `metrics_of(embed_ids)` computes the host's numbers with
    that runtime's embeddings of the token ids in `ids_needed` (each distinct sequence runs once:
    arm64_embeddings). Returns the per-ISA records and the failures ("ISA: ..."); a CPU model that
    cannot be emulated here is recorded as not measured, with the reason."""
    if arm64.host_runs_arm64():
        return {}, []
    records, failures = {}, []
    for isa in et_runner.CPUS:
        process = ctx.kept(f"et-runner {isa}", lambda isa=isa: et_runner.RunnerProcess(isa))
        started = time.monotonic()
        try:
            embeddings, run = arm64_embeddings(ctx, path, isa, process, ids_needed, batch_dim)
            metrics = metrics_of(lambda ids: embeddings[tuple(int(i) for i in ids)])
        except HostCapabilityError as exc:
            records[isa] = {"measured": False, "reason": f"not measured: {exc.problem}"}
            ctx.log(f"query encoder: not measured on {isa}: {exc.problem}")
            continue
        except GateError as exc:
            records[isa], failures = {"measured": True, "passed": False, "failures": [exc.problem]}, failures + [f"{isa}: {exc.problem}"]
            continue
        wrong = gate.parity_failures(metrics)
        records[isa] = {"measured": True, "passed": not wrong, "runtime": process.label or et_runner.command(isa)[1],
                        "metrics": {k: v for k, v in metrics.items() if k != "size_bytes"}, "run": run,
                        **({"failures": wrong} if wrong else {})}
        failures += [f"{isa}: {f}" for f in wrong]
        ctx.log(f"query encoder on {isa}: {'passed' if not wrong else 'FAILED ' + ', '.join(wrong)} "
                f"({time.monotonic() - started:.0f} s, {run['outputs']})")
    return records, failures


def arm64_embeddings(ctx: BuildContext, path: Path, isa: str, process, ids_needed: list[list[int]],
                     batch_dim: bool) -> tuple[dict[tuple, np.ndarray], dict]:
    """The .pte's embedding of each distinct token sequence in `ids_needed` on CPUS[isa], and how they
    were obtained. Emulated runs are deterministic in what they read (the .pte's bytes, the token ids,
    the runner and emulator binaries, the CPU model: et_runner.identity), so the outputs of an
    identical earlier run are reused from the conversion cache, sealed and checked as every entry is;
    the gate is always applied afresh to them. A build of the same encoder twice (android after
    executorch, the test suite's builds) pays the minutes of emulation once."""
    unique = sorted({tuple(int(i) for i in ids) for ids in ids_needed})
    ran = {}

    def run(folder: Path) -> dict:
        started = time.monotonic()
        rows = []
        for ids in unique:
            array = np.asarray([ids] if batch_dim else ids, dtype=np.int64)
            rows.append(process.request(path, "forward", [array])[0][0].reshape(-1).astype(np.float32))
        np.save(folder / "embeddings.npy", np.stack(rows), allow_pickle=False)
        ran["seconds"] = round(time.monotonic() - started, 1)
        return {"sequences": len(unique), "seconds": ran["seconds"]}

    ids_digest = hashlib.sha256(json.dumps(unique).encode()).hexdigest()
    inputs = {"pte": sha256_file(path), "ids": ids_digest, **et_runner.identity(isa)}
    with scratch.folder("arrcoc-arm64-encoder-", family="arrcoc-") as dest:
        record = convert_cached(f"arm64-encoder-{et_runner.CPUS[isa][0]}", inputs, ("executorch",), run, Path(dest),
                                ctx.log, keep=4)
        table = np.load(Path(dest) / "embeddings.npy", allow_pickle=False)
    if table.shape[0] != len(unique):
        raise HostCapabilityError(f"the cached arm64 run holds {table.shape[0]} embeddings for {len(unique)} sequences",
                                  "remove ~/.cache/arrcoc-edge/conversions/arm64-encoder-* and build again")
    how = (f"{len(unique)} distinct token sequences run ({ran['seconds']} s)" if ran else
           f"outputs of an identical earlier run reused ({len(unique)} sequences, {record['seconds']} s when run): "
           "same .pte bytes, token ids, runner, emulator and CPU model")
    return dict(zip(unique, table)), {"outputs": how, "reused": not ran}
