"""The golden set: real photos shipped inside packages, with queries and eager float32 outputs.

Photos come from scikit-image and scikit-learn (they load offline). They are split BY PHOTO
into a calibration part (for quantisation) and a held-out part (for parity), so no held-out
pixel is ever seen by a calibrator. Each photo gives several square crops resized to the
model's input size with PIL (Lanczos).

Query embeddings: a fixed, seeded set of unit vectors of the checkpoint's width D (recorded as
`query_source`). The reference outputs are computed by the eager PyTorch model in float32.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import InputError
from .model import OUTPUT_NAMES, ModelConfig

# Photo name -> loader. Chosen for variety: people, animals, objects, space, microscopy,
# synthetic colour, a logo with transparency, a street scene, landscapes.
CALIBRATION_PHOTOS = ("coffee", "rocket", "colorwheel", "china")
HELDOUT_PHOTOS = (
    "astronaut", "chelsea", "hubble_deep_field", "immunohistochemistry",
    "retina", "logo", "stereo_motorcycle", "flower",
)
CROPS = ("centre", "start", "end")
MIN_CALIBRATION = 8
QUERY_SEED = 20261122


@dataclass
class GoldenSplit:
    names: list[str]
    images: np.ndarray  # [N,3,S,S] float32 RGB in [0,1]
    queries: np.ndarray  # [N,D] float32
    expected: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(self.names).encode())
        h.update(np.ascontiguousarray(self.images).tobytes())
        h.update(np.ascontiguousarray(self.queries).tobytes())
        return h.hexdigest()

    def inputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        return {"image": self.images[start:stop], "query": self.queries[start:stop]}


@dataclass
class GoldenSet:
    calibration: GoldenSplit
    heldout: GoldenSplit
    query_source: str

    def describe(self) -> dict:
        return {
            "calibration": {"count": len(self.calibration), "sha256": self.calibration.sha256},
            "heldout": {"count": len(self.heldout), "sha256": self.heldout.sha256},
            "query_source": self.query_source,
            "photos": {"calibration": list(CALIBRATION_PHOTOS), "heldout": list(HELDOUT_PHOTOS)},
        }


def _photo(name: str) -> np.ndarray:
    if name in ("china", "flower"):
        from sklearn.datasets import load_sample_image

        return load_sample_image(f"{name}.jpg")
    from skimage import data

    img = getattr(data, name)()
    return img[0] if isinstance(img, tuple) else img


def to_rgb_float(img: np.ndarray) -> np.ndarray:
    """uint8 HxW / HxWx3 / HxWx4 -> float32 HxWx3 in [0,1]; transparency composited on white."""
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    img = img.astype(np.float32) / (255.0 if img.dtype == np.uint8 else max(1.0, float(img.max())))
    if img.shape[-1] == 4:
        alpha = img[..., 3:4]
        img = img[..., :3] * alpha + (1.0 - alpha)
    return np.clip(img[..., :3], 0.0, 1.0)


def square_crop(img: np.ndarray, where: str, size: int) -> np.ndarray:
    """Square crop (centre, start or end of the long side), resized to size; returns [3,S,S]."""
    h, w = img.shape[:2]
    side = min(h, w)
    offset = {"centre": (max(h, w) - side) // 2, "start": 0, "end": max(h, w) - side}[where]
    top, left = (offset, 0) if h > w else (0, offset)
    crop = img[top : top + side, left : left + side]
    pil = Image.fromarray((crop * 255.0 + 0.5).astype(np.uint8))
    resized = np.asarray(pil.resize((size, size), Image.Resampling.LANCZOS), dtype=np.float32)
    return (resized / 255.0).transpose(2, 0, 1)


def load_image_file(path: str | Path, size: int) -> np.ndarray:
    """A user's image file -> [3,S,S] float32, EXIF orientation applied, centre-cropped."""
    try:
        with Image.open(path) as im:
            im = ImageOps.exif_transpose(im)
            im.load()
            arr = np.asarray(im.convert("RGBA"))
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError) as exc:
        raise InputError(
            f"{path}: cannot be decoded as an image ({exc.__class__.__name__})",
            "use a PNG, JPEG or WebP file, or remove it from the folder",
        ) from exc
    if min(arr.shape[:2]) < 16:
        raise InputError(f"{path}: image is only {arr.shape[1]}x{arr.shape[0]} pixels", "use an image of at least 16x16")
    return square_crop(to_rgb_float(arr), "centre", size)


