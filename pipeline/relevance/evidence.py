"""Whether what a query asks for is in a photo, read from the model's own outputs.

`relevance` is min-max normalised per photo, so its top cell is 1.000 whatever was asked: it says
where the model looks, not whether anything is there. The model's `evidence` output does
(signature.EVIDENCE_NAMES: the mean of the strongest cells, the mean, lowest and highest cell of the
participatory map, (cosine + 1) / 2 per cell, before the balancer and before any min-max). A
Calibration, fitted on labelled natural photos for one checkpoint and published as calibration.json
beside manifest.json, maps it to `confidence`, the probability that what the query asks for is in
the photo; `stands_out` is confidence >= STANDS_OUT. A folder without calibration.json has no
confidence, and every reader says so (NO_CALIBRATION) instead of a number.
numpy only: the page (web/app.js) and both apps compute the confidence the same way.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arrcoc_edge.relevance.signature import EVIDENCE_NAMES

STANDS_OUT = 0.5  # confidence at or above this: what the query asks for is more likely there than not
NO_CALIBRATION = "no calibration in this folder"
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


def percent(value: float) -> str:
    """0.873 -> "87%"; never "0%" or "100%" for a probability strictly between them."""
    shown = round(100 * value)
    if shown == 0 and value > 0:
        return "<1%"
    if shown == 100 and value < 1:
        return ">99%"
    return f"{shown}%"


def verdict(confidence: float | None, asked: str = "", unknown: str = NO_CALIBRATION) -> str:
    """The answer in a few words: whether what the query asks for is in the photo, with the
    confidence as a percentage, or why there is none (`unknown`; never a made-up number).
    asked: the query as the sentence names it (" for 'something red'"), or nothing."""
    if confidence is None:
        return f"confidence unknown{asked}: {unknown}"
    if confidence >= STANDS_OUT:
        return f"stands out{asked}: confidence {percent(confidence)}"
    return f"nothing in this photo stands out{asked}: confidence {percent(confidence)}"
