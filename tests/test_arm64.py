"""Kernels of CPUs this host is not: onnx-int8's three variants run on onnxruntime's aarch64 wheel
under qemu-aarch64 (the phones) and on this checkout's onnxruntime under qemu-x86_64 -cpu Haswell
and Nehalem (the x86-64 levels PCs run), held to the same gate; the manifest and the report record
parity per instruction set; emulation that is not there is "not measured", never a failed build."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from arrcoc_edge.errors import HostCapabilityError

pytestmark = pytest.mark.slow
ISA = "aarch64 (emulated)"


def _emulation_or_skip():
    from arrcoc_edge.targets.shared import arm64

    try:
        return arm64.emulation_root()
    except HostCapabilityError as exc:
        pytest.skip(f"{exc.problem} ({exc.fix})")


@pytest.fixture(scope="session")
def int8_out(shared_build):
    """The session's shared `--target onnx-int8` build (tests/test_onnx_int8.py's too), which ran the
    emulated-ARM gate where this host has the emulation root."""
    _emulation_or_skip()
    build = shared_build("onnx-int8")
    BUILD_STDOUT.append(build.stdout)
    return build.out


BUILD_STDOUT: list[str] = []


def _variants(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["targets"]["onnx-int8"]["variants"]


def test_manifest_records_parity_per_isa(int8_out, golden):
    from arrcoc_edge.targets.shared.arm64 import CPUS, X86_LEVELS, machine

    variants = _variants(int8_out)
    assert set(variants) >= {"fp32-ort", "int8-ort"} and len(variants) == 3
    assert ISA in CPUS and len(CPUS) == 4 and len(X86_LEVELS) == 2
    for name, v in variants.items():
        by_isa = v["parity"]["by_isa"]
        assert set(by_isa) == {"x86_64", *CPUS}, name
        host = by_isa["x86_64"]
        assert host["measured"] and host["passed"] and host["metrics"] == {
            k: x for k, x in v["parity"]["metrics"].items() if k != "size_bytes"}
        # this host's CPU as its kernels saw it, beside the emulated ones' (why an .onnx can differ)
        assert host["facts"]["machine"] == "x86_64" and host["facts"]["cpu"]
        assert "sse2" in host["facts"]["cpu_features"].split(), host["facts"]  # x86-64 baseline: every host
        for isa, (cpu, _) in CPUS.items():
            arm = by_isa[isa]
            assert arm["measured"] and arm["passed"], (name, isa, arm)
            # the same held-out split, judged by the same gate, in the aarch64 onnxruntime (reported from inside)
            assert arm["metrics"]["samples"] == len(golden.heldout)
            gate = v["parity"]["gate"]
            assert all(arm["metrics"][m] <= limit for m, limit in gate["max"].items() if m != "size_bytes")
            assert all(arm["metrics"][m] >= limit for m, limit in gate["min"].items())
            facts, arch = arm["facts"], machine(isa)
            assert facts["machine"] == arch and facts["onnxruntime"] == "1.31.1"
            assert f"on {arch} under qemu-{arch} version 10." in arm["runtime"] and arm["runtime"].endswith(f"-cpu {cpu}")
            assert facts["calls"] == len(golden.heldout.runs(8)) and facts["ms_per_call_median"] > 0
            if arch == "x86_64":  # qemu-user shows the host's /proc/cpuinfo; the table names the model
                assert facts["cpu"] == CPUS[isa][1]
                continue
            # the kernels' CPU as onnxruntime saw it: dot product on both, i8mm only on qemu's max
            features = facts["cpu_features"].split()
            assert "asimddp" in features and ("i8mm" in features) == (cpu == "max")
            # the ARM kernels against this host's. The .ort files (what phones ship) are optimised
            # once, offline, so both ISAs run one graph: the same top-K on every sample. The .onnx
            # gets onnxruntime's x86-only rewrite of int8 activations to uint8 at load time
            # (QDQS8ToU8Transformer); on an AVX-512 host without VNNI that moved one sample's top-K
            # by 1/32 (measured 2026-11-28; with the rewrite disabled the .onnx equals the .ort to
            # 6e-6), so it is held to the gate's own top-K floor, not to identity.
            floor = 1.0 if name.endswith("-ort") else gate["min"]["topk_overlap_min"]
            assert arm["vs_host"]["topk_overlap_min"] >= floor, (name, isa, arm["vs_host"])
    # what the x86-only rewrite leaves exact: on each ARM CPU (emulated, so the same on every build
    # host) the quantised .onnx computes what its .ort computes, sample for sample
    onnx_name = next(n for n in variants if n != "fp32-ort" and not n.endswith("-ort"))
    for isa in [isa for isa in CPUS if machine(isa) == "aarch64"]:
        got, ort = (variants[n]["parity"]["by_isa"][isa]["metrics"] for n in (onnx_name, f"{onnx_name}-ort"))
        assert got["topk_overlap_min"] == ort["topk_overlap_min"] and got["topk_overlap_mean"] == ort["topk_overlap_mean"]
        assert abs(got["relevance_max_abs"] - ort["relevance_max_abs"]) <= 1e-6, (isa, got, ort)
    # the build's table says it too, in its parity column
    table = [line for line in BUILD_STDOUT[0].splitlines() if line.startswith("onnx-int8 ")]
    assert len(table) == 3 and all("; emulated ISAs: 4 of 4 passed" in line for line in table), table
    report = (int8_out / "REPORT.md").read_text()
    assert "## Parity per instruction set" in report
    for name in variants:
        for isa in ("x86_64", *CPUS):
            assert f"| onnx-int8 | {name} | {isa} | passed |" in report
    page = (int8_out / "report.html").read_text()
    assert page.count(f"data-isa='{ISA}'") == 3 and page.count("data-isa='aarch64 dot product") == 3
    assert all(f"data-isa-target='onnx-int8' data-isa-variant='{name}' data-isa='{isa}'" in page
               for name in variants for isa in X86_LEVELS)


def test_onnx_fp32_records_the_x86_levels(int8_out, golden):
    """The FP32 .onnx (what PCs run; phones take the .ort) on this host and on the two emulated x86
    levels below it, each held to its lossless gate, and its row of the build table says so."""
    from arrcoc_edge.targets.shared.arm64 import X86_LEVELS

    v = json.loads((int8_out / "manifest.json").read_text())["targets"]["onnx"]["variants"]["fp32"]
    by_isa = v["parity"]["by_isa"]
    assert set(by_isa) == {"x86_64", *X86_LEVELS}
    for isa in X86_LEVELS:
        rec = by_isa[isa]
        assert rec["measured"] and rec["passed"] and rec["metrics"]["samples"] == len(golden.heldout), (isa, rec)
        assert rec["vs_host"]["topk_overlap_min"] == 1.0 and rec["vs_host"]["relevance_max_abs"] < 1e-4, rec["vs_host"]
    row = next(line for line in BUILD_STDOUT[0].splitlines() if line.startswith("onnx ") and " fp32 " in line)
    assert "; emulated ISAs: 2 of 2 passed" in row, row


def test_arm64_runner_matches_x86_on_published_fp32_ort(int8_out, golden):
    from arrcoc_edge.targets.shared import arm64, onnx_common

    path = int8_out / _variants(int8_out)["fp32-ort"]["files"][0]
    split = golden.heldout
    batches = [split.inputs(a, b) for a, b in split.runs(8)][:4]  # a crop alone, crops together, a whole photo
    runner = arm64.arm64_runner(path)
    got = runner.run_many(batches)
    host = onnx_common.ort_runner(path)
    assert runner.facts["machine"] == "aarch64" and runner.facts["calls"] == len(batches)
    for b, arm_out in zip(batches, got):
        x86 = host.run(b)
        assert arm_out["relevance"].shape == x86["relevance"].shape
        assert np.abs(arm_out["relevance"] - x86["relevance"]).max() <= 1e-4
        assert np.abs(arm_out["weights"] - x86["weights"]).max() <= 1e-5
        for a, x in zip(arm_out["topk_indices"], x86["topk_indices"]):
            assert set(a.tolist()) == set(x.tolist())


def _fp32_ort_variant(out: Path, ctx, gate=None):
    import shutil

    from arrcoc_edge.stages.parity import LOSSLESS
    from arrcoc_edge.stages.target import Variant

    path = ctx.staging / "model.fp32.ort"
    shutil.copyfile(out / _variants(out)["fp32-ort"]["files"][0], path)
    return Variant("fp32-ort", [path], gate or LOSSLESS, path.stat().st_size * 2)


def test_unavailable_emulation_is_not_measured(int8_out, make_ctx, monkeypatch, tmp_path):
    """No emulation root: the arm64 entry says why, the variant's status is decided by x86."""
    from arrcoc_edge.building.build import verify_variant
    from arrcoc_edge.publishing import manifest, report
    from arrcoc_edge.targets import TARGETS

    monkeypatch.setenv("ARRCOC_ARM64_ROOT", str(tmp_path / "no-such-root"))
    ctx = make_ctx()
    result = verify_variant(TARGETS["onnx-int8"], ctx, _fp32_ort_variant(int8_out, ctx))
    assert result.status == "verified" and not result.failures
    arm = result.by_isa[ISA]
    assert arm == {"measured": False, "reason": f"not measured: no arm64 emulation on this host ({tmp_path / 'no-such-root'} is missing)",
                   "fix": arm["fix"]} and "scripts/setup.sh" in arm["fix"]
    parity = manifest._parity(result)
    assert parity["passed"] and parity["by_isa"][ISA]["measured"] is False
    rows = report.isa_rows({"targets": {"onnx-int8": {"variants": {"fp32-ort": {"parity": parity}}}}})
    assert [r["status"] for r in rows if r["isa"] == ISA] == [arm["reason"]]


