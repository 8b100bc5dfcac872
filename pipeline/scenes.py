"""Training and evaluation scenes with ground truth: what is where, and which patches it covers.

A scene is a 224 x 224 canvas split into four quadrants (112 px = 7 x 7 patches each). Two to
four quadrants hold one item, the rest show a noisy neutral background. An item is either
  * a photo that ships inside a package (scikit-image / scikit-learn: cat, astronaut, coffee
    cup, rocket, temple, flower), pasted as a rectangle, or
  * a rendered shape (circle, square, triangle) in one of six colours,
at a random size and position inside its quadrant. Items in one scene have distinct photos,
colours and shape kinds, so every query names exactly one item.

Queries come from templates ("the cat", "a red circle", "the red object", "the square",
"the object in the top left", ...). The ground truth of a query is the set of grid patches
(14 x 14) that its item covers by at least half of the patch's area.

Everything is a pure function of a scene seed; training and held-out scenes use disjoint seed
ranges (TRAIN_SEED_BASE, HELDOUT_SEED_BASE), so the held-out set never changes with the
training seed.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

IMAGE_SIZE = 224
GRID = 14
PATCH = IMAGE_SIZE // GRID
QUADRANT = IMAGE_SIZE // 2
MIN_ITEM, MAX_ITEM = 56, 108  # item side in pixels, inside a 112-px quadrant
COVER = 0.5  # a patch belongs to an item when the item covers at least this share of it
TRAIN_SEED_BASE = 1_000_000
HELDOUT_SEED_BASE = 9_000_000

# name in queries -> (loader package, image name)
PHOTOS = {
    "cat": ("skimage", "chelsea"),
    "astronaut": ("skimage", "astronaut"),
    "coffee cup": ("skimage", "coffee"),
    "rocket": ("skimage", "rocket"),
    "temple": ("sklearn", "china.jpg"),
    "flower": ("sklearn", "flower.jpg"),
}
COLOURS = {
    "red": (220, 30, 30), "green": (40, 170, 60), "blue": (30, 70, 220),
    "yellow": (240, 215, 30), "purple": (135, 40, 190), "pink": (245, 110, 180),
}  # no white / black: the photos hold large near-white / near-black areas (temple sky, flower
#    shadows), which would make "the black object" ambiguous
SHAPES = ("circle", "square", "triangle")
QUADRANTS = {"top left": (0, 0), "top right": (0, 1), "bottom left": (1, 0), "bottom right": (1, 1)}

PHOTO_TEMPLATES = ("the {name}", "{a} {name}", "a photo of {a} {name}", "where is the {name}?")
SHAPE_TEMPLATES = ("the {colour} {shape}", "a {colour} {shape}", "the {colour} object",
                   "something {colour}", "the {shape}")
PLACE_TEMPLATES = ("the object in the {place}", "{place}", "the thing at the {place}")


@dataclass
class Scene:
    seed: int
    image: np.ndarray  # [3,224,224] float32 RGB in [0,1]
    queries: list[str]
    masks: np.ndarray  # [len(queries), 196] bool: ground-truth patches of each query


@functools.lru_cache(maxsize=None)
def _photo(name: str) -> Image.Image:
    package, image = PHOTOS[name]
    if package == "sklearn":
        from sklearn.datasets import load_sample_image

        arr = load_sample_image(image)
    else:
        from skimage import data

        arr = getattr(data, image)()
    return Image.fromarray(np.ascontiguousarray(arr[..., :3]).astype(np.uint8))


def _background(rng: np.random.Generator) -> np.ndarray:
    """A muted, slightly tinted, noisy canvas [224,224,3] uint8: no item-like colour."""
    base = rng.uniform(95, 165) + rng.uniform(-12, 12, size=3)
    noise = rng.normal(0.0, 7.0, size=(IMAGE_SIZE, IMAGE_SIZE, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def _shape_mask(kind: str, side: int) -> Image.Image:
    mask = Image.new("L", (side, side), 0)
    draw = ImageDraw.Draw(mask)
    if kind == "circle":
        draw.ellipse((0, 0, side - 1, side - 1), fill=255)
    elif kind == "square":
        draw.rectangle((0, 0, side - 1, side - 1), fill=255)
    else:
        draw.polygon([(side / 2, 0), (side - 1, side - 1), (0, side - 1)], fill=255)
    return mask


def _patch_mask(coverage: np.ndarray) -> np.ndarray:
    """Pixel coverage [224,224] in [0,1] -> [196] bool, patches covered >= COVER."""
    share = coverage.reshape(GRID, PATCH, GRID, PATCH).mean(axis=(1, 3))
    return (share >= COVER).reshape(-1)


def _items(rng: np.random.Generator) -> list[dict]:
    """2-4 items with distinct photos, colours and shape kinds, one per chosen quadrant."""
    places = list(QUADRANTS)
    chosen = [places[i] for i in rng.choice(4, size=int(rng.integers(2, 5)), replace=False)]
    photos = list(rng.permutation(list(PHOTOS)))
    colours = list(rng.permutation(list(COLOURS)))
    shapes = list(rng.permutation(list(SHAPES)))
    items = []
    for place in chosen:
        if rng.random() < 0.5 and shapes:
            items.append({"kind": "shape", "shape": shapes.pop(), "colour": colours.pop(), "place": place})
        else:
            items.append({"kind": "photo", "name": photos.pop(), "place": place})
    return items


def _paste(canvas: Image.Image, item: dict, rng: np.random.Generator) -> np.ndarray:
    """Draw the item at a random size/offset in its quadrant; returns its pixel coverage."""
    side = int(rng.integers(MIN_ITEM, MAX_ITEM + 1))
    qy, qx = QUADRANTS[item["place"]]
    top = qy * QUADRANT + int(rng.integers(0, QUADRANT - side + 1))
    left = qx * QUADRANT + int(rng.integers(0, QUADRANT - side + 1))
    if item["kind"] == "photo":
        photo = _photo(item["name"])
        w, h = photo.size
        crop = min(w, h)
        x0, y0 = (w - crop) // 2, (h - crop) // 2
        tile = photo.crop((x0, y0, x0 + crop, y0 + crop)).resize((side, side), Image.Resampling.BILINEAR)
        mask = Image.new("L", (side, side), 255)
    else:
        mask = _shape_mask(item["shape"], side)
        tile = Image.new("RGB", (side, side), COLOURS[item["colour"]])
    canvas.paste(tile, (left, top), mask)
    coverage = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    coverage[top : top + side, left : left + side] = np.asarray(mask, dtype=np.float32) / 255.0
    return coverage


def _queries(item: dict, rng: np.random.Generator) -> list[str]:
    """Two phrasings naming the item by what it is, one by where it is."""
    if item["kind"] == "photo":
        article = "an" if item["name"][0] in "aeiou" else "a"
        names = [t.format(name=item["name"], a=article) for t in PHOTO_TEMPLATES]
    else:
        names = [t.format(colour=item["colour"], shape=item["shape"]) for t in SHAPE_TEMPLATES]
    place = [t.format(place=item["place"]) for t in PLACE_TEMPLATES]
    picked = [names[i] for i in rng.choice(len(names), size=2, replace=False)]
    return picked + [place[int(rng.integers(len(place)))]]


def make_scene(seed: int) -> Scene:
    """One scene and its queries, a pure function of `seed`."""
    rng = np.random.default_rng(seed)
    canvas = Image.fromarray(_background(rng))
    queries, masks = [], []
    for item in _items(rng):
        mask = _patch_mask(_paste(canvas, item, rng))
        if not mask.any():
            continue  # too small to own a patch: never ask for it
        for query in _queries(item, rng):
            queries.append(query)
            masks.append(mask)
    image = np.asarray(canvas, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return Scene(seed, np.ascontiguousarray(image), queries, np.stack(masks))


@dataclass
class SceneSet:
    """Scenes flattened to (scene, query) pairs for training and scoring."""

    images: np.ndarray  # [S,3,224,224] float32
    scene_of: np.ndarray  # [P] int64: pair -> scene index
    queries: list[str]  # [P]
    masks: np.ndarray  # [P,196] bool

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.images).tobytes())
        h.update(self.scene_of.tobytes())
        h.update(json.dumps(self.queries).encode())
        h.update(np.packbits(self.masks).tobytes())
        return h.hexdigest()


def make_scenes(count: int, base: int) -> SceneSet:
    """`count` scenes with seeds base, base+1, ...; deterministic."""
    scenes = [make_scene(base + i) for i in range(count)]
    return SceneSet(
        images=np.stack([s.image for s in scenes]),
        scene_of=np.concatenate([np.full(len(s.queries), i, dtype=np.int64) for i, s in enumerate(scenes)]),
        queries=[q for s in scenes for q in s.queries],
        masks=np.concatenate([s.masks for s in scenes]),
    )


def train_scenes(count: int) -> SceneSet:
    return make_scenes(count, TRAIN_SEED_BASE)


def heldout_scenes(count: int) -> SceneSet:
    return make_scenes(count, HELDOUT_SEED_BASE)