def seeded_queries(count: int, dim: int, seed: int = QUERY_SEED) -> np.ndarray:
    gen = np.random.default_rng(seed)
    q = gen.standard_normal((count, dim)).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _split(photos: tuple[str, ...], cfg: ModelConfig, query_offset: int) -> GoldenSplit:
    names, images = [], []
    for photo in photos:
        rgb = to_rgb_float(_photo(photo))
        for crop in CROPS:
            names.append(f"{photo}/{crop}")
            images.append(square_crop(rgb, crop, cfg.image_size))
    queries = seeded_queries(query_offset + len(names), cfg.query_dim)[query_offset:]
    return GoldenSplit(names, np.stack(images).astype(np.float32), queries)


def reference_outputs(model: torch.nn.Module, split: GoldenSplit, batch: int = 16) -> dict[str, np.ndarray]:
    """Eager float32 outputs of the model on a split, keyed by output name."""
    outs: dict[str, list] = {name: [] for name in OUTPUT_NAMES}
    with torch.no_grad():
        for start in range(0, len(split), batch):
            inp = split.inputs(start, start + batch)
            result = model(torch.from_numpy(inp["image"]), torch.from_numpy(inp["query"]))
            for name, value in zip(OUTPUT_NAMES, result):
                outs[name].append(value.numpy())
    return {name: np.concatenate(parts) for name, parts in outs.items()}


def build_golden_set(model: torch.nn.Module, cfg: ModelConfig) -> GoldenSet:
    calibration = _split(CALIBRATION_PHOTOS, cfg, query_offset=0)
    heldout = _split(HELDOUT_PHOTOS, cfg, query_offset=len(calibration))
    if len(calibration) < MIN_CALIBRATION:
        raise InputError(
            f"calibration split has {len(calibration)} samples, fewer than {MIN_CALIBRATION}",
            "add photos to CALIBRATION_PHOTOS",
        )
    for split in (calibration, heldout):
        split.expected = reference_outputs(model, split)
    return GoldenSet(calibration, heldout, query_source=f"seeded unit vectors (numpy seed {QUERY_SEED})")


def write_bundle(split: GoldenSplit, folder: Path, gate: dict, count: int = 2, topk_dtype: str = "int64") -> list[Path]:
    """A golden bundle for on-device re-checks: golden.json (index + gate) and golden.bin.

    golden.bin is the raw little-endian arrays back to back; golden.json says, per array, its
    dtype, shape and byte offset, so a browser or a phone can read it without NumPy.
    """
    arrays = {
        "image": split.images[:count],
        "query": split.queries[:count],
        **{name: split.expected[name][:count] for name in OUTPUT_NAMES},
    }
    if topk_dtype != "int64":
        arrays["topk_indices"] = arrays["topk_indices"].astype(topk_dtype)
    index = write_array_bundle(folder / "golden.bin", arrays)
    meta = {"samples": split.names[:count], "arrays": index, "gate": gate, "reference": "eager PyTorch float32"}
    (folder / "golden.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return [folder / "golden.json", folder / "golden.bin"]


def write_array_bundle(path: Path, arrays: dict[str, np.ndarray]) -> dict:
    """Concatenate arrays as little-endian bytes into `path`; returns the index (dtype, shape,
    offset, bytes per name) that the page and the apps read the file with."""
    index, offset = {}, 0
    with open(path, "wb") as f:
        for name, arr in arrays.items():
            data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
            index[name] = {"dtype": str(arr.dtype), "shape": list(arr.shape), "offset": offset, "bytes": len(data)}
            f.write(data)
            offset += len(data)
    return index
