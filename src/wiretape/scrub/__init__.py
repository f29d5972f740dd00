"""Secrets in the places a run keeps besides its exchanges: the command
line, the agent's output, the files of its snapshots and what it changed
in them (``places``); and, after the fact, ``wiretape scrub`` (rewriting a
run with more rules) and ``wiretape scan`` (looking for what is left).

Exchanges are redacted by :mod:`wiretape.redaction` itself; this part
applies the same rules to everything else a run stores.
"""
