"""`invoke predict`: one whole photo and a query through a published artifact in its real runtime.

The photo goes in as decoded (pipeline.golden.load_photo: EXIF orientation applied, RGB, alpha
dropped, no crop, no resize): the artifact does the reference's resize itself. The query is a
sentence (when this checkpoint's width has a query encoder here) or a float32 .npy of shape [D].
Published files are checked against the manifest's sha256 before they are loaded.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InputError
from .golden import load_photo
from .model import WAYS_OF_KNOWING
from .target import Target

# When no bench.json says otherwise: the order `invoke bench` measured on CPU at batch 1
# (onnxruntime FP32 fastest; see the README's benchmark table).
PREFERRED = ("onnx", "onnx-int8", "executorch", "ptl")


@dataclass
class Prediction:
    grid: int
    top_k: int
    image_size: tuple[int, int]  # (H, W)
    runtime: str
    relevance: np.ndarray  # [G*G]
    topk_indices: np.ndarray  # [K]
    weights: np.ndarray  # [3]
    milliseconds: float

    def to_json(self) -> dict:
        return {"grid": self.grid, "top_k": self.top_k, "image_size": list(self.image_size), "runtime": self.runtime,
                "relevance": [float(x) for x in self.relevance], "topk_indices": [int(i) for i in self.topk_indices],
                "weights": [float(w) for w in self.weights]}


def runnable(manifest: dict, targets: dict) -> dict[str, tuple[str, str]]:
    """Runtime name -> (target, variant) for every published variant this process can run.
    A target's name means its first (primary) variant; `target:variant` names any other."""
    names = {}
    for name, entry in (manifest.get("targets") or {}).items():
        target = targets.get(name)
        if target is None or entry.get("status") != "published" or target.missing_modules():
            continue
        if type(target).published_runner is Target.published_runner:
            continue  # the target offers no runtime here (CoreML off macOS, TensorRT without a GPU)
        variants = [v for v, e in (entry.get("variants") or {}).items() if e.get("status") == "verified"]
        for i, variant in enumerate(variants):
            names[f"{name}:{variant}"] = (name, variant)
            if i == 0:
                names[name] = (name, variant)
    return names


def choose_runtime(requested: str | None, names: dict, out: Path) -> str:
    if not names:
        raise InputError(f"nothing published in {out} runs in this process",
                         "run `invoke build --target onnx` (or executorch, ptl) first")
    if requested is not None:
        if requested not in names:
            raise InputError(f"runtime {requested!r} is not published in {out}",
                             f"use one of: {', '.join(sorted(names))}")
        return requested
    measured = _bench_order(out, names)
    return next((n for n in measured + list(PREFERRED) if n in names), sorted(names)[0])


def _bench_order(out: Path, names: dict) -> list[str]:
    """Runtime names by their batch-1 median in OUT/bench.json (this host's own measurement)."""
    try:
        rows = json.loads((out / "bench.json").read_text()).get("rows") or []
    except (OSError, ValueError):
        return []
    best: dict[str, float] = {}
    for row in rows:
        if row.get("batch") != 1:
            continue
        for name, (target, variant) in names.items():
            label = row.get("runtime", "")
            if name == target and (label.startswith(f"onnxruntime {variant} ") if target.startswith("onnx")
                                   else label.startswith(target.replace("ptl", "lite interpreter"))):
                best[name] = min(best.get(name, float("inf")), float(row["median_ms"]))
    return sorted(best, key=best.get)


