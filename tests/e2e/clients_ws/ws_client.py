"""A raw ``websockets`` client of the Responses API's WebSocket mode.

Reads ``OPENAI_BASE_URL`` (as ``wiretape record``/``replay`` set it), opens
``GET {base}/responses`` with Upgrade: websocket, and for each prompt on the
command line sends one ``response.create`` event and reads the events until
``response.completed`` (or an error). Prints ``WS {json}`` with what it saw:
the event types, the text, the function calls, and how the session closed.

Options: ``--drop`` leaves without a close handshake (the socket is cut);
``--path P`` opens P instead of ``/responses``; ``--key-in-message`` puts
``OPENAI_API_KEY`` in each event too (as a Realtime ``session.update`` may);
``--fresh`` stamps each event as Codex does, with values of this run's own
making: ``metadata`` with a ``session_id`` (a UUID for the whole run), a
``request_id`` (a new UUID per event) and ``sent_at`` (the clock, RFC 3339);
``--embed-first`` first POSTs ``{base}/embeddings`` over HTTP with that
session id as its ``user``; ``--split-session`` gives the events another
session id than the HTTP request had.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
import urllib.request
import uuid

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus


async def main(argv: list[str]) -> int:
    drop = "--drop" in argv
    keyed = "--key-in-message" in argv
    fresh = "--fresh" in argv
    session = str(uuid.uuid4())
    flags = ("--drop", "--key-in-message", "--fresh", "--embed-first", "--split-session")
    embed, split = "--embed-first" in argv, "--split-session" in argv
    argv = [a for a in argv if a not in flags]
    path = "/responses"
    if "--path" in argv:
        at = argv.index("--path")
        path = argv[at + 1]
        del argv[at : at + 2]
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    if embed:
        body = json.dumps({"model": "text-embedding-3-small", "input": "hello",
                           "user": session}).encode()
        post = urllib.request.Request(base + "/embeddings", body, {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"})
        with urllib.request.urlopen(post, timeout=20) as answer:
            answer.read()
    if split:
        session = str(uuid.uuid4())
    url = base.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + path
    seen: dict[str, object] = {"types": [], "text": "", "calls": [], "close": None}
    types: list[str] = seen["types"]  # type: ignore[assignment]
    calls: list[object] = seen["calls"]  # type: ignore[assignment]
    try:
        ws = await connect(url, additional_headers={
            "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}",
            "OpenAI-Beta": "responses_websockets=2026-02-06"}, open_timeout=20,
            compression=None)
    except InvalidStatus as exc:
        seen["refused"] = exc.response.status_code
        print("WS " + json.dumps(seen), flush=True)
        return 0
    try:
        for prompt in argv:
            event = {"type": "response.create", "model": "gpt-test",
                     "input": [{"role": "user", "content": prompt}]}
            if keyed:
                event["client_secret"] = os.environ.get("OPENAI_API_KEY", "")
            if fresh:
                event["metadata"] = {"session_id": session, "request_id": str(uuid.uuid4()),
                                     "sent_at": dt.datetime.now(dt.UTC).isoformat()}
            await ws.send(json.dumps(event))
            while True:
                event = json.loads(await ws.recv())
                types.append(event["type"])
                if event["type"] == "response.output_text.delta":
                    seen["text"] = str(seen["text"]) + event["delta"]
                elif (event["type"] == "response.output_item.done"
                      and event["item"]["type"] == "function_call"):
                    calls.append([event["item"]["name"], event["item"]["arguments"]])
                if event["type"] in ("response.completed", "error"):
                    break
        if drop:
            ws.transport.abort()
        else:
            await ws.close(1000, "done")
            seen["close"] = [ws.close_code, ws.close_reason]
    except ConnectionClosed as exc:
        rcvd = exc.rcvd
        seen["close"] = [rcvd.code, rcvd.reason] if rcvd is not None else ["no close frame"]
    print("WS " + json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
