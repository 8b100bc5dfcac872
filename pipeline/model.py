"""The ARR-COC v0.1 relevance realizer, written afresh for export.

Faithful to the reference (arr-coc-0-1, ARR_COC/{texture,knowing,balancing,attending}.py),
with deliberate differences for export and edge use (also listed in the README):
  * min-max normalisation is per sample, never across the batch, so one image's
    result does not depend on its batch-mates;
  * no kornia: RGB->LAB, grayscale and the normalised Sobel filter are written out;
  * texture features are reduced to the G x G grid by area averaging (avg_pool2d with
    a fixed kernel) instead of bilinear point sampling: same grid, no aliasing, and a
    fixed kernel keeps the batch dimension flexible in every runtime;
  * constant buffers (Sobel kernels, position maps) are built at the grid's resolution;
  * no Qwen: the query embedding is an input of width D.

Contract: image [B,3,S,S] RGB in [0,1], query [B,D] ->
relevance [B,G*G] in [0,1], topk_indices int64 [B,K], weights [B,3]
(information, perspectival, participatory).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

TEXTURE_CHANNELS = 13
CH_SOBEL_MAG = 7
INPUT_NAMES = ("image", "query")
OUTPUT_NAMES = ("relevance", "topk_indices", "weights")
WAYS_OF_KNOWING = ("information", "perspectival", "participatory")

# Normalisation epsilon as in the reference; keeps flat maps finite.
_MINMAX_EPS = 1e-8


@dataclass(frozen=True)
class ModelConfig:
    """Everything that shapes the network. Stored in checkpoint metadata."""

    image_size: int = 224
    grid: int = 14
    query_dim: int = 384
    proj_hidden: int = 64
    balancer_hidden: int = 128
    top_k: int = 64

    def __post_init__(self):
        if self.image_size % self.grid:
            raise ValueError(f"image_size {self.image_size} must be a multiple of grid {self.grid}")
        if not 0 < self.top_k <= self.num_patches:
            raise ValueError(f"top_k {self.top_k} must be in 1..{self.num_patches}")

    @property
    def num_patches(self) -> int:
        return self.grid * self.grid

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}")
        return cls(**{k: int(v) for k, v in data.items()})


def minmax_per_sample(x: torch.Tensor) -> torch.Tensor:
    """Scale each sample of x [B, ...] to [0, 1] independently of the rest of the batch."""
    dims = tuple(range(1, x.dim()))
    lo = x.amin(dim=dims, keepdim=True)
    hi = x.amax(dim=dims, keepdim=True)
    return (x - lo) / (hi - lo + _MINMAX_EPS)


def _srgb_to_linear(c: torch.Tensor) -> torch.Tensor:
    return torch.where(c > 0.04045, ((c + 0.055) / 1.055).clamp(min=0) ** 2.4, c / 12.92)


def _lab_f(t: torch.Tensor) -> torch.Tensor:
    # CIE f(t); the clamp keeps the cube root's gradient finite at 0.
    return torch.where(t > 0.008856, t.clamp(min=0.008856) ** (1.0 / 3.0), 7.787 * t + 4.0 / 29.0)


def rgb_to_lab_l_a(rgb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sRGB [B,3,H,W] in [0,1] -> (L* in [0,100], a*) under D65, as kornia computes them."""
    lin = _srgb_to_linear(rgb)
    r, g, b = lin[:, 0:1], lin[:, 1:2], lin[:, 2:3]
    x = (0.412453 * r + 0.357580 * g + 0.180423 * b) / 0.95047
    y = 0.212671 * r + 0.715160 * g + 0.072169 * b
    fx, fy = _lab_f(x), _lab_f(y)
    return 116.0 * fy - 16.0, 500.0 * (fx - fy)


