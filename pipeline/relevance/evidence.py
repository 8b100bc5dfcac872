"""Whether anything in a photo stands out for a query, read from the model's own outputs.

`relevance` is min-max normalised per photo, so its top cell is 1.000 whatever was asked. Min-max
is an affine map of the balanced map the model computes before it (the three ways of knowing,
weighted: for the shipped checkpoint almost all participatory, the query's own evidence), so a
ratio of differences is the same on both sides of it. contrast is one such ratio:

    contrast = (mean of the strongest cells - the median cell) / (highest cell - lowest cell)

of the pre-normalisation map, computed exactly from `relevance` alone: every runtime that
publishes `relevance` gives it, with no extra output. A map with one clear region (the queried
colour, place or object) keeps most cells near the bottom and a few near the top: contrast near
1. A map where the query finds nothing particular is a smooth spread (min-max stretches whatever
small differences there are to 0..1): contrast near 0.5 or below. A flat map is 0.

The share of cells and the threshold are chosen by measurement on labelled scenes (present and
absent colours, places and objects, plain photos): scripts/measure_stands_out.py, whose table
docs/model.md shows. numpy only: the page (web/app.js) computes the same in JavaScript.
"""
from __future__ import annotations

import numpy as np

TOP_SHARE = 1 / 24  # the strongest cells: this share of the grid (8 of 196 at G=14)
THRESHOLD = 0.86  # contrast at or above this: something stands out (scripts/measure_stands_out.py)


def strongest_cells(cells: int, share: float = TOP_SHARE) -> int:
    """How many cells the contrast's top mean takes for a grid of `cells` cells."""
    return max(1, min(cells, round(cells * share)))


def contrast(relevance, share: float = TOP_SHARE) -> float:
    """The contrast of one photo's relevance map (any shape; [G*G] or [G, G]), in [0, 1]."""
    r = np.asarray(relevance, dtype=np.float64).ravel()
    span = float(r.max() - r.min()) if r.size else 0.0
    if not span > 0.0:  # a flat map (or an empty one): nothing is singled out
        return 0.0
    n = strongest_cells(r.size, share)
    top = float(np.partition(r, r.size - n)[r.size - n:].mean())
    return (top - float(np.median(r))) / span


def stands_out(value: float, threshold: float = THRESHOLD) -> bool:
    return bool(value >= threshold)
