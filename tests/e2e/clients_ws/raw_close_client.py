"""A WebSocket client over a raw socket that leaves a closing handshake
unfinished, through the ``websockets`` library's sans-I/O client protocol.

Reads ``OPENAI_BASE_URL`` (as ``wiretape record``/``replay`` set it), opens
``GET {base}/realtime`` and sends one text message, ``hello``. Then:

* ``--silent``: reads until the end of the stream, and never answers a
  close: the connection stays open, nothing sent, until the other end
  closes it;
* ``--close``: once a message came back, sends a close (1000, ``done``),
  reads until the end of the stream, and then, given ``--wait-for FILE``,
  stays until that file exists (an origin's sign that its connection was
  closed) before it exits.

Prints ``WS {json}`` with the messages it received (``text ...``,
``close CODE REASON``) and ``"eof": true`` once the stream ended.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri


def main(argv: list[str]) -> int:
    mode = argv[0]
    wait_for = Path(argv[argv.index("--wait-for") + 1]) if "--wait-for" in argv else None
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    url = base.replace("http://", "ws://", 1) + "/realtime"
    uri = parse_uri(url)
    proto = ClientProtocol(uri)
    request = proto.connect()
    request.headers["Authorization"] = f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"
    proto.send_request(request)
    sock = socket.create_connection((uri.host, uri.port), timeout=120)
    seen: dict[str, object] = {"received": [], "eof": False}
    received: list[str] = seen["received"]  # type: ignore[assignment]

    def send() -> None:
        for data in proto.data_to_send():
            if data:
                sock.sendall(data)

    send()
    sent_close = False
    while True:
        data = sock.recv(65536)
        if not data:
            seen["eof"] = True
            break
        proto.receive_data(data)
        for event in proto.events_received():
            if isinstance(event, Response):
                if event.status_code != 101:
                    seen["refused"] = event.status_code
                    print("WS " + json.dumps(seen), flush=True)
                    return 0
                proto.send_text(b"hello")
            elif isinstance(event, Frame):
                if event.opcode is Opcode.TEXT:
                    received.append(f"text {event.data.decode()}")
                    if mode == "--close" and not sent_close:
                        proto.send_close(1000, "done")
                        sent_close = True
                elif event.opcode is Opcode.CLOSE:
                    close = Close.parse(event.data)
                    received.append(f"close {close.code} {close.reason}")
        if mode == "--silent" and proto.close_rcvd is not None:
            proto.data_to_send()  # the answer to the close, never sent
        else:
            send()
    if wait_for is not None:
        deadline = time.monotonic() + 120
        while not wait_for.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    sock.close()
    print("WS " + json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
