"""Before/after, side by side: the native runtimes of two or more build folders timed in one
process, interleaved, one thread, on the same inputs. Not a test: it prints medians and ratios.

`invoke bench` times one build; comparing two bench.json files compares two moments of a shared,
noisy host. This times every build's artifacts in the same rounds instead, so a noisy neighbour
slows each of them alike (the protocol is the bench's: rotating order, a 2 ms pause, an untimed
call right before each timed one).

    git worktree add /tmp/before 37a1d20
    (cd /tmp/before && /path/to/repo/.venv/bin/invoke build --target onnx,executorch,ptl --out /tmp/before-out)
    .venv/bin/invoke build --target onnx,executorch,ptl --out /tmp/after-out
    .venv/bin/python scripts/compare_builds.py before=/tmp/before-out after=/tmp/after-out [--rounds 100]

Runtimes: onnxruntime FP32, ExecuTorch FP32 and int8 (XNNPACK pool and OpenMP of 1 thread, set
before anything loads; each program's forward_16g for 16G photos where the file holds one, as the
apps and the bench call it), the Lite Interpreter (likewise). Cases: 16G crops at batch 1 and 8,
one 1024x768 photo, one 4032x3024 photo (12 MP); random bytes: the model's cost does not depend
on what the photo shows.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # ExecuTorch's optimized kernels: before it loads

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SETTLE_S = 0.002  # as arrcoc_edge.frontends.bench


def _inputs(side: int, query_dim: int) -> dict[str, dict]:
    rng = np.random.default_rng(0)
    photo = lambda *shape: rng.integers(0, 256, shape, dtype=np.uint8)  # noqa: E731
    query = lambda b: rng.standard_normal((b, query_dim), dtype=np.float32)  # noqa: E731
    return {"batch 1": {"image": photo(1, side, side, 3), "query": query(1)},
            "batch 8": {"image": photo(8, side, side, 3), "query": query(8)},
            "photo 1024x768": {"image": photo(1, 768, 1024, 3), "query": query(1)},
            "photo 4032x3024": {"image": photo(1, 3024, 4032, 3), "query": query(1)}}


def _runners(out: Path) -> dict:
    """runtime -> run(inputs) for every artifact the folder holds."""
    import torch
    import torch.jit.mobile  # noqa: F401 - not imported by `import torch`

    from arrcoc_edge.targets.shared import onnx_common
    from arrcoc_edge.targets.executorch.runtime import pte_runner

    runners = {}
    if (out / "onnx" / "model.onnx").exists():
        session = onnx_common.ort_session(out / "onnx" / "model.onnx", threads=1, spinning=False)
        runners["onnxruntime fp32"] = lambda inputs, s=session: s.run(None, inputs)
    for variant in ("fp32", "int8"):
        path = out / "executorch" / f"model_{variant}.pte"
        if path.exists():
            runners[f"executorch {variant}"] = pte_runner(path, max_batch=8).run
    if (out / "ptl" / "model.ptl").exists():
        module = torch.jit.mobile._load_for_lite_interpreter(str(out / "ptl" / "model.ptl"))
        side = _side(out) if module.find_method("forward_16g") else None

        def lite(inputs, m=module, side=side):
            image, query = torch.from_numpy(inputs["image"]), torch.from_numpy(inputs["query"])
            if image.shape[1] == image.shape[2] == side:
                return m.run_method("forward_16g", image, query)
            return m(image, query)
        runners["lite interpreter fp32"] = lite
    return runners


def _side(out: Path) -> int:
    import json

    return int(json.loads((out / "manifest.json").read_text())["checkpoint"]["model"]["input_size"])


def _time(cases: dict, rounds: int) -> dict:
    names = list(cases)
    times = {n: [] for n in names}
    for run in cases.values():
        run(), run()
    for r in range(rounds):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            time.sleep(SETTLE_S)
            cases[name]()
            start = time.perf_counter()
            cases[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {n: float(np.median(t)) for n, t in times.items()}


def main() -> None:
    import json

    import torch
    from executorch.extension.pybindings import portable_lib

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="+", help="LABEL=OUT folder, oldest first")
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    portable_lib._unsafe_reset_threadpool(1)  # once, before any program loads
    builds = dict(b.split("=", 1) for b in args.builds)
    outs = {label: Path(folder) for label, folder in builds.items()}
    model = json.loads(next(iter(outs.values())).joinpath("manifest.json").read_text())["checkpoint"]["model"]
    inputs = _inputs(int(model["input_size"]), int(model["query_dim"]))
    runners = {label: _runners(out) for label, out in outs.items()}
    runtimes = [r for r in dict.fromkeys(r for rs in runners.values() for r in rs) if all(r in rs for rs in runners.values())]
    cases = {(runtime, case, label): (lambda f=runners[label][runtime], x=x: f(x))
             for runtime in runtimes for case, x in inputs.items() for label in outs}
    med = _time(cases, args.rounds)
    labels = list(outs)
    print(f"1 thread, median ms of {args.rounds} interleaved rounds; last/first in brackets "
          f"({', '.join(f'{k} = {v}' for k, v in builds.items())})\n")
    print("| runtime | " + " | ".join(inputs) + " |")
    print("|---|" + "---|" * len(inputs))
    for runtime in runtimes:
        cells = []
        for case in inputs:
            values = [med[(runtime, case, label)] for label in labels]
            arrow = " → ".join(f"{v:.3g}" for v in values)
            cells.append(f"{arrow} ({values[-1] / values[0]:.2f}x)")
        print(f"| {runtime} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