def test_untrusted_or_incomplete_root_is_refused(monkeypatch, tmp_path):
    from arrcoc_edge.targets.shared import arm64

    root = tmp_path / "root"
    for sub in ("sysroot/usr/bin", "site/onnxruntime", "site/numpy"):
        (root / sub).mkdir(parents=True)
    (root / "qemu-aarch64").write_text("")
    (root / "sysroot/usr/bin/python3.11").write_text("")
    monkeypatch.setenv("ARRCOC_ARM64_ROOT", str(root))
    with pytest.raises(HostCapabilityError, match="incomplete"):
        arm64.arm64_runner(tmp_path / "model.ort")
    (root / arm64.READY_MARKER).write_text("wheels: x\n")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755)
    os.chmod(root / "site", 0o777)  # a cache anyone may write is never run
    with pytest.raises(HostCapabilityError, match="not trusted"):
        arm64.arm64_runner(tmp_path / "model.ort")
    os.chmod(root / "site", 0o755)
    # complete and trusted, but no emulator inside: it does not start, and says so
    with pytest.raises(HostCapabilityError, match="does not"):
        arm64.arm64_runner(tmp_path / "model.ort").run_many([{"x": np.zeros(1, np.float32)}])


def test_measured_arm64_failure_fails_the_variant(int8_out, golden, make_ctx):
    """A gate that this host's kernels meet and the ARM kernels, measured, do not: the variant fails
    on arm64 and its stage is not published. The gate is put between the two measured errors."""
    from arrcoc_edge.building.build import run_stage
    from arrcoc_edge.stages.parity import LOSSLESS, Gate, parity_metrics
    from arrcoc_edge.stages.target import run_split
    from arrcoc_edge.targets import TARGETS
    from arrcoc_edge.targets.shared import arm64, onnx_common

    path = int8_out / _variants(int8_out)["fp32-ort"]["files"][0]
    runners = {"x86_64": onnx_common.ort_runner(path), **{isa: arm64.arm64_runner(path, isa=isa) for isa in arm64.CPUS}}
    measured = {isa: parity_metrics(golden.heldout.expected, run_split(r, golden.heldout), 1e-3)["relevance_max_abs"]
                for isa, r in runners.items()}
    worst = max(measured[isa] for isa in arm64.CPUS)
    if worst <= measured["x86_64"]:
        pytest.skip(f"no gate separates the kernels on this held-out set: {measured}")
    between = (worst + measured["x86_64"]) / 2
    gate = Gate({**LOSSLESS.maxima, "relevance_max_abs": between}, LOSSLESS.minima, LOSSLESS.tie_tolerance)
    target = TARGETS["onnx-int8"]
    ctx = make_ctx()
    variant = _fp32_ort_variant(int8_out, ctx, gate)

    class OneVariant(type(target)):  # the real target's loaders and ISAs, building only this variant
        def build(self, ctx):
            return [variant]

    stage = run_stage(OneVariant(), ctx)
    report = stage.variants[0]
    assert report.by_isa["x86_64"]["passed"]
    assert {isa: report.by_isa[isa]["passed"] for isa in arm64.CPUS} == {isa: measured[isa] <= between for isa in arm64.CPUS}
    failing = [isa for isa in arm64.CPUS if measured[isa] > between]
    # the whole set's failure on each failing ISA, and nothing from another: a query kind (sentences,
    # vectors) held alone on that ISA may add its own line for the same limit
    whole = [f"{isa}: relevance_max_abs={measured[isa]:.4g} > {between:g}" for isa in failing]
    assert report.status == "failed" and [f for f in report.failures if f in whole] == whole
    assert all(f.split(": ", 1)[0] in failing and "relevance_max_abs=" in f for f in report.failures)
    assert stage.status == "failed" and not stage.publishable


