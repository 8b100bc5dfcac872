"""A static file server with the cross-origin isolation headers multi-threaded WASM needs.

`python -m http.server` cannot send headers, and without `Cross-Origin-Opener-Policy` +
`Cross-Origin-Embedder-Policy` the browser has no SharedArrayBuffer, so onnxruntime-web falls back
to one thread. Used by `invoke serve`, by the web target's verifier and by its tests/bench.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from arrcoc_edge import install
from arrcoc_edge.errors import InputError

ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",  # a rebuilt site must never mix with a cached old model
}


IDLE_TIMEOUT_S = 60  # a connection that sends nothing (or takes nothing) this long is closed


class IsolatedHandler(SimpleHTTPRequestHandler):
    # Each connection holds a thread (QuietServer): without a limit an idle client held it for
    # good, and a few thousand idle connections exhausted the process's threads.
    timeout = IDLE_TIMEOUT_S
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

    # Files of the publish that the page reads from beside the site (web/ is one folder of it):
    # calibration.json sits beside manifest.json, and the page fetches it from its own folder. A
    # publish without one is answered `null` ("none here"), not a 404 the browser logs as an error.
    FROM_THE_PUBLISH = ("/calibration.json",)

    def translate_path(self, path):
        local = super().translate_path(path)
        if path.split("?", 1)[0] in self.FROM_THE_PUBLISH and not os.path.lexists(local):
            return os.path.join(os.path.dirname(os.path.realpath(self.directory)), os.path.basename(local))
        return local

    def send_head(self):
        # A NUL or an undecodable byte in the path makes os.stat/open raise ValueError, which the
        # base class does not expect (it printed a traceback): answer 400 instead.
        try:
            if not self._inside():
                self.send_error(404, "Not found")  # a link out of the served folder: never followed
                return None
            if self.path.split("?", 1)[0] in self.FROM_THE_PUBLISH and not os.path.lexists(self.translate_path(self.path)):
                return self._none_here()
            return super().send_head()
        except ValueError:
            self.send_error(400, "Malformed path")
            return None

    def _none_here(self):
        """`null` for a file of the publish that this publish does not have."""
        body = b"null\n"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def _inside(self) -> bool:
        """The file this request would open (a folder's index.html included), with every link
        resolved, is inside the served folder (resolved now: the folder may be a link that a
        publish switches)."""
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            path = next((os.path.join(path, i) for i in ("index.html", "index.htm")
                         if os.path.exists(os.path.join(path, i))), path)
        base = os.path.realpath(self.directory)
        real = os.path.realpath(path)
        inside = real == base or real.startswith(base.rstrip(os.sep) + os.sep)
        if not inside and self.path.split("?", 1)[0] in self.FROM_THE_PUBLISH:  # the publish's own file, not a link
            return os.path.dirname(real) == os.path.dirname(base) and not os.path.islink(path)
        return inside

    def list_directory(self, path):
        self.send_error(404, "Not found")  # no listings: the page knows every file it needs
        return None

    def end_headers(self):
        for key, value in ISOLATION_HEADERS.items():
            self.send_header(key, value)
        super().end_headers()

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if self.server.verbose:
            super().log_message(format, *args)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True  # one thread per connection; Ctrl-C does not wait for open ones
    # The page fetches ~40 MB (WASM, models, encoder) over many parallel connections; the default
    # backlog of 5 reset some of 200 concurrent requests.
    request_queue_size = 128
    verbose = False  # log every request (invoke serve does)
    tracebacks = False  # invoke serve --verbose

    def handle_error(self, request, client_address):
        # a browser closing a connection mid-transfer (page reload, test teardown) is normal
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            return
        if self.tracebacks:
            super().handle_error(request, client_address)
        else:
            print(f"serve: request from {client_address[0]} failed ({type(exc).__name__}: {exc})", file=sys.stderr)


def make_server(folder: Path, port: int = 0, host: str = "127.0.0.1", verbose: bool = False) -> ThreadingHTTPServer:
    folder = Path(folder)
    if not (folder / "index.html").is_file():
        raise InputError(f"{folder} has no index.html",
                         f"build the site first: {install.COMMAND} build --target web --out {folder.parent}")
    handler = functools.partial(IsolatedHandler, directory=str(folder))
    try:
        server = QuietServer((host, port), handler)
    except (OSError, OverflowError) as exc:
        raise InputError(f"cannot listen on {host}:{port} ({getattr(exc, 'strerror', None) or exc})",
                         "pass a free port with --port (another server may be using this one)") from exc
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


def serve_forever(folder: Path, port: int = 8000, host: str = "127.0.0.1", log=print, tracebacks=False) -> None:
    """`invoke serve`: serve until Ctrl-C."""
    server = make_server(folder, port, host, verbose=True)
    server.tracebacks = tracebacks
    log(f"serving {folder} (cross-origin isolated) at {url_of(server)}  (Ctrl-C to stop)")
    try:
        server.serve_forever()  # Ctrl-C: KeyboardInterrupt goes on to the task (exit 130, one line)
    finally:
        server.server_close()
