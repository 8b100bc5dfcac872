"""Join published folders built from one checkpoint on different hosts into one publish.

Some runtimes exist only on some hosts (CoreML on macOS, TensorRT on a supported GPU), so one
build can be split over several hosts (CI runners), each building and verifying what it can.
`invoke merge --parts A,B --out DIR` joins their published folders:

- every part must come from the same checkpoint (sha256) and model settings (G, K, D, input
  size): anything else is refused before a byte is written;
- a target present in several parts: `published` beats `unverified`; two published entries with
  different files are a conflict (refused). Between unverified entries with different files, the
  one built from the upstream entries the merge keeps wins, so the hash chain holds;
- each target keeps its files, parity and gate, and records the host that built and verified it
  and every part's `.pt2` sha256 (equal when the export was reproducible);
- only the files a part's manifest lists are copied: each a regular file inside the part reached
  without following a link (no FIFO, no link out of the part), its size checked before a byte is
  copied and its sha256 while copying; every path a part's manifest names stays inside the part,
  and --out may not be, hold or lie inside a part;
- the result goes through publish.publish under build_lock, like a build: one rename switches
  it in, and an interrupted merge leaves the output folder as it was.
"""
from __future__ import annotations

import hashlib
import os
import platform
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from arrcoc_edge.errors import BuildInterrupted, InputError, MergeError
from arrcoc_edge.publishing import folder_state, locking, publish, reading, takeover
from arrcoc_edge.publishing import manifest as manifest_mod
from arrcoc_edge.relevance.digest import sha256_file

KEPT = {"published": 2, "unverified": 1}  # statuses a merge carries over, best first

# What merge reads from a part, or from a path a part records, has a limit checked on its size
# (st_size of the opened file) before a byte of it is read, hashed or copied: a part is another
# host's upload, and a sparse file of terabytes costs nothing to make but hours to hash.
# The saved held-out outputs of one variant: about 100 KB at the shipped G=14; room for G=64.
MAX_SAVED_OUTPUTS_BYTES = 256 * 1024 * 1024
# The exported program (.pt2): the shipped model's is under 1 MB (the query encoders' token tables
# are targets of their own, not in it); room for large grids and widths.
MAX_PROGRAM_BYTES = 2 * 1024 * 1024 * 1024
# A checkpoint found at a recorded path, hashed to match the parts' sha256: a reference .pt with
# its frozen Qwen3-VL-2B base in float32 is about 9 GB (the loader ignores those keys).
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024 * 1024
MAX_PATH_CHARS = 4096  # a recorded path: Linux's PATH_MAX


class PartTooLarge(MergeError):
    """A file a part names is over its kind's limit: refused before it is read (never a note)."""


@dataclass
class Part:
    path: Path  # the folder read: the generation the part's link named when the merge began
    manifest: dict
    given: Path | None = None  # the folder as the user named it (resolved), for messages and records

    @property
    def label(self) -> str:
        return str(self.given or self.path)

    @property
    def host(self) -> dict:
        """OS, machine, Python and runtime versions of the host that wrote this part."""
        m = self.manifest
        info = dict(m.get("host_info") or {})
        if not info:  # a manifest written before host_info: "System machine"
            os_name, _, machine = str(m.get("host", "")).partition(" ")
            info = {"os": os_name or "unknown", "machine": machine or "unknown"}
        tools = dict(m.get("toolchain") or {})
        info.setdefault("python", tools.get("python", "unknown"))
        info["runtimes"] = {k: v for k, v in tools.items() if k != "python"}
        return info

    @property
    def program_sha(self) -> str | None:
        return (self.manifest.get("exported_program") or {}).get("sha256")


def read_parts(paths: list[Path]) -> list[Part]:
    parts = []
    for path in paths:
        base = folder_state.pinned(path)  # one generation, however often the part is republished meanwhile
        data = reading.read_manifest(base)
        if not data.get("targets"):
            raise InputError(f"{path} holds no published manifest",
                             "pass folders written by `invoke build` (their manifest.json lists targets)")
        check_part(data, path)
        parts.append(Part(base, data, path))
    return parts