def test_one_emulated_process_serves_a_stage_and_a_failure_or_overrun_costs_only_its_model(int8_out, monkeypatch,
                                                                                             tmp_path):
    """A stage's variants share one emulated process per CPU model (Emulator): the three published
    files give the outputs a process of their own gives, bit for bit. A model that kills the worker
    is a measured failure (GateError) and one that overruns its limit is not measured
    (HostCapabilityError); either way the next model runs in a fresh process. Closing ends it."""
    from arrcoc_edge.errors import GateError
    from arrcoc_edge.targets.shared import arm64

    _emulation_or_skip()
    files = [int8_out / v["files"][0] for v in _variants(int8_out).values()]
    rng = np.random.default_rng(0)
    batches = [{"image": rng.integers(0, 256, (2, 224, 224, 3), dtype=np.uint8),
                "query": rng.standard_normal((2, 384)).astype(np.float32)}]
    alone = [arm64.arm64_runner(f).run_many(batches)[0] for f in files]
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with arm64.Emulator() as emulator:
        shared = [arm64.arm64_runner(f, emulator=emulator) for f in files]
        got = [r.run_many(batches)[0] for r in shared]
        first = emulator.proc.pid
        with pytest.raises(GateError, match="broken.onnx failed on aarch64 .*kernels while loading"):
            arm64.arm64_runner(broken, emulator=emulator).run_many(batches)
        with pytest.raises(HostCapabilityError, match="did not finish in 0.01 s"):
            arm64.arm64_runner(files[0], timeout=0.01, emulator=emulator).run_many(batches)
        again = arm64.arm64_runner(files[0], emulator=emulator).run_many(batches)[0]
        last = emulator.proc.pid
    assert emulator.proc is None and not Path(f"/proc/{last}").exists()
    assert first != last and not Path(f"/proc/{first}").exists()
    for mine, theirs in zip(got + [again], alone + alone[:1]):
        assert mine.keys() == theirs.keys() and all(np.array_equal(mine[k], theirs[k]) for k in mine)
    assert [r.facts["machine"] for r in shared] == ["aarch64"] * 3


