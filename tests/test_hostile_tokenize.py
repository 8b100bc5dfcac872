"""Issue 43, finding 6: `app-tokenize` and the apps' private cache under hostile input.

A tokenizer file the Rust crate refuses is refused in one line, exit 2, before either app's code
reads it (the Android runner used to die in StackOverflowError at 4.4 GB for deep nesting and call
that "gate failed ... fix the app's Tokenizer", exit 3); `--max-length` below the special tokens is
refused (the app printed [CLS][SEP] where transformers does not truncate); a relative HOME or a
linked or world-writable folder on the way never gets a cache made in it. No compiler is needed:
every refusal here comes before the app is compiled.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arrcoc_edge.targets import app_tokenize
from arrcoc_edge.stages import private_cache
from arrcoc_edge.targets.shared import tokenizer_cases
from tests.one_line import one_line

REPO = Path(__file__).resolve().parent.parent
SOURCES, _ = tokenizer_cases.sources()
MINILM = next((path for name, path, _, _ in SOURCES if name == "all-MiniLM-L6-v2"), None)
needs_minilm = pytest.mark.skipif(MINILM is None, reason="all-MiniLM-L6-v2's tokenizer.json is not installed (text extra)")


def _invoke(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "app-tokenize", *args], cwd=REPO, capture_output=True,
                          text=True, encoding="utf-8", env=env, timeout=120)


def _minilm() -> dict:
    return json.loads(MINILM.read_text(encoding="utf-8"))


def _bad_tokenizers(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, what the refusal names)."""
    cases = {}

    def write(name: str, text: str, needle: str) -> None:
        path = tmp_path / f"{name}.json"
        path.write_text(text, encoding="utf-8")
        cases[name] = (path, needle)

    d = _minilm()
    del d["model"]["vocab"]
    write("missing-vocab", json.dumps(d), "missing field `vocab`")
    d = _minilm()
    d["model"]["vocab"] = {k: str(v) for k, v in d["model"]["vocab"].items()}
    write("string-ids", json.dumps(d), "expected u32")
    d = _minilm()
    d["model"]["max_input_chars_per_word"] = -5
    write("negative-chars-per-word", json.dumps(d), "expected usize")
    write("deep-nesting", "[" * 200_000 + "]" * 200_000, "tokenizers refuses")
    write("deep-object", '{"model":' * 100_000 + "1" + "}" * 100_000, "tokenizers refuses")
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:
        f.truncate(2 << 30)  # 2 GB of holes: refused by size, never read
    cases["sparse-2GB"] = (sparse, "at most 64 MB")
    return cases


@needs_minilm
@pytest.mark.parametrize("app", app_tokenize.APPS)
def test_a_tokenizer_the_crate_refuses_is_one_line_exit_2(tmp_path, app):
    text = tmp_path / "q.txt"
    text.write_text("a cat\n")
    for name, (path, needle) in _bad_tokenizers(tmp_path).items():
        proc = _invoke("--app", app, "--tokenizer", str(path), "--text-file", str(text))
        assert proc.returncode == 2, (name, proc.returncode, proc.stderr[-2000:])
        line = one_line(proc)
        assert needle in line and "fix the app's Tokenizer" not in line, (name, line)


@needs_minilm
def test_read_tokenizer_hands_on_the_bytes_it_checked_and_the_special_tokens():
    checked = app_tokenize.read_tokenizer(MINILM)
    assert checked.data == MINILM.read_bytes()
    assert (checked.model_type, checked.specials) == ("WordPiece", 2)