def check_part(data: dict, path: Path) -> None:
    """Refuse a part whose manifest merge would trip over or follow out of the part: every field
    merge reads has its type, and every path it names stays inside the part."""
    def bad(why: str):
        raise MergeError(f"{path}'s manifest is not one `invoke build` writes ({why})",
                         f"rebuild that part (`invoke build --out {path}`), or leave it out of --parts")

    def typed(value, kind, where):
        if not isinstance(value, kind):
            bad(f"{where} is a JSON {type(value).__name__}")
        return value

    ckpt = typed(data.get("checkpoint"), dict, "checkpoint")
    typed(ckpt.get("sha256"), str, "checkpoint.sha256")
    if len(str(ckpt.get("path", ""))) > MAX_PATH_CHARS:
        bad(f"checkpoint.path is {len(str(ckpt['path']))} characters, more than a path has ({MAX_PATH_CHARS})")
    typed(ckpt.get("model", {}), dict, "checkpoint.model")
    for key in ("toolchain", "host_info", "golden"):
        typed(data.get(key, {}), dict, key)
    program = typed(data.get("exported_program", {}), dict, "exported_program")
    if "path" in program:
        reading.safe_relative(typed(program["path"], str, "exported_program.path"), "exported_program.path", MergeError)
        typed(program.get("sha256"), str, "exported_program.sha256")
    for name, entry in data["targets"].items():
        typed(entry.get("status"), str, f"targets.{name}.status")
        prov = typed(entry.get("provenance", {}), dict, f"targets.{name}.provenance")
        typed(prov.get("upstream", {}), dict, f"targets.{name}.provenance.upstream")
        for variant in typed(entry.get("variants", {}), dict, f"targets.{name}.variants"):
            if not folder_state.NAME.fullmatch(variant):
                bad(f"variant {variant[:40]!r} of {name} is not a plain name")
        for f in entry.get("files", []):
            reading.safe_relative(f["path"], f"targets.{name}.files", MergeError)


def check_out_apart(out: Path, parts: list[Path]) -> None:
    """--out may not be a part, lie inside one, or hold one: merging would write into what it reads."""
    mine = {Path(os.path.realpath(p)) for p in (out, folder_state.state_dir(out)) if os.path.lexists(p)}
    mine |= {out, folder_state.state_dir(out)}
    for part in parts:
        theirs = {part, Path(os.path.realpath(part))}
        for a in mine:
            for b in theirs:
                if a == b or a.is_relative_to(b) or b.is_relative_to(a):
                    raise MergeError(f"--out {out} and part {part} overlap (one is, or holds, the other)",
                                     "pass a new folder with --out, outside every part")


def check_same_build(parts: list[Part]) -> None:
    """Refuse parts of another checkpoint or other settings: their artifacts are other models."""
    first = parts[0]
    for part in parts[1:]:
        a, b = first.manifest.get("checkpoint", {}), part.manifest.get("checkpoint", {})
        if a.get("sha256") != b.get("sha256"):
            raise MergeError(
                f"{part.label} was built from checkpoint {str(b.get('sha256'))[:12]}, "
                f"{first.label} from {str(a.get('sha256'))[:12]}",
                "merge only parts built from the same checkpoint file")
        if a.get("model") != b.get("model"):
            raise MergeError(
                f"{part.label} was built with model settings {_settings(b)}, {first.label} with {_settings(a)}",
                "build every part with the same --grid and --top-k")


def _settings(ckpt: dict) -> str:
    m = ckpt.get("model") or {}
    return f"G={m.get('grid')} K={m.get('top_k')} D={m.get('query_dim')} {m.get('input_size')}px"


def _files(entry: dict) -> list[tuple[str, str]]:
    return sorted((f["path"], f["sha256"]) for f in entry.get("files", []))


def _dependency_order(candidates: dict[str, list]) -> list[str]:
    """Target names with the targets they were built from first (from provenance.upstream)."""
    order: list[str] = []

    def visit(name: str, trail: tuple = ()) -> None:
        if name in order or name in trail or name not in candidates:
            return
        for _, entry in candidates[name]:
            for dep in (entry.get("provenance") or {}).get("upstream", {}):
                visit(dep, trail + (name,))
        order.append(name)

    for name in sorted(candidates):
        visit(name)
    return order


