"""The run file: schema, blobs, redaction, and reading and writing runs."""

from wiretape.store.locate import DEFAULT_STORE, new_run_id, resolve_run, runs_dir
from wiretape.store.runfile import RunFile, open_run

__all__ = ["DEFAULT_STORE", "RunFile", "new_run_id", "open_run", "resolve_run", "runs_dir"]
