"""Android: the ExecuTorch .pte files, contract.json, golden bundle and a sample photo for the Kotlin app.

The stage takes the `executorch` target's .pte files (already gated there, in the real ExecuTorch
runtime), writes `contract.json` (targets/shared/mobile_contract.py: artifact names, tensor names,
shapes, dtypes, preprocessing, top-K, grid, per-artifact gates, preset query embeddings), a golden
bundle and a bundled sample photo, publishes them under `artifacts/android/` and copies them into
the app's asset folder, `mobile/android/app/src/main/assets/` (Gradle's default assets folder,
where the Kotlin code opens `contract.json` and then only the names it lists).
ARRCOC_ANDROID_APP_DIR redirects that copy (the tests use it).

Failure behaviour: every check (contract vs files, I/O contract of each .pte in the ExecuTorch
runtime, size budget) runs BEFORE the copy into the app; the copy writes only the bundle's files
into the folder, each swapped in whole, and leaves every other file in and beside it alone
(targets/shared/app_folder.py: a file of the user's where the bundle writes one is refused, not replaced).
If it cannot be written (e.g. ARRCOC_ANDROID_APP_DIR is not a writable folder) the stage FAILS
with an output error, the user's files stay as they were, and
the core publishes nothing for `android`: the last published `artifacts/android/` and its
manifest entry are kept (the `executorch` stage, which passed its own gate, still publishes).

Before anything is copied, targets/android/app.py compiles every Kotlin file of the app with a real
kotlinc (against android.jar and compile-only stubs) and runs its JUnit tests on the JVM against
the staged bundle (contract parsing, golden reader, parity metrics and gate equal to
pipeline/stages/parity.py's, EXIF re-indexing equal to PIL's): the result is the variant's `app_build`
record; a compile error or a failing test is a GateError and nothing is published. Without that
toolchain the record says "not run" and how to install it, and the stage goes on.

The app itself cannot run here (no Android SDK, no emulator): `load` says so and the stage is
`unverified`. The .pte files are measured by the `executorch` stage in the ExecuTorch runtime;
the on-device check is the app's instrumented test (GoldenParityTest.kt), which re-runs the
golden bundle on the phone against the gates written into contract.json.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from arrcoc_edge.errors import ExportError, HostCapabilityError, OutputDirError
from arrcoc_edge.install import COMMAND
from arrcoc_edge.stages.golden import write_bundle
from arrcoc_edge.stages.parity import Gate
from arrcoc_edge.stages.target import AheadJob, BuildContext, Runner, Target, Variant
from arrcoc_edge.targets import app_encoder
from arrcoc_edge.targets.android import app as android_app
from arrcoc_edge.targets.shared import mobile_contract, sources
from arrcoc_edge.targets.shared.app_folder import copy_to_app
from arrcoc_edge.targets.shared.mobile_contract import bundle_allowance, write_sample

ASSETS_FOLDER = "app/src/main/assets"  # Gradle's default assets folder, inside mobile/android
APP_ASSETS = sources.app_folder(f"android/{ASSETS_FOLDER}")  # None in an installed package
# The Maven artifact the app runs the .pte files with (pinned in app/build.gradle.kts); it must
# match the executorch release that wrote them (tests/test_android.py checks the pin).
ANDROID_RUNTIME = "org.pytorch:executorch-android"
NO_APP_FOLDER = ("not copied into an app (an installed package has no sample app): copy the published android/ "
                 "folder into your app's assets, or set ARRCOC_ANDROID_APP_DIR to that folder and rebuild")
NO_DEVICE = ("the Android app runs on an Android device or emulator (Android SDK, adb), which this host "
             "lacks; this stage publishes the app's assets, the executorch target measures its .pte files")


def app_assets_dir() -> Path | None:
    """Where the bundle is copied: ARRCOC_ANDROID_APP_DIR, else the checkout's sample app, else
    (an installed package) nowhere: the bundle stays in the published folder."""
    named = os.environ.get("ARRCOC_ANDROID_APP_DIR")
    # the kernel's path (`LINK/..` is LINK's target's parent): what the write-places guard judges is
    # what the copy writes into
    return Path(os.path.realpath(named)) if named else APP_ASSETS


def executorch_version() -> str:
    from arrcoc_edge.targets.executorch.runtime import version

    return version()


def artifact_entry(report) -> dict:
    """The keys of one .pte's contract entry that mobile_contract.contract does not compute."""
    v = report.variant
    entry = {
        "variant": v.name,
        "runtime": f"ExecuTorch Android ({ANDROID_RUNTIME}:{executorch_version()}), XNNPACK + portable kernels",
        "topk_dtype": v.topk_dtype,
        "max_batch": int(v.info["max_batch"]),
        "gate": v.gate.to_dict(),
        "host_check": {"status": report.status, "runtime": report.runtime,
                       "metrics": {k: val for k, val in report.metrics.items()}},
    }
    if "quantization" in v.info:
        entry["quantization"] = v.info["quantization"]
    # the .pte's second method for 16G x 16G photos (targets/executorch/runtime.py SQUARE_METHOD), which the
    # app calls for such photos: the same numbers as forward there, without the resize
    entry["square_method"] = next((m for m in v.info.get("methods", {}) if m != "forward"), None)
    return entry


