"""The target table: every artifact kind the pipeline can build, by name.

Adding a target = one module with a Target subclass + one line here.
"""
from __future__ import annotations

from pipeline.errors import InputError
from pipeline.stages.target import Target

from targets.android.target import AndroidTarget
# `invoke app-tokenize` reaches the apps' tokenizers here, like every target (.importlinter)
from targets.app_tokenize import APPS as TOKENIZER_APPS, app_tokenize as tokenize_for_app
from targets.coreml.target import CoremlTarget
from targets.executorch import ExecutorchTarget
from targets.ios.target import IosTarget
from targets.onnx import OnnxTarget
from targets.onnx_int8.target import OnnxInt8Target
from targets.ptl import PtlTarget
from targets.web.target import WebTarget
from targets.tensorrt.target import TensorRTTarget
from targets.text_encoder.target import TextEncoderTarget

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
