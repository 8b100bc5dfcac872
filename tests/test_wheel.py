"""The package as a user installs it: the wheel `invoke package` makes (scripts/package.py: `python -m
build`, the sdist's wheel equal to the tree's, twine check) from a copy of this checkout's tracked
files, installed into fresh venvs with no extras (so no torch) on Python 3.11 (the host) and 3.13
(Debian trixie's, in the trixie chroot, from the cp313 wheels scripts/setup.d/70-python313.sh
fetched). There `arrcoc-edge predict --query` and `from arrcoc_edge import load` answer a sentence
from a published folder with the numbers of the checkout's FP32 ONNX predict, run from a folder
holding the user's own `pipeline.py`, `pipeline/` and `targets/`, beside the registry's unrelated
`pipeline` distribution: the wheel installs one top-level name, `arrcoc_edge`, so neither is touched.
"""
from __future__ import annotations

import json
import os
import re
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
           "checkpoints", "scripts/package.py")
CLASH = "pipeline==0.1.0"  # the registry's unrelated distribution of that name ("Command pipelines for Python")
# A user's own modules of the generic names: importing any of them is a failure
USERS_OWN = {"pipeline.py": "raise RuntimeError(\"the user's own pipeline.py was imported\")\n",
             "targets/__init__.py": "raise RuntimeError(\"the user's own targets/ was imported\")\n",
             "pipeline/__init__.py": "raise RuntimeError(\"the user's own pipeline/ was imported\")\n"}


def tracked(root: Path, names) -> list[str]:
    """The tracked files under `names` (never node_modules, build outputs or caches)."""
    out = subprocess.run(["git", "ls-files", "-z", "--", *names], cwd=root, capture_output=True, check=True)
    return [f for f in out.stdout.decode().split("\0") if f]


def users_folder(root: Path) -> Path:
    """A working folder as users have them: their own pipeline.py, pipeline/ and targets/."""
    for name, text in USERS_OWN.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The documented command (`invoke package`, i.e. scripts/package.py) on a copy of the checkout's
    tracked sources (what a clone holds): the sdist, the wheel built from it, both checked."""
    src, dist = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in tracked(REPO, SOURCES):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    proc = subprocess.run([sys.executable, str(src / "scripts" / "package.py"), "--out", str(dist)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "the sdist builds the same wheel as the tree" in proc.stdout
    (found,) = dist.glob("arrcoc_edge-*.whl")
    assert len(list(dist.glob("arrcoc_edge-*.tar.gz"))) == 1
    return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with `pip install <wheel>` and nothing else (the pins from constraints.txt)."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    proc = subprocess.run([str(root / "bin" / "pip"), "install", "-q", "-c", str(REPO / "constraints.txt"), str(wheel),
                           CLASH], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def test_the_wheel_installs_one_name_of_its_own_and_the_command(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"arrcoc_edge"}
    assert {"arrcoc_edge/__init__.py", "arrcoc_edge/__main__.py", "arrcoc_edge/frontends/api.py",
            "arrcoc_edge/targets/__init__.py", "arrcoc_edge/targets/onnx.py"} <= set(names)
    assert "arrcoc_edge/bundled/checkpoints/arrcoc-v0.1-trained.safetensors" in names
    assert {"arrcoc_edge/targets/bundled/web/index.html", "arrcoc_edge/targets/bundled/web/app.js"} <= set(names)
    assert any(n.startswith("arrcoc_edge/targets/bundled/mobile/android/") for n in names)
    assert "arrcoc_edge/targets/shared/tokenizer_corpus.txt" in names  # the mobile stages' tokenizer tests read it
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
    user = users_folder(tmp_path / "project")  # the user's own pipeline.py and targets/, and the registry's `pipeline`
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(command), "predict", "--out", str(published_with_encoder), "--image", str(photo),
                           "--query", "something red", "--json", str(tmp_path / "p.json")],
                          capture_output=True, text=True, cwd=user, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = json.loads((tmp_path / "p.json").read_text())
    api = subprocess.run([str(python), "-c", API_PREDICT, str(published_with_encoder), str(photo), "something red"],
                         capture_output=True, text=True, cwd=user, env=env, timeout=300)
    assert api.returncode == 0, api.stderr[-3000:]
    assert json.loads(api.stdout)["topk_indices"] == installed["topk_indices"]

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


# `from arrcoc_edge import load` in the user's folder (sys.path[0] is that folder, with its pipeline.py)
API_PREDICT = """
import json, sys
from arrcoc_edge import load
with load(sys.argv[1], "onnx") as model:
    print(json.dumps(model.predict(sys.argv[2], sys.argv[3]).to_json()))
