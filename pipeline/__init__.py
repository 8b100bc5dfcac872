"""arrcoc-edge: checkpoint -> torch.export -> verified edge artifacts.

The core (this package) knows no target by name; targets live in `targets/`.
"""
__version__ = "0.1.0"
