"""contract.json: what a mobile app needs to know about the artifacts it ships, written by the build.

The Android and iOS sample apps read everything from this file (artifact names, tensor names,
shapes, dtypes, preprocessing, top-K, grid, gates, preset queries) so nothing is hard-coded
twice. Shared by the `android` and `ios` targets.

API:
  preset_queries(cfg, sentences=PRESET_SENTENCES) -> dict
      {"source", "items": [{"text", "embedding"}], "note"}; real all-MiniLM-L6-v2 embeddings
      from arrcoc_edge.relevance.text_encoder when it is installed and its width matches cfg.query_dim,
      otherwise NO presets and a note saying why (never random vectors).
  contract(cfg, artifacts, presets=None, golden=None) -> dict
      artifacts: {key: {"path": Path, "runtime": str, "variant": str, "topk_dtype": "int64",
                        "max_batch": int, "gate": Gate.to_dict(), ...extra keys kept}}
      Each entry is recorded with its file NAME, bytes and sha256 (the file must exist) and its
      own tensor table (topk_indices is int32 on CoreML, int64 elsewhere).
      presets=None computes preset_queries(cfg); pass a dict to reuse one.
      golden: optional {"json": name, "bin": name} of the golden bundle shipped next to it.
  write_contract(path, contract) -> Path      (sorted keys, UTF-8, trailing newline)
  check_files(contract, folder) -> list[str]  checks every listed file in `folder` (names,
      bytes, sha256); raises ExportError on any mismatch, returns the checks that passed.

App-bundle helpers shared by targets/ios/target.py and targets/android/target.py:
  bundle_allowance(cfg, split) -> int  bytes for the golden bundle, sample photo and contract
  write_sample(ctx, folder) -> Path    the golden whole photo SAMPLE_GOLDEN (451 x 300) as SAMPLE_IMAGE,
                                       lossless, at its own size
  tree_bytes(folder), tree_sha256(folder)  an .mlpackage folder's size and content hash
(app_folder.copy_to_app writes the staged bundle into the app's folder, the user's files in and
beside it untouched.)
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from arrcoc_edge.errors import ExportError
from arrcoc_edge.relevance.digest import sha256_file
from arrcoc_edge.relevance import evidence
from arrcoc_edge.relevance.signature import (EVIDENCE_NAMES, MAX_SIDE, MIN_SIDE, STRONGEST_SHARE, WAYS_OF_KNOWING,
                                             ModelConfig, strongest_cells)
from arrcoc_edge.stages.golden import BUNDLE_WHOLE, bundle_samples

CONTRACT_VERSION = 1
CONTRACT_FILE = "contract.json"
SAMPLE_IMAGE = "sample.png"
# The golden sample SAMPLE_IMAGE holds (a lossless PNG of it): the apps' on-device tests decode the
# PNG with the app's own code and compare the bytes with this sample's image in the golden bundle.
SAMPLE_GOLDEN = BUNDLE_WHOLE
GOLDEN_FILES = {"json": "golden.json", "bin": "golden.bin"}  # names arrcoc_edge.stages.golden.write_bundle writes

# Preset queries the sample apps offer: what the shipped checkpoint answers on real photos, position,
# strong colours and the open queries (docs/model.md), as the page's presets; never object names.
PRESET_SENTENCES = (
    "the top left",
    "the bottom right",
    "something red",
    "something blue",
    "something orange",
    "what stands out?",
    "the most detailed region",
    "anything unusual",
)

# How the apps turn a photo into the `image` tensor: they do not. The artifact takes the photo as
# decoded and does the reference's resize itself (pipeline/relevance/model.py); mirrors arrcoc_edge.stages.golden.load_photo.
PREPROCESSING = {
    "input": "the photo as decoded: uint8 [1,H,W,3], RGB, HWC, rows top to bottom",
    "orientation": "apply EXIF orientation first (the pixels as the photo is shown upright)",
    "alpha": "dropped: the colour values as stored, not composited (PIL's convert('RGB'))",
    "crop": None,  # none: the whole photo
    "resize": None,  # none: the artifact does arr-coc-0-1's bilinear resize to 16G itself
    "scale": None,  # none: the artifact divides by 255 (ToTensor) itself
    "layout": "NHWC",
    "dtype": "uint8 (CoreML: float16 holding the same byte values; see the artifact's tensors)",
    "min_side": MIN_SIDE,
    "max_side": MAX_SIDE,
    "batch": "photos of one size per batch",
    "query": "unit-norm float32 embedding of width query_dim (all-MiniLM-L6-v2 for D=384)",
}


def tensors(cfg: ModelConfig, topk_dtype: str = "int64", batch: int | str = "batch",
            image_dtype: str = "uint8") -> dict:
    """The I/O table of one artifact: names -> {dtype, shape}; `batch`, "height" and "width" mark
    the dynamic dimensions (height and width: the photo's own, MIN_SIDE..MAX_SIDE)."""
    return {
        "inputs": [
            {"name": "image", "dtype": image_dtype, "shape": [batch, "height", "width", 3]},
            {"name": "query", "dtype": "float32", "shape": [batch, cfg.query_dim]},
        ],
        "outputs": [
            {"name": "relevance", "dtype": "float32", "shape": [batch, cfg.num_patches]},
            {"name": "topk_indices", "dtype": topk_dtype, "shape": [batch, cfg.top_k]},
            {"name": "weights", "dtype": "float32", "shape": [batch, 3]},
            {"name": "evidence", "dtype": "float32", "shape": [batch, len(EVIDENCE_NAMES)]},
        ],
    }


def golden_presets(cfg: ModelConfig, split, why: str, count: int = 6) -> dict:
    """The golden set's query embeddings as presets, for a checkpoint whose query width no shipped
    sentence encoder gives (e.g. D=2048 for Qwen3-VL-2B): the demo and apps still run, and say so."""
    items = [{"text": f"golden query {i + 1} ({name})", "embedding": [round(float(x), 7) for x in q]}
             for i, (name, q) in enumerate(zip(split.names[:count], split.queries[:count]))]
    note = (f"no query encoder of width {cfg.query_dim} ships with this build ({why}): "
            "the presets are the golden set's query embeddings")
    return {"source": "golden set (seeded unit vectors)", "items": items, "note": note}


def preset_queries(cfg: ModelConfig, sentences=PRESET_SENTENCES, fallback_split=None) -> dict:
    """Real sentence embeddings for the apps' preset queries; when the encoder's width is not the
    checkpoint's, the golden queries of `fallback_split` (or none), with the reason."""
    try:
        # Imported lazily: the text encoder is another optional extra.
        from arrcoc_edge.relevance import text_encoder
    except ImportError as exc:
        return {"source": None, "items": [], "note": f"no presets: arrcoc_edge.relevance.text_encoder unavailable ({exc})"}
    try:
        from arrcoc_edge.stages.sentences import cached_minilm_embed

        vectors = cached_minilm_embed(list(sentences))
    except Exception as exc:  # noqa: BLE001 - a missing model/extra must not fail the mobile build
        return {"source": None, "items": [], "note": f"no presets: text encoder failed ({type(exc).__name__}: {exc})"}
    if vectors.shape[1] != cfg.query_dim:
        if fallback_split is not None:
            return golden_presets(cfg, fallback_split, f"the text encoder gives {vectors.shape[1]}-d vectors")
        return {"source": None, "items": [],
                "note": f"no presets: the text encoder gives {vectors.shape[1]}-d vectors, the checkpoint expects {cfg.query_dim}"}
    source = getattr(text_encoder, "MODEL_NAME", "all-MiniLM-L6-v2")
    items = [{"text": t, "embedding": [round(float(x), 7) for x in v]} for t, v in zip(sentences, vectors)]
    return {"source": str(source), "items": items, "note": None}


def encoded_presets(cfg: ModelConfig, checkpoint: Path, base_model: Path | None,
                    sentences=PRESET_SENTENCES) -> dict | None:
    """The preset sentences through arr-coc-0-1's own query encoder (exact: bf16 token-embedding
    mean), when the checkpoint or --base-model carries the table; None when neither does."""
    from arrcoc_edge.relevance import qwen_query as qq

    table = qq.find_table(checkpoint, base_model)
    if table is None:
        return None
    path, origin = qq.tokenizer_file(base_model)
    tokenizer = qq.load_tokenizer(path)  # the build core checked it against the table (check_sources)
    items = []
    for text in sentences:
        ids = qq.token_ids(tokenizer, text)
        items.append({"text": text, "token_ids": ids, "embedding": [float(x) for x in qq.exact_query(table, ids)]})
    return {"source": f"arr-coc-0-1's query encoder (mean of Qwen3-VL input token embeddings, bf16; table: "
                      f"{table.origin}; tokenizer: {origin})", "items": items, "note": None}


# Why an app takes presets only: the contract says so instead of leaving users to guess (the android
# stage replaces it with the encoder it verified, or with why it has none).
TYPED_TEXT = {
    "supported": False,
    "why": ("no tokenizer and query encoder were built for this app: the android stage ships them when its "
            "encoder passes its gate (targets/app_encoder.py), the ios stage when its encoder does (targets/ios/encoder.py)"),
    "encoder": "the text-encoder target's files (its manifest entry) are what such an app would use; "
               "the page (web target) answers typed queries with them",
}


def presets_for_build(ctx) -> dict:
    """The presets a mobile target ships: real encoded sentences when an encoder of the
    checkpoint's width exists (arr-coc-0-1's own, else MiniLM for D=384), else golden queries."""
    encoded = encoded_presets(ctx.config, ctx.checkpoint.path, ctx.options.get("base_model"))
    return encoded if encoded is not None else preset_queries(ctx.config, fallback_split=ctx.golden.heldout)


def contract(cfg: ModelConfig, artifacts: dict[str, dict], presets: dict | None = None,
             golden: dict | None = None, fallback_split=None, calibration: dict | None = None) -> dict:
    """The contract for the given artifacts (files must already be written). calibration: the
    build's calibration.json (Calibration.to_dict()), or None: the apps then say "no calibration
    in this folder" instead of a confidence."""
    entries = {}
    for key, spec in artifacts.items():
        path = Path(spec["path"])
        if not path.is_file():
            raise ExportError(f"contract: artifact '{key}' file {path.name} does not exist",
                              "write the artifacts before the contract")
        topk_dtype = spec.get("topk_dtype", "int64")
        image_dtype = spec.get("image_dtype", "uint8")
        extra = {k: v for k, v in spec.items() if k not in ("path", "topk_dtype", "image_dtype")}
        entries[key] = {**extra, "file": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path),
                        "topk_dtype": topk_dtype, **tensors(cfg, topk_dtype, image_dtype=image_dtype)}
    presets = preset_queries(cfg, fallback_split=fallback_split) if presets is None else presets
    return {
        "version": CONTRACT_VERSION,
        "model": {
            "image_size": cfg.image_size, "grid": cfg.grid, "num_patches": cfg.num_patches,
            "top_k": cfg.top_k, "query_dim": cfg.query_dim,
            # relevance[b, r * grid + c] scores the cell at row r, column c (row-major) of a grid laid
            # over the whole photo: on a W x H photo a cell is W/grid wide and H/grid tall.
            "patch_index": "row * grid + col, row-major; a cell is photo width / grid wide and photo height / grid tall",
            "weights_order": list(WAYS_OF_KNOWING),
            # the `evidence` output's values, and the share of the grid the answer rests on
            "evidence_names": list(EVIDENCE_NAMES), "strongest_share": STRONGEST_SHARE,
        },
        "preprocessing": dict(PREPROCESSING),
        "artifacts": entries,
        "golden": golden,
        "presets": presets,
        "typed_text": dict(TYPED_TEXT),
        "calibration": calibration,
    }


