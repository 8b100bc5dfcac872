"""Load and validate checkpoints, in arrcoc-edge's format or the reference's, without running pickles.

* `.safetensors` (ours): tensors in the reference key layout, the ModelConfig as JSON in the
  metadata under "arrcoc.config", provenance under "arrcoc.provenance". Strict: every key must
  be known.
* `.pt` / `.pth` (arr-coc-0-1 layout, e.g. a full ARRCOCQwen state dict): loaded with
  `torch.load(weights_only=True)`, so a pickle that tries to run code is refused. The query width
  D and hidden sizes are inferred from the weights; grid, top-K and input size default to the
  reference's own training settings (REFERENCE_SETTINGS: 32 x 32 patches, K=200, 512 px). Keys under IGNORED_PREFIXES (the frozen Qwen
  base model) are dropped and reported; any other unknown key is an error.
"""
from __future__ import annotations

import json
import pickle
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from arrcoc_edge.errors import CheckpointError, SettingsError
from arrcoc_edge.relevance.digest import sha256_file  # noqa: F401 - re-exported (the checkpoint's identity)
from arrcoc_edge.relevance.model import ModelConfig, RelevanceModel, build_model, learned_shapes
from arrcoc_edge.relevance.texture_maths import CELL

FORMAT_TAG = "arrcoc-edge/1"
IGNORED_PREFIXES = ("base_model.",)
_WRAPPER_KEYS = ("state_dict", "model_state_dict", "model")
_PROJ_OUT = "participatory_scorer.texture_proj.2.weight"
_PROJ_IN = "participatory_scorer.texture_proj.0.weight"
_BAL_IN = "balancer.weight_predictor.0.weight"
# arr-coc-0-1 trains with generate_texture_array(target_size=32) and TokenAllocator(K=200).
REFERENCE_SETTINGS = {"grid": 32, "top_k": 200}


@dataclass
class LoadedCheckpoint:
    path: Path
    sha256: str
    config: ModelConfig
    model: RelevanceModel
    layout: str  # "arrcoc-safetensors" or "reference-state-dict"
    ignored_keys: list[str] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)


def load_checkpoint(path: str | Path, grid: int | None = None, top_k: int | None = None) -> LoadedCheckpoint:
    """Load, validate and build the model; raises CheckpointError with the fix on any problem.

    grid / top_k override the checkpoint's settings (the learned layers do not depend on them:
    1x1 convolutions and an MLP on map statistics); the input size follows as 16 * grid.
    """
    path = Path(path)
    _check_readable(path)
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        tensors, config, provenance = _read_safetensors(path)
        ignored: list[str] = []
        layout = "arrcoc-safetensors"
    elif suffix in (".pt", ".pth"):
        tensors, ignored = _read_reference(path)
        config, provenance = _infer_config(tensors, path), {"source": "reference layout"}
        layout = "reference-state-dict"
    else:
        raise CheckpointError(
            f"{path}: unknown checkpoint type '{suffix or '(none)'}'",
            "pass a .safetensors file written by arrcoc-edge or a .pt/.pth state dict",
        )
    if grid is not None or top_k is not None:
        config = override_settings(config, grid, top_k)
    model = _build_validated(tensors, config, path)
    return LoadedCheckpoint(path, sha256_file(path), config, model, layout, ignored, provenance)


def save_checkpoint(model: RelevanceModel, path: str | Path, provenance: dict) -> None:
    """Write our .safetensors format: reference key layout + config and provenance metadata."""
    from safetensors.torch import save_file

    metadata = {
        "format": FORMAT_TAG,
        "arrcoc.config": model.cfg.to_json(),
        "arrcoc.provenance": json.dumps(provenance, sort_keys=True),
    }
    tensors = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(tensors, str(path), metadata=metadata)


def _check_readable(path: Path) -> None:
    if not path.exists():
        raise CheckpointError(f"{path}: no such file", "check the --checkpoint path")
    if not path.is_file():
        raise CheckpointError(f"{path}: not a file", "pass the checkpoint file, not a folder")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: file is empty", "re-download or re-save the checkpoint")


def _read_safetensors(path: Path) -> tuple[dict, ModelConfig, dict]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"{path}: not a readable .safetensors file ({_short(exc)})",
            "the file is truncated or corrupt: re-download or re-save it",
        ) from exc
    if "arrcoc.config" not in metadata:
        raise CheckpointError(
            f"{path}: .safetensors has no 'arrcoc.config' metadata",
            "save it with arrcoc_edge.relevance.checkpoint.save_checkpoint, or pass the reference .pt state dict",
        )
    try:
        config = ModelConfig.from_dict(json.loads(metadata["arrcoc.config"]))
        provenance = json.loads(metadata.get("arrcoc.provenance", "{}"))
    except (ValueError, TypeError) as exc:
        raise CheckpointError(
            f"{path}: invalid model config in metadata ({_short(exc)})",
            "re-save the checkpoint with a valid ModelConfig",
        ) from exc
    return tensors, config, provenance


