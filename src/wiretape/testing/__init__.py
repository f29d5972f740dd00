"""A scripted fake model provider for tests, on real sockets on 127.0.0.1.

This package owns the *script* (an ordered list of turns the fake model plays),
the providers' wire formats for those turns, and a small asyncio + h11 server
that serves them. It speaks:

    endpoint (path suffix)          wire format                           turn
    POST .../chat/completions       OpenAI chat completions, JSON or SSE  consumed
    POST .../responses              OpenAI Responses, JSON or SSE         consumed
    POST .../messages               Anthropic messages, JSON or SSE       consumed
    POST .../models/M:generateContent        Gemini, JSON                 consumed
    POST .../models/M:streamGenerateContent  Gemini, SSE (``alt=sse``)    consumed
    GET .../responses + Upgrade:    Responses over WebSocket: one text     consumed
      websocket                     message per event, per response.create
    GET .../realtime + Upgrade:     the Realtime API's text events         consumed
      websocket                     (session.update, conversation.item.create,
                                    response.create -> deltas, response.done)
    POST .../embeddings             OpenAI embeddings, vectors derived    none
                                    from the input alone
    POST .../models/M:countTokens   Gemini token count, from the size     none

Any prefix before the suffix is accepted (``/v1/messages``, ``/messages``,
``/api/v1/chat/completions``, ``/v1beta/models/gemini-2.5-flash:countTokens``);
anything else gets a 404 in OpenAI's error shape. OpenAI and Anthropic
stream when the body asks (``"stream": true``), Gemini by its path. Streams
are written one SSE event per HTTP chunk, with ``delay`` seconds between
events, so a proxy that buffers can be caught.

A model may have a script of its own (``models={"fake-fixer": [...]}``): a
request naming it (its ``model`` member, or Gemini's path) plays that
script; :func:`fork_models` holds two for forks of the demo agent.

Every id and timestamp is derived from the 1-based turn number (turn 3:
``chatcmpl-fake-0003``, ``resp_fake_0003``, ``msg_fake_0003``,
``fake-gemini-0003``; its first call ``call_fake_3_0``, ``fc_fake_3_0``,
``toolu_fake_3_0``; a Gemini ``functionCall`` has no id, as the Gemini API
sends none), ``created`` is always :data:`CREATED` and responses carry no
``date`` header, so two runs of the same script with the same requests
produce byte-identical responses.

It must not know about recording, run files, matching or replay: it plays the
part of an origin, and nothing in wiretape depends on it.

Its modules, each importing only those above it:

    script               turns, tool calls, the JSON form of a script, ScriptError
    wire                 Reply and Answer, JSON/SSE encoding, deltas, error shapes
    openai_chat          chat completions          \\
    openai_responses     Responses                  | a turn (or an input) as bytes
    anthropic_messages   messages                   |
    gemini_generate      generateContent, countTokens
    openai_embeddings    embeddings                /
    playbook             routes, the script being played, ReceivedRequest
    openai_realtime      the Realtime API's event flow, played on the script
    openai_responses_ws  the WebSocket shell: Responses and Realtime sessions
    server               the asyncio + h11 shell: AsyncFakeProvider, FakeProvider
    cli                  ``python -m wiretape.testing`` (``__main__`` calls it)

Use it in a test::

    script = [
        ToolCallTurn([ToolCall("add", {"a": 2, "b": 3})]),
        TextTurn("The sum is 5.", expect="5"),
    ]
    with FakeProvider(script) as fp:
        client = openai.OpenAI(base_url=fp.url + "/v1", api_key="test")
        ...
    assert len(fp.requests) == 2

or as a process (``--script`` defaults to :func:`demo_script`)::

    python -m wiretape.testing --port 8765 --script script.json
    listening http://127.0.0.1:8765
"""

from wiretape.testing.cli import main
from wiretape.testing.openai_embeddings import EMBEDDING_DIMENSIONS
from wiretape.testing.playbook import ReceivedRequest
from wiretape.testing.script import (
    FIXER_MODEL,
    IDLE_MODEL,
    ScriptError,
    TextTurn,
    ToolCall,
    ToolCallTurn,
    Turn,
    demo_script,
    fork_models,
    load_script,
    script_from_json,
    script_to_json,
)
from wiretape.testing.server import DEFAULT_DELAY, AsyncFakeProvider, FakeProvider
from wiretape.testing.wire import CREATED

__all__ = [
    "CREATED",
    "DEFAULT_DELAY",
    "EMBEDDING_DIMENSIONS",
    "FIXER_MODEL",
    "IDLE_MODEL",
    "AsyncFakeProvider",
    "FakeProvider",
    "ReceivedRequest",
    "ScriptError",
    "TextTurn",
    "ToolCall",
    "ToolCallTurn",
    "Turn",
    "demo_script",
    "fork_models",
    "load_script",
    "main",
    "script_from_json",
    "script_to_json",
]
