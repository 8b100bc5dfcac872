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

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arrcoc_edge.relevance.signature import EVIDENCE_NAMES, STRONGEST_SHARE, strongest_cells  # noqa: F401

TOP_SHARE = STRONGEST_SHARE
THRESHOLD = 0.86  # contrast at or above this: something stands out (scripts/measure_stands_out.py)
CALIBRATION_FILE = "calibration.json"  # beside manifest.json in a published folder
CALIBRATION_FORMAT = "arrcoc-edge/confidence-calibration/1"


@dataclass(frozen=True)
class Calibration:
    """evidence [.., 4] (EVIDENCE_NAMES) -> confidence, the probability that what the query asks
    for is in the photo: a logistic model, confidence = 1 / (1 + exp(-(bias + coef . evidence))),
    fitted on labelled natural photos for one checkpoint. `fitted_on` says how (photos, pairs,
    split, metrics) and travels with it into calibration.json."""

    coef: tuple[float, ...]
    bias: float
    fitted_on: dict = field(default_factory=dict)

    def confidence(self, evidence) -> np.ndarray:
        e = np.asarray(evidence, dtype=np.float64)
        if e.shape[-1] != len(EVIDENCE_NAMES):
            raise ValueError(f"evidence has {e.shape[-1]} values, expected {len(EVIDENCE_NAMES)} {EVIDENCE_NAMES}")
        z = np.clip(e @ np.asarray(self.coef, dtype=np.float64) + self.bias, -60.0, 60.0)
        return 1.0 / (1.0 + np.exp(-z))

    def to_dict(self) -> dict:
        return {"format": CALIBRATION_FORMAT, "features": list(EVIDENCE_NAMES),
                "model": "logistic", "coef": [float(c) for c in self.coef], "bias": float(self.bias),
                "fitted_on": self.fitted_on}

    @classmethod
    def from_dict(cls, data) -> "Calibration":
        if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
            raise ValueError(f"not a {CALIBRATION_FORMAT} calibration")
        if data.get("features") != list(EVIDENCE_NAMES) or data.get("model") != "logistic":
            raise ValueError(f"calibration features must be {list(EVIDENCE_NAMES)} with a logistic model")
        coef, bias = data.get("coef"), data.get("bias")
        numbers = [*coef, bias] if isinstance(coef, list) else []
        if len(numbers) != len(EVIDENCE_NAMES) + 1 or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in numbers):
            raise ValueError(f"calibration needs {len(EVIDENCE_NAMES)} finite coefficients and a finite bias")
        fitted = data.get("fitted_on", {})
        return cls(tuple(float(c) for c in coef), float(bias), fitted if isinstance(fitted, dict) else {})

    @classmethod
    def read(cls, path: Path, limit: int = 1 << 20) -> "Calibration":
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            raise ValueError(f"{path} is larger than {limit} bytes")
        return cls.from_dict(json.loads(raw))


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
