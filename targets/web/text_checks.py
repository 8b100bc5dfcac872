"""The text encoder in the page held to Python: the same token ids, the same embeddings within the
gate, and a sweep of every code point through both tokenizers.
"""
from __future__ import annotations

import base64
from pathlib import Path

import numpy as np

from arrcoc_edge.stages.parity import Gate
from arrcoc_edge.targets.shared import onnx_common
from arrcoc_edge.targets.text_encoder.target import QWEN_BROWSER_COSINE_MIN, QWEN_BROWSER_REL_MAX
from arrcoc_edge.targets.web.chromium import PageSession

# Free-text queries: the text-encoder stage's INT8 variant, held in the browser to that variant's
# own gate against the Python sentence encoder, and the tokenizer held to exact equality.
TEXT_COSINE_MIN = 0.99
TEXT_NORM_MAX_DEV = 1e-3
# Awkward strings beyond the encoder's own SENTENCES: accents and ligatures, full-width forms,
# punctuation of every kind, scripts with and without spaces, CJK (incl. extension B), emoji with
# joiners and modifiers, zero-width and control characters, every kind of whitespace, words at
# and over WordPiece's 100-character limit, casing traps (final sigma, dotted I), and overlong input.
TOKEN_EXTRA = (
    "Café déjà vu — naïve façade, coöperate", "ÅÄÖ åäö ØÆ ß İstanbul ǅ ﬁ ligature", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "don't stop-believing... (really) [ok] {x} <tag> @user #hash $5 %20 ^_^ ~`|\\/",
    "“quotes” ‘single’ «guillemets» ¿qué? ¡sí!", "中文字符和English混合", "한국어 텍스트", "ไทย ภาษา",
    "Ελληνικά κείμενο", "русский текст Ёё", "עברית", "العربية", "👩‍👩‍👧‍👦 family 🏳️‍🌈 flag 👍🏽",
    "zero\u200bwidth\u200djoiner\ufeffbom", "ctrl\x00nul\x07bel\x1besc\x7fdel", "soft\u00adhyphen",
    "tab\tnew\nline\rcr\u2028ls\u3000ideo\u00a0nbsp", "\t\n  \r\n", "\ufffd replacement", "a" * 99, "b" * 100,
    "c" * 101, "unaffable unbelievably antidisestablishmentarianism", "x" + "é" * 120,
    "1,000,000.50 3rd 2nd 4th", "e-mail: foo.bar@example.com http://x.y/z?q=1&r=2",
    "combining: e\u0301 a\u0308 n\u0303 o\u0328", "math ∑∫√∞≈≠ ±×÷", "𝐁𝐨𝐥𝐝 𝕕𝕠𝕦𝕓𝕝𝕖", "ΣΑΣ σας", "𠀀𠀁 ext-B CJK",
    "ｶﾀｶﾅ カタカナ ひらがな", "Ⅻ ⅻ ① ⓐ", "…", "\u0300\u0301 leading marks", "Ⓐ ẞ ſ K Å ﬀﬁﬂ İ ΐ", "A\u0130B",
    "private\ue000use", "unassigned\u0378here", "the " * 300,
    # Arabic (harakat, tatweel, Arabic-Indic digits, RTL mixed with LTR), more emoji sequences, numbers
    "مَرْحَبًا بِالعالم، كيف حالك؟ ١٢٣٤ ـــ", "Where is القطة in the صورة?", "हिन्दी पाठ और अंक ४२",
    "👨‍👩‍👧 👋🏿 🧑🏽‍🚀 🇯🇵🇫🇷 ❤️‍🔥 1️⃣ #️⃣ 🏴󠁧󠁢󠁳󠁣󠁴󠁿", "0x1F600 1e-9 -42 +7 ½ ²³ ٣٤٥ ⅔ 10,5 € 1 000 000",
    "trailing spaces   ", "  leading spaces", "many     inner \t\t spaces\n\n\nand\r\nCRLF", "\u00a0\u2009\u202f\u205f",
    "ΣΑΣ", "ΟΔΟΣ σοφός ΣΟΦΟΣ.", "İI ıi ǈ ǋ",
)
# A 2,000-character text of everything above (code points, as Python counts them).
LONG_TEXT = ("The quick brown fox jumps over the lazy dog; 3.5 km in 12 min! Café déjà vu, naïve façade. "
             "東京で2024年に会いましょう。 مرحبا بالعالم ١٢٣ 👍🏽 👩‍👩‍👧‍👦 Ελληνικά ΣΑΣ, русский Ёё, 한국어, ไทย — "
             "\"quotes\" (parens) [brackets] {braces} <tags> @user #tag $5 %20 ^_^ ~ | \\ / \t\n") * 12