def _chain_holds(entry: dict, chosen: dict) -> bool:
    """Every upstream hash this entry was built from is a file of the entry the merge keeps."""
    for dep, sha in ((entry.get("provenance") or {}).get("upstream") or {}).items():
        if dep in chosen and sha not in {s for _, s in _files(chosen[dep][1])}:
            return False
    return True


def choose(parts: list[Part]) -> dict[str, tuple[Part, dict]]:
    """The entry each target keeps, as (part, entry). Raises MergeError on a conflict."""
    sha = parts[0].manifest["checkpoint"].get("sha256")
    candidates: dict[str, list] = {}
    for part in parts:
        for name, entry in part.manifest.get("targets", {}).items():
            if entry.get("status") in KEPT and (entry.get("provenance") or {}).get("checkpoint_sha256") == sha:
                candidates.setdefault(name, []).append((part, entry))
    chosen: dict[str, tuple[Part, dict]] = {}
    for name in _dependency_order(candidates):
        best = max(KEPT[e["status"]] for _, e in candidates[name])
        top = [(p, e) for p, e in candidates[name] if KEPT[e["status"]] == best]
        if best == KEPT["published"]:
            differ = [p for p, e in top if _files(e) != _files(top[0][1])]
            if differ:
                raise MergeError(
                    f"target {name} is published in {top[0][0].label} and {differ[0].label} with different files",
                    f"keep {name} in one part only (build it on one host), or rebuild both parts from one export")
        consistent = [(p, e) for p, e in top if _chain_holds(e, chosen)]
        if not consistent:
            p, e = top[0]
            raise MergeError(
                f"target {name} in {p.label} was built from upstream files that the merge does not keep "
                f"({', '.join((e.get('provenance') or {}).get('upstream', {}))})",
                f"build {name} in the same part as what it is built from")
        chosen[name] = consistent[0]
    return chosen


def merged_entry(name: str, part: Part, entry: dict, parts: list[Part]) -> dict:
    others = []
    for other in parts:
        e = other.manifest.get("targets", {}).get(name)
        if other is part or not e:
            continue
        others.append({"part": other.label, "status": e.get("status"), "same_files": _files(e) == _files(entry),
                       "host": other.host})
    return {**entry, "merge": {
        "from_part": part.label,
        "built_and_verified_on": part.host,
        "exported_program_sha256_by_part": {p.label: p.program_sha for p in parts},
        "other_parts": others,
    }}


def merged_manifest(parts: list[Part], chosen: dict) -> dict:
    first = parts[0].manifest
    shas = {p.program_sha for p in parts}
    reproducible = len(shas) == 1
    return {
        **{k: first[k] for k in ("schema", "checkpoint", "exported_program", "golden", "calibration", "toolchain")
           if k in first},
        "host": f"merged from {len(parts)} parts",
        "host_info": manifest_mod.host_info(),
        "merge": {
            "merged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "merged_on": f"{platform.system()} {platform.machine()}",
            "exported_program_reproducible": reproducible,
            "exported_program_note": ("every part exported the same .pt2 (equal sha256)" if reproducible else
                                      "the parts' .pt2 files differ (the saved torch.export archive is not "
                                      "byte-reproducible, even between two exports on one host); each target "
                                      "records the .pt2 it was built from under provenance"),
            "parts": [{"path": p.label, "host": p.host, "exported_program_sha256": p.program_sha,
                       "targets": sorted(n for n, (q, _) in chosen.items() if q is p)} for p in parts],
        },
        "targets": {name: merged_entry(name, p, e, parts) for name, (p, e) in sorted(chosen.items())},
    }


def copy_checked(base: Path, rel: str, dest: Path, size: int | None, sha256: str, label: str,
                 limit: int | None = None) -> None:
    """Copy base/rel to dest: a regular file reached without following a link (never a FIFO, a
    device or a link out of the part), its size checked (against the manifest's, and `limit`)
    before a byte is copied, its sha256 while copying; a file that differs is removed again and
    refused."""
    try:
        fd, actual = reading.open_regular(base, rel)
    except OSError as exc:
        why = folder_state.why_not_regular(exc)
        raise MergeError(f"{base / rel} is listed in {label}'s manifest but is {why}",
                         f"run `invoke verify --out {label}` and rebuild that part") from exc
    with os.fdopen(fd, "rb") as src:
        if limit is not None and actual > limit:
            raise _too_large(base / rel, actual, limit, label)
        if size is not None and actual != size:
            raise MergeError(f"{base / rel} has {actual} bytes, {label}'s manifest says {size}",
                             f"run `invoke verify --out {label}` and rebuild that part")
        dest.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(dest, "wb") as f:
            for block in iter(lambda: src.read(1 << 20), b""):
                digest.update(block)
                f.write(block)
        os.utime(dest, ns=(os.fstat(src.fileno()).st_atime_ns, os.fstat(src.fileno()).st_mtime_ns))
    if digest.hexdigest() != sha256:
        dest.unlink()
        raise MergeError(f"{base / rel} differs from {label}'s manifest (bytes or sha256)",
                         f"run `invoke verify --out {label}` and rebuild that part")


