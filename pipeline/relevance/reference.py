"""The literal oracle: ARR-COC v0.1 computed the slow way the reference computes it, with kornia.

This is what a user's training code (arr-coc-0-1: texture.py, knowing.py, balancing.py,
attending.py) computes from the same weights, written out by us step by step in the reference's
own order, from the photo as decoded: ToTensor (uint8 HWC -> float CHW / 255), the bilinear
resize of the whole photo to 16*G x 16*G (align_corners=False, no antialias, no crop), kornia LAB / grayscale / normalised Sobel at every pixel,
bilinear down to G x G (align_corners=False), min-max across the whole batch, the direct
participatory projection into the D-wide query space, the balancer MLP, top-K.

It never goes into an artifact. Tests hold `pipeline/relevance/model.py` to it at batch 1 (where per-sample
and batch-wide min-max agree) and `invoke bench` uses it as the baseline a user would run without
this tool. It reads the learned weights from a state dict, so it shares no code with model.py.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from arrcoc_edge.relevance.model import ModelConfig
from arrcoc_edge.relevance.signature import strongest_cells
from arrcoc_edge.relevance.texture_maths import CELL

_EPS = 1e-8


def _bilinear(x: torch.Tensor, size: int) -> torch.Tensor:
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)


def _minmax_batch(x: torch.Tensor) -> torch.Tensor:
    """The reference's normalisation: one min and max over the whole batch."""
    return (x - x.min()) / (x.max() - x.min() + _EPS)


def texture(image: torch.Tensor, grid: int) -> torch.Tensor:
    """[B,3,H,W] RGB in [0,1] -> [B,13,G,G], as arr-coc-0-1's generate_texture_array."""
    import kornia

    big = _bilinear(image, CELL * grid)
    lab = kornia.color.rgb_to_lab(big)
    gray = kornia.color.rgb_to_grayscale(big)
    grads = kornia.filters.spatial_gradient(gray, mode="sobel", normalized=True)
    gx, gy = grads[:, :, 0], grads[:, :, 1]
    mag = torch.sqrt(gx**2 + gy**2 + 1e-8)

    lum = _bilinear(lab[:, 0:1], grid) / 100.0
    a_star = (_bilinear(lab[:, 1:2], grid) + 128.0) / 255.0
    edges = [_minmax_batch(_bilinear(e, grid)) for e in (gx, gy, mag)]

    axis = torch.linspace(0.0, 1.0, grid)
    ys, xs = torch.meshgrid(axis, axis, indexing="ij")
    ecc = torch.sqrt((ys - 0.5) ** 2 + (xs - 0.5) ** 2)
    ecc = ecc / ecc.max()
    batch = image.shape[0]
    pos = [p.expand(batch, 1, grid, grid) for p in (ys, xs, ecc)]
    return torch.cat([_bilinear(big, grid), lum, a_star, *edges, *pos, edges[2], lum], dim=1)


def information(tex: torch.Tensor) -> torch.Tensor:
    p = F.softmax(tex, dim=1)
    return _minmax_batch(-(p * torch.log(p + 1e-10)).sum(dim=1))


def participatory(tex: torch.Tensor, query: torch.Tensor, w: dict) -> torch.Tensor:
    """Direct form: project every patch into the D-wide query space, cosine, map to [0,1]."""
    hidden = F.relu(F.conv2d(tex, w["participatory_scorer.texture_proj.0.weight"],
                             w["participatory_scorer.texture_proj.0.bias"]))
    feats = F.conv2d(hidden, w["participatory_scorer.texture_proj.2.weight"],
                     w["participatory_scorer.texture_proj.2.bias"])
    feats = F.normalize(feats, dim=1)
    q = F.normalize(query, dim=1)[:, :, None, None]
    return ((feats * q).sum(dim=1) + 1.0) / 2.0


def _summaries(score: torch.Tensor) -> torch.Tensor:
    flat = score.reshape(score.shape[0], -1)
    return torch.stack([flat.mean(dim=1), flat.max(dim=1)[0], flat.std(dim=1)], dim=1)


def balance(maps: list[torch.Tensor], query: torch.Tensor, w: dict) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.cat([*(_summaries(m) for m in maps), query], dim=1)
    for i in (0, 2, 4):
        x = F.linear(x, w[f"balancer.weight_predictor.{i}.weight"], w[f"balancer.weight_predictor.{i}.bias"])
        x = F.relu(x) if i < 4 else F.softmax(x, dim=-1)
    flat = [m.reshape(m.shape[0], -1) for m in maps]
    combined = sum(x[:, i : i + 1] * flat[i] for i in range(3))
    return _minmax_batch(combined), x


def evidence(participatory_map: torch.Tensor) -> torch.Tensor:
    """[B,G,G] participatory map -> [B,4] (signature.EVIDENCE_NAMES): the mean of its strongest
    cells, mean, lowest, highest, read the plain way (a full sort) from the map as the reference
    computes it."""
    flat = participatory_map.reshape(participatory_map.shape[0], -1)
    ranked = flat.sort(dim=1, descending=True).values
    strongest = ranked[:, : strongest_cells(flat.shape[1])].mean(dim=1)
    return torch.stack([strongest, flat.mean(dim=1), ranked[:, -1], ranked[:, 0]], dim=1)


def to_tensor(photo: torch.Tensor) -> torch.Tensor:
    """uint8 [B,H,W,3] -> float32 [B,3,H,W] in [0,1], as torchvision's ToTensor does (divide by 255)."""
    return photo.permute(0, 3, 1, 2).contiguous().to(torch.float32).div(255)


@torch.no_grad()
def forward(state: dict, cfg: ModelConfig, photo: torch.Tensor, query: torch.Tensor):
    """(relevance [B,G*G], topk_indices [B,K], weights [B,3], evidence [B,4]) as the reference
    computes them from the photo as decoded (uint8 [B,H,W,3], any size)."""
    w = {k: v.float() for k, v in state.items()}
    tex = texture(to_tensor(photo), cfg.grid)
    maps = [information(tex), tex[:, 7], participatory(tex, query, w)]
    relevance, weights = balance(maps, query, w)
    k = min(cfg.top_k, relevance.shape[1])
    topk = torch.topk(relevance, k=k, dim=1, largest=True, sorted=True).indices
    return relevance, topk, weights, evidence(maps[2])
