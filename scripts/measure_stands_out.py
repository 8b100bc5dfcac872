"""How well `stands_out` tells "found" from "nothing here": ROC AUC and accuracy of the contrast
(arrcoc_edge/relevance/evidence.py) on labelled scenes, and the share and threshold it uses.

    .venv/bin/python scripts/measure_stands_out.py [--scenes 150]

Scenes are the training module's held-out scenes (arrcoc_edge/training/scenes.py: two to four items,
each a colour shape or a packaged photo, in named quadrants), never its training seeds. Every scene
is asked every colour ("something red"), every place ("the object in the top left"), every
packaged photo's name ("the cat") and every shape ("the circle"); a query is present when the scene
holds what it names. Plain photos (one colour, with and without noise) are asked the same, all
absent. Two disjoint seed ranges: the calibration one chooses the share of cells and the threshold
(the best AUC, then the best balanced accuracy, of the shipped checkpoint on colour queries and
plain photos), the evaluation one is what the table reports. Checkpoints: the shipped one, and a reference-layout one made as tests/conftest.py makes
it (arr-coc-0-1's state-dict layout, seeded untrained weights, its own settings G=32, K=200; 384
wide here so that MiniLM encodes its queries). Eager PyTorch and the CLI's text encoder: the
relevance an artifact computes (the parity gates hold them together); the contrast is the same
numpy function `predict` runs on that relevance.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHARES = (1 / 64, 1 / 32, 1 / 24, 1 / 16, 1 / 8, 1 / 4)
CALIBRATION_OFFSET, EVALUATION_OFFSET = 0, 100_000  # from scenes.HELDOUT_SEED_BASE
PLAIN = 20  # plain photos per split


def queries() -> list[tuple[str, str, str]]:
    """(query, kind, the word that must be in the scene's own queries for it to be present)."""
    from arrcoc_edge.training import scenes as sc

    out = [(f"something {c}", "colour", c) for c in sc.COLOURS]
    out += [(f"the object in the {p}", "place", p) for p in sc.QUADRANTS]
    out += [(f"the {n}", "object", n) for n in sc.PHOTOS]
    out += [(f"the {s}", "object", s) for s in sc.SHAPES]
    return out


def photos(offset: int, count: int):
    """(uint8 photo [224,224,3], {query: present}) for `count` scenes and PLAIN plain photos."""
    from arrcoc_edge.training import scenes as sc

    asked = queries()
    for seed in range(sc.HELDOUT_SEED_BASE + offset, sc.HELDOUT_SEED_BASE + offset + count):
        scene = sc.make_scene(seed)
        said = " | ".join(scene.queries)
        yield (np.round(scene.image.transpose(1, 2, 0) * 255).astype(np.uint8),
               {q: word in said for q, _, word in asked})
    rng = np.random.default_rng(offset)
    for i in range(PLAIN):
        plain = np.broadcast_to(rng.integers(0, 256, 3), (sc.IMAGE_SIZE, sc.IMAGE_SIZE, 3)).astype(np.float64)
        if i % 2:
            plain = plain + rng.normal(0.0, 8.0, plain.shape)
        yield np.clip(plain, 0, 255).astype(np.uint8), {q: False for q, _, _ in asked}


def relevance_rows(model, offset: int, count: int, vectors) -> list[tuple[np.ndarray, bool, str]]:
    """(relevance [N], present, kind) for every photo and query of a split."""
    import torch

    kinds = [kind for _, kind, _ in queries()]
    rows = []
    for pixels, present in photos(offset, count):
        batch = torch.from_numpy(pixels)[None].expand(len(kinds), -1, -1, -1)
        with torch.no_grad():
            relevance = model(batch, vectors)[0].numpy()
        for (q, kind, _), r in zip(queries(), relevance):
            rows.append((r, present[q], kind))
    plain_rows = len(kinds) * PLAIN
    return [(r, p, "plain" if i >= len(rows) - plain_rows else k) for i, (r, p, k) in enumerate(rows)]


def choose(rows, roc_auc_score) -> tuple[float, float]:
    """(share, threshold) on colour queries and plain photos, the question the shipped checkpoint
    answers with a region ("something red"): the share with the best AUC, then the threshold with
    the best balanced accuracy on it. Places and object names are reported, not chosen on: a
    place query's map is a gradient toward the place whether or not an item is there."""
    from arrcoc_edge.relevance.evidence import contrast

    rows = [row for row in rows if row[2] in ("colour", "plain")]
    labels = np.array([p for _, p, _ in rows])

    best = max(SHARES, key=lambda s: roc_auc_score(labels, [contrast(r, s) for r, _, _ in rows]))
    values = np.array([contrast(r, best) for r, _, _ in rows])
    cuts = np.unique(np.round(values, 2))
    return best, float(max(cuts, key=lambda t: balanced(labels, values >= t)))


def balanced(labels: np.ndarray, said: np.ndarray) -> float:
    return 0.5 * (said[labels].mean() + (~said[~labels]).mean())


def table(name: str, rows, share: float, threshold: float, roc_auc_score) -> list[str]:
    """Markdown rows: per kind of query (each with the plain photos' negatives), then all."""
    from arrcoc_edge.relevance.evidence import contrast

    labels = np.array([p for _, p, _ in rows])
    kinds = np.array([k for _, _, k in rows])
    values = np.array([contrast(r, share) for r, _, _ in rows])
    out = []
    for kind in ("colour", "place", "object", "all"):
        keep = np.ones(len(rows), bool) if kind == "all" else (kinds == kind) | (kinds == "plain")
        y, v = labels[keep], values[keep]
        said = v >= threshold
        plain = said[kinds[keep] == "plain"]
        out.append(f"| {name} | {kind} | {int(y.sum())} / {int((~y).sum())} | {roc_auc_score(y, v):.3f} | "
                   f"{(said == y).mean():.3f} | {balanced(y, said):.3f} | {said[y].mean():.3f} | "
                   f"{(~said[~y]).mean():.3f} | {(~plain).mean():.3f} |")
    return out


def natural_photos(model, vectors) -> str:
    """The highest contrast of any colour query on the packaged photos (scenes.PHOTOS), as decoded."""
    import torch

    from arrcoc_edge.relevance.evidence import THRESHOLD, contrast
    from arrcoc_edge.training import scenes as sc

    colours = [i for i, (_, kind, _) in enumerate(queries()) if kind == "colour"]
    best = (0.0, "", "")
    for name in sc.PHOTOS:
        pixels = np.ascontiguousarray(np.asarray(sc._photo(name)))
        batch = torch.from_numpy(pixels)[None].expand(len(colours), -1, -1, -1)
        with torch.no_grad():
            relevance = model(batch, vectors[colours])[0].numpy()
        for i, r in zip(colours, relevance):
            best = max(best, (contrast(r), name, queries()[i][0]))
    return (f"natural photos ({', '.join(sc.PHOTOS)}), every colour: highest contrast {best[0]:.2f} "
            f"({best[1]}, {best[2]!r}); threshold {THRESHOLD}")


def main() -> int:
    import torch
    from sklearn.metrics import roc_auc_score

    from arrcoc_edge.relevance import evidence
    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.relevance.model import ModelConfig, build_model
    from arrcoc_edge.relevance.text_encoder import embed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", type=int, default=150, help="scenes per split (default 150)")
    args = parser.parse_args()
    vectors = torch.from_numpy(embed([q for q, _, _ in queries()]))
    shipped = load_checkpoint(REPO / "checkpoints" / "arrcoc-v0.1-trained.safetensors")
    with tempfile.TemporaryDirectory() as tmp:  # as tests/conftest.py writes one, 384 wide
        path = Path(tmp) / "reference-layout.pt"
        state = dict(build_model(ModelConfig(query_dim=vectors.shape[1]), seed=7).state_dict())
        state["base_model.lm_head.weight"] = torch.zeros(2, 2)
        torch.save(state, path)
        reference = load_checkpoint(path)
    models = [("shipped (G=14, K=64)", shipped.model.eval()),
              (f"reference layout (G={reference.config.grid}, K={reference.config.top_k})", reference.model.eval())]
    calibration = relevance_rows(models[0][1], CALIBRATION_OFFSET, args.scenes, vectors)
    share, threshold = choose(calibration, roc_auc_score)
    print(f"chosen on {len(calibration)} calibration pairs of the shipped checkpoint: share 1/{1 / share:g}, "
          f"threshold {threshold:.2f}; evidence.py has share 1/{1 / evidence.TOP_SHARE:g}, threshold {evidence.THRESHOLD}")
    print("\n| checkpoint | queries | present / absent | ROC AUC | accuracy | balanced accuracy | "
          "present: stands out | absent: nothing stands out | plain photos: nothing stands out |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, model in models:
        rows = relevance_rows(model, EVALUATION_OFFSET, args.scenes, vectors)
        print("\n".join(table(name, rows, evidence.TOP_SHARE, evidence.THRESHOLD, roc_auc_score)))
    print("\n" + natural_photos(models[0][1], vectors))
    same = abs(share - evidence.TOP_SHARE) < 1e-9 and abs(threshold - evidence.THRESHOLD) < 1e-9
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
