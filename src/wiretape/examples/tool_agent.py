"""An example agent: a tool loop over streaming OpenAI chat completions.

It owns two tools (``read_file`` from a small bundled workspace, ``add`` two
numbers; with ``--write`` a third, ``write_file``) and the loop that runs
them until the model answers in text. It must
not know about wiretape: it is the program under test in the demo and the
end-to-end tests, and talks to its provider through the real ``openai`` SDK
built with ``OpenAI()``, so ``OPENAI_BASE_URL`` decides where requests go and
``OPENAI_API_KEY`` (a dummy when unset) is sent along.

    python -m wiretape.examples.tool_agent "How many pieces of fruit are in inventory.txt?"

The final answer goes to stdout, one line per tool call to stderr. Tool
results are deterministic: file text, or an error naming the path as the
model gave it, never an absolute path. Exit status: 0 answered, 1 no answer
within the step limit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from openai import OpenAI
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCallParam,
    ChatCompletionToolParam,
)

WORKSPACE = Path(__file__).resolve().parent / "workspace"
DEFAULT_QUESTION = "How many pieces of fruit are listed in inventory.txt?"
DEFAULT_MODEL = "gpt-4o-mini"
MAX_STEPS = 8
SYSTEM_PROMPT = (
    "You answer questions about the files in a small workspace. Use read_file to read a "
    "file (paths are relative to the workspace) and add to add two numbers; never guess "
    "a number you can compute. Answer in one sentence."
)

__all__ = ["DEFAULT_QUESTION", "WORKSPACE", "AgentGaveUp", "main", "run_agent"]


class AgentGaveUp(Exception):
    """The model asked for tools ``steps`` times without answering."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        super().__init__(f"no answer after {steps} model calls")


# --- tools -------------------------------------------------------------------------------


def read_file(arguments: Mapping[str, object], workspace: Path) -> str:
    """The text of ``arguments["path"]``, resolved against ``workspace`` and kept inside it."""
    given, path = _inside(arguments, workspace)
    if path is None:
        return f"error: {given!r} is outside the workspace"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"error: no file {given!r} in the workspace"
    except (OSError, UnicodeDecodeError):
        return f"error: {given!r} is not a readable text file"


def add(arguments: Mapping[str, object], workspace: Path) -> str:
    """``a + b`` as JSON (``42``, ``4.5``); an error when either is not a number."""
    a, b = arguments.get("a"), arguments.get("b")
    if not (_is_number(a) and _is_number(b)):
        return "error: add needs two numbers 'a' and 'b'"
    return json.dumps(a + b)


def write_file(arguments: Mapping[str, object], workspace: Path) -> str:
    """Write ``arguments["content"]`` to ``arguments["path"]`` inside ``workspace``."""
    given, path = _inside(arguments, workspace)
    if path is None:
        return f"error: {given!r} is outside the workspace"
    try:
        path.write_text(str(arguments.get("content", "")), encoding="utf-8")
    except OSError:
        return f"error: cannot write {given!r}"
    return f"wrote {given}"


