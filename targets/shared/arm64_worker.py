"""Runs inside an emulated CPU (targets/shared/arm64.py): ONNX or ORT models, one after another.

Started as `python3.11 -I arm64_worker.py SITE` by the arm64 Python of the emulation root, it imports
only the standard library, numpy and onnxruntime (the registry's aarch64 wheels in SITE), never the
project. It then serves requests, one JSON line each on stdin: {"model", "inputs", "outputs",
"facts"} (paths), and answers each with the line "done" on stdout; it exits at the end of stdin.
Start-up (the emulated interpreter importing numpy and onnxruntime) is most of a small model's time,
so one process serves every model of a stage. INPUTS holds `count` and each batch's inputs as
`b<i>_<input name>`; OUTPUTS gets `b<i>_<output name>`. FACTS is rewritten at each step (imported,
loaded, done) so the host can tell a broken emulator (nothing imported) from a model that fails on
arm64 kernels (imported, then died: the process ends, its traceback on stderr).
"""
import json
import os
import platform
import sys
import time


def write_facts(path: str, facts: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(facts, f)
    os.replace(tmp, path)


def cpu_features() -> str | None:
    """The CPU features the emulated kernel reports: what onnxruntime's kernel choice sees."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("Features")), None)
    except OSError:
        return None


def run_one(request: dict, imported: dict, np, ort) -> None:
    """One model over a list of batches (the request's INPUTS), as the host's runner runs it."""
    facts_path = request["facts"]
    facts = dict(imported, stage="imported")
    write_facts(facts_path, facts)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # as the host's runner
    options.intra_op_num_threads = 1  # emulated threads would compete with the build on the host's cores
    options.log_severity_level = 3
    started = time.perf_counter()
    session = ort.InferenceSession(request["model"], options, providers=["CPUExecutionProvider"])
    facts.update(stage="loaded", load_ms=round((time.perf_counter() - started) * 1000, 1), threads=1)
    write_facts(facts_path, facts)
    names = [o.name for o in session.get_outputs()]
    results, call_ms = {}, []
    with np.load(request["inputs"]) as data:
        for i in range(int(data["count"])):
            prefix = f"b{i}_"
            feed = {key[len(prefix):]: data[key] for key in data.files if key.startswith(prefix)}
            started = time.perf_counter()
            outs = session.run(names, feed)
            call_ms.append(round((time.perf_counter() - started) * 1000, 1))
            results.update({f"{prefix}{name}": out for name, out in zip(names, outs)})
    np.savez(request["outputs"], **results)
    facts.update(stage="done", call_ms=call_ms)
    write_facts(facts_path, facts)


def main(argv: list[str]) -> int:
    sys.path.insert(0, argv[1])
    import numpy as np
    import onnxruntime as ort

    imported = {"machine": platform.machine(), "onnxruntime": ort.__version__, "numpy": np.__version__,
                "python": platform.python_version(), "cpu_features": cpu_features()}
    for line in sys.stdin:
        run_one(json.loads(line), imported, np, ort)
        sys.stdout.write("done\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
