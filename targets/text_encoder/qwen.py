"""The shipped form of arr-coc-0-1's query encoder (pipeline/relevance/qwen_query.py) for the text-encoder target.

Why not the table: 151,936 x 2048 rows are 622 MB in bf16. Only linear maps of q reach the model:
the participatory head reads W2^T q^ and b2.q^ (q^ = q/|q|), the balancer's first layer reads its
query columns times q. Call those rows P (64 + 1 + 128 = 193 for Qwen3-VL-2B's width). So:

  basis   B = an orthonormal basis of P's row space, plus `extra` principal directions of the
          table's remainder (they only sharpen |q|, below); [m, D]
  coords  c_t = B e_t for every token t (fp16: the table itself is bf16); [V, m]
  energy  rho_t = |e_t|^2 - |c_t|^2, what of each row lies outside B; [V]

and for ids t_1..t_n the encoder returns q' = mean(c) B + sqrt(rho_bar) u, with u a fixed unit
vector orthogonal to B and rho_bar = (1/n^2) sum over pairs of equal ids of rho. Then P q' = P q
exactly (up to fp16 coordinates), and |q'| = |q| up to the cross terms e_s.e_t (s != t) of
the rows' parts outside B, which are all the model can still feel: they set |q|, so how the
participatory cosine is scaled. Rows of one id repeated are counted exactly. The reference also
rounds its mean to bf16; that rounding is not reproduced. Both are measured, not assumed: the
target gates this form on relevance top-K against the exact encoder over a query corpus.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROW_CHUNK = 8192
PCA_SAMPLE_ROWS = 16384


@dataclass
class TokenMeanForm:
    basis: np.ndarray  # float32 [m, D], orthonormal rows
    coords: np.ndarray  # float16 [V, m]
    energy: np.ndarray  # float32 [V]
    tail: np.ndarray  # float32 [D], unit, orthogonal to basis
    query_rows: int  # rows of the basis that span P (the rest sharpen |q|)

    @property
    def nbytes(self) -> int:
        return self.basis.nbytes + self.coords.nbytes + self.energy.nbytes + self.tail.nbytes

    def query(self, ids: list[int]) -> np.ndarray:
        """q' for one query, float32 [D] (numpy; the ONNX graph computes the same)."""
        ids_arr = np.asarray(ids, dtype=np.int64)
        mean = self.coords[ids_arr].astype(np.float32).mean(axis=0)
        count = (ids_arr[:, None] == ids_arr[None, :]).sum(axis=0).astype(np.float32)  # of each token's id
        rho = float((count * self.energy[ids_arr]).sum() / np.float32(len(ids_arr)) ** 2)
        return (mean @ self.basis + np.sqrt(max(rho, 0.0)) * self.tail).astype(np.float32)


def query_maps(model) -> np.ndarray:
    """P: every row through which a query reaches the model, float64 [R, D]."""
    conv2 = model.participatory_scorer.texture_proj[2]
    w2 = conv2.weight.detach().flatten(1).double()  # [D, 64]
    first = model.balancer.weight_predictor[0].weight.detach().double()  # [h, 9 + D]
    return torch.cat([w2.T, conv2.bias.detach().double()[None], first[:, 9:]]).numpy()


def design(table, rows: int, maps: np.ndarray, extra: int, seed: int = 0) -> TokenMeanForm:
    """The form for the first `rows` rows of `table` (arrcoc_edge.relevance.qwen_query.Table)."""
    _, s, vt = np.linalg.svd(maps, full_matrices=False)
    span = vt[s > s[0] * 1e-9]  # [r, D]
    basis = span
    if extra:
        basis = np.concatenate([span, _principal_remainder(table, rows, span, extra, seed)])
    basis, _ = np.linalg.qr(basis.T)  # re-orthonormalise in float64
    basis = basis.T
    rng = np.random.default_rng(seed)
    tail = rng.standard_normal(basis.shape[1])
    tail -= basis.T @ (basis @ tail)
    tail /= np.linalg.norm(tail)
    coords = np.empty((rows, basis.shape[0]), np.float16)
    energy = np.empty(rows, np.float32)
    b32 = basis.astype(np.float32)
    for start in range(0, rows, ROW_CHUNK):
        x = table.rows(start, min(rows, start + ROW_CHUNK)).float().numpy()
        c = x @ b32.T
        coords[start : start + len(x)] = c
        energy[start : start + len(x)] = (x.astype(np.float64) ** 2).sum(1) - (c.astype(np.float64) ** 2).sum(1)
    return TokenMeanForm(b32, coords, energy, tail.astype(np.float32), len(span))


def _principal_remainder(table, rows: int, span: np.ndarray, extra: int, seed: int) -> np.ndarray:
    """The `extra` strongest directions of the table's rows outside span (second moment, not
    covariance: |q| is uncentred), from a seeded sample of rows."""
    pick = np.sort(np.random.default_rng(seed).choice(rows, size=min(rows, PCA_SAMPLE_ROWS), replace=False))
    x = np.concatenate([table.take(pick[i : i + 1024].tolist()).float().numpy() for i in range(0, len(pick), 1024)])
    x = x.astype(np.float64)
    x -= (x @ span.T) @ span
    _, vecs = np.linalg.eigh(x.T @ x)
    return vecs[:, ::-1][:, :extra].T


