"""The confidence calibration of a checkpoint: evidence -> probability that the query's colour is there.

Every build fits one for the checkpoint it builds and publishes it as calibration.json beside
manifest.json (relevance/evidence.py's Calibration; the readers turn a prediction's `evidence`
into `confidence` with it). How:
  1. the natural photos' calibration split (stages/natural_photos.py: crops of real photos no
     training saw, colour words labelled by their pixels, present or absent);
  2. each pair's sentence encoded by the build's own query encoder (stages/sentences.py
     encoder_for, as the golden set's sentences are), the crop and sentence run through the eager
     model, and the evidence read from its participatory map (model.participatory_evidence);
  3. a logistic regression evidence -> present (fit_logistic: Newton's method in numpy on
     standardised features, L2 penalty L2, present and absent pairs weighted to count equally, so
     0.5 is the point where both errors cost the same whatever a split's mix of colours);
  4. measured on the held-out split (photos neither the training nor the fit saw) with `measure`:
     ROC AUC, balanced accuracy of confidence >= 0.5, expected calibration error; recorded in
     fitted_on beside the photos, pairs and split.
Place pairs are not fitted: a place is in every photo, so they have no absent side.
A checkpoint with no query encoder here gets no calibration, and the manifest says why. The result
is cached by content (conversion_cache: the checkpoint, its settings, the encoder, this code).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrcoc_edge.relevance.evidence import CALIBRATION_FILE, Calibration
from arrcoc_edge.relevance.signature import EVIDENCE_NAMES
from arrcoc_edge.stages import natural_photos as nat

L2 = 1e-2  # on standardised features: keeps the fit finite when a split separates perfectly
# The penalty a build uses is chosen among these by leave-one-photo-out cross-validation on the
# calibration split (lowest ECE): a larger one pulls every confidence toward 0.5, which costs
# calibration; a smaller one follows the few photos of the split too closely.
L2_CHOICES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
ECE_BINS = 10
STRONGEST = 8  # "the strongest 8 cells": the measure of where the model looks


@dataclass
class Outcome:
    """A split through one model: per pair its evidence [P, 4] and strongest cells [P, STRONGEST]."""

    evidence: np.ndarray
    strongest: np.ndarray


def run_pairs(model, nset: nat.NaturalSet, encode) -> Outcome:
    """Every pair of `nset` through the eager `model` (eval mode): the evidence from its participatory
    map and the indices of its STRONGEST highest relevance cells. `encode`: sentences -> [n, D]."""
    import torch

    from arrcoc_edge.relevance.model import participatory_evidence

    sentences = nset.sentences
    vectors = torch.from_numpy(np.asarray(encode(sentences), dtype=np.float32))
    row = {s: i for i, s in enumerate(sentences)}
    evidence = np.zeros((len(nset.pairs), len(EVIDENCE_NAMES)), dtype=np.float64)
    strongest = np.zeros((len(nset.pairs), STRONGEST), dtype=np.int64)
    by_crop: dict[int, list[int]] = {}
    for i, pair in enumerate(nset.pairs):
        by_crop.setdefault(pair.crop, []).append(i)
    with torch.no_grad():
        for crop, idx in by_crop.items():
            textures = model.texture(torch.from_numpy(np.array(nset.images[crop]))[None])
            textures = textures.expand(len(idx), -1, -1, -1)
            query = vectors[[row[nset.pairs[i].query] for i in idx]]
            evidence[idx] = participatory_evidence(model.participatory_scorer(textures, query)).double().numpy()
            relevance = model.from_textures(textures, query)[0]
            strongest[idx] = torch.topk(relevance, k=STRONGEST, dim=1).indices.numpy()
    return Outcome(evidence, strongest)


def fit_logistic(features: np.ndarray, labels: np.ndarray, l2: float = L2, steps: int = 50) -> tuple[np.ndarray, float]:
    """Logistic regression, features [n, f] -> labels [n] bool, both classes weighted to count equally:
    (coef [f], bias) on the raw features. Newton's method on standardised features with an L2
    penalty (not on the bias); stops when a step changes nothing."""
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    if y.all() or not y.any():
        raise ValueError("a calibration needs present and absent pairs")
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    weight = np.where(y, 0.5 / y.mean(), 0.5 / (~y).mean()) / len(y)
    penalty = np.diag([l2] * x.shape[1] + [0.0])
    w = np.zeros(z.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -60, 60)))
        gradient = z.T @ (weight * (p - y)) + penalty @ w
        hessian = (z * (weight * p * (1 - p))[:, None]).T @ z + penalty
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    coef = w[:-1] / scale
    return coef, float(w[-1] - coef @ mean)


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The probability that a present pair scores above an absent one (ties count half)."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=bool)
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return float("nan")
    above = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(above / (len(pos) * len(neg)))


def balanced_accuracy(said: np.ndarray, labels: np.ndarray) -> float:
    """Mean of the true positive and true negative rates (one side alone when the other is empty)."""
    said, labels = np.asarray(said, dtype=bool), np.asarray(labels, dtype=bool)
    rates = [said[labels].mean()] if labels.any() else []
    rates += [(~said[~labels]).mean()] if (~labels).any() else []
    return float(np.mean(rates))


def expected_calibration_error(confidence: np.ndarray, labels: np.ndarray, bins: int = ECE_BINS) -> float:
    """sum over equal-width confidence bins of (share of pairs) x |mean confidence - share present|."""
    confidence, labels = np.asarray(confidence, dtype=np.float64), np.asarray(labels, dtype=bool)
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        sel = which == b
        if sel.any():
            total += sel.mean() * abs(confidence[sel].mean() - labels[sel].mean())
    return float(total)


def measure(confidence: np.ndarray, labels: np.ndarray) -> dict:
    """ROC AUC, balanced accuracy of confidence >= 0.5 and ECE, rounded for the record."""
    return {"pairs": int(len(labels)), "present": int(np.sum(labels)),
            "roc_auc": round(roc_auc(confidence, labels), 4),
            "balanced_accuracy": round(balanced_accuracy(np.asarray(confidence) >= 0.5, labels), 4),
            "ece": round(expected_calibration_error(confidence, labels), 4)}


def choose_penalty(features: np.ndarray, labels: np.ndarray, photos: np.ndarray) -> tuple[float, dict[str, float]]:
    """(the L2_CHOICES penalty whose fits, each on all photos but one and measured on that one, give
    the lowest ECE over the whole split; {penalty: that ECE}). A split of one photo, or one whose
    folds lack a class, cannot be cross-validated: L2 then."""
    folds = [photos == photo for photo in np.unique(photos)]
    if len(folds) < 2 or any(labels[~out].all() or not labels[~out].any() for out in folds):
        return L2, {}
    scores = {}
    for l2 in L2_CHOICES:
        confidence = np.zeros(len(labels))
        for out in folds:
            coef, bias = fit_logistic(features[~out], labels[~out], l2=l2)
            confidence[out] = 1.0 / (1.0 + np.exp(-np.clip(features[out] @ coef + bias, -60, 60)))
        scores[f"{l2:g}"] = round(expected_calibration_error(confidence, labels), 4)
    best = min(L2_CHOICES, key=lambda l2: (scores[f"{l2:g}"], -l2))  # a tie goes to the larger penalty
    return best, scores


def colour_rows(nset: nat.NaturalSet) -> np.ndarray:
    return np.array([p.kind == "colour" for p in nset.pairs])


def fit(model, cfg, encode, encoder_name: str, heldout: bool = True) -> Calibration:
    """The calibration of `model` (eager, eval) fitted on the calibration split, measured on the
    held-out split (when `heldout` and its photos are installed: matplotlib), both at the model's grid."""
    calib = nat.natural_set("calibration", cfg.grid, places=False)
    outcome = run_pairs(model, calib, encode)
    labels = np.array([p.present for p in calib.pairs])
    photos = np.array([calib.names[p.crop].split("/")[0] for p in calib.pairs])
    l2, by_penalty = choose_penalty(outcome.evidence, labels, photos)
    coef, bias = fit_logistic(outcome.evidence, labels, l2=l2)
    fitted = Calibration(tuple(float(c) for c in coef), bias)
    record = {"split": "calibration", "photos": calib.photos, "crops": len(calib.images), "pairs": len(labels),
              "present": int(labels.sum()), "set_sha256": calib.sha256, "encoder": encoder_name,
              "method": "logistic regression on the evidence, present and absent weighted equally, L2 "
                        f"{l2:g} on standardised features, chosen by leave-one-photo-out ECE "
                        "(pipeline/stages/calibration.py)",
              "penalty_cross_validation_ece": by_penalty,
              "labels": f"colour present: >= {nat.PRESENT:.0%} of the crop's pixels, absent: <= {nat.ABSENT:.1%} "
                        "(pipeline/stages/natural_photos.py COLOUR_RULES)",
              "calibration_metrics": measure(fitted.confidence(outcome.evidence), labels)}
    try:
        held = nat.natural_set("heldout", cfg.grid, places=False) if heldout else None
    except ModuleNotFoundError as exc:
        held, record["heldout"] = None, {"measured": False, "reason": str(exc)}
    if held is None:
        record.setdefault("heldout", {"measured": False, "reason": "not asked for"})
    else:
        held_out = run_pairs(model, held, encode)
        held_labels = np.array([p.present for p in held.pairs])
        record["heldout"] = {"measured": True, "photos": held.photos, "crops": len(held.images),
                             **measure(fitted.confidence(held_out.evidence), held_labels)}
    return Calibration(fitted.coef, fitted.bias, record)


