"""An HTTP reverse proxy in front of moto that counts S3 requests and answers chosen ones with errors.

boto3 talks to it exactly as to a real endpoint (HTTP on 127.0.0.1); each
request is forwarded to the upstream server unless a rule matches, in which
case the proxy answers with an S3-style XML error (status, code, message).
``requests`` records (method, path, query) of everything seen, so a test can
count, say, the UploadPart requests for part 3 under a persistent 503.
"""
from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Rule:
    method: str
    query_key: str | None  # e.g. "partNumber" (UploadPart), "uploads" (Create/ListMultipartUploads)
    status: int
    code: str
    message: str = "injected by the test proxy"
    remaining: int | None = None  # None: forever

    def matches(self, method: str, query: dict) -> bool:
        if method != self.method or (self.query_key is not None and self.query_key not in query):
            return False
        return self.remaining is None or self.remaining > 0


class S3FaultProxy:
    def __init__(self, upstream: str):
        up = urlsplit(upstream)
        self.upstream = (up.hostname, up.port)
        self.rules: list[Rule] = []
        self.requests: list[tuple[str, str, dict]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                proxy._serve(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def count(self, method: str, query_key: str, value: str | None = None) -> int:
        return sum(1 for m, _, q in self.requests if m == method and query_key in q
                   and (value is None or q[query_key] == [value]))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self._lock:
            self.requests.append((h.command, parts.path, query))
            rule = next((r for r in self.rules if r.matches(h.command, query)), None)
            if rule is not None and rule.remaining is not None:
                rule.remaining -= 1
        if rule is not None:
            self._error(h, rule)
        else:
            self._forward(h, body)

    def _error(self, h: BaseHTTPRequestHandler, rule: Rule) -> None:
        xml = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{rule.code}</Code>"
               f"<Message>{rule.message}</Message><RequestId>proxy</RequestId></Error>").encode()
        h.send_response(rule.status)
        h.send_header("Content-Type", "application/xml")
        h.send_header("Content-Length", str(len(xml) if h.command != "HEAD" else 0))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(xml)

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        conn = http.client.HTTPConnection(*self.upstream, timeout=120)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("expect", "connection")}
        conn.request(h.command, h.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                h.send_header(k, v)
        length = resp.getheader("Content-Length") if h.command == "HEAD" else None  # HEAD: the object's
        h.send_header("Content-Length", length or str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
        conn.close()
