"""Build the release files the standard way and check them: `invoke package` (or run this file).

1. `python -m build` (PEP 517, each build in an isolated environment of its own): the sdist, then
   the wheel built from that sdist, as an installer building from the registry's sdist would.
   Both are built from the committed content (HEAD, exported with `git archive`): a tree with
   uncommitted changes, or a tracked link that leaves the tree, is refused (committed_tree).
2. The wheel built straight from that tree: its files and their bytes must equal the
   sdist-built wheel's (a file the sdist forgot, or a generated one it carried, shows up here).
3. `twine check --strict` on both (the metadata and README render as the registry shows them).
4. The wheel installs one top-level name, `arrcoc_edge`, and the `arrcoc-edge` command.
Only then are the two files copied into --out (default dist/); nothing else there is touched.
Needs the `build` and `twine` packages (the dev extra; scripts/setup.sh installs them) and the
registry for the isolated build environments' setuptools.
"""
from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import posixpath
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOP_LEVEL = {"arrcoc_edge"}
COMMAND = "arrcoc-edge = arrcoc_edge.frontends.commands:main"


class PackageError(Exception):
    """A release file that must not be published; the message says what is wrong."""


def run(cmd: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd or REPO, capture_output=True, text=True)
    if done.returncode:
        raise PackageError(f"{' '.join(cmd[:4])} ... failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def wheel_contents(wheel: Path) -> dict[str, str]:
    """path -> sha256 of every file in the wheel but RECORD (which lists them)."""
    with zipfile.ZipFile(wheel) as z:
        return {name: hashlib.sha256(z.read(name)).hexdigest() for name in z.namelist()
                if not name.endswith(".dist-info/RECORD")}


def check_record(wheel: Path) -> None:
    """Every file's hash in RECORD matches its bytes (what pip checks at install)."""
    with zipfile.ZipFile(wheel) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        for path, digest, _size in csv.reader(io.StringIO(z.read(record).decode())):
            if path == record or not digest:
                continue
            algo, value = digest.split("=", 1)
            actual = base64.urlsafe_b64encode(hashlib.new(algo, z.read(path)).digest()).rstrip(b"=").decode()
            if actual != value:
                raise PackageError(f"{wheel.name}: RECORD's hash of {path} does not match its bytes")


def check_wheel(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    if tops != TOP_LEVEL:
        raise PackageError(f"{wheel.name} installs the top-level names {sorted(tops)}, not only {sorted(TOP_LEVEL)}")
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    if COMMAND not in zipfile.ZipFile(wheel).read(entry).decode():
        raise PackageError(f"{wheel.name} has no `{COMMAND}` console script")
    check_record(wheel)


def committed_tree(dest: Path) -> Path:
    """HEAD's content, exported to `dest` (`git archive`): a release is a commit. A tree with
    uncommitted changes to tracked files is refused (they would not be in the release, or, built
    from the working tree, would be released without a commit), and so is a tracked link that
    leaves the tree (`host-link.txt -> /etc/hostname` carried this host's file into the wheel).
    Outside a git checkout (an unpacked sdist), the folder as it is."""
    if not (REPO / ".git").exists():
        return REPO
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"]).splitlines()
    if dirty:
        raise PackageError(f"the tree has uncommitted changes to {len(dirty)} tracked file(s) ({', '.join(d[3:] for d in dirty[:5])}): "
                           "a release is built from a commit; commit or stash them, then run it again")
    for line in run(["git", "ls-files", "-s", "-z"]).split("\0"):
        if line.startswith("120000 "):
            _check_link(line.split("\t", 1)[1], line.split()[1])
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def _check_link(name: str, blob: str) -> None:
    """A tracked link must name a path inside the tree (judged on its text, as a clone would make it)."""
    target = run(["git", "cat-file", "-p", blob])
    inside = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if target.startswith("/") or inside == ".." or inside.startswith("../"):
        raise PackageError(f"the tracked link {name} -> {target} leaves the tree: its target's content (this host's) "
                           "would be released; replace it with the file itself, committed")


def build(out: Path) -> tuple[Path, Path]:
    """(sdist, wheel built from it) and the checks above; returns the files in `out`."""
    with tempfile.TemporaryDirectory(prefix="arrcoc-package-") as tmp:
        released, direct = Path(tmp) / "released", Path(tmp) / "direct"
        tree = committed_tree(Path(tmp) / "tree")
        run([sys.executable, "-m", "build", "--outdir", str(released), str(tree)])  # sdist, then wheel from it
        run([sys.executable, "-m", "build", "--wheel", "--outdir", str(direct), str(tree)])
        (sdist,), (wheel,), (tree_wheel,) = released.glob("*.tar.gz"), released.glob("*.whl"), direct.glob("*.whl")
        ours, theirs = wheel_contents(wheel), wheel_contents(tree_wheel)
        if ours != theirs:
            differ = sorted(set(ours.items()) ^ set(theirs.items()))[:5]
            raise PackageError(f"the wheel built from the sdist differs from the tree's: {differ}")
        check_wheel(wheel)
        run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)])
        out.mkdir(parents=True, exist_ok=True)
        for made in (sdist, wheel):
            shutil.copy2(made, out / made.name)
        return out / sdist.name, out / wheel.name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the checked files go (default dist/)")
    try:
        sdist, wheel = build(parser.parse_args().out)
    except PackageError as error:
        print(f"package: {error}", file=sys.stderr)
        return 1
    print(f"package: {sdist}\npackage: {wheel}\npackage: the sdist builds the same wheel as the tree; twine check passed; "
          f"one top-level name ({', '.join(sorted(TOP_LEVEL))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
