"""How the repository's folders become the one installed package, `arrcoc_edge` (pyproject.toml
holds everything else).

The repository keeps its two halves at the root, named by their roles; the wheel installs them as one
import name of its own, so nothing generic (`pipeline`, `targets`) lands on a user's sys.path:
  pipeline/ -> arrcoc_edge/            targets/ -> arrcoc_edge/targets/
The files the stages read from outside Python are mapped inside it without moving them
(arrcoc_edge/install.py, targets/shared/sources.py):
  checkpoints/ -> arrcoc_edge/bundled/checkpoints/    web/ -> arrcoc_edge/targets/bundled/web/
  mobile/ -> arrcoc_edge/targets/bundled/mobile/
Installed dependencies (web/node_modules, tools/) are not in the wheel.
"""
from pathlib import Path

from setuptools import find_packages, setup

# package -> the folder that holds it; the two halves' subpackages follow their folders
CODE = {"arrcoc_edge": "pipeline", "arrcoc_edge.targets": "targets"}
BUNDLED = {
    "arrcoc_edge.bundled.checkpoints": ("checkpoints", ["*.safetensors"]),
    "arrcoc_edge.targets.bundled.web": ("web", ["*.html", "*.js", "*.css", "package.json", "package-lock.json"]),
    "arrcoc_edge.targets.bundled.mobile": ("mobile", ["**/*"]),
}
# What a build or an IDE leaves in mobile/ (its .gitignore files say so) is not source: the bundles a
# build copies into the sample apps (88 MB), SwiftPM's and Gradle's products.
GENERATED = {"arrcoc_edge.targets.bundled.mobile": [
    "android/app/src/main/assets/*", "ios/ArrcocDemo/Resources/*", "ios/.build/*", "ios/.swiftpm/*",
    "android/.gradle/*", "android/build/*", "android/app/build/*", "android/.kotlin/*",
    "android/local.properties"]}

# A source tree without one of them (a partial copy) builds a wheel without it; the wheel's test
# (tests/test_wheel.py) builds from the tracked files of a checkout and checks they are all there.
BUNDLED = {name: spec for name, spec in BUNDLED.items() if Path(spec[0]).is_dir()}

packages = [name for name in CODE]
for name, folder in CODE.items():
    packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]

setup(
    packages=packages + list(BUNDLED),
    package_dir={**CODE, **{name: folder for name, (folder, _) in BUNDLED.items()}},
    exclude_package_data=GENERATED,
    # the tokenizer corpus the mobile stages' tokenizer tests run on (targets/shared/sources.py)
    # and the C++ runner's source, whose sha256 names the runner a set-up built (et_runner.py)
    package_data={"arrcoc_edge.targets.shared": ["tokenizer_corpus.txt", "et_runner.cpp"],
                  **{name: patterns for name, (_, patterns) in BUNDLED.items()}},
)