def build_calibration(ctx) -> dict | None:
    """The calibration this build publishes as calibration.json (the build core fits it before any
    stage: stages/calibration.py), for the apps to carry; None when the build has none."""
    return ctx.options.get("confidence_calibration")


# The calibration the apps' own tests hold Verdict.kt and Verdict.swift to: coefficients of the
# tests' own choosing (not a fitted calibration), so both verdicts and both rounding edges occur.
TEST_CALIBRATION = evidence.Calibration((8.0, -2.0, 1.0, 3.0), -6.0,
                                        {"purpose": "the sample apps' tests only; not fitted on photos"})


def verdict_cases(golden_evidence, golden_relevance, golden_topk) -> dict:
    """Python's confidences and verdict lines (arrcoc_edge.relevance.evidence) for the golden
    samples' evidence, shifted copies of it and the extremes, and each sample's strongest cells,
    for the apps' tests (VerdictTest.kt, CoreTests' VerdictTests)."""
    import numpy as np

    rows = np.asarray(golden_evidence, np.float32).reshape(-1, len(EVIDENCE_NAMES))
    rows = np.concatenate([rows, rows + np.float32(0.1), rows - np.float32(0.1),
                           np.zeros((1, rows.shape[1]), np.float32), np.ones((1, rows.shape[1]), np.float32)])
    cases = []
    for row in rows:
        value = float(TEST_CALIBRATION.confidence(row))
        cases.append({"evidence": [float(x) for x in row], "confidence": value, "text": evidence.verdict(value)})
    strongest = []
    for relevance, topk in zip(golden_relevance, golden_topk):
        relevance, picks = np.asarray(relevance).ravel(), [int(i) for i in np.asarray(topk).ravel()]
        ranked = sorted(picks, key=lambda i: -relevance[i])  # stable: ties keep the model's order
        strongest.append({"relevance": [float(x) for x in relevance], "topk": picks,
                          "cells": ranked[:strongest_cells(relevance.size)]})
    return {"calibration": TEST_CALIBRATION.to_dict(), "cases": cases, "unknown_text": evidence.verdict(None),
            "strongest": strongest}


