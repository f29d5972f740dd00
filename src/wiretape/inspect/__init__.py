"""Reading runs for people: one-line summaries of requests, run diffs."""
