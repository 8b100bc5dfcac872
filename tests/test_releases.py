"""Kept releases (pipeline/publishing/releases.py): which generations a link beside OUT still leads to,
and what finding them costs (issue 43, finding 7: 2,000 crafted links beside OUT cost every build
29.5 s). No build: a state folder with two generation folders, made by hand.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from arrcoc_edge.publishing import releases
from arrcoc_edge.publishing.folder_state import GENERATIONS, state_dir

OLD, NEW = "20261101-120000-1-aaaaaa", "20261102-120000-2-bbbbbb"


@pytest.fixture
def out(tmp_path) -> Path:
    """tmp/out -> .out.arrcoc-edge/.generations/NEW, with OLD beside it; each holds onnx/model.onnx."""
    out = tmp_path / "out"
    for gen in (OLD, NEW):
        (state_dir(out) / GENERATIONS / gen / "onnx").mkdir(parents=True)
        (state_dir(out) / GENERATIONS / gen / "onnx" / "model.onnx").write_bytes(b"model")
    out.symlink_to(f"{state_dir(out).name}/{GENERATIONS}/{NEW}")
    return out


def kept(out: Path) -> set[str]:
    return set(releases.release_links(out, {"generations": [OLD, NEW]}))


def test_links_to_a_generation_into_it_or_to_a_file_in_it_keep_it(out):
    base = f"{state_dir(out).name}/{GENERATIONS}/{OLD}"
    (out.parent / "v1").symlink_to(base)
    assert kept(out) == {OLD}
    (out.parent / "v1").unlink()
    (out.parent / "v1-onnx").symlink_to(f"{base}/onnx")
    assert kept(out) == {OLD}
    (out.parent / "v1-onnx").unlink()
    (out.parent / "model-v1.onnx").symlink_to(f"{base}/onnx/model.onnx")
    (out.parent / "chain").symlink_to("model-v1.onnx")  # a link to the link
    (out.parent / "sub").mkdir()
    (out.parent / "sub" / "v1").symlink_to(f"../{base}/onnx/../onnx/model.onnx")  # one folder down, spelled long
    found = releases.release_links(out, {"generations": [OLD, NEW]})
    assert set(found) == {OLD}
    assert sorted(found[OLD]) == [f"{p} links to it" for p in ("chain", "model-v1.onnx", "sub/v1")]


def test_links_that_lead_nowhere_or_elsewhere_keep_nothing(out, tmp_path):
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    (tmp_path / "dangling").symlink_to("no/such/folder")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "to-elsewhere").symlink_to("elsewhere")
    (tmp_path / "to-root").symlink_to("/")
    assert kept(out) == set()


def test_a_crafted_link_costs_a_bounded_number_of_system_calls(out, tmp_path, monkeypatch):
    """Each link is resolved by the kernel: however long its chain or its spelling, the scan makes
    at most (MAX_DEPTH + 1) stats plus MAX_HOPS (stat, lstat, readlink) per link. Counted, not timed."""
    long_spelling = "/".join(["x", ".."] * 780) + f"/{state_dir(out).name}/{GENERATIONS}/{OLD}"
    (tmp_path / "x").mkdir()
    for i in range(50):
        (tmp_path / f"long-{i}").symlink_to(long_spelling)
    (tmp_path / "c0").symlink_to(f"{state_dir(out).name}/{GENERATIONS}/{NEW}/onnx/model.onnx")
    for i in range(1, 60):  # a chain of 60 links to a file: past MAX_HOPS, so it keeps nothing
        (tmp_path / f"c{i}").symlink_to(f"c{i - 1}")
    calls = {"n": 0}
    with monkeypatch.context() as patch:
        for name in ("stat", "lstat", "readlink"):
            real = getattr(os, name)

            def counted(*args, _real=real, **kwargs):
                calls["n"] += 1
                return _real(*args, **kwargs)

            patch.setattr(os, name, counted)
        found = kept(out)
    links = 50 + 60
    per_link = releases.MAX_DEPTH + 1 + 3 * releases.MAX_HOPS
    assert OLD in found
    assert calls["n"] <= links * per_link + 10, f"{calls['n']} system calls for {links} links"
