"""Drawing the selected cells over the whole photo (report pictures, `invoke predict --heatmap`).

The G x G grid covers the whole photo, as the reference's resize stretches it: on a W x H photo a
cell is W/G wide and H/G tall, so it is not square on a non-square photo.

The colours are the page's (web/app.js `heatColour`): hue 240 (blue, relevance 0) through 120
(green) to 0 (red, relevance 1) at full saturation and half lightness, laid over the photo with
opacity 0.12 + 0.43 * relevance, so a picture from `invoke predict` reads like the demo's.
"""
from __future__ import annotations

import functools

import numpy as np

MIN_LONG_SIDE = 512  # a 20 x 20 photo drawn at its own size is unreadable: cells are scaled up
MAX_LONG_SIDE = 2048  # a 8192 px photo is scaled down: the cells, not the pixels, are the picture
LEGEND_HEIGHT = 44
OUTLINE = (255, 255, 255)  # top-K cells: white inside a black edge, as the page draws them


def cell_box(index: int, grid: int, height: int, width: int) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) in photo pixels of the cell `index` (row-major: row * grid + col)."""
    row, col = divmod(int(index), grid)
    cw, ch = width / grid, height / grid
    return col * cw, row * ch, (col + 1) * cw, (row + 1) * ch


def heat_colour(relevance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rgb in [0,1] [...,3], opacity [...]) of web/app.js heatColour: hsla(240*(1-v), 100%, 50%,
    0.12 + 0.43 v) for v clipped to [0,1]."""
    v = np.clip(np.asarray(relevance, dtype=np.float64), 0.0, 1.0)
    hue = np.round(240.0 * (1.0 - v))  # the page writes whole degrees (Math.round)
    # HSL -> RGB at s=1, l=0.5: each channel is clip(|((hue/60 + n) mod 6) - 3| - 1, 0, 1)
    rgb = np.stack([np.clip(np.abs(((hue / 60.0 + n) % 6.0) - 3.0) - 1.0, 0.0, 1.0) for n in (0.0, 4.0, 2.0)], axis=-1)
    return rgb, 0.12 + 0.43 * v


def display_size(width: int, height: int) -> tuple[int, int]:
    """The drawn size: the photo's aspect, its long side at least MIN_LONG_SIDE, at most MAX_LONG_SIDE."""
    long_side = max(width, height)
    scale = max(1.0, MIN_LONG_SIDE / long_side) if long_side < MIN_LONG_SIDE else min(1.0, MAX_LONG_SIDE / long_side)
    return max(1, round(width * scale)), max(1, round(height * scale))


def heatmap(photo: np.ndarray, relevance: np.ndarray, topk: np.ndarray, grid: int, top_k: int | None = None):
    """The photo (uint8 [H,W,3]) with the relevance map laid over it in the page's colours, the
    top-K cells outlined and a legend below; returns a PIL image at display_size (nearest-
    neighbour when scaled up, so the photo's pixels and the cells stay sharp)."""
    from PIL import Image, ImageDraw

    height, width = photo.shape[:2]
    dw, dh = display_size(width, height)
    resample = Image.Resampling.NEAREST if dw >= width else Image.Resampling.LANCZOS
    base = Image.fromarray(photo).convert("RGB").resize((dw, dh), resample)
    rgb, alpha = heat_colour(np.asarray(relevance, dtype=np.float32).reshape(grid, grid))
    # One RGBA value per cell, stretched over its pixels (nearest neighbour: cell i spans the
    # pixels cell_box rounds to) and pasted through its own opacity: Pillow blends
    # base * (1 - a) + rgb * a in C, with colour and opacity in 1/255 steps, many times faster than
    # that blend in float64 per pixel (a folder of photos with --heatmap waited on it).
    cells = np.round(np.concatenate([rgb, alpha[..., None]], axis=-1) * 255.0).astype(np.uint8)  # [G,G,4]
    layer = Image.fromarray(cells, "RGBA").resize((dw, dh), Image.Resampling.NEAREST)
    picture = base
    picture.paste(layer, (0, 0), layer)
    draw = ImageDraw.Draw(picture)
    line = max(1, round(min(dw, dh) / 224))
    for idx in topk:
        left, top, right, bottom = (round(x) for x in cell_box(idx, grid, dh, dw))
        draw.rectangle([left, top, right - 1, bottom - 1], outline=(0, 0, 0), width=line)
        draw.rectangle([left + line, top + line, right - 1 - line, bottom - 1 - line], outline=OUTLINE, width=line)
    return with_legend(picture, top_k if top_k is not None else len(topk))


@functools.lru_cache(maxsize=1)
def _legend_font():
    """Loaded once: a folder of heatmaps draws the same legend on each."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=13)  # Pillow's own scalable font (needs FreeType)
    except (OSError, TypeError, ImportError):
        return ImageFont.load_default()


def with_legend(picture, top_k: int):
    """The picture with a strip below it: the colour bar 0..1 (as laid over a mid-grey photo) and
    what the outlines mean."""
    from PIL import Image, ImageDraw

    font = _legend_font()
    width = max(picture.width, 320)
    canvas = Image.new("RGB", (width, picture.height + LEGEND_HEIGHT), (255, 255, 255))
    canvas.paste(picture, (0, 0))
    draw = ImageDraw.Draw(canvas)
    top, bar_w = picture.height + 6, min(200, width // 2)
    rgb, alpha = heat_colour(np.linspace(0.0, 1.0, bar_w))
    strip = 0.5 * (1.0 - alpha[:, None]) + rgb * alpha[:, None]  # over grey 0.5, as over a photo
    bar = Image.fromarray(np.repeat(np.round(strip * 255).astype(np.uint8)[None], 14, axis=0))
    canvas.paste(bar, (8, top))
    draw.rectangle([8 - 1, top - 1, 8 + bar_w, top + 14], outline=(0, 0, 0))
    draw.text((8, top + 17), "0", fill=(0, 0, 0), font=font)
    draw.text((8 + bar_w - 6, top + 17), "1", fill=(0, 0, 0), font=font)
    draw.text((8 + bar_w // 2 - 24, top + 17), "relevance", fill=(0, 0, 0), font=font)
    x = 8 + bar_w + 16
    draw.rectangle([x, top, x + 14, top + 14], outline=(0, 0, 0), width=1)
    draw.rectangle([x + 1, top + 1, x + 13, top + 13], outline=OUTLINE, width=1)
    draw.text((x + 20, top + 2), f"top-{top_k} cells outlined", fill=(0, 0, 0), font=font)
    return canvas
