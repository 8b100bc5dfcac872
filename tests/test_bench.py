"""`invoke bench`: a benchmark, not a test of speed; checked here for what it writes and prints."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli

ROW_KEYS = {"case", "runtime", "batch", "threads", "median_ms", "p90_ms", "runs"}


@pytest.mark.slow
def test_bench_writes_rows_side_by_side(tmp_path):
    out = tmp_path / "out"
    build = run_cli("build", "--target", "onnx", "--out", str(out))
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]

    proc = run_cli("bench", "--out", str(out), "--runs", "3")
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
    eager = [r for r in rows if r["runtime"].startswith("torch eager")]
    assert all(r["vs_torch_eager"] == 1.0 for r in eager)
    literal = [r for r in rows if r["runtime"].startswith("reference")]
    assert all(r["vs_reference"] == 1.0 for r in literal) and "x vs reference" in proc.stdout
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
    from pipeline.bench import BenchCase, speed_notes

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

    from pipeline.bench import frame

    base = np.arange(4 * 3 * 4 * 4, dtype=np.float32).reshape(4, 3, 4, 4)
    views = {"image": base[::2], "query": np.ones((4, 3), np.float32)[:, :2]}
    assert not any(v.flags["C_CONTIGUOUS"] for v in views.values())
    framed = frame(views)
    for name, value in views.items():
        assert framed[name].flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(framed[name], value)
