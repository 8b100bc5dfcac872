"""Where the browser's time goes: onnxruntime-web (the vendored WASM build, 1 thread, in headless
Chromium) against native onnxruntime (1 thread), side by side, on the model and on a model that
does nothing with the same inputs. Not a test: it prints medians and ratios.

- The do-nothing model (a one-byte Slice of the photo, the query passed through) costs a
  session.run its per-call overhead plus the copy of its inputs into the WASM heap: at 224x224 the
  overhead, at 12 MP the 36 MB copy that onnxruntime-web makes on every run.
- A plain JavaScript copy of the 12 MP bytes into an existing buffer, for the host's bandwidth.
- The model itself at 224x224, 1024x768 and 12 MP: the rest is its kernels in WASM.

Every case runs in the page (performance.now() around session.run, an untimed run right before
each timed one), interleaved in a rotating order; native cases interleave with them.

    .venv/bin/invoke build --target onnx --out /tmp/probe
    .venv/bin/python scripts/browser_overhead.py /tmp/probe/onnx/model.onnx [ROUNDS]
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZES = {"224x224": (224, 224), "1024x768": (768, 1024), "12 MP": (3024, 4032)}
PAGE = """<!doctype html><meta charset="utf-8"><script type="module">
import * as ort from './ort/ort.wasm.min.mjs';
ort.env.wasm.wasmPaths = new URL('./ort/', location.href).href;
ort.env.wasm.numThreads = 1;
const sessions = {}, inputs = {};
const bytes = async (u) => new Uint8Array(await (await fetch(u)).arrayBuffer());
window.probe = {
  isolated: () => self.crossOriginIsolated,
  async load(name) { sessions[name] = await ort.InferenceSession.create(name + '.onnx',
                       { executionProviders: ['wasm'], graphOptimizationLevel: 'all' }); },
  async input(key, h, w, d) {
    const q = new Float32Array((await bytes('query.bin')).buffer);
    inputs[key] = { image: new ort.Tensor('uint8', await bytes(key + '.bin'), [1, h, w, 3]),
                    query: new ort.Tensor('float32', q, [1, d]), scratch: new Uint8Array(h * w * 3) };
  },
  async run(name, key) {  // an untimed run, then the timed one
    const feeds = { image: inputs[key].image, query: inputs[key].query };
    await sessions[name].run(feeds);
    const t0 = performance.now();
    await sessions[name].run(feeds);
    return performance.now() - t0;
  },
  copy(key) { const i = inputs[key]; i.scratch.set(i.image.data); const t0 = performance.now();
              i.scratch.set(i.image.data); return performance.now() - t0; },
};
window.ready = true;
</script>"""


def do_nothing_model(query_dim: int):
    """image uint8 [1,H,W,3] -> one byte as float; query -> itself: no kernel cost to speak of."""
    from onnx import TensorProto, helper, numpy_helper

    consts = [numpy_helper.from_array(np.zeros(4, np.int64), "start"), numpy_helper.from_array(np.ones(4, np.int64), "end")]
    nodes = [helper.make_node("Slice", ["image", "start", "end"], ["byte"]),
             helper.make_node("Cast", ["byte"], ["relevance"], to=TensorProto.FLOAT),
             helper.make_node("Identity", ["query"], ["weights"])]
    graph = helper.make_graph(nodes, "nothing",
                              [helper.make_tensor_value_info("image", TensorProto.UINT8, [1, "height", "width", 3]),
                               helper.make_tensor_value_info("query", TensorProto.FLOAT, [1, query_dim])],
                              [helper.make_tensor_value_info("relevance", TensorProto.FLOAT, [1, 1, 1, 1]),
                               helper.make_tensor_value_info("weights", TensorProto.FLOAT, [1, query_dim])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def make_site(root: Path, model: Path, photos: dict, query: np.ndarray) -> None:
    from arrcoc_edge.targets.web.site_files import ORT_FILES

    dist = REPO / "web" / "node_modules" / "onnxruntime-web" / "dist"
    (root / "ort").mkdir()
    for name in ORT_FILES:
        shutil.copy(dist / name, root / "ort" / name)
    (root / "index.html").write_text(PAGE)
    shutil.copy(model, root / "model.onnx")
    (root / "nothing.onnx").write_bytes(do_nothing_model(query.shape[1]).SerializeToString())
    (root / "query.bin").write_bytes(query.tobytes())
    for key, photo in photos.items():
        (root / f"{key}.bin").write_bytes(photo.tobytes())


def main(model: Path, rounds: int = 200) -> None:
    import onnxruntime as ort

    from arrcoc_edge.serve import serving
    from arrcoc_edge.targets.shared.onnx_common import ort_session
    from arrcoc_edge.targets.web.chromium import CHROMIUM_HOST

    rng = np.random.default_rng(0)
    query_dim = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).get_inputs()[1].shape[1]
    query = rng.standard_normal((1, query_dim), dtype=np.float32)
    photos = {k: rng.integers(0, 256, (1, h, w, 3), dtype=np.uint8) for k, (h, w) in SIZES.items()}
    root = Path(tempfile.mkdtemp(prefix="arrcoc-browser-probe-"))
    try:
        make_site(root, model, photos, query)
        native = {name: ort_session(root / f"{name}.onnx", threads=1, spinning=False) for name in ("nothing", "model")}
        browser = CHROMIUM_HOST.acquire()
        try:
            with serving(root) as url:
                page = browser.new_page()
                page.goto(url + "index.html")
                page.wait_for_function("window.ready === true")
                assert page.evaluate("probe.isolated()"), "the page is not cross-origin isolated"
                for name in native:
                    page.evaluate("(n) => probe.load(n)", name)
                for key, (h, w) in SIZES.items():
                    page.evaluate("([k, h, w, d]) => probe.input(k, h, w, d)", [key, h, w, query_dim])
                medians = _time(page, native, photos, query, rounds)
        finally:
            CHROMIUM_HOST.release()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _report(medians, rounds)


def _time(page, native, photos, query, rounds):
    cases = [(name, key) for name in ("nothing", "model") for key in SIZES if name == "model" or key != "1024x768"]
    times = {(where, *case): [] for case in cases for where in ("browser", "native")}
    times.update({("js copy", "12 MP"): []})
    for r in range(rounds):
        for k in range(len(cases)):
            name, key = cases[(r + k) % len(cases)]
            times[("browser", name, key)].append(page.evaluate("([n, k]) => probe.run(n, k)", [name, key]))
            feeds = {"image": photos[key], "query": query}
            native[name].run(None, feeds)
            start = time.perf_counter()
            native[name].run(None, feeds)
            times[("native", name, key)].append((time.perf_counter() - start) * 1e3)
        times[("js copy", "12 MP")].append(page.evaluate("probe.copy('12 MP')"))
    return {k: float(np.median(v)) for k, v in times.items()}


def _report(med: dict, rounds: int) -> None:
    print(f"median ms of {rounds} interleaved rounds, 1 thread (browser: in-page clock around session.run)")
    print("| case | browser | native | browser / native |\n|---|---|---|---|")
    for case, value in med.items():
        if case[0] == "browser":
            _, name, key = case
            other = med[("native", name, key)]
            label = "the model" if name == "model" else "a model that does nothing"
            print(f"| {label}, {key} | {value:.3f} | {other:.3f} | {value / other:.1f}x |")
    print(f"| a JavaScript copy of the 12 MP bytes into an existing buffer | {med[('js copy', '12 MP')]:.3f} | | |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 200)
