"""The Python API (issue 37): `from arrcoc_edge import build, load`, as a user's script runs it.

The script below uses only the calls docs/python.md shows; it runs in its own process, so its
stdout (file descriptor 1, C++ runtimes included) can be checked to stay empty. Its numbers are
compared with `invoke predict --json` on the same photo and query, runtime by runtime.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import REPO, run_cli
from one_line import one_line

QUESTION = "where is the cat?"

USER_SCRIPT = r'''
import json, sys
import numpy as np
from PIL import Image
import arrcoc_edge
from arrcoc_edge import build, load

out, photo, query_file, report = sys.argv[1:5]
result = build(targets="onnx,ptl", out=out)
vector = np.load(query_file)
found = {"ok": result.ok, "status": {n: t.status for n, t in result.targets.items()}, "runs": {}}
for runtime in [n for n, t in result.targets.items() if t.status == "published"]:
    model = load(out, runtime=runtime)
    runs = {"file": model.predict(photo, QUESTION), "pil": model.predict(Image.open(photo), QUESTION),
            "array": model.predict(np.asarray(Image.open(photo).convert("RGB")), vector)}
    runs.update({f"many {i}": p for i, p in enumerate(model.predict_many([photo, Image.open(photo), photo],
                                                                         QUESTION, batch_size=8))})
    found["runs"][runtime] = {k: {"json": p.to_json(), "top_k": p.top_k, "shape": list(p.relevance.shape),
                                  "weights": p.weights} for k, p in runs.items()}
    model.close()
errors = {}
model = load(out)
bad = {"missing photo": lambda: model.predict(photo + ".missing.jpg", QUESTION),
       "query of the wrong width": lambda: model.predict(photo, np.ones(383, np.float32)),
       "runtime not published": lambda: load(out, runtime="onnx-int8"),
       "not a photo": lambda: model.predict(query_file, QUESTION),
       "int array": lambda: model.predict(np.zeros((30, 30, 3), np.int64), QUESTION)}
for name, call in bad.items():
    try:
        call()
        errors[name] = None
    except arrcoc_edge.ArrcocError as error:
        errors[name] = [type(error).__name__, error.one_line()]
found["errors"] = errors
with open(report, "w") as f:
    json.dump(found, f)
'''.replace("QUESTION", repr(QUESTION))


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> Path:
    from arrcoc_edge.stages.golden import _photo

    path = tmp_path_factory.mktemp("photos") / "cat.jpg"
    Image.fromarray(_photo("chelsea")).save(path, quality=92)
    return path


@pytest.fixture(scope="module")
def query(tmp_path_factory, golden) -> Path:
    path = tmp_path_factory.mktemp("query") / "q.npy"
    np.save(path, golden.heldout.queries[0])
    return path


@pytest.fixture(scope="module")
def user_run(tmp_path_factory, photo, query):
    """The user's script: builds into a temporary folder, predicts with every published runtime."""
    folder = tmp_path_factory.mktemp("api")
    script, report = folder / "user.py", folder / "report.json"
    script.write_text(USER_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(folder / "out"), str(photo), str(query), str(report)],
                          cwd=folder, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder / "out", json.loads(report.read_text()), proc