def test_a_builds_emulated_run_is_reused_only_for_the_same_model_inputs_and_cpu(int8_out, monkeypatch, tmp_path):
    """The build's emulated runs (cache_log given) keep their outputs in the conversion cache: the
    same model bytes and inputs on the same CPU model give the first run's outputs bit for bit
    without starting an emulator; another input array, model or CPU model runs afresh."""
    from arrcoc_edge.targets.shared import arm64

    _emulation_or_skip()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ARRCOC_CONVERSION_CACHE", raising=False)
    files = [int8_out / v["files"][0] for v in _variants(int8_out).values()]
    rng = np.random.default_rng(1)
    batch = {"image": rng.integers(0, 256, (1, 224, 224, 3), dtype=np.uint8),
             "query": rng.standard_normal((1, 384)).astype(np.float32)}
    said = []
    first = arm64.arm64_runner(files[0], cache_log=said.append)
    got = first.run_many([batch])[0]
    assert "reused" not in first.facts and any("converted in" in line for line in said)

    class NoEmulator:
        def run(self, *args):
            raise AssertionError("the emulator ran although an identical run is cached")

    again = arm64.arm64_runner(files[0], emulator=NoEmulator(), cache_log=said.append)
    same = again.run_many([batch])[0]
    assert "identical earlier run" in again.facts["reused"]
    assert all(np.array_equal(same[k], got[k]) for k in got)
    changed = {**batch, "query": batch["query"] * 0.5}
    for model, inputs, isa in ((files[0], changed, arm64.ISA), (files[1], batch, arm64.ISA),
                               (files[0], batch, arm64.X86_LEVELS[0])):
        with pytest.raises(AssertionError, match="emulator ran"):
            arm64.arm64_runner(model, isa=isa, emulator=NoEmulator(), cache_log=said.append).run_many([inputs])
