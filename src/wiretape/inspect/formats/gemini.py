"""Gemini ``generateContent`` and ``streamGenerateContent``
(ai.google.dev/api/generate-content): one JSON document, SSE with
``alt=sse``, or without it a JSON array sent element by element. Each
document has ``candidates[].content.parts[]``: ``text`` (reasoning when
``thought`` is true), ``functionCall`` (a tool call, usually without id),
``executableCode`` and the like; ``finishReason`` (a name, or a number with
``enum-encoding=int``) and ``usageMetadata``. Knows nothing of other formats.
"""

from __future__ import annotations

from wiretape.inspect.formats.draft import Draft, complete_calls, get, integer, text
from wiretape.inspect.formats.events import Event
from wiretape.inspect.formats.view import Usage

#: google.ai.generativelanguage.v1beta.Candidate.FinishReason, by number.
FINISH_REASONS = {0: "FINISH_REASON_UNSPECIFIED", 1: "STOP", 2: "MAX_TOKENS", 3: "SAFETY",
                  4: "RECITATION", 5: "OTHER", 6: "BLOCKLIST", 7: "PROHIBITED_CONTENT",
                  8: "SPII", 9: "MALFORMED_FUNCTION_CALL", 10: "LANGUAGE"}
_QUIET_PARTS = frozenset({"functionCall", "executableCode", "codeExecutionResult",
                          "inlineData", "fileData", "thoughtSignature", "functionResponse"})


def _usage(document: object) -> Usage | None:
    meta = get(document, "usageMetadata")
    if not isinstance(meta, dict):
        return None
    return Usage(integer(meta, "promptTokenCount"), integer(meta, "candidatesTokenCount"),
                 integer(meta, "totalTokenCount"), integer(meta, "thoughtsTokenCount"))


def _candidate(draft: Draft, candidate: object) -> None:
    parts = get(candidate, "content", "parts")
    for part in parts if isinstance(parts, list) else ():
        value = text(part, "text")
        if value is not None:
            (draft.reasoning if get(part, "thought") is True else draft.text).append(value)
        elif isinstance(part, dict) and not _QUIET_PARTS.intersection(part):
            draft.unknown["part " + ",".join(sorted(part))[:60]] += 1
    reason = get(candidate, "finishReason")
    if isinstance(reason, int):
        reason = FINISH_REASONS.get(reason, str(reason))
    if isinstance(reason, str) and reason:
        draft.stop_reason = reason


def read(draft: Draft, events: tuple[Event, ...]) -> None:
    for event in events:
        draft.events += 1
        doc = event.data
        if isinstance(doc, dict) and "error" in doc:
            draft.error(doc)
            continue
        if not isinstance(doc, dict) or not ("candidates" in doc or "usageMetadata" in doc
                                             or "promptFeedback" in doc):
            draft.unknown[event.name or "document without candidates"] += 1
            continue
        draft.set_model(get(doc, "modelVersion"))
        candidates = get(doc, "candidates")
        if isinstance(candidates, list) and candidates:
            _candidate(draft, candidates[0])
        blocked = text(doc, "promptFeedback", "blockReason")
        if blocked:
            draft.stop_reason = f"prompt blocked: {blocked}"
        # A call arrives whole in one document (ai.google.dev/api/caching#FunctionCall).
        draft.add_whole_calls(complete_calls(doc))
        draft.usage = _usage(doc) or draft.usage
