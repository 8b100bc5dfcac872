"""`invoke bench`'s figures of what a user waits for, each beside the route before it, in one run.

  * cold `arrcoc-edge predict --image photo.jpg --query "..."`: the wall time of the whole command
    (process start to exit), beside the same predict with the sentence through sentence-transformers
    on torch (the route before issue 42, run as a child that does what that predict did);
  * a new sentence on a loaded model: Model.query_vector on distinct sentences (the published encoder,
    onnxruntime + tokenizers), beside sentence-transformers' encode of the same sentences; the first
    sentence of each (its encoder's load) is reported apart;
  * a folder of JPEGs with a sentence: photos per second over the command's whole wall time, beside
    the route before (photos decoded one after another, the sentence through sentence-transformers);
  * the inference-only install's size on disk: the installed files of the package's dependencies
    with no extras, beside the same set with the build extra (torch...), what a plain install took before.

Medians of a few runs, interleaved (new, before, new, before...), so a noisy neighbour slows both.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from arrcoc_edge import scratch
from arrcoc_edge.errors import InputError

QUERY = "something red"
COLD_RUNS = 3
SENTENCES = 20  # distinct sentences per encoder for the per-sentence median
ROOT = Path(__file__).resolve().parents[2]

# The route before issue 42, as its predict ran it: the model loaded, the sentence through
# sentence-transformers (torch), the photo predicted (timed as predict times it), the answer printed.
BEFORE_PREDICT = """
import sys
from arrcoc_edge.frontends import predict as pr
from arrcoc_edge.frontends.api import load
from arrcoc_edge.relevance.text_encoder import embed
out, photo, query = sys.argv[1:4]
with load(out, "onnx") as model:
    result = model._predict_one(photo, embed([query])[0], timed=True)
print(pr.describe(result.record))
"""
# The folder before issue 42: one photo decoded after another, the sentence through sentence-transformers.
BEFORE_FOLDER = """
import sys
from pathlib import Path
from arrcoc_edge.frontends import api, batch, photos
from arrcoc_edge.relevance.text_encoder import embed
out, folder, query, lines = sys.argv[1:5]
photos.DECODE_THREADS = 0
with api.load(out, "onnx") as model:
    sys.exit(batch.run(model, batch.folder_photos(Path(folder)), [("query", query, embed([query])[0])], Path(lines), None))
"""
COMMAND = "from arrcoc_edge.frontends.commands import main; main()"  # `arrcoc-edge` as its console script runs it


def _wall(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise InputError(f"the bench's run of {argv[2][:40]!r}... failed (exit {proc.returncode}): "
                         f"{(proc.stderr.strip().splitlines() or [''])[-1][:200]}", "run it by hand to see why")
    return seconds


def cold_predict(out: Path, photo: Path, runs: int, log) -> dict:
    """Wall seconds of the whole command, new and before, interleaved; medians."""
    new = [sys.executable, "-c", COMMAND, "predict", "--out", str(out), "--image", str(photo), "--query", QUERY,
           "--runtime", "onnx"]
    before = [sys.executable, "-c", BEFORE_PREDICT, str(out), str(photo), QUERY]
    log(f"bench: cold `arrcoc-edge predict --query` x {runs}, beside the sentence-transformers route")
    times = {"new": [], "before": []}
    for _ in range(runs):
        times["new"].append(_wall(new))
        times["before"].append(_wall(before))
    return {k: float(np.median(v)) for k, v in times.items()} | {"runs": runs}


def new_sentence(out: Path, count: int, log) -> dict:
    """ms per new sentence on a loaded model: the published encoder and sentence-transformers, each
    on the same distinct sentences (no cache between them), first sentence apart."""
    from arrcoc_edge.frontends.api import load
    from arrcoc_edge.relevance.text_encoder import embed

    sentences = [f"{QUERY} number {i} near the {w}" for i, w in enumerate(["left", "top", "edge", "middle"] * count)][:count + 1]
    log(f"bench: {count} new sentences on a loaded model, beside sentence-transformers")
    with load(out, "onnx") as model:
        # the published encoder's sentences first, then sentence-transformers': interleaved one by one,
        # torch's worker threads still spin after each embed and take the 2 cores from onnxruntime's
        # next call (11.2 ms a sentence measured that way, 4.2 ms alone), which no user of the
        # torch-free route ever has in their process
        first_new = _ms(lambda: model.query_vector(sentences[0]))
        new = [_ms(lambda: model.query_vector(text)) for text in sentences[1:]]
        first_before = _ms(lambda: embed([sentences[0]]))
        before = [_ms(lambda: embed([text])) for text in sentences[1:]]
    return {"new_ms": float(np.median(new)), "before_ms": float(np.median(before)),
            "first_new_ms": first_new, "first_before_ms": first_before, "sentences": count}


def _ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def folder_rate(out: Path, folder: Path, count: int, tmp: Path, log) -> dict:
    """Photos per second over each command's whole wall time (start-up included), new then before."""
    new = [sys.executable, "-c", COMMAND, "predict", "--out", str(out), "--image", str(folder), "--query", QUERY,
           "--runtime", "onnx", "--json", str(tmp / "new.jsonl")]
    before = [sys.executable, "-c", BEFORE_FOLDER, str(out), str(folder), QUERY, str(tmp / "before.jsonl")]
    log(f"bench: a folder of {count} JPEGs with a sentence, beside the serial sentence-transformers route")
    seconds = {"new": _wall(new), "before": _wall(before)}
    for name in ("new", "before"):
        if len((tmp / f"{name}.jsonl").read_text().splitlines()) != count:
            raise InputError(f"the bench's {name} folder run did not answer {count} photos", "run it by hand to see why")
    return {"new_photos_per_s": count / seconds["new"], "before_photos_per_s": count / seconds["before"],
            "photos": count}


