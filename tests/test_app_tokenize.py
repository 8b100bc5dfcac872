"""`invoke app-tokenize`: the Android and iOS apps' own tokenizer code, compiled as the build compiles
it, against Python's ids (issue 38), on the corpus (targets/shared/tokenizer_corpus.txt: every major
script, combining marks, emoji sequences, control and zero-width characters, lines past the maximum
length) plus seeded random lines, for all-MiniLM-L6-v2's and Qwen3's tokenizer.json."""
from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

from arrcoc_edge.targets import app_tokenize
from arrcoc_edge.targets.android import app as android_app
from arrcoc_edge.targets.ios import swift as ios_swift
from arrcoc_edge.targets.shared import tokenizer_cases
from tests.one_line import one_line

REPO = Path(__file__).resolve().parent.parent
SOURCES, MISSING = tokenizer_cases.sources()
# Code points where a platform's own Unicode data gives other ids than the Rust crate: the apps take
# NFC/NFD and lowercase from the platform (every class the tokenizers split on is the crate's,
# UnicodeTables.*). Measured on all 1,112,063 code points alone and on the 8,660 with a decomposition,
# a combining class or a case mapping next to a combining mark; mobile/README.md says what the apps do.
# Both: combining marks that got a combining class after the crate's normalization tables (Unicode 9-
# era unicode-normalization-alignments), which the platform's NFC reorders before U+0301 and the
# crate leaves in place (Qwen3 only: MiniLM strips marks). iOS also: swift-corelibs-foundation's NFC
# keeps the Tibetan U+0F73/0F75/0F81 that the crate decomposes (composition exclusions), and knows
# more late marks (Unicode 14/15) than JDK 17.
_BOTH = [0x07FD, 0x08D3, 0x0D3B, 0x0D3C, 0x0EBA, 0x1ABF, 0x1AC0, 0x1DF6, 0x1DF7, 0x1DF8, 0x1DF9, 0xA82C,
         0x10F46, 0x10F47, 0x10F4B, 0x10F4D, 0x10F4E, 0x10F4F, 0x10F50, 0x1133B, 0x11839, 0x1183A, 0x1193D,
         0x1193E, 0x11943, 0x119E0, 0x11A34, 0x11A47, 0x11A99, 0x11D42, 0x11D44, 0x11D45, 0x11D97, 0x16FF0, 0x16FF1]
PLATFORM_DIFFERENCES = {
    "android": _BOTH,
    "ios": sorted(_BOTH + [0x0899, 0x089A, 0x089B, 0x08CF, 0x08D0, 0x08D1, 0x08D2, 0x0C3C, 0x0F73, 0x0F75, 0x0F81,
                           0x1715, 0x1AC3, 0x1AC4, 0x1ACA, 0x1DFA, 0x10F83, 0x10F85, 0x11070]),
}


def _toolchain_missing(app: str) -> str | None:
    if app == "android":
        return android_app.missing_reason()
    return ios_swift.Swift.find()[1] or None


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


@pytest.mark.compiler
@pytest.mark.parametrize("app", app_tokenize.APPS)
@pytest.mark.parametrize("source", SOURCES, ids=[s[0] for s in SOURCES])
def test_app_ids_equal_pythons(app, source, queries):
    """The first call per app takes minutes: it compiles the app's tokenizer (kotlinc and the JVM;
    swift build in the chroot) before the compile cache holds it."""
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
        from arrcoc_edge.relevance import text_encoder

        enc = text_encoder.tokenizer()(texts, truncation=True, max_length=max_length)["input_ids"]
        assert [list(x) for x in enc] == got
        assert max(map(len, got)) == max_length  # the long lines were cut


@pytest.mark.compiler
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
        assert path.read_text() == text, f"{path.name} is stale: run `python -m arrcoc_edge.targets.app_tokenize --write-tables`"


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
    for args, needle in cases:
        proc = _invoke(*args)
        assert needle in one_line(proc), (args, proc.stderr)


@pytest.mark.compiler
def test_a_tokenizer_model_the_app_lacks_is_one_line(tmp_path):
    """A Unigram tokenizer.json the Rust crate loads but the Kotlin app does not implement: the app
    itself refuses it (compiled and run on the JVM), in one line."""
    if _toolchain_missing("android"):
        pytest.skip(_toolchain_missing("android"))
    other = tmp_path / "unigram.json"
    other.write_text(json.dumps({"model": {"type": "Unigram", "vocab": []}}))
    text_ok = tmp_path / "ok.txt"
    text_ok.write_text("hello\n")
    proc = _invoke("--app", "android", "--tokenizer", str(other), "--text-file", str(text_ok))
    assert "Unigram" in one_line(proc), proc.stderr


def test_lines_split_on_newline_only(tmp_path):
    """A "\\r" stays in its line, an empty line is an empty query, a final "\\n" ends the last line."""
    path = tmp_path / "q.txt"
    path.write_bytes(b"a\r\nb\n\nc")
    assert app_tokenize.read_lines(path) == ["a\r", "b", "", "c"]
    path.write_bytes(b"a\n")
    assert app_tokenize.read_lines(path) == ["a"]
    path.write_bytes(b"")
    assert app_tokenize.read_lines(path) == []
