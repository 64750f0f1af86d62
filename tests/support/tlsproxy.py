"""HTTPS in front of a plain-HTTP test server: a TLS-terminating TCP forwarder on 127.0.0.1.

The test S3 servers speak HTTP only, and some S3 behaviour differs over HTTPS (boto3 sends
aws-chunked uploads with a trailing checksum only there). ``TlsProxy`` accepts TLS with a
self-signed certificate made by ``openssl`` and forwards the decrypted bytes unchanged, so the
server sees exactly the requests a client sends over HTTPS. Clients trust it through
``AWS_CA_BUNDLE=proxy.cert``.
"""
from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (cert, key)."""
    cert, key = folder / "proxy.crt", folder / "proxy.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


def available() -> bool:
    return shutil.which("openssl") is not None


class TlsProxy:
    def __init__(self, upstream: str, folder: Path):
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname, parts.port)
        self.cert, key = make_certificate(folder)
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(self.cert, key)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            client = self._context.wrap_socket(conn, server_side=True)
            server = socket.create_connection(self._upstream)
        except (OSError, ssl.SSLError):
            conn.close()
            return
        threading.Thread(target=_pump, args=(server, client), daemon=True).start()
        _pump(client, server)

    def close(self) -> None:
        self._listener.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy bytes from ``src`` to ``dst`` until either side closes, then close both."""
    try:
        while data := src.recv(1 << 16):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass
