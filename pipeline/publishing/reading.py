"""Reading a publish safely: paths checked before they are joined, files opened only when they are
regular, sizes and sha256 compared with the manifest before anything runs.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path

from arrcoc_edge.errors import InputError, OutputDirError
from arrcoc_edge.publishing.folder_state import MANIFEST, MAX_MANIFEST_BYTES, pinned, why_not_regular


def safe_relative(rel, what: str, error=OutputDirError) -> str:
    """A manifest's path: a relative, normalised path of plain components (no '..', no '.',
    nothing absolute, no NUL; 1024 characters at most, 255 bytes a component), or `error`."""
    parts = rel.split("/") if isinstance(rel, str) and len(rel) <= 1024 else []
    if not parts or any(p in ("", ".", "..") or "\0" in p or len(p.encode()) > 255 for p in parts) \
            or rel.startswith("/"):
        raise error(f"{what} names {str(rel)[:80]!r}, not a path inside its folder",
                    "rebuild that folder with `invoke build` (its manifest was edited or damaged)")
    return rel


def open_regular(base: Path, rel: str):
    """Open base/rel for reading without following any link below base and without blocking on a
    FIFO. Returns (fd, size) for a regular file; raises OSError otherwise (errno ELOOP for a link,
    EINVAL for something that is not a regular file)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        *dirs, name = rel.split("/")
        for part in dirs:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    info = os.fstat(handle)
    if not stat.S_ISREG(info.st_mode):
        os.close(handle)
        raise OSError(errno.EINVAL, "not a regular file", str(base / rel))
    return handle, info.st_size


def check_file(base: Path, entry: dict) -> str | None:
    """None when base/entry['path'] is a regular file (no link on the way) with the manifest's
    bytes and sha256, else why not. The size is compared before a byte is read."""
    try:
        fd, size = open_regular(base, entry["path"])
    except OSError as exc:
        return why_not_regular(exc)
    with os.fdopen(fd, "rb") as f:
        if size != entry["bytes"]:
            return f"{size} bytes, the manifest says {entry['bytes']}"
        digest = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return None if digest.hexdigest() == entry["sha256"] else "sha256 differs"


def check_published(out: Path, base: Path, manifest: dict, targets: dict) -> None:
    """Before a task loads published artifacts (bench): each one's runtime is installed and each
    listed file is there with its size and sha256, else one line naming the fix (exit 2)."""
    from arrcoc_edge.errors import InputError

    for name, entry in manifest.get("targets", {}).items():
        if entry.get("status") != "published" or name not in targets:
            continue
        targets[name].require()  # a missing runtime: MissingExtraError with the install command
        for f in entry.get("files", []):
            why = check_file(base, f)
            if why:
                raise InputError(f"published file {f['path']} in {out} is {why}",
                                 f"run `invoke verify --out {out}`, then rebuild it: "
                                 f"invoke build --target {name} --out {out}")


def read_manifest(out: Path) -> dict:
    """The manifest published in `out` ({} when there is none), read from one pinned generation."""
    from arrcoc_edge.publishing.manifest import check_shape

    base = pinned(out) if out.is_dir() else out
    path = base / MANIFEST
    try:
        if not os.path.lexists(path) and not path.exists():
            return {}
        real = Path(os.path.realpath(path))
        if not real.is_relative_to(os.path.realpath(out)) and not real.is_relative_to(os.path.realpath(base)):
            raise OSError(errno.ELOOP, "a link out of the folder")
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            if info.st_size > MAX_MANIFEST_BYTES:
                raise OSError(errno.EFBIG, f"{info.st_size} bytes")
            data = json.loads(f.read())
    except (OSError, ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else (getattr(exc, "strerror", None) or exc)
        raise OutputDirError(
            f"{out / MANIFEST} cannot be read as a manifest ({why})",
            "rebuild that folder with `invoke build` (or restore its manifest.json)",
        ) from exc
    check_shape(data, out / MANIFEST)
    return data


def check_variant_files(out: Path, entry: dict, variant: str) -> list[bytes]:
    """The variant's files, each read once into memory and returned as the bytes whose size and
    sha256 match the manifest: the runtime is handed these very bytes, never the path again (a file
    swapped between the check and the load would otherwise run unchecked)."""
    found = []
    if not entry["variants"][variant].get("files"):
        raise InputError(f"published variant {variant} lists no files in the manifest",
                         "rebuild that folder with `invoke build`")
    for rel in entry["variants"][variant]["files"]:
        listed = next((f for f in entry.get("files", []) if f["path"] == rel), None)
        data, why = (None, "not listed") if listed is None else checked_bytes(out, listed)
        if why:
            raise InputError(f"published file {rel} is missing or differs from the manifest ({why})",
                             "run `invoke verify` to see what changed, then rebuild with `invoke build`")
        found.append(data)
    return found


def checked_bytes(base: Path, entry: dict) -> tuple[bytes | None, str | None]:
    """(the file's bytes, None) when base/entry['path'] is a regular file (no link on the way) with
    the manifest's size and sha256, else (None, why not). The size is compared before a byte is read,
    and no more than that size is read."""
    try:
        fd, size = open_regular(base, entry["path"])
    except OSError as exc:
        return None, why_not_regular(exc)
    with os.fdopen(fd, "rb") as f:
        if size != entry["bytes"]:
            return None, f"{size} bytes, the manifest says {entry['bytes']}"
        data = f.read(size + 1)
    if len(data) != size:
        return None, "it changed while it was read"
    return (data, None) if hashlib.sha256(data).hexdigest() == entry["sha256"] else (None, "sha256 differs")


def model_claim_problems(declared: dict[str, list], model: dict) -> list[str]:
    """What the manifest's checkpoint.model (grid, top_k, query_dim) claims that the model file's
    own I/O (`declared`: name -> dims, None for a dynamic one) contradicts, one phrase each: a
    manifest is a claim, the checked model file is the truth."""
    grid, top_k, dim = model["grid"], model["top_k"], model["query_dim"]
    claims = {"query": (dim, f"query_dim {dim}"),
              "relevance": (grid * grid, f"grid {grid} ({grid * grid} relevance values)"),
              "topk_indices": (top_k, f"top_k {top_k}"),
              "weights": (3, "3 weights")}
    problems = []
    for name, (size, claim) in claims.items():
        dims = declared.get(name)
        if not dims:
            problems.append(f"the manifest's {claim}: the model has no '{name}' of that width")
        elif dims[-1] is not None and dims[-1] != size:
            problems.append(f"the manifest says {claim}; the model's '{name}' is "
                            f"[{', '.join('batch' if d is None else str(d) for d in dims)}]")
    return problems
