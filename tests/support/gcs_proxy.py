"""A small HTTP proxy in front of the Cloud Storage emulator: the preconditions it lacks, and faults on demand.

gcp-storage-emulator ignores `ifGenerationMatch`; real Cloud Storage answers 412 when it does not
hold. The proxy checks it (against the emulator's own generations, one write at a time) so
create-if-absent and versioned writes behave as in production. Fault rules, per method and path
pattern (the object name appears decoded in the matched text), for the next `times` matching
requests (`skip` lets that many matches through first; `body` also asks a regex of the request body):
    status   answer `status` (503, 429, 500...) without forwarding: a JSON error in Google's shape, or
             `reply` as plain text (MLflow's basic-auth app answers 403 "Permission denied")
    stall    wait `seconds`, then forward (a client with a shorter timeout gives up first)
    cut      forward, then send the answer's headers and half its body and close the connection
The matched text is "METHOD decoded-path?query @object-name" (uploads name their object in the body).
`requests` records (method, that text, request body bytes) for what a test wants to count.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}
NOT_MET = {
    "error": {
        "code": 412,
        "message": "At least one of the pre-conditions you specified did not hold.",
        "errors": [{"reason": "conditionNotMet", "message": "Precondition Failed"}],
    }
}


@dataclass
class Fault:
    kind: str  # "status" | "stall" | "cut"
    pattern: str  # a regex searched in "METHOD decoded-path?query"
    times: int = 1
    status: int = 503
    seconds: float = 0.0
    body: str | None = None
    reply: str | None = None
    skip: int = 0
    hits: int = 0
    seen: int = 0

    def take(self, line: str, body: bytes) -> bool:
        if self.hits >= self.times or not re.search(self.pattern, line):
            return False
        if self.body is not None and not re.search(self.body.encode(), body):
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        self.hits += 1
        return True


@dataclass
class Seen:
    method: str
    target: str
    body_bytes: int


@dataclass
class GcsProxy:
    upstream: str  # http://127.0.0.1:PORT of the emulator
    faults: list[Fault] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)

    def add(self, kind: str, pattern: str, **kw) -> Fault:
        fault = Fault(kind, pattern, **kw)
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()
            self.requests.clear()

    def bytes_written(self, pattern: str = "") -> int:
        return sum(
            s.body_bytes
            for s in list(self.requests)
            if s.method in ("POST", "PUT", "PATCH") and re.search(pattern, s.target)
        )

    # -- serving --------------------------------------------------------------------------------------

    def start(self) -> GcsProxy:
        self._lock, self._write_lock = threading.Lock(), threading.Lock()
        up = urlsplit(self.upstream)
        self._up = (up.hostname, up.port)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self):
                proxy._handle(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

            def log_message(self, *args):
                pass

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _fault(self, line: str, body: bytes) -> Fault | None:
        with self._lock:
            return next((f for f in self.faults if f.take(line, body)), None)

    def _forward(self, method: str, target: str, headers: dict, body: bytes):
        conn = http.client.HTTPConnection(*self._up, timeout=60)
        try:
            conn.request(method, target, body=body or None, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def _generation(self, bucket: str, name: str) -> int:
        status, _, data = self._forward("GET", f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}", {}, b"")
        return int(json.loads(data)["generation"]) if status == 200 else 0

    @staticmethod
    def _object(target: str, body: bytes) -> tuple[str, str] | None:
        """(bucket, object name) a JSON API request is about, or None."""
        parts = urlsplit(target)
        found = re.match(r"/(?:upload/|download/)?storage/v1/b/([^/]+)/o(?:/(.+))?$", parts.path)
        if not found:
            return None
        name = found.group(2) or parse_qs(parts.query).get("name", [""])[0]
        if not name:  # a multipart or resumable upload names its object in the JSON metadata of the body
            named = re.search(rb'"name":\s*"((?:[^"\\]|\\.)*)"', body[:4096])
            name = json.loads(b'"' + named.group(1) + b'"') if named else ""
        return found.group(1), unquote(name)

    def _precondition_fails(self, target: str, body: bytes) -> bool:
        query = parse_qs(urlsplit(target).query)
        found = self._object(target, body)
        if "ifGenerationMatch" not in query or not found:
            return False
        return self._generation(*found) != int(query["ifGenerationMatch"][0])

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        named = self._object(h.path, body)
        line = f"{h.command} {unquote(h.path)} @{named[1] if named else ''}"
        self.requests.append(Seen(h.command, line, len(body)))
        fault = self._fault(line, body)
        if fault and fault.kind == "status" and fault.reply is not None:
            return self._answer(h, fault.status, [("Content-Type", "text/plain")], fault.reply.encode())
        if fault and fault.kind == "status":
            return self._answer(
                h,
                fault.status,
                [("Content-Type", "application/json")],
                json.dumps({"error": {"code": fault.status, "message": f"injected {fault.status}"}}).encode(),
            )
        if fault and fault.kind == "stall":
            time.sleep(fault.seconds)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP and k.lower() != "host"}
        writes = h.command in ("POST", "PUT", "PATCH", "DELETE")
        with self._write_lock if writes else _NoLock():
            if self._precondition_fails(h.path, body):
                return self._answer(h, 412, [("Content-Type", "application/json")], json.dumps(NOT_MET).encode())
            status, out_headers, data = self._forward(h.command, h.path, headers, body)
        # A resumable upload's session URL names the emulator: point it here, so its chunks come through too.
        out_headers = [
            (k, v.replace(self.upstream, self.url) if k.lower() == "location" else v) for k, v in out_headers
        ]
        self._answer(
            h,
            status,
            [(k, v) for k, v in out_headers if k.lower() not in HOP | {"content-length"}],
            data,
            cut=bool(fault and fault.kind == "cut"),
        )

    @staticmethod
    def _answer(h: BaseHTTPRequestHandler, status: int, headers: list, data: bytes, *, cut: bool = False) -> None:
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        if cut:
            h.send_header("Connection", "close")
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data[: len(data) // 2] if cut else data)
        if cut:
            h.wfile.flush()
            h.close_connection = True
            try:
                h.connection.shutdown(2)
            except OSError:
                pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a client that hung up on a cut answer: expected here
        pass


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def start_emulator(workdir: Path) -> tuple[subprocess.Popen, GcsProxy]:
    """gcp-storage-emulator (in memory, bucket `test-bucket`) on a free port, and a GcsProxy in front of it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "gcp-storage-emulator"
    proc = subprocess.Popen(
        [
            str(exe),
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
            "--default-bucket",
            "test-bucket",
        ],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        raise RuntimeError("gcp-storage-emulator did not start")
    return proc, GcsProxy(f"http://127.0.0.1:{port}").start()
