"""Run the example tool agent in this process under VCR.py, which records
its provider traffic (the real openai SDK over httpx) into a cassette.

    python vcr_record.py CASSETTE QUESTION      (OPENAI_BASE_URL points at the provider)
"""

from __future__ import annotations

import sys

import vcr

from wiretape.examples import tool_agent

if __name__ == "__main__":
    cassette, question = sys.argv[1], sys.argv[2]
    with vcr.use_cassette(cassette, record_mode="all"):
        sys.argv = ["tool_agent", question]
        tool_agent.main()