class TokenMeanModule(torch.nn.Module):
    """The form as a graph: input_ids int64 [T] -> query_embedding float32 [1, D]."""

    def __init__(self, form: TokenMeanForm):
        super().__init__()
        self.register_buffer("coords", torch.from_numpy(form.coords))
        self.register_buffer("energy", torch.from_numpy(form.energy))
        self.register_buffer("basis", torch.from_numpy(form.basis))
        self.register_buffer("tail", torch.from_numpy(form.tail)[None])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mean = self.coords[input_ids].float().mean(dim=0, keepdim=True)  # [1, m]
        # sum over pairs of equal ids of rho / T^2, as T sums of exact integer counts: a mean over
        # all T x T pairs would round in an order each runtime chooses (WASM vs native differed)
        count = (input_ids[:, None] == input_ids[None, :]).float().sum(dim=0)
        tokens = torch.ones_like(input_ids, dtype=torch.float32).sum()
        rho = (count * self.energy[input_ids]).sum() / (tokens * tokens)
        return mean @ self.basis + rho.clamp(min=0.0).sqrt() * self.tail


def export_onnx(form: TokenMeanForm, path: Path) -> Path:
    import contextlib
    import io

    import onnx
    from torch.export import Dim

    from arrcoc_edge.targets.shared import onnx_common

    example = torch.tensor([9064, 374, 279, 10525, 30], dtype=torch.long)
    with contextlib.redirect_stdout(io.StringIO()), onnx_common.quiet_torch_onnx():
        torch.onnx.export(TokenMeanModule(form).eval(), (example,), str(path), input_names=["input_ids"],
                          output_names=["query_embedding"], dynamic_shapes={"input_ids": {0: Dim("tokens", min=1, max=1 << 20)}},
                          external_data=False, optimize=True)
    model = onnx.load(str(path))
    onnx_common.strip_metadata(model)
    onnx.save(model, str(path))
    return path


# Questions as users of a VQA model type them; the target's gate runs them with SENTENCES.
QUESTIONS = (
    "Where is the cup?", "What colour is the cat?", "How many people are in the picture?",
    "Is there a rocket on the launch pad?", "What is the astronaut holding?", "Which flower is the largest?",
    "Describe the object in the top left corner.", "Is the coffee hot?", "What is written on the sign?",
    "Where are the stars brightest?", "What is behind the building?", "Is anyone wearing a hat?",
    "What animal is this?", "Find the red car.", "Where is the text?", "What is on the table?",
    "¿Dónde está el gato?", "猫在哪里？", "أين القطة؟", "Où est la tasse de café ?",
)
EXTRA_DIMS = (0, 16, 64, 256)  # tried in order: the smallest form that passes is shipped
NORM_REL_MAX = 0.02  # |q'| / |q| - 1 over the corpus, for choosing among the forms


def corpus(tokenizer, sentences) -> tuple[list[str], list[list[int]]]:
    """The gate's queries with their ids; texts with no tokens (empty) are not queries."""
    from arrcoc_edge.relevance.qwen_query import token_ids

    texts = [s for s in (*sentences, *QUESTIONS) if token_ids(tokenizer, s)]
    return texts, [token_ids(tokenizer, s) for s in texts]


def exact_on_photos(model, photos: list[np.ndarray], exact: np.ndarray) -> list[tuple]:
    """Per photo: its textures and the exact queries' relevance and top-K, which every tried form is
    compared with (computed once, not once per form: the same numbers)."""
    found = []
    with torch.no_grad():
        for photo in photos:
            textures = model.texture(torch.from_numpy(np.ascontiguousarray(photo))[None])
            textures = textures.expand(len(exact), *textures.shape[1:])
            rel, idx, *_ = model.from_textures(textures, torch.from_numpy(exact))
            found.append((textures, rel.numpy(), idx.numpy()))
    return found


def topk_on_photos(model, references: list[tuple], shipped: np.ndarray, tie: float) -> dict:
    """Top-K of every (photo, query) pair with the shipped queries against the exact ones
    (`references`: exact_on_photos)."""
    from arrcoc_edge.stages.parity import topk_overlap

    overlaps = []
    with torch.no_grad():
        for textures, rel, idx in references:
            _, got, *_ = model.from_textures(textures, torch.from_numpy(shipped))
            overlaps.append(topk_overlap(rel, idx, got.numpy(), tie)[0])
    overlaps = np.concatenate(overlaps)
    return {"corpus_topk_overlap_mean": float(overlaps.mean()), "corpus_topk_overlap_min": float(overlaps.min()),
            "corpus_pairs": int(len(overlaps))}


def query_metrics(model, exact: np.ndarray, shipped: np.ndarray) -> dict:
    """What the model can feel of the difference: its query maps P and |q|."""
    maps = query_maps(model)
    pe, ps = exact.astype(np.float64) @ maps.T, shipped.astype(np.float64) @ maps.T
    norm_ratio = np.linalg.norm(shipped, axis=1) / np.linalg.norm(exact, axis=1)
    return {"query_maps_rel_err_max": float(np.abs(ps - pe).max() / np.abs(pe).max()),
            "query_norm_rel_err_max": float(np.abs(norm_ratio - 1.0).max())}
