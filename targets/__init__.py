"""The target table: every artifact kind the pipeline can build, by name.

Adding a target = one module with a Target subclass + one line here.
"""
from __future__ import annotations

from arrcoc_edge.errors import InputError
from arrcoc_edge.stages.target import Target

from arrcoc_edge.targets.android.target import AndroidTarget
# `invoke app-tokenize` reaches the apps' tokenizers here, like every target (.importlinter)
from arrcoc_edge.targets.app_tokenize import APPS as TOKENIZER_APPS, app_tokenize as tokenize_for_app
from arrcoc_edge.targets.coreml.target import CoremlTarget
from arrcoc_edge.targets.executorch.target import ExecutorchTarget
from arrcoc_edge.targets.ios.target import IosTarget
from arrcoc_edge.targets.onnx import OnnxTarget
from arrcoc_edge.targets.onnx_int8.target import OnnxInt8Target
from arrcoc_edge.targets.ptl import PtlTarget
from arrcoc_edge.targets.web.target import WebTarget
from arrcoc_edge.targets.tensorrt.target import TensorRTTarget
from arrcoc_edge.targets.text_encoder.target import TextEncoderTarget

TARGETS: dict[str, Target] = {t.name: t for t in (OnnxTarget(), OnnxInt8Target(), WebTarget(), TensorRTTarget(), CoremlTarget(), IosTarget(), ExecutorchTarget(), PtlTarget(), AndroidTarget(), TextEncoderTarget())}

# Names that expand to several targets.
GROUPS: dict[str, tuple[str, ...]] = {"all": tuple(TARGETS)}


def resolve(names: list[str]) -> list[Target]:
    """Target names (or group names) -> Target objects; unknown names list the known ones."""
    out: list[Target] = []
    for name in names:
        for member in GROUPS.get(name, (name,)):
            if member not in TARGETS:
                known = ", ".join([*TARGETS, *GROUPS])
                raise InputError(f"unknown target '{member}'", f"use one of: {known}")
            if TARGETS[member] not in out:
                out.append(TARGETS[member])
    return out
