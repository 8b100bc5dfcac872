"""How well a checkpoint's confidence tells "it is there" from "it is not", on natural photos no
training or calibration saw: the table docs/model.md shows.

    .venv/bin/python scripts/measure_stands_out.py [--checkpoint FILE]

For each checkpoint (the shipped one, or --checkpoint, and a reference-layout one made as
tests/conftest.py makes it: arr-coc-0-1's state-dict layout, seeded untrained weights, its own
settings G=32, K=200, 384 wide here so that MiniLM encodes its queries):
  1. its calibration is fitted as a build fits it (pipeline/stages/calibration.py, on the
     natural photos' calibration split);
  2. every held-out pair (pipeline/stages/natural_photos.py: crops of photos neither the training
     nor the fit saw; colour words labelled by the crop's pixels; places by geometry) runs through
     the eager model with the sentence encoded by all-MiniLM-L6-v2, as a build's golden set does;
  3. per colour and per place: present / absent pairs, ROC AUC of the confidence, balanced accuracy
     of confidence >= 0.5 (`stands_out`), expected calibration error (10 bins), and the share of the
     strongest 8 relevance cells that hold the queried colour (a cell holds it when >= 6% of its
     pixels have it) or lie in the named quadrant, over the present pairs.
A place is in every photo, so place rows have no absent pairs: no AUC, and balanced accuracy is the
share of them said to stand out. A colour with fewer than ENOUGH present or absent pairs is marked:
its numbers rest on too few crops. Targets: AUC >= 0.90, balanced accuracy >= 0.85, ECE <= 0.10,
strongest-8 share >= 0.80 (TARGETS); the last column says which a row misses.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHIPPED = REPO / "checkpoints" / "arrcoc-v0.1-trained.safetensors"
ENOUGH = 10  # present and absent pairs a colour needs before its row counts
TARGETS = {"roc_auc": 0.90, "balanced_accuracy": 0.85, "ece": 0.10, "strongest_8": 0.80}
HEADER = ("| checkpoint | asked | present / absent | ROC AUC | balanced accuracy | ECE | strongest 8 hold it | "
          "misses |\n|---|---|---|---|---|---|---|---|")


def reference_layout(folder: Path) -> Path:
    """A reference-layout .pt as tests/conftest.py writes one (seed 7), 384 wide."""
    import torch

    from arrcoc_edge.relevance.model import ModelConfig, build_model

    path = folder / "reference-layout.pt"
    state = dict(build_model(ModelConfig(query_dim=384), seed=7).state_dict())
    state["base_model.lm_head.weight"] = torch.zeros(2, 2)
    torch.save(state, path)
    return path


def measured(checkpoint: Path) -> tuple[object, list[dict]]:
    """(the loaded checkpoint, one row per colour and place of the held-out split, then "all colours")."""
    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.stages import calibration as cal
    from arrcoc_edge.stages import natural_photos as nat
    from arrcoc_edge.stages.sentences import cached_minilm_embed

    loaded = load_checkpoint(checkpoint)
    model = loaded.model.eval()
    fitted = cal.fit(model, loaded.config, cached_minilm_embed, "all-MiniLM-L6-v2", heldout=False)
    held = nat.natural_set("heldout", loaded.config.grid)
    outcome = cal.run_pairs(model, held, cached_minilm_embed)
    confidence = fitted.confidence(outcome.evidence)
    present = np.array([p.present for p in held.pairs])
    hold = np.array([p.cells[outcome.strongest[i]].mean() for i, p in enumerate(held.pairs)])
    words = np.array([p.word for p in held.pairs])
    rows = [row(w, confidence[words == w], present[words == w], hold[words == w])
            for w in (*nat.COLOURS, *nat.PLACES)]
    colours = np.array([p.kind == "colour" for p in held.pairs])
    rows.append(row("all colours", confidence[colours], present[colours], hold[colours]))
    return loaded, rows


def row(word: str, confidence: np.ndarray, present: np.ndarray, hold: np.ndarray) -> dict:
    from arrcoc_edge.stages import calibration as cal

    counts = (int(present.sum()), int((~present).sum()))
    return {"word": word, "present": counts[0], "absent": counts[1],
            "roc_auc": cal.roc_auc(confidence, present),
            "balanced_accuracy": cal.balanced_accuracy(confidence >= 0.5, present) if len(present) else float("nan"),
            "ece": cal.expected_calibration_error(confidence, present) if len(present) else float("nan"),
            "strongest_8": float(hold[present].mean()) if counts[0] else float("nan")}


def misses(r: dict) -> str:
    """Which targets the row misses, or why it is not held to them."""
    place = r["absent"] == 0 and r["present"] > 0
    if not place and min(r["present"], r["absent"]) < ENOUGH:
        return f"too few crops ({r['present']} present, {r['absent']} absent; {ENOUGH} each needed)"
    shown = {name: round(r[name], 3) for name in TARGETS}  # as the table prints them
    missed = [name for name, limit in TARGETS.items() if not np.isnan(shown[name])
              and (shown[name] > limit if name == "ece" else shown[name] < limit)]
    return ", ".join(missed) if missed else "none"


def markdown(name: str, rows: list[dict]) -> list[str]:
    show = lambda v: "—" if np.isnan(v) else f"{v:.3f}"  # noqa: E731
    return [f"| {name} | {r['word']} | {r['present']} / {r['absent']} | {show(r['roc_auc'])} | "
            f"{show(r['balanced_accuracy'])} | {show(r['ece'])} | {show(r['strongest_8'])} | {misses(r)} |"
            for r in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=SHIPPED,
                        help="the checkpoint to measure beside the reference layout (default: the shipped one)")
    args = parser.parse_args()
    from arrcoc_edge.stages import natural_photos as nat

    print(f"held-out photos: {', '.join(nat.SPLITS['heldout'])} ({nat.CROPS_PER_PHOTO} crops each); calibration "
          f"fitted on {', '.join(nat.SPLITS['calibration'])}\n")
    print(HEADER)
    with tempfile.TemporaryDirectory() as tmp:
        for path in (args.checkpoint, reference_layout(Path(tmp))):
            loaded, rows = measured(path)
            cfg = loaded.config
            name = "reference layout" if path.suffix == ".pt" else "shipped" if path == SHIPPED else path.name
            label = f"{name} (G={cfg.grid}, K={cfg.top_k})"
            print("\n".join(markdown(label, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
