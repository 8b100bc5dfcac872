"""README's build table (pasted by scripts/readme_table.py from a real `invoke build --target all`)
holds what no host changes: every target and variant row, its status, and the FP32 sizes, against
the rows this session's fresh builds print (the shared builds that together make every target).
The INT8/FP16 parity digits, .ort and TensorRT plan bytes and the times vary by host, and the .ptl's
size with the checkout's path (TorchScript's debug pickles record the source files' paths), so
they are not compared (README says so under the table)."""
from __future__ import annotations

import re

import pytest
from conftest import APPS_TARGETS, REPO, WITH_ENCODER_TARGETS

pytestmark = pytest.mark.slow  # reads three shared builds

BEGIN, END = "<!-- build table:", "<!-- end of build table -->"
ROW = re.compile(r"^(?P<target>[a-z][a-z0-9-]*)\s{2,}(?P<variant>[a-z0-9-]+)\s{2,}(?P<status>published|unverified|failed|skipped)"
                 r"\s{2,}(?P<size>[\d.]+ [KMG]?B)\s{2,}", re.M)
BUILDS = (WITH_ENCODER_TARGETS, "executorch,ptl", APPS_TARGETS)  # every target, as the suite builds them
SIZE_MOVES = ("tensorrt", "ptl")  # a plan's builder choices; the .ptl's debug pickles hold the checkout's path


def rows(text: str) -> dict[tuple[str, str], tuple[str, str]]:
    return {(m["target"], m["variant"]): (m["status"], m["size"]) for m in ROW.finditer(text)}


def test_readme_table_rows_match_a_fresh_build(shared_build):
    readme = (REPO / "README.md").read_text()
    table = rows(readme[readme.index(BEGIN):readme.index(END)])
    assert len(table) >= 15, "README's build table is missing or unreadable"
    fresh: dict[tuple[str, str], tuple[str, str]] = {}
    for targets in BUILDS:
        fresh.update(rows(shared_build(targets).stdout))
    assert set(table) == set(fresh), f"rows only in README: {sorted(set(table) - set(fresh))}; " \
                                     f"only in a fresh build: {sorted(set(fresh) - set(table))}"
    for key, (status, size) in table.items():
        assert status == fresh[key][0], (key, status, fresh[key][0])
        if key[1] == "fp32" and key[0] not in SIZE_MOVES:  # the other FP32 sizes are the commit's
            assert size == fresh[key][1], (key, size, fresh[key][1])