def check_bundle(data: dict, folder: Path) -> list[str]:
    """contract.json vs the files in `folder`: every .pte by name, bytes and sha256, the golden
    bundle and the sample photo."""
    checks = (mobile_contract.check_files(data, folder) + mobile_contract.check_typed_text_files(data, folder)
              + mobile_contract.check_bundle_files(data, folder))
    sample = data["app"]["sample_image"]
    if not (Path(folder) / sample).is_file():
        raise ExportError(f"contract.json names the sample photo {sample}, which is missing",
                          f"rebuild with `{COMMAND} build --target android`")
    return checks + [f"golden bundle ({', '.join(data['golden'].values())}) and {sample} present"]


class AndroidTarget(Target):
    name = "android"
    summary = "Kotlin sample app assets: ExecuTorch .pte files, contract.json, golden bundle (mobile/android)"
    extra = "mobile"
    modules = ("executorch",)
    capability = "an Android device or emulator (Android SDK, adb)"
    depends_on = ("executorch",)
    uses = ("text-encoder",)  # arr-coc-0-1's encoder form, for typed queries (targets/app_encoder.py)

    def ahead(self, ctx: BuildContext) -> list[AheadJob]:
        """The app's MiniLM encoder .pte in both variants (targets/app_encoder.py) and its Kotlin
        classes (where the toolchain is: without it the stage says why it compiles nothing)."""
        compile_job = AheadJob("kotlin-classes", f"{android_app.__name__}:compile_ahead", seconds=13)
        return [*app_encoder.ahead_jobs(ctx), *([compile_job] if android_app.missing_reason() is None else [])]

    def build(self, ctx: BuildContext) -> list[Variant]:
        upstream = ctx.upstream["executorch"]
        cfg = ctx.config
        artifacts = {}
        for report in upstream.variants:
            source = report.variant.files[0]
            staged = ctx.staging / source.name
            shutil.copy2(source, staged)
            artifacts[report.variant.name] = {**artifact_entry(report), "path": staged}
        primary = upstream.primary
        default = primary.variant.name
        typed_text, encoder = self._typed_text(ctx)
        budget = sum(r.variant.size_budget for r in upstream.variants) + bundle_allowance(cfg, ctx.golden.heldout)
        budget += encoder.budget if encoder is not None else 0
        # The bundle records the default .pte's parity gate and the numbers the executorch stage
        # measured on the very same bytes (sha256 in contract.json), where that gate was held;
        # this stage itself holds the bundle's size (no Android runtime here).
        gate = Gate({**primary.variant.gate.maxima, "size_bytes": budget}, primary.variant.gate.minima,
                    primary.variant.gate.tie_tolerance)
        # Same arguments as the core's own bundle for a published stage, so the copy in the app
        # and artifacts/android/ hold identical golden files.
        write_bundle(ctx.golden.heldout, ctx.staging, gate.to_dict(), topk_dtype=primary.variant.topk_dtype)
        write_sample(ctx, ctx.staging)
        data = mobile_contract.contract(cfg, artifacts, golden=dict(mobile_contract.GOLDEN_FILES),
                                        presets=mobile_contract.presets_for_build(ctx),
                                        calibration=mobile_contract.build_calibration(ctx))
        data["typed_text"] = typed_text
        data["app"] = {
            "platform": "android", "default_artifact": default, "sample_image": mobile_contract.SAMPLE_IMAGE,
            "sample_golden": mobile_contract.SAMPLE_GOLDEN,
            "assets_folder": ASSETS_FOLDER,
            "runtime_maven": f"{ANDROID_RUNTIME}:{executorch_version()}",
            "executorch_stage": {"status": upstream.status, "reason": upstream.reason},
        }
        data["files"] = mobile_contract.bundle_files(ctx.staging)  # every file, so the app finds a mixed bundle
        path = mobile_contract.write_contract(ctx.staging / mobile_contract.CONTRACT_FILE, data)
        app_build, app_build_detail = android_app.app_build(ctx.staging, data, lambda: self._pte_runners(ctx, data),
                                                            ctx.log)
        files = sorted(p for p in ctx.staging.rglob("*") if p.is_file())
        files.sort(key=lambda p: p != path)  # contract.json first: it names everything else
        measured = {k: v for k, v in primary.metrics.items() if k != "size_bytes"}
        variant = Variant(
            "app-assets", files, gate, budget, primary=True, topk_dtype=primary.variant.topk_dtype,
            metrics=measured,
            info={"app_assets": str(app_assets_dir()), "default_artifact": default,
                  "pte_files": sorted(a["file"] for a in data["artifacts"].values()),
                  "runtime_maven": data["app"]["runtime_maven"],
                  "parity_from": f"executorch stage, {default} .pte ({primary.runtime})",
                  "presets": len(data["presets"]["items"]), "presets_note": data["presets"]["note"],
                  "typed_text": app_encoder.typed_text_summary(data["typed_text"], encoder.info if encoder else None),
                  "app_build": app_build, "app_build_detail": app_build_detail},
        )
        self._publish_to_app(ctx, variant, data)
        return [variant]

    @staticmethod
    def _typed_text(ctx: BuildContext):
        """contract.json's typed_text and the query encoder it names (targets/app_encoder.py), verified
        in ExecuTorch's runtime: supported only when it passed its gate; an encoder that failed
        leaves no file behind and the reason in typed_text.why (presets stay the way to query)."""
        encoder, why = app_encoder.android_encoder(ctx)
        if encoder is not None and not encoder.passed:
            why = f"the {encoder.kind} {encoder.variant} encoder .pte failed its gate: {', '.join(encoder.failures)}"
            for path in encoder.files:
                path.unlink()
            encoder = None
        if encoder is None:
            ctx.log(f"[android] typed queries: not supported ({why})")
            return {**mobile_contract.TYPED_TEXT, "why": why}, None
        runtime = f"ExecuTorch Android ({ANDROID_RUNTIME}:{executorch_version()}), XNNPACK + portable kernels"
        typed_text = app_encoder.typed_text_entry(encoder, ctx.config.query_dim, runtime)
        typed_text["encoder"]["info"] = app_encoder.contract_info(encoder.info)
        return typed_text, encoder

    @staticmethod
    def _pte_runners(ctx: BuildContext, data: dict) -> dict:
        """The staged .pte files in ExecuTorch's Python runtime: what the JVM tests compare Kotlin's
        parity numbers on (no ExecuTorch runtime exists for a desktop JVM)."""
        from arrcoc_edge.targets.executorch.runtime import pte_runner

        return {key: pte_runner(ctx.staging / entry["file"], entry["max_batch"]).run
                for key, entry in data["artifacts"].items()}

    def _publish_to_app(self, ctx: BuildContext, variant: Variant, data: dict) -> None:
        """Every check first, then the copy: a failed check or copy leaves the app's assets alone."""
        from arrcoc_edge.targets.executorch.runtime import check_method_meta

        check_bundle(data, ctx.staging)
        for entry in data["artifacts"].values():
            check_method_meta(ctx.staging / entry["file"], ctx.config)
        if variant.bytes > variant.size_budget:
            raise ExportError(f"Android assets are {variant.bytes} bytes, over their budget {variant.size_budget}",
                              "ship fewer ExecuTorch variants")
        dest = app_assets_dir()
        if dest is None:
            ctx.log(f"[{self.name}] note: {NO_APP_FOLDER}")
            return
        try:
            kept = copy_to_app(ctx.staging, dest)
        except OSError as exc:
            raise OutputDirError(
                f"cannot write the Android app's assets to {dest} ({type(exc).__name__}: {exc.strerror or exc}); "
                "nothing was published for android",
                "point ARRCOC_ANDROID_APP_DIR at a writable folder, or unset it to use "
                + (f"{sources.sample_app('android')}/{ASSETS_FOLDER}" if sources.CHECKOUT else
                   "copy nothing into an app (an installed package has none): the bundle stays in --out"),
            ) from exc
        ctx.log(f"[{self.name}] copied the app assets to {dest}")
        if kept:
            ctx.log(f"[{self.name}] note: kept {', '.join(kept)} in {dest}: written by an earlier build, changed since")

    def write_places(self) -> list[tuple[str, Path]]:
        app = app_assets_dir()
        return [] if app is None else [("the Android app folder (ARRCOC_ANDROID_APP_DIR)", app)]

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        data = json.loads((ctx.staging / mobile_contract.CONTRACT_FILE).read_text())
        from arrcoc_edge.targets.executorch.runtime import check_method_meta

        checks = check_bundle(data, ctx.staging)
        upstream = {r.variant.name: r.variant.files[0] for r in ctx.upstream["executorch"].variants}
        for key, entry in sorted(data["artifacts"].items()):
            if (ctx.staging / entry["file"]).read_bytes() != upstream[key].read_bytes():
                raise ExportError(f"{entry['file']} differs from the executorch stage's {key} file",
                                  f"rebuild with `{COMMAND} build --target android`")
            check_method_meta(ctx.staging / entry["file"], ctx.config)
        checks.append(f"{', '.join(sorted(a['file'] for a in data['artifacts'].values()))}: identical to the "
                      f"executorch stage's files; I/O contract (MethodMeta, ExecuTorch {executorch_version()} runtime) matches")
        app = app_assets_dir()
        checks.append(f"app assets ({app}): " + check_bundle(data, app)[0] if app else f"app assets: {NO_APP_FOLDER}")
        return checks

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        raise HostCapabilityError(NO_DEVICE, f"open {sources.sample_app('android')} in Android Studio and run "
                                             "`./gradlew connectedAndroidTest` on a device or emulator "
                                             f"({sources.sample_app('README.md')}, Android)")
