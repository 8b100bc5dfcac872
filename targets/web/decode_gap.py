"""The decode gap: how far the browser's JPEG decoding is from PIL's on real photos, and what that
does to the relevance the page shows.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from arrcoc_edge.errors import ExportError
from arrcoc_edge.stages.golden import load_photo
from arrcoc_edge.stages.parity import topk_overlap
from arrcoc_edge.targets.shared import onnx_common
from arrcoc_edge.targets.web.chromium import PageSession

# The real JPEG files shipped in the packages, for the decode gap (Chromium vs PIL). Each entry:
# (name, package, file); package is where the file lives (sklearn.datasets images / skimage data_dir).
DECODE_GAP_JPEGS = (("china", "sklearn", "china.jpg"), ("flower", "sklearn", "flower.jpg"),
                    ("rocket", "skimage", "rocket.jpg"), ("retina", "skimage", "retina.jpg"),
                    ("hubble_deep_field", "skimage", "hubble_deep_field.jpg"))


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
    getImageData, alpha dropped) vs PIL's (arrcoc_edge.stages.golden.load_photo, the contract's decoder), and
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
            "reference": f"PIL {_pil_version()} (arrcoc_edge.stages.golden.load_photo: EXIF applied, convert('RGB'), no ICC)",
            "model": f"{model.name} in Python onnxruntime {onnxruntime.__version__}, {len(queries)} queries per photo "
                     "(the page's presets); top-K overlap strict, PIL's pixels as the reference",
            "photos": photos, "summary": summary}


def _pil_version() -> str:
    import PIL

    return PIL.__version__


