"""The report's pictures: each held-out sample's map per runtime beside eager PyTorch's, in the page's
colours, and the artifacts' sizes against their budgets.
"""
from __future__ import annotations

import base64
import io

import numpy as np

from arrcoc_edge.stages.golden import GoldenSplit

_COLUMNS = 5


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _draw_panel(ax, image: np.ndarray, relevance: np.ndarray, topk: np.ndarray, title: str) -> None:
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    from arrcoc_edge.publishing.overlay import cell_box, heat_colour

    height, width = image.shape[:2]
    grid = int(round(len(relevance) ** 0.5))
    ax.imshow(image)
    # the page's and `invoke predict --heatmap`'s colours and opacity (overlay.heat_colour), so a
    # map in the report reads like the demo's
    rgb, alpha = heat_colour(np.asarray(relevance, dtype=np.float32).reshape(grid, grid))
    ax.imshow(np.concatenate([rgb, alpha[..., None]], axis=-1), extent=(0, width, height, 0), interpolation="nearest")
    # white inside a black edge, as the page and the heatmap outline them; one collection per colour
    # (a patch each cost 2 s a report: every add_patch recomputes the axes' limits)
    boxes = [cell_box(idx, grid, height, width) for idx in topk]
    for lw, colour in ((1.2, "black"), (0.5, "white")):
        cells = [Rectangle((left, top), right - left, bottom - top) for left, top, right, bottom in boxes]
        ax.add_collection(PatchCollection(cells, facecolor="none", edgecolor=colour, linewidth=lw), autolim=False)
    ax.set_title(title, fontsize=7)
    ax.axis("off")


def sample_figure(heldout: GoldenSplit, index: int, runs: list[dict]) -> str:
    """One PNG: the photo, eager PyTorch, then every runtime's map for held-out sample `index`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from arrcoc_edge.stages.parity import topk_overlap

    ref_rel, ref_idx = heldout.expected["relevance"][index], heldout.expected["topk_indices"][index]
    panels = [("eager PyTorch float32 (reference)", ref_rel, ref_idx)]
    for run in runs:
        got = run["topk_indices"][index : index + 1]
        overlap = topk_overlap(ref_rel[None], ref_idx[None], got, 1e-3)[0][0]
        panels.append((f"{run['target']} {run['variant']}\ntop-K vs eager {overlap:.3f}", run["relevance"][index], got[0]))
    rows = -(-(len(panels) + 1) // _COLUMNS)
    fig, axes = plt.subplots(rows, _COLUMNS, figsize=(2.1 * _COLUMNS, 2.3 * rows), squeeze=False)
    image = heldout.images[index]
    axes[0][0].imshow(image)
    axes[0][0].set_title(heldout.names[index], fontsize=7)
    axes[0][0].axis("off")
    for ax, (title, rel, idx) in zip(axes.flat[1:], panels):
        _draw_panel(ax, image, rel, idx, title)
    for ax in axes.flat[len(panels) + 1 :]:
        ax.axis("off")
    return _png(fig)


def size_figure(rows: list[dict], onnx_bytes: int | None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["bytes"]]
    labels = [f"{r['target']} {r['variant']}" for r in rows]
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(rows) + 1))
    ypos = np.arange(len(rows))
    ax.barh(ypos, [r["bytes"] / 1024 for r in rows], color="#4878a8", label="size")
    ax.scatter([(r["budget"] or 0) / 1024 for r in rows], ypos, marker="|", s=200, color="#c03030", label="budget")
    if onnx_bytes:
        ax.axvline(onnx_bytes / 1024, ls="--", color="#555", lw=1, label="ONNX FP32")
    ax.set_yticks(ypos, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")  # 130 KB models beside a 20 MB site and an 87 MB text encoder
    ax.set_xlabel("KB (log scale)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(fig)


