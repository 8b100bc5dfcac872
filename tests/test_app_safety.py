"""What the app stages may touch (issue 35): the app folder holds the user's files too, and the
caches and locks the stages keep live where no one else can write them.

- The bundle goes into the app folder file by file (targets/shared/app_folder.py): the user's files in it
  (nested ones too) and every folder beside it stay byte for byte; a stale file of ours is replaced
  or removed; a file of the user's where the bundle writes one is refused in one line, before
  anything is written; nothing is written through a link.
- The Kotlin class cache (targets/android/app.py) lives in a per-user folder checked for owner and
  mode, and an entry is re-hashed against its manifest, bound to its key, before it is used: a
  planted, copied, linked or foreign entry is a note and a fresh compile, never a pass.
- The Swift chroot (targets/ios/app.py): mounts and lock by the chroot's real path, the lock opened
  without blocking or following links, and a killed build leaves no Swift process running.
All on real files, real compilers and the real chroot."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from arrcoc_edge.errors import OutputDirError
from arrcoc_edge.targets.shared.app_folder import copy_to_app

REPO = Path(__file__).resolve().parent.parent


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def bundle(root: Path, files: dict[str, bytes]) -> Path:
    """A staged bundle as the android/ios stages leave it: files, some in package folders."""
    root.mkdir(parents=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


FIRST = {"contract.json": b'{"v": 1}\n', "model.fp32.pte": b"pte one", "golden.json": b"{}",
         "model.fp16.mlpackage/Data/com.apple.CoreML/model.mlmodel": b"mlmodel one",
         "model.fp16.mlpackage/Manifest.json": b"manifest one"}
SECOND = {"contract.json": b'{"v": 2}\n', "model.int8.pte": b"pte two", "golden.json": b"{}",
          "model.int8.mlpackage/Manifest.json": b"manifest two"}


@pytest.fixture
def app(tmp_path):
    """An app folder `app/src/main/assets` holding the user's own files, with user backups beside it."""
    assets = tmp_path / "app" / "src" / "main" / "assets"
    user = {"fonts/brand.ttf": b"the user's font", "notes.txt": b"mine", "images/deep/er/logo.png": b"png",
            ".gitignore": b"*\n"}
    for rel, data in user.items():
        (assets / rel).parent.mkdir(parents=True, exist_ok=True)
        (assets / rel).write_bytes(data)
    beside = {}
    for sibling in ("assets.old", "assets.new", "assets.bak", "assets-2024"):
        (assets.parent / sibling).mkdir()
        (assets.parent / sibling / "contract.json").write_bytes(f"backup {sibling}".encode())
        beside[sibling] = tree(assets.parent / sibling)
    return assets, user, beside


def test_the_bundle_leaves_the_users_files_in_and_beside_the_app_folder(tmp_path, app):
    """Two builds (the second drops and renames files): the user's files, nested ones too, and the
    sibling backup folders stay byte for byte; the stale files of ours are gone, the new ones there."""
    assets, user, beside = app
    copy_to_app(bundle(tmp_path / "s1", FIRST), assets)
    got = tree(assets)
    assert {rel: got[rel] for rel in FIRST} == FIRST
    copy_to_app(bundle(tmp_path / "s2", SECOND), assets)
    got = tree(assets)
    assert {rel: got.get(rel) for rel in user} == user, "a file of the user's changed or went"
    assert {rel: got[rel] for rel in SECOND} == SECOND
    stale = set(FIRST) - set(SECOND)
    assert not stale & set(got), f"stale files of the first build left: {stale & set(got)}"
    assert not (assets / "model.fp16.mlpackage").exists(), "a folder only the first build made is left"
    assert set(got) - set(user) - set(SECOND) == {".arrcoc-edge-files.json"}, "nothing else is written"
    for sibling, files in beside.items():
        assert tree(assets.parent / sibling) == files, f"{sibling}/ beside the app folder changed"
    assert sorted(p.name for p in assets.parent.iterdir()) == sorted(["assets", *beside])


