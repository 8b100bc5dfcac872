"""The web target: one real build (onnx, onnx-int8, text-encoder -> web: the session's shared
conftest.published_with_encoder), then the page in Debian's headless Chromium.

One build and one browser per session. Every page test fails on a console error unless it says why.
The page takes whole photos: uint8 [1,H,W,3] as the browser decodes them, no crop, no resize.
"""
from __future__ import annotations

import io
import json
import re
import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.browser]
playwright = pytest.importorskip("playwright.sync_api", reason="the web extra (playwright) is not installed")

from arrcoc_edge.targets.web import chromium, decode_gap, site_files, text_checks
from arrcoc_edge.targets.web import target as web_target

if not chromium.CHROMIUM.is_file():
    pytest.skip("Debian chromium is missing: run scripts/setup.sh as root", allow_module_level=True)

SHOTS = REPO / "test-output"
GRID_CELL_TOL = 1e-6


@pytest.fixture(scope="session")
def built(published_with_encoder) -> tuple[Path, dict]:
    """The session's shared build with web (conftest published_with_encoder, the shipped
    checkpoint; read only) and its manifest's web entry."""
    entry = json.loads((published_with_encoder / "manifest.json").read_text())["targets"]["web"]
    assert entry["status"] == "published", entry
    return published_with_encoder, entry


@pytest.fixture(scope="session")
def site(built):
    from arrcoc_edge.serve import serving

    with serving(built[0] / "web") as url:
        yield url


@pytest.fixture(scope="session")
def browser(site):
    # the same shared driver the verifier uses: Playwright's sync API allows one per thread
    yield chromium.CHROMIUM_HOST.acquire()
    chromium.CHROMIUM_HOST.release()


class Page:
    """A fresh page with its console errors collected."""

    def __init__(self, browser, url, viewport: dict | None = None):
        self.errors: list[str] = []
        self.p = browser.new_page(viewport=viewport) if viewport else browser.new_page()
        self.p.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.p.on("pageerror", lambda e: self.errors.append(str(e)))
        self.url = url

    def open(self, query: str = "", state: str = "ready"):
        self.p.goto(self.url + query)
        self.p.wait_for_function("document.body.dataset.state !== 'loading'", timeout=60_000)
        assert self.p.evaluate("document.body.dataset.state") == state, self.p.text_content("#message")
        return self

    def result_count(self) -> int:
        return self.p.evaluate("window.arrcoc.last() ? 1 : 0")

    def wait_result_change(self, action):
        before = self.p.evaluate("window.arrcoc.last() && window.arrcoc.last().ms")
        action()
        self.p.wait_for_function(f"window.arrcoc.last() && window.arrcoc.last().ms !== {json.dumps(before)}")

    def message(self, timeout=20_000) -> str:
        self.p.wait_for_selector("#message:not([hidden])", timeout=timeout)
        return self.p.text_content("#message")


@pytest.fixture
def page(browser, site):
    pg = Page(browser, site)
    yield pg
    pg.p.close()
    assert pg.errors == [], f"console errors: {pg.errors}"


def shows_ms(text: str, pattern: str, *measured: float) -> None:
    """The times the page printed (toFixed(1)) are the measured ones. Parsed, not formatted here:
    JS rounds a tie such as 190.25 up and Python's format rounds it to even (a flaky miss, seen)."""
    found = re.search(pattern, text)
    assert found, (pattern, text)
    for got, want in zip(found.groups(), measured):
        assert float(got) == pytest.approx(want, abs=0.0501), (text, measured)


def heat_pixels(pg: Page) -> int:
    """Non-transparent pixels on the heatmap canvas."""
    return pg.p.evaluate(
        "(() => { const c = document.getElementById('heat');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; })()"
    )


