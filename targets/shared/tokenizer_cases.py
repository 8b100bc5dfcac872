"""What the apps' tokenizer tests compare with: queries and Python's ids for them.

The queries: targets/shared/tokenizer_corpus.txt ("label<TAB>query" per line: every major script,
combining marks, emoji sequences, control and zero-width characters, punctuation runs, lines past
the maximum length, whitespace-only lines) and lines drawn at random from a seed (random_lines).
The ids: Python's `tokenizers` crate on the same tokenizer.json, with the Python encoder's special
tokens and truncation (256 for all-MiniLM-L6-v2, as sentence-transformers cuts; none for Qwen3, as
pipeline/relevance/qwen_query.py encodes). The android build's JUnit run (TokenizerTest) and the ios build's
`swift test` (TokenizerTests) read cases.json written here; tests/test_app_tokenize.py uses the
same corpus through `invoke app-tokenize`.
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from arrcoc_edge.targets.shared.sources import CORPUS

SEED = 38
WORDPIECE_MAX_LENGTH = 256  # arrcoc_edge.relevance.text_encoder.MAX_TOKENS, all-MiniLM-L6-v2's max_seq_length
# where random characters come from: every script block the corpus covers, ASCII, and anything
_POOLS = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF),
          (0xE00, 0xEFF), (0x1100, 0x11FF), (0x1E00, 0x1FFF), (0x2000, 0x206F), (0x2E80, 0x2FDF), (0x3000, 0x30FF),
          (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFE00, 0xFE0F), (0xFF00, 0xFFEF),
          (0x1F300, 0x1FAFF), (0x1F3FB, 0x1F3FF), (0x20000, 0x2FA1F), (0xE0000, 0xE007F), (0x0, 0x10FFFF)]


def corpus() -> list[tuple[str, str]]:
    """(label, query) per corpus line."""
    text = CORPUS.read_bytes().decode("utf-8")  # not read_text: its universal newlines would split at "\r"
    return [tuple(line.split("\t", 1)) for line in text.removesuffix("\n").split("\n")]


def random_lines(count: int, seed: int = SEED) -> list[str]:
    """`count` lines of 1..120 code points from _POOLS (spaces, ZWJ and newline-free), seeded."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randint(1, 120)):
            roll = rng.random()
            if roll < 0.15:
                chars.append(" ")
            elif roll < 0.18:
                chars.append("\u200d")
            else:
                lo, hi = rng.choice(_POOLS)
                c = rng.randint(lo, hi)
                chars.append(" " if 0xD800 <= c <= 0xDFFF or c == 0x0A else chr(c))
        lines.append("".join(chars))
    return lines


def sources() -> tuple[list[tuple[str, Path, int | None, str]], list[str]]:
    """([(name, tokenizer.json, max length, kind)], [why a tokenizer is missing]) for the two the project ships."""
    found, missing = [], []
    try:
        from arrcoc_edge.relevance import text_encoder

        found.append(("all-MiniLM-L6-v2", text_encoder.model_dir() / "tokenizer.json", WORDPIECE_MAX_LENGTH, "wordpiece"))
    except Exception as exc:  # noqa: BLE001 - the text extra is optional; the reason is recorded
        missing.append(f"all-MiniLM-L6-v2: {exc}")
    try:
        from arrcoc_edge.relevance import qwen_query

        found.append(("Qwen3", qwen_query.tokenizer_file(None)[0], None, "bpe-bytelevel"))
    except Exception as exc:  # noqa: BLE001 - web/node_modules is optional; the reason is recorded
        missing.append(f"Qwen3: {exc}")
    return found, missing


def reference_ids(tokenizer: Path, texts: list[str], max_length: int | None) -> list[list[int]]:
    """Python's ids: the crate with the encoder's truncation, no padding, special tokens added."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    tok.no_padding()
    if max_length is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(max_length)
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]


def write_cases(folder: Path, copy_tokenizers: bool, random_count: int = 200) -> dict:
    """cases.json in `folder` (and the tokenizer files, when the tests run where the originals are out
    of reach, as in the Swift chroot); returns what was written."""
    folder.mkdir(parents=True, exist_ok=True)
    labelled = corpus() + [("random", t) for t in random_lines(random_count)]
    labels, texts = [x[0] for x in labelled], [x[1] for x in labelled]
    found, missing = sources()
    cases = []
    for n, (name, path, max_length, kind) in enumerate(found):
        if copy_tokenizers:
            shutil.copyfile(path, folder / f"tokenizer{n}.json")
        cases.append({"name": name, "tokenizer": f"tokenizer{n}.json" if copy_tokenizers else str(path),
                      "kind": kind, "max_length": max_length,
                      "ids": reference_ids(path, texts, max_length)})
    data = {"texts": texts, "labels": labels, "cases": cases, "missing": missing}
    (folder / "cases.json").write_text(json.dumps(data, ensure_ascii=True))
    return data