@pytest.mark.parametrize("name", ["contract.json", "model.fp16.mlpackage/Manifest.json"])
def test_a_users_file_under_a_name_the_bundle_writes_is_refused_and_kept(tmp_path, app, name):
    """Never written by the tool (top level, or inside a package folder): one line naming the file
    and the fix, and nothing in the folder changes."""
    assets, _, _ = app
    (assets / name).parent.mkdir(parents=True, exist_ok=True)
    (assets / name).write_bytes(b"the user's own " + name.encode())
    before = tree(assets)
    with pytest.raises(OutputDirError) as err:
        copy_to_app(bundle(tmp_path / "s1", FIRST), assets)
    line = err.value.one_line()
    assert str(assets / name) in line and "move" in line and "\n" not in line
    assert tree(assets) == before


def test_a_file_of_ours_the_user_changed_is_never_overwritten_or_removed(tmp_path, app):
    """Written by a build, then edited: refused where the next bundle writes it, kept (and no longer
    ours) where the next bundle does not."""
    assets, _, _ = app
    copy_to_app(bundle(tmp_path / "s1", FIRST), assets)
    (assets / "contract.json").write_bytes(b"edited by hand")
    with pytest.raises(OutputDirError) as err:
        copy_to_app(bundle(tmp_path / "s2", SECOND), assets)
    assert str(assets / "contract.json") in err.value.one_line()
    assert (assets / "contract.json").read_bytes() == b"edited by hand"
    assert (assets / "model.fp32.pte").read_bytes() == b"pte one", "a refused build removed a file"
    (assets / "contract.json").write_bytes(FIRST["contract.json"])  # the user puts ours back
    (assets / "model.fp32.pte").write_bytes(b"the user's own pte now")
    kept = copy_to_app(bundle(tmp_path / "s3", SECOND), assets)
    assert kept == ["model.fp32.pte"] and (assets / "model.fp32.pte").read_bytes() == b"the user's own pte now"
    assert (assets / "contract.json").read_bytes() == SECOND["contract.json"]


def test_nothing_is_written_through_a_link_in_the_app_folder(tmp_path, app):
    """A link where the bundle needs a folder (to the user's elsewhere): refused, the link and what
    it points to untouched."""
    assets, _, _ = app
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "Manifest.json").write_bytes(b"elsewhere")
    (assets / "model.fp16.mlpackage").symlink_to(elsewhere)
    with pytest.raises(OutputDirError) as err:
        copy_to_app(bundle(tmp_path / "s1", FIRST), assets)
    assert "model.fp16.mlpackage" in err.value.one_line()
    assert (assets / "model.fp16.mlpackage").is_symlink() and tree(elsewhere) == {"Manifest.json": b"elsewhere"}


def test_a_killed_copys_temporary_file_goes_and_a_look_alike_of_the_users_stays(tmp_path, app):
    """After a kill, the next build removes the temporary files the record names (their names are
    random and recorded, with the sha256 of their whole content, before they exist), never a file
    of the user's that merely looks like one (a partial one is kept: tests/test_app_record.py)."""
    import hashlib

    assets, user, _ = app
    copy_to_app(bundle(tmp_path / "s1", FIRST), assets)
    record = json.loads((assets / ".arrcoc-edge-files.json").read_text())
    left = "model.fp16.mlpackage/.arrcoc-edge-0123456789abcdef.tmp"  # as a kill before its rename leaves it
    (assets / left).write_bytes(b"a whole mlmodel")
    record["pending"] = [[left, hashlib.sha256(b"a whole mlmodel").hexdigest()]]
    (assets / ".arrcoc-edge-files.json").write_text(json.dumps(record))
    look_alike = assets / ".arrcoc-edge-fedcba9876543210.tmp"
    look_alike.write_bytes(b"the user's, named like ours")
    copy_to_app(bundle(tmp_path / "s2", SECOND), assets)
    assert not (assets / left).exists() and not (assets / "model.fp16.mlpackage").exists()
    assert look_alike.read_bytes() == b"the user's, named like ours"
    assert {rel: (assets / rel).read_bytes() for rel in user} == user


# ---- the Kotlin class cache ---------------------------------------------------------------------

