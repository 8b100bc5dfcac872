"""Shared fixtures: the shipped checkpoint, its golden set and exported program, and a CLI runner.

Session-scoped where building is expensive; anything that writes gets its own tmp folder.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.relevance.checkpoint import load_checkpoint
from pipeline.frontends.options import DEFAULT_CHECKPOINT


@pytest.fixture(scope="session")
def checkpoint_path() -> Path:
    return DEFAULT_CHECKPOINT


@pytest.fixture(scope="session")
def loaded(checkpoint_path):
    return load_checkpoint(checkpoint_path)


@pytest.fixture(scope="session")
def golden(loaded):
    from pipeline.stages.golden import build_golden_set

    return build_golden_set(loaded.model, loaded.config, loaded.path)  # the build's own: sentences and vectors


@pytest.fixture(scope="session")
def exported(loaded, tmp_path_factory):
    from pipeline.stages.export import export_cached

    return export_cached(loaded, tmp_path_factory.mktemp("export-cache"))


@pytest.fixture
def make_ctx(loaded, exported, golden, tmp_path):
    """make_ctx(upstream={}, options={}) -> a BuildContext with its own staging folder."""
    from pipeline.stages.target import BuildContext

    def make(upstream=None, options=None, name="stage"):
        staging = tmp_path / name
        staging.mkdir()
        return BuildContext(loaded, exported, golden, staging, upstream or {}, lambda m: None, options or {})

    return make


def run_cli(*args: str, timeout: int = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `invoke ARGS` in the repo with the venv's interpreter; returns the finished process."""
    cmd = [sys.executable, "-m", "invoke", *args]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.fixture
def cli():
    return run_cli


def write_reference_checkpoint(path: Path, query_dim: int = 2048, seed: int = 7) -> Path:
    """A reference-layout .pt as arr-coc-0-1 saves it (ARRCOCQwen state dict, Qwen3-VL-2B width):
    seeded weights of our own, plus a frozen base_model key that the loader must ignore."""
    import torch

    from pipeline.relevance.model import ModelConfig, build_model

    state = dict(build_model(ModelConfig(query_dim=query_dim), seed=seed).state_dict())
    state["base_model.lm_head.weight"] = torch.zeros(2, 2)
    torch.save(state, path)
    return path


@pytest.fixture(scope="session")
def reference_checkpoint_path(tmp_path_factory) -> Path:
    return write_reference_checkpoint(tmp_path_factory.mktemp("ref-ckpt") / "arrcoc-qwen3vl-2b.pt")


@pytest.fixture(scope="session")
def published_with_encoder(tmp_path_factory) -> Path:
    """A folder published by `invoke build --target onnx,onnx-int8,text-encoder` (the shipped
    checkpoint), built once per session for the tests of the torch-free inference path (issue 42)."""
    out = tmp_path_factory.mktemp("published-encoder") / "out"
    proc = run_cli("build", "--target", "onnx,onnx-int8,text-encoder", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def photo_file(folder: Path, name: str = "photo.jpg", size: tuple[int, int] = (1024, 768), seed: int = 0) -> Path:
    """A real JPEG of a natural scene (skimage's astronaut, resized) at `size` (width, height)."""
    from PIL import Image
    from skimage import data

    image = Image.fromarray(data.astronaut()).resize(size, Image.BILINEAR)
    if seed:
        image = image.rotate(seed % 360)
    path = folder / name
    image.save(path, quality=90)
    return path
