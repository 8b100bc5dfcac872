"""Parity metrics against the eager reference, and the gates that judge them.

Top-K agreement is a set overlap |A ∩ B| / K per sample (mean and min over the held-out set):
index order is unreliable (ties, int32 vs int64). TIE RULE: a patch the artifact picked that the
reference did not pick still counts as agreement when it is a tie at the K-th place, i.e. when
its reference score is within `tie_tolerance` of the reference's K-th score AND it replaces a
reference pick that is itself within `tie_tolerance` of the K-th score. Such swaps are decided by
rounding noise, not by the model. The strict overlap (no tie rule) is reported alongside.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def topk_overlap(ref_relevance: np.ndarray, ref_idx: np.ndarray, got_idx: np.ndarray, tie_tolerance: float):
    """Per-sample (overlap with tie rule, strict overlap), both in [0,1]."""
    k = ref_idx.shape[1]
    with_ties, strict = [], []
    for scores, ref, got in zip(ref_relevance, ref_idx, got_idx):
        a, b = set(ref.tolist()), set(int(i) for i in got.tolist())
        common = len(a & b)
        kth = np.sort(scores)[::-1][k - 1]
        extra = sum(1 for i in b - a if 0 <= i < len(scores) and scores[i] >= kth - tie_tolerance)
        dropped = sum(1 for i in a - b if scores[i] <= kth + tie_tolerance)
        with_ties.append((common + min(extra, dropped)) / k)
        strict.append(common / k)
    return np.array(with_ties), np.array(strict)


def parity_metrics(expected: dict, got: dict, tie_tolerance: float) -> dict[str, float]:
    """Metrics of an artifact's outputs vs the eager reference (both dicts of name -> array)."""
    rel_err = np.abs(got["relevance"].astype(np.float64) - expected["relevance"])
    w_err = np.abs(got["weights"].astype(np.float64) - expected["weights"])
    e_err = np.abs(got["evidence"].astype(np.float64) - expected["evidence"])
    overlap, strict = topk_overlap(expected["relevance"], expected["topk_indices"], got["topk_indices"], tie_tolerance)
    return {
        "samples": int(len(rel_err)),
        "relevance_max_abs": float(rel_err.max()),
        "relevance_mean_abs": float(rel_err.mean()),
        "weights_max_abs": float(w_err.max()),
        "weights_mean_abs": float(w_err.mean()),
        "evidence_max_abs": float(e_err.max()),
        "evidence_mean_abs": float(e_err.mean()),
        "topk_overlap_mean": float(overlap.mean()),
        "topk_overlap_min": float(overlap.min()),
        "topk_overlap_strict_mean": float(strict.mean()),
        "weights_sum_max_dev": float(np.abs(got["weights"].sum(axis=1) - 1.0).max()),
    }


@dataclass(frozen=True)
class Gate:
    """Limits on metrics: `maxima` (metric <= value) and `minima` (metric >= value).

    A metric named by a limit but not measured fails the gate: nothing passes unmeasured.
    """

    maxima: dict[str, float] = field(default_factory=dict)
    minima: dict[str, float] = field(default_factory=dict)
    tie_tolerance: float = 1e-3

    def failures(self, metrics: dict) -> list[str]:
        return [text for _, text in self._judged(metrics)]

    def size_failures(self, metrics: dict) -> list[str]:
        """Only the size rule: what a host that cannot run the artifact can still hold it to."""
        return [text for name, text in self._judged(metrics) if name == "size_bytes"]

    def parity_failures(self, metrics: dict) -> list[str]:
        return [text for name, text in self._judged(metrics) if name != "size_bytes"]

    def subset_failures(self, metrics: dict) -> list[str]:
        """The parity limits on a subset's parity_metrics (sentences or vectors alone). Limits on
        what only the whole build measures (an encoder's cosine, the size) are judged there."""
        return [text for name, text in self._judged(metrics) if name != "size_bytes" and name in metrics]

    def _judged(self, metrics: dict) -> list[tuple[str, str]]:
        out = []
        for name, limit in self.maxima.items():
            value = metrics.get(name)
            if value is None or not np.isfinite(value) or value > limit:
                # a size in bytes reads as a size rule with its margin, not as 2.326e+05 > 231992
                out.append((name, f"size {size_rule(value, limit)}" if name == "size_bytes" and value is not None
                            else f"{name}={_fmt(value)} > {limit:g}"))
        for name, limit in self.minima.items():
            value = metrics.get(name)
            if value is None or not np.isfinite(value) or value < limit:
                out.append((name, f"{name}={_fmt(value)} < {limit:g}"))
        return out

    def to_dict(self) -> dict:
        return {"max": dict(self.maxima), "min": dict(self.minima), "tie_tolerance": self.tie_tolerance}


def kb(n: float) -> str:
    """Sizes in the one unit people compare them in: KB (1024 B), one decimal."""
    return f"{n / 1024:.1f} KB"


def size_rule(size: float, budget: float) -> str:
    """A size rule with its margin: `227.2 KB of 226.6 KB budget: over by 0.6 KB (656 B)`."""
    margin = int(budget) - int(size)
    verdict = "under by" if margin >= 0 else "over by"
    return f"{kb(size)} of {kb(budget)} budget: {verdict} {kb(abs(margin))} ({abs(margin)} B)"


def size_cells(size: int | None, budget: int | None) -> tuple[str, str]:
    """(size, rule) in one unit per row, the budget's: `224.8 KB`, `<= 226.4 KB: 1.6 KB under`.
    The build's table and the report both print sizes this way."""
    if size is None:
        return "-", "-"
    scale, unit = (1024 * 1024, "MB") if (budget or size) >= 10 * 1024 * 1024 else (1024, "KB")
    fmt = lambda n: f"{n / scale:.1f} {unit}"  # noqa: E731
    if not budget:
        return fmt(size), "no budget"
    margin = budget - size
    return fmt(size), f"<= {fmt(budget)}: {fmt(abs(margin))} {'under' if margin >= 0 else 'OVER'}"


def _fmt(value) -> str:
    return "unmeasured" if value is None else f"{value:.4g}"


# Shared gate shapes; each target picks one (or defines its own) and adds its size limits.
# evidence (signature.EVIDENCE_NAMES) is read from the participatory map before any min-max, so
# float noise reaches it unamplified: held as tight as the weights.
LOSSLESS = Gate(
    maxima={"relevance_max_abs": 1e-3, "weights_max_abs": 1e-4, "evidence_max_abs": 1e-4},
    minima={"topk_overlap_min": 1.0},
    tie_tolerance=1e-3,
)
# Quantised evidence measured at most 1.5e-3 (the text encoder's INT8 queries), 6.5e-4 (CoreML 8-bit
# weights), 6.4e-4 (INT8 ONNX, x86 and emulated CPUs), 5.0e-4 (CoreML FP16) on the golden set: 0.005
# keeps a margin and moves a calibrated confidence by at most |coef| x 0.005 in the logit.
LOSSY = Gate(
    maxima={"relevance_mean_abs": 0.01, "evidence_max_abs": 0.005},
    minima={"topk_overlap_mean": 0.98, "topk_overlap_min": 0.95},
    tie_tolerance=1e-3,
)