def _inside(arguments: Mapping[str, object], workspace: Path) -> tuple[str, Path | None]:
    """``arguments["path"]`` as given, and resolved against ``workspace``
    (None when it lies outside it)."""
    given = str(arguments.get("path", ""))
    root = workspace.resolve()
    path = (root / given).resolve()
    return given, path if path.is_relative_to(root) else None


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its JSON schema and the function that runs it."""

    name: str
    description: str
    parameters: Mapping[str, object]
    run: Callable[[Mapping[str, object], Path], str]

    def schema(self) -> ChatCompletionToolParam:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "read_file",
            "Read a text file from the workspace.",
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "relative to the workspace"}
                },
                "required": ["path"],
            },
            read_file,
        ),
        Tool(
            "add",
            "Add two numbers.",
            {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
            add,
        ),
    )
}


#: Offered only with ``--write``: a tool that changes the workspace.
WRITE_TOOL = Tool(
    "write_file",
    "Write a text file in the workspace (replacing it).",
    {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
    write_file,
)


def run_tool(name: str, arguments_json: str, workspace: Path,
             tools: Mapping[str, Tool] = TOOLS) -> str:
    """The result text the model gets back for one call; errors are results too."""
    tool = tools.get(name)
    if tool is None:
        return f"error: there is no tool named {name!r}"
    try:
        arguments = json.loads(arguments_json or "{}")
    except ValueError:
        return f"error: the arguments of {name} are not valid JSON"
    if not isinstance(arguments, dict):
        return f"error: the arguments of {name} must be a JSON object"
    return tool.run(arguments, workspace)


# --- the loop ----------------------------------------------------------------------------


@dataclass
class _PendingCall:
    """A tool call being reassembled from streamed deltas."""

    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _ModelTurn:
    """What the model said in one streamed completion."""

    text: str = ""
    calls: list[_PendingCall] = field(default_factory=list)

    def message(self) -> ChatCompletionAssistantMessageParam:
        message: ChatCompletionAssistantMessageParam = {
            "role": "assistant",
            "content": self.text or None,
        }
        if self.calls:
            message["tool_calls"] = [_call_param(call) for call in self.calls]
        return message


def _call_param(call: _PendingCall) -> ChatCompletionMessageToolCallParam:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _complete(
    client: OpenAI, model: str, messages: Sequence[ChatCompletionMessageParam],
    tools: Mapping[str, Tool] = TOOLS,
) -> _ModelTurn:
    """One streamed completion, with tool-call deltas joined by their ``index``."""
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        tools=[tool.schema() for tool in tools.values()],
        stream=True,
        stream_options={"include_usage": True},
    )
    text: list[str] = []
    pending: dict[int, _PendingCall] = {}
    for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            for delta in choice.delta.tool_calls or []:
                call = pending.setdefault(delta.index, _PendingCall())
                call.id = delta.id or call.id
                if delta.function is not None:
                    call.name += delta.function.name or ""
                    call.arguments += delta.function.arguments or ""
    return _ModelTurn("".join(text), [pending[index] for index in sorted(pending)])


def run_agent(
    client: OpenAI,
    question: str,
    *,
    model: str = DEFAULT_MODEL,
    workspace: Path = WORKSPACE,
    log: Callable[[str], None] = lambda line: None,
    tools: Mapping[str, Tool] = TOOLS,
) -> str:
    """Ask ``question``, run the ``tools`` the model calls, and return its text answer.

    Raises :class:`AgentGaveUp` after ``MAX_STEPS`` completions without one.
    """
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    for _ in range(MAX_STEPS):
        turn = _complete(client, model, messages, tools)
        messages.append(turn.message())
        if not turn.calls:
            return turn.text
        for call in turn.calls:
            log(f"tool {call.name} {call.arguments}")
            result = run_tool(call.name, call.arguments, workspace, tools)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise AgentGaveUp(MAX_STEPS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wiretape.examples.tool_agent",
        description="Answer a question about the bundled workspace with tools, over OpenAI chat.",
        epilog='example: python -m wiretape.examples.tool_agent "How many apples are there?"',
    )
    parser.add_argument("question", nargs="?", default=DEFAULT_QUESTION)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--workspace", type=Path, default=WORKSPACE, help="directory read_file reads"
    )
    parser.add_argument(
        "--write", action="store_true", help="also offer write_file, which changes the workspace"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("OPENAI_API_KEY", "sk-wiretape-example")
    client = OpenAI()

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        answer = run_agent(
            client, args.question, model=args.model, workspace=args.workspace, log=log,
            tools={**TOOLS, WRITE_TOOL.name: WRITE_TOOL} if args.write else TOOLS,
        )
    except AgentGaveUp as exc:
        print(f"tool_agent: {exc}", file=sys.stderr)
        return 1
    print(answer, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
