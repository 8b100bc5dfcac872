"""The project's C++ ExecuTorch runner (targets/shared/et_runner.cpp): the same numbers as ExecuTorch's
Python bindings on x86 (bit for bit), a run on the phones' arm64 kernels under qemu-user, and the
trust the tool puts in the trees it executes from (the runner's and the emulation root)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from arrcoc_edge.errors import GateError, HostCapabilityError

TINY = Path(__file__).parent / "data" / "tiny.pte"  # tests/data/make_tiny_pte.py


def _inputs(batch: int = 3, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (batch, 8, 8, 3), dtype=np.uint8), rng.standard_normal((batch, 5)).astype(np.float32)]


def _tree_or_skip():
    from arrcoc_edge.targets.shared import et_runner

    try:
        return et_runner.runner_tree()
    except HostCapabilityError as exc:
        pytest.skip(f"{exc.problem} ({exc.fix})")


def _python_outputs(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(str(path)).load_method("forward")
    return [o.numpy().copy() for o in method.execute([torch.from_numpy(a) for a in inputs])]


@pytest.mark.slow  # importing torch and the bindings alone took 40 s on a busy 2-core host
def test_cpp_runner_is_bit_identical_to_the_python_bindings_on_x86():
    from arrcoc_edge.targets.shared import et_runner

    _tree_or_skip()
    inputs = _inputs()
    with et_runner.RunnerProcess() as process:
        outs, answer = process.request(TINY, "forward", inputs, repeat=2)
        again, _ = process.request(TINY, "forward", _inputs(batch=1, seed=1))  # the loaded program, a new batch
    want = _python_outputs(TINY, inputs)
    assert [o.dtype for o in outs] == [np.float32, np.int64] and outs[0].shape == (3, 16) and outs[1].shape == (3, 4)
    assert all(np.array_equal(a, b) for a, b in zip(outs, want))
    assert np.array_equal(again[1], _python_outputs(TINY, _inputs(batch=1, seed=1))[1])
    assert answer["threads"] == 1 and len(answer["call_ms"]) == 2 and answer["first_ms"] > 0


def test_emulated_arm64_run_of_a_small_program():
    """The aarch64 runner under qemu on both CPU models: the x86 numbers within float rounding, the
    same top-k; a program the runtime refuses is a measured failure (GateError), not a crash."""
    from arrcoc_edge.targets.shared import arm64, et_runner

    _tree_or_skip()
    try:
        arm64.emulation_root()
    except HostCapabilityError as exc:
        pytest.skip(exc.problem)
    inputs = _inputs()
    with et_runner.RunnerProcess() as host:  # x86's numbers: the Python bindings' bit for bit (above)
        want, _ = host.request(TINY, "forward", inputs)
    for isa, (cpu, _) in et_runner.CPUS.items():
        with et_runner.RunnerProcess(isa) as process:
            outs, answer = process.request(TINY, "forward", inputs)
            assert f"-cpu {cpu}" in process.label and arm64.machine(isa) in process.label
            assert np.abs(outs[0] - want[0]).max() < 1e-5 and np.array_equal(outs[1], want[1]), isa
            with pytest.raises(GateError, match="does not run in the C\\+\\+ ExecuTorch runtime"):
                process.request(TINY, "no_such_method", inputs)


def test_a_stale_or_missing_runner_tree_is_not_measured(monkeypatch, tmp_path):
    from arrcoc_edge.targets.shared import et_runner

    monkeypatch.setenv("ARRCOC_ET_RUNNER_ROOT", str(tmp_path / "none"))
    with pytest.raises(HostCapabilityError, match="no C\\+\\+ ExecuTorch runner"):
        et_runner.runner_tree()
    root = tmp_path / "tree"
    root.mkdir()
    (root / et_runner.READY_MARKER).write_text("recipe 1; runner 0000\n")
    monkeypatch.setenv("ARRCOC_ET_RUNNER_ROOT", str(root))
    with pytest.raises(HostCapabilityError, match="built from another et_runner.cpp"):
        et_runner.runner_tree()


# ---- trust: the whole tree, not a few paths


def _fake_emulation_root(tmp_path: Path) -> Path:
    from arrcoc_edge.targets.shared import arm64

    root = tmp_path / "root"
    for sub in ("sysroot/usr/bin", "sysroot/usr/lib/python3.11", "site/onnxruntime", "site/numpy/core"):
        (root / sub).mkdir(parents=True)
    for name in ("qemu-aarch64", "sysroot/usr/bin/python3.11", "site/numpy/__init__.py", "site/numpy/core/deep.py"):
        (root / name).write_text("")
    (root / arm64.READY_MARKER).write_text("recipe 2\n")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755)
    return root


@pytest.mark.parametrize("spoil", ["other-writable", "other-owned", "link-out"])
def test_emulation_root_is_checked_whole(monkeypatch, tmp_path, spoil):
    """A file deep in the emulation root that another user can write (or owns, or a link out of the
    tree) is refused before anything runs: the run imports thousands of files, not the 8 once checked."""
    from arrcoc_edge.targets.shared import arm64

    root = _fake_emulation_root(tmp_path)
    monkeypatch.setenv("ARRCOC_ARM64_ROOT", str(root))
    assert arm64.emulation_root() == root  # trusted as made
    deep = root / "site/numpy/core/deep.py"
    if spoil == "other-writable":
        deep.chmod(0o646)
    elif spoil == "other-owned":
        os.chown(deep, 65534, 65534)
    else:
        deep.unlink()
        deep.symlink_to("/etc/hostname")
    (root / arm64.READY_MARKER).write_text("recipe 2\n# changed\n")  # a new marker: checked again
    with pytest.raises(HostCapabilityError, match=f"not trusted: {deep}"):
        arm64.emulation_root()


def test_runner_tree_is_checked_whole(monkeypatch, tmp_path):
    import hashlib

    from arrcoc_edge.targets.shared import et_runner

    root = tmp_path / "tree"
    (root / "cross/usr/lib").mkdir(parents=True)
    (root / "cross/usr/lib/libdeep.so").write_text("")
    source = hashlib.sha256(et_runner.SOURCE.read_bytes()).hexdigest()
    (root / et_runner.READY_MARKER).write_text(f"recipe 1; runner {source}\n")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755)
    monkeypatch.setenv("ARRCOC_ET_RUNNER_ROOT", str(root))
    assert et_runner.runner_tree() == root
    (root / "cross/usr/lib/libdeep.so").chmod(0o666)
    (root / et_runner.READY_MARKER).write_text(f"recipe 1; runner {source}\n\n")
    with pytest.raises(HostCapabilityError, match="libdeep.so is another user's or writable by others"):
        et_runner.runner_tree()


def test_the_set_up_trees_are_trusted():
    """What scripts/setup.d/60 and 65 make passes the whole-tree check (no link out, nothing writable)."""
    from arrcoc_edge.targets.shared import arm64

    _tree_or_skip()
    try:
        arm64.emulation_root()
    except HostCapabilityError as exc:
        if "not trusted" in exc.problem:
            raise
        pytest.skip(exc.problem)


# ---- ARRCOC_ARM64_TIMEOUT: one settings line, before any work


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "0", "soon"])
def test_bad_arm64_timeout_is_a_settings_error(monkeypatch, value):
    from arrcoc_edge.errors import SettingsError
    from arrcoc_edge.targets import TARGETS
    from arrcoc_edge.targets.shared import arm64

    monkeypatch.setenv("ARRCOC_ARM64_TIMEOUT", value)
    for name in ("onnx-int8", "executorch"):
        with pytest.raises(SettingsError, match="ARRCOC_ARM64_TIMEOUT"):
            TARGETS[name].check_options({}, None)
    monkeypatch.setenv("ARRCOC_ARM64_TIMEOUT", "12.5")
    assert arm64.timeout_s() == 12.5


@pytest.mark.slow  # a whole command: imports and the checkpoint's load (25 s on a busy host)
def test_bad_arm64_timeout_fails_the_build_in_one_line(cli, tmp_path):
    result = cli("build", "--target", "onnx-int8", "--out", str(tmp_path / "out"), env={"ARRCOC_ARM64_TIMEOUT": "-1"})
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert "settings error: ARRCOC_ARM64_TIMEOUT='-1' is not a number of seconds > 0" in lines[-1]
    assert not (tmp_path / "out" / "manifest.json").exists()


# ---- an emulator that answers without its outputs or facts: not measured, with the reason


@pytest.mark.parametrize("lie", ["no-outputs", "bad-facts", "facts-list"])
def test_emulator_answer_without_outputs_or_facts_is_not_measured(monkeypatch, tmp_path, lie):
    from arrcoc_edge.targets.shared import arm64

    try:
        arm64.emulation_root()
    except HostCapabilityError as exc:
        pytest.skip(exc.problem)
    facts = {"no-outputs": '{"stage": "done", "machine": "aarch64", "onnxruntime": "1", "python": "3", '
                           '"load_ms": 1, "call_ms": []}',
             "bad-facts": '{"stage": "done", ', "facts-list": '["done"]'}[lie]
    worker = tmp_path / "worker.py"  # answers "done" having written only facts.json
    worker.write_text("import json, sys\nfor line in sys.stdin:\n"
                      f"    open(json.loads(line)['facts'], 'w').write({facts!r})\n"
                      "    print('done', flush=True)\n")
    monkeypatch.setattr(arm64, "WORKER", worker)
    runner = arm64.arm64_runner(tmp_path / "model.onnx")
    with pytest.raises(HostCapabilityError) as caught:
        runner.run_many([{"x": np.zeros(1, np.float32)}])
    assert caught.value.problem.startswith("the arm64 emulation at ")
    assert ("no outputs.npz" if lie == "no-outputs" else "an unreadable facts.json") in caught.value.problem


# ---- the executorch stage's .pte files on arm64 (the session's shared `--target executorch,ptl` build,
# tests/test_executorch_ptl.py's too)


@pytest.fixture(scope="module")
def et_build(shared_build):
    return shared_build("executorch,ptl")


def _executorch_variants(out: Path) -> dict:
    import json

    return json.loads((out / "manifest.json").read_text())["targets"]["executorch"]["variants"]


@pytest.mark.slow
def test_every_published_pte_records_parity_per_isa(et_build):
    """fp32 and int8 .pte: x86 and both emulated CPU models in parity.by_isa, each held to the same
    gate, the report's per-ISA table showing them."""
    import json

    from arrcoc_edge.targets.shared import et_runner

    _tree_or_skip()
    out = et_build.out
    for name, v in _executorch_variants(out).items():
        by_isa = v["parity"]["by_isa"]
        assert set(by_isa) == {"x86_64", *et_runner.CPUS}, name
        for isa, (cpu, _) in et_runner.CPUS.items():
            rec = by_isa[isa]
            assert rec["measured"] and rec["passed"], (name, isa, rec)
            assert f"-cpu {cpu}" in rec["runtime"] and "C++ runtime" in rec["runtime"]
            assert rec["vs_host"]["topk_overlap_min"] == 1.0 and rec["vs_host"]["relevance_max_abs"] < 1e-4
            assert rec["facts"]["calls"] >= 1
    page = (out / "report.html").read_text()
    for isa in et_runner.CPUS:
        assert f"data-isa-target='executorch' data-isa-variant='int8' data-isa='{isa}'" in page
    # the Lite Interpreter stays on x86, and the manifest says why
    ptl = json.loads((out / "manifest.json").read_text())["targets"]["ptl"]["variants"]["fp32"]
    assert "by_isa" not in ptl["parity"] and "aarch64 torch wheel is a CUDA build" in ptl["info"]["arm64"]