# Runs in a child with its own TMPDIR and XDG_CACHE_HOME: plants an entry under the key of stubs
# that do not compile, where the cache is (the user's cache) and where it was ($TMPDIR, which any
# user can write), then compiles. Prints one JSON line: the outcome and the notes logged.
PLANT_AND_COMPILE = r'''
import hashlib, json, os, shutil, sys, tempfile
from pathlib import Path
from arrcoc_edge.errors import GateError
from arrcoc_edge.targets.android import app as android_app

how, stubs = sys.argv[1], Path(sys.argv[2])
android_app.SOURCE_SETS["stubs"] = stubs
tc = android_app.toolchain()
key = android_app._cache_key(tc)
roots = [Path(tempfile.gettempdir()) / "arrcoc-android-classes",
         Path(os.environ["XDG_CACHE_HOME"]) / "arrcoc-edge" / "android-classes"]

def fake_entry(entry, sealed_for):
    (entry / "app" / "org").mkdir(parents=True)
    (entry / "app" / "org" / "Planted.class").write_bytes(b"\xca\xfe\xba\xbe planted")
    (entry / "compile.json").write_text(json.dumps({"commands": [], "output": [], "seconds": 0.0}))
    if sealed_for:
        files = {p.relative_to(entry).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in entry.rglob("*") if p.is_file()}
        (entry / "entry.json").write_text(json.dumps({"key": sealed_for, "files": files}))

for root in roots:
    if how == "file-at-path":
        root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.write_text("a regular file where the cache folder goes")
        continue
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if how == "link":
        target = Path(tempfile.mkdtemp(prefix="elsewhere-"))
        fake_entry(target, key)
        (root / key).symlink_to(target)
    else:
        (root / key).mkdir(mode=0o700)
        fake_entry(root / key, {"unsealed": None, "other-key": "0" * 32, "foreign-owner": key}[how])
    if how == "foreign-owner":
        os.chown(root.parent, 12345, 12345)  # another user made the folder: not ours to trust
notes = []
try:
    classes, record = android_app.compile_app(tc, notes.append)
    outcome = "cached" if record["cached"] else "compiled"
except GateError as exc:
    outcome = "gate: " + exc.one_line()
left = {str(r): sorted(p.name for p in r.iterdir()) if r.is_dir() else "file" for r in roots if r.exists()}
print(json.dumps({"outcome": outcome, "notes": notes, "key": key, "left": left}))
'''


@pytest.fixture(scope="module")
def broken_stubs(tmp_path_factory) -> Path:
    """The compile-only stubs with a type error: the first kotlinc run fails (the cheapest compile error)."""
    from arrcoc_edge.targets.android import app as android_app

    if android_app.missing_reason():
        pytest.fail(f"Android app toolchain missing: {android_app.missing_reason()}", pytrace=False)
    stubs = tmp_path_factory.mktemp("stubs") / "jvm-stubs"
    shutil.copytree(android_app.SOURCE_SETS["stubs"], stubs)
    tensor = stubs / "executorch" / "Tensor.kt"
    tensor.write_text(tensor.read_text() + "\nval brokenOnPurpose: Int = \"not an int\"\n")
    return stubs


@pytest.mark.slow
@pytest.mark.compiler
@pytest.mark.parametrize("how", ["unsealed", "other-key", "link", "foreign-owner", "file-at-path"])
def test_a_planted_or_unsound_class_cache_never_passes_broken_kotlin(tmp_path, broken_stubs, how):
    """Classes under a broken source's key (not sealed, sealed for another key, a link to a sealed
    entry elsewhere, in a cache folder owned by another uid), or a regular file where the cache
    folder goes: a one-line note and a fresh compile, which fails the gate naming the line; the
    failed compile leaves nothing in the cache."""
    if how == "foreign-owner" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path / "tmp"),
           "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run([sys.executable, "-c", PLANT_AND_COMPILE, how, str(broken_stubs)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["outcome"].startswith("gate: ") and "the Android app does not compile" in result["outcome"], result
    assert "Tensor.kt" in result["outcome"], result
    notes = [n for n in result["notes"] if "note:" in n]
    assert len(notes) == 1 and "\n" not in notes[0] and "compiling" in notes[0], result["notes"]
    cache = tmp_path / "xdg" / "arrcoc-edge" / "android-classes"
    if how in ("unsealed", "other-key", "link"):
        assert result["left"][str(cache)] == [], "a failed compile left something in the cache"
    leftovers = [name for names in result["left"].values() if names != "file" for name in names
                 if name != result["key"]]
    assert not leftovers, f"a failed compile's folder was left: {leftovers}"


