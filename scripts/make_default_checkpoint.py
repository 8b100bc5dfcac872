"""Write the shipped default checkpoint: a seeded initialisation (not trained).

Usage: python scripts/make_default_checkpoint.py [PATH]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arrcoc_edge.relevance.checkpoint import save_checkpoint
from arrcoc_edge.relevance.model import ModelConfig, build_model

SEED = 0

if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "checkpoints/arrcoc-v0.1-default.safetensors")
    model = build_model(ModelConfig(), seed=SEED)
    save_checkpoint(model, path, {
        "kind": "seeded-initialisation",
        "trained": False,
        "seed": SEED,
        "note": "untrained: PyTorch default init under torch.manual_seed(0); relevance maps carry no learned meaning",
    })
    print(f"wrote {path}")
