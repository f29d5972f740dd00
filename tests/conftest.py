"""What every test shares."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _replay_logs_of_this_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Replay logs live in the user's state folder (``store.locate``): the
    tests, and the wiretape processes they start, keep theirs in a folder
    of their own."""
    folder = tmp_path_factory.mktemp("state")
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(folder)
    yield
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before
