"""The manifest: what is published, how it was checked, and the hash chain that produced it.

Keys other tools rely on (README, "Manifest"): checkpoint, exported_program, toolchain, and per target
status / reason / files / parity / size. A target that failed or was skipped in this build keeps
its previously published entry; only a target that never published gets a failed/skipped entry.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import time
from pathlib import Path

from arrcoc_edge.relevance.digest import sha256_file

SCHEMA = "arrcoc-edge/manifest/1"
_TOOLCHAIN = (
    "torch", "onnx", "onnxscript", "onnxruntime", "numpy", "executorch", "coremltools",
    "torchao", "tensorrt", "tensorrt-rtx-cu13-bindings", "playwright",
)


def toolchain_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in _TOOLCHAIN:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def host_info() -> dict[str, str]:
    """The host that built and verified this manifest's targets (a merge keeps it per target)."""
    return {"os": platform.system(), "os_release": platform.release(), "machine": platform.machine(),
            "python": platform.python_version()}


def file_entries(paths: list[Path], staging: Path, target: str) -> list[dict]:
    """Files as they will be published: path relative to the out dir, bytes, sha256."""
    out = []
    for p in sorted(paths):
        rel = Path(target) / p.relative_to(staging)
        out.append({"path": rel.as_posix(), "bytes": p.stat().st_size, "sha256": sha256_file(p)})
    return out


def _parity(report) -> dict:
    v = report.variant
    parity = {
        "metrics": report.metrics,
        # the same metrics on each query kind alone (sentences, vectors), each held to the gate
        "subsets": getattr(report, "subsets", {}),
        "gate": v.gate.to_dict(),
        "passed": report.status != "failed" and not report.failures,
        "measured": report.runtime is not None,
        "runtime": report.runtime,
        "reference": v.reference_name,
    }
    if getattr(report, "photos", None):  # per photo kind and the hardest samples (golden.PHOTO_KINDS)
        parity["photos"] = report.photos
    if report.by_isa:  # the same gate on other kernels: {"x86_64": {...}, "aarch64 (emulated)": {...}}
        parity["by_isa"] = report.by_isa
    return parity


def _variant_entry(report, staging: Path, target: str) -> dict:
    v = report.variant
    entry = {
        "status": report.status,
        "files": [Path(target, p.relative_to(staging)).as_posix() for p in v.files],
        "parity": _parity(report),
        "size": {"bytes": report.metrics.get("size_bytes"), "budget": v.size_budget},
        "checks": report.checks,
        "info": v.info,
    }
    if report.reason:
        entry["reason"] = report.reason
    return entry


def target_entry(stage, ckpt, program, by_name: dict) -> dict:
    name, staging = stage.target.name, stage.staging
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    primary = stage.primary
    entry = {
        "status": stage.status,
        "summary": stage.target.summary,
        "capability": stage.target.capability,
        "files": file_entries(files, staging, name),
        "parity": _parity(primary) if primary else None,
        # model files vs their budgets; the golden bundle and extras are listed under files
        "size": {
            "bytes": sum(r.metrics.get("size_bytes", 0) for r in stage.variants),
            "budget": sum(r.variant.size_budget for r in stage.variants),
            "total_bytes": sum(p.stat().st_size for p in files),
        },
        "variants": {r.variant.name: _variant_entry(r, staging, name) for r in stage.variants},
        # the variant the target's name stands for (`--runtime onnx-int8`): JSON keeps no order
        "primary_variant": primary.variant.name if primary else None,
        "provenance": {
            "checkpoint_sha256": ckpt.sha256,
            "model": model_settings(ckpt.config),
            "participatory_form": ckpt.model.participatory_scorer.form,
            "exported_program_sha256": program.sha256,
            "upstream": {
                dep: _primary_sha(by_name.get(dep))
                for dep in (*stage.target.depends_on, *stage.target.uses)
                if by_name.get(dep)
            },
        },
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": round(stage.seconds, 2),
        **({"build_cpu_seconds": stage.cpu_seconds} if stage.cpu_seconds is not None else {}),
    }
    if stage.reason:
        entry["reason"] = stage.reason
    if stage.target.notes:
        entry["notes"] = stage.target.notes
    return entry


