"""Two things under boto3's HTTP layer that a checkpoint's transfers pay for: delayed ACKs and a copy.

Quick ACKs (``quick_acks``). A server with Nagle's algorithm on (Ceph RGW's beast frontend by
default) sends a response's headers and a small body in two writes, and holds the second until
the first is acknowledged; Linux delays that ACK by up to 40 ms on a request-response
connection. Every LIST and every small GET (a manifest) then took 45 ms on RGW instead of 4.
The client's connections ask for a quick ACK (``TCP_QUICKACK``) each time they wait for a
response, so the server's second write leaves at once. Linux only; elsewhere nothing changes.

Direct reads (``readinto``). urllib3's ``readinto`` reads a new ``bytes`` object of the size
asked for and copies it into the caller's buffer: a second copy of every byte a restore
downloads, into fresh memory. Where the body is the plain ``http.client`` response underneath
(no content encoding), this reads from the socket straight into the caller's buffer and keeps
urllib3's count of the bytes read, so the connection goes back to the pool when the body ends.
"""
from __future__ import annotations

import http.client
import socket

from botocore import awsrequest

QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def _ask_quick_ack(sock) -> None:
    if QUICKACK is not None and sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
        except OSError:
            pass  # not TCP (a test's stand-in): nothing to ask


class QuickAckHTTPConnection(awsrequest.AWSHTTPConnection):
    def getresponse(self, *args, **kwargs):
        _ask_quick_ack(self.sock)
        return super().getresponse(*args, **kwargs)


class QuickAckHTTPSConnection(awsrequest.AWSHTTPSConnection):
    def getresponse(self, *args, **kwargs):
        _ask_quick_ack(self.sock)
        return super().getresponse(*args, **kwargs)


class QuickAckHTTPConnectionPool(awsrequest.AWSHTTPConnectionPool):
    ConnectionCls = QuickAckHTTPConnection


class QuickAckHTTPSConnectionPool(awsrequest.AWSHTTPSConnectionPool):
    ConnectionCls = QuickAckHTTPSConnection


def quick_acks(client) -> bool:
    """Make ``client``'s connections ask for quick ACKs; False where its HTTP session is not
    botocore's urllib3 one (nothing changed: requests work as before, small ones slower)."""
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    classes = getattr(session, "_pool_classes_by_scheme", None)
    if QUICKACK is None or not isinstance(classes, dict):
        return False
    # the session's pool managers share this dict: pools made from now on use these classes
    classes.update(http=QuickAckHTTPConnectionPool, https=QuickAckHTTPSConnectionPool)
    return True


def _plain_response(body):
    """(urllib3 response, http.client response) under a botocore body when its bytes can be read
    straight from the socket (no content decoding, nothing buffered above the socket); else None."""
    raw = getattr(body, "_raw_stream", None)
    fp = getattr(raw, "_fp", None)
    if not isinstance(fp, http.client.HTTPResponse) or getattr(raw, "_decoder", None) is not None:
        return None
    if raw.headers.get("content-encoding", "identity").lower() != "identity":
        return None
    if len(getattr(raw, "_decoded_buffer", ())) or not hasattr(raw, "_fp_bytes_read"):
        return None
    return raw, fp


def readinto(body, view: memoryview) -> int:
    """Read the next bytes of a GET's ``body`` (a botocore StreamingBody) into ``view``: straight
    from the socket where it can (``_plain_response``), else through botocore. 0 at the end."""
    plain = _plain_response(body)
    if plain is None:
        return body.readinto(view) or 0
    raw, fp = plain
    n = fp.readinto(view) if not fp.isclosed() else 0
    raw._fp_bytes_read += n
    if raw.length_remaining is not None:
        raw.length_remaining -= n
    if n == 0 and len(view) and raw.length_remaining:
        raise http.client.IncompleteRead(b"", raw.length_remaining)
    return n


def finish(body) -> None:
    """Done with ``body``: its connection back to the pool when every byte was read, else closed."""
    raw = getattr(body, "_raw_stream", None)
    fp = getattr(raw, "_fp", None)
    if isinstance(fp, http.client.HTTPResponse) and fp.isclosed() and raw.length_remaining == 0:
        raw.release_conn()
        return
    body.close()
