"""The files outside Python the targets read, in a checkout or an installed package (pipeline/install.py).

MOBILE      the Android and iOS sample apps' sources (read only: compiled in private folders)
WEB         the page's sources (web/ with its node_modules in a checkout)
TOOLS       kotlinc and android.jar, which scripts/setup.sh installs in a checkout; an installed
            package has none, and the Android compile gate says "not run" with why
CORPUS      the tokenizer corpus the apps' tokenizer tests run on (shipped with the package)
app_folder  where a mobile stage copies its bundle by default: the checkout's own sample app;
            an installed package has no app of the user's to write into (never site-packages),
            so the bundle stays in the published folder unless ARRCOC_*_APP_DIR names one
"""
from __future__ import annotations

from pathlib import Path

from arrcoc_edge.install import CHECKOUT, ROOT, TARGETS, project_folder

MOBILE = project_folder("mobile", TARGETS)
WEB = project_folder("web", TARGETS)
TOOLS = ROOT / "tools" if CHECKOUT else None
CORPUS = Path(__file__).resolve().parent / "tokenizer_corpus.txt"
NO_TOOLS = ("the app compile gate runs in a source checkout (git clone, then `bash scripts/setup.sh` installs "
            "kotlinc and android.jar); an installed package publishes the bundle without it")


def app_folder(relative: str) -> Path | None:
    """The checkout's sample app folder `mobile/<relative>`, or None in an installed package."""
    return MOBILE / relative if CHECKOUT else None


def sample_app(relative: str) -> str:
    """Where a person finds the sample app `mobile/<relative>`, as a fix names it: the checkout's
    folder, or the copy an installed package bundles (site-packages/.../bundled/mobile/<relative>)."""
    return f"mobile/{relative}" if CHECKOUT else str(MOBILE / relative)


def shown(path: Path) -> str:
    """A path as messages show it: relative to the checkout or package root when under it."""
    path = Path(path)
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
