"""Which reply each request gets, and the record of what was received.

This module owns the route table (endpoint suffix -> wire format, error shape
and where the request keeps its last message), the script being played (the
turns left, consumed in arrival order behind one lock, with each turn's
``expect`` checked against the last message), and :class:`ReceivedRequest`,
one request as it was read. It must not know about sockets, HTTP framing or
the event loop: it takes a request's method, target, headers and body, and
gives back a :class:`~wiretape.testing.wire.Reply`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from wiretape.testing.anthropic_messages import messages
from wiretape.testing.gemini_generate import count_tokens, generate_content, stream_generate_content
from wiretape.testing.openai_chat import chat
from wiretape.testing.openai_embeddings import embeddings
from wiretape.testing.openai_responses import responses
from wiretape.testing.script import JSON, Turn
from wiretape.testing.wire import (
    ANTHROPIC,
    BAD_REQUEST,
    EXHAUSTED,
    GOOGLE,
    NOT_FOUND,
    OPENAI,
    Answer,
    ErrorShape,
    Reply,
    error_reply,
)


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as the fake provider read it off the socket.

    ``number`` is its 1-based arrival order; ``headers`` are raw (name, value)
    pairs in wire order and case; ``turn`` is the 1-based number of the script
    turn it consumed, or ``None`` (embeddings, errors, exhausted script).
    """

    number: int
    method: str
    target: str
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    turn: int | None = None

    def json(self) -> JSON:
        """The body parsed as JSON."""
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), decoded as latin-1."""
        wanted = name.lower().encode("latin-1")
        return next((v.decode("latin-1") for n, v in self.headers if n.lower() == wanted), None)


# routes


def _last_of(key: str) -> Callable[[Mapping[str, JSON]], JSON]:
    """The last element of list ``request[key]``, or the value itself when it is not a list."""

    def last(request: Mapping[str, JSON]) -> JSON:
        value = request.get(key)
        return value[-1] if isinstance(value, list) and value else value

    return last


@dataclass(frozen=True)
class _ScriptedRoute:
    suffix: str
    errors: ErrorShape
    last_message: Callable[[Mapping[str, JSON]], JSON]
    render: Callable[[Answer], Reply]


@dataclass(frozen=True)
class _ComputedRoute:
    suffix: str
    errors: ErrorShape
    render: Callable[[Mapping[str, JSON], int], Reply]


_ROUTES: tuple[_ScriptedRoute | _ComputedRoute, ...] = (
    _ScriptedRoute("/chat/completions", OPENAI, _last_of("messages"), chat),
    _ScriptedRoute("/responses", OPENAI, _last_of("input"), responses),
    _ScriptedRoute("/messages", ANTHROPIC, _last_of("messages"), messages),
    _ScriptedRoute(":streamGenerateContent", GOOGLE, _last_of("contents"), stream_generate_content),
    _ScriptedRoute(":generateContent", GOOGLE, _last_of("contents"), generate_content),
    _ComputedRoute("/embeddings", OPENAI, embeddings),
    _ComputedRoute(":countTokens", GOOGLE, count_tokens),
)


def _route_for(method: str, target: str) -> _ScriptedRoute | _ComputedRoute | None:
    path = target.split("?", 1)[0].rstrip("/")
    if method != "POST":
        return None
    return next((route for route in _ROUTES if path.endswith(route.suffix)), None)


# Where chat, Responses and Anthropic messages keep text, and Gemini's
# ``parts`` (a ``text``, or a ``functionResponse`` whose ``response`` holds the tool's output).
_TEXT_KEYS = ("content", "text", "output", "parts", "functionResponse", "response")


def _text_of(value: JSON) -> str:
    """The text of a message: strings under :data:`_TEXT_KEYS`, at any depth."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text_of(item) for item in value)
    if isinstance(value, dict):
        return "\n".join(_text_of(value[key]) for key in _TEXT_KEYS if key in value)
    return ""


# the script being played (thread-safe)


def _model_of(target: str, request: Mapping[str, JSON]) -> str | None:
    """The model a request asks for: its JSON ``model`` member, else the
    ``models/NAME:`` segment of its path."""
    model = request.get("model")
    if isinstance(model, str):
        return model
    path = target.split("?", 1)[0]
    if "/models/" in path and ":" in path.rsplit("/models/", 1)[1]:
        return path.rsplit("/models/", 1)[1].split(":", 1)[0]
    return None


@dataclass
class _Played:
    """A model's own script and how many of its turns were played."""

    turns: tuple[Turn, ...]
    played: int = 0


class Playbook:
    """The turns left to play and the requests received, behind one lock.

    ``models`` gives a model name its own script (played with its own turn
    count, from 1): a request asking for that model plays it, any other
    request the default ``script``. Ids and timestamps of the k-th model's
    turns are those of turn 100 k + n, so they never collide with the
    default script's in one conversation. So one provider serves "models" that
    behave differently from the same point of a conversation."""

    def __init__(self, script: Sequence[Turn],
                 models: Mapping[str, Sequence[Turn]] | None = None) -> None:
        self._turns = tuple(script)
        self._played = 0
        #: per model: its turns, and how many of them were played
        self._models = {name: _Played(tuple(turns)) for name, turns in (models or {}).items()}
        self._requests: list[ReceivedRequest] = []
        self._lock = threading.Lock()

    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._turns) - self._played

    def answer(
        self, method: str, target: str, headers: tuple[tuple[bytes, bytes], ...], body: bytes
    ) -> tuple[ReceivedRequest, Reply]:
        with self._lock:
            number = len(self._requests) + 1
            reply, turn = self._decide(method, target, body)
            request = ReceivedRequest(number, method, target, headers, body, turn)
            self._requests.append(request)
            return request, reply

    def _decide(self, method: str, target: str, body: bytes) -> tuple[Reply, int | None]:
        route = _route_for(method, target)
        if route is None:
            path = target.split("?", 1)[0]
            message = f"wiretape fake provider: no route for {method} {path}"
            return error_reply(OPENAI, NOT_FOUND, message), None
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            message = "wiretape fake provider: the request body is not a JSON object"
            return error_reply(route.errors, BAD_REQUEST, message), None
        if isinstance(route, _ComputedRoute):
            return route.render(request, len(body)), None
        own = self._models.get(_model_of(target, request) or "")
        turns, played = (own.turns, own.played) if own is not None else (self._turns,
                                                                          self._played)
        if played >= len(turns):
            message = (
                f"wiretape fake provider: script exhausted: all {len(turns)} turns were "
                f"played before this request to {target}"
            )
            return error_reply(route.errors, EXHAUSTED, message), None
        turn = turns[played]
        played += 1
        if own is not None:
            own.played = played
        else:
            self._played = played
        said = _text_of(route.last_message(request))
        if turn.expect is not None and turn.expect not in said:
            message = (
                f"wiretape fake provider: turn {played} expects the last message to contain "
                f"{turn.expect!r}, but it was {said[:200]!r}"
            )
            return error_reply(route.errors, BAD_REQUEST, message), played
        # A model's own turns number from 101 (the second model's from 201):
        # their ids never collide with the default script's in one conversation.
        number = played if own is None else played + 100 * (1 + list(self._models).index(
            next(name for name, p in self._models.items() if p is own)))
        answer = Answer(number, turn, request, len(body), target)
        return route.render(answer), played
