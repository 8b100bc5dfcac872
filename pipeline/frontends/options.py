"""Command-line option values, checked before any heavy work (no checkpoint, torch or runtime loaded).

Invoke would cast an option with an int default itself and print a traceback on "abc", so the
tasks take every value as text and these functions turn it into a typed value or an InputError
with the fix.
"""
from __future__ import annotations

import os
from pathlib import Path

from arrcoc_edge import install
from arrcoc_edge.errors import InputError

# A source checkout (the checkpoints and artifacts/ at its root), or an installed package: the wheel
# carries the checkpoints in pipeline/bundled/ (setup.py) and the output goes to ./artifacts.
REPO, CHECKOUT = install.ROOT, install.CHECKOUT
# The trained checkpoint (`invoke train`, metrics in its metadata). arrcoc-v0.1-default is the
# seeded initialisation it started from, kept as the untrained baseline (pipeline/training/train.py).
DEFAULT_CHECKPOINT = install.project_folder("checkpoints", install.CORE) / "arrcoc-v0.1-trained.safetensors"
# Installed: ./artifacts, resolved against the working folder when a command uses it, never at
# import (a deleted working folder made every command a traceback before its first line).
DEFAULT_OUT = REPO / "artifacts" if CHECKOUT else Path("artifacts")

MAX_BENCH_RUNS = 100_000
MAX_BENCH_PHOTOS = 100_000  # photos written to a temporary folder for `invoke bench`'s folder run
MAX_TRAIN_STEPS = 10_000_000
MAX_SEED = 2**32 - 1  # numpy's and torch's seeds are unsigned 32-bit on every platform we run


def integer(name: str, value, low: int, high: int, default: int | None = None) -> int:
    """`value` (text, int or None for the default) as an int in [low, high]."""
    if value is None and default is not None:
        return default
    try:
        number = int(str(value).strip(), 10)
    except ValueError:
        raise InputError(f"--{name} {_shown(value)} is not a whole number", f"pass --{name} N with {low} <= N <= {high}") from None
    if not low <= number <= high:
        raise InputError(f"--{name} {number} is out of range", f"pass --{name} N with {low} <= N <= {high}")
    return number


def optional_positive(name: str, value) -> int | None:
    """An optional whole number >= 1 (e.g. --grid, --top-k): None when not given. Its upper bound
    depends on other values (K <= G*G): ModelConfig checks that, after the checkpoint is read."""
    return None if value is None else integer(name, value, 1, 2**31 - 1)


def port(value) -> int:
    return integer("port", value, 1, 65535, default=8000)


def target_names(text: str | None) -> list[str]:
    """`--target a,b` -> ["a", "b"]; an empty list is an error (it would build nothing and exit 0)."""
    names = [t.strip() for t in (text or "").split(",") if t.strip()]
    if not names:
        raise InputError(f"no target named in --target {_shown(text or '')}",
                         "name one or more targets, comma-separated (e.g. --target onnx), or --target all")
    return names


def _not_empty(name: str, value) -> str:
    """An option given as '' (or only spaces) is a mistake (an unset shell variable, say), never
    "the default": the default is what you get by leaving the option out."""
    if not str(value).strip():
        raise InputError(f"--{name} is empty ({_shown(value)})", f"leave --{name} out for the default, or give a value")
    return str(value)


def out_folder(value: str | None, default: Path, name: str = "out") -> Path:
    """An output folder named on the command line, resolved once, here: absolute, links in its
    parents followed (arrcoc_edge.publishing.folder_state.output_path). Everything after uses only this path."""
    from arrcoc_edge.publishing.folder_state import output_path

    return output_path(str(default) if value is None else _not_empty(name, value))


def in_folder(value: str | None, default: Path, name: str = "out") -> Path:
    """A folder bench reads and writes bench.json into, resolved once like out_folder."""
    return out_folder(value, default, name)


def release_folder(value: str | None, default: Path, name: str = "out") -> Path:
    """A folder that is only read (verify, predict, serve): like in_folder, and a kept release (a
    renamed or copied output folder's link to its generation) is read where it lives."""
    from arrcoc_edge.publishing.folder_state import output_path

    return output_path(str(default) if value is None else _not_empty(name, value), release_ok=True)


