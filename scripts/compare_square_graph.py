"""Side by side at 16G x 16G, batch 1, one thread: the square-only graphs that took float32 NCHW
(before whole photos, commit b384cbc) against today's whole-photo graphs (uint8 HWC), on the same
photo, in interleaved rounds in one process. Not a test: it prints medians and ratios.

    git worktree add /tmp/before b384cbc
    (cd /tmp/before && /path/to/repo/.venv/bin/invoke build --target onnx,executorch,ptl --out /tmp/before-out)
    .venv/bin/invoke build --target onnx,executorch,ptl --out /tmp/after-out
    .venv/bin/python scripts/compare_square_graph.py /tmp/before-out /tmp/after-out [ROUNDS]

Only the shipped checkpoint's setting (G=14, 224 px, D=384) is compared: the before folder's
graph takes exactly that input.
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _cases(before: Path, after: Path, photo: np.ndarray, query: np.ndarray) -> dict:
    import torch.jit.mobile  # noqa: F401 - not imported by `import torch`
    from executorch.runtime import Runtime

    from arrcoc_edge.targets.shared import onnx_common

    square = np.ascontiguousarray(photo.transpose(0, 3, 1, 2).astype(np.float32) / 255.0)
    t_square, t_photo, t_query = (torch.from_numpy(a) for a in (square, photo, query))
    ort = {k: onnx_common.ort_session(d / "onnx" / "model.onnx", threads=1, spinning=False) for k, d in (("before", before), ("after", after))}
    # each program's method for a 16G photo: forward before, forward_16g where the file holds one
    programs = {k: Runtime.get().load_program(str(d / "executorch" / "model_fp32.pte")) for k, d in (("before", before), ("after", after))}
    pte = {k: p.load_method("forward_16g" if "forward_16g" in p.method_names else "forward") for k, p in programs.items()}
    modules = {k: torch.jit.mobile._load_for_lite_interpreter(str(d / "ptl" / "model.ptl")) for k, d in (("before", before), ("after", after))}
    ptl = {k: (lambda *a, m=m: m.run_method("forward_16g", *a)) if m.find_method("forward_16g") else m
           for k, m in modules.items()}
    return {
        ("onnxruntime fp32", "before"): lambda: ort["before"].run(None, {"image": square, "query": query}),
        ("onnxruntime fp32", "after"): lambda: ort["after"].run(None, {"image": photo, "query": query}),
        ("executorch fp32", "before"): lambda: pte["before"].execute([t_square, t_query]),
        ("executorch fp32", "after"): lambda: pte["after"].execute([t_photo, t_query]),
        ("lite interpreter", "before"): lambda: ptl["before"](t_square, t_query),
        ("lite interpreter", "after"): lambda: ptl["after"](t_photo, t_query),
    }


def main(before: Path, after: Path, rounds: int = 200) -> None:
    from arrcoc_edge.stages.golden import _photo, square_crop, seeded_queries

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    photo = square_crop(_photo("astronaut"), "centre", 224)[None]
    query = seeded_queries(1, 384)
    cases = _cases(before, after, photo, query)
    names = list(cases)
    times: dict = {n: [] for n in names}
    for case in cases.values():
        case(), case()
    for r in range(rounds):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            time.sleep(0.002)
            cases[name]()
            start = time.perf_counter()
            cases[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    print(f"224 x 224 photo, batch 1, 1 thread (ExecuTorch: its default pool; forward_16g where the file has it), "
          f"median of {rounds} interleaved rounds")
    for runtime in dict.fromkeys(n[0] for n in names):
        old, new = np.median(times[(runtime, "before")]), np.median(times[(runtime, "after")])
        print(f"{runtime:18s} before {old:.3f} ms  after {new:.3f} ms  after/before {new / old:.2f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 200)