def install_size() -> dict:
    """Bytes on disk of the installed files of the package's dependencies (recursively) with no
    extras, and with the build extra: from this environment's installed distributions."""
    import importlib.metadata as md

    base, build = _requirements()
    return {"inference_bytes": _closure_bytes(base, md), "with_build_bytes": _closure_bytes(base + build, md)}


def _requirements() -> tuple[list[str], list[str]]:
    """(no-extras requirements, the build extra's), from pyproject.toml in a checkout, else the metadata."""
    import re

    pyproject = ROOT / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        project = tomllib.loads(pyproject.read_text())["project"]
        base, build = project["dependencies"], project["optional-dependencies"]["build"]
    else:
        import importlib.metadata as md

        reqs = md.requires("arrcoc-edge") or []
        base = [r for r in reqs if "extra ==" not in r]
        build = [r.split(";")[0] for r in reqs if re.search(r"extra\s*==\s*['\"]build['\"]", r)]
    name = lambda r: re.split(r"[<>=!~;\[ ]", r, 1)[0].strip()
    return [name(r) for r in base], [name(r) for r in build]


def _closure_bytes(names: list[str], md) -> int:
    import re

    seen, todo, total = set(), list(names), 0
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = md.distribution(key)
        except md.PackageNotFoundError:
            continue
        for f in dist.files or []:
            path = Path(dist.locate_file(f))
            total += path.stat().st_size if path.is_file() else 0
        todo += [re.split(r"[<>=!~;\[ (]", r, 1)[0] for r in dist.requires or [] if "extra ==" not in r]
    return total


def run_felt(out: Path, photo_source: np.ndarray, photos: int, log) -> dict:
    """The four figures (photos: the folder's size; 0 skips the folder run)."""

    from PIL import Image

    with scratch.folder("arrcoc-bench-felt-", family="arrcoc-") as tmp:  # swept after a kill -9
        tmp = Path(tmp)
        image = Image.fromarray(photo_source).resize((1024, 768), Image.Resampling.LANCZOS)
        photo = tmp / "photo.jpg"
        image.save(photo, quality=90)
        result = {"cold_predict_s": cold_predict(out, photo, COLD_RUNS, log),
                  "new_sentence": new_sentence(out, SENTENCES, log),
                  "install": install_size()}
        if photos:
            folder = tmp / "photos"
            folder.mkdir()
            for i in range(photos):
                (folder / f"{i:05d}.jpg").write_bytes(photo.read_bytes())
            result["folder"] = folder_rate(out, folder, photos, tmp, log)
    return result


def format_felt(felt: dict) -> str:
    cold, sentence, size = felt["cold_predict_s"], felt["new_sentence"], felt["install"]
    lines = [f"what a user waits for (issue 42)                     now          before (sentence-transformers, serial decode)",
             f"cold `arrcoc-edge predict --query` (wall, median {cold['runs']})   {cold['new']:7.2f} s    {cold['before']:7.2f} s",
             f"a new sentence on a loaded model (median {sentence['sentences']})     {sentence['new_ms']:7.1f} ms   {sentence['before_ms']:7.1f} ms"
             f"   (first sentence: {sentence['first_new_ms']:.0f} ms vs {sentence['first_before_ms']:.0f} ms)"]
    if "folder" in felt:
        f = felt["folder"]
        lines.append(f"folder of {f['photos']} JPEGs 1024x768, start-up included  {f['new_photos_per_s']:7.1f}/s      "
                     f"{f['before_photos_per_s']:7.1f}/s   (photos per second)")
    lines.append(f"install size on disk (dependencies' files)         {size['inference_bytes'] / 2**20:7.0f} MB   "
                 f"{size['with_build_bytes'] / 2**20:7.0f} MB   (no extras vs with the build extra: torch...)")
    return "\n".join(lines)
