"""Natural photos labelled by their own pixels: what a calibration is fitted on and measured by.

Crops of real photos that ship inside packages (no download), split BY PHOTO, never a crop of one
photo on two sides:
  * train:       the photos the training scenes use (training/scenes.py PHOTOS); a retrain may cut
                 textures and objects from these, and from nothing else here;
  * calibration: photos no training saw; a build fits its confidence calibration on these
                 (stages/calibration.py);
  * heldout:     photos neither the training nor the calibration saw: what the measured table
                 (scripts/measure_stands_out.py, docs/model.md) reports.
Each photo gives CROPS_PER_PHOTO square crops (its whole short side, then 3 x 3 positions at 0.6
and at 0.35 of it), resized with Lanczos to CROP_SIZE.

Colour words are labelled from the crop's pixels in HSV (H in degrees, S and V in 0..1), one rule
per basic colour term (COLOUR_RULES; gaps between neighbouring rules leave borderline pixels in no
colour). A colour is PRESENT in a crop when at least 6% of its pixels have it, ABSENT when at most
0.5% do; a crop in between is not asked that colour (ambiguous). A grid cell holds a colour by the
same 6% rule applied to its own pixels (the "strongest cells hold the colour" measure). Places are
labelled by geometry: "the top left" is the crop's top-left quadrant of cells, present in every crop.
Each (crop, word) pair carries one sentence people type, the phrasing rotating through the
templates. Deterministic and numpy only (decoding and resizing by PIL): about a second per split.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

CROP_SIZE = 224
PRESENT, ABSENT = 0.06, 0.005  # share of a crop's pixels: the colour is there / is not
CELL_PRESENT = PRESENT  # share of one cell's pixels: the cell holds the colour

# photo name -> (package, what loads it). grace_hopper and the Minduka gift box come with
# matplotlib (the report extra): only the held-out split needs them, never a build.
PHOTOS = {
    "chelsea": ("skimage", "chelsea"), "astronaut": ("skimage", "astronaut"), "coffee": ("skimage", "coffee"),
    "rocket": ("skimage", "rocket"), "china": ("sklearn", "china.jpg"), "flower": ("sklearn", "flower.jpg"),
    "colorwheel": ("skimage", "colorwheel"), "immunohistochemistry": ("skimage", "immunohistochemistry"),
    "hubble_deep_field": ("skimage", "hubble_deep_field"), "retina": ("skimage", "retina"),
    "stereo_motorcycle": ("skimage", "stereo_motorcycle"), "grace_hopper": ("matplotlib", "grace_hopper.jpg"),
    "present": ("matplotlib", "Minduka_Present_Blue_Pack.png"),
}
SPLITS = {
    "train": ("chelsea", "astronaut", "coffee", "rocket", "china", "flower"),
    "calibration": ("colorwheel", "immunohistochemistry", "hubble_deep_field", "retina"),
    "heldout": ("stereo_motorcycle", "grace_hopper", "present"),
}

# The basic colour terms and their pixel rules: (H ranges [lo, hi) in degrees, S range, V range).
# A pixel has the colour when its H falls in one of the ranges and S and V in theirs.
COLOUR_RULES = {
    "red": (((0, 10), (345, 360)), (0.45, 1.01), (0.35, 1.01)),
    "orange": (((18, 42),), (0.45, 1.01), (0.60, 1.01)),
    "yellow": (((50, 68),), (0.45, 1.01), (0.55, 1.01)),
    "green": (((75, 165),), (0.30, 1.01), (0.15, 1.01)),  # foliage is dark: V from 0.15
    "blue": (((195, 255),), (0.40, 1.01), (0.20, 1.01)),  # navy counts as blue
    "purple": (((265, 300),), (0.30, 1.01), (0.20, 1.01)),
    "pink": (((300, 345),), (0.25, 1.01), (0.50, 1.01)),  # magenta-pink; light red below
    "brown": (((12, 45),), (0.35, 1.01), (0.20, 0.50)),  # dark orange
    "white": (((0, 360),), (0.0, 0.12), (0.85, 1.01)),
    "grey": (((0, 360),), (0.0, 0.12), (0.30, 0.75)),
    "black": (((0, 360),), (0.0, 1.01), (0.0, 0.18)),
}
LIGHT_RED_IS_PINK = (((0, 15), (330, 360)), (0.20, 0.45), (0.70, 1.01))  # a second pink rule: pale red
COLOURS = tuple(COLOUR_RULES)
COLOUR_TEMPLATES = ("something {w}", "the {w} object", "is there anything {w}?", "{w}",
                    "the {w} part of the photo", "where is the {w}?", "a {w} thing", "find something {w}")
PLACES = {"top left": (0, 0), "top right": (0, 1), "bottom left": (1, 0), "bottom right": (1, 1)}
PLACE_TEMPLATES = ("the {w}", "the object in the {w}", "what is in the {w} corner?", "the thing at the {w}")
SCALES = ((1.0, ((0.5, 0.5),)), *((s, tuple((a, b) for a in (0.0, 0.5, 1.0) for b in (0.0, 0.5, 1.0)))
                                   for s in (0.6, 0.35)))
CROPS_PER_PHOTO = sum(len(at) for _, at in SCALES)


def hsv(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint8 [..., 3] -> H in degrees [0, 360), S and V in [0, 1] (the usual hexcone HSV)."""
    x = rgb.astype(np.float64) / 255.0
    hi, lo = x.max(axis=-1), x.min(axis=-1)
    span = hi - lo
    safe = np.where(span > 0, span, 1.0)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    h = np.where(hi == r, ((g - b) / safe) % 6.0, np.where(hi == g, (b - r) / safe + 2.0, (r - g) / safe + 4.0))
    h = np.where(span > 0, h * 60.0, 0.0)
    s = np.where(hi > 0, span / np.where(hi > 0, hi, 1.0), 0.0)
    return h, s, hi


