"""One torch.export per build, saved as a .pt2 and cached by content.

The cache key covers everything that can change the program: the checkpoint bytes, the model
config, the source of the model and of this module, and the torch version. An unchanged build
reloads the .pt2 instead of exporting again. Each target gets a fresh copy of the program
(`ExportedProgramFile.load`), because some lowerings (ExecuTorch) mutate what they are given.
"""
from __future__ import annotations

import hashlib
import inspect
import io
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.export import Dim

from arrcoc_edge.relevance import model as model_module
from arrcoc_edge.relevance.checkpoint import LoadedCheckpoint, sha256_file
from arrcoc_edge import scratch
from arrcoc_edge.errors import ExportError
from arrcoc_edge.relevance.signature import MAX_BATCH  # noqa: F401 - re-exported

# An example batch of 1 would specialise the batch dimension to a constant: use 2.
_EXAMPLE_BATCH = 2


@dataclass(frozen=True)
class ExportedProgramFile:
    path: Path
    sha256: str
    cache_key: str
    cache_hit: bool
    origin: str = ""  # "cache hit" (the out folder's), "reused from the conversion cache" or "exported"

    def load(self) -> torch.export.ExportedProgram:
        """A fresh, independent copy of the program (lowerings may mutate it)."""
        return torch.export.load(str(self.path))


def export_key(ckpt: LoadedCheckpoint) -> str:
    h = hashlib.sha256()
    for part in (
        ckpt.sha256,
        ckpt.config.to_json(),
        torch.__version__,
        str(MAX_BATCH),
        inspect.getsource(model_module),
        inspect.getsource(export_program),
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def example_inputs(cfg: model_module.ModelConfig, batch: int = _EXAMPLE_BATCH, seed: int = 0):
    """A uint8 photo batch and queries. The photo is neither square nor 16*G on a side, so the
    export cannot specialise H, W or their relation to a constant."""
    gen = torch.Generator().manual_seed(seed)
    height, width = cfg.image_size + 13, cfg.image_size * 3 // 2 + 7
    image = torch.randint(0, 256, (batch, height, width, 3), generator=gen, dtype=torch.uint8)
    query = torch.randn(batch, cfg.query_dim, generator=gen)
    return image, query


def dynamic_shapes(max_batch: int = MAX_BATCH) -> dict:
    """The contract's dynamic dimensions: batch, and the photo's height and width (any size in
    MIN_SIDE..MAX_SIDE; one size per batch)."""
    side = dict(min=model_module.MIN_SIDE, max=model_module.MAX_SIDE)
    batch = Dim("batch", min=1, max=max_batch)
    return {"image": {0: batch, 1: Dim("height", **side), 2: Dim("width", **side)}, "query": {0: batch}}


def export_program(model: torch.nn.Module, cfg: model_module.ModelConfig) -> torch.export.ExportedProgram:
    with torch.no_grad():
        return torch.export.export(model, example_inputs(cfg), dynamic_shapes=dynamic_shapes(), strict=False)


def model_form(model: model_module.RelevanceModel, form: str | None = None,
               fast_path: bool = True, general: str = "gather") -> model_module.RelevanceModel:
    """A copy of the model computing the same numbers in another exact form (model.py): the other
    participatory form, no 16G fast path (no torch.cond) for runtimes without control flow, or
    the general resize reading whole rows (PhotoWindows.general). The model itself is left as it was."""
    import copy

    form = form or model.participatory_scorer.form
    if form not in model_module.PARTICIPATORY_FORMS:
        raise ValueError(f"unknown participatory form {form!r}; one of {model_module.PARTICIPATORY_FORMS}")
    if general not in model_module.PhotoWindows.GENERAL_FORMS:
        raise ValueError(f"unknown general resize form {general!r}; one of {model_module.PhotoWindows.GENERAL_FORMS}")
    variant = copy.deepcopy(model)
    variant.participatory_scorer.form = form
    variant.texture.windows.fast_path = fast_path
    variant.texture.windows.general = general
    return variant


def export_form(model: model_module.RelevanceModel, form: str | None = None,
                fast_path: bool = True, general: str = "gather") -> torch.export.ExportedProgram:
    """The same weights exported in another exact form (model_form), for a target whose runtime
    or own measurement needs it."""
    variant = model_form(model, form, fast_path, general)
    return export_program(variant, variant.cfg)


def export_square(model: model_module.RelevanceModel) -> torch.export.ExportedProgram:
    """A program for photos of exactly 16G x 16G (dynamic batch only), reading the windows as the
    photo's own pixels (PhotoWindows.square_only): for a runtime without control flow that can
    hold it as a second method beside the general one (ExecuTorch)."""
    variant = model_form(model, fast_path=False)
    variant.texture.windows.square_only = True
    image, query = example_inputs(variant.cfg)
    side = variant.cfg.image_size
    image = image[:, :side, :side].contiguous()
    batch = Dim("batch", min=1, max=MAX_BATCH)
    with torch.no_grad():
        return torch.export.export(variant, (image, query), dynamic_shapes={"image": {0: batch}, "query": {0: batch}},
                                   strict=False)


def export_cached(ckpt: LoadedCheckpoint, cache_dir: Path, log=lambda message: None) -> ExportedProgramFile:
    """Return the .pt2 for this checkpoint: the one in `cache_dir` (the out folder's cache), else
    the user's conversion cache's (one export per checkpoint and code on this machine, so every
    build of it records the same program sha256), else a fresh export."""
    from arrcoc_edge.stages.conversion_cache import convert_cached

    key = export_key(ckpt)
    path = cache_dir / f"{key}.pt2"
    if path.is_file():
        return ExportedProgramFile(path, sha256_file(path), key, cache_hit=True, origin="cache hit")
    exported = []

    def convert(folder: Path) -> dict:
        _export_to(ckpt, folder / path.name)
        exported.append(True)
        return {}

    work = scratch.make("arrcoc-edge-export-", family="arrcoc-")  # private (0700), removed below; swept after a kill -9
    try:
        convert_cached("export", {"export_key": key}, ("torch",), convert, work, log, keep=8)
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".tmp-", suffix=".pt2")  # folder_state.CACHE_ENTRIES
        os.close(fd)
        try:  # whole or not at all: renamed into place once complete
            shutil.copyfile(work / path.name, tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    finally:
        scratch.remove(work)
    origin = "exported" if exported else "reused from the conversion cache"
    return ExportedProgramFile(path, sha256_file(path), key, cache_hit=not exported, origin=origin)


def _export_to(ckpt: LoadedCheckpoint, path: Path) -> None:
    try:
        program = export_program(ckpt.model, ckpt.config)
    except Exception as exc:  # torch.export raises many unrelated types
        raise ExportError(
            f"torch.export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
            "run with --verbose for the trace; the model code must stay export-friendly",
        ) from exc
    # The example inputs are most of the file's size and are not needed to reload it.
    program.example_inputs = None
    save_program(program, path)


def save_program(program: torch.export.ExportedProgram, path: Path) -> None:
    """torch.export.save into memory, then the bytes written by Python: torch's zip writer aborts
    the whole process (SIGABRT, its destructor throws) when the disk fills up under it, where a
    write from here is an OSError and one line."""
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    try:
        path.write_bytes(buffer.getbuffer())
    except OSError as exc:
        raise ExportError(f"cannot write the exported program {path} ({exc.strerror or type(exc).__name__})",
                          f"free space in {path.parent} (a temporary folder: set TMPDIR to a folder with room)") from exc
