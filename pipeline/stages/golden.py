"""The golden set: real photos shipped inside packages, with queries and eager float32 outputs.

Photos come from scikit-image and scikit-learn (they load offline). They are split BY PHOTO
into a calibration part (for quantisation) and a held-out part (for parity), so no held-out
pixel is ever seen by a calibrator. Every sample is a photo as the contract takes it: uint8
[H,W,3], RGB, alpha dropped. Two kinds per split:
  * crops: square crops of each photo resized with PIL (Lanczos) to 16*G, the size the reference
    resizes to (its own resize is then the identity), batched together;
  * whole photos at their own sizes and aspects: landscape, portrait, a panorama, one smaller
    than 16*G, one of 12 MP, each run alone (a batch holds photos of one size).
The held-out split also holds the photos users hold that a camera roll lacks (PHOTO_KINDS): greyscale
photos (single-channel files, decoded as the contract decodes them: grey repeated), fine textures,
a document scan, a photo that arrives small and one the user upscaled from a thumbnail.

Queries, two subsets per split (issue 41), each gated on its own:
  * sentences: every crop and whole photo again, each with a real sentence (sentences.py: a
    calibration list disjoint from the held-out list) encoded by the query encoder the build
    publishes for this checkpoint; sample names carry the prefix SENTENCE_PREFIX;
  * vectors: a fixed, seeded set of unit vectors of the checkpoint's width D, a stress set of
    queries no encoder produces.
Where the checkpoint has no encoder here, the sentences subset is empty and `query_source` says
why. The reference outputs are computed by the eager PyTorch model in float32.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from arrcoc_edge.errors import InputError
from arrcoc_edge.relevance.signature import MAX_SIDE, MIN_SIDE, OUTPUT_NAMES, ModelConfig

# Photo name -> loader. Chosen for variety: people, animals, objects, space, microscopy,
# synthetic colour, a logo with transparency, a street scene, landscapes.
CALIBRATION_PHOTOS = ("coffee", "rocket", "colorwheel", "china")
HELDOUT_PHOTOS = (
    "astronaut", "chelsea", "hubble_deep_field", "immunohistochemistry",
    "retina", "logo", "stereo_motorcycle", "flower",
    "brick",  # a fine greyscale texture (512 x 512 grey), cropped and resized to 16*G like the others
)
CROPS = ("centre", "start", "end")
# Whole photos per split: (name, photo, how it is made from the photo as decoded). Each keeps
# the photo's own pixels, except where a size has to be made (the small one, the 12 MP one).
WHOLE_CALIBRATION = (("coffee/whole", "coffee", None), ("colorwheel/whole", "colorwheel", None))
WHOLE_HELDOUT = (
    ("chelsea/whole", "chelsea", None),  # landscape 451 x 300
    ("flower/portrait", "flower", "rotate"),  # portrait 427 x 640: the photo turned upright
    ("stereo_motorcycle/whole", "stereo_motorcycle", None),  # landscape 741 x 500
    ("hubble_deep_field/panorama", "hubble_deep_field", "panorama"),  # 1000 x 250, 4:1
    ("logo/whole", "logo", None),  # RGBA: alpha dropped
    ("astronaut/small", "astronaut", (96, 128)),  # smaller than 16*G on both sides
    ("retina/12mp", "retina", (4032, 3024)),  # 12.2 MP, 4:3, as a phone stores it
    # what users hold beside camera photos: scans, X-ray-like greyscale, textures, small pictures
    ("camera/grey", "camera", None),  # a greyscale photo, 512 x 512, one channel as stored
    ("page/scan", "page", None),  # a scanned book page, 384 x 191 grey: text on paper
    ("gravel/texture", "gravel", None),  # a fine texture at its own 512 x 512: detail in every cell
    ("microaneurysms/small", "microaneurysms", None),  # a 102 x 102 grey medical crop, as it arrives
    ("chelsea/upscaled", "chelsea", ("upscaled", (120, 80), (1280, 853))),  # a thumbnail blown up 10.7x
)
# What each held-out photo stands for beyond an ordinary colour photo: recorded per variant
# (parity.photos) so the manifest shows how a quantised model does on each.
PHOTO_KINDS = {
    "greyscale": ("camera/", "page/", "gravel/", "microaneurysms/", "brick/"),
    "fine texture": ("gravel/", "brick/"),
    "document scan": ("page/",),
    "small or upscaled": ("astronaut/small", "microaneurysms/small", "chelsea/upscaled"),
}
MIN_CALIBRATION = 8
QUERY_SEED = 20261122
SENTENCE_PREFIX = "sentence:"  # sentence samples are named sentence:<photo>/<crop or kind> (sentence-2: a second one)
# The held-out 12 MP photo gets no sentence: its sentence run would add a second 12 MP decode and
# resize per variant (the slowest sample in the browser) for a resize the query never touches.
NO_SENTENCE = ("retina/12mp",)


@dataclass
class GoldenSplit:
    names: list[str]
    images: list[np.ndarray]  # each uint8 [H,W,3]: a photo as the contract takes it
    queries: np.ndarray  # [N,D] float32
    expected: dict[str, np.ndarray] = field(default_factory=dict)
    texts: list[str | None] | None = None  # the sentence behind each query; None for a seeded vector

    def __post_init__(self):
        if self.texts is None:
            self.texts = [None] * len(self.names)

    @property
    def subsets(self) -> dict[str, list[int]]:
        """Indices per query kind (sentences, vectors), each gated on its own; an empty one is left out."""
        kinds = {"sentences": [i for i, t in enumerate(self.texts) if t is not None],
                 "vectors": [i for i, t in enumerate(self.texts) if t is None]}
        return {k: v for k, v in kinds.items() if v}

    def __len__(self) -> int:
        return len(self.names)

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(self.names).encode())
        for image in self.images:
            h.update(str(image.shape).encode())
            h.update(np.ascontiguousarray(image).tobytes())
        h.update(np.ascontiguousarray(self.queries).tobytes())
        if any(t is not None for t in self.texts):
            h.update(json.dumps(self.texts, ensure_ascii=False).encode())
        return h.hexdigest()

    def inputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        """The samples start..stop as one batch; they must share one photo size."""
        images = self.images[start:stop]
        if len({im.shape for im in images}) > 1:
            raise ValueError(f"samples {start}..{stop} hold photos of several sizes; use runs() to batch them")
        return {"image": np.stack(images), "query": self.queries[start:stop]}

    def runs(self, max_batch: int, first_alone: bool = True) -> list[tuple[int, int]]:
        """(start, stop) batches of consecutive same-size photos, at most max_batch each; the
        first sample alone when first_alone (so batch 1 is always exercised)."""
        bounds, start = [], 0
        if first_alone and len(self):
            bounds, start = [(0, 1)], 1
        while start < len(self):
            stop = start + 1
            while stop < len(self) and stop - start < max_batch and self.images[stop].shape == self.images[start].shape:
                stop += 1
            bounds.append((start, stop))
            start = stop
        return bounds

    def subset(self, indices: list[int]) -> "GoldenSplit":
        pick = lambda arrays: {k: v[indices] for k, v in arrays.items()}  # noqa: E731
        return GoldenSplit([self.names[i] for i in indices], [self.images[i] for i in indices],
                           self.queries[indices], pick(self.expected), [self.texts[i] for i in indices])

    @property
    def photo_kinds(self) -> dict[str, list[int]]:
        """Indices per PHOTO_KINDS entry (of both query kinds); a kind with no sample is left out."""
        photo = lambda name: name.split(":", 1)[-1]  # noqa: E731  (sentence:<photo>/<how> -> <photo>/<how>)
        kinds = {kind: [i for i, name in enumerate(self.names) if photo(name).startswith(prefixes)]
                 for kind, prefixes in PHOTO_KINDS.items()}
        return {k: v for k, v in kinds.items() if v}

    @property
    def whole(self) -> list[int]:
        """Indices of the whole photos (the rest are 16*G crops), of both query kinds."""
        return [i for i, name in enumerate(self.names) if not name.endswith(CROPS)]


@dataclass
class GoldenSet:
    calibration: GoldenSplit
    heldout: GoldenSplit
    query_source: str
    sentence_source: str = "golden set's calibration list (pipeline/stages/sentences.py)"
    sentence_file: dict | None = None  # the user's --calibration-queries file: path, sha256, sentences

    def describe(self) -> dict:
        count = lambda split: {k: len(v) for k, v in split.subsets.items()}  # noqa: E731
        return {
            "calibration": {"count": len(self.calibration), "sha256": self.calibration.sha256,
                            "subsets": count(self.calibration), "sentences_from": self.sentence_source,
                            **({"sentences_file": self.sentence_file} if self.sentence_file else {})},
            "heldout": {"count": len(self.heldout), "sha256": self.heldout.sha256, "subsets": count(self.heldout),
                        "photo_kinds": {k: len(v) for k, v in self.heldout.photo_kinds.items()}},
            "query_source": self.query_source,
            "photos": {"calibration": list(CALIBRATION_PHOTOS), "heldout": list(HELDOUT_PHOTOS),
                       "heldout_whole": [name for name, _, _ in WHOLE_HELDOUT]},
        }


@functools.lru_cache(maxsize=None)
def _photo(name: str) -> np.ndarray:
    """A golden photo, decoded once per process (a build reads several twice) and read-only, so
    no caller can change what the next golden set sees."""
    if name in ("china", "flower"):
        img = _sklearn_sample(name)
    else:
        from skimage import data

        img = getattr(data, name)()
        img = img[0] if isinstance(img, tuple) else img
    img.setflags(write=False)
    return img


def _sklearn_sample(name: str) -> np.ndarray:
    """scikit-learn's sample photo `name`, as sklearn.datasets.load_sample_image decodes it (PIL,
    np.asarray) from the same file, without importing scikit-learn (1.1 s a build) or decoding
    its other sample too."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("scikit-learn is not installed")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "images" / f"{name}.jpg"
    with Image.open(path) as opened:
        return np.asarray(opened)


