"""Where a build's time goes: timing.Timings' phases and the build bench's table (fast tier: no build).

Timings are recorded, never asserted against a limit: speed is the bench's (`invoke bench --build`)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import run_cli

from arrcoc_edge.building.timing import Timings, cpu_seconds
from arrcoc_edge.frontends.build_bench import format_build_bench


def test_a_phase_counts_the_cpu_of_its_children_and_of_this_process():
    timings = Timings()
    with timings.phase("child", cached=False) as phase:
        subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
        phase["note"] = "kept"
    with timings.phase("own"):
        sum(i * i for i in range(1_000_000))
    child, own = timings.phases["child"], timings.phases["own"]
    assert list(timings.phases) == ["child", "own"]  # in the order they started
    assert child["cached"] is False and child["note"] == "kept"
    assert child["cpu_seconds"] > 0 and own["cpu_seconds"] > 0  # a reaped child's CPU counts (RUSAGE_CHILDREN)
    assert own["start"] >= child["start"] + child["seconds"] - 0.01
    record = timings.record()
    assert record["cpu_seconds"] >= child["cpu_seconds"] + own["cpu_seconds"] - 0.05
    assert record["seconds"] >= child["seconds"] + own["seconds"] - 0.05 and record["cores"] >= 1
    assert cpu_seconds() > 0


def test_the_build_bench_table_has_a_row_per_phase_and_the_rest_of_each_run():
    def run(phases, seconds, cpu):
        return {"exit": 0, "seconds": seconds, "cpu_seconds": cpu, "build_seconds": seconds - 10,
                "build_cpu_seconds": cpu - 8, "phases": {name: {"seconds": s, "cpu_seconds": c} for name, (s, c) in phases.items()}}

    record = {"runs": {"cold": run({"export": (40.0, 70.0), "onnx": (20.0, 30.0)}, 70.0, 108.0),
                       "warm": run({"export": (1.5, 1.2), "onnx": (5.0, 6.0)}, 16.5, 15.2)}}
    lines = format_build_bench(record).splitlines()
    assert lines[0].split() == ["phase", "cold", "wall", "s", "cold", "CPU", "s", "warm", "wall", "s", "warm", "CPU", "s"]
    rows = {line.split("  ")[0].strip(): line.split()[-4:] for line in lines[2:]}
    assert rows["export"] == ["40.0", "70.0", "1.5", "1.2"]
    assert rows["start-up, publish, report"] == ["10.0", "8.0", "10.0", "8.0"]
    assert rows["total"] == ["70.0", "108.0", "16.5", "15.2"]


def test_the_speed_page_table_names_the_commit_and_host_and_each_phases_wall_and_cpu():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("speed_table", Path(__file__).parents[1] / "scripts" / "speed_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = lambda wall, cpu: {"exit": 0, "seconds": wall, "cpu_seconds": cpu, "build_seconds": wall - 5,  # noqa: E731
                             "build_cpu_seconds": cpu - 4, "phases": {"android": {"seconds": wall - 5, "cpu_seconds": cpu - 4}}}
    record = {"kind": "build", "targets": "all", "host": "Some CPU, 2 cores", "timestamp": "T", "commit": "abc1234",
              "runs": {"cold": run(300.0, 500.0), "warm": run(50.0, 60.0)}}
    md = module.build_table(record)
    assert "`invoke bench --build all` on Some CPU, 2 cores, T, commit abc1234" in md
    assert "| android | 295 / 496 | 45 / 56 |" in md and "| **total** | **300 / 500** | **50 / 60** |" in md
    both = module.build_table(record, before=record)
    assert "| phase | before cold | before warm | after cold | after warm |" in both


@pytest.mark.slow
def test_a_warm_build_into_another_folder_converts_nothing_and_records_its_phases(onnx_build, tmp_path):
    """The session's `--target onnx` build filled the user cache; the same build into another folder
    reuses the export and every conversion (a conversion that runs says `KIND: converted in N s`),
    and its manifest records each phase's wall and CPU seconds, in the order they ran."""
    proc = run_cli("build", "--target", "onnx", "--out", str(tmp_path / "again"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert " converted in " not in proc.stdout, proc.stdout
    assert "reused the files of an identical earlier conversion" in proc.stdout
    manifest = json.loads((tmp_path / "again" / "manifest.json").read_text())
    phases = manifest["build_timings"]["phases"]
    assert sorted(phases, key=lambda name: phases[name]["start"]) == ["checkpoint", "export", "golden", "calibration", "onnx"]
    assert phases["export"]["cached"] is True and phases["onnx"]["status"] == "published"
    assert all(p["seconds"] >= 0 and p["cpu_seconds"] >= 0 for p in phases.values())
    assert manifest["targets"]["onnx"]["build_cpu_seconds"] == phases["onnx"]["cpu_seconds"]
    # the emulated CPUs' outputs are the earlier build's (the same file, inputs and emulation), gated afresh
    by_isa = manifest["targets"]["onnx"]["variants"]["fp32"]["parity"]["by_isa"]
    emulated = [record for isa, record in by_isa.items() if "emulated" in isa and record.get("measured")]
    assert all(record["passed"] and "identical earlier run" in record["facts"]["reused"] for record in emulated), by_isa
