"""The build: checkpoint -> torch.export (once) -> each target's stage -> gate -> atomic publish.

This module never names a target: it is handed Target objects and drives them through the
contract in `arrcoc_edge.stages.target`.
"""
from __future__ import annotations

import platform
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arrcoc_edge.building.ahead import BACKGROUND_PHASE, HostUse, start_ahead
from arrcoc_edge.building.timing import Timings
from arrcoc_edge.errors import (ArrcocError, BuildInterrupted, GateError, HostCapabilityError, MissingExtraError,
                             NotApplicableError)
from arrcoc_edge.publishing import folder_state, locking, publish, reading, takeover
from arrcoc_edge.publishing import manifest as manifest_mod
from arrcoc_edge.relevance.checkpoint import load_checkpoint
from arrcoc_edge.stages import calibration
from arrcoc_edge.stages.export import export_cached
from arrcoc_edge.stages.golden import build_golden_set, write_bundle
from arrcoc_edge.stages.parity import parity_metrics, topk_overlap
from arrcoc_edge.stages.target import BuildContext, Target, Variant, run_split


@dataclass
class VariantReport:
    variant: Variant
    status: str  # "verified" | "unverified" | "failed"
    metrics: dict = field(default_factory=dict)
    runtime: str | None = None
    reason: str | None = None
    checks: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    outputs: dict | None = None  # the runtime's held-out outputs, for the report's side-by-side maps
    # parity per instruction set: this host's and each one the target also runs the variant on
    by_isa: dict = field(default_factory=dict)
    subsets: dict = field(default_factory=dict)  # parity metrics per query kind (sentences, vectors)
    photos: dict = field(default_factory=dict)  # per photo kind (greyscale, texture...) and the hardest samples


@dataclass
class StageResult:
    target: Target
    status: str  # "published" | "unverified" | "failed" | "skipped" | "not published"
    reason: str | None = None
    staging: Path | None = None
    variants: list[VariantReport] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float | None = None  # this process's and its children's over the stage's span (timing.py)
    error: BaseException | None = None  # an unexpected exception, kept for --verbose

    @property
    def primary(self) -> VariantReport | None:
        return next((r for r in self.variants if r.variant.primary), self.variants[0] if self.variants else None)

    @property
    def publishable(self) -> bool:
        return self.status in ("published", "unverified")


@dataclass
class BuildResult:
    stages: list[StageResult]
    out: Path
    exported_cache_hit: bool
    seconds: float
    timings: dict = field(default_factory=dict)  # wall and CPU seconds per phase (timing.Timings.record)

    @property
    def ok(self) -> bool:
        return all(s.status in ("published", "unverified", "skipped") for s in self.stages)


def plan(requested: list[Target], registry: dict[str, Target]) -> list[Target]:
    """Requested targets plus what they depend on, dependencies first; soft deps when installed."""
    ordered: list[Target] = []

    def visit(t: Target, trail: tuple = ()):
        if t in ordered:
            return
        for dep in t.depends_on:
            visit(registry[dep], trail + (t.name,))
        for dep in t.uses:
            if not registry[dep].missing_modules():
                visit(registry[dep], trail + (t.name,))
        ordered.append(t)

    for t in requested:
        visit(t)
    return ordered