LONG_TEXT = LONG_TEXT[:2000]
# The code-point sweep: every code point except the surrogates (which JSON cannot carry alone) up to
# U+323FF, and samples of planes 14 (tags, variation selectors) and 15 (private use).
SWEEP = [*range(0x0, 0xD800), *range(0xE000, 0x32400), *range(0xE0000, 0xE01F0), *range(0xF0000, 0xF0100)]


def text_gate(base: Gate, kind: str) -> Gate:
    """The site's gate plus the free-text query path, measured in the browser at build time."""
    from arrcoc_edge.targets.text_encoder.target import QWEN_KIND

    if kind == QWEN_KIND:
        return Gate({**base.maxima, "text_token_mismatches": 0, "text_embedding_rel_err_max": QWEN_BROWSER_REL_MAX},
                    {**base.minima, "text_cosine_min": QWEN_BROWSER_COSINE_MIN}, base.tie_tolerance)
    return Gate({**base.maxima, "text_token_mismatches": 0, "text_embedding_norm_max_dev": TEXT_NORM_MAX_DEV},
                {**base.minima, "text_cosine_min": TEXT_COSINE_MIN}, base.tie_tolerance)


def python_token_ids(text: dict, strings: list[str]) -> list[list[int]]:
    """Python's ids for the shipped encoder: arrcoc_edge.relevance.text_encoder.tokenize (MiniLM: [CLS]/[SEP],
    cut at 256) or arrcoc_edge.relevance.qwen_query.token_ids on the shipped tokenizer.json (raw text)."""
    from arrcoc_edge.relevance import qwen_query as qq
    from arrcoc_edge.relevance.text_encoder import tokenize
    from arrcoc_edge.targets.text_encoder.target import QWEN_KIND

    if text["kind"] == QWEN_KIND:
        tokenizer = qq.load_tokenizer(Path(text["tokenizer_json"]))
        return [qq.token_ids(tokenizer, s) for s in strings]
    return [tokenize([s])["input_ids"][0].tolist() for s in strings]


def python_qwen_embed(model: Path, ids: list[list[int]]) -> np.ndarray:
    """Python onnxruntime on query_encoder.onnx, one query per run as the page runs it."""
    from arrcoc_edge.targets.text_encoder.target import qwen_embed

    return qwen_embed(onnx_common.ort_session(model), ids).astype(np.float32)


def measure_text_in_browser(session: "PageSession", text: dict, log) -> tuple[dict, dict]:
    """The page's tokenizer and encoder in Chromium vs Python: (gated metrics, info).

    Token ids: the page (@huggingface/tokenizers on the shipped tokenizer.json) vs python_token_ids
    on every string of token_check_strings(), exact. Embeddings: MiniLM one run per string and in
    padded batches of 8 vs arrcoc_edge.relevance.text_encoder.embed (cosine); arr-coc-0-1's encoder on every
    string with tokens vs Python onnxruntime on the same file. Info: the page's time per query
    (tokenize + encode, batch 1) and the code-point sweep."""
    from arrcoc_edge.targets.text_encoder.target import QWEN_KIND

    strings = token_check_strings()
    got_ids = session.page.evaluate("(t) => window.arrcoc.tokenize(t)", strings)
    want_ids = python_token_ids(text, strings)
    session.check()
    mismatched = [s for s, got, want in zip(strings, got_ids, want_ids) if got != want]
    for s in mismatched[:3]:
        log(f"[web] token mismatch on {s[:60]!r}")
    metrics = {"text_token_strings": len(strings), "text_token_mismatches": len(mismatched),
               "text_token_ids_compared": int(sum(len(w) for w in want_ids))}
    if text["kind"] == QWEN_KIND:
        embedded, timing = _qwen_embeddings_in_browser(session, text, strings, want_ids)
    else:
        embedded, timing = _minilm_embeddings_in_browser(session, strings)
    metrics.update(embedded)
    timing["first_use_load_ms"] = session.page.evaluate("window.arrcoc.textLoadMs()")  # fetch + parse, once
    info = {"page_ms_per_query": timing, "code_point_sweep": code_point_sweep(session, text, log)}
    log(f"[web] free text in Chromium: {len(strings) - len(mismatched)}/{len(strings)} strings tokenized exactly; "
        f"embeddings cosine vs Python min {metrics['text_cosine_min']:.6f}; {timing['median']:.2f} ms per query (median)")
    return metrics, info


def _page_embeddings(session: "PageSession", strings: list[str], batch: int = 1) -> tuple[np.ndarray, dict]:
    res = session.page.evaluate("([t, b]) => window.arrcoc.embedTexts(t, b)", [strings, batch])
    session.check()
    emb = np.frombuffer(base64.b64decode(res["embeddings"]), np.float32).reshape(len(strings), -1)
    ms = np.asarray(res["ms"], np.float64)
    timing = {"queries": len(strings), "median": float(np.median(ms)), "mean": float(ms.mean()), "max": float(ms.max()),
              "tokenize_median": float(np.median(res["tokenizeMs"])), "encode_median": float(np.median(res["encodeMs"])),
              "threads": session.threads(), "what": "tokenize + encode, one query per run, the page's own clock "
                                                    "(performance.now); the corpus' strings, the first use's loading not counted"}
    return emb, timing


