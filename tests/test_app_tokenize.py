"""`invoke app-tokenize`: the Android and iOS apps' own tokenizer code, compiled as the build compiles
it, against Python's ids (issue 38), on the corpus (tests/data/tokenizer_corpus.txt: every major
script, combining marks, emoji sequences, control and zero-width characters, lines past the maximum
length) plus seeded random lines, for all-MiniLM-L6-v2's and Qwen3's tokenizer.json."""
from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

from targets import android_app, app_tokenize, ios_app, tokenizer_cases
from tests.one_line import one_line

REPO = Path(__file__).resolve().parent.parent
SOURCES, MISSING = tokenizer_cases.sources()
# Code points where a platform's own Unicode data (NFC/NFD, lowercase: all the apps take from the
# platform; every class the tokenizers split on is the crate's, UnicodeTables.*) gives other ids than
# the Rust crate. Measured on all 1,112,063 code points (none on JDK 17); mobile/README.md says what
# the app does with them.
PLATFORM_DIFFERENCES = {"android": [], "ios": []}


def _toolchain_missing(app: str) -> str | None:
    if app == "android":
        return android_app.missing_reason()
    return ios_app.Swift.find()[1] or None


def _invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "app-tokenize", *args], cwd=REPO, capture_output=True,
                          text=True, encoding="utf-8")


@pytest.fixture(scope="module")
def queries(tmp_path_factory) -> tuple[Path, list[str], list[str]]:
    """(text file, labels, queries): the corpus and 300 random lines from another seed than the build's."""
    labelled = tokenizer_cases.corpus() + [("random", t) for t in tokenizer_cases.random_lines(300, seed=3838)]
    path = tmp_path_factory.mktemp("app-tokenize") / "queries.txt"
    path.write_bytes("".join(t + "\n" for _, t in labelled).encode("utf-8"))
    return path, [x[0] for x in labelled], [x[1] for x in labelled]


@pytest.mark.parametrize("app", app_tokenize.APPS)
@pytest.mark.parametrize("source", SOURCES, ids=[s[0] for s in SOURCES])
def test_app_ids_equal_pythons(app, source, queries):
    if _toolchain_missing(app):
        pytest.skip(_toolchain_missing(app))
    name, tokenizer, max_length, _ = source
    path, labels, texts = queries
    proc = _invoke("--app", app, "--tokenizer", str(tokenizer), "--text-file", str(path))
    assert proc.returncode == 0, proc.stderr
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    want = tokenizer_cases.reference_ids(tokenizer, texts, max_length)
    assert len(got) == len(texts)
    per_label, wrong = collections.Counter(labels), [(lab, t) for lab, t, a, b in zip(labels, texts, want, got) if a != b]
    print(f"{app} {name}: equal per script " + ", ".join(f"{lab} {per_label[lab] - sum(w[0] == lab for w in wrong)}/{n}"
                                                       for lab, n in per_label.items()))
    assert not wrong, f"{len(wrong)} lines differ, first {wrong[0]!r}"
    # the Python encoder's own path (transformers, as sentence-transformers calls it) for MiniLM
    if max_length is not None:
        from pipeline import text_encoder

        enc = text_encoder.tokenizer()(texts, truncation=True, max_length=max_length)["input_ids"]
        assert [list(x) for x in enc] == got
        assert max(map(len, got)) == max_length  # the long lines were cut


@pytest.mark.parametrize("app", app_tokenize.APPS)
def test_platform_unicode_differences_are_the_listed_ones(app, tmp_path):
    """Every code point where the platform's NFC/NFD or lowercase could matter (those with a
    decomposition, a composition or a case mapping), in context, through both tokenizers."""
    if _toolchain_missing(app) or len(SOURCES) < 2:
        pytest.skip(_toolchain_missing(app) or f"needs both tokenizers: {MISSING}")
    import unicodedata

    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and c != 0x0A and (
        unicodedata.decomposition(chr(c)) or unicodedata.combining(chr(c)) or chr(c).lower() != chr(c) or chr(c).upper() != chr(c))]
    lines = [f"x{chr(c)}y A{chr(c)}\u0301 {chr(c)}{chr(c)}" for c in points]
    path = tmp_path / "points.txt"
    path.write_bytes("".join(t + "\n" for t in lines).encode("utf-8"))
    differ = set()
    for _, tokenizer, max_length, _ in SOURCES:
        proc = _invoke("--app", app, "--tokenizer", str(tokenizer), "--text-file", str(path))
        assert proc.returncode == 0, proc.stderr
        got = [json.loads(line) for line in proc.stdout.splitlines()]
        want = tokenizer_cases.reference_ids(tokenizer, lines, max_length)
        differ |= {c for c, a, b in zip(points, want, got) if a != b}
    assert sorted(differ) == PLATFORM_DIFFERENCES[app], [f"U+{c:04X}" for c in sorted(differ)]


def test_unicode_tables_are_the_installed_crates():
    """UnicodeTables.kt / .swift hold what the installed `tokenizers` decides for every code point."""
    for path, text in app_tokenize.rendered_tables().items():
        assert path.read_text() == text, f"{path.name} is stale: run `python -m targets.app_tokenize --write-tables`"


def test_bad_input_is_one_line(tmp_path):
    if _toolchain_missing("android"):
        pytest.skip(_toolchain_missing("android"))
    text = tmp_path / "q.txt"
    text.write_bytes(b"fine\n\xff\xfe broken\n")
    other = tmp_path / "unigram.json"
    other.write_text(json.dumps({"model": {"type": "Unigram", "vocab": []}}))
    tokenizer = str(SOURCES[0][1]) if SOURCES else str(other)
    cases = [(["--app", "android", "--tokenizer", tokenizer, "--text-file", str(text)], "not UTF-8 (line 2"),
             (["--app", "windows", "--tokenizer", tokenizer, "--text-file", str(text)], "android or ios"),
             (["--app", "android", "--tokenizer", str(tmp_path / "none.json"), "--text-file", str(text)], "is not a file"),
             (["--app", "android", "--tokenizer", str(other), "--text-file", str(tmp_path / "none.txt")], "is not a file")]
    text_ok = tmp_path / "ok.txt"
    text_ok.write_text("hello\n")
    cases.append((["--app", "android", "--tokenizer", str(other), "--text-file", str(text_ok)], "Unigram"))
    for args, needle in cases:
        proc = _invoke(*args)
        assert needle in one_line(proc), (args, proc.stderr)


def test_lines_split_on_newline_only(tmp_path):
    """A "\\r" stays in its line, an empty line is an empty query, a final "\\n" ends the last line."""
    path = tmp_path / "q.txt"
    path.write_bytes(b"a\r\nb\n\nc")
    assert app_tokenize.read_lines(path) == ["a\r", "b", "", "c"]
    path.write_bytes(b"a\n")
    assert app_tokenize.read_lines(path) == ["a"]
    path.write_bytes(b"")
    assert app_tokenize.read_lines(path) == []