def test_a_cache_entry_changed_after_it_was_sealed_is_not_trusted(tmp_path, monkeypatch):
    """The seal is re-checked on every use: a class file changed, added or replaced by a link after
    the seal, or the entry's folder left writable by others, each says why it is not used."""
    from arrcoc_edge.stages import private_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = private_cache.user_cache_dir("android-classes")
    assert oct(cache.stat().st_mode & 0o777) == "0o700" and private_cache.private_dir_problem(cache.parent) is None

    def sealed(name: str) -> Path:
        entry = cache / name
        (entry / "app" / "org").mkdir(parents=True)
        entry.chmod(0o700)
        (entry / "app" / "org" / "A.class").write_bytes(b"\xca\xfe\xba\xbe A")
        (entry / "compile.json").write_text("{}")
        private_cache.seal(entry, name)
        assert private_cache.check_entry(entry, name) is None
        return entry

    (sealed("changed") / "app" / "org" / "A.class").write_bytes(b"\xca\xfe\xba\xbe B")
    assert "A.class changed" in private_cache.check_entry(cache / "changed", "changed")
    (sealed("added") / "app" / "org" / "B.class").write_bytes(b"\xca\xfe\xba\xbe B")
    assert "not sealed" in private_cache.check_entry(cache / "added", "added")
    linked = sealed("linked")
    (linked / "app" / "org" / "A.class").unlink()
    (linked / "app" / "org" / "A.class").symlink_to(tmp_path / "elsewhere.class")
    assert "link" in private_cache.check_entry(linked, "linked")
    sealed("open").chmod(0o777)
    assert "writable by others" in private_cache.check_entry(cache / "open", "open")


# ---- the Swift chroot ---------------------------------------------------------------------------

def swift_chroot() -> Path:
    """The shared setup's chroot (never made or removed here: other builds use it concurrently)."""
    from arrcoc_edge.targets.ios import swift as ios_swift

    swift, why = ios_swift.Swift.find()
    if swift is None or swift.chroot is None:
        pytest.fail(f"no Swift chroot to test: {why or 'this host has a native Swift'}", pytrace=False)
    return Path(os.path.realpath(ios_swift.CHROOT))


def mount_ids_under(root: Path) -> set[str]:
    """/proc/self/mountinfo's mount ids at or below `root` (a real path)."""
    ids = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(root) or fields[4].startswith(f"{root}/"):
            ids.add(fields[0])
    return ids


@pytest.mark.compiler  # the Swift chroot's sessions
def test_a_chroot_named_through_a_link_is_unmounted_after_the_session(tmp_path):
    """ARRCOC_SWIFT_CHROOT spelled through a link: /proc and /dev are mounted for the session and
    gone after it (mountinfo lists the real path; the check compares that)."""
    from arrcoc_edge.targets.ios import swift as ios_swift

    real = swift_chroot()
    link = tmp_path / "chroot-link"
    link.symlink_to(real)
    with ios_swift.Swift(link).session():
        assert len(mount_ids_under(real)) >= 2, "the session mounted nothing"
    with open(f"{real}.lock", "a") as lock:  # the real chroot's lock: no other session mounts meanwhile
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert not mount_ids_under(real), "the session's mounts were left in the chroot"


SESSION = r'''
import sys, time
from pathlib import Path
from arrcoc_edge.errors import GateError
from arrcoc_edge.targets.ios import swift as ios_swift
try:
    with ios_swift.Swift(Path(sys.argv[1])).session():
        print("in", time.time(), flush=True)
        time.sleep(float(sys.argv[2]))
        print("out", time.time(), flush=True)
except GateError as exc:
    print("refused", exc.one_line(), flush=True)
'''