def _rule(h, s, v, rule) -> np.ndarray:
    hues, (s_lo, s_hi), (v_lo, v_hi) = rule
    in_hue = np.zeros(h.shape, dtype=bool)
    for lo, hi in hues:
        in_hue |= (h >= lo) & (h < hi)
    return in_hue & (s >= s_lo) & (s < s_hi) & (v >= v_lo) & (v < v_hi)


def colour_masks(rgb: np.ndarray) -> dict[str, np.ndarray]:
    """uint8 [H, W, 3] -> {colour: bool [H, W]}: which pixels have each basic colour (COLOUR_RULES)."""
    h, s, v = hsv(rgb)
    masks = {name: _rule(h, s, v, rule) for name, rule in COLOUR_RULES.items()}
    masks["pink"] |= _rule(h, s, v, LIGHT_RED_IS_PINK)
    return masks


def cell_shares(mask: np.ndarray, grid: int) -> np.ndarray:
    """bool [S, S] -> float [grid * grid]: the share of each cell's pixels that are set (row major).
    S need not divide by grid: each cell takes the pixels whose centres fall in it."""
    side = mask.shape[0]
    index = (np.arange(side) * grid) // side
    sums = np.zeros((grid, grid))
    np.add.at(sums, (index[:, None], index[None, :]), mask)
    counts = np.bincount(index, minlength=grid)
    return (sums / np.outer(counts, counts)).reshape(-1)


def place_cells(place: str, grid: int) -> np.ndarray:
    """bool [grid * grid]: the cells of a quadrant (rows and columns of the half it names; the
    middle row and column of an odd grid belong to neither)."""
    qy, qx = PLACES[place]
    half = np.arange(grid) < grid // 2
    rows = half if qy == 0 else np.arange(grid) >= (grid + 1) // 2
    cols = half if qx == 0 else np.arange(grid) >= (grid + 1) // 2
    return (rows[:, None] & cols[None, :]).reshape(-1)