@needs_minilm
def test_max_length_below_the_special_tokens_is_refused(tmp_path):
    """transformers (and the crate) do not truncate at all when max_length is below [CLS] and [SEP];
    the app used to print [CLS][SEP]. 2 is the crate's answer ([CLS][SEP]) and is allowed."""
    from arrcoc_edge.errors import InputError
    from tokenizers import Tokenizer

    checked = app_tokenize.read_tokenizer(MINILM)
    with pytest.raises(InputError, match="below the 2 special tokens"):
        app_tokenize.max_length_for(checked, 1)
    assert app_tokenize.max_length_for(checked, 2) == 2
    assert app_tokenize.max_length_for(checked, "default") == 256
    crate = Tokenizer.from_file(str(MINILM))
    crate.no_padding()
    crate.enable_truncation(1)
    assert len(crate.encode("hello world there").ids) == 5  # why 1 is refused: Python would not truncate
    text = tmp_path / "q.txt"
    text.write_text("hello world there\n")
    proc = _invoke("--app", "android", "--tokenizer", str(MINILM), "--text-file", str(text), "--max-length", "1")
    assert proc.returncode == 2 and "special tokens" in one_line(proc), proc.stderr


def test_a_relative_home_gives_the_password_databases_cache(tmp_path, monkeypatch):
    """HOME=relative and no XDG_CACHE_HOME used to make (and seal) a cache under the working folder."""
    import pwd

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "relative-home")
    monkeypatch.chdir(tmp_path)
    assert private_cache.cache_base() == Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".cache"
    monkeypatch.setenv("XDG_CACHE_HOME", "also/relative")
    assert private_cache.cache_base().is_absolute()
    assert not (tmp_path / "relative-home").exists() and not (tmp_path / "also").exists()


@pytest.mark.parametrize("how", ["linked", "world-writable"])
def test_nothing_is_made_inside_a_folder_the_cache_refuses(tmp_path, monkeypatch, how):
    """The cache's `arrcoc-edge` folder a link elsewhere, or 0777 without the sticky bit: refused,
    and no `android-classes` is created inside it (it used to be, before the refusal)."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.mkdir()
    if how == "linked":
        (xdg / "arrcoc-edge").symlink_to(target)
    else:
        (xdg / "arrcoc-edge").mkdir()
        (xdg / "arrcoc-edge").chmod(0o777)
        target = xdg / "arrcoc-edge"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    with pytest.raises(private_cache.CacheUnusable, match="link" if how == "linked" else "writable by others"):
        private_cache.user_cache_dir("android-classes")
    assert list(target.iterdir()) == []


def test_a_world_writable_cache_home_gets_nothing_made_in_it(tmp_path, monkeypatch):
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    xdg.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    with pytest.raises(private_cache.CacheUnusable, match="not sticky"):
        private_cache.user_cache_dir("android-classes")
    assert list(xdg.iterdir()) == []


@needs_minilm
@pytest.mark.parametrize("app", app_tokenize.APPS)
def test_an_added_token_whose_id_the_crate_does_not_keep_is_refused(tmp_path, app):
    """An added special token the vocabulary lacks ("Where": the vocabulary is lower case) named with
    id 2003: the crate numbers it 30522 (after the vocabulary), the app read 2003 and answered
    [101, 2003, ...] where Python answers [101, 30522, ...]. One id each way is one line, exit 2."""
    from tokenizers import Tokenizer

    d = _minilm()
    d["added_tokens"].append({"id": 2003, "content": "Where", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(d), encoding="utf-8")
    assert Tokenizer.from_file(str(path)).encode("Where is it").ids[:2] == [101, 30522]
    text = tmp_path / "q.txt"
    text.write_text("Where is it\n")
    proc = _invoke("--app", app, "--tokenizer", str(path), "--text-file", str(text))
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = one_line(proc)
    assert "added token 'Where' is id 2003 in its added_tokens, but tokenizers numbers it 30522" in line, line
    d["added_tokens"][-1]["id"] = 30522  # the crate's own number: accepted
    path.write_text(json.dumps(d), encoding="utf-8")
    assert app_tokenize.read_tokenizer(path).model_type == "WordPiece"


@needs_minilm
def test_a_huge_text_file_is_refused_by_its_size(tmp_path):
    """A 3 GB sparse --text-file: refused by its size in one line, never read (MemoryError before)."""
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(3 << 30)
    proc = _invoke("--app", "android", "--tokenizer", str(MINILM), "--text-file", str(big))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "is 3072 MB, over 16 MB" in one_line(proc)