def verify_variant(target: Target, ctx: BuildContext, variant: Variant) -> VariantReport:
    checks = target.inspect(ctx, variant)
    metrics = {"size_bytes": variant.bytes, **variant.metrics}
    try:
        runner = target.load(ctx, variant)
    except HostCapabilityError as exc:
        # only the size was measured: hold it to its limit; parity limits stay open (unverified)
        failures = variant.gate.size_failures(metrics)
        status = "failed" if failures else "unverified"
        return VariantReport(variant, status, metrics, None, exc.problem, checks, failures)
    try:
        heldout = ctx.golden.heldout
        ctx.log(f"[{target.name}] {variant.name}: {len(heldout)} held-out samples in {runner.runtime}")
        got = run_split(runner, heldout)
    finally:
        runner.close()
    expected = variant.reference(heldout) if variant.reference else heldout.expected
    metrics.update(parity_metrics(expected, got, variant.gate.tie_tolerance))
    subsets, failures = subset_parity(variant.gate, heldout, expected, got)
    failures = variant.gate.failures(metrics) + failures
    photos = photo_parity(heldout, expected, got, variant.gate.tie_tolerance)
    by_isa = {}
    loaders = target.other_isas(ctx, variant)
    if loaders:
        by_isa[host_isa()] = {"measured": True, "runtime": runner.runtime, "passed": not failures,
                              "metrics": {k: v for k, v in metrics.items() if k != "size_bytes"},
                              "facts": host_cpu()}
        host_failed = bool(failures)  # this host's own verdict: one ISA's failure does not skip the next
        # each ISA's emulator on its own thread: the CPU models run side by side (BuildContext.side_by_side)
        counter = ctx.counter(f"{variant.name}: held-out samples on {len(loaders)} emulated ISAs", len(loaders))

        def on(isa, load) -> dict:
            record = verify_on_isa(target.name, isa, load, variant, heldout, expected, got, ctx.log, host_failed)
            counter.advance()
            return record

        by_isa.update(ctx.side_by_side({isa: lambda isa=isa, load=load: on(isa, load) for isa, load in loaders.items()}))
        for isa in loaders:
            failures += [f"{isa}: {f}" for f in by_isa[isa].get("failures", [])]
    if failures:
        status = "failed"
    else:
        status = "verified" if runner.authoritative else "unverified"
    return VariantReport(variant, status, metrics, runner.runtime, runner.reason, checks, failures, got,
                         by_isa=by_isa, subsets=subsets, photos=photos)


def host_isa() -> str:
    """This host's instruction set as the manifest names it (x86_64, aarch64)."""
    return platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")


def host_cpu() -> dict:
    """This host's CPU as the kernels see it, beside its parity per ISA: the emulated ARM CPUs
    record theirs, and onnxruntime picks int8 kernels and load-time rewrites by these features
    (an x86 host without VNNI runs an .onnx's int8 activations as uint8: docs/targets.md)."""
    facts = {"machine": host_isa(), "cpu": platform.processor() or None, "cpu_features": None}
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line.split(":", 1) for line in f if ":" in line]
    except OSError:
        return facts  # not Linux: the machine alone
    first = lambda *keys: next((v.strip() for k, v in lines if k.strip() in keys), None)  # noqa: E731
    facts["cpu"] = first("model name", "Model", "CPU part") or facts["cpu"]
    facts["cpu_features"] = first("flags", "Features")  # x86: flags; aarch64: Features
    return facts


def verify_on_isa(name: str, isa: str, load, variant: Variant, heldout, expected: dict, host_got: dict, log,
                  host_failed: bool) -> dict:
    """The held-out split through `variant` on another instruction set's kernels, held to the same
    gate, on the whole set and on each query kind alone. Unavailable (HostCapabilityError) -> not measured, with the reason; the variant's status
    is then this host's. A GateError from the run (the runtime died on the model) is a failure."""
    if host_failed:
        return {"measured": False, "reason": f"not measured: the variant failed on {host_isa()} already"}
    try:
        runner = load()
        log(f"[{name}] {variant.name}: {len(heldout)} held-out samples on {isa}")
        started = time.monotonic()
        try:
            got = run_split(runner, heldout)
        finally:
            runner.close()
    except HostCapabilityError as exc:
        log(f"[{name}] {variant.name}: not measured on {isa}: {exc.problem}")
        return {"measured": False, "reason": f"not measured: {exc.problem}", "fix": exc.fix}
    except GateError as exc:
        return {"measured": True, "passed": False, "failures": [exc.problem], "metrics": {}}
    metrics = parity_metrics(expected, got, variant.gate.tie_tolerance)
    subsets, subset_failures = subset_parity(variant.gate, heldout, expected, got)
    failures = variant.gate.parity_failures(metrics) + subset_failures
    against_host = parity_metrics(host_got, got, variant.gate.tie_tolerance)
    record = {"measured": True, "runtime": runner.runtime, "passed": not failures, "metrics": metrics,
              "subsets": subsets, "photos": photo_parity(heldout, expected, got, variant.gate.tie_tolerance),
              "vs_host": {k: against_host[k] for k in ("relevance_max_abs", "weights_max_abs", "topk_overlap_min",
                                                          "topk_overlap_strict_mean")},
              "seconds": round(time.monotonic() - started, 1), **({"facts": runner.facts} if runner.facts else {})}
    if failures:
        record["failures"] = failures
    return record


