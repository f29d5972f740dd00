"""What every test shares."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from wiretape.intercept.ca import RunCA


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


@pytest.fixture(scope="session")
def upstream_ca(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunCA, Path]]:
    """A CA standing in for the public roots that sign the real providers and
    sites (``--upstream-ca``), with its certificate as a PEM file."""
    ca = RunCA.create(common_name="wiretape tests: upstream CA")
    pem = tmp_path_factory.mktemp("upstream-ca") / "upstream-ca.pem"
    pem.write_bytes(ca.cert_pem)
    yield ca, pem
    ca.close()
