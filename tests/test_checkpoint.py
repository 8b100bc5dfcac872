"""Checkpoint loading: both layouts load to the same model; every bad input is a CheckpointError."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from hypothesis import given, settings
from hypothesis import strategies as st

from arrcoc_edge.relevance.checkpoint import load_checkpoint, override_settings, save_checkpoint
from arrcoc_edge.frontends.options import DEFAULT_CHECKPOINT
from arrcoc_edge.errors import CheckpointError, InputError, SettingsError
from arrcoc_edge.frontends.options import optional_positive
from arrcoc_edge.relevance.model import ModelConfig, build_model


def _same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_shipped_checkpoint_loads_with_provenance(loaded):
    assert loaded.layout == "arrcoc-safetensors"
    assert loaded.config == ModelConfig()
    assert loaded.provenance  # says how it was made (seeded init or training recipe)
    assert len(loaded.sha256) == 64


def test_reference_layout_pt_loads_like_safetensors(loaded, tmp_path):
    """A full ARRCOCQwen-style state dict: wrapped, DDP-prefixed, with frozen base_model keys."""
    state = {f"module.{k}": v.clone() for k, v in loaded.model.state_dict().items()}
    state["module.base_model.layers.0.weight"] = torch.zeros(4, 4)
    path = tmp_path / "ref.pt"
    torch.save({"state_dict": state, "epoch": 3}, path)
    ref = load_checkpoint(path)
    assert ref.layout == "reference-state-dict"
    assert ref.ignored_keys == ["base_model.layers.0.weight"]
    # a reference checkpoint builds at the reference's own training settings by default
    assert (ref.config.grid, ref.config.top_k, ref.config.image_size) == (32, 200, 512)
    assert ref.config == loaded.config.with_settings(grid=32, top_k=200)
    assert _same_weights(ref.model, loaded.model)
    again = load_checkpoint(path, grid=loaded.config.grid, top_k=loaded.config.top_k)
    assert again.config == loaded.config


@pytest.mark.parametrize("grid, top_k", [(0, None), (-3, None), (14, 0), (14, 197), (129, None), (4, 17)])
def test_impossible_settings_are_one_line_errors(grid, top_k):
    with pytest.raises(SettingsError) as err:
        load_checkpoint(DEFAULT_CHECKPOINT, grid=grid, top_k=top_k)
    assert "\n" not in err.value.one_line() and "--grid" in err.value.one_line()


SETTING = st.one_of(st.none(), st.integers(-3, 300), st.text(max_size=5),
                    st.sampled_from(["1", "32", " 14 ", "0x10", "1e2", "14.0"]))


@settings(max_examples=150, deadline=None)
@given(grid=SETTING, top_k=SETTING)
def test_any_grid_and_top_k_give_a_valid_model_or_one_line(loaded, grid, top_k):
    """Whatever a user types: a consistent config (input 16*G, 1 <= K <= G*G) or one input-error line
    (not a whole number: InputError; numbers that cannot fit together: its SettingsError kind)."""
    try:
        cfg = override_settings(loaded.config, optional_positive("grid", grid), optional_positive("top-k", top_k))
    except InputError as exc:
        assert "\n" not in exc.one_line() and " -> fix: " in exc.one_line()
        return
    assert cfg.image_size == 16 * cfg.grid and 1 <= cfg.top_k <= cfg.grid ** 2 <= 128 ** 2


@pytest.mark.parametrize("stored", [
    {"grid": 0, "top_k": 1, "image_size": 0},
    {"grid": -14, "image_size": -224},  # the modulo and the square of a negative grid still "work"
    {"grid": 14, "image_size": 448},  # input size that disagrees with the grid
    {"grid": 14, "top_k": 500},
    {"grid": "14"},
    {"grid": 14.0},
    {"grid": True},
])
def test_invalid_stored_configs_are_checkpoint_errors(stored, loaded, tmp_path):
    import dataclasses

    from safetensors.torch import save_file

    config = {**dataclasses.asdict(loaded.config), **stored}
    path = tmp_path / "bad-config.safetensors"
    tensors = {k: v.contiguous() for k, v in loaded.model.state_dict().items()}
    save_file(tensors, str(path), metadata={"arrcoc.config": json.dumps(config)})
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    assert "invalid model config" in err.value.problem


def test_query_width_is_inferred_from_the_weights(tmp_path):
    cfg = ModelConfig(query_dim=1536)
    path = tmp_path / "wide.pth"
    torch.save(build_model(cfg, seed=1).state_dict(), path)
    got = load_checkpoint(path)
    assert got.config.query_dim == 1536
    relevance, topk, *_ = got.model(torch.rand(1, 3, 512, 512), torch.randn(1, 1536))
    assert relevance.shape == (1, 1024) and topk.shape == (1, 200)


def test_save_and_reload_round_trip(tmp_path):
    model = build_model(ModelConfig(query_dim=64), seed=2)
    path = tmp_path / "rt.safetensors"
    save_checkpoint(model, path, {"recipe": "test"})
    back = load_checkpoint(path)
    assert back.config.query_dim == 64 and back.provenance == {"recipe": "test"}
    assert _same_weights(back.model, model)


class _RunsCode:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _bad_files(tmp_path: Path, loaded) -> dict[str, tuple[Path, str]]:
    """name -> (file, a phrase its error message must contain)."""
    good = loaded.model.state_dict()
    raw = Path(loaded.path).read_bytes()
    cases = {}

    def write(name, data: bytes):
        p = tmp_path / name
        p.write_bytes(data)
        return p

    cases["missing"] = (tmp_path / "nope.safetensors", "no such file")
    cases["empty"] = (write("empty.safetensors", b""), "empty")
    cases["truncated"] = (write("trunc.safetensors", raw[: len(raw) // 2]), "not a readable")
    cases["corrupt"] = (write("corrupt.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage" + raw[16:]), "not a readable")
    p = tmp_path / "nometa.safetensors"
    save_file({k: v.contiguous() for k, v in good.items()}, str(p))
    cases["no config metadata"] = (p, "arrcoc.config")
    p = tmp_path / "list.pt"
    torch.save([1, 2, 3], p)
    cases["not a state dict"] = (p, "not a state dict")
    p = tmp_path / "missing-keys.pt"
    torch.save({k: v for k, v in good.items() if not k.startswith("balancer.weight_predictor.4")}, p)
    cases["missing keys"] = (p, "missing keys")
    p = tmp_path / "extra-keys.pt"
    torch.save({**good, "participatory_scorer.extra.weight": torch.zeros(2)}, p)
    cases["unexpected keys"] = (p, "unexpected keys")
    p = tmp_path / "shape.pt"
    torch.save({**good, "balancer.weight_predictor.2.weight": torch.zeros(5, 5)}, p)
    cases["wrong shape"] = (p, "has shape")
    bad = dict(good)
    bad["balancer.weight_predictor.2.bias"] = torch.full_like(bad["balancer.weight_predictor.2.bias"], float("nan"))
    p = tmp_path / "nan.pt"
    torch.save(bad, p)
    cases["nan"] = (p, "non-finite")
    p = tmp_path / "trunc.pt"
    torch.save(good, p)
    p.write_bytes(p.read_bytes()[:1000])
    cases["truncated pt"] = (p, "not a readable")
    cases["unknown suffix"] = (write("model.bin", b"1234"), "unknown checkpoint type")
    return cases


BAD_CASES = ["missing", "empty", "truncated", "corrupt", "no config metadata", "not a state dict",
             "missing keys", "unexpected keys", "wrong shape", "nan", "truncated pt", "unknown suffix"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_checkpoints_raise_one_line_errors(case, loaded, tmp_path):
    path, phrase = _bad_files(tmp_path, loaded)[case]
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    line = info.value.one_line()
    assert phrase in line and "-> fix:" in line and "\n" not in line


def test_malicious_pickle_is_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    payload = _RunsCode()
    payload.marker = marker
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"participatory_scorer.texture_proj.0.weight": payload}, f)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert "refused" in str(info.value)
    assert not marker.exists()
