"""What a query becomes before predict runs: a typed sentence through the encoder this checkpoint
has (the published one, with tokenizers and onnxruntime; else MiniLM through sentence-transformers),
or a float32 .npy of shape [D]; checked (text, finite values of an embedding's order), and a
sentence mostly outside the encoder's English vocabulary said so on stderr.
"""
from __future__ import annotations

import sys
import unicodedata
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from arrcoc_edge.errors import InputError

# A query embedding is of order 1 (MiniLM's are unit vectors, Qwen3-VL's token means below 1);
# values past this are a wrong file, and near float32's limit they overflow to NaN in the model.
MAX_QUERY_ABS = 1e4


def query_vector(text: str | None, embedding: Path | None, dim: int, out: Path, manifest: dict,
                 targets: dict) -> np.ndarray:
    """The query as float32 [1, D]: from a .npy of shape [D], or a sentence through the encoder
    this checkpoint has (sentence_encoder), loaded for this one sentence."""
    if embedding is not None:
        return embedding_file(embedding, dim)
    check_query_text(text)
    encoder = sentence_encoder(dim, out, manifest, targets)
    try:
        return encoder(text)
    finally:
        getattr(encoder, "close", lambda: None)()


def sentence_encoder(dim: int, out: Path, manifest: dict, targets: dict) -> Callable[[str], np.ndarray]:
    """text -> float32 [1, D], loaded once: the published encoder (Target.query_encoder: onnxruntime
    and tokenizers, no torch), else MiniLM through sentence-transformers for D=384 (the text extra)."""
    for name, entry in (manifest.get("targets") or {}).items():
        if entry.get("status") == "published" and name in targets and not targets[name].missing_runtime_modules():
            encoder = targets[name].query_encoder(out, entry)
            if encoder is not None:
                return encoder
    from arrcoc_edge.relevance import text_encoder

    if dim != text_encoder.EMBED_DIM:
        raise InputError(f"no query encoder for this checkpoint's width {dim} is published in {out}",
                         "build it: invoke build --target text-encoder --base-model QWEN3_VL_SNAPSHOT_DIR "
                         f"(arrcoc-edge build once installed), or pass a query embedding: float32 [{dim}]")
    return _sentence_transformers


def _sentence_transformers(text: str) -> np.ndarray:
    import logging

    from arrcoc_edge.relevance import text_encoder

    logging.disable(logging.WARNING)  # import-time notices of torchao and torch, not about this query
    try:
        return text_encoder.embed([text]).astype(np.float32)
    finally:
        logging.disable(logging.NOTSET)


def check_query_text(text: str, what: str = "--query") -> None:
    """A sentence the encoders can take: not empty, and text (a shell's $'\\xff\\xfe' arrives as
    undecodable bytes, which no tokenizer takes). what: how the message names it (the option, or
    "the query" for a Python caller)."""
    if not text.strip():
        raise InputError(f"{what} is empty", "type the question, e.g. 'something red' or 'the top left'")
    if not any(_visible(c) for c in text):  # zero-width spaces, joiners, a BOM: the tokenizer drops them all
        raise InputError(f"{what} has no visible characters (only invisible ones such as zero-width spaces)",
                         "type the question, e.g. 'something red' or 'the top left'")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{what} {_as_bytes(text)[:40]!r} is not UTF-8 text",
                         "type the question as text (or pass a query embedding, float32 [D])") from None


def _visible(char: str) -> bool:
    """A character a reader sees: not white space, not a format character (Unicode Cf: zero-width
    space and joiners, the BOM, direction marks) and not a control character (Cc)."""
    return not char.isspace() and unicodedata.category(char) not in ("Cf", "Cc")


