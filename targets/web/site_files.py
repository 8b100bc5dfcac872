"""The site the web target publishes: the page's sources, the vendored onnxruntime-web and
tokenizers files, the models, samples, presets and the self-check bundle.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from arrcoc_edge.errors import MissingExtraError
from arrcoc_edge.relevance.signature import OUTPUT_NAMES
from arrcoc_edge.stages.golden import bundle_samples, write_array_bundle
from arrcoc_edge.stages.target import BuildContext
from arrcoc_edge.targets.shared import onnx_common, sources
from arrcoc_edge.targets.web.text_checks import python_qwen_embed, python_token_ids

# web/ in a checkout; in an installed package the wheel's copy (setup.py), where `npm ci` installs node_modules
SOURCES = sources.WEB
PAGE_FILES = ("index.html", "app.js", "style.css")
ORT_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
TOKENIZERS_FILES = ("tokenizers.min.mjs",)
# npm packages whose dist files the page loads: package -> (files, the site folder they go to). The
# version in web/node_modules must be the one web/package.json pins.
VENDORED = {"onnxruntime-web": (ORT_FILES, "ort"), "@huggingface/tokenizers": (TOKENIZERS_FILES, "lib")}
# Sample buttons: whole photos shipped in scikit-image, at their own sizes, as PNG (lossless: the
# page decodes exactly these pixels). "cat" is the golden set's chelsea/whole (451 x 300).
SAMPLES = (("cat", "chelsea"), ("astronaut", "astronaut"), ("coffee", "coffee"))
# What the shipped checkpoint answers on real photos (docs/model.md, scripts/what_it_answers.py):
# position and strong colours land where asked; object names do not (a scorer of 13 low-level
# channels per patch cannot name objects), so no preset promises them. The open ones move the
# balancer's weights to the texture's own measures (issue 31): "the most detailed region" the
# perspectival map (Sobel), "anything unusual" the information map (entropy), "what stands out?" both.
PRESET_QUERIES = ("the top left", "the bottom right", "the object in the top right", "something red",
                  "something blue", "something orange",
                  "what stands out?", "the most detailed region", "anything unusual")


def npm_dist(package: str) -> Path:
    """web/node_modules/<package>/dist, holding every file the page loads from it."""
    dist = SOURCES / "node_modules" / package / "dist"
    if not all((dist / f).is_file() for f in VENDORED[package][0]):
        raise MissingExtraError(f"{package} is not installed in {SOURCES / 'node_modules'}",
                                "run scripts/setup.sh (it runs `npm ci` in web/)" if sources.CHECKOUT
                                else f"run `npm ci --prefix {SOURCES}` (the versions its package-lock.json pins)")
    return dist


def npm_version(package: str) -> str:
    return json.loads((SOURCES / "node_modules" / package / "package.json").read_text())["version"]


def ort_web_version() -> str:
    return npm_version("onnxruntime-web")


def pinned_version(package: str = "onnxruntime-web") -> str:
    return json.loads((SOURCES / "package.json").read_text())["dependencies"][package]


# ---------------------------------------------------------------- build


def upstream_model(ctx: BuildContext, stage_name: str) -> Path | None:
    """The verified .onnx of an upstream stage built in this run (None when it did not publish)."""
    stage = ctx.upstream.get(stage_name)
    if stage is None or not stage.publishable:
        return None
    for report in [stage.primary, *stage.variants]:
        if report and report.variant.files and report.variant.files[0].suffix == ".onnx":
            return report.variant.files[0]
    return None


def text_encoder_page(kind: str) -> dict:
    """What the page needs to run an encoder of this kind (config.json text_encoder, less sizes)."""
    from arrcoc_edge.relevance.text_encoder import MAX_TOKENS
    from arrcoc_edge.targets.text_encoder import target as te

    if kind == te.QWEN_KIND:
        return {"kind": kind, "name": "arr-coc-0-1's query encoder (Qwen3-VL's word embeddings, averaged)",
                "file": f"models/{te.QWEN_FILE}", "inputs": [te.QWEN_INPUT], "output": te.QWEN_OUTPUT,
                "add_special_tokens": False, "max_length": None}
    return {"kind": kind, "name": "all-MiniLM-L6-v2 (an English sentence encoder, INT8)", "file": "models/text_encoder.int8.onnx",
            "inputs": list(te.INPUTS), "output": te.OUTPUT, "add_special_tokens": True, "max_length": MAX_TOKENS}


def copy_text_encoder(site: Path, text: dict) -> list[Path]:
    """The encoder into models/, its tokenizer files into tokenizer/ (where config.json says)."""
    page = text_encoder_page(text["kind"])
    (site / "tokenizer").mkdir()
    return [Path(shutil.copy2(text["model"], site / page["file"])),
            Path(shutil.copy2(text["tokenizer_json"], site / "tokenizer" / "tokenizer.json")),
            Path(shutil.copy2(text["tokenizer_config"], site / "tokenizer" / "tokenizer_config.json"))]


def copy_page(site: Path) -> list[Path]:
    out = [Path(shutil.copy2(SOURCES / name, site / name)) for name in PAGE_FILES]
    for package, (files, folder) in VENDORED.items():
        dist, version = npm_dist(package), npm_version(package)
        if version != pinned_version(package):
            raise MissingExtraError(f"web/node_modules has {package} {version}, package.json pins {pinned_version(package)}",
                                    "run `npm ci` in web/ (scripts/setup.sh does)")
        (site / folder).mkdir()
        out += [Path(shutil.copy2(dist / name, site / folder / name)) for name in files]
    return out


def write_samples(site: Path) -> list[dict]:
    """Whole photos (shipped in scikit-image) at their own sizes, as PNG, for the sample buttons."""
    from PIL import Image

    from arrcoc_edge.stages.golden import _photo, to_rgb_uint8

    (site / "samples").mkdir()
    samples = []
    for label, name in SAMPLES:
        rgb = to_rgb_uint8(_photo(name))
        path = site / "samples" / f"{label}.png"
        Image.fromarray(rgb).save(path, "PNG", optimize=True)
        samples.append({"name": label, "file": f"samples/{label}.png", "source": f"skimage.data.{name}",
                        "size": [int(rgb.shape[1]), int(rgb.shape[0])]})
    return samples


def write_presets(site: Path, cfg, golden_split, text: dict | None) -> dict:
    """Preset query embeddings from the encoder the page runs when it is arr-coc-0-1's (Python
    onnxruntime on the same query_encoder.onnx, Python's token ids), else from a real sentence
    encoder (all-MiniLM-L6-v2, 384-d), or, for a checkpoint of another query width, the golden set's
    queries with a note the page shows."""
    from arrcoc_edge.relevance import text_encoder
    from arrcoc_edge.stages.sentences import cached_minilm_embed
    from arrcoc_edge.targets.shared.mobile_contract import golden_presets
    from arrcoc_edge.targets.text_encoder.target import QWEN_KIND

    if text is not None and text["kind"] == QWEN_KIND:
        emb = python_qwen_embed(text["model"], python_token_ids(text, list(PRESET_QUERIES)))
        presets = {"encoder": "arr-coc-0-1's query encoder (Qwen3-VL's word embeddings, averaged)", "note": "",
                   "queries": list(PRESET_QUERIES), "embeddings": [[float(x) for x in row] for row in emb]}
    elif cfg.query_dim != text_encoder.EMBED_DIM:
        fallback = golden_presets(cfg, golden_split, f"all-MiniLM-L6-v2 gives {text_encoder.EMBED_DIM}")
        presets = {"encoder": fallback["source"], "note": fallback["note"],
                   "queries": [i["text"] for i in fallback["items"]], "embeddings": [i["embedding"] for i in fallback["items"]]}
    else:
        emb = cached_minilm_embed(list(PRESET_QUERIES)).astype(np.float32)
        presets = {"encoder": "all-MiniLM-L6-v2 (an English sentence encoder)", "note": "",
                   "queries": list(PRESET_QUERIES), "embeddings": [[float(x) for x in row] for row in emb]}
    (site / "presets.json").write_text(json.dumps(presets) + "\n")
    return presets


def python_reference(model: Path, max_batch: int = 8):
    """Outputs of Python onnxruntime on `model` for a golden split, batched as the verifier batches
    it (same-size runs): what the browser is compared with."""
    cache: dict = {}

    def reference(split) -> dict[str, np.ndarray]:
        key = split.sha256
        if key not in cache:
            runner = onnx_common.ort_runner(model)
            parts = [runner.run(split.inputs(a, b)) for a, b in split.runs(max_batch)]
            cache[key] = {n: np.concatenate([p[n] for p in parts]) for n in OUTPUT_NAMES}
        return cache[key]

    return reference


def write_selfcheck(site: Path, ctx: BuildContext, models: dict[str, Path]) -> list[Path]:
    """selfcheck.json + selfcheck.bin in golden.json's per-sample format (pipeline/stages/golden.py
    write_bundle): the bundle's samples (two crops and the whole non-square chelsea/whole), each a
    batch-1 run with its uint8 photo, its query and, per model, Python onnxruntime's outputs
    ("fp32.relevance", ...)."""
    import onnxruntime

    split = ctx.golden.heldout
    indices = bundle_samples(split)
    runners = {name: onnx_common.ort_runner(path) for name, path in models.items()}
    arrays = {}
    for n, i in enumerate(indices):
        inputs = split.inputs(i, i + 1)
        arrays.update({f"{n}/image": inputs["image"], f"{n}/query": inputs["query"]})
        for name, runner in runners.items():
            outs = runner.run(inputs)
            arrays.update({f"{n}/{name}.{k}": outs[k] for k in OUTPUT_NAMES})
    index = write_array_bundle(site / "selfcheck.bin", arrays)
    samples = [{"name": split.names[i], "arrays": {key.split("/", 1)[1]: v for key, v in index.items()
                                                    if key.startswith(f"{n}/")}}
               for n, i in enumerate(indices)]
    meta = {"samples": samples, "reference": f"Python onnxruntime {onnxruntime.__version__}",
            "image": "uint8 [1,H,W,3]: the photo as decoded (RGB, alpha dropped), any size"}
    (site / "selfcheck.json").write_text(json.dumps(meta, indent=2) + "\n")
    return [site / "selfcheck.json", site / "selfcheck.bin"]


