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
    et_runner.CPUS, side by side), held to the same gate: `metrics_of(embed_ids, covered)` computes
    the host's numbers with that runtime's embeddings, over the token sequences in `covered`: one of
    each length among `ids_needed` (one_per_length: every kernel path the whole list takes). Returns
    the per-ISA records and the failures ("ISA: ..."); a CPU model that cannot be emulated here is
    recorded as not measured, with the reason."""
    if arm64.host_runs_arm64():
        return {}, []
    # each CPU model's emulator on its own thread: side by side, they take both cores; the metrics
    # (the Python encoder's and the relevance model's side) are then computed here, one model at a time
    covered = one_per_length(ids_needed)
    phones = [isa for isa in et_runner.CPUS if arm64.machine(isa) == "aarch64"]  # the app runs on phones only
    ran = ctx.side_by_side({isa: lambda isa=isa: _emulate(ctx, isa, path, covered, batch_dim) for isa in phones})
    records, failures = {}, []
    for isa, (embeddings, run, label, seconds) in ran.items():
        if not isinstance(embeddings, dict):  # the record of a CPU model not measured, or failed
            records[isa], failures = embeddings, failures + [f"{isa}: {f}" for f in embeddings.get("failures", [])]
            continue
        metrics = metrics_of(lambda ids: embeddings[tuple(int(i) for i in ids)], set(covered))
        wrong = gate.parity_failures(metrics)
        records[isa] = {"measured": True, "passed": not wrong, "runtime": label,
                        "metrics": {k: v for k, v in metrics.items() if k != "size_bytes"}, "run": run,
                        **({"failures": wrong} if wrong else {})}
        failures += [f"{isa}: {f}" for f in wrong]
        ctx.log(f"query encoder on {isa}: {'passed' if not wrong else 'FAILED ' + ', '.join(wrong)} "
                f"({seconds:.0f} s, {run['outputs']})")
    return records, failures


def _emulate(ctx: BuildContext, isa: str, path: Path, ids_needed: list[list[int]], batch_dim: bool) -> tuple:
    """The embeddings on one CPU model (arm64_embeddings), how they were obtained, the runtime's label
    and the seconds taken; or, in the first place, the record of a model not measured or failed."""
    process = ctx.kept(f"et-runner {isa}", lambda: et_runner.RunnerProcess(isa))
    started = time.monotonic()
    try:
        embeddings, run = arm64_embeddings(ctx, path, isa, process, ids_needed, batch_dim)
    except HostCapabilityError as exc:
        ctx.log(f"query encoder: not measured on {isa}: {exc.problem}")
        return {"measured": False, "reason": f"not measured: {exc.problem}"}, None, None, 0.0
    except GateError as exc:
        return {"measured": True, "passed": False, "failures": [exc.problem]}, None, None, 0.0
    return embeddings, run, process.label or et_runner.command(isa)[1], time.monotonic() - started


def one_per_length(ids_needed: list[list[int]]) -> list[tuple[int, ...]]:
    """The token sequences the emulated check runs: of the distinct ones in `ids_needed`, one of each
    length (the first in sorted order). An encoder .pte's kernels differ by the sequence's length
    alone: XNNPACK picks its GEMM tiles, attention shapes and remainders by the token count, and a
    token id only selects a row of the embedding table (the same gather for every id). So these run
    every kernel path on the phone's CPU that the whole list runs, the shortest ([CLS] [SEP]) and
    the longest (256 tokens) included, in a quarter of the emulated time (docs/speed.md)."""
    by_length: dict[int, tuple[int, ...]] = {}
    for ids in sorted({tuple(int(i) for i in ids) for ids in ids_needed}):
        by_length.setdefault(len(ids), ids)
    return sorted(by_length.values())


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
        counter = ctx.counter(f"query encoder on {et_runner.CPUS[isa][0]}, emulated: token sequences", len(unique))
        for ids in unique:
            array = np.asarray([ids] if batch_dim else ids, dtype=np.int64)
            rows.append(process.request(path, "forward", [array])[0][0].reshape(-1).astype(np.float32))
            counter.advance()
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
    return dict(zip(unique, table)), {"outputs": how, "reused": not ran, "sequences": len(unique),
                                      "token_lengths": sorted({len(ids) for ids in unique})}
