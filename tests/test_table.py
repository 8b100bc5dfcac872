"""The build's closing table: every variant on its own labelled row, each size rule with its
margin in one unit (issue 28: a failed .ort sat on an unlabelled row, 227.2 KB vs `2.326e+05`)."""
from __future__ import annotations

from pathlib import Path

from arrcoc_edge.building.build import BuildResult, StageResult, VariantReport
from arrcoc_edge.frontends.cli import format_table, size_cells, summary_rows
from arrcoc_edge.stages.parity import LOSSY, Gate
from arrcoc_edge.stages.target import Target, Variant


def _report(name, size, budget, status):
    gate = Gate({**LOSSY.maxima, "size_bytes": budget}, LOSSY.minima)
    metrics = {"size_bytes": size, "relevance_max_abs": 0.09, "topk_overlap_mean": 0.988}
    return VariantReport(Variant(name, [Path("x")], gate, budget), status, metrics, failures=gate.failures(metrics))


def test_failed_variant_row_is_labelled_with_its_margin():
    target = type("T", (Target,), {"name": "onnx-int8"})()
    stage = StageResult(target, "failed", variants=[
        _report("int8", 140_207, 147_572, "verified"), _report("int8-ort", 232_648, 231_992, "failed")])
    rows = summary_rows(BuildResult([stage], Path("."), True, 1.0))
    assert [r[:2] for r in rows] == [["onnx-int8", "int8"], ["onnx-int8", "int8-ort"]]
    assert rows[1][2] == "failed" and rows[1][3] == "227.2 KB" and rows[1][4] == "<= 226.6 KB: 0.6 KB OVER"
    assert rows[0][4] == "<= 144.1 KB: 7.2 KB under"
    assert "size rule" in format_table(rows).splitlines()[0]
    # the reason line names the same rule with the exact bytes
    assert stage.variants[1].variant.gate.size_failures(stage.variants[1].metrics) == [
        "size 227.2 KB of 226.6 KB budget: over by 0.6 KB (656 B)"]


def test_one_unit_per_row():
    assert size_cells(30 * 1024 * 1024, 40 * 1024 * 1024) == ("30.0 MB", "<= 40.0 MB: 10.0 MB under")
    assert size_cells(2048, 0) == ("2.0 KB", "no budget")
    assert size_cells(None, 10) == ("-", "-")


def test_a_failed_stage_row_shows_the_time_it_took(tmp_path):
    """A stage that fails partway shows the seconds it spent, not 0.0s (r18's reference build:
    onnx-int8 searched 28 candidates, none passed, and its row said 0.0s)."""
    import time

    from arrcoc_edge.building.build import _one_stage
    from arrcoc_edge.errors import GateError

    class SlowFailure(Target):
        name = "onnx-int8"

        def build(self, ctx):
            time.sleep(0.2)
            raise GateError("no candidate passes the gate", "keep the FP32 target")

    stage = _one_stage(SlowFailure(), None, None, None, tmp_path, {}, lambda m: None, False, {})
    assert stage.status == "failed" and "no candidate passes the gate" in stage.reason
    assert stage.seconds >= 0.2
    rows = summary_rows(BuildResult([stage], tmp_path, True, 1.0))
    assert rows == [["onnx-int8", "-", "failed", "-", "-", "-", f"{stage.seconds:.1f}s"]] and rows[0][6] != "0.0s"