def subset_parity(gate, split, expected: dict, got: dict) -> tuple[dict, list[str]]:
    """Metrics per query kind (sentences, vectors) and the gate's parity limits held on each on its
    own: a variant that passes on the whole set but fails on sentences alone is not published."""
    subsets, failures = {}, []
    for kind, idx in split.subsets.items():
        pick = lambda arrays: {k: np.asarray(v)[idx] for k, v in arrays.items()}  # noqa: E731
        subsets[kind] = parity_metrics(pick(expected), pick(got), gate.tie_tolerance)
        failures += [f"{kind}: {text}" for text in gate.subset_failures(subsets[kind])]
    return subsets, failures


def photo_parity(split, expected: dict, got: dict, tie_tolerance: float) -> dict:
    """Where a variant is weakest on the held-out photos, for the record (the gate holds on every
    sample already): the metrics on each photo kind alone (golden.PHOTO_KINDS: greyscale, fine
    texture, document scan, small or upscaled) and the samples with the lowest top-K agreement and
    the largest relevance error."""
    overlap, _ = topk_overlap(expected["relevance"], expected["topk_indices"], got["topk_indices"], tie_tolerance)
    error = np.abs(np.asarray(got["relevance"], dtype=np.float64) - expected["relevance"]).max(axis=1)
    kinds = {kind: {"samples": len(idx), "relevance_max_abs": float(error[idx].max()),
                    "topk_overlap_min": float(overlap[idx].min()), "topk_overlap_mean": float(overlap[idx].mean())}
             for kind, idx in split.photo_kinds.items()}
    worst = lambda values, pick: {"sample": split.names[int(pick(values))], "value": float(values[int(pick(values))])}  # noqa: E731
    return {"kinds": kinds, "hardest": {"topk_overlap": worst(overlap, np.argmin),
                                        "relevance_max_abs": worst(error, np.argmax)}}


def run_stage(target: Target, ctx: BuildContext) -> StageResult:
    started = time.monotonic()
    ctx.log(f"[{target.name}] building")
    with ctx.resources:  # what the stage's variants shared (BuildContext.kept) ends with them
        variants = target.build(ctx)
        reports = [verify_variant(target, ctx, v) for v in variants]
    result = StageResult(target, "published", staging=ctx.staging, variants=reports)
    failed = [r for r in reports if r.status == "failed"]
    if failed:
        result.status = "failed"
        result.reason = "; ".join(f"{r.variant.name}: {', '.join(r.failures)}" for r in failed)
    elif any(r.status == "unverified" for r in reports):
        result.status = "unverified"
        result.reason = next(r.reason for r in reports if r.status == "unverified")
    if result.publishable:
        primary = result.primary.variant
        write_bundle(ctx.golden.heldout, ctx.staging, primary.gate.to_dict(), topk_dtype=primary.topk_dtype)
    result.seconds = time.monotonic() - started
    return result


def build_inputs(checkpoint: Path, options: dict) -> list[Path]:
    """What a build reads from the user: its output folder may be none of them nor hold one."""
    return [checkpoint, *(getattr(options[k], "path", options[k]) for k in ("calibration_dir", "calibration_queries",
                                                                            "base_model") if options.get(k) is not None)]


def write_places(targets: list[Target], registry: dict[str, Target]) -> list[tuple[str, Path]]:
    """Every folder this build writes into besides its output: the temporary folder, the cache, and
    what the targets (their dependencies included) name, for outputs_guard.check_places."""
    from arrcoc_edge.publishing.outputs_guard import build_places

    return [*build_places(), *(place for target in plan(targets, registry) for place in target.write_places())]