@pytest.mark.slow
def test_a_pte_that_fails_only_on_arm_is_not_published(et_build, make_ctx):
    """The fp32 .pte, held to the lossless gate, passes on x86; on the ARM kernels a deliberately
    altered program runs in its place (the int8 .pte: the same contract, quantised numbers). The
    measured ARM failure fails the variant and the stage (nothing published, the android stage that
    copies the .pte into the app has nothing to copy), and each reason names its ISA."""
    import shutil

    from arrcoc_edge.building.build import run_stage
    from arrcoc_edge.stages.parity import LOSSLESS
    from arrcoc_edge.stages.target import Variant
    from arrcoc_edge.targets import TARGETS
    from arrcoc_edge.targets.shared import et_runner

    _tree_or_skip()
    variants = _executorch_variants(et_build.out)
    ctx = make_ctx()
    staged = {}
    for name in ("fp32", "int8"):
        staged[name] = ctx.staging / Path(variants[name]["files"][0]).name
        shutil.copyfile(et_build.out / variants[name]["files"][0], staged[name])
    fp32 = Variant("fp32", [staged["fp32"]], LOSSLESS, staged["fp32"].stat().st_size * 2, primary=True,
                   info=variants["fp32"]["info"])
    altered = Variant("fp32", [staged["int8"]], LOSSLESS, fp32.size_budget, info=variants["int8"]["info"])
    target = TARGETS["executorch"]

    class ArmAltered(type(target)):  # the real target's runners and ISAs; ARM is handed the altered program
        def build(self, ctx):
            return [fp32]

        def other_isas(self, ctx, variant):
            return super().other_isas(ctx, altered)

    stage = run_stage(ArmAltered(), ctx)
    report = stage.variants[0]
    assert report.by_isa["x86_64"]["passed"], report.failures
    for isa in et_runner.CPUS:
        assert report.by_isa[isa]["measured"] and not report.by_isa[isa]["passed"], report.by_isa[isa]
        assert any(f.startswith(f"{isa}: relevance_max_abs=") for f in report.failures), report.failures
    assert all(f.split(": ", 1)[0] in et_runner.CPUS for f in report.failures)
    assert report.status == "failed" and stage.status == "failed" and not stage.publishable