"""


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
    # no publish and no build extra: the fix is a published folder, never a build or a torch install
    photo_file(tmp_path)
    nothing = subprocess.run([command, "predict", "--image", "photo.jpg", "--query", "x"], capture_output=True, text=True,
                             cwd=tmp_path)
    assert nothing.returncode == 2 and "pass --out a folder a build published" in nothing.stderr, nothing.stderr
    assert "pip install" not in nothing.stderr and "build --target" not in nothing.stderr, nothing.stderr
    misspelt = subprocess.run([command, "prdict"], capture_output=True, text=True, cwd=tmp_path)
    assert misspelt.returncode == 1 and "Did you mean `arrcoc-edge predict`?" in misspelt.stderr, misspelt.stderr


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
    # one user cache for the checkout and the installed package: the same code and tools, one key
    converted = re.findall(r"^(?:\[background\] )?(\S+): converted in", proc.stdout + proc.stderr, re.M)
    assert not converted, f"converted again from the installed package: {converted}"
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


PY313_WHEELS = "/opt/arrcoc-wheels-cp313"  # inside the trixie chroot: scripts/setup.d/70-python313.sh
PY313_WORK = "work/arrcoc-py313"           # inside the chroot, emptied at each run (the chroot's lock held)
PY313_SCRIPT = f"""set -e
cd /{PY313_WORK}/project
python3.13 -m venv ../venv
../venv/bin/pip install -q --disable-pip-version-check --no-index --find-links {PY313_WHEELS} ../$WHEEL {CLASH}
../venv/bin/python -c 'import sys, importlib.util as u; print(sys.version.split()[0], [m for m in ("torch", "onnx") if u.find_spec(m)])' > ../probe.txt
../venv/bin/arrcoc-edge predict --out ../published --image ../photo.jpg --query "something red" --json ../p.json > ../predict.txt
../venv/bin/arrcoc-edge predict --out ../published --image ../photos --query "the top left" --json ../folder.jsonl > ../folder.txt
../venv/bin/python -c "$API" ../published ../photo.jpg "something red" > ../api.json
../venv/bin/python -m arrcoc_edge --version > ../version.txt
"""


def test_python_3_13_installs_the_wheel_and_answers_a_sentence(wheel, published_with_encoder, tmp_path):
    """Python 3.13 (Debian trixie's, in the trixie chroot): a fresh venv, `pip install` of the wheel
    with no extras from the registry's cp313 wheels (offline: fetched by the set-up), then the
    console command, `from arrcoc_edge import load` and `python -m arrcoc_edge` in a folder with the
    user's own pipeline.py and targets/, the registry's `pipeline` installed beside. The answers equal
    the checkout's FP32 ONNX predict on Python 3.11."""
    from arrcoc_edge.targets.ios.swift import CHROOT, Swift

    chroot = Path(os.path.realpath(CHROOT))
    if not (chroot / PY313_WHEELS.lstrip("/") / ".arrcoc-py313-ready").is_file() or os.geteuid() != 0:
        pytest.fail("no Python 3.13 in the trixie chroot: run `bash scripts/setup.sh` as root "
                    "(scripts/setup.d/50-swift-trixie.sh and 70-python313.sh)")
    swift = Swift(chroot)
    work = chroot / PY313_WORK
    with swift.session():
        shutil.rmtree(work, ignore_errors=True)
        users_folder(work / "project")
        shutil.copy2(wheel, work / wheel.name)
        shutil.copytree(published_with_encoder, work / "published", symlinks=False)  # the files, not the links
        photo = photo_file(work)
        (work / "photos").mkdir()
        for seed in (1, 2):
            photo_file(work / "photos", f"p{seed}.jpg", size=(640, 480), seed=seed * 90)
        try:
            proc = swift.run(PY313_SCRIPT, {"WHEEL": wheel.name, "API": API_PREDICT}, timeout=600)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            version, heavy = (work / "probe.txt").read_text().split(" ", 1)
            installed = json.loads((work / "p.json").read_text())
            api = json.loads((work / "api.json").read_text())
            folder = [json.loads(line) for line in (work / "folder.jsonl").read_text().splitlines()]
            shown = (work / "version.txt").read_text()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    assert version.startswith("3.13.") and heavy.strip() == "[]"
    assert len(folder) == 2 and all(len(line["topk_indices"]) == len(installed["topk_indices"]) for line in folder)
    assert "arrcoc-edge" in shown and "0.1.0" in shown

    import arrcoc_edge  # the checkout's FP32 ONNX predict on this Python (3.11)

    with arrcoc_edge.load(published_with_encoder, "onnx") as model:
        checkout = model.predict(photo_file(tmp_path), "something red").to_json()
    for answer in (installed, api):
        assert answer["topk_indices"] == checkout["topk_indices"]
        assert np.allclose(answer["relevance"], checkout["relevance"], atol=1e-6)
        assert np.allclose(answer["weights"], checkout["weights"], atol=1e-6)


def test_the_installed_commands_work_or_name_an_installed_fix(venv, tmp_path):
    """`train` reads the bundled checkpoint and writes its default output into the working folder
    (it looked for site-packages/checkpoints/ and would have written there); in a deleted working
    folder a command with absolute paths works and a relative one is one line (an import read
    Path.cwd(): a traceback); serve's fix names `arrcoc-edge` and --out, never `invoke`. train
    needs torch: the build extras from this checkout's .venv, appended to the venv's path. Over
    60 s: one training step still makes and scores the scenes."""
    command = str(venv / "bin" / "arrcoc-edge")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    site = next((venv / "lib").glob("python3.*/site-packages"))
    gone = tmp_path / "gone"
    gone.mkdir()
    script = (f'cd "{gone}" && rmdir "{gone}" && "{command}" verify --out "{tmp_path / "none"}"; echo "rc=$?"; '
              f'"{command}" verify; echo "rc=$?"')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.stdout.splitlines() == ["rc=2", "rc=2"] and "Traceback" not in proc.stderr, proc.stderr
    absolute, relative = proc.stderr.splitlines()
    assert absolute.startswith(f"input error: no manifest in {tmp_path / 'none'}") and "invoke" not in absolute, absolute
    assert relative.startswith("input error: the working folder no longer exists"), relative

    (tmp_path / "empty").mkdir()
    served = subprocess.run([command, "serve", "--out", str(tmp_path / "empty")], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=300)
    assert served.returncode == 2 and "invoke" not in served.stderr and "arrcoc-edge build --target web --out" in \
        served.stderr, served.stderr

    extras = site / "zz-build-extras.pth"
    made = not extras.exists()
    checkout_site = next((REPO / ".venv" / "lib").glob("python3.*/site-packages"))
    extras.write_text(f"{checkout_site}\n")  # after the venv's own packages
    before = sorted(str(p.relative_to(site)) for p in site.rglob("*") if "__pycache__" not in p.parts)
    try:
        work = tmp_path / "work"
        work.mkdir()
        trained = subprocess.run([command, "train", "--steps", "1"], capture_output=True, text=True, cwd=work,
                                 env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, timeout=1500)
        after = sorted(str(p.relative_to(site)) for p in site.rglob("*") if "__pycache__" not in p.parts)
    finally:
        if made:
            extras.unlink()
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-3000:]
    assert f"wrote {Path('arrcoc-v0.1-trained.safetensors')}" in trained.stdout + trained.stderr
    assert sorted(p.name for p in work.iterdir()) == ["arrcoc-v0.1-trained.safetensors"]
    assert after == before, f"written into site-packages: {sorted(set(after) - set(before))[:5]}"
