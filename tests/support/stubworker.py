"""A minimal HTTP server that serves an exposition chosen by the test, in a thread.

For tests that need a worker whose output is exactly known (the mapping's
integration test, fault tests of the agent as a whole). The simulator is the
stand-in for behaviour; this is the stand-in for exact text.

``ThreadedServer`` and ``QuietHandler`` are the parts every threaded test server
shares (the replayed hosts, the engines at other paths, the store's front proxy).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing; ``reply`` sends one whole answer."""

    def reply(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class ThreadedServer:
    """A ThreadingHTTPServer on a free loopback port, serving from a daemon thread."""

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class StubWorker(ThreadedServer):
    def __init__(self, body: Callable[[], str]) -> None:
        self.body = body
        self.status = 200
        self.hits = 0
        stub = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                stub.hits += 1
                if self.path not in ("/metrics", "/health"):
                    self.send_error(404)
                    return
                data = stub.body().encode() if self.path == "/metrics" else b"ok"
                self.reply(stub.status, data, "text/plain; version=0.0.4")

        self.serve(Handler)