def write_contract(path: Path, data: dict) -> Path:
    path = Path(path)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def check_files(data: dict, folder: Path) -> list[str]:
    """Every artifact the contract lists is in `folder` with the recorded bytes and sha256."""
    folder = Path(folder)
    problems, checked = [], []
    for key, entry in data.get("artifacts", {}).items():
        path = folder / entry["file"]
        if not path.is_file():
            problems.append(f"{key}: {entry['file']} missing")
        elif path.stat().st_size != entry["bytes"] or sha256_file(path) != entry["sha256"]:
            problems.append(f"{key}: {entry['file']} differs from the contract (bytes/sha256)")
        else:
            checked.append(entry["file"])
    for name in (data.get("golden") or {}).values():
        if not (folder / name).is_file():
            problems.append(f"golden bundle file {name} missing")
    if problems:
        raise ExportError(f"contract.json does not match the files: {'; '.join(problems)}",
                          "rebuild the target so the contract is rewritten with its artifacts")
    return [f"contract.json matches {len(checked)} artifact file(s) by name, bytes and sha256"]


def bundle_files(folder: Path) -> dict[str, dict]:
    """contract.json's `files`: every file of the bundle staged in `folder` but contract.json itself,
    by relative path (an .mlpackage's files one by one), with bytes and sha256. The apps check a
    file against it before they trust it, so a bundle mixed from two builds (a copy killed half
    way: some files new, some old) is found rather than run."""
    files = {}
    for path in sorted(Path(folder).rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel != CONTRACT_FILE:
            files[rel] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    return files


def check_bundle_files(data: dict, folder: Path) -> list[str]:
    """Every file contract.json's `files` names is in `folder` with those bytes and sha256."""
    named = data.get("files") or {}
    problems = []
    for rel, entry in sorted(named.items()):
        path = Path(folder) / rel
        if not path.is_file():
            problems.append(f"{rel} missing")
        elif path.stat().st_size != entry["bytes"] or sha256_file(path) != entry["sha256"]:
            problems.append(f"{rel} differs from the contract (bytes/sha256)")
    if problems:
        raise ExportError(f"contract.json does not match the files (a bundle mixed from two builds?): "
                          f"{'; '.join(problems[:5])}" + (f" and {len(problems) - 5} more" if len(problems) > 5 else ""),
                          "rebuild the target so the whole bundle is copied again")
    return [f"contract.json's files: all {len(named)} bundle files match by bytes and sha256"]


def check_typed_text_files(data: dict, folder: Path) -> list[str]:
    """The tokenizer and encoder typed_text names (files, or an .mlpackage folder) are in `folder` with
    the recorded bytes and sha256."""
    typed = data.get("typed_text") or {}
    if not typed.get("supported"):
        return []
    problems = []
    for part in ("tokenizer", "encoder"):
        entry = typed[part]
        path = Path(folder) / entry["file"]
        if not path.exists():
            problems.append(f"typed_text {part} {entry['file']} missing")
            continue
        # an .mlpackage (iOS's CoreML encoder) is a folder: its size and content hash as tree_* count them
        size, digest = (tree_bytes(path), tree_sha256(path)) if path.is_dir() else (path.stat().st_size, sha256_file(path))
        if (size, digest) != (entry["bytes"], entry["sha256"]):
            problems.append(f"typed_text {part} {entry['file']} differs from the contract (bytes/sha256)")
    if problems:
        raise ExportError(f"contract.json does not match the files: {'; '.join(problems)}",
                          "rebuild the target so the contract is rewritten with its files")
    return [f"typed_text: {typed['tokenizer']['file']} and {typed['encoder']['file']} match by name, bytes and sha256"]


def bundle_allowance(cfg, split, crops: int = 2) -> int:
    """Bytes for what the app carries besides its models, computed from the golden split the bundle
    is written from (arrcoc_edge.stages.golden.bundle_samples): the uint8 photos as stored ([1,H,W,3], 1 byte
    a value: 2 crops of 16G x 16G and the whole 451 x 300 photo), each sample's float32 query,
    relevance and weights and int64 indices; the sample photo (lossless PNG of the whole photo, at
    most its raw bytes plus PNG framing); and 256 KB for golden.json and contract.json."""
    chosen = bundle_samples(split, crops)
    photos = sum(int(split.images[i].nbytes) for i in chosen)
    outputs = len(chosen) * (4 * (cfg.query_dim + cfg.num_patches + 3) + 8 * cfg.top_k)
    sample_png = int(split.images[split.names.index(SAMPLE_GOLDEN)].nbytes) + 64 * 1024
    return photos + outputs + sample_png + 256 * 1024


def write_sample(ctx, folder: Path) -> Path:
    """The golden set's whole non-square photo (arrcoc_edge.stages.golden.BUNDLE_WHOLE, 451 x 300) at its own
    size, lossless, for the apps' 'bundled sample' button: what a user's photo looks like to them."""
    from PIL import Image

    heldout = ctx.golden.heldout
    path = Path(folder) / SAMPLE_IMAGE
    Image.fromarray(heldout.images[heldout.names.index(SAMPLE_GOLDEN)]).save(path, optimize=True)
    return path


def pil_upright(orientation: int, stored):
    """PIL's ImageOps.exif_transpose of `stored` tagged with an EXIF orientation, as
    arrcoc_edge.stages.golden.load_photo applies it: what both apps' EXIF re-index is tested against."""
    import io

    import numpy as np
    from PIL import Image, ImageOps

    im = Image.fromarray(stored)
    exif = im.getexif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, "PNG", exif=exif)
    buf.seek(0)
    return np.asarray(ImageOps.exif_transpose(Image.open(buf)).convert("RGB"))


def tree_sha256(folder: Path) -> str:
    """A folder's content hash: sorted relative paths and the sha256 of each file."""
    h = hashlib.sha256()
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        h.update(p.relative_to(folder).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
