"""`invoke bench`: a benchmark, not a test of speed; checked here for what it writes and prints."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli

ROW_KEYS = {"case", "runtime", "batch", "threads", "median_ms", "p90_ms", "runs"}


@pytest.mark.slow
def test_bench_writes_rows_side_by_side(onnx_build, tmp_path):
    out = onnx_build.copy(tmp_path / "out")  # bench writes bench.json into the folder it reads

    proc = run_cli("bench", "--out", str(out), "--runs", "3", "--photos", "12")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "x vs torch eager" in proc.stdout

    data = json.loads((out / "bench.json").read_text())
    assert data["host"] and data["timestamp"] and data["runs"] == 3
    rows = data["rows"]
    assert all(ROW_KEYS <= set(r) and r["runs"] == 3 and r["median_ms"] > 0 for r in rows)
    # every runtime at both batch sizes and both thread settings, from one interleaved run
    want = {(rt, b, t) for rt in ("torch eager", "onnxruntime fp32", "reference arr-coc-0-1, literal kornia")
            for b in (1, 8) for t in (1, "default")}
    have = {(r["runtime"].split(" (")[0], r["batch"], r["threads"]) for r in rows}
    assert want <= have
    # ratios on 1-thread rows only; default-thread rows carry their spread instead
    eager = [r for r in rows if r["runtime"].startswith("torch eager")]
    assert all(r["vs_torch_eager"] == (1.0 if r["threads"] == 1 else None) for r in eager)
    literal = [r for r in rows if r["runtime"].startswith("reference")]
    assert all(r["vs_reference"] == (1.0 if r["threads"] == 1 else None) for r in literal) and "x vs reference" in proc.stdout
    assert all(r["p10_ms"] <= r["median_ms"] <= r["p90_ms"] for r in rows)
    assert not any(r["vs_torch_eager"] or r["vs_reference"] for r in rows if r["threads"] != 1)
    # the goal this build can answer (onnxruntime, 1024x768 against its 16G crop), and the host
    assert any(g["goal"].startswith("onnxruntime fp32: 1024x768") for g in data["goals"])
    assert "cores" in data["host"] and "commit" in data
    # issue 37: the Python API beside the bare call of the same runtime, 1 thread, at batch 1 and 8
    api = {(r["runtime"].split(",")[0], r["batch"]) for r in rows if r["runtime"].startswith("api: ") and r["threads"] == 1}
    assert {(name, b) for name in ("api: bare runtime call", "api: load().predict / predict_many") for b in (1, 8)} <= api
    assert {g["goal"].split(" <=")[0] for g in data["goals"]} >= {"arrcoc_edge.load().predict", "pipeline predict_many"}
    # a folder of photos through `invoke predict` in one process: photos per second recorded and printed
    folder = data["folder"]
    assert folder["photos"] == 12 and folder["photos_per_s"] > 0 and folder["runtime"].startswith("onnx")
    assert f"{folder['photos_per_s']:.1f} photos/s" in proc.stdout
    # the same folder with --heatmap: a PNG per photo, its rate beside the one without
    drawn = data["folder_heatmaps"]
    assert drawn["photos"] == 12 and drawn["photos_per_s"] > 0 and drawn["command"].endswith("--heatmap DIR")
    assert f"the same with --heatmap, 12 photos: {drawn['photos_per_s']:.1f} photos/s" in proc.stdout
    # what the runtimes print goes to the log, not the terminal
    assert (out / "bench.log").is_file()
    assert "third-party output" in proc.stdout and "UserWarning" not in proc.stdout + proc.stderr
    # the build's report now shows these latencies
    md = (out / "REPORT.md").read_text()
    assert all(f"| {r['case']} | {r['runtime']} | {r['batch']} | {r['threads']} | " in md for r in rows)
    assert eager[0]["runtime"] in (out / "report.html").read_text()


def test_bench_without_artifacts_is_a_clear_error(tmp_path):
    proc = run_cli("bench", "--out", str(tmp_path), "--runs", "2")
    assert proc.returncode != 0
    assert "no published artifacts" in proc.stderr and "-> fix:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "bench.json").exists()


def test_a_variant_slower_than_its_fp32_gets_its_targets_reason():
    from arrcoc_edge.frontends.bench import speed_notes
    from arrcoc_edge.stages.target import BenchCase

    cases = [BenchCase("rt fp32 (1 thread)", print, 1),
             BenchCase("rt int8 (1 thread)", print, 1, compare_to="rt fp32 (1 thread)", speed_note="the reason")]
    rows = [{"runtime": "rt fp32 (1 thread)", "batch": 1, "median_ms": 1.0},
            {"runtime": "rt int8 (1 thread)", "batch": 1, "median_ms": 0.9},  # faster: no note
            {"runtime": "rt fp32 (1 thread)", "batch": 8, "median_ms": 4.0},
            {"runtime": "rt int8 (1 thread)", "batch": 8, "median_ms": 6.0}]
    assert speed_notes(cases, rows) == ["rt int8 (1 thread), batch 8: 1.50x rt fp32 (1 thread): the reason"]


def test_bench_inputs_are_contiguous_copies_of_the_golden_views():
    """Every runtime gets one contiguous buffer per input, as an app's frame: a strided view would
    make the native runtimes copy it inside each timed call while the browser case does not."""
    import numpy as np

    from arrcoc_edge.frontends.bench import frame

    base = np.arange(4 * 3 * 4 * 4, dtype=np.float32).reshape(4, 3, 4, 4)
    views = {"image": base[::2], "query": np.ones((4, 3), np.float32)[:, :2]}
    assert not any(v.flags["C_CONTIGUOUS"] for v in views.values())
    framed = frame(views)
    for name, value in views.items():
        assert framed[name].flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(framed[name], value)


def test_speed_goals_are_ratios_of_one_thread_medians_of_one_run():
    from arrcoc_edge.frontends.bench import speed_goals

    row = lambda runtime, case, ms, threads=1: {"runtime": runtime, "case": case, "threads": threads,  # noqa: E731
                                                "median_ms": ms}
    rows = [row("onnxruntime fp32 (1 thread)", "batch 1 (224x224 crops)", 0.2),
            row("onnxruntime fp32 (1 thread)", "photo 1024x768", 0.3),
            row("onnxruntime fp32 (default threads)", "photo 1024x768", 0.01, "default"),
            row("executorch fp32 (1 thread)", "batch 1 (224x224 crops)", 0.25),
            row("torch eager (1 thread)", "batch 1 (224x224 crops)", 1.0),
            row("lite interpreter fp32 (1 thread)", "batch 1 (224x224 crops)", 0.9)]
    goals = {g["goal"]: g for g in speed_goals(rows)}
    assert goals["onnxruntime fp32: 1024x768 photo <= 1.25x its 16G crop"]["ratio"] == 1.5
    assert not goals["onnxruntime fp32: 1024x768 photo <= 1.25x its 16G crop"]["met"]
    assert goals["ExecuTorch fp32 <= 1.5x onnxruntime fp32 at batch 1"]["ratio"] == 1.25
    assert goals["Lite Interpreter <= 1x torch eager (batch 1 (224x224 crops))"]["met"]
    # a goal whose rows this run lacks is left out, not reported as met
    assert not any(g["goal"].startswith("browser") for g in goals.values())


def test_the_markdown_table_comes_from_bench_json():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("speed_table", Path(__file__).parents[1] / "scripts" / "speed_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    bench = {"runs": 5, "host": "Linux x86_64, Some CPU, 2 cores", "timestamp": "T", "commit": "abc1234",
             "rows": [{"case": "batch 1 (224x224 crops)", "runtime": "onnxruntime fp32 (1 thread)", "threads": 1,
                       "median_ms": 0.2, "p10_ms": 0.19, "p90_ms": 0.3},
                      {"case": "batch 1 (224x224 crops)", "runtime": "onnxruntime fp32 (default threads)",
                       "threads": "default", "median_ms": 0.25, "p10_ms": 0.2, "p90_ms": 9.0}],
             "goals": [{"goal": "g", "ratio": 1.2, "met": True}]}
    md = module.table(bench)
    assert "Some CPU, 2 cores" in md and "commit abc1234" in md
    assert "| onnxruntime fp32 (1 thread) | 0.200 |" in md and "0.250 (0.200-9.00)" in md and "| g | 1.20x | yes |" in md
