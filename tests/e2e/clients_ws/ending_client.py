"""A WebSocket client (the ``websockets`` library's asyncio client) for
sessions that end abruptly.

Reads ``OPENAI_BASE_URL`` (as ``wiretape record``/``replay`` set it), opens
``GET {base}/responses`` and sends one text message, ``hello``. Then:

* ``--until-close``: reads until the session ends and prints each message
  (``got ...``), then ``close CODE REASON``; exits 0;
* ``--drop-after N``: prints the first N messages it reads, then leaves at
  once without a close handshake (``os._exit(7)``: the socket is cut);
* ``--connect``: only tries to connect, and prints ``connected`` or
  ``refused TYPE`` (a handshake the library fails); exits 0.
"""

from __future__ import annotations

import asyncio
import os
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake


async def main(argv: list[str]) -> int:
    url = os.environ["OPENAI_BASE_URL"].replace("http", "ws", 1) + "/responses"
    if argv[0] == "--connect":
        try:
            async with connect(url, open_timeout=10) as ws:
                print("connected", flush=True)
                await ws.close()
        except InvalidHandshake as exc:
            print("refused", type(exc).__name__, flush=True)
        return 0
    async with connect(url) as ws:
        await ws.send("hello")
        if argv[0] == "--drop-after":
            n = int(argv[1])
            for _ in range(n):
                print("got", await ws.recv(), flush=True)
            os._exit(7)
        try:
            async for message in ws:
                print("got", message, flush=True)
        except ConnectionClosed as exc:
            print("closed", type(exc).__name__, flush=True)
        print("close", ws.close_code, ws.close_reason, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
