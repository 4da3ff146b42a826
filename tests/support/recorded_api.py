"""Serve recorded Google API responses on 127.0.0.1 to the real client libraries.

Routes map (method, path regex) to a status and a JSON body (a dict, or the
name of a file under tests/fixtures/). Every request is recorded so a test can
assert what the client actually sent.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@dataclass
class Seen:
    method: str
    path: str
    query: dict
    body: bytes
    headers: dict


@dataclass
class RecordedApi:
    """routes: {("GET", r"/compute/v1/projects/p/regions/[^/]+"): (200, "compute/region.json" | {...})};
    a key may add query parameters the request must carry, ("GET", path, (("pageToken", "2"),)): the
    first matching route answers; a payload may be a callable of the JSON request body returning
    (status, payload)."""

    routes: dict[tuple, tuple[int, object]]
    seen: list[Seen] = field(default_factory=list)

    def __enter__(self) -> "RecordedApi":
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                api.seen.append(Seen(self.command, parts.path, parse_qs(parts.query), body, dict(self.headers)))
                query = parse_qs(parts.query)
                for (method, pattern, *wanted), (status, payload) in api.routes.items():  # noqa: B007 (read after the break)
                    if (
                        method == self.command
                        and re.fullmatch(pattern, parts.path)
                        and all(query.get(k) == [v] for k, v in (wanted[0] if wanted else ()))
                    ):
                        break
                else:
                    status, payload = 404, {"error": {"code": 404, "message": f"no recording for {parts.path}"}}
                if callable(payload):  # a recording chosen by the request (e.g. one answer per access tuple)
                    status, payload = payload(json.loads(body or b"{}"))
                if isinstance(payload, str):
                    payload = json.loads((FIXTURES / payload).read_text())
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

            def log_message(self, *args):  # keep pytest output clean
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def requests(self, method: str, pattern: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and re.fullmatch(pattern, s.path)]
