"""Time to explain a divergence between two 1 MB request bodies, against
parsing them, measured in the same run.

Bodies are OpenAI chat requests of about 1 MB (a long conversation with
tool calls and results, some non-ASCII text). Cases:

  few fields       the same conversation with 3 values changed (a number in
                   a user message, a timestamp in a tool result, text added
                   to the last message)
  few, pretty      the same, both bodies written with indent=2
  fully different  another conversation of the same size

The baseline is ``json.loads`` of both bodies (what any JSON-aware
comparison pays at least). The two alternate, run by run; prints the
median of each and the median of their ratios. The budget for "few
fields" is 100 ms.

Usage: python bench/explain.py [--repeat N] [--size BYTES]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
from collections.abc import Callable

from wiretape.matching import explain
from wiretape.model import Request

HEADERS = ((b"Content-Type", b"application/json"),)


def conversation(size: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "délta", "ε", "read", "file", "2026", "/home/u/x"]
    messages: list[dict[str, object]] = [{"role": "system", "content": "You are an agent."}]
    grown, i = 0, 0
    while grown < size:
        text = " ".join(rng.choice(words) for _ in range(60))
        call = f"call_{rng.getrandbits(96):024x}"
        turn: list[dict[str, object]] = [
            {"role": "user", "content": f"step {i}: {text}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"/w/{i}.txt"}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call,
                "content": f"at 2026-11-29T10:{i % 60:02d}:00Z {text}",
            },
        ]
        messages += turn
        grown += len(json.dumps(turn, ensure_ascii=False).encode())
        i += 1
    return {"model": "gpt-4o", "messages": messages, "temperature": 0.2}


def few_fields(value: dict[str, object]) -> dict[str, object]:
    changed = copy.deepcopy(value)
    messages = changed["messages"]
    assert isinstance(messages, list)
    messages[100]["content"] = messages[100]["content"].replace("step 33:", "step 34:")
    tool = len(messages) // 2 // 3 * 3  # a tool message in the middle
    messages[tool]["content"] = messages[tool]["content"].replace("T10:", "T11:")
    messages[-1]["content"] += " (edited)"
    return changed


def encode(value: object, indent: int | None = None) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=indent).encode()


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--size", type=int, default=1_000_000)
    args = parser.parse_args()

    base = conversation(args.size, seed=1)
    changed = few_fields(base)
    cases = {
        "few fields": (encode(base), encode(changed)),
        "few, pretty": (encode(base, 2), encode(changed, 2)),
        "fully different": (encode(base), encode(conversation(args.size, seed=2))),
    }
    print(
        f"explain(recorded, live), median of {args.repeat} runs; "
        "baseline = json.loads of both bodies; x = explain / baseline"
    )
    for name, (recorded, live) in cases.items():
        measure(name, recorded, live, args.repeat)


def measure(name: str, recorded: bytes, live: bytes, repeat: int) -> None:
    """Baseline and explain alternate, so a noisy neighbour slows both."""
    target = b"/v1/chat/completions"
    rec, liv = Request(b"POST", target, HEADERS, recorded), Request(b"POST", target, HEADERS, live)
    result = explain(rec, liv)  # warm up
    baselines, took = [], []
    for _ in range(repeat):
        baselines.append(timed(lambda: (json.loads(recorded), json.loads(live))))
        took.append(timed(lambda: explain(rec, liv)))
    ratio = statistics.median(t / b for t, b in zip(took, baselines, strict=True))
    capped = "+" if result.edit_distance_capped else ""
    took_ms, baseline_ms = statistics.median(took), statistics.median(baselines)
    print(
        f"  {name:16s} {len(recorded) / 1e6:4.2f}/{len(live) / 1e6:4.2f} MB  "
        f"explain {took_ms:6.1f} ms   baseline {baseline_ms:5.1f} ms"
        f"   x{ratio:5.2f}   spans {len(result.spans)}+{result.spans_omitted}"
        f"   edit distance {result.edit_distance}{capped}"
    )


if __name__ == "__main__":
    main()