def primary_variant(entry: dict) -> str | None:
    """The variant a target entry declares primary: its `primary_variant`, or (in a manifest written
    before that key) the one whose parity is the entry's own (target_entry copies the primary's).
    Never the first variant: the manifest's keys are sorted, so that is the first by name."""
    variants = entry.get("variants") if isinstance(entry.get("variants"), dict) else {}
    declared = entry.get("primary_variant")
    if isinstance(declared, str):
        return declared if declared in variants else None
    same = [name for name, v in variants.items() if isinstance(v, dict) and entry.get("parity") is not None
            and v.get("parity") == entry.get("parity")]
    return same[0] if len(same) == 1 else None


def _size(path) -> int | None:
    try:
        return os.stat(path).st_size
    except (OSError, TypeError, ValueError):
        return None


def _primary_sha(stage) -> str | None:
    """sha256 of a stage's primary artifact file: the next link in the hash chain."""
    primary = stage.primary if stage and stage.publishable else None
    return sha256_file(primary.variant.files[0]) if primary and primary.variant.files else None


def model_settings(cfg) -> dict:
    """What an app needs to know to feed and read an artifact (also the identity of a build)."""
    return {"grid": cfg.grid, "top_k": cfg.top_k, "input_size": cfg.image_size, "query_dim": cfg.query_dim}


def _mark_stale(entry: dict, ckpt) -> dict:
    """A previously published entry of another checkpoint or other settings stays listed (its
    files are still on disk) but is no longer presented as this build's artifact."""
    prov = entry.get("provenance") or {}
    if entry.get("status") not in ("published", "unverified"):
        return entry
    if prov.get("checkpoint_sha256") == ckpt.sha256 and prov.get("model") == model_settings(ckpt.config):
        return entry
    was = prov.get("model") or {}
    return {**entry, "status": "stale", "reason": (
        f"built from checkpoint {str(prov.get('checkpoint_sha256'))[:12]} at grid {was.get('grid', '?')}, "
        f"top-{was.get('top_k', '?')}, not from this manifest's checkpoint: rebuild this target")}


def merge(previous: dict, ckpt, program, golden, stages, out: Path, timings: dict | None = None,
          calibration: dict | None = None) -> dict:
    targets = {name: _mark_stale(e, ckpt) for name, e in previous.get("targets", {}).items()}
    by_name = {s.target.name: s for s in stages}
    for stage in stages:
        name = stage.target.name
        if stage.publishable:
            targets[name] = target_entry(stage, ckpt, program, by_name)
        elif name not in targets or targets[name].get("status") in ("failed", "skipped"):
            targets[name] = {"status": stage.status, "reason": stage.reason, "files": []}
    return {
        "schema": SCHEMA,
        "checkpoint": {
            "path": str(ckpt.path),
            "sha256": ckpt.sha256,
            "bytes": _size(ckpt.path),  # merge compares a recorded path's size before hashing it
            "layout": ckpt.layout,
            "config": ckpt.config.__dict__,
            "model": model_settings(ckpt.config),
            "provenance": ckpt.provenance,
            "ignored_keys": len(ckpt.ignored_keys),
        },
        "exported_program": {
            "path": program.path.relative_to(out).as_posix(),
            "sha256": program.sha256,
            "cache_key": program.cache_key,
            # which exact form of the participatory head the program computes (model.py)
            "participatory_form": ckpt.model.participatory_scorer.form,
        },
        "golden": golden.describe(),
        # calibration.json beside this manifest (stages/calibration.py): its file, sha256 and
        # held-out metrics, or why there is none
        **({"calibration": calibration} if calibration is not None else {}),
        "toolchain": toolchain_versions(),
        "host": f"{platform.system()} {platform.machine()}",
        "host_info": host_info(),
        "targets": dict(sorted(targets.items())),
        # this build's wall and CPU seconds per phase, up to publishing (building/timing.py)
        **({"build_timings": timings} if timings else {}),
    }


