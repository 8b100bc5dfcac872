"""iOS: the CoreML packages, contract.json, golden bundle and a sample photo for the SwiftUI app.

The stage takes the `coreml` target's packages (already gated there), writes `contract.json`
(targets/shared/mobile_contract.py, plus the .mlpackage entries it cannot describe: a package is a
folder), a golden bundle and a bundled sample photo, publishes them under `artifacts/ios/` and
copies them into the app's resource folder, `mobile/ios/ArrcocDemo/Resources/` (where
RelevanceModel.swift looks them up). ARRCOC_IOS_APP_DIR redirects that copy (the tests use it).
Only the bundle's files are written there; the user's files in and beside it are left alone
(targets/shared/app_folder.py).

Before anything is copied or published, the app's Foundation-only core (mobile/ios/ArrcocCore:
contract, golden reader, parity metrics and gate, EXIF re-index) is compiled with Swift and its
XCTest suite run against this very bundle (targets/ios/app.py), with the numbers of
pipeline/stages/parity.py and PIL; the record lands in the manifest as `app_build`. A compile error or a
failing test fails the stage; no Swift on this host records "not run" and the build goes on.

The app itself cannot run here (no Xcode, no iOS Simulator): `load` says so, the stage is
`unverified`, and the on-device parity check is the app's XCTest (GoldenParityTests.swift),
which re-runs the golden bundle on the phone against the gates written into contract.json.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from arrcoc_edge.errors import ExportError, HostCapabilityError, OutputDirError
from arrcoc_edge.relevance.signature import MAX_BATCH
from arrcoc_edge.stages.golden import write_bundle
from arrcoc_edge.stages.parity import Gate
from arrcoc_edge.stages.target import AheadJob, BuildContext, Runner, Target, Variant
from arrcoc_edge.targets.coreml.target import IMAGE_INPUT, mil_runner, mlmodel_runner
from arrcoc_edge.targets.ios import app as ios_app
from arrcoc_edge.targets.ios import encoder as ios_encoder
from arrcoc_edge.targets.shared import mobile_contract, sources
from arrcoc_edge.targets.shared.app_folder import copy_to_app
from arrcoc_edge.targets.shared.mobile_contract import bundle_allowance, tree_bytes, tree_sha256, write_sample

APP_RESOURCES = sources.app_folder("ios/ArrcocDemo/Resources")  # None in an installed package
NO_APP_FOLDER = ("not copied into an app (an installed package has no sample app): copy the published ios/ "
                 "folder into your app's Resources, or set ARRCOC_IOS_APP_DIR to that folder and rebuild")
# The model the app runs by default: fp16 is what the Neural Engine executes natively.
DEFAULT_VARIANT = "fp16"
SAMPLE_IMAGE = mobile_contract.SAMPLE_IMAGE
GOLDEN = mobile_contract.GOLDEN_FILES
NO_DEVICE = ("the iOS app runs on an iPhone or the iOS Simulator, which need Xcode on macOS; "
             "this stage publishes the app bundle, the coreml target measures its packages")


def app_resources_dir() -> Path | None:
    """Where the bundle is copied: ARRCOC_IOS_APP_DIR, else the checkout's sample app, else (an
    installed package) nowhere: the bundle stays in the published folder."""
    named = os.environ.get("ARRCOC_IOS_APP_DIR")
    # the kernel's path (`LINK/..` is LINK's target's parent): what the write-places guard judges is
    # what the copy writes into
    return Path(os.path.realpath(named)) if named else APP_RESOURCES


def package_entry(cfg, package: Path, report) -> dict:
    """contract.json entry of one .mlpackage (mobile_contract handles single files only)."""
    v = report.variant
    return {
        "file": package.name, "kind": "mlpackage (folder; compile with MLModel.compileModel(at:))",
        "variant": v.name, "runtime": "CoreML (ML Program, iOS17)", "bytes": tree_bytes(package),
        "sha256": tree_sha256(package), "sha256_of": "sorted relative paths + sha256 of each file",
        "topk_dtype": v.topk_dtype, "max_batch": MAX_BATCH, "gate": v.gate.to_dict(),
        "reference_check": {"status": report.status, "runtime": report.runtime, "metrics": report.metrics},
        # CoreML has no uint8 inputs: the photo's bytes go in as float16 of the same values (coreml.IMAGE_INPUT)
        "image_input": IMAGE_INPUT,
        **mobile_contract.tensors(cfg, v.topk_dtype, image_dtype="float16"),
    }


def package_runner(package: Path):
    """The package in the runtime this host has: CoreML on macOS, else the NumPy MIL evaluator."""
    return mlmodel_runner(package) if sys.platform == "darwin" else mil_runner(package)


def check_packages(data: dict, folder: Path) -> list[str]:
    problems = []
    for key, entry in data["artifacts"].items():
        path = folder / entry["file"]
        if not path.is_dir():
            problems.append(f"{key}: {entry['file']} missing")
        elif tree_bytes(path) != entry["bytes"] or tree_sha256(path) != entry["sha256"]:
            problems.append(f"{key}: {entry['file']} differs from the contract (bytes/sha256)")
    for name in [*(data.get("golden") or {}).values(), data["app"]["sample_image"]]:
        if not (folder / name).is_file():
            problems.append(f"{name} missing")
    if problems:
        raise ExportError(f"contract.json does not match the files: {'; '.join(problems)}",
                          "rebuild with `invoke build --target ios`")
    return [f"contract.json matches {len(data['artifacts'])} .mlpackage(s) by name, bytes and tree sha256, "
            "plus the golden bundle and sample photo"] + mobile_contract.check_typed_text_files(data, folder) \
        + mobile_contract.check_bundle_files(data, folder)


class IosTarget(Target):
    name = "ios"
    summary = "SwiftUI sample app bundle: CoreML packages, contract.json, golden bundle (mobile/ios)"
    extra = "mobile"
    modules = ("coremltools",)
    capability = "an iPhone or the iOS Simulator (Xcode on macOS)"
    depends_on = ("coreml",)
    uses = ("text-encoder",)  # arr-coc-0-1's encoder form, for typed queries (targets/ios/encoder.py)

    def ahead(self, ctx: BuildContext) -> list[AheadJob]:
        """The app's MiniLM encoder package in the variant tried first (ios/encoder.py)."""
        return ios_encoder.ahead_jobs(ctx)

    def build(self, ctx: BuildContext) -> list[Variant]:
        upstream = ctx.upstream["coreml"]
        cfg = ctx.config
        artifacts = {}
        for report in upstream.variants:
            source = upstream.staging / report.variant.info["package"]
            shutil.copytree(source, ctx.staging / source.name)
            artifacts[report.variant.name] = package_entry(cfg, ctx.staging / source.name, report)
        primary = upstream.primary.variant
        default = DEFAULT_VARIANT if DEFAULT_VARIANT in artifacts else primary.name
        chosen = next(r for r in upstream.variants if r.variant.name == default)
        budget = sum(r.variant.size_budget for r in upstream.variants) + bundle_allowance(cfg, ctx.golden.heldout)
        typed_text, encoder = self._typed_text(ctx)
        budget += encoder.budget if encoder is not None else 0
        # The bundle records the default package's parity gate and the numbers the coreml stage
        # measured on the very same bytes (tree sha256 in contract.json), where that gate was held;
        # this stage itself holds the bundle's size (no iOS runtime here).
        gate = Gate({**chosen.variant.gate.maxima, "size_bytes": budget}, chosen.variant.gate.minima,
                    chosen.variant.gate.tie_tolerance)
        write_bundle(ctx.golden.heldout, ctx.staging, gate.to_dict(), topk_dtype=primary.topk_dtype)
        write_sample(ctx, ctx.staging)
        data = mobile_contract.contract(cfg, {}, golden=GOLDEN, presets=mobile_contract.presets_for_build(ctx),
                                        calibration=mobile_contract.build_calibration(ctx))
        data["artifacts"] = artifacts
        data["typed_text"] = typed_text
        data["app"] = {
            "platform": "ios", "default_artifact": default, "sample_image": SAMPLE_IMAGE,
            "sample_golden": mobile_contract.SAMPLE_GOLDEN,
            "resources_folder": "Resources",
            "coreml_stage": {"status": upstream.status, "reason": upstream.reason},
            "core_checks": ios_app.CHECKS,
        }
        path = mobile_contract.write_contract(ctx.staging / mobile_contract.CONTRACT_FILE, data)
        runner = package_runner(ctx.staging / artifacts[default]["file"])
        ios_app.write_core_checks(ctx.staging, data, runner.run, f"{default} package, {runner.runtime}")
        data["files"] = mobile_contract.bundle_files(ctx.staging)  # every file, so the app finds a mixed bundle
        mobile_contract.write_contract(path, data)
        files = sorted(p for p in ctx.staging.rglob("*") if p.is_file())
        files.sort(key=lambda p: p != path)  # contract.json first: it names everything else
        measured = {k: v for k, v in chosen.metrics.items() if k != "size_bytes"}
        variant = Variant(
            "app-bundle", files, gate, budget, primary=True, topk_dtype=primary.topk_dtype, metrics=measured,
            info={"app_resources": str(app_resources_dir()), "default_artifact": default,
                  "packages": sorted(a["file"] for a in artifacts.values()),
                  "parity_from": f"coreml stage, {default} package ({chosen.runtime})",
                  "presets": len(data["presets"]["items"]), "presets_note": data["presets"]["note"],
                  "typed_text": ios_encoder.typed_text_summary(typed_text)},
        )
        check_packages(data, ctx.staging)
        variant.info["app_build"] = ios_app.build_and_test(ctx.staging, ctx.log)
        build = variant.info["app_build"]
        ctx.log(f"[{self.name}] app core: {build['status']}"
                + (f", {build['tests']['passed']}/{build['tests']['run']} XCTests passed in {build['seconds']} s"
                   if build["status"] == "passed" else f" ({build['reason']})"))
        self._publish_to_app(ctx, variant, data)
        return [variant]

    @staticmethod
    def _typed_text(ctx: BuildContext):
        """contract.json's typed_text and the query encoder it names (targets/ios/encoder.py):
        supported only when the encoder passed its gate; one that failed leaves no file behind and
        the reason in typed_text.why (presets stay the way to query)."""
        encoder, why = ios_encoder.ios_encoder(ctx)
        if encoder is not None and not encoder.passed:
            why = f"the {encoder.kind} {encoder.variant} query encoder failed its gate: {', '.join(encoder.failures)}"
            encoder.remove()
            (ctx.staging / ios_encoder.CHECKS_FILE).unlink(missing_ok=True)
            encoder = None
        if encoder is None:
            ctx.log(f"[ios] typed queries: not supported ({why})")
            return {**mobile_contract.TYPED_TEXT, "why": why}, None
        return ios_encoder.typed_text_entry(encoder, ctx.config.query_dim), encoder

    def _publish_to_app(self, ctx: BuildContext, variant: Variant, data: dict) -> None:
        """The packages passed the coreml gates; check the bundle's own contract and size, then copy."""
        check_packages(data, ctx.staging)
        if variant.bytes > variant.size_budget:
            raise ExportError(f"iOS bundle is {variant.bytes} bytes, over its budget {variant.size_budget}",
                              "ship fewer CoreML variants")
        dest = app_resources_dir()
        if dest is None:
            ctx.log(f"[{self.name}] note: {NO_APP_FOLDER}")
            return
        try:
            kept = copy_to_app(ctx.staging, dest)
        except OSError as exc:
            raise OutputDirError(
                f"cannot write the iOS app's resources to {dest} ({type(exc).__name__}: {exc.strerror or exc}); "
                "nothing was published for ios",
                "point ARRCOC_IOS_APP_DIR at a writable folder, or unset it to use mobile/ios/ArrcocDemo/Resources",
            ) from exc
        ctx.log(f"[{self.name}] copied the app bundle to {dest}")
        if kept:
            ctx.log(f"[{self.name}] note: kept {', '.join(kept)} in {dest}: written by an earlier build, changed since")

    def write_places(self) -> list[tuple[str, Path]]:
        app = app_resources_dir()
        return [] if app is None else [("the iOS app folder (ARRCOC_IOS_APP_DIR)", app)]

    def inspect(self, ctx: BuildContext, variant: Variant) -> list[str]:
        data = json.loads((ctx.staging / mobile_contract.CONTRACT_FILE).read_text())
        checks = check_packages(data, ctx.staging)
        app = app_resources_dir()
        checks += [f"app resources ({app.name}/): " + check_packages(data, app)[0] if app else f"app resources: {NO_APP_FOLDER}"]
        return checks

    def load(self, ctx: BuildContext, variant: Variant) -> Runner:
        raise HostCapabilityError(NO_DEVICE, "open mobile/ios in Xcode on a Mac and run the GoldenParityTests "
                                             "XCTest on a device (mobile/README.md, iOS)")
