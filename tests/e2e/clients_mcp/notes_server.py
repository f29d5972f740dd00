"""A small stdio MCP server written by hand (MCP 2025-06-18, stdio
transport: one JSON-RPC message per line): one tool, ``read_note``, that
returns a note by name. ``--banner`` makes it print a line that is not
JSON (naming a key) on stdout as it starts, and one more before answering
``tools/list`` (a server that writes what is not a message where its
messages go, which MCP clients skip); it logs to stderr."""

from __future__ import annotations

import json
import sys

NOTES = {"launch": "The launch code is 7-ALPHA-9.", "lunch": "Soup on Tuesdays.",
         "deploy": "The deploy token is ghp_" + "R2d2C3po" * 5 + "."}
#: A key-shaped value the ``--banner`` line names (never to be stored).
BANNER_KEY = "sk-proj-" + "Q7w9E2r4T6y8U1i3O5p7" * 2
TOOL = {"name": "read_note", "description": "Read a note by name.",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}},
                        "required": ["name"]}}


def answer(message: dict[str, object]) -> dict[str, object] | None:
    method, rid = message.get("method"), message.get("id")
    if rid is None:
        return None  # a notification
    if method == "initialize":
        result: dict[str, object] = {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
            "serverInfo": {"name": "notes", "version": "1.0"}}
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        params = message.get("params")
        args = params.get("arguments", {}) if isinstance(params, dict) else {}
        name = args.get("name") if isinstance(args, dict) else None
        text = NOTES.get(str(name), f"no note named {name}")
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": rid,
                "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def main() -> None:
    banner = "--banner" in sys.argv
    print("notes server: started", file=sys.stderr, flush=True)
    if banner:
        print(f"Starting notes server v1.2 (key {BANNER_KEY})...", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line))
        if reply is None:
            continue
        result = reply.get("result")
        if banner and isinstance(result, dict) and "tools" in result:
            print("listing 1 tool", flush=True)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
