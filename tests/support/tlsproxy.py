"""HTTPS in front of a plain-HTTP test server: a TLS-terminating TCP forwarder on 127.0.0.1.

The test S3 servers speak HTTP only, and some S3 behaviour differs over HTTPS (boto3 sends
aws-chunked uploads with a trailing checksum only there). ``TlsProxy`` accepts TLS with a
self-signed certificate made by ``openssl`` and forwards the decrypted bytes unchanged, so the
server sees exactly the requests a client sends over HTTPS. Clients trust it through
``AWS_CA_BUNDLE=proxy.cert``.

Every connection is served by one asyncio event loop in one background thread: an SSL object is
only ever used by that thread (OpenSSL does not allow one thread to read while another writes on
the same SSL object: that broke handshakes with "unexpected message" alerts).
"""
from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit

CHUNK = 1 << 16


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
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-proxy", daemon=True)
        self._thread.start()
        self._server = self._on_loop(asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._context))
        self.url = f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def _on_loop(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        try:
            server_in, server_out = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_out.close()
            return
        await asyncio.gather(_pump(client_in, server_out), _pump(server_in, client_out))

    def close(self) -> None:
        """Stop accepting, drop the open connections and end the loop's thread."""
        async def shut() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._loop.is_closed():
            return
        self._on_loop(shut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy bytes from ``src`` to ``dst`` until ``src`` ends, then close ``dst``: either side
    closing ends the connection, as a TCP forwarder would."""
    try:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        dst.close()