def to_rgb_uint8(img: np.ndarray) -> np.ndarray:
    """uint8 HxW / HxWx3 / HxWx4 -> uint8 HxWx3: grey repeated, alpha dropped (what PIL's
    convert("RGB") does, and what the reference's image processors feed it)."""
    if img.dtype != np.uint8:
        raise ValueError(f"expected 8-bit pixels, got {img.dtype}")
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[..., :3])


def square_crop(img: np.ndarray, where: str, size: int) -> np.ndarray:
    """Square crop (centre, start or end of the long side), resized to size with Lanczos: uint8 [S,S,3]."""
    h, w = img.shape[:2]
    side = min(h, w)
    offset = {"centre": (max(h, w) - side) // 2, "start": 0, "end": max(h, w) - side}[where]
    top, left = (offset, 0) if h > w else (0, offset)
    crop = Image.fromarray(img[top : top + side, left : left + side])
    return np.asarray(crop.resize((size, size), Image.Resampling.LANCZOS))


def whole_photo(img: np.ndarray, how) -> np.ndarray:
    """A whole photo of the golden set from a decoded one (see WHOLE_HELDOUT)."""
    if how is None:
        return img
    if how == "rotate":
        return np.ascontiguousarray(np.rot90(img))
    if how == "panorama":
        h, w = img.shape[:2]
        top = (h - w // 4) // 2
        return np.ascontiguousarray(img[top : top + w // 4])
    if how[0] == "upscaled":  # a thumbnail (Lanczos, as it was made) enlarged by a photo app (bicubic)
        _, small, large = how
        thumbnail = Image.fromarray(img).resize(small, Image.Resampling.LANCZOS)
        return np.asarray(thumbnail.resize(large, Image.Resampling.BICUBIC))
    return np.asarray(Image.fromarray(img).resize(how, Image.Resampling.LANCZOS))


def load_photo(path: str | Path) -> np.ndarray:
    """A user's image file -> uint8 [H,W,3] as the contract takes it: decoded by PIL, EXIF
    orientation applied, grey and palette images as RGB, alpha dropped, 16-bit pixels to 8 bits
    (eight_bit). No crop, no resize. The size is checked from the header, before anything is decoded."""
    opened = None
    try:
        with warnings.catch_warnings():
            # Pillow warns on stderr above 89 MP; every such photo is refused below, in one line
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            opened = Image.open(path)
        with opened as im:
            arr = decode_image(im, str(path))
    except Image.DecompressionBombError as exc:  # over Pillow's own limit (179 MP): far over MAX_SIDE too
        raise InputError(f"{path}: the photo has more pixels than Pillow opens ({exc.__class__.__name__}), "
                         f"so it is over {MAX_SIDE}x{MAX_SIDE}", _SIZE_FIX) from exc
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise photo_error(path, opened, exc) from exc
    return arr


def photo_error(path, opened, exc: Exception) -> InputError:
    """What is wrong with a photo that did not decode, so that the fix fits: not an image format
    (use a PNG, JPEG or WebP), not readable (a link loop, no permission), or a known format whose
    pixels are cut short or damaged (a truncated download: the format is fine, the file is not)."""
    if isinstance(exc, UnidentifiedImageError):
        return InputError(f"{path}: cannot be decoded, not an image file Pillow reads ({exc.__class__.__name__})",
                          "use a PNG, JPEG or WebP file")
    if opened is None and isinstance(exc, OSError) and exc.errno is not None:
        return InputError(f"{path}: cannot be decoded, the file cannot be read ({exc.strerror or exc.__class__.__name__})",
                          "check that the file exists, is readable and is not a link loop")
    form = getattr(opened, "format", None) or "image"
    return InputError(f"{path}: cannot be decoded, the {form} file is truncated or corrupt ({exc.__class__.__name__}: {str(exc)[:80]})",
                      f"the {form} header reads but its pixels do not: copy or export the photo again")


def decode_image(im: Image.Image, what: str) -> np.ndarray:
    """An opened PIL image (a file's, or one a caller made) -> uint8 [H,W,3], as load_photo decodes
    a file: the size checked first (from the header when the pixels are not loaded yet), EXIF
    orientation applied when the image carries it, 16-bit pixels to 8 bits, RGB, alpha dropped."""
    check_photo_size(im.height, im.width, what)  # the header's size: a 169 MP file is never decoded
    im = ImageOps.exif_transpose(im)
    im.load()
    return np.asarray(eight_bit(im, what).convert("RGB"))


# Pillow's modes for 16-bit grey; "I" (32-bit integers) is also what it gives a 16-bit PGM, scaled to 0..65535
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")


def eight_bit(im: Image.Image, what: str) -> Image.Image:
    """The image with 8-bit pixels, never clipped. PIL's convert("RGB") clips 16-bit grey (mode I;16)
    and 32-bit (I, F) pixels to 255, so almost every pixel of a 16-bit photo would turn white.

    The reference cannot take these files as decoded: torchvision's ToTensor divides only 8-bit
    images by 255 and passes I;16 / I / F values through unscaled, far outside the [0, 1] its
    texture stage reads. So 16-bit grey is brought to 8 bits the way Pillow's own decoders bring 16-bit
    colour and grey-with-alpha PNGs to 8 bits, the high byte (v >> 8): a 16-bit photo gives the same
    pixels whether it is stored as grey or as RGB. Mode I is read so when every value fits 16 bits.
    Float pixels (F) and wider integers have no range to scale from (0..1? 0..255? 0..65535?): refused."""
    if im.mode not in (*SIXTEEN_BIT_MODES, "I", "F"):
        return im
    values = np.asarray(im)
    if im.mode == "F" or values.min() < 0 or values.max() > 65535:
        kind = "32-bit float" if im.mode == "F" else "32-bit integer (beyond 16-bit)"
        raise InputError(f"{what}: {kind} pixels (PIL mode {im.mode}) have no fixed range to bring to 8 bits",
                         "save the photo as an 8- or 16-bit PNG, TIFF or JPEG")
    return Image.fromarray((values.astype(np.uint32) >> 8).astype(np.uint8))


_SIZE_FIX = f"use a photo of {MIN_SIDE} to {MAX_SIDE} pixels per side (downscale larger ones first)"


def check_photo_size(height: int, width: int, what: str) -> None:
    if not (MIN_SIDE <= height <= MAX_SIDE and MIN_SIDE <= width <= MAX_SIDE):
        raise InputError(f"{what}: the photo is {width}x{height} pixels, outside {MIN_SIDE}..{MAX_SIDE} per side", _SIZE_FIX)


def seeded_queries(count: int, dim: int, seed: int = QUERY_SEED) -> np.ndarray:
    gen = np.random.default_rng(seed)
    q = gen.standard_normal((count, dim)).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _split(photos: tuple[str, ...], whole: tuple, cfg: ModelConfig, query_offset: int,
           texts: list[str] | None = None, encode=None) -> GoldenSplit:
    """Crops and whole photos with seeded vectors; then, when `encode` is given, the same samples
    again (but NO_SENTENCE) with `texts` encoded by `encode`: each text once, each sample at least once."""
    names, images = [], []
    for photo in photos:
        rgb = to_rgb_uint8(_photo(photo))
        for crop in CROPS:
            names.append(f"{photo}/{crop}")
            images.append(square_crop(rgb, crop, cfg.image_size))
    for name, photo, how in whole:
        names.append(name)
        images.append(whole_photo(to_rgb_uint8(_photo(photo)), how))
    queries = seeded_queries(query_offset + len(names), cfg.query_dim)[query_offset:]
    split = GoldenSplit(names, images, queries)
    if encode is None or not texts:
        return split
    usable = [i for i, name in enumerate(names) if name not in NO_SENTENCE]
    # every sentence at least once and every sample at least once; a sample with two sentences
    # keeps its place, so same-size photos stay together in batches
    pairs = sorted(((usable[n % len(usable)], n) for n in range(max(len(usable), len(texts)))))
    picked, said = [i for i, _ in pairs], [texts[n % len(texts)] for _, n in pairs]
    vectors = np.asarray(encode(said), dtype=np.float32)
    if vectors.shape != (len(said), cfg.query_dim):
        raise InputError(f"the query encoder gave {vectors.shape[1:]}-d embeddings, the checkpoint takes {cfg.query_dim}",
                         "pass the --base-model snapshot this checkpoint was trained with")
    seen: dict[int, int] = {}
    sentence_names = []
    for i in picked:  # unique names: a second sentence on one sample is sentence-2:<name>
        seen[i] = seen.get(i, 0) + 1
        sentence_names.append((SENTENCE_PREFIX if seen[i] == 1 else f"sentence-{seen[i]}:") + names[i])
    return GoldenSplit(names + sentence_names, images + [images[i] for i in picked],
                       np.concatenate([queries, vectors]), texts=[None] * len(names) + said)


def reference_outputs(model: torch.nn.Module, split: GoldenSplit, batch: int = 16) -> dict[str, np.ndarray]:
    """Eager float32 outputs of the model on a split, keyed by output name."""
    outs: dict[str, list] = {name: [] for name in OUTPUT_NAMES}
    import torch  # here, not at the top: load_photo serves predict, which runs without torch

    with torch.no_grad():
        for start, stop in split.runs(batch, first_alone=False):
            inp = split.inputs(start, stop)
            result = model(torch.from_numpy(inp["image"]), torch.from_numpy(inp["query"]))
            for name, value in zip(OUTPUT_NAMES, result):
                outs[name].append(value.numpy())
    return {name: np.concatenate(parts) for name, parts in outs.items()}


def build_golden_set(model: torch.nn.Module, cfg: ModelConfig, checkpoint: Path | None = None,
                     base_model: Path | None = None, calibration_queries=None) -> GoldenSet:
    """The golden set. checkpoint/base_model choose the sentence encoder (sentences.encoder_for);
    without a checkpoint path only vectors. calibration_queries: the user's sentences for the
    calibration split instead of sentences.CALIBRATION, a list or a sentences.SentenceFile (whose
    name and sha256 describe() records)."""
    from arrcoc_edge.stages import sentences

    encode, how = (None, "no sentences: no checkpoint path given")
    if checkpoint is not None:
        encode, how = sentences.encoder_for(checkpoint, base_model, cfg.query_dim)
    user_file = calibration_queries if isinstance(calibration_queries, sentences.SentenceFile) else None
    if user_file is not None:
        calibration_queries = list(user_file.sentences)
    calib_texts = list(calibration_queries or sentences.CALIBRATION)
    calibration = _split(CALIBRATION_PHOTOS, WHOLE_CALIBRATION, cfg, 0, calib_texts, encode)
    vectors = len(calibration.subsets["vectors"])
    heldout = _split(HELDOUT_PHOTOS, WHOLE_HELDOUT, cfg, vectors, list(sentences.HELDOUT), encode)
    if len(calibration) < MIN_CALIBRATION:
        raise InputError(
            f"calibration split has {len(calibration)} samples, fewer than {MIN_CALIBRATION}",
            "add photos to CALIBRATION_PHOTOS",
        )
    for split in (calibration, heldout):
        split.expected = reference_outputs(model, split)
    vector_source = f"seeded unit vectors (numpy seed {QUERY_SEED})"
    source = f"sentences: {how}; vectors: {vector_source}" if encode else f"{vector_source} only ({how})"
    origin = "the user's --calibration-queries file" if calibration_queries else "pipeline/stages/sentences.py CALIBRATION"
    return GoldenSet(calibration, heldout, query_source=source, sentence_source=origin,
                     sentence_file=user_file.describe() if user_file else None)


BUNDLE_WHOLE = "chelsea/whole"  # the whole non-square photo every on-device self-check runs (451 x 300)


def bundle_samples(split: GoldenSplit, count: int = 2) -> list[int]:
    """The samples a golden bundle carries: the first `count` crops and one whole non-square photo."""
    return list(range(count)) + [split.names.index(BUNDLE_WHOLE)]


def write_bundle(split: GoldenSplit, folder: Path, gate: dict, count: int = 2, topk_dtype: str = "int64") -> list[Path]:
    """A golden bundle for on-device re-checks: golden.json (index + gate) and golden.bin.

    Each sample is one batch-1 run (photos differ in size): golden.json lists the samples, each
    with its arrays' dtype, shape and byte offset into golden.bin (raw little-endian arrays back
    to back), so a browser or a phone can read it without NumPy.
    """
    arrays, names = {}, []
    for n, i in enumerate(bundle_samples(split, count)):
        names.append(split.names[i])
        arrays.update({f"{n}/image": split.images[i][None], f"{n}/query": split.queries[i : i + 1],
                       **{f"{n}/{name}": split.expected[name][i : i + 1] for name in OUTPUT_NAMES}})
        if topk_dtype != "int64":
            arrays[f"{n}/topk_indices"] = arrays[f"{n}/topk_indices"].astype(topk_dtype)
    index = write_array_bundle(folder / "golden.bin", arrays)
    samples = [{"name": name, "arrays": {key.split("/", 1)[1]: v for key, v in index.items() if key.startswith(f"{n}/")}}
               for n, name in enumerate(names)]
    meta = {"samples": samples, "gate": gate, "reference": "eager PyTorch float32",
            "image": "uint8 [1,H,W,3]: the photo as decoded (RGB, alpha dropped), any size"}
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
