"""tiers/s3_wire.py without a server: a GET body read straight from a socket, over a socket pair."""
import http.client
import socket
import threading

import pytest
from botocore.response import StreamingBody
from urllib3.response import HTTPResponse

from tiers import s3_wire


def _body(payload: bytes, length: int, encoding: str | None = None):
    """A botocore body over a real http.client response whose server sends ``payload`` after
    headers that promise ``length`` bytes, then closes."""
    server, client = socket.socketpair()
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n"
    head += f"Content-Encoding: {encoding}\r\n" if encoding else ""

    def serve():
        server.sendall(head.encode() + b"\r\n" + payload)
        server.close()

    threading.Thread(target=serve, daemon=True).start()
    resp = http.client.HTTPResponse(client)
    resp.begin()
    raw = HTTPResponse(body=resp, headers=dict(resp.getheaders()), status=200, preload_content=False,
                       original_response=resp, decode_content=False)
    return StreamingBody(raw, length), client


def test_reads_straight_into_the_buffer_and_counts_them():
    payload = bytes(range(256)) * 4096
    body, sock = _body(payload, len(payload))
    buf, got = bytearray(len(payload)), 0
    view = memoryview(buf)
    while n := s3_wire.readinto(body, view[got:got + 300_000]):
        got += n
    assert buf == payload and body._raw_stream.length_remaining == 0
    assert body._raw_stream._fp_bytes_read == len(payload)  # urllib3's count kept
    sock.close()


def test_a_body_shorter_than_its_length_is_an_error():
    body, sock = _body(b"x" * 1000, 5000)
    view = memoryview(bytearray(5000))
    got = s3_wire.readinto(body, view)
    with pytest.raises(http.client.IncompleteRead):
        while True:
            n = s3_wire.readinto(body, view[got:])
            assert n, "a short body ended quietly"
            got += n
    sock.close()


def test_an_encoded_body_goes_through_urllib3():
    body, sock = _body(b"abc", 3, encoding="identity")
    assert s3_wire._plain_response(body) is not None
    body2, sock2 = _body(b"abc", 3, encoding="gzip")
    assert s3_wire._plain_response(body2) is None
    for s in (sock, sock2):
        s.close()


def test_quick_acks_replace_the_pool_classes_of_a_botocore_client():
    import boto3
    client = boto3.session.Session().client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
                                            aws_access_key_id="k", aws_secret_access_key="s")
    assert s3_wire.quick_acks(client) == (s3_wire.QUICKACK is not None)
    classes = client._endpoint.http_session._manager.pool_classes_by_scheme
    if s3_wire.QUICKACK is not None:
        assert classes["http"] is s3_wire.QuickAckHTTPConnectionPool
        assert classes["https"] is s3_wire.QuickAckHTTPSConnectionPool
