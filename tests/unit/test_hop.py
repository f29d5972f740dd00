"""Hop-by-hop handling and framing (RFC 9110 §7.6.1, RFC 9112 §6.3)."""

from __future__ import annotations

from wiretape.proxy.hop import Framing, client_head, upstream_request_headers


def test_upstream_headers_drop_hop_by_hop_and_connection_listed() -> None:
    headers = ((b"Host", b"127.0.0.1:1"), (b"Connection", b"keep-alive, X-Foo"), (b"X-Foo", b"1"),
               (b"Keep-Alive", b"timeout=5"), (b"TE", b"trailers"), (b"Expect", b"100-continue"),
               (b"Authorization", b"Bearer k"), (b"X-Bar", b"2"))
    assert upstream_request_headers(headers, b"api.example.com") == (
        (b"Host", b"api.example.com"), (b"Authorization", b"Bearer k"), (b"X-Bar", b"2"))



def test_upstream_headers_say_the_bodys_own_length_once_in_place() -> None:
    headers = ((b"Host", b"h"), (b"content-length", b"99"), (b"X-A", b"1"),
               (b"Content-Length", b"99"))
    assert upstream_request_headers(headers, b"o", body_length=5) == (
        (b"Host", b"o"), (b"content-length", b"5"), (b"X-A", b"1"))
    # without a length given (or none in the request) nothing is added
    assert upstream_request_headers(headers[2:3], b"o", body_length=5) == (
        (b"Host", b"o"), (b"X-A", b"1"))

def test_chunked_response_keeps_order_and_case_in_place() -> None:
    headers = ((b"Date", b"d"), (b"Transfer-Encoding", b"chunked"), (b"Connection", b"keep-alive"),
               (b"x-request-id", b"r"), (b"Keep-Alive", b"timeout=5"))
    head = client_head(200, b"OK", headers, method=b"POST", keep_alive=True)
    assert head.framing is Framing.CHUNKED and head.keep_alive
    assert head.headers == headers[:4]
    assert head.dropped == ("Keep-Alive",)
    assert head.encode().startswith(b"HTTP/1.1 200 OK\r\nDate: d\r\nTransfer-Encoding: chunked\r\n")


def test_te_overrides_content_length() -> None:
    head = client_head(200, b"OK", ((b"Content-Length", b"5"), (b"Transfer-Encoding", b"chunked")),
                       method=b"GET", keep_alive=True)
    assert head.framing is Framing.CHUNKED and head.dropped == ("Content-Length",)


def test_no_length_means_close_delimited() -> None:
    head = client_head(
        200, b"OK", ((b"Content-Type", b"text/plain"),), method=b"GET", keep_alive=True
    )
    assert head.framing is Framing.CLOSE and not head.keep_alive
    assert head.headers[-1] == (b"Connection", b"close")


def test_head_and_204_have_no_body() -> None:
    assert client_head(204, b"", (), method=b"GET", keep_alive=True).framing is Framing.NONE
    assert client_head(200, b"OK", ((b"Content-Length", b"9"),), method=b"HEAD",
                       keep_alive=True).framing is Framing.NONE