@pytest.mark.slow
def test_coreml_says_why_it_is_not_run_on_arm64(ios_build):
    import json

    coreml = json.loads((ios_build.out / "manifest.json").read_text())["targets"]["coreml"]["variants"]
    assert coreml and all("Core ML's runtime exists only on Apple's systems" in v["info"]["arm64"] for v in coreml.values())


@pytest.mark.slow
def test_bench_times_the_cpp_runner_beside_the_python_bindings(et_build, golden):
    """`invoke bench`'s executorch cases: per variant, the C++ runner on one thread beside the
    bindings' one-thread row, timed inside the runner (self-timed), int8 compared with fp32."""
    import json

    from arrcoc_edge.targets import TARGETS

    _tree_or_skip()
    entry = json.loads((et_build.out / "manifest.json").read_text())["targets"]["executorch"]
    cases = {c.runtime: c for c in TARGETS["executorch"].bench_cases(et_build.out, entry)}
    for name in ("fp32", "int8"):
        cpp, python = cases[f"executorch {name} (C++ runner, 1 thread)"], cases[f"executorch {name} (1 thread)"]
        assert cpp.threads == 1 and cpp.self_timed and not cpp.warm_call and cpp.max_batch == python.max_batch
        assert cpp.compare_to == (None if name == "fp32" else "executorch fp32 (C++ runner, 1 thread)")
        ms = cpp.run(golden.heldout.inputs(0, 1))
        assert isinstance(ms, float) and 0 < ms < 60_000


