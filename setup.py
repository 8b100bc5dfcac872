"""The wheel's files from outside the two packages (pyproject.toml holds everything else).

The stages read the shipped checkpoints, the web page's sources and the mobile apps from the
repository root in a checkout; an installed package finds the same files here, mapped into the
packages without moving them in the repository (pipeline/frontends/options.py, targets/web/site_files.py):
  checkpoints/ -> pipeline/bundled/checkpoints/    web/ -> targets/bundled/web/    mobile/ -> targets/bundled/mobile/
Installed dependencies (web/node_modules, tools/) are not in the wheel.
"""
from pathlib import Path

from setuptools import find_packages, setup

BUNDLED = {
    "pipeline.bundled.checkpoints": ("checkpoints", ["*.safetensors"]),
    "targets.bundled.web": ("web", ["*.html", "*.js", "*.css", "package.json", "package-lock.json"]),
    "targets.bundled.mobile": ("mobile", ["**/*"]),
}
# What a build or an IDE leaves in mobile/ (its .gitignore files say so) is not source: the bundles a
# build copies into the sample apps (88 MB), SwiftPM's and Gradle's products.
GENERATED = {"targets.bundled.mobile": ["android/app/src/main/assets/*", "ios/ArrcocDemo/Resources/*",
                                        "ios/.build/*", "ios/.swiftpm/*", "android/.gradle/*", "android/build/*",
                                        "android/app/build/*", "android/.kotlin/*", "android/local.properties"]}

# A source tree without one of them (a partial copy) builds a wheel without it, as before; the wheel's
# test (tests/test_wheel.py) builds from the tracked files of a checkout and checks they are all there.
BUNDLED = {name: spec for name, spec in BUNDLED.items() if Path(spec[0]).is_dir()}

setup(
    packages=find_packages(include=["pipeline", "pipeline.*", "targets", "targets.*"]) + list(BUNDLED),
    package_dir={name: folder for name, (folder, _) in BUNDLED.items()},
    exclude_package_data=GENERATED,
    # the tokenizer corpus the mobile stages' tokenizer tests run on (targets/shared/sources.py)
    package_data={"targets.shared": ["tokenizer_corpus.txt"],
                  **{name: patterns for name, (_, patterns) in BUNDLED.items()}},
)