def _too_large(path: Path, actual: int, limit: int, label: str) -> PartTooLarge:
    return PartTooLarge(f"{path} is {actual} bytes, more than the {limit} merge reads for that kind of file",
                        f"rebuild that part (`invoke build --out {label}`), or leave it out of --parts")


def stage(chosen: dict, run_dir: Path) -> dict[str, Path]:
    """Copy exactly the files each kept entry lists, checking each against its size and sha256."""
    staged = {}
    for name, (part, entry) in chosen.items():
        folder = run_dir / name
        folder.mkdir()
        for f in entry.get("files", []):
            copy_checked(part.path, f["path"], run_dir / f["path"], f["bytes"], f["sha256"], part.label)
        staged[name] = folder
    return staged


def copy_caches(parts: list[Part], chosen: dict, out: Path, log=print) -> list[str]:
    """The first part's .pt2 and each kept variant's saved held-out outputs (for the report's
    maps), into OUT's cache like a build keeps them. Returns the variants whose outputs are missing
    (a part uploaded without its .cache): the report says so."""
    from arrcoc_edge.publishing.report import outputs_dir

    program = parts[0].manifest.get("exported_program") or {}
    rel = program.get("path")
    dest = folder_state.cache_root(out).parent / rel if rel else None
    if rel and rel.startswith(folder_state.CACHE + "/") and not dest.exists():
        try:
            copy_checked(parts[0].path, rel, dest, None, program.get("sha256"), parts[0].label, MAX_PROGRAM_BYTES)
        except PartTooLarge:
            raise
        except MergeError as exc:
            log(f"note: the exported program was not copied ({exc.problem})")
    missing = []
    for name, (part, entry) in chosen.items():
        for variant in entry.get("variants", {}):
            src = outputs_dir(part.path) / f"{name}.{variant}.npz"
            try:
                fd, _ = reading.open_regular(part.path, src.relative_to(part.path).as_posix())
            except OSError:
                missing.append(f"{name} {variant} ({part.label})")
                continue
            with os.fdopen(fd, "rb") as f:
                if os.fstat(f.fileno()).st_size > MAX_SAVED_OUTPUTS_BYTES:
                    raise _too_large(src, os.fstat(f.fileno()).st_size, MAX_SAVED_OUTPUTS_BYTES, part.label)
                data = f.read(MAX_SAVED_OUTPUTS_BYTES + 1)
            outputs_dir(out).mkdir(parents=True, exist_ok=True)
            (outputs_dir(out) / src.name).write_bytes(data)
    if missing:
        log(f"note: no saved outputs for {', '.join(missing)}: the report shows no maps for them")
    return missing


def heldout_for(manifest: dict, checkpoints: list[Path], explicit: bool, log=print):
    """The held-out split for the report's pictures, from the checkpoint the parts were built
    from. Without that file at hand the report has no pictures and says why (None); a
    --checkpoint of another model is refused, before anything is written."""
    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.stages.golden import build_golden_set

    ckpt = manifest["checkpoint"]
    path = next((p for p in checkpoints if _is_checkpoint(p, ckpt)), None)
    if path is None and explicit:
        raise MergeError(f"--checkpoint {checkpoints[0]} is not the checkpoint the parts were built from "
                         f"(sha256 {str(ckpt.get('sha256'))[:12]})", "pass that checkpoint, or leave --checkpoint out")
    if path is None:
        log(f"note: checkpoint {str(ckpt.get('sha256'))[:12]} not found: the report has no relevance maps "
            "(pass --checkpoint to draw them)")
        return None
    model = ckpt.get("model") or {}
    loaded = load_checkpoint(path, grid=model.get("grid"), top_k=model.get("top_k"))
    return build_golden_set(loaded.model, loaded.config).heldout