def png_bytes(img: Image.Image, fmt="PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def photo(size=(300, 200), mode="RGB") -> Image.Image:
    from skimage import data

    return Image.fromarray(data.chelsea()).resize(size).convert(mode)


# ------------------------------------------------------------------ the build


def test_build_publishes_a_self_contained_site_within_budget(built):
    out, _ = built
    entry = json.loads((out / "manifest.json").read_text())["targets"]["web"]
    assert entry["status"] == "published"
    fp32 = entry["variants"]["fp32"] if "variants" in entry else entry
    paths = {f["path"] for f in entry["files"]}
    for name in ("web/index.html", "web/app.js", "web/ort/ort-wasm-simd-threaded.wasm", "web/models/model.onnx",
                 "web/presets.json", "web/selfcheck.bin", "web/config.json", "web/samples/cat.png",
                 "web/lib/tokenizers.min.mjs"):
        assert name in paths
    assert "web/tokenizer.js" not in paths  # the hand-written tokenizer is gone: the library tokenizes
    # the vendored library is the pinned npm package's own file, byte for byte
    lib = site_files.npm_dist("@huggingface/tokenizers") / "tokenizers.min.mjs"
    assert (out / "web" / "lib" / "tokenizers.min.mjs").read_bytes() == lib.read_bytes()
    assert site_files.npm_version("@huggingface/tokenizers") == site_files.pinned_version("@huggingface/tokenizers") == "0.2.0"
    total = sum(f["bytes"] for f in entry["files"])
    assert entry["size"]["total_bytes"] == total
    assert total <= entry["size"]["budget"]  # the whole site, golden bundle included, within the recorded budget
    assert "onnxruntime-web" in json.dumps(fp32)
    presets = json.loads((out / "web" / "presets.json").read_text())
    emb = np.asarray(presets["embeddings"], dtype=np.float32)
    assert emb.shape == (len(presets["queries"]), 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    # a real encoder: related phrases are closer than unrelated ones
    q = presets["queries"]
    assert emb[q.index("something red")] @ emb[q.index("something blue")] > \
        emb[q.index("something red")] @ emb[q.index("the most detailed region")]


def test_parity_was_measured_in_the_browser_against_python_onnxruntime(built, golden):
    """Every held-out sample went through the page's model: the crops and each whole photo at its
    own size, the 12 MP one included (the verifier fails on a missing sample, it does not skip)."""
    _, entry = built
    assert entry["primary_variant"] == "fp32"
    fp32 = entry["variants"]["fp32"]
    parity, metrics = fp32["parity"], fp32["parity"]["metrics"]
    assert fp32["status"] == "verified" and parity["measured"] and parity["passed"]
    assert "Chromium" in parity["runtime"] and "onnxruntime-web" in parity["runtime"]
    assert "Python onnxruntime" in parity["reference"]
    assert metrics["relevance_max_abs"] <= 1e-4 and metrics["topk_overlap_mean"] == 1.0
    heldout = golden.heldout
    assert metrics["samples"] == len(heldout)
    # every sample of each query kind compared (the sentences and the seeded vectors)
    assert {k: v["samples"] for k, v in parity["subsets"].items()} == {k: len(v) for k, v in heldout.subsets.items()}
    sizes = {heldout.images[i].shape[:2] for i in heldout.whole}
    assert (3024, 4032) in sizes and len(sizes) >= 6  # the 12 MP photo and the other whole-photo sizes
    assert set(entry["variants"]) <= {"fp32", "int8"}
    for name, variant in entry["variants"].items():  # INT8, when the onnx-int8 stage published
        if name != "fp32":
            assert variant["status"] == "verified" and "Chromium" in variant["parity"]["runtime"]
            assert variant["parity"]["metrics"]["topk_overlap_mean"] >= 0.95
            assert variant["parity"]["metrics"]["samples"] == len(heldout)


def test_selfcheck_bundle_has_golden_per_sample_format_with_a_whole_photo(built, golden):
    """selfcheck.json lists samples as golden.json does: each a batch-1 run with its uint8 photo
    at its own size, its query and, per model, Python onnxruntime's outputs on exactly those bytes."""
    import onnxruntime as ort

    from arrcoc_edge.stages.golden import BUNDLE_WHOLE, bundle_samples

    site = built[0] / "web"
    meta = json.loads((site / "selfcheck.json").read_text())
    data = (site / "selfcheck.bin").read_bytes()
    heldout = golden.heldout
    want = [heldout.names[i] for i in bundle_samples(heldout)]
    assert [s["name"] for s in meta["samples"]] == want and BUNDLE_WHOLE in want
    models = {m["name"]: m["file"] for m in json.loads((site / "config.json").read_text())["models"]}

    def arr(a):
        return np.frombuffer(data[a["offset"]: a["offset"] + a["bytes"]], np.dtype(a["dtype"]).newbyteorder("<")).reshape(a["shape"])

    for sample in meta["samples"]:
        i = heldout.names.index(sample["name"])
        image = arr(sample["arrays"]["image"])
        assert image.dtype == np.uint8 and image.shape == (1, *heldout.images[i].shape)
        np.testing.assert_array_equal(image[0], heldout.images[i])
        for name, file in models.items():
            sess = ort.InferenceSession(str(site / file), providers=["CPUExecutionProvider"])
            rel = sess.run(["relevance"], {"image": image, "query": arr(sample["arrays"]["query"])})[0]
            np.testing.assert_array_equal(rel, arr(sample["arrays"][f"{name}.relevance"]))
    whole = meta["samples"][want.index(BUNDLE_WHOLE)]["arrays"]["image"]["shape"]
    assert whole[1] != whole[2]  # non-square


def test_server_sends_cross_origin_isolation_headers(site):
    with urllib.request.urlopen(site + "ort/ort-wasm-simd-threaded.wasm") as r:
        assert r.headers["Cross-Origin-Opener-Policy"] == "same-origin"
        assert r.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
        assert r.headers["Content-Type"] == "application/wasm"


def test_missing_browser_is_a_host_capability_error(monkeypatch):
    from arrcoc_edge.errors import HostCapabilityError

    monkeypatch.setattr(chromium, "CHROMIUM", Path("/nonexistent/chromium"))
    with pytest.raises(HostCapabilityError, match="chromium") as exc:
        chromium.require_browser()
    assert "setup.sh" in exc.value.fix


# ------------------------------------------------------------------ the page


def test_page_loads_and_draws_a_heatmap_on_sample_photos(page):
    pg = page.open("?threads=2")
    assert pg.p.evaluate("self.crossOriginIsolated") is True
    assert pg.p.evaluate("window.arrcoc.threads()") == 2
    assert heat_pixels(pg) > 0
    last = pg.p.evaluate("window.arrcoc.last()")
    assert len(last["relevance"]) == 196 and len(last["topk"]) == 64
    assert abs(sum(last["weights"]) - 1.0) < 1e-5
    assert "ms" in pg.p.text_content("#latency") and "FP32" in pg.p.text_content("#ran-model")
    assert pg.p.text_content("#threads").startswith("2")
    # the sample is a whole photo, handed over at its own size
    samples = {s["name"]: s for s in json.loads(urllib.request.urlopen(pg.url + "config.json").read())["samples"]}
    w, h = samples["cat"]["size"]
    assert (w, h) == (451, 300)
    assert pg.p.evaluate("window.arrcoc.lastInput()") == {"shape": [1, h, w, 3], "dtype": "uint8", "bytes": h * w * 3}
    pg.wait_result_change(lambda: pg.p.click("button[data-sample=coffee]"))
    w, h = samples["coffee"]["size"]
    assert pg.p.evaluate("window.arrcoc.lastInput().shape") == [1, h, w, 3]
    assert heat_pixels(pg) > 0
    # another preset query gives another map
    before = pg.p.evaluate("window.arrcoc.last().relevance")
    pg.wait_result_change(lambda: pg.p.select_option("#query", label="something red"))
    assert pg.p.evaluate("window.arrcoc.last().relevance") != before
    if pg.p.locator("#model option[value=int8]").count():  # the onnx-int8 stage published
        pg.wait_result_change(lambda: pg.p.select_option("#model", "int8"))
        assert "INT8" in pg.p.text_content("#ran-model") and heat_pixels(pg) > 0
    SHOTS.mkdir(exist_ok=True)
    pg.p.screenshot(path=str(SHOTS / "web-demo.png"), full_page=True)
    assert (SHOTS / "web-demo.png").stat().st_size > 10_000


def test_upload_via_file_input_respects_exif_orientation(page, tmp_path):
    pg = page.open()
    img = photo((300, 200))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    path = tmp_path / "rotated.jpg"
    path.write_bytes(png_bytes(img, "JPEG", exif=exif.tobytes()))
    pg.wait_result_change(lambda: pg.p.set_input_files("#file", str(path)))
    assert pg.p.evaluate("window.arrcoc.imageSize()") == [200, 300]
    assert pg.p.evaluate("window.arrcoc.lastInput().shape") == [1, 300, 200, 3]  # upright: 300 rows of 200
    assert heat_pixels(pg) > 0
    webp = tmp_path / "photo.webp"
    webp.write_bytes(png_bytes(photo((320, 240)), "WEBP"))
    pg.wait_result_change(lambda: pg.p.set_input_files("#file", str(webp)))
    assert pg.p.evaluate("window.arrcoc.imageSize()") == [320, 240]


def test_the_page_lists_the_strongest_cells_and_reads_the_publish_s_calibration(page, built):
    """The page's calibration is the publish's calibration.json (served beside the site), its
    confidence Python's on the page's own evidence, the list holds the strongest few cells, and
    only the strongest cells are outlined until every top-K cell is asked for."""
    from arrcoc_edge.relevance.evidence import CALIBRATION_FILE, Calibration, percent
    from arrcoc_edge.relevance.signature import strongest_cells

    pg = page.open()
    pg.wait_result_change(lambda: pg.p.select_option("#query", label="something red"))
    last = pg.p.evaluate("window.arrcoc.last()")
    assert len(last["evidence"]) == 4
    published = built[0] / CALIBRATION_FILE
    if published.exists():
        calibration = Calibration.read(published)
        assert pg.p.evaluate("window.arrcoc.calibration()") == {"coef": list(calibration.coef), "bias": calibration.bias}
        want = float(calibration.confidence(np.asarray(last["evidence"], np.float32)))
        assert last["confidence"] == pytest.approx(want, abs=1e-9) and last["standsOut"] is (want >= 0.5)
        assert percent(want) in pg.p.text_content("#answer")
    else:
        assert last["confidence"] is None and pg.p.get_attribute("#answer", "data-stands-out") == "unknown"
    cells = pg.p.locator("#topk li").all_text_contents()
    ranked = sorted(last["topk"], key=lambda i: -last["relevance"][i])
    assert len(cells) == 5 and cells[0].startswith(f"row {ranked[0] // 14}, col {ranked[0] % 14}: 1.000")
    assert pg.p.evaluate("window.arrcoc.overlay().cells") == ranked[:strongest_cells(196)]
    pg.p.check("#show-topk")
    assert sorted(pg.p.evaluate("window.arrcoc.overlay().cells")) == sorted(last["topk"])
    assert "all 64 outlined" in pg.p.text_content("#topk-note")


def test_the_page_reads_the_folder_s_calibration_as_python_does(browser, built, tmp_path):
    """A copy of the published site, first without calibration.json (the page says there is none),
    then beside one of the test's own coefficients, as `invoke serve` serves a publish (the file
    beside manifest.json, web/ served): the page's confidence and verdict are arrcoc_edge.relevance.evidence's on the page's own evidence, for a
    red disc on a grey table (stands out) and the bare table (does not)."""
    from PIL import ImageDraw

    from arrcoc_edge.relevance.evidence import CALIBRATION_FILE, Calibration, percent
    from arrcoc_edge.serve import serving

    shutil.copytree(built[0] / "web", tmp_path / "pub" / "web")
    rng = np.random.default_rng(0)
    table = np.clip(128 + rng.normal(0, 7, (480, 640, 3)), 0, 255).astype(np.uint8)
    disc = Image.fromarray(table)
    ImageDraw.Draw(disc).ellipse((380, 60, 540, 220), fill=(220, 30, 30))
    with serving(tmp_path / "pub" / "web") as url:
        pg = Page(browser, url)
        try:
            pg.p.goto(url)  # a publish without calibration first: no number, and the page says so
            pg.p.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
            assert pg.p.evaluate("window.arrcoc.calibration()") == {"missing": True}
            pg.wait_result_change(lambda: pg.p.select_option("#query", label="something red"))
            assert pg.p.evaluate("window.arrcoc.last().confidence") is None
            assert pg.p.text_content("#answer").startswith("Confidence unknown: no calibration in this folder")
            found = {}
            for name, img in (("red-disc", disc), ("plain", Image.fromarray(table))):
                img.save(tmp_path / f"{name}.png")
                pg.wait_result_change(lambda: pg.p.set_input_files("#file", str(tmp_path / f"{name}.png")))
                found[name] = np.asarray(pg.p.evaluate("window.arrcoc.last().evidence"), np.float64)
            # a calibration whose cut lies between the two photos' evidence: both verdicts occur
            coef = np.array([20.0, 0.0, 0.0, 10.0])  # the strongest cells and the highest one
            middle = (found["red-disc"] + found["plain"]) / 2
            calibration = Calibration(tuple(coef), float(-coef @ middle), {"purpose": "tests/test_web.py"})
            (tmp_path / "pub" / CALIBRATION_FILE).write_text(json.dumps(calibration.to_dict()))
            pg.open()
            pg.wait_result_change(lambda: pg.p.select_option("#query", label="something red"))
            seen = {}
            for name in found:
                pg.wait_result_change(lambda: pg.p.set_input_files("#file", str(tmp_path / f"{name}.png")))
                last = pg.p.evaluate("window.arrcoc.last()")
                want = float(calibration.confidence(np.asarray(last["evidence"], np.float32)))
                assert last["confidence"] == pytest.approx(want, abs=1e-9)
                assert last["standsOut"] is (want >= 0.5)
                assert percent(want) in pg.p.text_content("#answer")
                seen[name] = (last["standsOut"], pg.p.text_content("#answer"))
            assert seen["red-disc"][0] is True and seen["red-disc"][1].startswith("Stands out:")
            assert seen["plain"][0] is False and seen["plain"][1].startswith("Nothing in this photo stands out")
            assert pg.errors == [], pg.errors
        finally:
            pg.p.close()


def test_upload_via_drop_with_transparency(page):
    pg = page.open()
    data = png_bytes(photo((256, 320), "RGBA"))
    drop = pg.p.evaluate_handle(
        "([bytes]) => { const dt = new DataTransfer();"
        " dt.items.add(new File([new Uint8Array(bytes)], 'dropped.png', {type: 'image/png'})); return dt; }",
        [list(data)],
    )
    pg.wait_result_change(lambda: pg.p.dispatch_event("#drop", "drop", {"dataTransfer": drop}))
    assert pg.p.evaluate("window.arrcoc.imageSize()") == [256, 320]
    assert heat_pixels(pg) > 0
    assert pg.p.is_hidden("#message")


# ------------------------------------------------------------------ whole photos


def _python_fp32(site: Path, image: np.ndarray, query: np.ndarray) -> dict:
    """Python onnxruntime on the page's FP32 model file: uint8 [H,W,3] photo, float32 [D] query."""
    import onnxruntime as ort

    from arrcoc_edge.relevance.model import OUTPUT_NAMES

    sess = ort.InferenceSession(str(site / "models" / "model.onnx"), providers=["CPUExecutionProvider"])
    outs = sess.run(list(OUTPUT_NAMES), {"image": image[None], "query": query[None].astype(np.float32)})
    return dict(zip(OUTPUT_NAMES, outs))


def _preset(site: Path, index: int = 0) -> np.ndarray:
    return np.asarray(json.loads((site / "presets.json").read_text())["embeddings"][index], dtype=np.float32)


def _open_photo(pg: Page, tmp_path, array: np.ndarray, name: str, fmt: str = "PNG", timeout: int = 30_000, **kw):
    path = tmp_path / name
    path.write_bytes(png_bytes(Image.fromarray(array), fmt, **kw))
    before = pg.p.evaluate("window.arrcoc.last() && window.arrcoc.last().ms")
    pg.p.set_input_files("#file", str(path))
    pg.p.wait_for_function(f"window.arrcoc.last() && window.arrcoc.last().ms !== {json.dumps(before)}", timeout=timeout)
    return path


def test_whole_non_square_photo_is_fed_at_its_own_size_and_cells_cover_it(page, golden, built, tmp_path):
    """A portrait photo through the file input: the model gets [1,H,W,3] uint8, exactly the file's
    pixels (no crop, no resize), and the heatmap and the top-K boxes cover the whole photo with
    cells W/G wide and H/G tall (pipeline/publishing/overlay.py's cell_box)."""
    from arrcoc_edge.publishing.overlay import cell_box

    heldout = golden.heldout
    photo_arr = heldout.images[heldout.names.index("flower/portrait")]
    h, w = photo_arr.shape[:2]
    assert h != w
    pg = page.open()
    _open_photo(pg, tmp_path, photo_arr, "portrait.png")
    assert pg.p.evaluate("window.arrcoc.lastInput()") == {"shape": [1, h, w, 3], "dtype": "uint8", "bytes": h * w * 3}
    import base64

    fed = np.frombuffer(base64.b64decode(pg.p.evaluate("window.arrcoc.lastInputPixels()")), np.uint8).reshape(h, w, 3)
    np.testing.assert_array_equal(fed, photo_arr)
    grid = json.loads((built[0] / "web" / "config.json").read_text())["grid"]
    ov = pg.p.evaluate("window.arrcoc.overlay()")
    assert ov["photo"] == [w, h] and ov["grid"] == grid
    assert ov["cell"] == pytest.approx([w / grid, h / grid], abs=GRID_CELL_TOL) and ov["cell"][0] != ov["cell"][1]
    np.testing.assert_allclose(ov["boxes"], [cell_box(i, grid, h, w) for i in ov["cells"]], atol=1e-6)
    dw, dh = ov["canvas"]
    assert abs(dw / dh - w / h) < 2 / min(dw, dh)  # the canvas has the photo's aspect (to a pixel)
    shown = pg.p.evaluate("(() => { const r = document.getElementById('heat').getBoundingClientRect();"
                          " const q = document.getElementById('photo').getBoundingClientRect();"
                          " return [r.width, r.height, q.width, q.height]; })()")
    assert shown[:2] == shown[2:] and abs(shown[0] / shown[1] - w / h) < 0.01  # overlay lies on the whole photo
    assert heat_pixels(pg) == dw * dh  # every canvas pixel lies in some cell: the grid covers the whole photo
    SHOTS.mkdir(exist_ok=True)
    pg.p.screenshot(path=str(SHOTS / "web-whole-photo.png"), full_page=True)


def test_transparent_pixels_keep_their_stored_colour_as_pil_drops_alpha(page, tmp_path):
    """A PNG with alpha 0..255 across it: the page hands over the stored RGB (PIL's convert("RGB")),
    not a canvas's premultiplied round trip (measured before WebGL2 read: up to 208 off, 75% of
    pixels; transparent ones black)."""
    import base64

    from arrcoc_edge.stages.golden import load_photo

    rgb = np.asarray(photo((300, 200)))
    alpha = np.tile(np.linspace(0, 255, 300).astype(np.uint8), (200, 1))
    pg = page.open()
    path = _open_photo(pg, tmp_path, np.dstack([rgb, alpha]), "alpha.png")
    fed = np.frombuffer(base64.b64decode(pg.p.evaluate("window.arrcoc.lastInputPixels()")), np.uint8).reshape(200, 300, 3)
    np.testing.assert_array_equal(fed, load_photo(path))
    assert "colour as stored" in pg.p.text_content("#photo-size")


@pytest.mark.parametrize("name", ["chelsea/whole", "hubble_deep_field/panorama", "astronaut/small"])
def test_page_relevance_on_a_golden_whole_photo_matches_python_onnxruntime(page, golden, built, tmp_path, name):
    """A golden whole photo opened as a user opens it (PNG through the file input): the page decodes
    the same pixels and its FP32 relevance matches Python onnxruntime on them (the FP32 gate)."""
    from arrcoc_edge.stages.parity import topk_overlap

    site = built[0] / "web"
    heldout = golden.heldout
    arr = heldout.images[heldout.names.index(name)]
    pg = page.open()
    _open_photo(pg, tmp_path, arr, "golden.png")
    last = pg.p.evaluate("window.arrcoc.last()")
    assert last["model"] == "fp32" and last["query"]["label"] == json.loads((site / "presets.json").read_text())["queries"][0]
    assert pg.p.evaluate("window.arrcoc.lastInput().shape") == [1, *arr.shape]
    ref = _python_fp32(site, arr, _preset(site))
    rel = np.asarray(last["relevance"], dtype=np.float32)[None]
    gate = web_target.FP32_BROWSER
    assert np.abs(rel - ref["relevance"]).max() <= gate["max"]["relevance_max_abs"]
    overlap, _ = topk_overlap(ref["relevance"], ref["topk_indices"], np.asarray([last["topk"]]), gate["tie_tolerance"])
    assert overlap.min() == 1.0
    assert np.abs(np.asarray(last["weights"]) - ref["weights"][0]).max() <= gate["max"]["weights_max_abs"]


def test_a_12_megapixel_photo_runs_whole_in_the_page(page, golden, built, tmp_path):
    """The golden 12 MP photo (4032 x 3024) as a JPEG through the file input: fed whole, the page's
    relevance matches Python onnxruntime on PIL's decoding of the same file. The page's own
    inference time goes to test-output/web-12mp.json."""
    import hashlib

    from arrcoc_edge.stages.golden import load_photo

    site = built[0] / "web"
    heldout = golden.heldout
    arr = heldout.images[heldout.names.index("retina/12mp")]
    assert arr.shape == (3024, 4032, 3)
    pg = page.open()
    path = _open_photo(pg, tmp_path, arr, "12mp.jpg", "JPEG", timeout=180_000, quality=92)
    assert pg.p.evaluate("window.arrcoc.lastInput().shape") == [1, 3024, 4032, 3]
    pil = load_photo(path)
    same_pixels = pg.p.evaluate("window.arrcoc.lastInputSha256()") == hashlib.sha256(pil.tobytes()).hexdigest()
    last = pg.p.evaluate("window.arrcoc.last()")
    ref = _python_fp32(site, pil, _preset(site))
    rel_err = float(np.abs(np.asarray(last["relevance"], np.float32) - ref["relevance"][0]).max())
    shown = pg.p.text_content("#latency")
    shows_ms(shown, r"([\d.]+) ms", last["ms"])
    assert "4032×3024" in shown
    SHOTS.mkdir(exist_ok=True)
    (SHOTS / "web-12mp.json").write_text(json.dumps({"ms": last["ms"], "shown": shown, "threads": pg.p.evaluate(
        "window.arrcoc.threads()"), "same_pixels_as_pil": same_pixels, "relevance_max_abs_vs_python": rel_err}) + "\n")
    assert same_pixels  # Chromium decoded the JPEG to PIL's pixels (the decode gap measured at build is zero)
    assert rel_err <= web_target.FP32_BROWSER["max"]["relevance_max_abs"]
    assert set(last["topk"]) == set(ref["topk_indices"][0].tolist())


def test_decode_gap_is_measured_in_chromium_and_recorded(built):
    """The build measured Chromium's decoding of the golden JPEGs against PIL's and recorded it in
    the manifest (fp32 variant info) and config.json; measured again here, in Chromium, the page's
    own decoding gives the same numbers."""
    from arrcoc_edge.stages.golden import load_photo

    out, _ = built
    site = out / "web"
    recorded = json.loads((out / "manifest.json").read_text())["targets"]["web"]["variants"]["fp32"]["info"]["decode_gap"]
    assert json.loads((site / "config.json").read_text())["decode_gap"] == recorded
    jpegs = decode_gap.decode_gap_jpegs()
    assert [p["name"] for p in recorded["photos"]] == [name for name, _, _ in jpegs] == [
        "china", "flower", "rocket", "retina", "hubble_deep_field"]
    queries = np.asarray(json.loads((site / "presets.json").read_text())["embeddings"], dtype=np.float32)
    session = chromium.PageSession(site)
    try:
        again = decode_gap.measure_decode_gap(session, site / "models" / "model.onnx", queries)
        decoded = {name: session.decode(path) for name, path, _ in jpegs}
    finally:
        session.close()
    for rec, now, (name, path, _) in zip(recorded["photos"], again["photos"], jpegs):
        pil = load_photo(path)
        diff = np.abs(decoded[name].astype(np.int16) - pil.astype(np.int16))
        # what this test measures itself, directly on the pixels
        assert rec["size"] == [pil.shape[1], pil.shape[0]]
        assert rec["pixel_max_abs"] == int(diff.max())
        assert rec["pixel_mean_abs"] == pytest.approx(float(diff.mean()), abs=1e-12)
        assert rec["pixels_differing"] == pytest.approx(float((diff.max(axis=-1) > 0).mean()), abs=1e-12)
        # and the model-side numbers, measured again the same way
        for key in ("topk_overlap_mean", "topk_overlap_min", "relevance_max_abs", "weights_max_abs"):
            assert rec[key] == pytest.approx(now[key], abs=1e-7), (name, key)
    if all(p["pixel_max_abs"] == 0 for p in recorded["photos"]):
        assert "the decode gap is zero" in recorded["summary"]
        assert all(p["relevance_max_abs"] == 0 and p["topk_overlap_min"] == 1.0 for p in recorded["photos"])


def _bad_inputs():
    tiny = png_bytes(Image.new("RGB", (8, 8), "red"))
    huge = png_bytes(Image.new("L", (20000, 20)))  # compresses to a few KB
    wide = png_bytes(Image.new("RGB", (8193, 16)))  # one pixel past the model's 8192 per side
    return [
        ("notes.txt", b"just some text\n", "not an image"),
        ("broken.png", b"\x89PNG\r\n\x1a\n not really", "could not be decoded"),
        ("tiny.png", tiny, "too small"),
        ("huge.png", huge, "at most 8192 pixels per side"),
        ("wide.png", wide, "8193×16 pixels: the model takes photos of at most 8192 pixels per side"),
    ]


@pytest.mark.parametrize("name,data,expected", _bad_inputs(), ids=[b[0] for b in _bad_inputs()])
def test_bad_input_shows_a_message_not_a_broken_page(page, tmp_path, name, data, expected):
    pg = page.open()
    path = tmp_path / name
    path.write_bytes(data)
    pg.p.set_input_files("#file", str(path))
    assert expected in pg.message()
    assert pg.p.evaluate("document.body.dataset.state") == "ready"
    # the page still works afterwards
    pg.wait_result_change(lambda: pg.p.click("button[data-sample=cat]"))
    assert pg.p.is_hidden("#message")


def test_model_that_fails_to_load_shows_a_message(browser, site):
    pg = Page(browser, site)
    pg.p.route("**/models/model.onnx", lambda route: route.fulfill(status=200, body=b"not an onnx model"))
    try:
        pg.open(state="error")
        assert "could not be loaded" in pg.message()
        assert pg.p.is_disabled("#selfcheck")
    finally:
        pg.p.close()
    assert pg.errors == []


def test_the_pages_topk_rule_is_the_pipelines(page):
    """The self-check counts a swap at the K-th place as agreement exactly as pipeline/stages/parity.py does."""
    from arrcoc_edge.stages.parity import topk_overlap

    rng = np.random.default_rng(3)
    n, patches, k = 6, 40, 8
    relevance = rng.random((n, patches)).astype(np.float32)
    ref = np.argsort(-relevance, axis=1)[:, :k]
    got = ref.copy()
    kth = np.sort(relevance, axis=1)[:, ::-1][:, k - 1]
    for s in range(n):  # swap the K-th pick for the next one, whose score is (made) a near-tie or not
        nxt = np.argsort(-relevance[s])[k]
        relevance[s, nxt] = kth[s] - (5e-4 if s % 2 else 5e-2)
        got[s, k - 1] = nxt
    for tie in (0.0, 1e-3):
        want_ties, want_strict = topk_overlap(relevance, ref, got, tie)
        m = page.open().p.evaluate("([r, a, b, n, k, t]) => window.arrcoc.compareTopk(r, a, b, n, k, t)",
                            [relevance.ravel().tolist(), ref.ravel().tolist(), got.ravel().tolist(), n, k, tie])
        assert m["topk_overlap_mean"] == pytest.approx(want_ties.mean())
        assert m["topk_overlap_min"] == pytest.approx(want_ties.min())
        assert m["topk_overlap_strict_mean"] == pytest.approx(want_strict.mean())
    assert want_ties.mean() > want_strict.mean()  # the tie rule did accept the near-tie swaps


def test_selfcheck_passes_in_the_browser(page, built):
    """The page runs every sample of its bundle, the whole non-square photo included, per model,
    and shows the decode gap recorded at build time."""
    pg = page.open()
    pg.p.click("#selfcheck")
    pg.p.wait_for_selector("#selfcheck-result[data-status]", timeout=60_000)
    assert pg.p.get_attribute("#selfcheck-result", "data-status") == "pass", pg.p.text_content("#selfcheck-result")
    site = built[0] / "web"
    config = json.loads((site / "config.json").read_text())
    names = [s["name"] for s in json.loads((site / "selfcheck.json").read_text())["samples"]]
    assert "chelsea/whole" in names
    assert pg.p.locator("#selfcheck-result td[data-status=pass]").count() == len(config["models"])
    for name in names:  # one row per model and sample
        assert pg.p.locator(f'#selfcheck-result tr.sample[data-sample="{name}"]').count() == len(config["models"])
    assert "chelsea/whole (451×300)" in pg.p.text_content("#selfcheck-result")
    assert "Python onnxruntime" in pg.p.text_content("#selfcheck-result")
    gap = config["decode_gap"]
    for photo in gap["photos"]:
        row = pg.p.text_content(f'#decode-gap tr[data-photo="{photo["name"]}"]')
        assert f"{photo['size'][0]}×{photo['size'][1]}" in row and f"{photo['topk_overlap_mean']:.3f}" in row
    assert gap["summary"] in pg.p.text_content("#decode-gap")


# ------------------------------------------------------------------ free-text queries


@pytest.fixture(scope="session")
def text_config(built):
    cfg = json.loads((built[0] / "web" / "config.json").read_text())
    if cfg["text_encoder"] is None:
        pytest.skip(f"the build has no text encoder: {cfg['text_note']}")
    return cfg


def test_free_text_parity_was_measured_in_the_browser_and_gated(built, text_config):
    from arrcoc_edge.stages.parity import Gate

    _, entry = built
    parity = entry["variants"]["fp32"]["parity"]
    m = parity["metrics"]
    assert m["text_token_strings"] == len(text_checks.token_check_strings()) >= 70
    assert m["text_token_mismatches"] == 0
    assert m["text_cosine_min"] >= text_checks.TEXT_COSINE_MIN
    assert m["text_embedding_norm_max_dev"] <= 1e-3
    gate = Gate(parity["gate"]["max"], parity["gate"]["min"], parity["gate"]["tie_tolerance"])
    assert gate.maxima["text_token_mismatches"] == 0 and gate.minima["text_cosine_min"] == 0.99
    # a measured failure is a gate failure, and a failed variant fails the stage (nothing published)
    assert gate.failures({**m, "text_token_mismatches": 1}) and gate.failures({**m, "text_cosine_min": 0.95})
    entry = json.loads((built[0] / "manifest.json").read_text())["targets"]["web"]
    fp32 = entry["variants"]["fp32"]
    assert fp32["parity"]["metrics"]["text_token_mismatches"] == 0
    assert fp32["size"]["budget"] == web_target.SITE_BUDGET
    assert "web/models/text_encoder.int8.onnx" in {f["path"] for f in entry["files"]}
    assert {"web/tokenizer/tokenizer.json", "web/tokenizer/tokenizer_config.json"} <= set(fp32["files"])
    assert not any("vocab.txt" in f for f in fp32["files"])
    assert any("@huggingface/tokenizers 0.2.0" in c and "WordPiece" in c for c in fp32["checks"])
    # the page's time per query (tokenize + encode) is recorded
    info = fp32["info"]["text_encoder"]
    assert info["kind"] == "minilm" and text_config["text_encoder"]["kind"] == "minilm"
    timing = info["page_ms_per_query"]
    assert timing["queries"] == m["text_token_strings"] and 0 < timing["median"] <= timing["max"]
    assert 0 < timing["tokenize_median"] < timing["median"]
    assert all(v > 0 for v in timing["first_use_load_ms"].values()) and len(timing["first_use_load_ms"]) == 2


def test_tokenizer_matches_python_token_for_token(page, text_config):
    from arrcoc_edge.relevance.text_encoder import tokenize

    pg = page.open()
    strings = text_checks.token_check_strings()
    # and a few more built here: random mixes of the awkward pieces
    rng = np.random.default_rng(7)
    pieces = [" ", "\t", "\n", "é", "e\u0301", "İ", "Σ", "ß", "ﬁ", "中", "𠀀", "🙂", "👍🏽", "\u200b", "\x00", "-", "'",
              "...", "¿", "unaffable", "ACME", "42", "x" * 50, "ｶ", "\u3000", "\ufeff", "σ"]
    strings += ["".join(rng.choice(pieces, size=int(rng.integers(1, 30)))) for _ in range(200)]
    got = pg.p.evaluate("(t) => window.arrcoc.tokenize(t)", strings)
    want = [tokenize([s])["input_ids"][0].tolist() for s in strings]
    bad = [(s, g, w) for s, g, w in zip(strings, got, want) if g != w]
    assert not bad, f"{len(bad)} of {len(strings)} differ, e.g. {bad[0][0]!r}: browser {bad[0][1]} vs Python {bad[0][2]}"
    assert max(len(w) for w in want) == 256  # truncation was exercised
    assert want[strings.index("")] == [101, 102]
    # the corpus holds the two steps app.js redoes as the Rust crate does them (the library alone gave
    # 'ς' and one [UNK] here): a final capital sigma, and two ideographs beyond the BMP, one word each
    assert want[strings.index("ΣΑΣ")] == [101, 1173, 14608, 29733, 102]
    assert want[strings.index("𠀀𠀁 ext-B CJK")][:3] == [101, 100, 100]
    assert len(text_checks.LONG_TEXT) == 2000 and text_checks.LONG_TEXT in strings


def sweep_in_page(pg: Page) -> list[list[int]]:
    """Every code point of text_checks.SWEEP between two letters, tokenized by the page."""
    import base64

    strings = ["a" + chr(c) + "b" for c in text_checks.SWEEP]
    packed = pg.p.evaluate("(t) => window.arrcoc.tokenizePacked(t)", strings)
    lengths = np.frombuffer(base64.b64decode(packed["lengths"]), np.uint16)
    flat = np.frombuffer(base64.b64decode(packed["ids"]), np.uint32)
    return [g.tolist() for g in np.split(flat, np.cumsum(lengths)[:-1])]


def recorded_sweep_codes(sweep: dict) -> list[int]:
    codes = []
    for r in sweep["ranges"].split():
        a, _, b = r.partition("-")
        codes += range(int(a, 16), int(b or a, 16) + 1)
    return codes


def test_code_point_sweep_is_recorded_as_measured(built, page, text_config):
    """Every code point up to U+323FF (and samples of planes 14-15) between two letters, tokenized by
    the library in Chromium and by the Python tokenizer: the build records how many differ and
    which (manifest info, not a gate: the browser's Unicode tables are newer than the Rust crate's,
    and a library cannot carry a table of the difference). Measured again here, independently of
    the build's code, it gives exactly the recorded code points."""
    from arrcoc_edge.relevance.text_encoder import tokenizer

    entry = json.loads((built[0] / "manifest.json").read_text())["targets"]["web"]["variants"]["fp32"]
    sweep = entry["info"]["text_encoder"]["code_point_sweep"]
    assert sweep["code_points"] == len(text_checks.SWEEP) and sweep["gated"] is False
    assert "code_point" not in json.dumps(entry["parity"]["gate"])
    got = sweep_in_page(page.open())
    want = tokenizer()(["a" + chr(c) + "b" for c in text_checks.SWEEP])["input_ids"]
    differing = [c for c, g, w in zip(text_checks.SWEEP, got, want) if g != w]
    assert differing == recorded_sweep_codes(sweep) and len(differing) == sweep["differing"]
    # none of them is in the corpus the gate holds exact
    corpus = "".join(text_checks.token_check_strings())
    assert not set(map(chr, differing)) & set(corpus)


def test_free_text_query_draws_a_heatmap(page, text_config):
    pg = page.open()
    assert pg.p.is_enabled("#text") and "loaded on first use" in pg.p.text_content("#text-note")
    pg.p.select_option("#query", label="something red")
    pg.p.wait_for_function("window.arrcoc.last().query.label === 'something red'")
    preset = pg.p.evaluate("window.arrcoc.last()")
    pg.p.fill("#text", "something red")
    pg.wait_result_change(lambda: pg.p.click("#text-run"))
    typed = pg.p.evaluate("window.arrcoc.last()")
    assert typed["query"]["kind"] == "text" and typed["query"]["tokens"] == 4
    assert heat_pixels(pg) > 0
    assert 'typed: "something red"' in pg.p.text_content("#ran-query")
    encoder = pg.p.text_content("#encoder")
    assert "INT8" in encoder and "ms" in encoder and typed["query"]["encoderMs"] > 0
    # the time per query is tokenize + encode, both shown
    q = typed["query"]
    assert q["encoderMs"] == pytest.approx(q["tokenizeMs"] + q["encodeMs"])
    shows_ms(encoder, r"\(tokenize ([\d.]+) \+ encode ([\d.]+)\)", q["tokenizeMs"], q["encodeMs"])
    # the same words typed vs the preset embedded in Python: the INT8 browser encoder lands close
    rel_err = np.abs(np.asarray(typed["relevance"]) - np.asarray(preset["relevance"])).max()
    overlap = len(set(typed["topk"]) & set(preset["topk"])) / len(preset["topk"])
    assert rel_err < 0.05 and overlap >= 0.9, (rel_err, overlap)
    # Enter submits too; another query gives another map; the model switch keeps the typed query
    pg.p.fill("#text", "the striped fur on its head")
    pg.wait_result_change(lambda: pg.p.press("#text", "Enter"))
    assert pg.p.evaluate("window.arrcoc.last().relevance") != typed["relevance"]
    if pg.p.locator("#model option[value=int8]").count():
        pg.wait_result_change(lambda: pg.p.select_option("#model", "int8"))
        assert pg.p.evaluate("window.arrcoc.last().query.label") == "the striped fur on its head"
    SHOTS.mkdir(exist_ok=True)
    pg.p.screenshot(path=str(SHOTS / "web-demo-free-text.png"), full_page=True)
    assert pg.p.is_hidden("#message")


@pytest.mark.parametrize("text, says", [("", "empty"), ("   \t  ", "empty"), ("\u200b\u200d\ufeff", "no visible characters")],
                         ids=["empty", "whitespace", "zero-width"])
def test_empty_query_shows_a_message(page, text_config, text, says):
    pg = page.open()
    before = pg.p.evaluate("window.arrcoc.last().ms")
    pg.p.fill("#text", text)
    pg.p.click("#text-run")
    assert says in pg.message()
    assert pg.p.evaluate("document.body.dataset.state") == "ready"
    assert pg.p.evaluate("window.arrcoc.last().ms") == before  # nothing ran
    pg.p.fill("#text", "a face")
    pg.wait_result_change(lambda: pg.p.click("#text-run"))
    assert pg.p.is_hidden("#message")


def test_build_without_text_encoder_serves_presets_and_says_so(browser, site):
    pg = Page(browser, site)

    def no_text(route):
        cfg = json.loads(route.fetch().text())
        cfg.update(text_encoder=None, text_note="Free-text queries are off in this build, presets only: test.")
        route.fulfill(status=200, content_type="application/json", body=json.dumps(cfg))

    pg.p.route("**/config.json", no_text)
    try:
        pg.open()
        assert pg.p.is_disabled("#text") and pg.p.is_disabled("#text-run")
        assert "presets only" in pg.p.text_content("#text-note")
        assert heat_pixels(pg) > 0  # presets still work
        assert pg.p.evaluate("window.arrcoc.runText('a cat')") is None
        assert "presets only" in pg.message()
    finally:
        pg.p.close()
    assert pg.errors == []


def test_missing_text_encoder_stage_is_a_note_not_a_failure(make_ctx):
    ctx = make_ctx(upstream={})
    assert web_target.upstream_text_encoder(ctx) == (None, "the text-encoder stage was not built (its `text` extra is missing)")


def test_a_console_error_fails_verification(built, browser, golden):
    from arrcoc_edge.errors import ExportError

    session = chromium.PageSession(built[0] / "web")
    try:
        session.page.evaluate("console.error('simulated failure in the page')")
        with pytest.raises(ExportError, match="simulated failure"):
            session.run_raw("fp32", golden.heldout.inputs(0, 1))
    finally:
        session.close()


def test_bench_cases_time_inference_in_the_page(built):
    """`invoke bench`'s browser cases run the published site at 1 and 2 threads and report the
    page's own clock (no automation round trip), on the same inputs as the other runtimes."""
    from arrcoc_edge.targets import TARGETS

    out, _ = built
    entry = json.loads((out / "manifest.json").read_text())["targets"]["web"]
    cases = TARGETS["web"].bench_cases(out, entry)
    rng = np.random.default_rng(0)
    query = rng.standard_normal((1, 384)).astype(np.float32)
    crop = {"image": rng.integers(0, 256, (1, 224, 224, 3), dtype=np.uint8), "query": query}
    photo = {"image": rng.integers(0, 256, (1, 768, 1024, 3), dtype=np.uint8), "query": query}
    names = [c.runtime for c in cases]
    assert any("(1 thread, in-page clock)" in n for n in names), names
    assert all(c.self_timed for c in cases)
    # the page makes its untimed warm run itself, in the same round trip as the timed one
    assert not any(c.warm_call for c in cases)
    for case in cases:
        for inputs in (crop, photo):
            ms = float(case.run(inputs))
            assert 0 < ms < 60_000, (case.runtime, ms)


# ------------------------------------------------------------------ the server


def test_server_lists_no_folders_and_answers_malformed_paths_with_400(site, capfd):
    import urllib.error

    for path in ("models/", "ort/", "samples/"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(site + path)
        assert info.value.code == 404, path
    for path in ("index%00.html", "models/%00", "%ff%fe.html"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(site + path)
        assert info.value.code in (400, 404), path
    with urllib.request.urlopen(site + "index.html") as r:  # and it still serves
        assert r.status == 200
    assert "Traceback" not in capfd.readouterr().err


def test_server_takes_200_parallel_requests(site):
    """The page fetches ~40 MB over many connections at once; the old backlog of 5 reset some."""
    from concurrent.futures import ThreadPoolExecutor

    def fetch(_):
        with urllib.request.urlopen(site + "config.json", timeout=60) as r:
            return r.status

    with ThreadPoolExecutor(200) as pool:
        assert list(pool.map(fetch, range(200))) == [200] * 200


# ------------------------------------------------------------------ layout and busy state

LONG_QUERY = "the small striped cat sitting next to the window on the left " * 12


def _overflow(pg: Page) -> dict:
    return pg.p.evaluate(
        "(() => { const w = window.innerWidth; const wide = [];"
        " for (const el of document.querySelectorAll('body *')) {"
        "   const r = el.getBoundingClientRect();"
        "   if (r.width && r.right > w + 0.5 && !el.closest('#selfcheck-result')) wide.push(el.id || el.tagName); }"
        " const box = document.getElementById('selfcheck-result').getBoundingClientRect();"
        " return { page: document.documentElement.scrollWidth - w, wide, box: box.right - w }; })()")


@pytest.mark.parametrize("width", [360, 390, 1280, 1920])
def test_page_stays_within_the_window(browser, site, built, width):
    """After Self-check (the widest table) and a very long typed query, nothing sticks out of the
    window; the table scrolls inside its box. Screenshots at 390 and 1280 px go to test-output/."""
    pg = Page(browser, site, viewport={"width": width, "height": 900})
    try:
        pg.open()
        pg.p.click("#selfcheck")
        pg.p.wait_for_selector("#selfcheck-result[data-status]", timeout=60_000)
        if pg.p.evaluate("window.arrcoc.textEnabled()"):
            pg.p.fill("#text", LONG_QUERY)
            pg.wait_result_change(lambda: pg.p.click("#text-run"))
            shown = pg.p.text_content("#ran-query")
            assert len(shown) < 160 and "…" in shown and f"{len(LONG_QUERY)} characters" in shown
        overflow = _overflow(pg)
        assert overflow["page"] <= 0 and overflow["wide"] == [] and overflow["box"] <= 0.5, overflow
        if width in (390, 1280):
            SHOTS.mkdir(exist_ok=True)
            pg.p.screenshot(path=str(SHOTS / f"web-{width}px.png"), full_page=True)
            assert (SHOTS / f"web-{width}px.png").stat().st_size > 10_000
    finally:
        pg.p.close()
    assert pg.errors == []


def test_a_click_while_running_says_busy(page):
    pg = page.open()
    # Self-check takes a while; the click lands while it runs (both start in the same task)
    pg.p.evaluate("() => { window.arrcoc.selfCheck(); document.getElementById('run').click(); }")
    assert "Busy" in pg.message() and pg.p.get_attribute("#message", "data-kind") == "info"
    pg.p.wait_for_selector("#selfcheck-result[data-status]", timeout=60_000)
    pg.wait_result_change(lambda: pg.p.click("#run"))  # afterwards a click runs again


# ------------------------------------------------------------------ what a newcomer reads on the page


def test_the_selfcheck_verdict_is_in_the_status_line_and_in_sight_at_390_px(browser, site):
    """The PASS sat in the table's last column, clipped at 390 px, while the status line said "done"."""
    pg = Page(browser, site, viewport={"width": 390, "height": 900})
    try:
        pg.open()
        pg.p.click("#selfcheck")
        pg.p.wait_for_selector("#status[data-verdict]", timeout=60_000)
        status = pg.p.text_content("#status")
        assert status.startswith("self-check: PASS") and pg.p.get_attribute("#status", "data-verdict") == "pass", status
        box = pg.p.locator("#selfcheck-result td[data-status=pass]").first.bounding_box()
        assert box and box["x"] + box["width"] <= 390, box  # in sight without scrolling the table
        SHOTS.mkdir(exist_ok=True)
        pg.p.locator("#selfcheck-result").screenshot(path=str(SHOTS / "web-selfcheck-390px.png"))
    finally:
        pg.p.close()
    assert pg.errors == []


def test_the_dropdown_shows_a_typed_query_until_a_preset_is_picked(page, text_config):
    pg = page.open()
    pg.p.fill("#text", "the top left")
    pg.wait_result_change(lambda: pg.p.click("#text-run"))
    assert pg.p.evaluate("document.getElementById('query').selectedOptions[0].textContent") == "typed: the top left"
    assert pg.p.evaluate("window.arrcoc.last().query.label") == "the top left"
    pg.wait_result_change(lambda: pg.p.select_option("#query", label="something red"))
    assert pg.p.locator("#query option[value=typed]").count() == 0
    assert pg.p.evaluate("window.arrcoc.last().query.kind") == "preset"


def test_an_error_clears_the_previous_answer_and_says_so_in_the_status_line(page, text_config):
    """An error banner left the previous answer on screen under a blank status."""
    pg = page.open()
    assert heat_pixels(pg) > 0 and pg.p.text_content("#w0v") != "–"
    pg.p.fill("#text", "   ")
    pg.p.click("#text-run")
    assert "empty" in pg.message()
    assert heat_pixels(pg) == 0 and pg.p.locator("#topk li").count() == 0
    assert pg.p.text_content("#w0v") == "–" and pg.p.text_content("#answer") == "–"
    assert pg.p.text_content("#status") == "no answer: see the message above"


def test_a_query_outside_the_vocabulary_gets_the_command_line_s_warning(page, text_config):
    """A Japanese query got no English-only warning in the page; `predict` gives one."""
    from arrcoc_edge.frontends import queries

    assert f"unknownShare: {queries.UNKNOWN_SHARE}" in (REPO / "web" / "app.js").read_text()
    pg = page.open()
    pg.p.fill("#text", "赤いもの")
    pg.wait_result_change(lambda: pg.p.click("#text-run"))
    said = pg.message()
    assert "mostly outside the query encoder's English vocabulary" in said and "Ask in English" in said, said
    assert pg.p.get_attribute("#message", "data-kind") == "info" and heat_pixels(pg) > 0  # the answer stays
    pg.p.fill("#text", "something red")
    pg.wait_result_change(lambda: pg.p.click("#text-run"))
    assert pg.p.is_hidden("#message")


def test_the_weights_and_outlines_are_explained_and_the_encoder_has_a_plain_name(page):
    pg = page.open()
    for name in ("information", "perspectival", "participatory"):
        assert name in pg.p.get_attribute(f".bar:has-text('{name}')", "title")
    assert "add up to 1" in pg.p.text_content(".result")
    assert "top-K cells the model selects" in pg.p.text_content(".legend")
    encoder = pg.p.text_content("#encoder")
    assert "PyPI" not in encoder and "sentence-transformers/" not in encoder and "English" in encoder, encoder
