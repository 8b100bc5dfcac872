"""How a training run is scored on its held-out scenes (pipeline/training/train.py trains):
R-precision and precision@K overall, by query kind and by family; the ablation of each way of
knowing; the evidence's ROC AUC on the natural present/absent pairs; the query-blind baseline's
input; and the tables `invoke train` prints. The metrics are defined in train.py's docstring.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from arrcoc_edge.relevance.model import WAYS_OF_KNOWING, RelevanceModel, strongest_cells
from arrcoc_edge.training import scenes as sc
from arrcoc_edge.training.features import Features, ablated, maps_of, pairs_of

QUERY_KINDS = sc.KINDS
FAMILIES = sc.FAMILIES
MODELS = ("trained", "untrained", "query_blind", "trained_const_query")


@torch.no_grad()
def presence(model: RelevanceModel, feats: Features) -> dict:
    """How well the evidence top_mean tells present from absent on the natural pairs of `feats`:
    pairs, present, ROC AUC (the probability a present pair's is above an absent one's)."""
    maps, _ = outputs(model, feats)
    sel = torch.from_numpy(np.isin(feats.kinds, ("natural", sc.ABSENT_KIND)))
    if not sel.any():
        return {"pairs": 0}
    top = torch.topk(maps[sel, 2], k=strongest_cells(maps.shape[2]), dim=1).values.mean(dim=1)
    present = feats.masks[sel].any(dim=1)
    pos, neg = top[present], top[~present]
    auc = ((pos[:, None] > neg[None, :]).float().mean() + 0.5 * (pos[:, None] == neg[None, :]).float().mean())
    return {"pairs": int(sel.sum()), "present": int(present.sum()), "roc_auc": round(float(auc), 4)}


def precision_at_k(relevance: torch.Tensor, masks: torch.Tensor, k: int) -> dict[str, float]:
    """precision@K, its ceiling, recall@K and R-precision (module docstring), averaged over pairs."""
    gt = masks.sum(dim=1)
    hits = masks.gather(1, torch.topk(relevance, k=k, dim=1).indices).sum(dim=1)
    order = torch.argsort(relevance, dim=1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(relevance.shape[1]).expand_as(order))
    r_hits = ((ranks < gt[:, None]) & (masks > 0)).sum(dim=1)
    return {
        "precision_at_k": round(float((hits / k).mean()), 4),
        "precision_ceiling": round(float((gt.clamp(max=k) / k).mean()), 4),
        "recall_at_k": round(float((hits / gt.clamp(max=k)).mean()), 4),
        "r_precision": round(float((r_hits / gt).mean()), 4),
    }


def _groups(kinds: np.ndarray) -> dict[str, dict[str, torch.Tensor]]:
    """Selections of pairs: by kind (scenes.KINDS) and by family (scenes.FAMILIES), present ones only."""
    by_kind = {kind: torch.from_numpy(kinds == kind) for kind in QUERY_KINDS}
    by_family = {fam: torch.from_numpy(np.isin(kinds, members)) for fam, members in FAMILIES.items()}
    return {"by_kind": {k: v for k, v in by_kind.items() if v.any()},
            "by_family": {k: v for k, v in by_family.items() if v.any()}}


@torch.no_grad()
def outputs(model: RelevanceModel, feats: Features, chunk: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """The maps [P,3,N] and balancer weights [P,3] of every pair of `feats`, in pair order.

    Uses the cached features and the rearranged participatory map, equal to the full model
    forward to ~1e-6 (tests/test_train.py checks it) and much cheaper.
    """
    model.eval()
    maps = torch.cat([maps_of(model, feats, scenes, pairs_of(feats, scenes))
                      for scenes in torch.arange(len(feats.textures)).split(chunk)])
    # pairs are sorted by scene, so the rows line up with feats.masks
    weights = torch.cat([model.balancer.weight_predictor(torch.cat([model.balancer.summarise(m), q], dim=1))
                         for m, q in zip(maps.split(256), feats.queries.split(256))])
    return maps, weights


def _scored(rel: torch.Tensor, feats: Features, k: int) -> dict:
    named = feats.masks.any(dim=1)  # absent pairs have no cells: they are scored by `presence`
    result = precision_at_k(rel[named], feats.masks[named], k)
    for group, selections in _groups(feats.kinds).items():
        result[group] = {name: precision_at_k(rel[sel], feats.masks[sel], k) for name, sel in selections.items()}
    return result


@torch.no_grad()
def evaluate(model: RelevanceModel, feats: Features) -> dict:
    """Metrics of `model` on every pair of `feats`: overall, by query kind and by family."""
    maps, weights = outputs(model, feats)
    return _scored(ablated(maps, weights, None), feats, model.cfg.top_k)


def _overlap(a: torch.Tensor, b: torch.Tensor, k: int) -> torch.Tensor:
    """Per pair |topK(a) ∩ topK(b)| / K."""
    ta, tb = torch.topk(a, k, dim=1).indices, torch.topk(b, k, dim=1).indices
    return (ta[:, :, None] == tb[:, None, :]).any(dim=2).float().mean(dim=1)


@torch.no_grad()
def ablation(model: RelevanceModel, feats: Features) -> dict:
    """Each way of knowing zeroed in turn (`ablated`) on every pair of `feats`.

    Per family and kind: R-precision with all three maps and with each one zeroed, how much of
    the top K each zeroing changes (1 - overlap with the full top K), and the mean balancer
    weights. A map the task needs is one whose zeroing moves the top K and costs R-precision
    where it is needed, and not elsewhere.
    """
    k = model.cfg.top_k
    maps, weights = outputs(model, feats)
    full = ablated(maps, weights, None)
    rels = {"all": full, **{f"no_{name}": ablated(maps, weights, i) for i, name in enumerate(WAYS_OF_KNOWING)}}
    result = {}
    for group, selections in _groups(feats.kinds).items():
        result[group] = {}
        for name, sel in selections.items():
            masks = feats.masks[sel]
            result[group][name] = {
                "pairs": int(sel.sum()),
                "r_precision": {variant: precision_at_k(rel[sel], masks, k)["r_precision"]
                                for variant, rel in rels.items()},
                "topk_changed": {variant: round(float(1 - _overlap(full[sel], rel[sel], k).mean()), 4)
                                 for variant, rel in rels.items() if variant != "all"},
                "weights_mean": [round(float(w), 4) for w in weights[sel].mean(dim=0)],
                "weights_std": [round(float(w), 4) for w in weights[sel].std(dim=0)],
            }
    return result


def const_query(feats: Features) -> torch.Tensor:
    """The query-blind input: the normalised mean training query, the same for every pair."""
    return F.normalize(feats.queries.mean(dim=0, keepdim=True), dim=1)


def blind(feats: Features, query: torch.Tensor) -> Features:
    """`feats` with every pair's query replaced by `query` [1,D]."""
    return dataclasses.replace(feats, queries=query.expand_as(feats.queries).contiguous())