# What a published file's path may hold: the tool's own are a few dozen characters; a longer one
# was edited, and opening it would fail with "File name too long" far from the cause.
MAX_PATH_CHARS = 1024
MAX_NAME_BYTES = 255


def check_shape(data, path: Path) -> None:
    """Refuse a manifest whose shape other code would trip over (or follow out of the folder):
    an object; `targets` an object of plain names; each entry's files a list of
    {path inside that target's folder, bytes, sha256}."""
    from arrcoc_edge.errors import OutputDirError
    from arrcoc_edge.publishing.folder_state import NAME

    def bad(why: str):
        raise OutputDirError(f"{path} is not an arrcoc-edge manifest ({why})",
                             "delete it and build again (`invoke clean`, then `invoke build`)")

    if not isinstance(data, dict):
        bad(f"a JSON {type(data).__name__}, not an object")
    if not isinstance(data.get("checkpoint", {}), dict) or not isinstance(data.get("targets", {}), dict):
        bad("'checkpoint' and 'targets' must be objects")
    for name, entry in data.get("targets", {}).items():
        if not NAME.fullmatch(name):
            bad(f"target name {name[:40]!r} is not a plain name")
        if not isinstance(entry, dict) or not isinstance(entry.get("files", []), list):
            bad(f"targets.{name} must be an object with a list of files")
        for f in entry.get("files", []):
            if not (isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("sha256"), str)
                    and isinstance(f.get("bytes"), int)):
                bad(f"targets.{name}.files holds an entry without path, bytes and sha256")
            parts = Path(f["path"]).parts
            if not parts or parts[0] != name or ".." in parts or Path(f["path"]).is_absolute():
                bad(f"file {f['path'][:60]!r} is not inside {name}/")
            if len(f["path"]) > MAX_PATH_CHARS or max(len(p.encode()) for p in parts) > MAX_NAME_BYTES:
                bad(f"file {f['path'][:60]!r}... is longer than a published path may be "
                    f"({MAX_PATH_CHARS} characters, {MAX_NAME_BYTES} bytes a name)")
        why = _variants_shape(entry.get("variants", {}))
        if why:
            bad(f"targets.{name}.variants {why}")
    why = _model_shape(data.get("checkpoint", {}).get("model", {}))
    if why:
        bad(f"checkpoint.model {why}")


def _variants_shape(variants) -> str | None:
    """Why a target's variants would trip predict/load/verify (an object of objects, each one's
    files a list of paths), or None."""
    if not isinstance(variants, dict):
        return f"is a JSON {type(variants).__name__}, not an object"
    for name, v in variants.items():
        if not isinstance(v, dict) or not isinstance(v.get("files", []), list) \
                or not all(isinstance(f, str) for f in v.get("files", [])):
            return f"entry {str(name)[:40]!r} must be an object with a list of file paths"
        if v.get("status") == "verified" and not v.get("files"):
            return f"entry {str(name)[:40]!r} is verified with no files"
    return None


def _model_shape(model) -> str | None:
    """Why the checkpoint's model settings (grid, top_k, ...) cannot size a prediction, or None:
    each one present is a whole number >= 1 (JSON's true/false and "14" are not), the grid at most
    MAX_GRID and top_k at most grid squared, as a checkpoint's own ModelConfig allows."""
    from arrcoc_edge.relevance.signature import MAX_GRID

    if not isinstance(model, dict):
        return f"is a JSON {type(model).__name__}, not an object"
    for key in ("grid", "top_k", "query_dim", "input_size"):
        value = model.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{key} is {json.dumps(value)[:40]}, not a whole number >= 1"
    grid = model.get("grid", 1)
    if grid > MAX_GRID:
        return f"grid is {grid}, more than the {MAX_GRID} a checkpoint may have"
    if model.get("top_k", 1) > grid * grid:
        return f"top_k is {model['top_k']}, more than grid squared ({grid * grid})"
    return None
