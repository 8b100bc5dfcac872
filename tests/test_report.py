"""The build report: written by every build, its numbers equal the manifest's, and it renders in
headless Chromium with every image loaded and no console errors."""
from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_build import published  # noqa: F401  (one ONNX build per session, shared)

from arrcoc_edge.publishing.report import METRICS, fmt_metric
from arrcoc_edge.stages.parity import size_cells

pytestmark = pytest.mark.slow
CHROMIUM = Path("/usr/bin/chromium")


class _Cells(HTMLParser):
    """Collect (target, variant, metric) -> cell text from the parity table."""

    def __init__(self):
        super().__init__()
        self.row, self.metric, self.cells, self.images = {}, None, {}, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-variant" in a:
            self.row = {"target": a["data-target"], "variant": a["data-variant"]}
        elif tag == "td" and "data-metric" in a and self.row:
            self.metric = a["data-metric"]
            self.cells[(self.row["target"], self.row["variant"], self.metric)] = ""
        elif tag == "img":
            self.images += 1

    def handle_endtag(self, tag):
        if tag == "td":
            self.metric = None

    def handle_data(self, data):
        if self.metric:
            key = (self.row["target"], self.row["variant"], self.metric)
            self.cells[key] += data


def test_every_build_writes_both_reports(published):
    assert (published / "report.html").stat().st_size > 10_000
    md = (published / "REPORT.md").read_text()
    assert "| onnx | fp32 | published |" in md  # the terminal's status words


def test_report_numbers_equal_the_manifest(published):
    manifest = json.loads((published / "manifest.json").read_text())
    parser = _Cells()
    parser.feed((published / "report.html").read_text())
    checked = 0
    for target, entry in manifest["targets"].items():
        for variant, v in entry.get("variants", {}).items():
            for metric in METRICS:
                cell = parser.cells[(target, variant, metric)]
                assert cell.startswith(fmt_metric(v["parity"]["metrics"].get(metric))), (target, variant, metric, cell)
                checked += 1
            size = parser.cells[(target, variant, "size_bytes")]
            assert size == " ".join(size_cells(v["size"]["bytes"], v["size"]["budget"]))  # as the terminal prints it
    assert checked >= len(METRICS)
    # the size chart + one side-by-side figure per shown photo
    assert parser.images >= 4


def test_report_shows_bench_results_when_present(published, tmp_path):
    from arrcoc_edge.frontends.options import DEFAULT_CHECKPOINT
    from arrcoc_edge.publishing.report import write_report
    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.stages.golden import build_golden_set

    out = tmp_path / "out"
    shutil.copytree(published, out)
    rows = [{"case": "relevance", "runtime": "onnxruntime fp32", "batch": 1, "threads": 1,
             "median_ms": 1.234, "p90_ms": 1.5, "runs": 50}]
    (out / "bench.json").write_text(json.dumps({"host": "test", "timestamp": "now", "rows": rows}))
    ckpt = load_checkpoint(DEFAULT_CHECKPOINT)
    write_report(out, build_golden_set(ckpt.model, ckpt.config).heldout, log=lambda m: None)
    page = (out / "report.html").read_text()
    assert "<td>1.234</td>" in page and "onnxruntime fp32" in page
    assert "| relevance | onnxruntime fp32 | 1 | 1 | 1.234 |" in (out / "REPORT.md").read_text()