def session_child(chroot: Path, hold: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SESSION, str(chroot), str(hold)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.compiler  # the Swift chroot's sessions
def test_two_links_to_one_chroot_take_turns(tmp_path):
    """Two spellings of one chroot (two different links) share one lock: the second session starts
    only after the first has left."""
    real = swift_chroot()
    first, second = tmp_path / "a" / "swift", tmp_path / "b" / "chroot"
    for link in (first, second):
        link.parent.mkdir()
        link.symlink_to(real)
    holder = session_child(first, 20)  # longer than the second child takes to start on a loaded host
    line = holder.stdout.readline()
    assert line.startswith("in "), line + holder.stderr.read()
    follower = session_child(second, 0)
    out, err = follower.communicate(timeout=600)
    held, _ = holder.communicate(timeout=600)
    left = float(held.split()[-1])
    entered = float(out.split()[1])
    assert entered >= left, f"the second link's session entered at {entered}, the first left at {left}"


@pytest.mark.compiler  # the Swift chroot's sessions
@pytest.mark.parametrize("kind", ["fifo", "link", "other-owner"])
def test_a_lock_that_is_not_a_regular_file_of_ours_is_refused_at_once(tmp_path, kind):
    """A FIFO (open() used to wait forever), a link, or another user's file at the lock path: one
    line naming the lock and the fix, within seconds; nothing mounted, the link's target untouched."""
    root = tmp_path / "chroot"
    root.mkdir()
    lock = tmp_path / "chroot.lock"
    target = tmp_path / "elsewhere"
    target.write_text("not a lock")
    if kind == "fifo":
        os.mkfifo(lock)
    elif kind == "link":
        lock.symlink_to(target)
    else:
        if os.geteuid() != 0:
            pytest.skip("chown to another uid needs root")
        lock.write_text("")
        os.chown(lock, 12345, 12345)
    child = session_child(root, 0)
    try:
        out, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail(f"the session hung opening a {kind} lock")
    assert out.startswith("refused") and str(lock) in out and "-> fix:" in out, out + err
    assert len(out.strip().splitlines()) == 1
    assert target.read_text() == "not a lock" and not mount_ids_under(root)


BUILD_IN_CHROOT = r'''
import sys
from pathlib import Path
from arrcoc_edge.targets.ios import app as ios_app
from arrcoc_edge.targets.ios import swift as ios_swift
swift = ios_swift.Swift.find()[0]
with swift.session():
    work = swift.workdir()
    ios_app._stage_package(work, Path(sys.argv[1]))
    print("compiling", flush=True)
    swift.run(f"cd '{swift.inside(work)}' && swift build --build-tests", {})
'''


def processes_in(root: Path) -> dict[int, str]:
    """pid -> its start time (to tell a reused pid), of every process whose root is `root`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "root") == str(root):
                    found[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()[19]
            except OSError:
                continue  # gone meanwhile
    return found


@pytest.mark.compiler  # the Swift chroot's sessions
def test_a_killed_build_leaves_no_swift_process_compiling(tmp_path):
    """SIGKILL of the build while `swift build` compiles in the chroot: every process it started
    there (swift-build, swift-frontend, ...) is gone within seconds."""
    import signal
    import time

    from arrcoc_edge.targets.ios import swift as ios_swift

    real = swift_chroot()
    (tmp_path / "resources").mkdir()
    child = subprocess.Popen([sys.executable, "-c", BUILD_IN_CHROOT, str(tmp_path / "resources")], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert child.stdout.readline().startswith("compiling"), child.stderr.read()
    deadline, seen = time.monotonic() + 300, {}
    while time.monotonic() < deadline and child.poll() is None:
        seen = processes_in(real)  # the child holds the chroot's lock: these are its processes
        names = {(Path("/proc") / str(pid) / "comm").read_text().strip() for pid in seen
                 if (Path("/proc") / str(pid) / "comm").exists()}
        if "swift-frontend" in names:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"no swift-frontend seen compiling in the chroot ({child.poll()=})")
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    time.sleep(2)  # the kernel kills the namespace at once; an orphan would still be compiling
    alive = {pid: (Path("/proc") / str(pid) / "comm").read_text().strip()
             for pid, start in processes_in(real).items() if seen.get(pid) == start}
    assert not alive, f"still running in the chroot 2 s after the build was killed: {alive}"
    with ios_swift.Swift(real).session():  # the killed build's mounts: the next session takes them off
        pass