def test_runner_answer_without_its_outputs_is_not_measured(tmp_path, monkeypatch):
    """A runner that answers but wrote no output files (or wrong sizes) is not trusted: one typed
    HostCapabilityError (not measured), never an untyped error."""
    from arrcoc_edge.targets.shared import et_runner

    _tree_or_skip()
    fake = tmp_path / "runner.sh"  # answers every request with one claimed output it never wrote
    fake.write_text('#!/bin/sh\nwhile read line; do echo \'{"outputs": [{"dtype": "f32", "shape": [3, 16]}], '
                    '"load_ms": 0, "first_ms": 0, "call_ms": [], "threads": 1}\'; done\n')
    fake.chmod(0o755)
    monkeypatch.setattr(et_runner, "command", lambda isa, threads=1: ([str(fake)], "a runner that lies"))
    with et_runner.RunnerProcess() as process:
        with pytest.raises(HostCapabilityError, match="answered tiny.pte without readable outputs"):
            process.request(TINY, "forward", _inputs())


@pytest.mark.slow
def test_the_apps_query_encoder_pte_is_gated_on_arm64(android_build):
    """The Android app's query encoder .pte (MiniLM for the shipped checkpoint) held to its own gates
    on both emulated CPU models; the manifest records each, and it ships only having passed."""
    import json

    from arrcoc_edge.targets.shared import et_runner

    _tree_or_skip()
    manifest = json.loads((android_build.out / "manifest.json").read_text())
    typed = manifest["targets"]["android"]["variants"]["app-assets"]["info"]["typed_text"]
    from arrcoc_edge.targets.shared import arm64

    # the phones' CPU models only: the app's encoder does not run on a PC
    assert typed["supported"] and set(typed["by_isa"]) == {isa for isa in et_runner.CPUS if arm64.machine(isa) == "aarch64"}
    for isa, rec in typed["by_isa"].items():
        assert rec["measured"] and rec["passed"] and f"-cpu {et_runner.CPUS[isa][0]}" in rec["runtime"], rec
        assert rec["metrics"]["cosine_min"] >= 0.999 and rec["metrics"]["topk_overlap_min"] >= 0.9


