"""The model's signature without torch: its input and output names, the photo sides and grids it
accepts and its config. What a published model is run with needs only this (predict, load, the
runtimes' Runners), so `arrcoc_edge.load` + onnxruntime never import torch; model.py re-exports it.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

# The reference computes its texture at 16 pixels per grid cell (texture.py's intermediate size).
CELL = 16
INPUT_NAMES = ("image", "query")
OUTPUT_NAMES = ("relevance", "topk_indices", "weights", "evidence")
WAYS_OF_KNOWING = ("information", "perspectival", "participatory")
# The `evidence` statistics: how strongly the query matched, read from the participatory map
# ((cosine + 1) / 2 per cell, before the balancer and before any min-max), in this order.
# top_mean: the mean of its strongest cells (STRONGEST_SHARE of the grid), mean: of every cell,
# min / max: its lowest and highest cell. A calibration (arrcoc_edge.relevance.evidence) maps them
# to the probability that what the query asks for is in the photo.
EVIDENCE_NAMES = ("top_mean", "mean", "min", "max")
STRONGEST_SHARE = 1 / 24  # 8 of 196 cells at G=14, 43 of 1024 at G=32


def strongest_cells(cells: int, share: float = STRONGEST_SHARE) -> int:
    """How many of a map's `cells` cells count as its strongest (at least 1, at most all)."""
    return max(1, min(cells, round(cells * share)))


# Largest grid accepted: 128 x 128 patches.
MAX_GRID = 128
# Photo sides accepted (pixels). 8192 takes 12 MP (4032 x 3024) and 24 MP (6000 x 4000) phone photos;
# 16 is the smallest photo the texture's 3 x 3 Sobel window still fits after the resize.
MIN_SIDE, MAX_SIDE = 16, 8192
# Photos per call the exported programs take (the batch dimension's upper bound).
MAX_BATCH = 64


@dataclass(frozen=True)
class ModelConfig:
    """Everything that shapes the network. Stored in checkpoint metadata.

    The one place a config is validated: every field a positive integer, image_size exactly
    CELL * grid (the size the reference resizes every photo to), 1 <= top_k <= grid**2.
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
