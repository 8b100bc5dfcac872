"""ONNX -> ORT format (.ort) for ONNX Runtime Mobile, with its required_operators.config.

Uses onnxruntime's own converter (`python -m onnxruntime.tools.convert_onnx_models_to_ort`) in a
subprocess of this venv's interpreter: it prints freely and reads its optimisation level from an
environment variable, neither of which should leak into the build process.

Choices, and why:
- optimisation level "extended", not the converter's default "all": "all" adds layout
  transforms (NCHWc) that are specific to the converting x86 CPU, while the .ort is meant for
  phones; "extended" bakes in the portable fusions (including QDQ -> quantised kernels).
- target platform "arm": keeps signed-int8 QDQ fusions, which is what Android/iOS CPUs run;
  the same file still runs on this x86 host, where it is verified.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from arrcoc_edge import subproc
from arrcoc_edge.errors import ExportError

OPTIMIZATION_LEVEL = "extended"
TARGET_PLATFORM = "arm"
CONFIG_NAME = "required_operators.config"


def convert(models: dict[str, Path], dest: Path, log) -> dict[str, Path]:
    """{output .ort name: source .onnx} -> {output name: path in dest}; also writes dest/CONFIG_NAME
    listing the operators all of them need (one config for one ORT Mobile custom build). The same
    sources (by bytes) reuse an earlier conversion's files (conversion_cache)."""
    from arrcoc_edge.relevance.digest import sha256_file
    from arrcoc_edge.stages.conversion_cache import convert_cached

    def into(folder: Path) -> dict:
        _convert(models, folder, log)
        return {}

    inputs = {name: sha256_file(src) for name, src in sorted(models.items())}
    convert_cached("ort-format", inputs, ("onnxruntime", "onnx"), into, dest, log, keep=8)
    return {name: expect_ort(dest / name) for name in models}


def expect_ort(path: Path) -> Path:
    if not path.is_file():
        raise ExportError(f"ORT converter wrote no {path.name}", "rerun with --verbose to see its output")
    return path


def _convert(models: dict[str, Path], dest: Path, log) -> dict[str, Path]:
    # Inside the build's staging run (dest's parent), so a killed build's leftovers go with it.
    with tempfile.TemporaryDirectory(prefix="ort-convert-", dir=dest.parent) as tmp:
        src_dir, out_dir = Path(tmp, "in"), Path(tmp, "out")
        src_dir.mkdir()
        for ort_name, src in models.items():
            shutil.copyfile(src, src_dir / (Path(ort_name).stem + ".onnx"))
        _run_converter(Path(tmp))
        written = {}
        for ort_name in models:
            # <stem>.<level>.ort, matched exactly: a glob on the stem would also take "<stem>-b.ort"
            produced = out_dir / f"{Path(ort_name).stem}.{OPTIMIZATION_LEVEL}.ort"
            produced = produced if produced.is_file() else None
            if produced is None:
                raise ExportError(f"ORT converter wrote no {ort_name}", "rerun with --verbose to see its output")
            written[ort_name] = dest / ort_name
            shutil.move(str(produced), written[ort_name])
        config = next(out_dir.glob("required_operators*.config"), None)
        if config is None:
            raise ExportError("ORT converter wrote no required_operators.config", "rerun with --verbose")
        _write_config(config, dest / CONFIG_NAME)
    log(f"[ort] wrote {', '.join(written)} and {CONFIG_NAME} (level {OPTIMIZATION_LEVEL}, platform {TARGET_PLATFORM})")
    return written


def _write_config(produced: Path, dest: Path) -> None:
    """The converter's config names each model by its absolute (temporary) path in a comment;
    keep only the file name so two builds write the same bytes."""
    lines = []
    for line in produced.read_text().splitlines():
        if line.startswith("# - "):
            line = "# - " + Path(line[4:]).name
        lines.append(line)
    dest.write_text("\n".join(lines) + "\n")


def _run_converter(folder: Path) -> None:
    """folder/in/*.onnx -> folder/out/*.ort. The converter's .ort bytes depend on its memory layout:
    relative paths, a fixed small environment and no address randomisation make them repeatable
    (measured: three runs, three different files; with these, identical across folders)."""
    cmd = [sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort", "in",
           "--output_dir", "out", "--optimization_style", "Fixed", "--target_platform", TARGET_PLATFORM]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0",
           "ORT_CONVERT_ONNX_MODELS_TO_ORT_OPTIMIZATION_LEVEL": OPTIMIZATION_LEVEL}
    proc = subproc.run(cmd, fixed_layout=True, cwd=folder, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise ExportError(f"ORT format conversion failed: {last[:200]}", "check the model loads in onnxruntime; rerun with --verbose")


def describe(dest: Path) -> dict:
    """What the manifest records about the conversion."""
    import onnxruntime

    ops = operators(dest / CONFIG_NAME)
    return {
        "format": "ORT (flatbuffers) for ONNX Runtime Mobile",
        "converter": f"onnxruntime.tools.convert_onnx_models_to_ort {onnxruntime.__version__}",
        "optimization_style": "Fixed",
        "optimization_level": OPTIMIZATION_LEVEL,
        "target_platform": TARGET_PLATFORM,
        "required_operators_config": CONFIG_NAME,
        "required_operator_count": sum(len(v) for v in ops.values()),
    }


def operators(config: Path) -> dict[str, list[str]]:
    """required_operators.config lines: `domain;opset;Op1,Op2` -> {"domain:opset": [ops]}."""
    out: dict[str, list[str]] = {}
    for line in config.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        domain, opset, ops = line.split(";", 2)
        out[f"{domain}:{opset}"] = sorted(ops.split(","))
    return out


def ort_format_version(path: Path) -> str:
    """The ORT flatbuffer file identifier ('ORTM' at byte 4) proves it is an ORT-format model."""
    head = path.read_bytes()[:8]
    if head[4:8] != b"ORTM":
        raise ExportError(f"{path.name} is not an ORT-format model", "rebuild the onnx-int8 target")
    return "ORTM flatbuffer"