class TextureArray(nn.Module):
    """RGB [B,3,S,S] -> 13 texture channels on the G x G grid (reference texture.py)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pool = cfg.image_size // cfg.grid
        gx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0
        self.register_buffer("sobel", torch.stack([gx, gx.t()]).unsqueeze(1), persistent=False)
        lin = torch.linspace(0.0, 1.0, cfg.grid)
        yy, xx = torch.meshgrid(lin, lin, indexing="ij")
        ecc = torch.sqrt((yy - 0.5) ** 2 + (xx - 0.5) ** 2)
        pos = torch.stack([yy, xx, ecc / ecc.max()]).unsqueeze(0)
        self.register_buffer("positions", pos, persistent=False)

    def _to_grid(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, kernel_size=self.pool, stride=self.pool)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        batch = image.shape[0]
        lum, a_star = rgb_to_lab_l_a(image)
        gray = 0.299 * image[:, 0:1] + 0.587 * image[:, 1:2] + 0.114 * image[:, 2:3]
        grads = F.conv2d(F.pad(gray, (1, 1, 1, 1), mode="replicate"), self.sobel)
        mag = torch.sqrt(grads[:, 0:1] ** 2 + grads[:, 1:2] ** 2 + 1e-8)
        edges = minmax_per_sample_channels(self._to_grid(torch.cat([grads, mag], dim=1)))
        l_norm = self._to_grid(lum) / 100.0
        a_norm = (self._to_grid(a_star) + 128.0) / 255.0
        pos = self.positions.expand(batch, -1, -1, -1)
        return torch.cat(
            [self._to_grid(image), l_norm, a_norm, edges, pos, edges[:, 2:3], l_norm], dim=1
        )


def minmax_per_sample_channels(x: torch.Tensor) -> torch.Tensor:
    """Min-max each channel of each sample of x [B,C,H,W] over its H x W values."""
    lo = x.amin(dim=(2, 3), keepdim=True)
    hi = x.amax(dim=(2, 3), keepdim=True)
    return (x - lo) / (hi - lo + _MINMAX_EPS)


def information_score(textures: torch.Tensor) -> torch.Tensor:
    """Propositional knowing: entropy of the channel softmax, [B,G,G] in [0,1]."""
    probs = F.softmax(textures, dim=1)
    entropy = -(probs * torch.log(probs + 1e-10)).sum(dim=1)
    return minmax_per_sample(entropy)


def perspectival_score(textures: torch.Tensor) -> torch.Tensor:
    """Perspectival knowing: the Sobel magnitude channel (already in [0,1])."""
    return textures[:, CH_SOBEL_MAG]


class ParticipatoryScorer(nn.Module):
    """Participatory knowing: textures projected into query space, cosine with the query."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.texture_proj = nn.Sequential(
            nn.Conv2d(TEXTURE_CHANNELS, cfg.proj_hidden, kernel_size=1),
            nn.ReLU(),
            nn.Conv2d(cfg.proj_hidden, cfg.query_dim, kernel_size=1),
        )

    def forward(self, textures: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        feats = F.normalize(self.texture_proj(textures), dim=1)
        q = F.normalize(query, dim=1)[:, :, None, None]
        return ((feats * q).sum(dim=1) + 1.0) / 2.0


class TensionBalancer(nn.Module):
    """(mean, max, std) of each map + query -> softmax weights over the three maps."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h = cfg.balancer_hidden
        self.weight_predictor = nn.Sequential(
            nn.Linear(9 + cfg.query_dim, h),
            nn.ReLU(),
            nn.Linear(h, h),
            nn.ReLU(),
            nn.Linear(h, 3),
            nn.Softmax(dim=-1),
        )

    @staticmethod
    def summarise(maps: torch.Tensor) -> torch.Tensor:
        """maps [B,3,N] -> [B,9]: (mean, max, std) for each map in turn."""
        stats = torch.stack([maps.mean(dim=2), maps.amax(dim=2), maps.std(dim=2)], dim=2)
        return stats.flatten(1)

    def forward(self, maps: torch.Tensor, query: torch.Tensor):
        weights = self.weight_predictor(torch.cat([self.summarise(maps), query], dim=1))
        relevance = minmax_per_sample((weights[:, :, None] * maps).sum(dim=1))
        return relevance, weights


class RelevanceModel(nn.Module):
    """texture -> three ways of knowing -> tension balancer -> top-K allocator."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.texture = TextureArray(cfg)
        self.participatory_scorer = ParticipatoryScorer(cfg)
        self.balancer = TensionBalancer(cfg)

    def forward(self, image: torch.Tensor, query: torch.Tensor):
        textures = self.texture(image)
        maps = torch.stack(
            [
                information_score(textures),
                perspectival_score(textures),
                self.participatory_scorer(textures, query),
            ],
            dim=1,
        ).flatten(2)
        relevance, weights = self.balancer(maps, query)
        topk_indices = torch.topk(relevance, k=self.cfg.top_k, dim=1, sorted=True).indices
        return relevance, topk_indices, weights


def build_model(cfg: ModelConfig, seed: int | None = None) -> RelevanceModel:
    """A model in eval mode; `seed` gives a reproducible initialisation."""
    if seed is not None:
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
    model = RelevanceModel(cfg)
    if seed is not None:
        torch.random.set_rng_state(gen_state)
    return model.eval()


def learned_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Expected state-dict keys and shapes (the reference layout)."""
    return {k: tuple(v.shape) for k, v in RelevanceModel(cfg).state_dict().items()}
