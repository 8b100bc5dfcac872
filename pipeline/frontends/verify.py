"""`invoke verify`: every published file against the manifest's bytes and sha256, and every entry the
tool did not publish named, by type, never opened.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from arrcoc_edge.install import COMMAND


def _verify(root: Path) -> int:
    """Reads one generation: the one OUT links to when verify starts. A publish switching OUT
    meanwhile removes that generation; then verify starts over on the new one (up to 5 times).
    Fails (exit 3) on a listed file that differs and on anything in a published folder the
    manifest does not list; a plain file at the top level that the tool did not write is named
    as EXTRA and does not fail (it is in no target folder, so nothing copies it with one)."""
    from arrcoc_edge.errors import InputError
    from arrcoc_edge.publishing import folder_state, reading

    for _ in range(5):
        before = folder_state.generation_id(root)
        base = folder_state.pinned(root)
        manifest = reading.read_manifest(base)
        if not manifest:
            raise InputError(f"no manifest in {root}", f"run `{COMMAND} build` first")
        if not manifest.get("targets"):  # an emptied or replaced manifest vouches for nothing
            raise InputError(f"the manifest in {root} lists no targets (it was emptied or replaced)",
                             f"rebuild with `{COMMAND} build --out {root}` (or restore its manifest.json)")
        lines, bad, extra = check_published(base, manifest)
        if not bad:  # every file is the manifest's: now each model against what the manifest says of it
            found = model_claims(base, manifest, root)
            lines, bad = lines + found, len(found)
        if not bad or folder_state.generation_id(root) == before:
            break
    print("\n".join(lines))
    files = sum(len(e.get("files", [])) for e in manifest["targets"].values())
    if bad:
        print(f"verify: {bad} problem{'s' if bad != 1 else ''} in {root}")
        print(f"error: {bad} finding(s) differ from the manifest -> fix: rebuild with `{COMMAND} build` "
              f"(remove links, folders and files you added to {root})", file=sys.stderr)
        return 3
    also = (f"; {extra} file{'s' if extra != 1 else ''} there not published by arrcoc-edge (EXTRA above, "
            "not checked)") if extra else ""
    print(f"verify: OK, {files} file{'s' if files != 1 else ''} of {len(manifest['targets'])} target(s) "
          f"match the manifest in {root}{also}")
    return 0


def check_published(base: Path, manifest: dict) -> tuple[list[str], int, int]:
    """(lines to print, number of findings that fail, number of EXTRA files) for the publish in
    folder `base`: each listed file checked, then every entry the tool did not publish named."""
    from arrcoc_edge.publishing import reading

    lines, bad = [], 0
    for name, entry in manifest.get("targets", {}).items():
        listed = {f["path"] for f in entry.get("files", [])}
        for f in entry.get("files", []):
            why = reading.check_file(base, f)
            if why:
                lines.append(f"MISMATCH {f['path']} ({why})")
                bad += 1
        if listed or os.path.lexists(base / name):
            for kind, rel in unlisted(base, name, listed):
                lines.append(f"{kind} {rel}")
                bad += 1
        lines.append(f"{name:12s} {entry.get('status')}: {len(listed)} files checked")
    found = beside_targets(base, manifest)
    lines += [f"{kind} {rel}" for kind, rel in found]
    extra = sum(kind == "EXTRA" for kind, _ in found)
    return lines, bad + len(found) - extra, extra


def model_claims(base: Path, manifest: dict, shown: Path) -> list[str]:
    """A MISMATCH line for each published model this process can run whose own I/O contradicts
    the manifest's checkpoint.model (grid, top_k, query_dim), or that does not load as a model:
    the sha256 vouches for the bytes, not for what the manifest says they are."""
    from arrcoc_edge import targets as target_table
    from arrcoc_edge.errors import ArrcocError
    from arrcoc_edge.frontends import predict as pr

    if not manifest.get("checkpoint", {}).get("model"):
        return []
    lines = []
    for name, (target, variant) in sorted(pr.runnable(manifest, target_table.TARGETS).items()):
        if ":" not in name:
            continue  # a target's own name is one of its variants again
        try:
            with pr.third_party_quiet(False):
                runner = pr.checked_runner(base, manifest, target_table.TARGETS[target], variant, shown)
                try:
                    why = golden_rerun(base, manifest["targets"][target], variant, runner)
                finally:
                    runner.close()
        except ArrcocError as exc:
            lines.append(f"MISMATCH {exc.problem}")
            continue
        if why:
            rel = manifest["targets"][target]["variants"][variant]["files"][0]
            lines.append(f"MISMATCH {rel} in {shown} does not reproduce its golden bundle ({why}): not the model "
                         "that was built and gated (swapped, with its manifest entry re-sealed?)")
    return lines


def golden_rerun(base: Path, entry: dict, variant: str, runner) -> str | None:
    """The target's golden bundle (golden.json + golden.bin, listed and checked with its files: the
    eager reference's outputs on a few photos) run again through `runner`, judged by the variant's
    own gate: the failures in a few words, or None (passed, or no bundle or gate to judge by). A
    model of the same inputs and outputs put in place of the built one, its manifest re-sealed,
    has the right shape and the wrong numbers: only this catches it."""
    import numpy as np

    from arrcoc_edge.stages.parity import Gate, parity_metrics

    listed = [f["path"] for f in entry.get("files", [])]
    bundle = next((p for p in listed if p.endswith("/golden.json") and p[:-4] + "bin" in listed), None)
    gate = entry.get("variants", {}).get(variant, {}).get("parity", {}).get("gate")
    if bundle is None or not isinstance(gate, dict):
        return None
    samples = read_golden(base / bundle, base / (bundle[:-4] + "bin"))
    if not samples:
        return None
    from arrcoc_edge.relevance.signature import OUTPUT_NAMES

    # every output the gate judges; a bundle written before `evidence` existed has none to re-run by
    if not all("evidence" in sample for sample in samples):
        return None
    expected, got = {k: [] for k in OUTPUT_NAMES}, {k: [] for k in OUTPUT_NAMES}
    for sample in samples:
        outputs = runner.run({"image": sample["image"], "query": sample["query"]})
        for key in expected:
            expected[key].append(sample[key])
            got[key].append(np.asarray(outputs[key]))
    metrics = parity_metrics({k: np.concatenate(v) for k, v in expected.items()},
                             {k: np.concatenate(v) for k, v in got.items()}, float(gate.get("tie_tolerance", 1e-3)))
    failures = Gate(gate.get("max", {}), gate.get("min", {}), float(gate.get("tie_tolerance", 1e-3))).parity_failures(metrics)
    return "; ".join(failures[:2]) or None


def read_golden(meta_path: Path, bin_path: Path) -> list[dict]:
    """golden.json's samples as arrays read from golden.bin (stages/golden.py write_bundle's format);
    empty when a sample lacks an array the re-run needs."""
    import json

    import numpy as np

    meta, data = json.loads(meta_path.read_text()), bin_path.read_bytes()
    samples = []
    for sample in meta.get("samples", []):
        arrays = {}
        for name, a in sample.get("arrays", {}).items():
            dtype = np.dtype(a["dtype"]).newbyteorder("<")
            arrays[name] = np.frombuffer(data, dtype=dtype, count=a["bytes"] // dtype.itemsize,
                                         offset=a["offset"]).reshape(a["shape"]).astype(a["dtype"])
        if not {"image", "query", "relevance", "topk_indices", "weights"} <= set(arrays):
            return []
        samples.append(arrays)
    return samples


def beside_targets(base: Path, manifest: dict) -> list[tuple[str, str]]:
    """What the top level of a publish (and its .cache) holds besides the target folders and the
    files the tool writes there, never following a link: ("UNLISTED", "name/ (...)") for a folder
    the manifest does not list, ("LINK", ...) and ("UNLISTED", "name (a FIFO ...)") for a link or
    a special file, which fail; ("EXTRA", name) for a plain file, which does not."""
    from arrcoc_edge.publishing import folder_state, publish

    found = []
    for name in _names(base):
        if name in manifest.get("targets", {}):
            continue
        kind = _entry_kind(base / name)
        if name == folder_state.CACHE and kind == "folder":
            found += _in_cache(base, name, set(publish._cache_files(manifest)))
        elif kind == "file":
            if name not in folder_state.WRITTEN_BESIDE:
                found.append(("EXTRA", name))
        elif kind == "folder":
            count = len(_plain_files(base, name))
            found.append(("UNLISTED", f"{name}/ (a folder the manifest does not list: {count} "
                                      f"file{'s' if count != 1 else ''} in it not checked)"))
        else:
            found.append(_odd_entry(base, name, kind))
    return found


def _in_cache(base: Path, rel: str, known: set[str]) -> list[tuple[str, str]]:
    """The publish's .cache holds hard links to this publish's cache entries (`known`): any other
    plain file there is EXTRA, a link or special file fails."""
    found = []
    for child in _names(base / rel):
        path = f"{rel}/{child}"
        kind = _entry_kind(base / path)
        if kind == "folder":
            found += _in_cache(base, path, known)
        elif kind == "file":
            found += [] if path in known else [("EXTRA", path)]
        elif kind != "missing":
            found.append(_odd_entry(base, path, kind))
    return found


def unlisted(base: Path, name: str, listed: set[str]) -> list[tuple[str, str]]:
    """Every entry under base/name that the manifest does not account for, never following a
    link or opening anything: ("LINK", path -> target) for any link, ("UNLISTED", path) for a
    file not listed, something that is not a regular file (its type named), or a folder holding
    no listed file."""
    found = []

    def walk(rel: str) -> bool:  # True when the folder holds a listed file
        kind = _entry_kind(base / rel)
        if kind == "folder":
            holds = False
            for child in _names(base / rel):
                holds = walk(f"{rel}/{child}") or holds
            if not holds and rel != name:
                found.append(("UNLISTED", rel + "/"))
            return holds
        if rel in listed:  # a listed path that is not a regular file: check_file's MISMATCH says so
            return kind == "file"
        if kind == "file":
            found.append(("UNLISTED", rel))
        elif kind != "missing":
            found.append(_odd_entry(base, rel, kind))
        return False

    walk(name)
    return found


def _entry_kind(path: Path) -> str:
    """'file', 'folder', 'link', 'FIFO', 'socket', 'device' or 'missing', from lstat alone."""
    import stat

    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "missing"
    return ("file" if stat.S_ISREG(mode) else "folder" if stat.S_ISDIR(mode) else "link" if stat.S_ISLNK(mode)
            else "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device")


def _odd_entry(base: Path, rel: str, kind: str) -> tuple[str, str]:
    """A link (its target shown, cut short) or a special file, which verify never opens."""
    if kind == "link":
        try:
            target = os.readlink(base / rel)
        except OSError:
            target = "?"
        return "LINK", f"{rel} -> {target if len(target) <= 200 else target[:200] + '...'}"
    return "UNLISTED", f"{rel} (a {kind}, not opened)"


def _names(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _plain_files(base: Path, rel: str) -> list[str]:
    """The regular files below base/rel (relative to base), links not followed."""
    found = []
    for folder, dirs, files in os.walk(base / rel):
        found += [os.path.relpath(os.path.join(folder, f), base) for f in files
                  if _entry_kind(Path(folder, f)) == "file"]
    return found
