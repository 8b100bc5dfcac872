"""Headless Chromium for the page's checks: one browser shared by the build's stages, and a page session
over the built site, served on localhost with cross-origin isolation.
"""
from __future__ import annotations

import base64
import functools
import shutil
from pathlib import Path

import numpy as np

from arrcoc_edge import scratch
from arrcoc_edge.errors import ExportError, HostCapabilityError

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
INPUT_DIR = "_input"  # served beside the site while a PageSession runs (never in the site itself)
PAGE_TIMEOUT_MS = 60_000


def require_browser():
    """Playwright and Debian's Chromium, or HostCapabilityError saying how to get them."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise HostCapabilityError("Python playwright is not installed, so the page cannot be run",
                                  "pip install -e '.[web]' (or run scripts/setup.sh)") from exc
    if not CHROMIUM.is_file():
        raise HostCapabilityError(f"{CHROMIUM} is missing, so the page cannot be run in a real browser",
                                  "run scripts/setup.sh as root (apt-get install chromium)")
    return sync_playwright


class SharedChromium:
    """One Playwright driver and one Chromium per process, shared by reference count.

    Playwright's sync API allows only one driver per thread, and the verifier, `invoke bench`
    (several pages at once) and the tests all need pages: they all borrow this browser.
    """

    def __init__(self):
        self.users = 0
        self.pw = None
        self.browser = None

    def acquire(self):
        sync_playwright = require_browser()
        if self.users == 0:
            self.pw = sync_playwright().start()
            try:
                self.browser = self.pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            except BaseException:
                self.pw.stop()
                raise
        self.users += 1
        return self.browser

    def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            try:
                self.browser.close()
            finally:
                self.pw.stop()
                self.pw = self.browser = None


CHROMIUM_HOST = SharedChromium()


@functools.cache
def browser_identity() -> dict[str, str]:
    """What a page run depends on besides the site: the Chromium launcher's and binary's bytes
    (hashed once per process) and the flags it runs with; keys of targets/shared/run_cache.py."""
    from arrcoc_edge.relevance.digest import sha256_file

    binary = CHROMIUM.resolve().parent.parent / "lib" / "chromium" / "chromium"
    return {"chromium": sha256_file(CHROMIUM), "chromium_binary": sha256_file(binary) if binary.is_file() else "absent",
            "chromium_args": " ".join(CHROMIUM_ARGS)}


def page_identity(site: Path) -> dict[str, str]:
    """browser_identity and the sha256 of every file of the site (path and bytes)."""
    from arrcoc_edge.stages.conversion_cache import folder_digest

    return {"site": folder_digest(Path(site)), **browser_identity()}


def _link_or_copy(src: str, dst: str) -> None:
    import os

    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


class PageSession:
    """The site served on an ephemeral localhost port (COOP/COEP) and opened in headless Chromium.

    The server's root is a temporary folder of links to the site's files plus INPUT_DIR, where
    the session puts the photos it hands the page (put/decode/run_raw): the page fetches them from
    its own origin, and the site folder itself is never written to.
    Console errors and uncaught page errors are collected: any of them fails verification.
    """

    def __init__(self, site: Path, threads: int | None = None):
        from arrcoc_edge.serve import serving

        self.errors: list[str] = []
        self._count = 0
        self.last_ms: float | None = None
        self.browser = CHROMIUM_HOST.acquire()
        self.root = scratch.make("arrcoc-page-", family="arrcoc-")  # swept after a kill -9
        try:
            # Real files, not symlinks: the server (arrcoc_edge.serve) never follows a link out of the
            # folder it serves. Hard links cost nothing; a copy where the site is on another disk.
            shutil.copytree(Path(site).resolve(), self.root, copy_function=_link_or_copy, dirs_exist_ok=True)
            (self.root / INPUT_DIR).mkdir()
            self._serving = serving(self.root)
            self.url = self._serving.__enter__()
            self.page = self.browser.new_page()
            self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
            self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
            self.open(threads)
        except BaseException:
            self.close()
            raise

    def open(self, threads: int | None = None) -> float:
        """(Re)load the page and wait until its first sample has a result; returns load-to-result ms."""
        url = self.url + (f"?threads={threads}" if threads else "")
        self.page.goto(url)
        self.page.wait_for_function("document.body.dataset.state !== 'loading'", timeout=PAGE_TIMEOUT_MS)
        state = self.page.evaluate("document.body.dataset.state")
        if state != "ready":
            message = self.page.text_content("#message") or "(no message)"
            raise ExportError(f"the web page did not become ready: {message.strip()}",
                              "open it with `invoke serve` and look at the browser console")
        self.check()
        return float(self.page.evaluate("window.arrcoc.firstResultMs()"))

    def check(self) -> None:
        if self.errors:
            raise ExportError(f"the web page logged {len(self.errors)} error(s): {self.errors[0][:200]}",
                              "fix the page (web/app.js); open it with `invoke serve` to see the console")

    def put(self, data: bytes, suffix: str = ".bin") -> str:
        """Serve `data` beside the site for the page to fetch; returns its URL path (relative)."""
        self._count += 1
        for old in (self.root / INPUT_DIR).iterdir():  # one at a time: a 12 MP photo is 36 MB
            old.unlink()
        name = f"{INPUT_DIR}/{self._count}{suffix}"
        (self.root / name).write_bytes(data)
        return name

    def run_raw(self, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """uint8 photos [B,H,W,3] (one size) and float32 queries [B,D] through the page's model."""
        image = np.ascontiguousarray(inputs["image"], dtype=np.uint8)
        query = np.ascontiguousarray(inputs["query"], dtype=np.float32)
        if image.ndim != 4 or image.shape[3] != 3:
            raise ValueError(f"image must be uint8 [B,H,W,3], got {image.shape}")
        b = image.shape[0]
        url = self.put(image.tobytes())
        res = self.page.evaluate("([m, u, s, q]) => window.arrcoc.runUrl(m, u, s, q)",
                                 [model, url, list(image.shape[:3]), base64.b64encode(query.tobytes()).decode()])
        self.check()
        self.last_ms = float(res["ms"])
        return {
            "relevance": np.frombuffer(base64.b64decode(res["relevance"]), np.float32).reshape(b, -1),
            "weights": np.frombuffer(base64.b64decode(res["weights"]), np.float32).reshape(b, 3),
            "evidence": np.frombuffer(base64.b64decode(res["evidence"]), np.float32).reshape(b, -1),
            "topk_indices": np.asarray(res["topk"], dtype=np.int64).reshape(b, -1),
        }

    def decode(self, path: Path) -> np.ndarray:
        """An image file decoded by the page exactly as it decodes a user's photo: uint8 [H,W,3]."""
        url = self.put(Path(path).read_bytes(), Path(path).suffix)
        res = self.page.evaluate("(u) => window.arrcoc.decodeUrl(u)", url)
        self.check()
        return np.frombuffer(base64.b64decode(res["pixels"]), np.uint8).reshape(res["height"], res["width"], 3)

    def threads(self) -> int:
        return int(self.page.evaluate("window.arrcoc.threads()"))

    def close(self) -> None:
        if self.browser is None:
            return
        self.browser = None
        for step in (lambda: self.page.close(), CHROMIUM_HOST.release,
                     lambda: self._serving.__exit__(None, None, None)):
            try:
                step()
            except Exception:  # noqa: BLE001 - closing what did start; the first error is what matters
                pass
        scratch.remove(self.root)