@dataclass
class Fitted:
    """A build's calibration: calibration.json's content (None when there is none) and the manifest's
    record of it (`calibration`: the file, its sha256 and bytes, the encoder and the held-out
    metrics, or the reason there is no file)."""

    record: dict | None
    entry: dict

    @property
    def content(self) -> bytes:
        return (json.dumps(self.record, indent=2, sort_keys=True) + "\n").encode()

    def write(self, folder: Path) -> None:
        """calibration.json into a new publish (nothing when there is no calibration)."""
        if self.record is not None:
            (folder / CALIBRATION_FILE).write_bytes(self.content)

    def summary(self) -> str:
        held = self.record["fitted_on"]["heldout"]
        tail = (f"held-out ROC AUC {held['roc_auc']}, balanced accuracy {held['balanced_accuracy']}, ECE {held['ece']}"
                if held.get("measured") else held.get("reason", "held-out not measured"))
        return f"fitted on {self.record['fitted_on']['pairs']} natural pairs; {tail}"


def fitted_for(ckpt, base_model: Path | None, work: Path, log=print) -> Fitted:
    """The calibration of the checkpoint a build builds, fitted once per checkpoint, settings,
    encoder and code (conversion_cache), or none with the reason: a checkpoint with no query
    encoder here has no sentences to fit on."""
    import hashlib

    from arrcoc_edge.stages import sentences
    from arrcoc_edge.stages.conversion_cache import convert_cached

    encode, how = sentences.encoder_for(ckpt.path, base_model, ckpt.config.query_dim)
    if encode is None:
        why = f"no calibration: {how.removeprefix('no sentences: ')}; predictions carry evidence, no confidence"
        return Fitted(None, {"file": None, "reason": why})
    model = ckpt.model.eval()
    inputs = {"checkpoint": ckpt.sha256, "settings": ckpt.config.to_json(), "encoder": how}
    record = convert_cached("calibration", inputs, ("torch", "numpy", "pillow", "scikit-image"),
                            lambda folder: fit(model, ckpt.config, encode, how).to_dict(), work, log)
    record["fitted_on"].update(checkpoint_sha256=ckpt.sha256, grid=ckpt.config.grid)
    fitted = Fitted(record, {})
    fitted.entry = {"file": CALIBRATION_FILE, "bytes": len(fitted.content),
                    "sha256": hashlib.sha256(fitted.content).hexdigest(), "encoder": how,
                    "heldout": record["fitted_on"]["heldout"]}
    return fitted
