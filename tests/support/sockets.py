"""Talking HTTP/1.1 over a bare socket, to see a reply as framed on the wire."""

from __future__ import annotations

import json
import socket
from typing import Any


def raw_exchange(url: str, path: str, body: Any) -> tuple[bytes, list[bytes]]:
    """POST over a bare socket; the response head and its body chunks as framed on the wire."""
    port = int(url.rsplit(":", 1)[1])
    payload = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: "
            + str(len(payload)).encode()
            + b"\r\n\r\n"
            + payload
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return head, [rest]
    chunks: list[bytes] = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return head, chunks
        chunks.append(rest[:size])
        rest = rest[size + 2 :]
