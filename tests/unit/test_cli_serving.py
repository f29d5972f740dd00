"""What the command line does once its own proxy listens (``cli.main``)."""

from __future__ import annotations

import gc

from wiretape.cli.main import _served
from wiretape.model import Origin


def test_once_listening_start_up_s_objects_are_out_of_the_collector_s_reach() -> None:
    """Start-up's objects are frozen (a full collection while serving walks
    only what serving made), then the caller's announcement runs."""
    origins = [Origin("upstream", "http://127.0.0.1:9/v1", 0, ())]
    seen: list[list[Origin]] = []
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        _served(seen.append)(origins)
        assert gc.get_freeze_count() > 0
        assert seen == [origins]
        _served()(origins)  # nothing to announce
    finally:
        gc.unfreeze()
