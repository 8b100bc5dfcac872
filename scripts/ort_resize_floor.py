"""How fast could onnxruntime's general resize be? A floor for issue 30's goal "a 1024x768 photo
within 1.25x of the 16G crop", measured, not argued. Not a test: it prints medians and ratios.

It times, one thread, interleaved rounds in one process:
- the published model.onnx on a 16G x 16G photo (its If takes the no-resize branch) and on a
  1024x768 one (the general resize: index maths from H and W, one GatherElements, the blends);
- the data path of that general resize alone with its index maths done for free (offsets and
  weights baked in as constants for exactly this photo size: no Shape, no arithmetic on H and W),
  and the 16G branch's data path alone (two Gathers, Transposes, Cast, Div).

The best the general path could ever cost is then the 16G model plus the difference of the two
data paths: whatever the index maths costs comes on top. Exact operations only: the bytes the
reference's bilinear resize reads and PyTorch's float32 blend order (arrcoc_edge.relevance.model.resize_taps).

    .venv/bin/invoke build --target onnx --out /tmp/floor
    .venv/bin/python scripts/ort_resize_floor.py /tmp/floor/onnx/model.onnx [ROUNDS]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

OPSET, IR_VERSION = 18, 9  # onnxruntime 1.31 reads IR <= 13; onnx 1.23 writes 14 by default


def _taps(n: int, grid: int):
    import torch

    from arrcoc_edge.relevance.texture_maths import CELL, _window_offsets, resize_taps

    lower, upper, weight = resize_taps(_window_offsets(grid), torch.tensor(float(n)), CELL * grid)
    return lower.numpy(), upper.numpy(), weight.numpy()


def general_data_path(height: int, width: int, grid: int):
    """GatherElements of the photo's bytes at constant offsets, Cast, both blends, / 255: the
    general branch of model.onnx without any of its index maths."""
    from onnx import TensorProto, helper

    w = 4 * grid
    r0, r1, rw = _taps(height, grid)
    c0, c1, cw = _taps(width, grid)
    rows = np.stack([r0, r1]) * (3 * width)
    cols = np.stack([c0, c1]) * 3
    offsets = (np.arange(3).reshape(1, 3, 1, 1, 1) + rows.reshape(1, 1, 2 * w, 1, 1)
               + cols.reshape(1, 1, 1, 2, w)).reshape(1, -1)
    consts = {"off": offsets, "cw": cw, "cw0": (1 - cw).astype(np.float32), "rw": rw[:, None],
              "rw0": (1 - rw[:, None]).astype(np.float32), "flat": np.array([1, -1], np.int64),
              "s1": np.array([-1, 2, w], np.int64), "s2": np.array([-1, 2, w, w], np.int64),
              "k255": np.float32(255), "s3": np.array([1, 3, w, w], np.int64)}
    node = helper.make_node
    nodes = [node("Reshape", ["image", "flat"], ["f"]), node("GatherElements", ["f", "off"], ["g"], axis=1),
             node("Cast", ["g"], ["gf"], to=TensorProto.FLOAT), node("Reshape", ["gf", "s1"], ["g3"]),
             node("Split", ["g3"], ["L", "R"], axis=1, num_outputs=2),
             node("Mul", ["L", "cw0"], ["a"]), node("Mul", ["R", "cw"], ["b"]), node("Add", ["a", "b"], ["ac"]),
             node("Reshape", ["ac", "s2"], ["a4"]), node("Split", ["a4"], ["T", "B"], axis=1, num_outputs=2),
             node("Mul", ["T", "rw0"], ["c"]), node("Mul", ["B", "rw"], ["d"]), node("Add", ["c", "d"], ["win"]),
             node("Div", ["win", "k255"], ["wd"]), node("Reshape", ["wd", "s3"], ["out"])]
    return _model(nodes, consts, height, width)


def square_data_path(grid: int):
    """The 16G branch of model.onnx: rows, then columns, of the photo's own pixels."""
    from onnx import TensorProto, helper

    from arrcoc_edge.relevance.texture_maths import CELL, _window_offsets

    node = helper.make_node
    nodes = [node("Gather", ["image", "t"], ["r"], axis=1), node("Transpose", ["r"], ["rt"], perm=[0, 2, 3, 1]),
             node("Gather", ["rt", "t"], ["c"], axis=1), node("Transpose", ["c"], ["ct"], perm=[0, 2, 3, 1]),
             node("Cast", ["ct"], ["cf"], to=TensorProto.FLOAT), node("Div", ["cf", "k255"], ["out"])]
    consts = {"t": _window_offsets(grid).long().numpy(), "k255": np.float32(255)}
    return _model(nodes, consts, CELL * grid, CELL * grid)


def _model(nodes, consts, height, width):
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(nodes, "floor", [helper.make_tensor_value_info("image", TensorProto.UINT8, [1, height, width, 3])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def main(model_path: str, rounds: int = 300) -> None:
    import math

    import onnx

    from arrcoc_edge.targets.shared.onnx_common import ort_session

    model = onnx.load(model_path)
    dims = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output}
    grid = math.isqrt(dims["relevance"][1])  # relevance is [B, G*G]
    side = 16 * grid
    rng = np.random.default_rng(0)
    square = rng.integers(0, 256, (1, side, side, 3), dtype=np.uint8)
    photo = rng.integers(0, 256, (1, 768, 1024, 3), dtype=np.uint8)
    query = rng.standard_normal((1, model.graph.input[1].type.tensor_type.shape.dim[1].dim_value), dtype=np.float32)
    full = ort_session(model.SerializeToString(), threads=1, spinning=False)
    parts = {name: ort_session(m.SerializeToString(), threads=1, spinning=False)
             for name, m in (("square data path", square_data_path(grid)),
                             ("general data path, free index maths", general_data_path(768, 1024, grid)))}
    cases = {"model.onnx, 16G photo": lambda: full.run(None, {"image": square, "query": query}),
             "model.onnx, 1024x768 photo": lambda: full.run(None, {"image": photo, "query": query}),
             "square data path": lambda: parts["square data path"].run(None, {"image": square}),
             "general data path, free index maths": lambda: parts["general data path, free index maths"].run(None, {"image": photo})}
    times = {k: [] for k in cases}
    for _ in range(rounds):
        for name, call in cases.items():
            call()
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    med = {k: float(np.median(v)) * 1e6 for k, v in times.items()}
    for name, us in med.items():
        print(f"{name:40s} {us:8.1f} us")
    base = med["model.onnx, 16G photo"]
    floor = base + med["general data path, free index maths"] - med["square data path"]
    print(f"1024x768 / 16G now: {med['model.onnx, 1024x768 photo'] / base:.2f}x; "
          f"floor with free index maths: {floor / base:.2f}x (goal 1.25x)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300)
