"""arrcoc-edge: checkpoint -> torch.export -> verified edge artifacts.

The core (this package) knows no target by name; targets live in `targets/`.

The Python API (docs/python.md): `from pipeline import build, load`. Importing the package stays
cheap (no torch, no runtime): build and load come from pipeline.api on first use; the typed errors
(pipeline.errors, plain classes) are here directly, so a caller can catch them by type.
"""
import sys
import types

from pipeline.errors import (  # noqa: F401 - exported: a caller catches these by type
    ArrcocError,
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
__all__ = [*_API, "ArrcocError", "BuildInterrupted", "CheckpointError", "ExportError", "GateError",
           "HostCapabilityError", "InputError", "MergeError", "MissingExtraError", "NotApplicableError",
           "OutputDirError", "SettingsError"]


def __getattr__(name: str):
    if name in _API:
        from pipeline import api

        return getattr(api, name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")


class _Package(types.ModuleType):
    """The import system sets each submodule as an attribute of its package: once pipeline/build.py
    is imported (every build imports it), `pipeline.build` would be that module, not the API's
    build(). The API's names stay the API's; the modules stay reachable as `from pipeline.build
    import ...` (through sys.modules)."""

    def __setattr__(self, name, value):
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