def summary(metrics: dict) -> str:
    """Tables: one row per model (overall metrics, R-precision by family and by kind), then the
    ablation (R-precision with each way of knowing zeroed, share of the top K it changes, mean weights)."""
    k = metrics["k"]
    ceiling = metrics["trained"]["precision_ceiling"]
    kinds = [kind for kind in QUERY_KINDS if kind in metrics["trained"]["by_kind"]]
    fams = [fam for fam in FAMILIES if fam in metrics["trained"].get("by_family", {})]
    counts = ", ".join(f"{kind} {metrics['pairs_by_kind'][kind]}" for kind in kinds)
    rows = [
        f"held-out: {metrics['heldout_pairs']} (scene, query) pairs from {metrics['heldout_scenes']} scenes "
        f"({counts}), K={k}; precision@{k} ceiling {ceiling:.3f}",
        f"{'model':20s} {'prec@' + str(k):>8s} {'R-prec':>7s} | by family: " + " ".join(f"{f:>8s}" for f in fams)
        + " | by kind: " + " ".join(f"{kind:>7s}" for kind in kinds),
    ]
    for name in MODELS:
        m = metrics[name]
        by_fam = " ".join(f"{m['by_family'][f]['r_precision']:8.3f}" for f in fams)
        by_kind = " ".join(f"{m['by_kind'][kind]['r_precision']:7.3f}" for kind in kinds)
        rows.append(f"{name:20s} {m['precision_at_k']:8.3f} {m['r_precision']:7.3f} |            {by_fam} "
                    f"|          {by_kind}")
    if "ablation" in metrics:
        rows += ["", "ablation of the trained model (held-out): R-precision with all maps / each zeroed; "
                 "share of the top K the zeroing changes; mean weights (info, persp, part)",
                 f"{'group':14s} {'pairs':>5s} {'all':>6s} {'-info':>6s} {'-persp':>6s} {'-part':>6s} | "
                 f"{'Δtop-K: info':>12s} {'persp':>6s} {'part':>6s} | weights"]
        for group in ("by_family", "by_kind"):
            for name, a in metrics["ablation"][group].items():
                r, c = a["r_precision"], a["topk_changed"]
                rows.append(f"{name:14s} {a['pairs']:5d} {r['all']:6.3f} {r['no_information']:6.3f} "
                            f"{r['no_perspectival']:6.3f} {r['no_participatory']:6.3f} | {c['no_information']:12.3f} "
                            f"{c['no_perspectival']:6.3f} {c['no_participatory']:6.3f} | "
                            + " ".join(f"{w:.3f}" for w in a["weights_mean"]))
    return "\n".join(rows)
