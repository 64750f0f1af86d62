"""A TCP proxy on 127.0.0.1 that a test can cut and restore: an S3 server going away and back.

Why a proxy and not stopping moto: moto keeps its buckets and uploads in the
server process's memory, so a real restart would lose the very state (open
multipart uploads) the test is about. Cutting the proxy does what a crashed or
rebooting server does to clients: live connections are reset mid-request and
new ones are refused (the listening socket is closed), while the state behind
it survives, as it does on a real object store.
"""
from __future__ import annotations

import socket
import struct
import threading
import time


class CutProxy:
    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.forwarded = 0  # client -> server bytes, in total
        self.cuts = 0
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._cut_at: int | None = None
        self._down_s = 0.0
        self._listener = None
        self.port = 0
        self._listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ control

    def cut_after(self, nbytes: int, down_s: float | None) -> None:
        """Cut once ``nbytes`` more bytes went to the server; restore after ``down_s`` (None: stay down)."""
        with self._lock:
            self._cut_at = self.forwarded + nbytes
            self._down_s = down_s

    def cut(self) -> None:
        with self._lock:
            self.cuts += 1
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        if listener is not None:
            try:  # wakes the thread blocked in accept(); close() alone would keep it listening
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        for s in conns:  # like a server that died; shutdown wakes the pump blocked in recv()
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        with self._lock:
            if self._listener is None:
                self._listen()

    def close(self) -> None:
        self.cut()

    # ------------------------------------------------------------------ plumbing

    def _listen(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by cut()
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut while connecting
                    client.close()
                    server.close()
                    return
                self._conns |= {client, server}
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while data := src.recv(256 << 10):
                dst.sendall(data)
                if upstream and self._count(len(data)):
                    threading.Thread(target=self._cut_and_restore, daemon=True).start()
                    return
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _count(self, n: int) -> bool:
        with self._lock:
            self.forwarded += n
            if self._cut_at is not None and self.forwarded >= self._cut_at:
                self._cut_at = None
                return True
        return False

    def _cut_and_restore(self) -> None:
        self.cut()
        if self._down_s is not None:
            time.sleep(self._down_s)
            self.restore()
