"""The published query encoder as predicting runs it: onnxruntime and the `tokenizers` library on
the folder's own files, no torch or sentence-transformers (issue 42); the names both sides share."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from arrcoc_edge.targets.shared import onnx_common

OUTPUT = "sentence_embedding"  # "embedding" collides with a node name inside the exported BERT
QWEN_KIND = "qwen-token-mean"
QWEN_FILE, QWEN_INPUT, QWEN_OUTPUT = "query_encoder.onnx", "input_ids", "query_embedding"


def qwen_embed(session, ids: list[list[int]]) -> np.ndarray:
    return np.concatenate([session.run([QWEN_OUTPUT], {QWEN_INPUT: np.asarray(i, np.int64)})[0] for i in ids])


class PublishedEncoder:
    """A published query encoder, loaded once and kept: encoder(text) -> float32 [1, D] with
    onnxruntime and the `tokenizers` library only. MiniLM's ids are what sentence-transformers
    gives (truncated at its 256 tokens, no padding for one sentence); arr-coc-0-1's are the raw
    text's, no special tokens (qwen_query.token_ids). close() frees the session."""

    def __init__(self, kind: str, model: Path | bytes, tokenizer_json: Path | bytes, name: str = "tokenizer.json"):
        """model, tokenizer_json: the files, or their bytes as load() checked them against the
        manifest (what is run is then what was checked; `name` labels the bytes in messages)."""
        from arrcoc_edge.relevance import qwen_query as qq
        from arrcoc_edge.relevance.text_encoder import MAX_TOKENS

        self.kind = kind
        if isinstance(tokenizer_json, bytes):  # a broken file: InputError naming it
            self.tokenizer = qq.tokenizer_from_text(tokenizer_json.decode("utf-8", "replace"), Path(name))
        else:
            self.tokenizer = qq.load_tokenizer(tokenizer_json)
        if kind != QWEN_KIND:
            self.tokenizer.enable_truncation(MAX_TOKENS)  # tokenizer.json's own says 128
            self.tokenizer.no_padding()  # and pads to a fixed 128
        self.session = onnx_common.ort_session(model)

    def __call__(self, text: str) -> np.ndarray:
        from arrcoc_edge.errors import InputError

        if self.session is None:
            raise InputError("this query encoder was closed", "load the folder again (arrcoc_edge.load)")
        if self.kind == QWEN_KIND:
            from arrcoc_edge.relevance import qwen_query as qq

            ids = qq.token_ids(self.tokenizer, text)
            if not ids:
                raise InputError("the query has no tokens", "type the question, e.g. 'something red' or 'the top left'")
            return qwen_embed(self.session, [ids]).astype(np.float32)
        enc = self.tokenizer.encode(text)
        inputs = {"input_ids": np.asarray([enc.ids], np.int64), "attention_mask": np.asarray([enc.attention_mask], np.int64)}
        return self.session.run([OUTPUT], inputs)[0].astype(np.float32)

    def close(self) -> None:
        self.session = None
