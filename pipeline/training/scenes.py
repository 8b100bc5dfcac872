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

Open scenes (make_open_scene, issue 31; their own seed ranges) ask for what the texture's fixed
measures see: the fine texture, the colourless odd one out, the sharp one of two copies of a
named item. See the section above make_open_scene and docs/training.md.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

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
    kinds: list[str] = dataclasses.field(default_factory=list)  # per query: one of KINDS


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
    """Two phrasings naming the item by what it is, one by where it is (kinds: item["kind"], "place")."""
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
    queries, masks, kinds = [], [], []
    for item in _items(rng):
        mask = _patch_mask(_paste(canvas, item, rng))
        if not mask.any():
            continue  # too small to own a patch: never ask for it
        for query, kind in zip(_queries(item, rng), (item["kind"], item["kind"], "place")):
            queries.append(query)
            masks.append(mask)
            kinds.append(kind)
    image = np.asarray(canvas, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return Scene(seed, np.ascontiguousarray(image), queries, np.stack(masks), kinds)


# ---- Scenes where the query is open and the fixed ways of knowing decide (issue 31) ----------
#
# In the naming scenes above every query names exactly one item, so the learned participatory map
# alone solves the task and a balancer trained on them puts all of its weight there. Three more
# kinds of scene (one per seed, by seed % 3), each with two queries, ask for what the texture's
# own measures see: the information map (entropy of the channel softmax: high on colourless,
# mid-tone and textured patches, low on saturated or very bright / dark fills) and the
# perspectival map (Sobel magnitude: edges and fine detail).
#   detail   - one item is a fine grey texture (brick, grass, gravel, shipped in scikit-image),
#              maybe tinted; the others are flat shapes and blurred photos. Open queries ("the
#              busiest part", "the most detailed region", "what stands out?") mean the texture.
#   salient  - the same photo or shape twice, one sharp, one blurred (out of focus), plus 0-2 other
#              sharp items. A query naming it ("the cat", "a red circle") means the sharp one: the
#              name matches both, salience decides.
#   unusual  - a saturated, tinted background with colourful items (shapes, colour photos) and one
#              colourless item (a grey photo or a grey shape). Open queries ("anything unusual",
#              "the odd one out", "what stands out?") mean the colourless one.
# "what stands out?" appears in detail and unusual scenes alike: which item it means depends on
# the photo, not on the words.

# skimage.data; not "text": its sparse letters on white were less busy than some scenes' background
TEXTURES = {"brick": "brick", "grass": "grass", "gravel": "gravel"}
GREYS = {"camera": "camera", "moon": "moon", "coins": "coins", "clock": "clock"}  # skimage.data, grey
DETAIL_TEMPLATES = ("the busiest part", "the most detailed region", "where is the fine detail?",
                    "the most textured area", "what stands out?")
UNUSUAL_TEMPLATES = ("anything unusual", "the odd one out", "what doesn't belong?",
                     "something different", "what stands out?")
UNUSUAL_BACKGROUNDS = ("red", "yellow", "blue")
UNUSUAL_SHAPE_SHARE = 1.0
OPEN_KINDS = ("detail", "salient", "unusual")
KINDS = ("photo", "shape", "place", *OPEN_KINDS, "natural")
# Query families of the report: what a query asks for.
FAMILIES = {"naming": ("photo", "shape"), "position": ("place",), "open": ("detail", "unusual"),
            "named_salient": ("salient",), "natural_colour": ("natural",)}
BLUR = (2.5, 4.5)  # Gaussian blur radius (px) of an out-of-focus item
OPEN_TRAIN_SEED_BASE = 3_000_000
OPEN_HELDOUT_SEED_BASE = 9_500_000


@functools.lru_cache(maxsize=None)
def _skimage_grey(name: str) -> Image.Image:
    from skimage import data

    return Image.fromarray(np.ascontiguousarray(getattr(data, name)()).astype(np.uint8)).convert("RGB")


def _square(photo: Image.Image, side: int, rng: np.random.Generator | None = None) -> Image.Image:
    """A square crop resized to side x side: the centre one, or a random one of 1/3..all of the
    short side when `rng` is given (textures)."""
    w, h = photo.size
    crop = min(w, h) if rng is None else int(rng.integers(min(w, h) // 3, min(w, h) + 1))
    x0 = (w - crop) // 2 if rng is None else int(rng.integers(0, w - crop + 1))
    y0 = (h - crop) // 2 if rng is None else int(rng.integers(0, h - crop + 1))
    return photo.crop((x0, y0, x0 + crop, y0 + crop)).resize((side, side), Image.Resampling.BILINEAR)


def _place(place: str, rng: np.random.Generator) -> tuple[int, int, int]:
    side = int(rng.integers(MIN_ITEM, MAX_ITEM + 1))
    qy, qx = QUADRANTS[place]
    top = qy * QUADRANT + int(rng.integers(0, QUADRANT - side + 1))
    left = qx * QUADRANT + int(rng.integers(0, QUADRANT - side + 1))
    return side, top, left


def _put(canvas: Image.Image, tile: Image.Image, mask: Image.Image | None, top: int, left: int) -> np.ndarray:
    """Paste `tile` (square) through `mask` (None: opaque); returns its patch mask [196]."""
    side = tile.size[0]
    mask = mask or Image.new("L", (side, side), 255)
    canvas.paste(tile, (left, top), mask)
    coverage = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    coverage[top : top + side, left : left + side] = np.asarray(mask, dtype=np.float32) / 255.0
    return _patch_mask(coverage)


def _item_tile(item: dict, side: int, blur: float = 0.0) -> tuple[Image.Image, Image.Image | None]:
    """A naming-scene item (photo or shape) as tile + mask, out of focus when blur > 0."""
    if item["kind"] == "photo":
        tile, mask = _square(_photo(item["name"]), side), None
        if blur:
            tile = tile.filter(ImageFilter.GaussianBlur(blur))
    else:
        tile, mask = Image.new("RGB", (side, side), COLOURS[item["colour"]]), _shape_mask(item["shape"], side)
        if blur:
            mask = mask.filter(ImageFilter.GaussianBlur(blur))
    return tile, mask


def _open_queries(templates: tuple[str, ...], rng: np.random.Generator) -> list[str]:
    return [templates[i] for i in rng.choice(len(templates), size=2, replace=False)]


def _detail_scene(rng: np.random.Generator, canvas: Image.Image):
    places = [list(QUADRANTS)[i] for i in rng.choice(4, size=int(rng.integers(2, 5)), replace=False)]
    side, top, left = _place(places[0], rng)
    tile = _square(_skimage_grey(list(TEXTURES)[int(rng.integers(len(TEXTURES)))]), side, rng)
    if rng.random() < 0.5:  # tinted: detail is not "grey"
        tint = np.array(list(COLOURS.values())[int(rng.integers(len(COLOURS)))], dtype=np.float32) / 255.0
        tile = Image.fromarray((np.asarray(tile, dtype=np.float32) * (0.4 + 0.6 * tint)).astype(np.uint8))
    target = _put(canvas, tile, None, top, left)
    for place in places[1:]:
        side, top, left = _place(place, rng)
        if rng.random() < 0.5:
            item = {"kind": "shape", "shape": SHAPES[int(rng.integers(3))],
                    "colour": list(COLOURS)[int(rng.integers(len(COLOURS)))]}
            _put(canvas, *_item_tile(item, side), top, left)
        else:
            item = {"kind": "photo", "name": list(PHOTOS)[int(rng.integers(len(PHOTOS)))]}
            _put(canvas, *_item_tile(item, side, float(rng.uniform(*BLUR))), top, left)
    queries = _open_queries(DETAIL_TEMPLATES, rng)
    return queries, [target] * len(queries), ["detail"] * len(queries)


def _salient_scene(rng: np.random.Generator, canvas: Image.Image):
    items = _items(rng)  # distinct items, one per quadrant; at least two quadrants
    while len(items) < 2:  # pragma: no cover - _items always gives 2-4
        items = _items(rng)
    free = [p for p in QUADRANTS if p not in {it["place"] for it in items}]
    places = [items[0]["place"], *free, *[it["place"] for it in items[1:]]]
    # the first item twice: sharp in its own quadrant, blurred in the next place; others after
    side, top, left = _place(places[0], rng)
    target = _put(canvas, *_item_tile(items[0], side), top, left)
    side, top, left = _place(places[1], rng)
    _put(canvas, *_item_tile(items[0], side, float(rng.uniform(*BLUR))), top, left)
    for item, place in zip(items[1:], places[2:]):
        side, top, left = _place(place, rng)
        _put(canvas, *_item_tile(item, side), top, left)
    names = _queries(items[0], rng)[:2]
    return names, [target] * 2, ["salient"] * 2


def _unusual_scene(rng: np.random.Generator, canvas: Image.Image):
    colour_names = list(rng.permutation(list(COLOURS)))
    background = UNUSUAL_BACKGROUNDS[int(rng.integers(len(UNUSUAL_BACKGROUNDS)))]
    colour_names.remove(background)
    base = np.array(COLOURS[background], dtype=np.float32)
    mix = rng.uniform(0.55, 0.9)
    bg = base * mix + 128.0 * (1 - mix) + rng.normal(0.0, 7.0, size=(IMAGE_SIZE, IMAGE_SIZE, 3))
    canvas.paste(Image.fromarray(np.clip(bg, 0, 255).astype(np.uint8)))
    places = [list(QUADRANTS)[i] for i in rng.choice(4, size=int(rng.integers(3, 5)), replace=False)]
    side, top, left = _place(places[0], rng)
    if rng.random() < 0.5:
        tile, mask = _square(_skimage_grey(list(GREYS)[int(rng.integers(len(GREYS)))]), side), None
    else:
        grey = int(rng.integers(90, 200))
        tile, mask = Image.new("RGB", (side, side), (grey,) * 3), _shape_mask(SHAPES[int(rng.integers(3))], side)
    target = _put(canvas, tile, mask, top, left)
    photos = list(rng.permutation(list(PHOTOS)))
    for place in places[1:]:
        side, top, left = _place(place, rng)
        if rng.random() < UNUSUAL_SHAPE_SHARE:
            item = {"kind": "shape", "shape": SHAPES[int(rng.integers(3))], "colour": colour_names.pop()}
        else:
            item = {"kind": "photo", "name": photos.pop()}
        _put(canvas, *_item_tile(item, side), top, left)
    queries = _open_queries(UNUSUAL_TEMPLATES, rng)
    return queries, [target] * len(queries), ["unusual"] * len(queries)


def make_open_scene(seed: int) -> Scene:
    """One detail / salient / unusual scene (seed % 3) and its two queries, a pure function of `seed`."""
    rng = np.random.default_rng(seed)
    canvas = Image.fromarray(_background(rng))
    kind = OPEN_KINDS[seed % len(OPEN_KINDS)]
    queries, masks, kinds = {"detail": _detail_scene, "salient": _salient_scene,
                             "unusual": _unusual_scene}[kind](rng, canvas)
    image = np.asarray(canvas, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return Scene(seed, np.ascontiguousarray(image), queries, np.stack(masks), kinds)


# ---- Natural scenes: the basic colour terms on real photos ----------------------------------
#
# The naming scenes' colours are six flat fills; a real photo's colours are shaded, textured and
# mixed. A natural scene is a crop of a training-split photo (stages/natural_photos.py SPLITS
# "train": the photos PHOTOS names, never a calibration or held-out one), whole or as 2-4 tiles on
# the neutral canvas, sometimes with a shape of one of the 11 basic colours pasted on it (the
# colours the training photos lack: yellow, green, purple, pink). Its queries are colour words
# labelled from its own pixels by the same rules as the natural photo set (natural_photos.py
# COLOUR_RULES): up to NATURAL_PRESENT colours the scene has (>= 6% of its pixels; the ground truth
# is the cells the colour fills by at least NATURAL_CELL, or by 6% where none does) and up to
# NATURAL_ABSENT it has not (<= 0.5%): kind "absent", an empty ground truth. Absent pairs train
# the query's evidence (train.py presence loss), never the relevance.

NATURAL_TRAIN_SEED_BASE = 5_000_000
NATURAL_HELDOUT_SEED_BASE = 9_700_000
NATURAL_PRESENT, NATURAL_ABSENT = 2, 2
NATURAL_CELL = 0.25
ABSENT_KIND = "absent"  # not in KINDS: no ground-truth cells, so no R-precision
NATURAL_TEMPLATES = ("something {c}", "the {c} object", "anything {c}?", "{c}", "the {c} part",
                     "the {c} thing", "where is the {c}?", "is there something {c} here?")
BASIC_SWATCHES = {  # a representative of each basic colour term, jittered per shape
    "red": (205, 25, 30), "orange": (240, 130, 20), "yellow": (235, 215, 40), "green": (50, 150, 55),
    "blue": (35, 70, 200), "purple": (120, 45, 170), "pink": (240, 120, 190), "brown": (110, 65, 25),
    "white": (240, 240, 236), "grey": (128, 128, 126), "black": (15, 15, 18),
}


def _natural_crop(rng: np.random.Generator, side: int) -> Image.Image:
    return _square(_photo(list(PHOTOS)[int(rng.integers(len(PHOTOS)))]), side, rng)


def _natural_canvas(rng: np.random.Generator) -> Image.Image:
    """A whole crop of a training photo, or 2-4 crops as tiles on the neutral canvas; half of the
    time with one basic-colour shape on top."""
    if rng.random() < 0.5:
        canvas = _natural_crop(rng, IMAGE_SIZE)
    else:
        canvas = Image.fromarray(_background(rng))
        for i in rng.choice(4, size=int(rng.integers(2, 5)), replace=False):
            side, top, left = _place(list(QUADRANTS)[int(i)], rng)
            canvas.paste(_natural_crop(rng, side), (left, top))
    if rng.random() < 0.5:
        colour = list(BASIC_SWATCHES)[int(rng.integers(len(BASIC_SWATCHES)))]
        rgb = np.clip(np.array(BASIC_SWATCHES[colour]) + rng.integers(-12, 13, size=3), 0, 255)
        side = int(rng.integers(40, 100))
        top, left = (int(v) for v in rng.integers(0, IMAGE_SIZE - side, size=2))
        canvas.paste(Image.new("RGB", (side, side), tuple(int(v) for v in rgb)), (left, top),
                     _shape_mask(SHAPES[int(rng.integers(3))], side))
    return canvas


def make_natural_scene(seed: int) -> Scene:
    """One natural scene and its colour queries (present and absent), a pure function of `seed`."""
    from arrcoc_edge.stages import natural_photos as nat

    rng = np.random.default_rng(seed)
    pixels = np.asarray(_natural_canvas(rng), dtype=np.uint8)
    present, absent = [], []
    for colour, mask in nat.colour_masks(pixels).items():
        share = float(mask.mean())
        if share >= nat.PRESENT:
            cells = nat.cell_shares(mask, GRID)
            present.append((colour, cells >= NATURAL_CELL if (cells >= NATURAL_CELL).any() else cells >= nat.CELL_PRESENT))
        elif share <= nat.ABSENT:
            absent.append((colour, np.zeros(GRID * GRID, dtype=bool)))
    chosen = [present[i] for i in rng.permutation(len(present))[:NATURAL_PRESENT]]
    chosen += [absent[i] for i in rng.permutation(len(absent))[:NATURAL_ABSENT]]
    queries = [NATURAL_TEMPLATES[int(rng.integers(len(NATURAL_TEMPLATES)))].format(c=c) for c, _ in chosen]
    kinds = ["natural"] * min(len(present), NATURAL_PRESENT) + [ABSENT_KIND] * (len(chosen) - min(len(present), NATURAL_PRESENT))
    image = pixels.astype(np.float32).transpose(2, 0, 1) / 255.0
    return Scene(seed, np.ascontiguousarray(image), queries, np.stack([m for _, m in chosen]), kinds)


@dataclass
class SceneSet:
    """Scenes flattened to (scene, query) pairs for training and scoring."""

    images: np.ndarray  # [S,3,224,224] float32
    scene_of: np.ndarray  # [P] int64: pair -> scene index
    queries: list[str]  # [P]
    masks: np.ndarray  # [P,196] bool
    kinds: list[str]  # [P]: one of KINDS

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.images).tobytes())
        h.update(self.scene_of.tobytes())
        h.update(json.dumps(self.queries).encode())
        h.update(np.packbits(self.masks).tobytes())
        h.update(json.dumps(self.kinds).encode())
        return h.hexdigest()


def _flatten(scenes: list[Scene]) -> SceneSet:
    return SceneSet(
        images=np.stack([s.image for s in scenes]),
        scene_of=np.concatenate([np.full(len(s.queries), i, dtype=np.int64) for i, s in enumerate(scenes)]),
        queries=[q for s in scenes for q in s.queries],
        masks=np.concatenate([s.masks for s in scenes]),
        kinds=[k for s in scenes for k in s.kinds],
    )


def make_scenes(count: int, base: int, open_count: int = 0, open_base: int | None = None,
                natural_count: int = 0, natural_base: int | None = None) -> SceneSet:
    """`count` naming scenes with seeds base, base+1, ..., then `open_count` open scenes with seeds
    open_base, ..., then `natural_count` natural scenes with seeds natural_base, ...; deterministic."""
    scenes = [make_scene(base + i) for i in range(count)]
    if open_count:
        scenes += [make_open_scene(open_base + i) for i in range(open_count)]
    if natural_count:
        scenes += [make_natural_scene(natural_base + i) for i in range(natural_count)]
    return _flatten(scenes)


def train_scenes(count: int, open_count: int = 0, natural_count: int = 0) -> SceneSet:
    return make_scenes(count, TRAIN_SEED_BASE, open_count, OPEN_TRAIN_SEED_BASE, natural_count, NATURAL_TRAIN_SEED_BASE)


def heldout_scenes(count: int, open_count: int = 0, natural_count: int = 0) -> SceneSet:
    return make_scenes(count, HELDOUT_SEED_BASE, open_count, OPEN_HELDOUT_SEED_BASE, natural_count,
                       NATURAL_HELDOUT_SEED_BASE)