def checkpoint_path(value: str | None, default: Path) -> Path:
    """--checkpoint: the default when left out; '' is an error; else an absolute path (the
    manifest records it, and later tasks run from other folders read it)."""
    return default if value is None else Path(os.path.abspath(_not_empty("checkpoint", value)))


def existing_folder(name: str, value: str) -> Path:
    path = Path(os.path.abspath(_not_empty(name, value)))
    if not path.is_dir():
        raise InputError(f"--{name} {_shown(value)} is not a folder", f"pass --{name} with an existing folder")
    return path


def existing_file(name: str, value: str) -> Path:
    path = Path(os.path.abspath(_not_empty(name, value)))
    if not path.is_file():
        raise InputError(f"--{name} {_shown(value)} is not a file", f"pass --{name} with an existing file")
    return path


def sentence_file(name: str, value: str):
    """--calibration-queries FILE: an existing file of one sentence a line, read and checked whole
    now, once: the build uses the SentenceFile returned (its sentences, name and sha256)."""
    from arrcoc_edge.stages.sentences import read_sentence_file

    return read_sentence_file(existing_file(name, value))


def part_folders(text: str | None) -> list[Path]:
    """`--parts a,b` -> existing, distinct folders; checked before anything is read or written."""
    names = [t.strip() for t in (text or "").split(",") if t.strip()]
    if not names:
        raise InputError(f"no folder named in --parts {_shown(text or '')}",
                         "name the published folders to merge, comma-separated (e.g. --parts linux,macos)")
    from arrcoc_edge.publishing.folder_state import output_path

    folders = [output_path(str(existing_folder("parts", n))) for n in names]
    resolved = [f.resolve() for f in folders]
    if len(set(resolved)) != len(resolved):
        raise InputError(f"--parts names one folder twice ({_shown(text)})", "name each part once")
    return folders


def writable_file(name: str, value: str) -> Path:
    """A file we may create: its folder exists (or can be made) and is writable; never a folder."""
    path = Path(os.path.abspath(_not_empty(name, value)))
    if path.is_dir():
        raise InputError(f"--{name} {_shown(value)} is a folder", f"pass --{name} with a file path")
    probe = path.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {_shown(value)} (folder {probe} is not writable)",
                         f"pass --{name} with a path in a writable folder")
    return path


def _shown(value) -> str:
    """A user's value quoted and cut short, so one bad option stays one readable line."""
    text = repr(str(value))
    return text if len(text) <= 60 else text[:57] + "...'"



def published_folder(root: Path, value: str | None, command: str) -> None:
    """--out of a task that reads a publish (predict): when `root` holds no manifest, one line that
    names what it is instead (missing, a file, a target's folder inside a publish, an empty
    folder) and the fix for that case. Without the build extra (an installed package that only
    predicts) a missing publish is fixed by pointing --out at one, never by building."""
    import importlib.util

    from arrcoc_edge.publishing.folder_state import MANIFEST

    if (root / MANIFEST).is_file():
        return
    shown = _shown(value) if value is not None else f"(default) {root}"
    parent = root.parent / MANIFEST
    if root.is_file():
        raise InputError(f"--out {shown} is a file, not a published folder",
                         "pass --out the folder a build published (it holds manifest.json); a photo goes to --image")
    if parent.is_file():
        above = os.path.dirname(value.rstrip("/")) or "." if value else str(root.parent)
        raise InputError(f"--out {shown} is the {root.name!r} folder inside a published folder",
                         f"pass --out {above} (the folder with manifest.json; --runtime picks a target)")
    can_build = importlib.util.find_spec("torch") is not None
    what = "does not exist" if not os.path.lexists(root) else "holds no manifest.json: nothing is published there"
    copy = "`cp -r artifacts/ DEST` copies one: the trailing slash copies the files the artifacts link points at"
    fix = (f"run `{command} build --target onnx,text-encoder --out {value or root}` first, or pass --out a published "
           f"folder ({copy})" if can_build else f"pass --out a folder a build published, such as a checkout's "
           f"artifacts/ ({copy})")
    raise InputError(f"--out {shown} {what}", fix)