@functools.lru_cache(maxsize=None)
def photo(name: str) -> np.ndarray:
    """A photo of PHOTOS as decoded: uint8 [H, W, 3] (alpha dropped), read-only."""
    package, what = PHOTOS[name]
    if package == "sklearn":
        from arrcoc_edge.stages.golden import _sklearn_sample

        img = _sklearn_sample(Path(what).stem)
    elif package == "matplotlib":
        try:
            import matplotlib
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(f"the held-out photo {name} ships with matplotlib, which is not installed "
                                      "(pip install -e '.[report]')") from exc
        with Image.open(Path(matplotlib.get_data_path()) / "sample_data" / what) as opened:
            img = np.asarray(opened.convert("RGB"))
    else:
        from skimage import data

        img = getattr(data, what)()
        img = img[0] if isinstance(img, tuple) else img  # stereo_motorcycle: (left, right, disparity)
    img = np.ascontiguousarray(img[..., :3]).astype(np.uint8)
    img.setflags(write=False)
    return img


def crops(name: str) -> list[tuple[str, np.ndarray]]:
    """The photo's CROPS_PER_PHOTO square crops, each (name, uint8 [CROP_SIZE, CROP_SIZE, 3])."""
    img = photo(name)
    h, w = img.shape[:2]
    out = []
    for scale, positions in SCALES:
        side = int(min(h, w) * scale)
        for a, b in positions:
            top, left = int((h - side) * a), int((w - side) * b)
            crop = Image.fromarray(img[top : top + side, left : left + side])
            out.append((f"{name}/{scale:g}@{a:g},{b:g}",
                        np.asarray(crop.resize((CROP_SIZE, CROP_SIZE), Image.Resampling.LANCZOS))))
    return out


@dataclass(frozen=True)
class Pair:
    """One question about one crop: its sentence, what it asks (kind "colour" or "place", word) and
    the answer from the pixels: present, and the cells that hold the word at the set's grid."""

    crop: int  # index into NaturalSet.images
    query: str
    kind: str
    word: str
    present: bool
    cells: np.ndarray  # bool [grid * grid]


@dataclass
class NaturalSet:
    split: str
    grid: int
    names: list[str]  # crop names, photo/scale@position
    images: list[np.ndarray]  # uint8 [CROP_SIZE, CROP_SIZE, 3]
    pairs: list[Pair]

    @property
    def photos(self) -> list[str]:
        return list(SPLITS[self.split])

    @property
    def sentences(self) -> list[str]:
        """Every distinct sentence the pairs ask, in first-asked order (encode these once)."""
        return list(dict.fromkeys(p.query for p in self.pairs))

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([self.split, self.grid, self.names]).encode())
        for image in self.images:
            h.update(image.tobytes())
        rows = [(p.crop, p.query, p.kind, p.word, p.present) for p in self.pairs]
        h.update(json.dumps(rows).encode())
        h.update(np.packbits(np.stack([p.cells for p in self.pairs])).tobytes())
        return h.hexdigest()

    def counts(self) -> dict:
        """{word: [present, absent]} over the pairs."""
        out: dict = {}
        for p in self.pairs:
            out.setdefault(p.word, [0, 0])[0 if p.present else 1] += 1
        return out


def natural_set(split: str, grid: int = 14, places: bool = True) -> NaturalSet:
    """Every crop of the split's photos with its colour pairs (present or absent, ambiguous ones left
    out) and, when `places`, its four place pairs; the cells at `grid`."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    names, images, pairs = [], [], []
    for photo_name in SPLITS[split]:
        for crop_name, pixels in crops(photo_name):
            index = len(images)
            names.append(crop_name)
            images.append(pixels)
            pairs += _colour_pairs(index, pixels, grid)
            if places:
                pairs += [Pair(index, PLACE_TEMPLATES[(index + i) % len(PLACE_TEMPLATES)].format(w=place),
                               "place", place, True, place_cells(place, grid)) for i, place in enumerate(PLACES)]
    return NaturalSet(split, grid, names, images, pairs)


def _colour_pairs(index: int, pixels: np.ndarray, grid: int) -> list[Pair]:
    pairs = []
    for i, (colour, mask) in enumerate(colour_masks(pixels).items()):
        share = float(mask.mean())
        if ABSENT < share < PRESENT:
            continue  # ambiguous: a trace of the colour, neither clearly there nor clearly not
        query = COLOUR_TEMPLATES[(index + i) % len(COLOUR_TEMPLATES)].format(w=colour)
        pairs.append(Pair(index, query, "colour", colour, share >= PRESENT, cell_shares(mask, grid) >= CELL_PRESENT))
    return pairs