def _is_checkpoint(path: Path, ckpt: dict) -> bool:
    """`path` is the parts' checkpoint: a regular file of the size the manifest declares (when it
    does), at most MAX_CHECKPOINT_BYTES, with its sha256; the size is checked before hashing."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # missing, a name too long, a NUL
        return False
    if not stat.S_ISREG(info.st_mode):
        return False
    declared = ckpt.get("bytes")
    if isinstance(declared, int) and info.st_size != declared:
        return False
    if info.st_size > MAX_CHECKPOINT_BYTES:
        raise PartTooLarge(f"checkpoint {path} is {info.st_size} bytes, more than the {MAX_CHECKPOINT_BYTES} "
                           "merge hashes to find the parts' checkpoint",
                           "pass the parts' checkpoint with --checkpoint (or move that file aside)")
    return sha256_file(path) == ckpt.get("sha256")


def run_merge(part_paths: list[Path], out: Path, checkpoint: Path | None = None, default_checkpoint: Path | None = None,
              log=print) -> dict:
    """Check every part, then publish the merged folder in one switch. Returns the manifest.
    The checkpoint only draws the report's pictures: --checkpoint, else the path the parts
    recorded, else `default_checkpoint`, whichever has the parts' sha256."""
    from arrcoc_edge.publishing.outputs_guard import check_out_folder

    check_out_apart(out, part_paths)
    # by identity too, and before anything is written: a refused --out leaves no state behind
    check_out_folder(out, [*part_paths, *([checkpoint] if checkpoint else [])])
    parts = read_parts(part_paths)
    try:
        check_same_build(parts)
        chosen = choose(parts)
        data = merged_manifest(parts, chosen)
    except (TypeError, AttributeError, KeyError, ValueError) as exc:  # a field check_part does not know
        raise MergeError(f"a part's manifest has a field of the wrong type or shape ({type(exc).__name__}: {exc})",
                         "rebuild the parts with `invoke build`; merge only folders it wrote") from exc
    candidates = [checkpoint] if checkpoint else [Path(str(data["checkpoint"].get("path"))), default_checkpoint]
    heldout = heldout_for(data, [p for p in candidates if p], checkpoint is not None, log)
    takeover.prepare_out_dir(out)
    previous = signal.signal(signal.SIGTERM, locking.record_interrupt)  # recorded: a swallowed one still counts
    try:
        with locking.build_lock(out, log):
            publish.recover(out, reading.read_manifest(out), log)
            run_dir = locking.new_staging(out)
            try:
                staged = stage(chosen, run_dir)
                missing = copy_caches(parts, chosen, out, log)
                if missing:
                    data["merge"]["missing_outputs"] = missing
                locking.check_interrupted()  # one a library swallowed: never publish after a Ctrl-C
                publish.publish(out, staged, data, log=log, write_extras=lambda gen: (
                    copy_calibration(parts[0], data, gen), _write_report(out, gen, heldout, log)))
            finally:
                locking.remove_tree(run_dir)
    except KeyboardInterrupt as exc:
        raise BuildInterrupted(f"merge interrupted ({exc or 'SIGINT'}); nothing was published",
                               "the previously published folder is intact: run the merge again") from exc
    finally:
        signal.signal(signal.SIGTERM, previous)
    return data


def copy_calibration(part: Part, data: dict, gen: Path) -> None:
    """The first part's calibration.json (the parts share one checkpoint and its settings, so one
    calibration), checked against that part's manifest as it is copied."""
    entry = data.get("calibration")
    if isinstance(entry, dict) and entry.get("file") == folder_state.CALIBRATION:
        copy_checked(part.path, folder_state.CALIBRATION, gen / folder_state.CALIBRATION, entry.get("bytes"),
                     str(entry.get("sha256")), part.label, limit=1 << 20)


def _write_report(out: Path, gen: Path, heldout, log) -> None:
    from arrcoc_edge.publishing import report

    with report.never_fails(log):
        report.write_report(out, heldout, log, dest=gen)