def _minilm_embeddings_in_browser(session: "PageSession", strings: list[str]) -> tuple[dict, dict]:
    from arrcoc_edge.stages.sentences import cached_minilm_embed as embed

    single, timing = _page_embeddings(session, strings, 1)
    batched, _ = _page_embeddings(session, strings, 8)
    ref = np.concatenate([embed(strings)] * 2).astype(np.float64)
    emb = np.concatenate([single, batched]).astype(np.float64)
    norms = np.linalg.norm(emb, axis=1)
    cos = (emb * ref).sum(axis=1) / (norms * np.linalg.norm(ref, axis=1))
    return {"text_embeddings_compared": len(emb), "text_cosine_min": float(cos.min()), "text_cosine_mean": float(cos.mean()),
            "text_embedding_norm_max_dev": float(np.abs(norms - 1.0).max()),
            "text_encoder_ms_per_string": timing["mean"]}, timing


def _qwen_embeddings_in_browser(session: "PageSession", text: dict, strings: list[str],
                                ids: list[list[int]]) -> tuple[dict, dict]:
    """A text with no tokens is no query (the page says so): those are left out here."""
    keep = [i for i, x in enumerate(ids) if x]
    got, timing = _page_embeddings(session, [strings[i] for i in keep], 1)
    ref = python_qwen_embed(text["model"], [ids[i] for i in keep]).astype(np.float64)
    got = got.astype(np.float64)
    cos = (got * ref).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    rel = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
    return {"text_embeddings_compared": len(keep), "text_cosine_min": float(cos.min()), "text_cosine_mean": float(cos.mean()),
            "text_embedding_max_abs": float(np.abs(got - ref).max()), "text_embedding_rel_err_max": float(rel.max()),
            "text_encoder_ms_per_string": timing["mean"]}, timing


def code_point_sweep(session: "PageSession", text: dict, log) -> dict:
    """Every code point of SWEEP between two letters ("a" + c + "b"), tokenized by the page and by
    the Rust crate (Python `tokenizers`) from the same tokenizer.json: recorded, not gated.

    A library reads tokenizer.json but classifies characters with the browser's Unicode tables
    (JavaScript \\p{...}, normalize()), which are newer than the crate's: characters assigned or
    re-categorised since are marks, punctuation or format characters to the browser and ordinary
    letters to the crate. No table of them can be handed to the library, so they are counted here
    (and the corpus, which the gate holds exact, keeps to characters both know)."""
    import tokenizers

    from arrcoc_edge.targets.text_encoder.target import QWEN_KIND

    strings = ["a" + chr(c) + "b" for c in SWEEP]
    packed = session.page.evaluate("(t) => window.arrcoc.tokenizePacked(t)", strings)
    session.check()
    lengths = np.frombuffer(base64.b64decode(packed["lengths"]), np.uint16)
    got = np.split(np.frombuffer(base64.b64decode(packed["ids"]), np.uint32), np.cumsum(lengths)[:-1])
    crate = tokenizers.Tokenizer.from_file(str(text["tokenizer_json"]))
    crate.no_truncation()
    crate.no_padding()
    want = crate.encode_batch(strings, add_special_tokens=text["kind"] != QWEN_KIND)
    differing = [c for c, g, w in zip(SWEEP, got, want) if g.tolist() != w.ids]
    ranges = _hex_ranges(differing)
    log(f"[web] code-point sweep: {len(differing)} of {len(SWEEP)} code points tokenize differently in the page"
        + (f" ({len(ranges)} ranges, {' '.join(ranges[:6])} ...)" if ranges else ""))
    return {"code_points": len(SWEEP), "differing": len(differing), "ranges": " ".join(ranges),
            "swept": "U+0000-U+323FF less the surrogates, U+E0000-U+E01EF, U+F0000-U+F00FF; each as 'a' + c + 'b'",
            "reference": f"Python tokenizers {tokenizers.__version__} (the Rust crate) on the same tokenizer.json",
            "gated": False}


def _hex_ranges(code_points: list[int]) -> list[str]:
    runs: list[list[int]] = []
    for c in code_points:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return [f"{a:x}" if a == b else f"{a:x}-{b:x}" for a, b in runs]


def token_check_strings() -> list[str]:
    """The corpus both tokenizers are held to, exactly: the encoder's SENTENCES, TOKEN_EXTRA, LONG_TEXT."""
    from arrcoc_edge.targets.text_encoder.target import SENTENCES

    return [*SENTENCES, *TOKEN_EXTRA, LONG_TEXT]


