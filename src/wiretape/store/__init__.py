"""The run file: schema, blobs, and reading and writing runs (what is written
has already been redacted: ``wiretape.redaction``); replay logs, kept
beside the runs, never in them."""

from wiretape.store.locate import DEFAULT_STORE, new_run_id, resolve_run, runs_dir
from wiretape.store.runfile import RunFile, open_run

__all__ = ["DEFAULT_STORE", "RunFile", "new_run_id", "open_run", "resolve_run", "runs_dir"]
