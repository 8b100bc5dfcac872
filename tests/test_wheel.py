"""The package as a user installs it (issue 42): `pip wheel` of this checkout, installed into a fresh
venv with no extras (so no torch), then `arrcoc-edge predict --query` answers a sentence from a
published folder with the numbers of the checkout's FP32 ONNX predict.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, photo_file

pytestmark = pytest.mark.slow  # a wheel, a venv and a build (published_with_encoder)

SOURCES = ("pyproject.toml", "setup.py", "README.md", "constraints.txt", "pipeline", "targets", "web", "mobile",
           "checkpoints")


def tracked(root: Path, names) -> list[str]:
    """The tracked files under `names` (never node_modules, build outputs or caches)."""
    out = subprocess.run(["git", "ls-files", "-z", "--", *names], cwd=root, capture_output=True, check=True)
    return [f for f in out.stdout.decode().split("\0") if f]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """`pip wheel --no-deps` of a copy of the checkout's tracked sources (what a clone holds)."""
    src, dist = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in tracked(REPO, SOURCES):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(dist), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (found,) = dist.glob("arrcoc_edge-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with `pip install <wheel>` and nothing else (the pins from constraints.txt)."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    proc = subprocess.run([str(root / "bin" / "pip"), "install", "-q", "-c", str(REPO / "constraints.txt"), str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def test_the_wheel_holds_the_two_packages_and_the_command(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"pipeline", "targets"}
    assert "pipeline/bundled/checkpoints/arrcoc-v0.1-trained.safetensors" in names
    assert {"targets/bundled/web/index.html", "targets/bundled/web/app.js"} <= set(names)
    assert any(n.startswith("targets/bundled/mobile/android/") for n in names)
    assert "targets/shared/tokenizer_corpus.txt" in names  # the mobile stages' tokenizer tests read it
    assert not any("node_modules" in n or "__pycache__" in n for n in names)
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "arrcoc-edge = arrcoc_edge.frontends.commands:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_the_installed_command_answers_a_sentence_without_torch(venv, published_with_encoder, tmp_path):
    """Over 60 s: the wheel, its venv and, as the first reader in a whole run, the session's
    published_with_encoder build (five targets, web's Chromium gates included; 2.5 min)."""
    python, command = venv / "bin" / "python", venv / "bin" / "arrcoc-edge"
    assert command.is_file()
    probe = "import importlib.util as u; print([m for m in ('torch', 'sentence_transformers', 'onnx') if u.find_spec(m)])"
    assert subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path).stdout.strip() == "[]"

    photo = photo_file(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(command), "predict", "--out", str(published_with_encoder), "--image", str(photo),
                           "--query", "something red", "--json", str(tmp_path / "p.json")],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = json.loads((tmp_path / "p.json").read_text())

    import arrcoc_edge  # the checkout's FP32 ONNX predict, with the sentence through sentence-transformers
    from arrcoc_edge.relevance.text_encoder import embed

    with arrcoc_edge.load(published_with_encoder, "onnx") as model:
        checkout = model.predict(photo, "something red").to_json()
        today = model.predict(photo, embed(["something red"])[0]).to_json()
    assert installed["runtime"].startswith("onnx (onnxruntime")
    assert installed["topk_indices"] == checkout["topk_indices"] == today["topk_indices"]
    assert np.allclose(installed["relevance"], checkout["relevance"], atol=1e-6)
    assert np.abs(np.subtract(installed["relevance"], today["relevance"])).max() <= 1e-3  # the LOSSLESS gate
    assert np.abs(np.subtract(installed["weights"], today["weights"])).max() <= 1e-4


def test_the_installed_command_has_help_and_exit_codes(venv, tmp_path):
    command = str(venv / "bin" / "arrcoc-edge")
    listed = subprocess.run([command, "--list"], capture_output=True, text=True, cwd=tmp_path)
    assert listed.returncode == 0
    for name in ("build", "predict", "verify", "merge", "clean", "serve", "bench", "train", "app-tokenize"):
        assert f"  {name} " in listed.stdout
    assert "predict" in subprocess.run([command, "predict", "--help"], capture_output=True, text=True).stdout
    bad = subprocess.run([command, "predict", "--image", str(tmp_path / "none.jpg"), "--query", "x"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("input error: ") and len(bad.stderr.splitlines()) == 1
    build = subprocess.run([command, "build", "--target", "onnx", "--out", str(tmp_path / "o")],
                           capture_output=True, text=True, cwd=tmp_path)
    assert build.returncode != 0 and "pip install 'arrcoc-edge[build" in build.stderr, build.stderr


def test_an_installed_package_builds_the_app_bundles_and_writes_only_its_output(venv, tmp_path, ios_build,
                                                                               android_build):
    """`arrcoc-edge build --target android,ios` from the installed package (the build extras from this
    checkout's .venv, appended to the venv's path): the app sources come from the package's bundled
    copy, the bundles are published under --out and nothing is written into site-packages (there is
    no sample app of the user's there). Android's compile gate needs a checkout's tools/ and says so;
    iOS's runs from the bundled sources where this host has Swift. android/contract.json is byte for
    byte the checkout's build of the same checkpoint (issue 43 finding 7: two builds of one checkpoint
    write one contract); ios/contract.json is too, but for the .mlpackage hashes (coremltools writes
    fresh UUIDs and map orders: docs/guarantees.md, "Reproducible bytes"). Over 60 s: a real
    android+ios build (its conversions reused from the session's apps build, which the other worker
    makes while this one makes two others first: conftest.STARTS_FIRST)."""
    site = next((venv / "lib").glob("python3.*/site-packages"))
    checkout_site = next((REPO / ".venv" / "lib").glob("python3.*/site-packages"))
    (site / "zz-build-extras.pth").write_text(f"{checkout_site}\n")  # after the venv's own packages
    before = sorted(str(p.relative_to(site)) for p in site.rglob("*") if "__pycache__" not in p.parts)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ARRCOC_ANDROID_APP_DIR", "ARRCOC_IOS_APP_DIR")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    out = tmp_path / "artifacts"
    proc = subprocess.run([str(venv / "bin" / "arrcoc-edge"), "build", "--target", "android,ios", "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    after = sorted(str(p.relative_to(site)) for p in site.rglob("*") if "__pycache__" not in p.parts)
    assert after == before, f"written into site-packages: {sorted(set(after) - set(before))[:5]}"
    for app, checkout in (("android", android_build), ("ios", ios_build)):
        contract = json.loads((out / app / "contract.json").read_text())
        assert contract["artifacts"] and (out / app / contract["golden"]["json"]).is_file()
        if app == "android":
            assert (out / app / "contract.json").read_bytes() == (checkout.out / app / "contract.json").read_bytes()
        else:
            assert _without_packages(contract) == _without_packages(json.loads((checkout.out / app / "contract.json").read_text()))
        assert f"[{app}] note: not copied into an app" in proc.stdout + proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    android = manifest["targets"]["android"]["variants"]["app-assets"]["info"]["app_build"]
    assert android["status"] == "not run" and "source checkout" in android["reason"], android
    ios = manifest["targets"]["ios"]["variants"]["app-bundle"]["info"]["app_build"]
    from arrcoc_edge.targets.ios import swift as ios_swift

    if ios_swift.Swift.find()[0] is not None:  # the bundled Swift sources compiled and their tests ran
        assert ios["status"] == "passed", ios


def _without_packages(contract: dict) -> dict:
    """An iOS contract without what coremltools makes differ build to build: each .mlpackage's hash
    (its artifacts' and encoder's sha256, its files' entries)."""
    data = json.loads(json.dumps(contract))
    for entry in data["artifacts"].values():
        entry.pop("sha256")
    encoder = (data.get("typed_text") or {}).get("encoder") or {}
    if str(encoder.get("file", "")).endswith(".mlpackage"):
        encoder.pop("sha256")
    data["files"] = {k: v for k, v in data["files"].items() if ".mlpackage/" not in k}
    return data
