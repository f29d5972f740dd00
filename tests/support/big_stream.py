"""A raw HTTP/1.1 upstream that answers every request with one long
chunked server-sent-event stream, for recording a response too large to
hold in memory. A request's ``x-size`` header sets its stream's length;
``x-gzip: 1`` asks for it coded with gzip (``Content-Encoding``), each
piece flushed so the client can decode it as it comes.

The stream's bytes are a function of its length (:func:`stream_body`), so
a test knows them without keeping a copy of what was sent. Every
``SECRET_EVERY``-th event carries an OpenAI-shaped key. With
``pause_after`` the upstream stops writing after that many body bytes
(``paused`` is set) until ``release`` is set or the client goes away.

In a test: ``with BigStream(total) as up: ... up.url``. As a script (for
a benchmark, in its own process): ``python big_stream.py TOTAL`` prints
``http://127.0.0.1:PORT`` and serves until killed.
"""

from __future__ import annotations

import hashlib
import socket
import sys
import threading
import zlib
from collections.abc import Iterator
from types import TracebackType

#: Bytes of one event (a fixed length: the stream is a function of its size).
EVENT = 128
SECRET_EVERY = 50_000
_WORDS = b"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def _event(n: int) -> bytes:
    if n % SECRET_EVERY == 7:
        key = hashlib.sha256(str(n).encode()).hexdigest()[:40]
        text = b"your key is sk-proj-" + key.encode() + b" keep it"
    else:
        start = (n * 7) % 40
        text = (_WORDS * 2)[start:start + 60]
    head = b'data: {"i":%09d,"delta":"' % n
    tail = b'"}\n\n'
    return head + text.ljust(EVENT - len(head) - len(tail), b".") + tail


def stream_body(total: int, piece: int = 64 * 1024) -> Iterator[bytes]:
    """The stream's body, ``total`` bytes, in pieces of ``piece`` bytes."""
    buf = bytearray()
    sent, n = 0, 0
    while sent < total:
        while len(buf) < piece:
            buf += _event(n)
            n += 1
        out = bytes(buf[:min(piece, total - sent)])
        del buf[:len(out)]
        sent += len(out)
        yield out


class BigStream:
    """The upstream, listening on 127.0.0.1 (an ephemeral port) in a thread."""

    def __init__(self, total: int, *, pause_after: int | None = None) -> None:
        self.total = total
        self.pause_after = pause_after
        self.paused = threading.Event()
        self.release = threading.Event()
        self.requests = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> BigStream:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release.set()
        self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while self._one(conn):
                    pass
            except OSError:
                return

    def _one(self, conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                return False
            data += more
        head, _, rest = data.partition(b"\r\n\r\n")
        length, total, gzip = 0, self.total, False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"x-size":  # this request's stream length
                total = int(value)
            elif name.strip().lower() == b"x-gzip":
                gzip = value.strip() == b"1"
        while len(rest) < length:
            more = conn.recv(65536)
            if not more:
                return False
            rest += more
        self.requests += 1
        coder = zlib.compressobj(6, zlib.DEFLATED, 31) if gzip else None
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     + (b"content-encoding: gzip\r\n" if gzip else b"")
                     + b"transfer-encoding: chunked\r\n\r\n")
        sent = 0
        for plain in stream_body(total):
            piece = (plain if coder is None
                     else coder.compress(plain) + coder.flush(zlib.Z_SYNC_FLUSH))
            if self.pause_after is not None and sent >= self.pause_after:
                self.paused.set()
                self.release.wait(120)
                return False  # cut off: the client never sees this stream end
            conn.sendall(b"%x\r\n%b\r\n" % (len(piece), piece))
            sent += len(plain)
        if coder is not None:
            last = coder.flush()
            conn.sendall(b"%x\r\n%b\r\n" % (len(last), last))
        conn.sendall(b"0\r\n\r\n")
        return True


if __name__ == "__main__":
    up = BigStream(int(sys.argv[1]))
    print(up.url, flush=True)
    up._accept()
