"""Pages that stay true (issue 36): every relative link resolves, every task is documented, the
help names every target. Numbers in the pages are checked where a test can compute them."""
from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "mobile" / "README.md"]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = "".join(c for c in text if c in " -" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def _links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(FENCE.sub("", page.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    """docs/targets.md linked mobile/README.md relative to docs/ (a 404 on GitHub) and cited a
    'Benchmarks section above' that was not there."""
    broken = []
    for href in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", href):  # http:, https:, mailto:
            continue
        path, _, anchor = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{href} (no {target.relative_to(REPO) if target.is_relative_to(REPO) else target})")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{href} (no heading #{anchor} in {target.name})")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_slug_follows_github():
    assert _slug("Earlier measurements (dated; kept for their history)") == "earlier-measurements-dated-kept-for-their-history"
    assert _slug("Benchmarks (`invoke bench`)") == "benchmarks-invoke-bench"


def _invoke(*args: str) -> str:
    bin_dir = Path(sys.executable).parent
    done = subprocess.run([str(bin_dir / "invoke"), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_task_is_documented():
    """`invoke --list` showed a `test` task that neither the README nor docs/cli.md named."""
    tasks = re.findall(r"^\s{2}([a-z][a-z0-9-]*)", _invoke("--list"), re.M)
    assert "build" in tasks and "test" in tasks
    cli_page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert [t for t in tasks if f"invoke {t}" not in cli_page] == []


def test_build_help_names_every_target():
    """`invoke build --help` listed the targets without text-encoder."""
    from arrcoc_edge.targets import GROUPS, TARGETS

    help_text = " ".join(_invoke("build", "--help").split())
    line = help_text[help_text.index("--target"):]
    assert [name for name in [*TARGETS, *GROUPS] if name not in line[:400]] == []


def test_golden_counts_in_the_guarantees_are_the_code_s():
    """docs/guarantees.md gave 12/24 golden samples where the build had 14/31."""
    from arrcoc_edge.stages import golden

    calibration = len(golden.CALIBRATION_PHOTOS) * len(golden.CROPS) + len(golden.WHOLE_CALIBRATION)
    heldout = len(golden.HELDOUT_PHOTOS) * len(golden.CROPS) + len(golden.WHOLE_HELDOUT)
    page = " ".join((REPO / "docs" / "guarantees.md").read_text(encoding="utf-8").split())
    assert f"{calibration} samples, only ever used to calibrate" in page
    assert f"{heldout} samples, only ever used to verify" in page


def test_the_code_map_is_the_code_s():
    """docs/layout.md listed 18 of the 26 pipeline modules and nothing checked it; its map is now
    generated from the docstrings, and this fails when the code moved without it."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "layout_doc.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_import_contracts_hold():
    """pipeline/ has one direction and targets/ its rooms (.importlinter); scripts/test.sh runs
    scripts/lint_imports.py first, and this keeps `invoke test` and a bare pytest honest too."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "lint_imports.py")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]


# ---- pages that say what is true now: no issue numbers, no first person, a glossary, a changelog ----

USER_PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "mobile" / "README.md"]
# A reader cannot open this project's issues: "issue 42", "issues 30-31", "(#38)". An upstream
# reference written with its repository (microsoft/onnxruntime#25786) is one a reader can find.
ISSUE = re.compile(r"\b[Ii]ssues?[ -]?#?\d+|(?<![\w/.&-])#\d+\b")
# First person: I (not I/O), we, our, ours. Pages speak of the tool, the build, the user.
FIRST_PERSON = re.compile(r"\bI\b(?!/)|\b[Ww]e\b|\b[Oo]urs?\b")


def _prose_lines(page: Path):
    """(line number, text) of the page outside fenced code blocks (commands may say anything)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text(encoding="utf-8"))
    yield from enumerate(text.splitlines(), 1)


def test_the_rules_catch_what_they_are_for():
    assert ISSUE.search("the tie rule (issue 28)") and ISSUE.search("see (#38)") and ISSUE.search("Issue 30: before")
    assert not ISSUE.search("microsoft/onnxruntime#25786") and not ISSUE.search("[top-K](glossary.md#top-k)")
    assert FIRST_PERSON.search("I tried training") and FIRST_PERSON.search("we measured") and FIRST_PERSON.search("Our tests")
    assert not FIRST_PERSON.search("the I/O contract") and not FIRST_PERSON.search("Iowa, weights, four")


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_user_pages_name_no_issue_numbers_and_speak_in_no_first_person(page):
    """The pages were a lab notebook: 'issue 31', 'I tried', 'our checkpoints'. History goes to
    CHANGELOG.md; a page says what is true now, of the tool and the user."""
    found = [f"{page.relative_to(REPO)}:{n}: {m.group(0)!r} in {line.strip()[:90]!r}"
             for n, line in _prose_lines(page) for rule in (ISSUE, FIRST_PERSON) for m in rule.finditer(line)]
    assert not found, "\n".join(found)


GLOSSARY = REPO / "docs" / "glossary.md"
GLOSSARY_TERMS = ("arr-coc", "ways-of-knowing", "tension-balancer", "golden-set", "top-k", "grid-cell-g-and-16g", "qdq",
                  "int8-and-a16w8", "generation", "ledger", "parity", "gate", "statuses-published-unverified-failed",
                  "r-precision")


def test_the_glossary_defines_the_project_s_terms():
    """ARR-COC, the ways of knowing, tension balancer, golden set, top-K, G and 16·G, QDQ, A16W8,
    generation, ledger, 'rel max', R-precision, parity, gate and the statuses were used unexplained."""
    anchors = _anchors(GLOSSARY)
    assert [t for t in GLOSSARY_TERMS if t not in anchors] == []
    text = GLOSSARY.read_text(encoding="utf-8")
    for words in ("information", "perspectival", "participatory", "rel max", "16·G", "A16W8", "published", "unverified", "failed"):
        assert words in text, words


@pytest.mark.parametrize("page", [p for p in USER_PAGES if p.name != "README.md" and p != GLOSSARY],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_each_page_links_the_glossary_and_its_terms_resolve(page):
    """Every page but the README (its quick start) leads to the glossary; every glossary link names a
    term the glossary defines (test_every_relative_link_resolves checks the same for any anchor)."""
    links = [href for href in _links(page) if href.partition("#")[0].endswith("glossary.md")]
    assert links, f"{page.relative_to(REPO)} links nothing in docs/glossary.md"
    anchors = _anchors(GLOSSARY)
    assert [h for h in links if h.partition("#")[2] and h.partition("#")[2] not in anchors] == []


def test_the_changelog_has_dated_entries_newest_first():
    """History moved out of the pages goes to one CHANGELOG.md, each entry under its date."""
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    dates = re.findall(r"^## (\d{4}-\d{2}-\d{2})\s*$", text, re.M)
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert dates and len(dates) == len(headings), f"every entry is a date: {headings}"
    assert dates == sorted(dates, reverse=True) and len(set(dates)) == len(dates), dates
    from datetime import date
    assert all(date.fromisoformat(d) <= date.today() for d in dates)
    assert all(re.search(r"^- ", section, re.M) for section in re.split(r"^## \d{4}-\d{2}-\d{2}\s*$", text, flags=re.M)[1:])


def test_the_held_out_pairs_in_the_guarantees_are_the_build_s():
    """docs/guarantees.md said 31 held-out samples where the build printed 63: 31 vector samples
    and one sentence sample per held-out sentence (each sample but the 12 MP one at least once)."""
    from arrcoc_edge.stages import golden, sentences

    vectors = len(golden.HELDOUT_PHOTOS) * len(golden.CROPS) + len(golden.WHOLE_HELDOUT)
    usable = vectors - sum(1 for name, _, _ in golden.WHOLE_HELDOUT if name in golden.NO_SENTENCE)
    said = max(usable, len(sentences.HELDOUT))
    page = " ".join((REPO / "docs" / "guarantees.md").read_text(encoding="utf-8").split())
    assert f"{vectors} vector samples + {said} sentence samples = {vectors + said}" in page


def test_the_ios_xctest_count_is_the_code_s():
    """mobile/README.md said 13 XCTests where CoreTests held 15; it names each class's count."""
    counts = {path.stem: len(re.findall(r"^\s*func test\w*\(", path.read_text(encoding="utf-8"), re.M))
              for path in sorted((REPO / "mobile" / "ios" / "CoreTests").glob("*.swift"))}
    counts = {name: n for name, n in counts.items() if n}
    page = " ".join((REPO / "mobile" / "README.md").read_text(encoding="utf-8").split())
    assert f"the {sum(counts.values())} XCTests of `CoreTests`" in page
    assert "(" + ", ".join(f"{name} {n}" for name, n in counts.items()) + ")" in page


def test_the_presets_in_training_md_are_the_page_s():
    """docs/training.md's table of the page's presets listed 'a face', 'a cat', 'eyes'... after the
    page had dropped them; its rows are the presets targets/web/site_files.py ships, in order."""
    from arrcoc_edge.targets.web.site_files import PRESET_QUERIES

    text = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    section = text[text.index("## On the sample photos"):]
    section = section[:section.index("\n\n", section.index("| preset |"))]
    rows = [row.split("|")[1].strip().strip("*") for row in section.splitlines() if row.startswith("| ")][1:]
    assert rows == list(PRESET_QUERIES)


def test_arr_coc_is_expanded_one_way():
    """The README said "adaptive relevance realization", the glossary "Adaptive Relevance Realization
    - Contexts Optical Compression" (arr-coc-0-1's own): every page that expands it says the latter."""
    expansion = "Adaptive Relevance Realization - Contexts Optical Compression"
    assert expansion in GLOSSARY.read_text(encoding="utf-8")
    found = [f"{page.relative_to(REPO)}:{n}" for page in USER_PAGES for n, line in _prose_lines(page)
             if re.search(r"adaptive relevance", line, re.I) and expansion not in line]
    assert not found, f"another expansion of ARR-COC: {found}"
    assert expansion in (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_s_build_time_is_the_sum_of_its_table():
    """The README gave no duration for its main command; the one it gives is computed from the
    pasted table's time column (one stage after another), so a new table cannot leave it stale."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("<!-- build table:"):readme.index("<!-- end of build table -->")]
    total = round(sum(float(s) for s in re.findall(r"\s(\d+(?:\.\d+)?)s$", block, re.M)))
    assert total > 0, "no times in the README's build table"
    minutes, seconds = divmod(total, 60)
    assert f"the time column adds up to {minutes} min {seconds} s" in " ".join(readme.split())