def test_the_encoders_arm64_outputs_are_run_once_per_sequence_and_reused_only_when_identical(monkeypatch, tmp_path):
    """arm64_embeddings runs each distinct token sequence once; a second build with the same .pte
    bytes, ids, runner, emulator and CPU model reuses the sealed outputs (no emulated call), and any
    change of the program, or a cache entry altered on disk, runs them again."""
    from types import SimpleNamespace

    from arrcoc_edge.stages.progress import Counter
    from arrcoc_edge.targets.shared.encoder_arm64 import arm64_embeddings
    from arrcoc_edge.targets.shared import et_runner

    _tree_or_skip()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ARRCOC_CONVERSION_CACHE", raising=False)

    class Counting:  # stands in for the emulator process: answers from the ids, counts the calls
        def __init__(self):
            self.calls = []

        def request(self, model, method, inputs):
            self.calls.append(inputs[0].tolist())
            return [np.asarray(inputs[0], dtype=np.float32).sum(keepdims=True).reshape(1, 1) + np.arange(4, dtype=np.float32)], {}

    log = []
    ctx = SimpleNamespace(log=log.append, counter=lambda what, total: Counter(log.append, what, total))
    pte = tmp_path / "encoder.pte"
    pte.write_bytes(b"program one")
    isa = next(iter(et_runner.CPUS))
    ids = [[101, 7, 102], [101, 7, 102], [101, 102]]
    first = Counting()
    table, run = arm64_embeddings(ctx, pte, isa, first, ids, True)
    assert len(first.calls) == 2 and not run["reused"] and set(table) == {(101, 7, 102), (101, 102)}
    again = Counting()
    reused, run = arm64_embeddings(ctx, pte, isa, again, ids, True)
    assert again.calls == [] and run["reused"] and "identical earlier run" in run["outputs"]
    assert all(np.array_equal(reused[k], table[k]) for k in table)
    pte.write_bytes(b"program two")
    other = Counting()
    assert not arm64_embeddings(ctx, pte, isa, other, ids, True)[1]["reused"] and len(other.calls) == 2
    for entry in (tmp_path / "cache" / "arrcoc-edge" / "conversions").glob("arm64-encoder-*/embeddings.npy"):
        entry.chmod(0o600)
        entry.write_bytes(entry.read_bytes()[:-4] + b"\0\0\0\0")  # the stored outputs changed on disk
    altered = Counting()
    assert not arm64_embeddings(ctx, pte, isa, altered, ids, True)[1]["reused"] and len(altered.calls) == 2
    assert any("conversion cache" in line for line in log)


