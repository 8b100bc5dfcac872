"""A static file server with the cross-origin isolation headers multi-threaded WASM needs.

`python -m http.server` cannot send headers, and without `Cross-Origin-Opener-Policy` +
`Cross-Origin-Embedder-Policy` the browser has no SharedArrayBuffer, so onnxruntime-web falls back
to one thread. Used by `invoke serve`, by the web target's verifier and by its tests/bench.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .errors import InputError

ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",  # a rebuilt site must never mix with a cached old model
}


class IsolatedHandler(SimpleHTTPRequestHandler):
    extensions_map = {
        **SimpleHTTPRequestHandler.extensions_map,
        ".mjs": "text/javascript",
        ".js": "text/javascript",
        ".wasm": "application/wasm",
        ".onnx": "application/octet-stream",
        ".bin": "application/octet-stream",
        ".json": "application/json",
        ".webp": "image/webp",
    }

    def end_headers(self):
        for key, value in ISOLATION_HEADERS.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if self.server.verbose:
            super().log_message(format, *args)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    verbose = False

    def handle_error(self, request, client_address):
        # a browser closing a connection mid-transfer (page reload, test teardown) is normal
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def make_server(folder: Path, port: int = 0, host: str = "127.0.0.1", verbose: bool = False) -> ThreadingHTTPServer:
    folder = Path(folder)
    if not (folder / "index.html").is_file():
        raise InputError(f"{folder} has no index.html", "build the site first: invoke build --target web")
    handler = functools.partial(IsolatedHandler, directory=str(folder))
    server = QuietServer((host, port), handler)
    server.verbose = verbose
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/"


@contextlib.contextmanager
def serving(folder: Path, port: int = 0):
    """Serve `folder` on localhost in a background thread (port 0: an ephemeral one); yields the URL."""
    server = make_server(folder, port)
    thread = threading.Thread(target=server.serve_forever, name="arrcoc-serve", daemon=True)
    thread.start()
    try:
        yield url_of(server)
    finally:
        server.shutdown()
        server.server_close()


def serve_forever(folder: Path, port: int = 8000, host: str = "127.0.0.1", log=print) -> None:
    """`invoke serve`: serve until Ctrl-C."""
    server = make_server(folder, port, host, verbose=True)
    log(f"serving {folder} (cross-origin isolated) at {url_of(server)}  (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
