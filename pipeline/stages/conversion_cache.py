"""Conversions that depend only on what they read, kept between builds in the user's own cache.

Conversions take most of a build and give the same files for the same inputs: torch.export of the
checkpoint, its ExecuTorch lowering (FP32 and int8) and CoreML packages, all-MiniLM-L6-v2 to ONNX
(FP32 and int8) for the text-encoder target, and all-MiniLM-L6-v2 to the apps' encoders. A second
build that needs the same conversion (another --out, another target list, `--target android` after
`--target executorch`, a rebuild after a failed gate elsewhere) copies the files instead.

Only the conversion is reused. Every inspection and gate still runs on the copied files, against
this build's golden set, so a reused file passes exactly the checks a fresh one would have to.

The key covers what a conversion reads: the inputs the caller names (the checkpoint's export key,
the calibration rows, the MiniLM snapshot's bytes), the versions of the libraries that convert, the
Python version, and the source of this project's own code (every .py file under pipeline/ and
targets/: any change of ours makes new keys). Entries are pipeline/stages/private_cache.py's checked
and sealed folders, `<user cache>/arrcoc-edge/conversions/<kind>-<key>`, so nothing another user
can write is used; each kind keeps its few most recently used entries (the MiniLM ones are
45-110 MB each). ARRCOC_CONVERSION_CACHE=off converts every time.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable

from arrcoc_edge import install
from arrcoc_edge.stages import private_cache

CACHE_NAME = "conversions"
INFO = "conversion.json"  # what the conversion returned (the manifest's record of it), beside its files
OFF_VARIABLE = "ARRCOC_CONVERSION_CACHE"
CODE_ROOTS = install.CODE  # folder -> module prefix: the core and the targets


@functools.cache
def code_digest() -> str:
    """sha256 over this project's own Python modules (pipeline/ and targets/), module name and
    bytes: the same in a checkout and in the package installed from it (where targets/ sits inside
    the core's folder, and whose `bundled/` data folders, the checkout's web/ and mobile/, are not
    modules of ours)."""
    h = hashlib.sha256()
    for root, prefix in CODE_ROOTS.items():
        nested = [other for other in CODE_ROOTS if other != root and other.is_relative_to(root)]
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).parts
            if parts[0] == "bundled" or any(path.is_relative_to(other) for other in nested):
                continue
            h.update(f"\0{prefix}/{'/'.join(parts)}\0".encode() + path.read_bytes())
    return h.hexdigest()


def tool_versions(*dists: str) -> dict[str, str]:
    """The installed version of each distribution ('absent' when it is not installed)."""
    found = {}
    for dist in dists:
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "absent"
    return found


def conversion_key(kind: str, inputs: dict[str, str], tools: tuple[str, ...]) -> str:
    """`<kind>-<32 hex>` for a conversion of `kind` reading `inputs` (name -> digest) with `tools`."""
    parts = {"kind": kind, "inputs": inputs, "tools": tool_versions(*tools), "code": code_digest(),
             "python": sys.version}
    return f"{kind}-{hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]}"


def convert_cached(kind: str, inputs: dict[str, str], tools: tuple[str, ...], convert: Callable[[Path], dict],
                   dest: Path, log: Callable[[str], None], keep: int = 3) -> dict:
    """Run `convert(folder)`, which writes its files into `folder` and returns what to record of
    them (JSON), or reuse the files and record of an earlier run with the same key. The files end
    up in `dest` (plain copies); returns the record, as JSON gives it back either way."""
    if os.environ.get(OFF_VARIABLE) == "off":
        return json.loads(json.dumps(convert(dest)))
    key = conversion_key(kind, inputs, tools)

    def make(folder: Path) -> None:
        (folder / INFO).write_text(json.dumps(convert(folder), sort_keys=True))

    scratch = dest / f".{kind}-uncached"
    folder, reused = private_cache.reuse_or_make(CACHE_NAME, key, make, lambda m: log(f"note: {m}"),
                                                 label="conversion cache", action="converting", scratch=scratch)
    record = json.loads((folder / INFO).read_text())
    for path in sorted(folder.iterdir()):
        if path.name not in (INFO, private_cache.MANIFEST):
            (shutil.copytree if path.is_dir() else shutil.copy2)(path, dest / path.name)
    if folder == scratch:
        shutil.rmtree(scratch)
    else:
        os.utime(folder)  # last use, for `_forget_old`
        _forget_old(folder.parent, kind, keep)
    if reused:
        log(f"{kind}: reused the files of an identical earlier conversion ({folder})")
    return record


def _forget_old(cache: Path, kind: str, keep: int) -> None:
    """Remove all but the `keep` most recently used entries of `kind` (never a link's target)."""
    entries = [p for p in cache.iterdir() if p.name.rsplit("-", 1)[0] == kind and not p.is_symlink()]
    entries.sort(key=lambda p: p.lstat().st_mtime, reverse=True)
    for old in entries[keep:]:
        private_cache.discard(old)


@functools.cache
def minilm_inputs() -> dict[str, str]:
    """What every all-MiniLM-L6-v2 conversion reads (`inputs`): the snapshot's bytes, hashed once per
    process (88 MB, 0.3 s; a mobile build converts MiniLM up to four times and embeds its sentences)."""
    from arrcoc_edge.relevance.text_encoder import model_dir

    return {"minilm": folder_digest(model_dir())}


def folder_digest(folder: Path) -> str:
    """sha256 over every file under `folder` (path and bytes), for `inputs`."""
    from arrcoc_edge.relevance.digest import sha256_file

    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f"\0{path.relative_to(folder).as_posix()}\0{sha256_file(path)}".encode())
    return h.hexdigest()
