"""Drawing the selected cells over the whole photo (report pictures, `invoke predict --heatmap`).

The G x G grid covers the whole photo, as the reference's resize stretches it: on a W x H photo a
cell is W/G wide and H/G tall, so it is not square on a non-square photo.
"""
from __future__ import annotations

import numpy as np


def cell_box(index: int, grid: int, height: int, width: int) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) in photo pixels of the cell `index` (row-major: row * grid + col)."""
    row, col = divmod(int(index), grid)
    cw, ch = width / grid, height / grid
    return col * cw, row * ch, (col + 1) * cw, (row + 1) * ch


def heatmap(photo: np.ndarray, relevance: np.ndarray, topk: np.ndarray, grid: int, alpha: float = 0.45):
    """The photo (uint8 [H,W,3]) with the relevance map blended over it and the top-K cells
    outlined; returns a PIL image of the photo's own size."""
    from PIL import Image, ImageDraw

    height, width = photo.shape[:2]
    rel = np.clip(np.asarray(relevance, dtype=np.float32).reshape(grid, grid), 0.0, 1.0)
    # inferno-like ramp without matplotlib: black -> red -> yellow
    colour = np.stack([np.clip(rel * 2.0, 0, 1), np.clip(rel * 2.0 - 1.0, 0, 1), np.zeros_like(rel)], axis=-1)
    overlay = Image.fromarray((colour * 255).astype(np.uint8)).resize((width, height), Image.Resampling.NEAREST)
    out = Image.blend(Image.fromarray(photo).convert("RGB"), overlay, alpha)
    draw = ImageDraw.Draw(out)
    line = max(1, round(min(width, height) / 400))
    for idx in topk:
        left, top, right, bottom = cell_box(idx, grid, height, width)
        draw.rectangle([left, top, right - 1, bottom - 1], outline=(57, 255, 20), width=line)
    return out
