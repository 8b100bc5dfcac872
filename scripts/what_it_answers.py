"""What the shipped checkpoint answers on real photos: where its top-K cells land for position,
colour, object-name and open queries on five photos that ship inside scikit-image/scikit-learn.

    .venv/bin/python scripts/what_it_answers.py [--checkpoint PATH]

For each (photo, query) it prints the share of the top-K cells inside the region the query asks
for (boxes drawn by hand on the photo, as fractions of its width and height; a cell counts when its
centre is inside), the share a query-blind pick would get (the region's share of all cells), and
the balancer's three weights. docs/model.md cites a run of it. Eager PyTorch, the CLI's decode
(pipeline/golden.load_photo's steps) and the CLI's text encoder (MiniLM): the numbers `invoke
predict` gives, without building.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# (photo, query, boxes (x0, y0, x1, y1) as fractions, what the query asks for)
CASES = [
    ("astronaut", "the top left", [(0.0, 0.0, 0.5, 0.5)], "position"),
    ("coffee", "the bottom right", [(0.5, 0.5, 1.0, 1.0)], "position"),
    ("china", "the object in the top right", [(0.5, 0.0, 1.0, 0.5)], "position"),
    ("astronaut", "something red", [(0.0, 0.42, 0.66, 1.0)], "colour: the orange suit"),
    ("coffee", "something white", [(0.3, 0.02, 0.68, 0.5)], "colour: the cup"),
    ("rocket", "something blue", [(0.0, 0.0, 1.0, 0.75)], "colour: the evening sky"),
    ("rocket", "a rocket", [(0.44, 0.3, 0.56, 0.97)], "object name"),
    ("coffee", "a cup of coffee", [(0.28, 0.02, 0.7, 0.55)], "object name"),
    ("astronaut", "a face", [(0.3, 0.08, 0.55, 0.4)], "object name"),
    ("china", "a building", [(0.12, 0.1, 0.55, 0.97)], "object name"),
    ("chelsea", "the eyes", [(0.28, 0.28, 0.45, 0.5), (0.68, 0.38, 0.8, 0.56)], "object name"),
    ("rocket", "the most detailed region", None, "open"),
    ("china", "what stands out?", None, "open"),
]


def photo(name: str) -> np.ndarray:
    from skimage import data
    from sklearn.datasets import load_sample_images

    if name == "china":
        return load_sample_images().images[0]
    return getattr(data, name)()


def inside(grid: int, boxes) -> np.ndarray:
    centres = (np.arange(grid) + 0.5) / grid
    y, x = np.meshgrid(centres, centres, indexing="ij")
    mask = np.zeros((grid, grid), bool)
    for x0, y0, x1, y1 in boxes:
        mask |= (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
    return mask.reshape(-1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default=str(REPO / "checkpoints" / "arrcoc-v0.1-trained.safetensors"))
    args = parser.parse_args()
    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.relevance.text_encoder import embed

    ckpt = load_checkpoint(args.checkpoint)
    model, grid = ckpt.model.eval(), ckpt.config.grid
    queries = embed([q for _, q, _, _ in CASES])
    print(f"checkpoint {Path(args.checkpoint).name} (sha256 {ckpt.sha256[:12]}), G={grid}, K={ckpt.config.top_k}")
    print(f"{'photo':<10} {'query':<30} {'asks for':<24} {'top-K in region':>15} {'blind':>6}  weights (info, persp, partic)")
    for (name, query, boxes, kind), q in zip(CASES, queries):
        image = torch.from_numpy(np.array(photo(name)))[None]  # a writable copy, as decoded
        with torch.no_grad():
            out = model(image, torch.from_numpy(q)[None].float())
        topk, weights = out[1][0].numpy(), out[2][0].numpy()
        if boxes is None:
            share, blind = "-", "-"
        else:
            region = inside(grid, boxes)
            share, blind = f"{region[topk].mean():.2f}", f"{region.mean():.2f}"
        print(f"{name:<10} {query:<30} {kind:<24} {share:>15} {blind:>6}  "
              + " ".join(f"{w:.2f}" for w in weights))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
