"""The ARR-COC v0.1 relevance realizer, written afresh for export.

It computes what the reference computes (arr-coc-0-1, ARR_COC/{texture,knowing,balancing,
attending}.py, with kornia), held to it by `pipeline/reference.py` and tests/test_reference.py.
The one accepted difference: min-max normalisation is per sample, never across the batch, so one
image's result does not depend on its batch-mates (at batch 1 the two are identical).

How it gets there faster without changing the numbers (see TextureArray): the reference resizes
to 16*G, computes LAB, grayscale and a normalised 3x3 Sobel at every pixel, then samples the G x G
grid bilinearly (align_corners=False). A 16x bilinear downsample reads only pixels 16i+7 and
16i+8 of each axis, weight 1/2 each, so every texture channel needs just the 4 x 4 window
16i+6..16i+9 of each cell: 1/16 of the pixels, no full-resolution colour maths, no kornia in the
graph. The input must therefore be 16*G square (the reference's own resize would be the identity).

Contract: image [B,3,16G,16G] RGB in [0,1], query [B,D] ->
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


# The reference computes its texture at 16 pixels per grid cell (texture.py's intermediate size).
CELL = 16
# Largest grid accepted: 128 x 128 patches on a 2048 px input already needs ~50 MB per image.
MAX_GRID = 128


@dataclass(frozen=True)
class ModelConfig:
    """Everything that shapes the network. Stored in checkpoint metadata.

    The one place a config is validated: every field a positive integer, the input exactly
    CELL * grid pixels square (what the reference's resize produces), 1 <= top_k <= grid**2.
    """

    image_size: int = 224
    grid: int = 14
    query_dim: int = 384
    proj_hidden: int = 64
    balancer_hidden: int = 128
    top_k: int = 64

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{f.name} must be a positive integer, got {value!r}")
        if self.grid > MAX_GRID:
            raise ValueError(f"grid {self.grid} is larger than the supported {MAX_GRID}")
        if self.image_size != CELL * self.grid:
            raise ValueError(
                f"image_size {self.image_size} must be {CELL} x grid = {CELL * self.grid} "
                f"(the reference computes its texture at {CELL} pixels per grid cell)"
            )
        if self.top_k > self.num_patches:
            raise ValueError(f"top_k {self.top_k} must be in 1..{self.num_patches} (grid {self.grid} squared)")

    @property
    def num_patches(self) -> int:
        return self.grid * self.grid

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def with_settings(self, grid: int | None = None, top_k: int | None = None) -> "ModelConfig":
        """The same learned shapes at another grid / top-K (the input size follows the grid)."""
        grid = self.grid if grid is None else grid
        size = CELL * grid if isinstance(grid, int) and not isinstance(grid, bool) else grid
        return dataclasses.replace(self, grid=grid, image_size=size, top_k=self.top_k if top_k is None else top_k)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        if not isinstance(data, dict):
            raise ValueError(f"config must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}")
        return cls(**data)


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


# Offsets inside a CELL-pixel block: the bilinear 16x downsample reads pixels 7 and 8 of each
# block (weight 1/2 each); a 3x3 Sobel at those pixels reads 6..9.
_SAMPLE = (7, 9)
_WINDOW = (6, 10)


def cell_pixels(image: torch.Tensor, grid: int, lo: int, hi: int) -> torch.Tensor:
    """[B,C,CELL*G,CELL*G] -> [B,C,w*G,w*G]: pixels lo..hi-1 of every cell on both axes (w = hi-lo).

    Reshapes and slices only (rank <= 4), so every target's runtime lowers it and the batch
    stays dynamic.
    """
    channels, w = image.shape[1], hi - lo
    rows = image.reshape(-1, CELL, CELL * grid)[:, lo:hi, :]  # [B*C*G, w, CELL*G]
    cells = rows.reshape(-1, w, grid, CELL)[:, :, :, lo:hi]  # [B*C*G, w, G, w]
    return cells.reshape(-1, channels, w * grid, w * grid)


def _sobel_at_samples() -> torch.Tensor:
    """[8,1,4,4]: kornia's normalised Sobel x (first 4) and y (last 4) at the 2 x 2 sampled
    pixels of a 4 x 4 window, so one stride-4 convolution yields all of them."""
    gx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0
    kernels = torch.zeros(2, 4, 1, 4, 4)
    for d, k in enumerate((gx, gx.t())):
        for n, (r, c) in enumerate(((1, 1), (1, 2), (2, 1), (2, 2))):
            kernels[d, n, 0, r - 1 : r + 2, c - 1 : c + 2] = k
    return kernels.reshape(8, 1, 4, 4)


class TextureArray(nn.Module):
    """RGB [B,3,16G,16G] -> the reference's 13 texture channels on the G x G grid.

    Channels: RGB, L*/100, (a*+128)/255, Sobel gx, gy, magnitude (each min-maxed), y, x,
    eccentricity, magnitude again, L*/100 again. Every channel is the mean of its per-pixel value
    at the 2 x 2 sampled pixels of the cell, which is exactly the reference's bilinear sampling.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.grid = cfg.grid
        self.register_buffer("sobel", _sobel_at_samples(), persistent=False)
        lin = torch.linspace(0.0, 1.0, cfg.grid)
        yy, xx = torch.meshgrid(lin, lin, indexing="ij")
        ecc = torch.sqrt((yy - 0.5) ** 2 + (xx - 0.5) ** 2)
        pos = torch.stack([yy, xx, ecc / ecc.max()]).unsqueeze(0)
        self.register_buffer("positions", pos, persistent=False)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        batch, g = image.shape[0], self.grid
        sampled = cell_pixels(image, g, *_SAMPLE)  # [B,3,2G,2G]
        lum, a_star = rgb_to_lab_l_a(sampled)
        to_grid = lambda x: F.avg_pool2d(x, kernel_size=2, stride=2)  # the bilinear 1/2, 1/2
        window = cell_pixels(image, g, *_WINDOW)  # [B,3,4G,4G]
        gray = 0.299 * window[:, 0:1] + 0.587 * window[:, 1:2] + 0.114 * window[:, 2:3]
        grads = F.conv2d(gray, self.sobel, stride=4)  # [B,8,G,G]: gx, gy at the 4 samples
        gx, gy = grads[:, 0:4], grads[:, 4:8]
        mag = torch.sqrt(gx * gx + gy * gy + 1e-8)
        edges = torch.cat([gx.mean(1, keepdim=True), gy.mean(1, keepdim=True), mag.mean(1, keepdim=True)], dim=1)
        edges = minmax_per_sample_channels(edges)
        l_norm = to_grid(lum) / 100.0
        a_norm = (to_grid(a_star) + 128.0) / 255.0
        pos = self.positions.expand(batch, -1, -1, -1)
        return torch.cat(
            [to_grid(sampled), l_norm, a_norm, edges, pos, edges[:, 2:3], l_norm], dim=1
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
