"""The OpenAI Realtime API's text event flow, as the fake provider speaks it.

``GET .../realtime?model=M`` with ``Upgrade: websocket`` opens a session
(https://platform.openai.com/docs/api-reference/realtime-server-events).
The server sends ``session.created`` at once; ``session.update`` is answered
by ``session.updated`` (the session's settings merged); each
``conversation.item.create`` adds its item to the conversation (a user
message, a ``function_call_output``) and is answered by
``conversation.item.added``; each ``response.create`` plays the next turn
of the script on the conversation as a Responses request would, streamed
as Realtime events: ``response.created``, the output items' events
(``response.output_text.delta``, ``response.function_call_arguments.delta``
..., ``response.function_call_arguments.done`` with the ``call_id`` and
``name`` of its call), and ``response.done`` with the completed response. The function
calls a response makes join the conversation. Anything else gets an
``error`` event. Every event has an ``event_id`` made from its number.

It must not know about recording or replay.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from wiretape.testing.playbook import ReceivedRequest
from wiretape.testing.wire import Reply

#: What a session asks of the playbook: (method, target, headers, body) to the reply.
Answer = Callable[[str, str, tuple[tuple[bytes, bytes], ...], bytes],
                  tuple[ReceivedRequest, Reply]]


def is_realtime(target: str) -> bool:
    """Whether ``target``'s path is the Realtime endpoint (ends in ``/realtime``)."""
    return target.split("?", 1)[0].rstrip("/").endswith("/realtime")


def _dump(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode("utf-8")


class RealtimeSession:
    """One Realtime session's state: its settings and conversation.
    ``target`` is the upgrade's request-target (its ``model`` query names
    the model); ``answer`` plays script turns."""

    def __init__(self, target: str, headers: tuple[tuple[bytes, bytes], ...],
                 answer: Answer) -> None:
        path, _, query = target.partition("?")
        self._responses = path.rstrip("/").removesuffix("/realtime") + "/responses"
        self._headers = headers
        self._answer = answer
        model = parse_qs(query).get("model", ["gpt-realtime"])[0]
        self._session: dict[str, Any] = {
            "id": "sess_fake_0001", "object": "realtime.session", "type": "realtime",
            "model": model, "output_modalities": ["text"], "instructions": "",
            "tools": [], "tool_choice": "auto"}
        self._items: list[dict[str, Any]] = []
        self._events = 0

    def _event(self, kind: str, **body: Any) -> bytes:
        self._events += 1
        return _dump({"type": kind, "event_id": f"event_fake_{self._events:04d}", **body})

    def opening(self) -> list[bytes]:
        """What the server sends as soon as the session is open."""
        return [self._event("session.created", session=dict(self._session))]

    def receive(self, text: bytes) -> list[bytes]:
        """The events answering one client event."""
        try:
            event = json.loads(text)
        except ValueError:
            event = None
        kind = event.get("type") if isinstance(event, dict) else None
        if isinstance(event, dict) and kind == "session.update":
            update = event.get("session")
            if isinstance(update, dict):
                self._session.update(update)
            return [self._event("session.updated", session=dict(self._session))]
        if isinstance(event, dict) and kind == "conversation.item.create":
            item = event.get("item")
            if not isinstance(item, dict):
                return [self._error("conversation.item.create needs an item")]
            item = {"id": f"item_fake_{len(self._items) + 1:04d}", **item}
            self._items.append(item)
            return [self._event("conversation.item.added", item=item)]
        if kind == "response.create":
            return self._respond()
        return [self._error(f"wiretape fake provider: no Realtime event "
                            f"{kind if isinstance(kind, str) else '(not an event)'}")]

    def _error(self, message: str) -> bytes:
        return self._event("error", error={"type": "invalid_request_error", "message": message})

    def _respond(self) -> list[bytes]:
        inputs = [{k: v for k, v in item.items() if k != "id"} for item in self._items]
        body = {"model": self._session["model"], "input": inputs, "stream": True,
                "instructions": self._session.get("instructions") or None,
                "tools": self._session.get("tools", [])}
        _, reply = self._answer("POST", self._responses, self._headers,
                                json.dumps(body).encode("utf-8"))
        if not reply.streamed:
            error = json.loads(b"".join(reply.chunks)).get("error")
            return [self._event("error", error=error)]
        out = []
        response_id = ""
        call_ids: dict[object, str] = {}  # output item id -> its call id
        for chunk in reply.chunks:
            data = next((line[6:] for line in chunk.split(b"\n") if line.startswith(b"data: ")),
                        None)
            if data is None:
                continue
            event = json.loads(data)
            kind = event.pop("type")
            event.pop("sequence_number", None)
            if kind == "response.in_progress":
                continue
            if "response" in event:
                event["response"] = self._realtime_response(event["response"])
                response_id = event["response"]["id"]
            else:
                event["response_id"] = response_id
            item = event.get("item")
            if isinstance(item, dict) and item.get("call_id"):
                call_ids[item.get("id")] = item["call_id"]
            if kind == "response.function_call_arguments.done":
                # The Realtime event names the call it ends (its call_id),
                # which the Responses stream's does not.
                event["call_id"] = call_ids.get(event.get("item_id"), "")
            if kind == "response.completed":
                kind = "response.done"
                for item in event["response"]["output"]:
                    if item.get("type") == "function_call":
                        self._items.append(item)
            out.append(self._event(kind, **event))
        return out

    @staticmethod
    def _realtime_response(response: dict[str, Any]) -> dict[str, Any]:
        """A Responses object as a Realtime response."""
        return {"id": response["id"], "object": "realtime.response",
                "status": response["status"], "output": response["output"],
                "usage": response.get("usage"), "output_modalities": ["text"]}
