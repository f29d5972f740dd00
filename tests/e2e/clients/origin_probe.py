"""Ask one client library one question with its defaults, so that the only
thing telling it where the provider is, is one environment variable.

usage: origin_probe.py LIBRARY VARIABLE [--drop OTHER ...]

Every ``--drop`` variable is removed from the environment before the library
is imported, so a library that answers proves it read VARIABLE. Prints one
JSON line: the library, the variable and its value, and the answer's text.
"""

from __future__ import annotations

import json
import os
import sys

PROMPT = "Say hello."


def openai_sdk() -> str:
    import openai

    client = openai.OpenAI()
    completion = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}])
    return completion.choices[0].message.content or ""


def anthropic_sdk() -> str:
    import anthropic

    client = anthropic.Anthropic()
    message = client.messages.create(
        model="messages-test-model", max_tokens=64, messages=[{"role": "user", "content": PROMPT}])
    return "".join(block.text for block in message.content if block.type == "text")


def litellm_sdk() -> str:
    import litellm

    response = litellm.completion(model="openai/gpt-4o-mini",
                                  messages=[{"role": "user", "content": PROMPT}])
    return response.choices[0].message.content or ""


def google_genai_sdk() -> str:
    from google import genai

    client = genai.Client()
    response = client.models.generate_content(model="gemini-2.0-flash", contents=PROMPT)
    return response.text or ""


LIBRARIES = {
    "openai": openai_sdk,
    "anthropic": anthropic_sdk,
    "litellm": litellm_sdk,
    "google-genai": google_genai_sdk,
}


def main() -> None:
    library, variable, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    drop = [rest[i + 1] for i, arg in enumerate(rest) if arg == "--drop"]
    for name in drop:
        os.environ.pop(name, None)
    value = os.environ.get(variable)
    text = LIBRARIES[library]()
    print(json.dumps({"library": library, "variable": variable, "value": value,
                      "dropped": sorted(drop), "text": text}, sort_keys=True))


if __name__ == "__main__":
    main()