def _read_reference(path: Path) -> tuple[dict, list[str]]:
    state = read_state_dict(path)
    ignored = sorted(k for k in state if k.startswith(IGNORED_PREFIXES))
    tensors = {k: v for k, v in state.items() if not k.startswith(IGNORED_PREFIXES)}
    return tensors, ignored


def read_state_dict(path: Path) -> dict:
    """A reference .pt/.pth as its state dict: memory-mapped, pickled code refused, a wrapper dict
    and DataParallel's 'module.' prefix removed. Keys of the frozen base model are kept."""
    try:
        with warnings.catch_warnings():  # pickle-protocol notices are noise next to our one line
            warnings.simplefilter("ignore")
            obj = _load_mapped(path)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: refused to unpickle: it holds objects other than tensors ({_unpickle_reason(exc)})",
            "save only the state dict (torch.save(model.state_dict(), path)); code in pickles is never run",
        ) from exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{path}: not a readable PyTorch file ({_short(exc)})",
            "the file is truncated or corrupt: re-download or re-save it",
        ) from exc
    return _unwrap_state_dict(obj, path)


def _load_mapped(path: Path):
    """A whole ARRCOCQwen state dict holds the 4 GB Qwen3-VL model: memory-map it, so only the
    tensors that are used are read. Files from before torch's zip format cannot be mapped."""
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as exc:
        if "mmap" not in str(exc) and "zip" not in str(exc):
            raise
        return torch.load(str(path), map_location="cpu", weights_only=True)


def _unwrap_state_dict(obj, path: Path) -> dict:
    if isinstance(obj, dict):
        for key in _WRAPPER_KEYS:
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj:
        raise CheckpointError(
            f"{path}: holds a {type(obj).__name__}, not a state dict",
            "save the model's state dict: torch.save(model.state_dict(), path)",
        )
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(
            f"{path}: state dict has non-tensor entries {bad[:3]}",
            "save the model's state dict: torch.save(model.state_dict(), path)",
        )
    return {k.removeprefix("module."): v for k, v in obj.items()}


def _infer_config(tensors: dict, path: Path) -> ModelConfig:
    missing = [k for k in (_PROJ_IN, _PROJ_OUT, _BAL_IN) if k not in tensors]
    if missing:
        raise CheckpointError(
            f"{path}: missing keys {missing}",
            "pass an arr-coc-0-1 checkpoint with participatory_scorer.* and balancer.* weights",
        )
    query_dim, proj_hidden = tensors[_PROJ_OUT].shape[:2]
    hidden, bal_in = tensors[_BAL_IN].shape
    if bal_in != 9 + query_dim:
        raise CheckpointError(
            f"{path}: balancer input width {bal_in} != 9 + query width {query_dim}",
            "the participatory scorer and balancer come from different models: re-export both together",
        )
    grid = REFERENCE_SETTINGS["grid"]
    return ModelConfig(
        image_size=CELL * grid, grid=grid, top_k=REFERENCE_SETTINGS["top_k"],
        query_dim=int(query_dim), proj_hidden=int(proj_hidden), balancer_hidden=int(hidden),
    )


def override_settings(config: ModelConfig, grid: int | None, top_k: int | None) -> ModelConfig:
    """config at the requested grid / top-K, or a SettingsError naming the valid range."""
    try:
        return config.with_settings(grid=grid, top_k=top_k)
    except ValueError as exc:
        raise SettingsError(
            f"invalid --grid/--top-k ({exc})",
            "pass --grid G with 1 <= G <= 128 (input 16*G px) and --top-k K with 1 <= K <= G*G",
        ) from exc


def _build_validated(tensors: dict, config: ModelConfig, path: Path) -> RelevanceModel:
    expected = learned_shapes(config)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        detail = "; ".join(
            part
            for part in (
                f"missing keys {missing[:4]}" if missing else "",
                f"unexpected keys {unexpected[:4]}" if unexpected else "",
            )
            if part
        )
        raise CheckpointError(f"{path}: {detail}", "pass a checkpoint of the ARR-COC v0.1 relevance model")
    for key, shape in expected.items():
        if tuple(tensors[key].shape) != shape:
            raise CheckpointError(
                f"{path}: {key} has shape {tuple(tensors[key].shape)}, expected {shape}",
                "the weights do not match the config in the checkpoint: re-save it",
            )
        if not tensors[key].is_floating_point() or not torch.isfinite(tensors[key]).all():
            raise CheckpointError(
                f"{path}: {key} holds non-finite (NaN/inf) or non-float values",
                "the training run diverged or the file is damaged: use an earlier checkpoint",
            )
    model = build_model(config)
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
    return model.eval()


def _unpickle_reason(exc: BaseException) -> str:
    """torch's message is a page of advice; keep the part naming what the pickle wanted to load."""
    text = str(exc)
    found = re.search(r"GLOBAL (\S+)", text)
    if found:
        return f"it asks for {found.group(1)}"
    found = re.search(r"WeightsUnpickler error:\s*(.+)", text)
    return found.group(1).strip() if found else _short(exc)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:160] + ("..." if len(text) > 160 else "")