def query_vector(text: str | None, embedding: Path | None, dim: int, out: Path, manifest: dict,
                 targets: dict) -> np.ndarray:
    """The query as float32 [1, D]: from a .npy of shape [D], or a sentence through the encoder
    this checkpoint has: a published one (arr-coc-0-1's, Target.encode_query), else MiniLM for D=384."""
    if embedding is not None:
        return _embedding_file(embedding, dim)
    if not text.strip():
        raise InputError("--query is empty", "type the question, e.g. --query 'where is the cat?'")
    for name, entry in (manifest.get("targets") or {}).items():
        if entry.get("status") == "published" and name in targets and not targets[name].missing_modules():
            query = targets[name].encode_query(out, entry, text)
            if query is not None:
                return query
    from . import text_encoder

    if dim != text_encoder.EMBED_DIM:
        raise InputError(f"no query encoder for this checkpoint's width {dim} is published in {out}",
                         "build it: invoke build --target text-encoder --base-model QWEN3_VL_SNAPSHOT_DIR "
                         f"(or pass --query-embedding FILE.npy, float32 [{dim}])")
    import logging

    logging.disable(logging.WARNING)  # import-time notices of torchao and torch, not about this query
    try:
        return text_encoder.embed([text]).astype(np.float32)
    finally:
        logging.disable(logging.NOTSET)


def _embedding_file(embedding: Path, dim: int) -> np.ndarray:
    try:
        vec = np.load(embedding, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{embedding}: not a readable .npy file ({exc.__class__.__name__})",
                         "save the embedding with numpy.save(path, vector.astype('float32'))") from exc
    if vec.dtype != np.float32 or vec.shape != (dim,):
        raise InputError(f"{embedding} holds {vec.dtype} {list(vec.shape)}, this checkpoint takes float32 [{dim}]",
                         f"save a float32 vector of shape [{dim}] (the checkpoint's query width)")
    if not np.isfinite(vec).all():
        raise InputError(f"{embedding} holds NaN or infinite values", "save a finite query embedding")
    return vec[None]


def predict(out: Path, manifest: dict, targets: dict, photo_path: Path, text: str | None,
            embedding: Path | None, runtime: str | None) -> Prediction:
    settings = (manifest.get("checkpoint") or {}).get("model") or {}
    grid, top_k, dim = settings["grid"], settings["top_k"], settings["query_dim"]
    names = runnable(manifest, targets)
    name = choose_runtime(runtime, names, out)
    photo = load_photo(photo_path)
    query = query_vector(text, embedding, dim, out, manifest, targets)
    target, variant = names[name]
    entry = manifest["targets"][target]
    check_published(out, entry, variant)
    runner = targets[target].published_runner(out, entry, variant)
    try:
        inputs = {"image": photo[None], "query": query}
        runner.run(inputs)  # warm: the first call of a runtime allocates and plans
        start = time.perf_counter()
        outs = runner.run(inputs)
        ms = (time.perf_counter() - start) * 1000.0
    finally:
        runner.close()
    return Prediction(grid, top_k, photo.shape[:2], f"{name} ({runner.runtime})", np.asarray(outs["relevance"][0]),
                      np.asarray(outs["topk_indices"][0]), np.asarray(outs["weights"][0]), ms)


def check_published(out: Path, entry: dict, variant: str) -> None:
    """The variant's files are regular files with the manifest's bytes and sha256 (publish.check_file,
    as bench checks them): never run a file that changed."""
    from .publish import check_file

    for rel in entry["variants"][variant]["files"]:
        listed = next((f for f in entry.get("files", []) if f["path"] == rel), None)
        why = "not listed" if listed is None else check_file(out, listed)
        if why:
            raise InputError(f"published file {rel} is missing or differs from the manifest ({why})",
                             "run `invoke verify` to see what changed, then rebuild with `invoke build`")


def describe(p: Prediction) -> str:
    """What the terminal shows: the weights, then the selected cells by relevance."""
    h, w = p.image_size
    lines = [f"photo {w} x {h} px, grid {p.grid} x {p.grid} (cell {w / p.grid:.1f} x {h / p.grid:.1f} px), "
             f"runtime {p.runtime}, {p.milliseconds:.2f} ms",
             "weights: " + ", ".join(f"{k} {v:.3f}" for k, v in zip(WAYS_OF_KNOWING, p.weights)),
             f"top-{p.top_k} cells (row, col: relevance), most relevant first:"]
    order = sorted(p.topk_indices.tolist(), key=lambda i: -p.relevance[i])
    cells = [f"({i // p.grid},{i % p.grid}: {p.relevance[i]:.3f})" for i in order]
    lines += ["  " + " ".join(cells[k : k + 8]) for k in range(0, len(cells), 8)]
    return "\n".join(lines)