def run_build(
    targets: list[Target],
    registry: dict[str, Target],
    checkpoint: Path,
    out: Path,
    log=print,
    strict: bool = True,
    options: dict | None = None,
    ahead: bool = False,
) -> BuildResult:
    """Build, verify, gate and publish. strict: a missing extra is an error, not a skip. ahead: make
    the targets' AheadJobs in a background process (building/ahead.py; the command line's builds do).

    SIGINT and SIGTERM go through locking.record_interrupt, so an interrupt whose exception a
    library swallowed still stops the build at the next stage boundary, and always before the
    switch (locking.check_interrupted)."""
    from arrcoc_edge.publishing.outputs_guard import check_out_folder

    started = time.monotonic()
    options = options or {}
    check_out_folder(out, build_inputs(checkpoint, options), write_places(targets, registry))
    takeover.prepare_out_dir(out)
    handlers = {s: signal.signal(s, locking.record_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    published_before = None
    try:
        with locking.build_lock(out, log):
            publish.recover(out, reading.read_manifest(out), log)  # what a killed build left behind
            published_before = folder_state.generation_id(out)
            order = plan(targets, registry)
            result = _build_locked(order, checkpoint, out, log, strict, started, options or {},
                                   requested={t.name for t in targets}, ahead=ahead)
        locking.check_interrupted()  # one lost while the lock was released: the build did not finish quietly
        return result
    except KeyboardInterrupt as exc:
        error = _interrupted(out, published_before, str(exc) or "SIGINT")
        locking.reset_interrupts()  # reported by this error: a later build in this process starts clean
        raise error from exc
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _interrupted(out: Path, published_before: str | None, why: str) -> BuildInterrupted:
    """The interrupt's one line, true to what happened: the publish switched already (a signal held
    during the switch arrives right after it) or nothing was published."""
    try:
        now = folder_state.generation_id(out)
    except ArrcocError:
        now = published_before
    if now is not None and now != published_before:
        return BuildInterrupted(f"build interrupted ({why}) after it published {out}",
                                f"nothing to fix: the new publish is complete (`invoke verify --out {out}` checks it)")
    return BuildInterrupted(f"build interrupted ({why}); nothing was published",
                            "the previously published artifacts are intact: run the build again")


def _build_locked(order, checkpoint, out, log, strict, started, options, requested, ahead) -> BuildResult:
    host_before = HostUse.now() if ahead else None  # what others use of the cores from here: start_ahead
    if strict:  # a missing extra ends the build before the minutes its other stages take, not after
        for target in order:
            target.require()
    timings = Timings()
    with timings.phase("checkpoint"):
        log(f"loading checkpoint {checkpoint}")
        ckpt = load_checkpoint(checkpoint, grid=options.get("grid"), top_k=options.get("top_k"))
        cfg = ckpt.config
        log(f"model: {cfg.grid} x {cfg.grid} patches, top-{cfg.top_k}, input {cfg.image_size} px, query width {cfg.query_dim}")
        for target in order:  # bad options fail here, before any stage could publish
            target.check_options(options, ckpt.config)
        from arrcoc_edge.relevance.qwen_query import check_sources

        check_sources(ckpt.path, options.get("base_model"), cfg.query_dim)
    if ckpt.ignored_keys:
        log(f"ignored {len(ckpt.ignored_keys)} keys outside the relevance model (e.g. {ckpt.ignored_keys[0]})")
    locking.check_interrupted()
    with timings.phase("export") as phase:
        program = export_cached(ckpt, folder_state.cache_root(out) / "export", log)
        phase["cached"] = program.cache_hit
    log(f"exported program {program.path.name} ({program.origin})")
    with timings.phase("golden"):
        golden = build_golden_set(ckpt.model, ckpt.config, ckpt.path, options.get("base_model"),
                                  options.get("calibration_queries"))  # a SentenceFile, read once when checked
    held_out = ", ".join(f"{n} {kind.rstrip('s')} samples" for kind, n in golden.describe()["heldout"]["subsets"].items())
    log(f"golden set: held-out {held_out}; queries: {golden.query_source}")  # words, not a dict's repr
    run_dir = locking.new_staging(out)
    stages: dict[str, StageResult] = {}
    background = None
    try:
        if ahead:
            background = start_ahead(order, ckpt, program, golden, run_dir, log, options, host_before)
        with timings.phase("calibration"):
            confidence = fit_confidence(ckpt, options.get("base_model"), run_dir, log)
        # the stages that carry the calibration into what they publish (the apps' contract.json)
        options = {**options, "confidence_calibration": confidence.record}
        for target in order:
            locking.check_interrupted()  # stage boundary: an interrupt a library swallowed stops here
            with timings.phase(target.name) as phase:
                stages[target.name] = _one_stage(target, ckpt, program, golden, run_dir, stages, log, strict, options)
                phase["status"] = stages[target.name].status
            stages[target.name].cpu_seconds = timings.phases[target.name]["cpu_seconds"]
        if background is not None and background.started is not None:
            with timings.phase(BACKGROUND_PHASE) as phase:  # the child's CPU counts here, when it is reaped
                background.close()
                phase.update(background.record())
        locking.check_interrupted()
        chosen = to_publish(requested, stages)
        for name, stage in stages.items():
            if stage.publishable and name not in chosen:
                stage.status, stage.reason = "not published", "passed, but built only for targets that failed"
        if chosen:
            previous = reading.read_manifest(out)
            kept = [s for s in stages.values() if s.target.name in chosen or s.status in ("failed", "skipped")]
            data = manifest_mod.merge(previous, ckpt, program, golden, kept, folder_state.state_dir(out),
                                      timings=timings.record(), calibration=confidence.entry)

            def extras(gen: Path) -> None:
                confidence.write(gen)
                _write_report(out, gen, kept, ckpt, golden, log)

            publish.publish(out, {n: stages[n].staging for n in chosen}, data, write_extras=extras, log=log)
    finally:
        if background is not None:
            background.close()
        locking.remove_tree(run_dir)
    return BuildResult(list(stages.values()), out, program.cache_hit, time.monotonic() - started, timings.record())


def fit_confidence(ckpt, base_model, work: Path, log) -> "calibration.Fitted":
    """The calibration stage, for every build: the checkpoint's confidence calibration fitted on
    natural photos (stages/calibration.py), published as calibration.json beside the manifest."""
    locking.check_interrupted()
    fitted = calibration.fitted_for(ckpt, base_model, work, log)
    log(f"calibration: {fitted.entry.get('reason') or fitted.summary()}")
    return fitted


def to_publish(requested: set[str], stages: dict[str, StageResult]) -> list[str]:
    """The stages to publish: requested ones that passed, and what those were built from.

    A dependency built only for a requested target that failed is not published: a failed target
    changes nothing that was published (its dependency would otherwise come back with new
    timestamps, or from another checkpoint than before).
    """
    chosen: list[str] = []

    def take(name: str) -> None:
        stage = stages.get(name)
        if stage is None or not stage.publishable or name in chosen:
            return
        chosen.append(name)
        for dep in (*stage.target.depends_on, *stage.target.uses):
            take(dep)

    for name in stages:
        if name in requested:
            take(name)
    return chosen


def _write_report(out, dest, stages, ckpt, golden, log) -> None:
    from arrcoc_edge.publishing import report

    with report.never_fails(log):
        report.save_outputs(out, stages, ckpt.sha256)
        report.write_report(out, golden.heldout, log, dest=dest)


def _one_stage(target, ckpt, program, golden, run_dir, stages, log, strict, options) -> StageResult:
    missing_dep = [d for d in target.depends_on if not stages.get(d) or not stages[d].publishable]
    if missing_dep:
        return StageResult(target, "skipped", f"needs {', '.join(missing_dep)}, which did not build")
    try:
        target.require()
    except MissingExtraError as exc:
        if strict:
            raise
        return StageResult(target, "skipped", exc.one_line())
    staging = run_dir / target.name
    staging.mkdir()
    ctx = BuildContext(ckpt, program, golden, staging, dict(stages), log, options, target=target.name)
    started = time.monotonic()
    result = _attempt(target, ctx, strict)
    result.seconds = result.seconds or time.monotonic() - started  # a failed stage's minutes count too
    return result


def _attempt(target, ctx, strict) -> StageResult:
    """run_stage, with a stage's own failure turned into its result (the other targets go on)."""
    staging = ctx.staging
    try:
        return run_stage(target, ctx)
    except NotApplicableError as exc:
        return StageResult(target, "skipped", exc.one_line())
    except MissingExtraError as exc:
        if strict:
            raise
        return StageResult(target, "skipped", exc.one_line())
    except ArrcocError as exc:
        return StageResult(target, "failed", exc.one_line(), staging)
    except Exception as exc:  # a converter's own failure: report it, keep the other targets going
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        result = StageResult(target, "failed", f"{type(exc).__name__}: {first} (rerun with --verbose)", staging)
        result.error = exc
        return result


def host_description() -> str:
    return f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"
