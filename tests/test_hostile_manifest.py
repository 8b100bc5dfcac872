"""Bounded, typed options and manifest fields (issue 43, finding 4): a manifest edited into a shape
the code would trip over is one typed line from load() and from `invoke verify`, never an
AttributeError/IndexError/KeyError/ZeroDivisionError/TypeError; threads= is bounded. On a real onnx publish of the shipped checkpoint."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from arrcoc_edge.errors import ArrcocError, InputError


@pytest.fixture(scope="module")
def built(onnx_build):
    """The session's shared `--target onnx` publish (read only: each case edits a copy)."""
    return onnx_build.out


def edited(built: Path, tmp_path: Path, edit) -> Path:
    from arrcoc_edge.publishing.folder_state import pinned

    out = tmp_path / "out"
    shutil.copytree(pinned(built), out, symlinks=True)
    manifest = json.loads((out / "manifest.json").read_text())
    edit(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def _set(path: str, value):
    def edit(m):
        *keys, last = path.split(".")
        node = m
        for k in keys:
            node = node[k]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return edit


EDITS = {
    "variants a string": _set("targets.onnx.variants", "fp32"),
    "a variant a list": _set("targets.onnx.variants.fp32", ["onnx/model.onnx"]),
    "variant files empty": _set("targets.onnx.variants.fp32.files", []),
    "variant files a string": _set("targets.onnx.variants.fp32.files", "onnx/model.onnx"),
    "files empty": _set("targets.onnx.files", []),
    "checkpoint.model missing": _set("checkpoint.model", KeyError),
    "grid 0": _set("checkpoint.model.grid", 0),
    "grid a string": _set("checkpoint.model.grid", "14"),
    "grid huge": _set("checkpoint.model.grid", 10 ** 9),
    "top_k over grid squared": _set("checkpoint.model.top_k", 10 ** 6),
    "query_dim a float": _set("checkpoint.model.query_dim", 2.5),
}


@pytest.mark.parametrize("name", EDITS)
def test_a_misshapen_manifest_is_one_typed_line_from_load(built, tmp_path, name):
    from arrcoc_edge import load

    out = edited(built, tmp_path, EDITS[name])
    with pytest.raises(ArrcocError) as err:
        with load(out, "onnx") as model:
            model.predict(np.zeros((64, 64, 3), np.uint8), np.ones(model.query_dim, np.float32))
    assert "\n" not in err.value.one_line()


@pytest.mark.parametrize("name", [n for n in EDITS if n != "checkpoint.model missing"])  # verify checks files, not sizes
def test_verify_refuses_a_misshapen_manifest(built, tmp_path, name):
    from arrcoc_edge.frontends.verify import _verify

    out = edited(built, tmp_path, EDITS[name])
    try:
        rc = _verify(out)
    except ArrcocError as exc:
        assert "\n" not in exc.one_line()
        return
    assert rc != 0, f"verify called a manifest with {name} OK"


@pytest.mark.parametrize("threads", [0, -1, 10 ** 5, 10 ** 6, 1.5, True])
def test_threads_is_bounded(built, threads):
    from arrcoc_edge import load

    with pytest.raises(InputError) as err:
        load(built, "onnx", threads=threads)
    assert "threads" in err.value.one_line()


def test_verify_reruns_the_golden_bundle_a_swapped_model_with_a_resealed_manifest_fails(onnx_build, tmp_path):
    """A model with the same inputs and outputs put in place of the built one (weights changed), its
    manifest entry re-sealed (sha256 and size), verified OK and predicted under the wrong label."""
    import hashlib
    import json as js

    import onnx
    from onnx import numpy_helper

    from arrcoc_edge.frontends.verify import _verify

    out = onnx_build.copy(tmp_path / "swapped")
    path = out / "onnx" / "model.onnx"
    model = onnx.load(str(path))
    for init in model.graph.initializer:  # another model: every float weight negated
        array = numpy_helper.to_array(init)
        if array.dtype.kind == "f" and array.size > 16:
            init.CopyFrom(numpy_helper.from_array(-array, init.name))
    onnx.save(model, str(path))
    data = path.read_bytes()
    manifest = js.loads((out / "manifest.json").read_text())
    for entry in manifest["targets"]["onnx"]["files"]:
        if entry["path"] == "onnx/model.onnx":
            entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (out / "manifest.json").write_text(js.dumps(manifest))
    assert _verify(out) == 3