def _as_bytes(text: str) -> bytes:
    """The bytes a user typed (undecodable ones come back as surrogates), escaped where they are not."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


def embedding_file(embedding: Path, dim: int) -> np.ndarray:
    fix = "save the embedding with numpy.save(path, vector.astype('float32'))"
    try:
        vec = np.load(embedding, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # EOFError: an empty file
        raise InputError(f"{embedding}: not a readable .npy file ({exc.__class__.__name__})", fix) from exc
    if not isinstance(vec, np.ndarray):  # an .npz archive: several arrays, none of them chosen
        vec.close()
        raise InputError(f"{embedding} is an .npz archive, not one array", fix)
    if vec.dtype != np.float32 or vec.shape != (dim,):
        raise InputError(f"{embedding} holds {vec.dtype} {list(vec.shape)}, this checkpoint takes float32 [{dim}]",
                         f"save a float32 vector of shape [{dim}] (the checkpoint's query width)")
    check_query_values(vec, str(embedding))
    return vec[None]


def check_query_values(vec: np.ndarray, what: str) -> None:
    """Finite values of a query embedding's order (a file's or an array a caller passed)."""
    if not np.isfinite(vec).all():
        raise InputError(f"{what} holds NaN or infinite values", "save a finite query embedding")
    if np.abs(vec).max() > MAX_QUERY_ABS:
        raise InputError(f"{what} holds values up to {np.abs(vec).max():.3g}; a query embedding is of "
                         f"order 1 (at most {MAX_QUERY_ABS:g} is taken)",
                         "save the checkpoint's own embedding of the query (MiniLM's or the token table's)")


# A query whose pieces are mostly unknown to an English WordPiece vocabulary (MiniLM's) is encoded
# all the same, into a vector that says little: more than this share is said on stderr.
UNKNOWN_SHARE = 0.5


def unknown_pieces(tokenizer, text: str) -> tuple[int, int]:
    """(pieces the encoder's vocabulary does not know, all pieces) of `text` through a WordPiece
    tokenizer.json: [UNK], or a lone non-ASCII character (MiniLM's vocabulary keeps single kana,
    CJK and other characters as pieces of their own, learned from almost no English text)."""
    enc = tokenizer.encode(text)
    pieces = [t for t, special in zip(enc.tokens, enc.special_tokens_mask) if not special]
    bare = [t[2:] if t.startswith("##") else t for t in pieces]
    unknown = sum(t == "[UNK]" or (len(b) == 1 and not b.isascii()) for t, b in zip(pieces, bare))
    return unknown, len(pieces)


def vocabulary_warning(tokenizer, text: str) -> str | None:
    """The one warning line for a query mostly outside the vocabulary, or None."""
    unknown, total = unknown_pieces(tokenizer, text)
    if not total or unknown / total <= UNKNOWN_SHARE:
        return None
    return (f"warning: the query {text!r} is mostly outside the query encoder's English vocabulary ({unknown} of "
            f"{total} pieces unknown to all-MiniLM-L6-v2): its answer means little -> fix: ask in English, "
            "e.g. 'something red' or 'the top left'")


def warn_unknown_words(model, text: str | None) -> None:
    """Say on stderr when a typed query is mostly unknown to a WordPiece encoder (MiniLM: the
    published text-encoder's tokenizer.json, or the packaged one); byte-level encoders (Qwen3)
    have no unknown pieces and are not checked."""
    if text is None:
        return
    model.query_vector(text)  # the encoder is loaded (and the vector cached for the prediction)
    tokenizer = getattr(getattr(model, "_encoder", None), "tokenizer", None)
    if tokenizer is None and model.query_dim == 384:
        tokenizer = _packaged_wordpiece()
    if tokenizer is None or "WordPiece" not in type(tokenizer.model).__name__:
        return
    line = vocabulary_warning(tokenizer, text)
    if line:
        print(line, file=sys.stderr, flush=True)


def _packaged_wordpiece():
    """MiniLM's tokenizer.json from the packaged model (the encoder predict falls back to)."""
    try:
        from tokenizers import Tokenizer

        from arrcoc_edge.relevance.text_encoder import model_dir

        return Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    except Exception:  # noqa: BLE001 - a warning that cannot be checked is not given
        return None