def test_report_renders_in_chromium(published):
    pytest.importorskip("playwright.sync_api", reason="the web extra (playwright) is not installed")
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (scripts/setup.sh installs it)")
    from arrcoc_edge.targets.web import chromium

    errors = []
    # the process's one Playwright driver (targets/web/chromium.py): its sync API allows one per
    # thread, and tests/test_web.py's session-wide browser may hold it in this worker already
    browser = chromium.CHROMIUM_HOST.acquire()
    page = browser.new_page()
    try:
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((published / "report.html").as_uri())
        page.wait_for_load_state("load")
        loaded = page.evaluate("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
        status = page.inner_text("tr[data-target='onnx'] td[data-field='status']")
        out = Path(__file__).resolve().parent.parent / "test-output"
        out.mkdir(exist_ok=True)
        page.screenshot(path=str(out / "report.png"), full_page=True)
    finally:
        page.close()
        chromium.CHROMIUM_HOST.release()
    assert loaded and all(loaded), loaded
    assert status == "published"
    assert errors == []


def test_report_shows_how_each_app_was_compiled_and_tested():
    """info.app_build of an app variant (written by the android/ios stages) reaches both reports."""
    from arrcoc_edge.publishing.report import app_builds, render_html, render_markdown

    record = {"status": "passed", "reason": "", "compiler": "kotlinc-jvm 2.0.21 (JRE 17.0.15)",
              "compiled_against": ["android.jar API 23"], "files_compiled": ["a/Contract.kt", "a/Golden.kt"],
              "tests": {"runner": "JUnit 4.13.2", "run": 7, "passed": 7, "failed": 0, "names": ["contractParses"]},
              "seconds": 50.0, "not_verified": ["the APK (Android Gradle Plugin)"]}
    manifest = {"targets": {"android": {"status": "unverified", "variants": {
        "app-assets": {"status": "unverified", "info": {"app_build": record}}}},
        "onnx": {"status": "published", "variants": {"fp32": {"status": "verified", "size": {"bytes": 421636, "budget": 821266}}}}}}
    assert app_builds(manifest) == [("android", record)]
    page = render_html(manifest, None, [], None)
    assert "data-app='android'" in page and "7 of 7 passed" in page and "kotlinc-jvm 2.0.21" in page
    assert "a/Golden.kt" in page and "the APK (Android Gradle Plugin)" in page
    md = render_markdown(manifest, None)
    assert "| android | passed  | kotlinc-jvm 2.0.21 (JRE 17.0.15) | 2 | 7 of 7 |" in md


def test_report_speaks_the_terminal_language():
    """Issue 29: the report said 'verified' where the terminal said 'published', 'not run on this
    host' for a target that failed, and drew the text encoder's maps (other queries) under 'top-K vs
    eager 0.219' beside a parity table that says 1.000."""
    from arrcoc_edge.publishing.report import _pictures, render_html, status_words, variant_rows

    assert status_words("published", "verified") == "published"
    assert status_words("unverified", "unverified") == "unverified"
    assert status_words("failed", "verified") == "failed (verified)"
    manifest = {"targets": {
        "onnx": {"status": "published", "variants": {"fp32": {"status": "verified", "size": {"bytes": 421636, "budget": 821266},
                                                              "parity": {"runtime": "onnxruntime", "reference": "eager PyTorch float32"}}}},
        "onnx-int8": {"status": "failed", "reason": "int8-ort: size ...", "variants": {}}}}
    rows = {r["target"]: r for r in variant_rows(manifest)}
    assert rows["onnx"]["status"] == "published"
    assert rows["onnx-int8"]["runtime"].startswith("not measured: the target failed")
    page = render_html(manifest, None, [], None)
    assert "411.8 KB &lt;= 802.0 KB: 390.3 KB under" in page or "411.8 KB <= 802.0 KB: 390.3 KB under" in page
    heldout = type("H", (), {"names": []})()
    runs = [{"target": "text-encoder", "variant": "int8", "reference": "exact MiniLM encoder + eager model"}]
    text = _pictures(heldout, runs, manifest)
    assert "Not drawn, because they ran other queries" in text and "text-encoder int8" in text


def test_report_shows_the_balancer_weights_per_preset(tmp_path):
    """Issue 31: the report shows, per page preset and sample photo, how much each way of knowing
    decides; with the shipped checkpoint an open query leans on the fixed maps, a naming one not."""
    import numpy as np
    from conftest import REPO
    from PIL import Image

    from arrcoc_edge.publishing.report import preset_weights, render_html, render_markdown
    from arrcoc_edge.relevance.checkpoint import load_checkpoint
    from arrcoc_edge.relevance.text_encoder import embed

    path = REPO / "checkpoints" / "arrcoc-v0.1-trained.safetensors"
    ckpt = load_checkpoint(path)
    web = tmp_path / "web"
    (web / "samples").mkdir(parents=True)
    from skimage import data

    Image.fromarray(data.chelsea()).save(web / "samples" / "cat.png")
    queries = ["a cat", "anything unusual"]
    (web / "presets.json").write_text(json.dumps({"queries": queries, "embeddings": embed(queries).tolist()}))
    (web / "config.json").write_text(json.dumps({"samples": [{"name": "cat", "file": "samples/cat.png"}]}))
    manifest = {"checkpoint": {"path": str(path), "sha256": ckpt.sha256}, "targets": {"web": {"status": "published"}}}
    weights = preset_weights(tmp_path, manifest)
    assert set(weights["cat"]) == set(queries) and all(abs(sum(w) - 1) < 2e-3 for w in weights["cat"].values())
    assert weights["cat"]["a cat"][2] > 0.9  # naming: the participatory map decides
    assert weights["cat"]["anything unusual"][0] > 0.5  # the odd one out: the information map decides
    assert np.argmax(weights["cat"]["anything unusual"]) != np.argmax(weights["cat"]["a cat"])
    page = render_html({"targets": {}}, None, [], None, weights)
    assert "data-weights='cat'" in page and "anything unusual" in page
    assert "| anything unusual | " in render_markdown({"targets": {}}, None, weights)


def test_report_names_variants_a_target_did_not_build():
    """Issue 36: TensorRT's INT8 and FP16 plans not built (and why) were only in the build log and the
    manifest's info.not_built; the report's tables now carry a row for each, with the reason."""
    from arrcoc_edge.publishing.report import render_html, render_markdown, variant_rows

    why_fp16 = "TensorRT-RTX has no FP16 builder flag (it picks precisions itself)"
    manifest = {"targets": {"tensorrt": {"status": "unverified", "variants": {"fp32": {
        "status": "unverified", "size": {"bytes": 3_692_442, "budget": 5_801_984},
        "info": {"not_built": {"fp16": why_fp16, "int8": "the onnx-int8 model is asymmetric"}}}}}}}
    rows = {(r["target"], r["variant"]): r for r in variant_rows(manifest)}
    assert rows[("tensorrt", "fp16")]["status"] == "not built" and rows[("tensorrt", "fp16")]["reason"] == why_fp16
    assert rows[("tensorrt", "int8")]["reason"] == "the onnx-int8 model is asymmetric"
    assert f"| tensorrt | fp16 | not built | - - | - | - | - | {why_fp16} |" in render_markdown(manifest, None)
    page = render_html(manifest, None, [], None)
    assert "data-variant='fp16'" in page and why_fp16 in page


def test_report_maps_use_the_page_colours():
    """Issue 36: the report drew its maps with matplotlib's inferno while `invoke predict --heatmap`
    and the page use heatColour (blue -> red); the panel now lays the same RGBA over the photo."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from arrcoc_edge.publishing.figures import _draw_panel
    from arrcoc_edge.publishing.overlay import heat_colour

    grid = 4
    relevance = np.linspace(0, 1, grid * grid).astype(np.float32)
    fig, ax = plt.subplots()
    _draw_panel(ax, np.zeros((64, 64, 3), np.uint8), relevance, np.array([15]), "t")
    drawn = ax.get_images()[1].get_array()
    rgb, alpha = heat_colour(relevance.reshape(grid, grid))
    np.testing.assert_allclose(np.asarray(drawn)[..., :3], rgb)
    np.testing.assert_allclose(np.asarray(drawn)[..., 3], alpha)
    # the top-K cell outlined black, then white inside it: one collection per colour, a box each
    outlines = [(tuple(c.get_edgecolor()[0][:3]), len(c.get_paths())) for c in ax.collections]
    assert outlines == [((0.0, 0.0, 0.0), 1), ((1.0, 1.0, 1.0), 1)]
    box = ax.collections[0].get_paths()[0].transformed(ax.collections[0].get_transform().frozen() - ax.transData)
    assert np.allclose(box.get_extents().bounds, (48, 48, 16, 16))  # cell 15 of 4 x 4 on 64 x 64 pixels
    plt.close(fig)
