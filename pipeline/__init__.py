"""arrcoc-edge: checkpoint -> torch.export -> verified edge artifacts.

The one import name this project installs. Its core is this folder (`pipeline/` in a checkout) and
knows no target by name; the targets are `arrcoc_edge.targets` (the folder `targets/`; setup.py maps
both into this package). Its packages, top to
bottom, each importing only those below it (`.importlinter`, checked by `lint-imports` in
scripts/test.sh): frontends (the command line, the Python API, predict, bench) > building
(a build's stages, gates and publish; merge) | training > publishing (output folders, the ledger,
the manifest, the report) > stages (export, golden set, parity, the Target contract) > relevance
(the model, its reference, checkpoints, query encoders). errors, serve and subproc are leaves.

The Python API (docs/python.md): `from arrcoc_edge import build, load`. Importing the package stays
cheap (no torch, no runtime): build and load come from arrcoc_edge.frontends.api on first use; the typed errors
(arrcoc_edge.errors, plain classes) are here directly, so a caller can catch them by type.
"""
from arrcoc_edge.errors import (  # noqa: F401 - exported: a caller catches these by type
    ArrcocError,
    BuildCrashed,
    BuildInterrupted,
    CheckpointError,
    ExportError,
    GateError,
    HostCapabilityError,
    InputError,
    MergeError,
    MissingExtraError,
    NotApplicableError,
    OutputDirError,
    SettingsError,
)

__version__ = "0.1.0"

_API = ("build", "load", "Model", "Prediction", "BuildResult", "TargetResult")
__all__ = [*_API, "ArrcocError", "BuildCrashed", "BuildInterrupted", "CheckpointError", "ExportError", "GateError",
           "HostCapabilityError", "InputError", "MergeError", "MissingExtraError", "NotApplicableError",
           "OutputDirError", "SettingsError"]


def __getattr__(name: str):
    if name in _API:
        from arrcoc_edge.frontends import api

        return getattr(api, name)
    raise AttributeError(f"module 'arrcoc_edge' has no attribute {name!r}")