def _cli_json(out, photo, runtime, tmp_path, *query) -> dict:
    path = tmp_path / f"{runtime}-{len(list(tmp_path.iterdir()))}.json"
    proc = run_cli("predict", "--image", str(photo), *query, "--out", str(out), "--runtime", runtime,
                   "--json", str(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(path.read_text())


def _same(api: dict, cli: dict, tolerance: float = 1e-6) -> None:
    """Relevance within 1e-6, top-K identical (as sets and in relevance order), weights, size; the
    evidence within the same tolerance, and confidence, stands_out and the verdict the same."""
    numbers = ("relevance", "weights", "evidence")
    assert {k: v for k, v in api["json"].items() if k not in numbers} == {k: v for k, v in cli.items() if k not in numbers}
    assert np.abs(np.array(list(api["json"]["evidence"].values())) - np.array(list(cli["evidence"].values()))).max() <= tolerance
    assert np.abs(np.array(api["json"]["relevance"]) - np.array(cli["relevance"])).max() <= tolerance
    assert np.abs(np.array(api["json"]["weights"]) - np.array(cli["weights"])).max() <= tolerance
    rel, grid = np.array(cli["relevance"]), cli["grid"]
    order = sorted(cli["topk_indices"], key=lambda i: -rel[i])
    assert [tuple(c) for c in api["top_k"]] == [divmod(i, grid) for i in order]


@pytest.mark.slow
def test_a_users_script_equals_invoke_predict_and_prints_nothing(user_run, photo, query, tmp_path):
    out, found, proc = user_run
    assert proc.stdout == "", proc.stdout[:2000]  # nothing on stdout: not ours, not the runtimes'
    assert found["ok"] and found["status"]["onnx"] == "published"
    runtimes = [n for n, s in found["status"].items() if s == "published"]
    assert {"onnx", "ptl"} <= set(runtimes), found["status"]
    for runtime in runtimes:
        runs = found["runs"][runtime]
        text = _cli_json(out, photo, runtime, tmp_path, "--query", QUESTION)
        vector = _cli_json(out, photo, runtime, tmp_path, "--query-embedding", str(query))
        for name in ("file", "pil"):
            _same(runs[name], text)
        for name in ("many 0", "many 1", "many 2"):  # a batch of 3: the Lite Interpreter rounds a batch
            _same(runs[name], text, 1e-5)             # differently from one photo (1.6e-6, measured)
        _same(runs["array"], vector)
        grid = text["grid"]
        assert runs["file"]["shape"] == [grid, grid] and list(runs["file"]["weights"]) == [
            "information", "perspectival", "participatory"]
    want = {"missing photo": "is not a file", "query of the wrong width": "[384]",
            "runtime not published": "'onnx-int8' is not published", "not a photo": "cannot be decoded",
            "int array": "not uint8 [H, W, 3]"}
    for name, expected in want.items():
        kind, line = found["errors"][name]
        assert kind == "InputError" and expected in line, (name, line)


def test_a_users_own_pipeline_and_targets_modules_change_nothing(tmp_path):
    """The project installs one name, arrcoc_edge: from a folder holding the user's own pipeline.py,
    pipeline/ and targets/ (sys.path[0]), the API, the target table and the command's modules import
    ours, and nothing of the user's is imported."""
    for name in ("pipeline.py", "pipeline/__init__.py", "targets/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"raise RuntimeError('the user\\'s own {name} was imported')\n")
    code = ("import sys\n"
            "from arrcoc_edge import load, build\n"
            "import arrcoc_edge.frontends.api, arrcoc_edge.frontends.commands, arrcoc_edge.frontends.cli\n"
            "from arrcoc_edge.targets import TARGETS\n"
            "assert 'onnx' in TARGETS and load.__module__ == 'arrcoc_edge.frontends.api'\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pipeline', 'targets')))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_import_pipeline_is_cheap_and_exports_the_api_and_errors():
    code = ("import sys, arrcoc_edge\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'onnxruntime')]\n"
            "import arrcoc_edge.building.build, arrcoc_edge.errors\n"  # the module pipeline/building/build.py must not shadow build()
            "from arrcoc_edge import build, load, ArrcocError, InputError, GateError\n"
            "assert callable(build) and build.__module__ == 'arrcoc_edge.frontends.api' and load.__module__ == 'arrcoc_edge.frontends.api'\n"
            "assert issubclass(InputError, ArrcocError) and GateError is arrcoc_edge.errors.GateError\n"
            "from arrcoc_edge.building.build import run_build\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]


# ------------------------------------------------------------------ quick: on a folder built once


@pytest.fixture(scope="module")
def out(onnx_build):
    """The session's `invoke build --target onnx` (conftest onnx_build): predict only reads it."""
    return onnx_build.out


def test_exif_orientation_is_applied_to_files_and_pil_images_not_to_arrays(out, tmp_path):
    """A phone's portrait JPEG stored sideways with Orientation 6: the file and its PIL image are
    turned upright (as `invoke predict` decodes the file); an array is taken as given."""
    from arrcoc_edge import load
    from arrcoc_edge.stages.golden import _photo

    stored = Image.fromarray(_photo("chelsea"))  # 451 x 300 as stored
    exif = stored.getexif()
    exif[0x0112] = 6
    stored.save(tmp_path / "sideways.jpg", quality=95, exif=exif.tobytes())
    with load(out) as model:
        from_file = model.predict(tmp_path / "sideways.jpg", QUESTION)
        from_image = model.predict(Image.open(tmp_path / "sideways.jpg"), QUESTION)
        with Image.open(tmp_path / "sideways.jpg") as im:
            raw = np.asarray(im.convert("RGB"))  # PIL's convert does not apply EXIF
        from_array = model.predict(raw, QUESTION)
    assert from_file.image_size == from_image.image_size == (451, 300)
    assert from_array.image_size == (300, 451)
    np.testing.assert_array_equal(from_file.relevance, from_image.relevance)


@pytest.mark.parametrize("case", ["query float64 is cast", "query 2-D", "query of ints", "query NaN", "photo RGBA array",
                                  "photo too small", "a list is no photo", "batch_size 0", "threads 0",
                                  "runtime not a name", "empty query"])
def test_bad_arguments_raise_input_error_with_a_fix(case, out, tmp_path):
    import arrcoc_edge
    from arrcoc_edge import load

    photo = np.zeros((64, 48, 3), np.uint8)
    with load(out) as model:
        dim = model.query_dim
        calls = {"query 2-D": lambda: model.predict(photo, np.ones((1, dim), np.float32)),
                 "query of ints": lambda: model.predict(photo, np.ones(dim, np.int32)),
                 "query NaN": lambda: model.predict(photo, np.full(dim, np.nan, np.float32)),
                 "photo RGBA array": lambda: model.predict(np.zeros((64, 48, 4), np.uint8), QUESTION),
                 "photo too small": lambda: model.predict(np.zeros((8, 48, 3), np.uint8), QUESTION),
                 "a list is no photo": lambda: model.predict([[1, 2, 3]], QUESTION),
                 "batch_size 0": lambda: list(model.predict_many([photo], QUESTION, batch_size=0)),
                 "threads 0": lambda: load(out, threads=0),
                 "runtime not a name": lambda: load(out, runtime=3),
                 "empty query": lambda: model.predict(photo, "  ")}
        if case == "query float64 is cast":  # any float dtype is taken, as float32
            vec = np.random.default_rng(0).standard_normal(dim)
            a, b = model.predict(photo, vec / np.linalg.norm(vec)), model.predict(photo, (vec / np.linalg.norm(vec)).astype(np.float32))
            np.testing.assert_array_equal(a.relevance, b.relevance)
            return
        with pytest.raises(arrcoc_edge.InputError) as caught:
            calls[case]()
    assert caught.value.fix and "\n" not in caught.value.one_line()


def test_predict_many_keeps_order_batches_by_size_and_reports_unreadable_photos(out, tmp_path):
    from arrcoc_edge import InputError, load

    rng = np.random.default_rng(1)
    photos = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in
              [(224, 224)] * 3 + [(300, 200)] + [(224, 224)] * 10]
    (tmp_path / "bad.jpg").write_bytes(b"not a photo")
    mixed = photos[:5] + [tmp_path / "bad.jpg"] + photos[5:]
    with load(out) as model:
        one_by_one = [model.predict(p, QUESTION) for p in photos]
        skipped = []
        many = list(model.predict_many(mixed, QUESTION, batch_size=4, on_error=lambda p, e: skipped.append((p, e))))
        assert len(many) == len(photos) and [p.image_size for p in many] == [p.shape[:2] for p in photos]
        for a, b in zip(many, one_by_one):
            assert np.abs(a.relevance - b.relevance).max() <= 1e-5 and a.top_k == b.top_k
        assert skipped[0][0] == tmp_path / "bad.jpg" and isinstance(skipped[0][1], InputError)
        # one uint8 array [N, H, W, 3]: batches are slices of it, the numbers the same
        stacked = list(model.predict_many(np.stack(photos[4:]), QUESTION, batch_size=4))
        assert len(stacked) == 10 and all(a.top_k == b.top_k and np.abs(a.relevance - b.relevance).max() <= 1e-5
                                          for a, b in zip(stacked, one_by_one[4:]))
        got = []
        with pytest.raises(InputError, match="cannot be decoded"):
            for p in model.predict_many(mixed, QUESTION, batch_size=8):
                got.append(p)
        assert len(got) == 5  # the photos before the unreadable one were yielded


def test_printed_size_and_json_image_size_say_the_same_order(out, tmp_path):
    from arrcoc_edge.stages.golden import _photo

    Image.fromarray(_photo("chelsea")).save(tmp_path / "cat.jpg")
    proc = run_cli("predict", "--image", str(tmp_path / "cat.jpg"), "--query", QUESTION, "--out", str(out),
                   "--json", str(tmp_path / "p.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    h, w = json.loads((tmp_path / "p.json").read_text())["image_size"]
    assert (h, w) == (300, 451) and proc.stdout.startswith(f"photo {h} x {w} px (height x width)")


def _folder(tmp_path) -> Path:
    from arrcoc_edge.stages.golden import _photo

    photos = tmp_path / "photos"
    photos.mkdir()
    Image.fromarray(_photo("chelsea")).save(photos / "a-cat.jpg")
    Image.fromarray(_photo("astronaut")).resize((200, 200)).save(photos / "b-astronaut.png")
    Image.fromarray(_photo("coffee")).save(photos / "c-coffee.webp")
    (photos / "d-broken.jpg").write_bytes(b"\xff\xd8 truncated")
    (photos / "notes.txt").write_text("not a photo: ignored by extension")
    return photos


def test_predict_on_a_folder_writes_one_json_line_per_photo(out, tmp_path):
    photos = _folder(tmp_path)
    proc = run_cli("predict", "--image", str(photos), "--query", QUESTION, "--out", str(out),
                   "--json", str(tmp_path / "p.jsonl"), "--heatmap", str(tmp_path / "heat"))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]  # one photo could not be read
    lines = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [Path(d["photo"]).name for d in lines] == ["a-cat.jpg", "b-astronaut.png", "c-coffee.webp"]
    assert all(d["query"] == QUESTION and len(d["relevance"]) == d["grid"] ** 2 for d in lines)
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 2 and "d-broken.jpg" in errors[0] and "cannot be decoded" in errors[0]
    assert "1 of 4 photos could not be read" in errors[1] and "-> fix:" in errors[1]
    assert sorted(p.name for p in (tmp_path / "heat").iterdir()) == [
        "a-cat.jpg.heatmap.png", "b-astronaut.png.heatmap.png", "c-coffee.webp.heatmap.png"]
    for d in lines:  # each printed line says the size in the JSON's order
        h, w = d["image_size"]
        assert f"{d['photo']}: {h} x {w} px" in proc.stdout
    assert re.search(r"3 predictions of 4 photos x 1 query in [\d.]+ s \([\d.]+ photos/s, start-up included\)", proc.stdout)
    # the same photo through the one-photo command: the same numbers
    single = _cli_json(out, photos / "a-cat.jpg", "onnx", tmp_path, "--query", QUESTION)
    assert np.abs(np.array(lines[0]["relevance"]) - np.array(single["relevance"])).max() <= 1e-6
    assert lines[0]["topk_indices"] == single["topk_indices"]

    # again into the same heatmap folder: its files are not overwritten, refused before the model runs
    before = {p.name: p.read_bytes() for p in (tmp_path / "heat").iterdir()}
    line = one_line(run_cli("predict", "--image", str(photos), "--query", QUESTION, "--out", str(out),
                            "--heatmap", str(tmp_path / "heat")))
    assert "holds a-cat.jpg.heatmap.png already" in line
    assert {p.name: p.read_bytes() for p in (tmp_path / "heat").iterdir()} == before


def test_several_images_and_repeated_queries_share_one_model_load(out, tmp_path):
    photos = _folder(tmp_path)
    proc = run_cli("predict", "--image", str(photos / "a-cat.jpg"), "--image", str(photos / "c-coffee.webp"),
                   "--query", "a cat", "--query", "a cup of coffee", "--out", str(out),
                   "--json", str(tmp_path / "p.jsonl"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [(Path(d["photo"]).name, d["query"]) for d in lines] == [
        ("a-cat.jpg", "a cat"), ("c-coffee.webp", "a cat"), ("a-cat.jpg", "a cup of coffee"),
        ("c-coffee.webp", "a cup of coffee")]
    assert lines[0]["relevance"] != lines[2]["relevance"]  # the query changes the answer


@pytest.mark.parametrize("case", ["heatmap is a file", "heatmap is the photo folder", "json over a photo",
                                  "heatmap inside OUT"])
def test_many_photos_outputs_are_checked_before_the_model_runs(case, out, tmp_path):
    photos = _folder(tmp_path)
    (tmp_path / "file.png").write_bytes(b"mine")
    option, value = {"heatmap is a file": ("--heatmap", tmp_path / "file.png"),
                     "heatmap is the photo folder": ("--heatmap", photos),
                     "json over a photo": ("--json", photos / "a-cat.jpg"),
                     "heatmap inside OUT": ("--heatmap", out / "heat")}[case]
    before = (photos / "a-cat.jpg").read_bytes()
    line = one_line(run_cli("predict", "--image", str(photos), "--query", "a cat", "--out", str(out), option, str(value)))
    assert {"heatmap is a file": "names a folder", "heatmap is the photo folder": "is the photo folder",
            "json over a photo": "is the input file", "heatmap inside OUT": "inside the output folder"}[case] in line
    assert (photos / "a-cat.jpg").read_bytes() == before and (tmp_path / "file.png").read_bytes() == b"mine"


@pytest.mark.slow
def test_every_example_of_docs_python_md_runs(tmp_path):
    """The page's ```python blocks, in order, in one process, in a folder holding only photo.jpg
    (the page makes its own query.npy: issue 42 found it loading one nothing made): they build,
    load, predict and catch errors as written."""
    from arrcoc_edge.stages.golden import _photo

    Image.fromarray(_photo("chelsea")).save(tmp_path / "photo.jpg")
    page = (REPO / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) >= 5
    (tmp_path / "examples.py").write_text("\n".join(blocks))
    proc = subprocess.run([sys.executable, "examples.py"], cwd=tmp_path, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "{'fp32': 'verified'}" in proc.stdout and "(14, 14) float32" in proc.stdout
    assert "is not a file" in proc.stdout and "'coreml' is not published" in proc.stdout
    assert (tmp_path / "red.png").is_file()


@pytest.mark.slow
def test_the_wheel_loads_and_predicts_outside_the_checkout(out, tmp_path):
    """`pip wheel .`, installed into a separate folder (no dependencies: the venv has them), imported
    from another directory with the checkout nowhere on the path: load and predict on a published folder."""
    import shutil

    src = tmp_path / "src"  # a clean copy: the build's own egg-info and build/ stay out of the checkout
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".venv", ".git", "node_modules", "tools", "mobile",
                                                            "artifacts", "build", "*.egg-info", "__pycache__"))
    wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            str(src), "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=900)
    assert wheel.returncode == 0, wheel.stderr[-2000:]
    [whl] = list((tmp_path / "dist").glob("arrcoc_edge-*.whl"))
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site),
                              str(whl)], capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-2000:]
    from arrcoc_edge.stages.golden import _photo

    Image.fromarray(_photo("chelsea")).save(tmp_path / "cat.jpg")
    code = ("import sys, arrcoc_edge\n"
            f"assert arrcoc_edge.__file__.startswith({str(site)!r}), arrcoc_edge.__file__\n"
            "from arrcoc_edge import load\n"
            f"model = load({str(out)!r})\n"
            f"p = model.predict({str(tmp_path / 'cat.jpg')!r}, 'where is the cat?')\n"
            "import json; print(json.dumps(p.to_json()))\n")
    # -S: not the venv's site-packages .pth (its editable install points at a checkout); the venv's
    # packages come back through PYTHONPATH, after the installed wheel
    import sysconfig

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), sysconfig.get_paths()["purelib"]])}
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    (tmp_path / "cli").mkdir()
    single = _cli_json(out, tmp_path / "cat.jpg", "onnx", tmp_path / "cli", "--query", QUESTION)
    assert np.abs(np.array(got["relevance"]) - np.array(single["relevance"])).max() <= 1e-6
