"""onnxruntime sessions and spinning (targets/shared/onnx_common.ort_session): spinning by default,
asleep between calls for `invoke bench` (spinning=False) and wherever ARRCOC_ORT_SPINNING=0 (a host
whose cores other work shares: scripts/test.sh sets it; docs/speed.md has the measurement)."""
from __future__ import annotations

import numpy as np
import pytest

from arrcoc_edge.targets.shared import onnx_common

KEY = "session.intra_op.allow_spinning"


def _identity_model() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def _spinning(session) -> str:
    try:
        return session.get_session_options().get_session_config_entry(KEY)
    except Exception as exc:  # onnxruntime's Fail for a key never set: its default, spinning
        assert "does not have configuration" in str(exc), exc
        return "default (spins)"


@pytest.mark.parametrize("variable, spinning, expected", [
    (None, True, "default (spins)"), ("1", True, "default (spins)"), ("0", True, "0"), (None, False, "0"),
    ("1", False, "0")])
def test_sessions_spin_unless_asked_not_to(monkeypatch, variable, spinning, expected):
    if variable is None:
        monkeypatch.delenv(onnx_common.SPINNING_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(onnx_common.SPINNING_VARIABLE, variable)
    session = onnx_common.ort_session(_identity_model(), spinning=spinning)
    assert _spinning(session) == expected
    x = np.arange(2, dtype=np.float32)
    np.testing.assert_array_equal(session.run(["y"], {"x": x})[0], x)  # and it runs either way