def test_the_emulated_encoder_check_runs_one_sequence_of_each_length():
    """Every kernel path of the whole list (the .pte's shapes follow the token count alone), the
    shortest and the longest included, and nothing twice."""
    from arrcoc_edge.targets.shared.encoder_arm64 import one_per_length

    ids = [[101, 102], [101, 102], [101, 5, 102], [101, 9, 102], [101, 3, 4, 102], [101, *range(254), 102], [101, 8, 102]]
    chosen = one_per_length(ids)
    assert set(chosen) == {(101, 3, 4, 102), (101, 5, 102), (101, 102), (101, *range(254), 102)} and len(chosen) == 4
    assert sorted(len(c) for c in chosen) == sorted({len(i) for i in ids})


def test_contract_json_keeps_no_arm64_run_record_but_the_manifest_does():
    """How the encoder's arm64 outputs were obtained (seconds, reused or not) differs from build to
    build: contract.json (identical for one checkpoint) leaves it out, the manifest keeps it."""
    from arrcoc_edge.targets.app_encoder import contract_info, typed_text_summary

    info = {"kind": "minilm", "by_isa": {"cpu": {"measured": True, "passed": True,
                                                 "run": {"outputs": "62 distinct token sequences run (117.9 s)", "reused": False}}}}
    kept = contract_info(info)
    assert kept["by_isa"]["cpu"] == {"measured": True, "passed": True} and "run" in info["by_isa"]["cpu"]
    typed = {"supported": True, "tokenizer": {"file": "tokenizer.json"},
             "encoder": {"file": "query_encoder.pte", "kind": "minilm", "variant": "fp32", "bytes": 1,
                         "host_check": {"metrics": {}}, "info": kept}}
    assert typed_text_summary(typed, info)["by_isa"]["cpu"]["run"]["reused"] is False
    assert "run" not in typed_text_summary(typed)["by_isa"]["cpu"]


@pytest.mark.parametrize("name", ["tab\there", "new\nline", "cr\rx", "sp ace é"])
def test_any_byte_in_a_path_reaches_the_runner_and_answers_stay_in_step(tmp_path, name):
    """`build --target executorch --out $'x\\ty'` failed a correct .pte's arm64 gate (the path split the
    tab-separated request); with a newline one request's status was attached to the next. The
    request holds only names of the runner's own folder now; the next request gets its own answer."""
    import shutil

    from arrcoc_edge.targets.shared import et_runner

    _tree_or_skip()
    odd = tmp_path / name
    odd.mkdir()
    shutil.copy(TINY, odd / "model.pte")
    with et_runner.RunnerProcess() as process:
        first, _ = process.request(odd / "model.pte", "forward", _inputs())
        with pytest.raises(GateError):
            process.request(odd / "model.pte", "no_such_method", _inputs())
        again, _ = process.request(TINY, "forward", _inputs())
    assert all(np.array_equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("field", ["a\tb", "a\nb", "a\rb", "a\0b"])
def test_a_request_field_with_a_control_character_is_never_sent(field):
    from arrcoc_edge.targets.shared import et_runner

    with pytest.raises(HostCapabilityError):
        et_runner.request_line(["model.pte", field])
    assert et_runner.request_line(["a", "b"]) == "a\tb"
