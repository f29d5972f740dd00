"""wiretape: record an AI agent's provider traffic from outside the agent and
replay it offline, with a verdict made of numbers.

The public API, for a command::

    run = wiretape.record(["python", "agent.py"], upstreams={"openai": URL})
    verdict = wiretape.replay(run.path)          # a Verdict; verdict.passed

and for an agent in this process (nanobot's SDK, an eval loop)::

    with wiretape.recording(upstream=URL, out="run.wtape") as proxy: ...  # proxy.url
    with wiretape.replaying("run.wtape") as proxy: ...                    # proxy.verdict

Names are loaded on first use, so ``import wiretape`` stays cheap for the
command line and the pytest plugin.
"""

import importlib
import typing

__version__ = "0.1.0"

if typing.TYPE_CHECKING:
    from wiretape.api import Run, compare, fork, record, record_async, replay, replay_async
    from wiretape.attach import RecordingProxy, ReplayingProxy, recording, replaying
    from wiretape.errors import (
        CommandNotFound,
        Interrupted,
        InvalidUpstream,
        PortInUse,
        RunFileError,
        RunFileWriteError,
        RunNotFound,
        SchemaTooNew,
        UsageError,
        WiretapeError,
    )
    from wiretape.launch.fork import ForkResult
    from wiretape.model import Origin
    from wiretape.playback.verdict import Verdict

#: Public name -> the module that defines it.
_EXPORTS = {
    "CommandNotFound": "wiretape.errors",
    "ForkResult": "wiretape.launch.fork",
    "Interrupted": "wiretape.errors",
    "InvalidUpstream": "wiretape.errors",
    "Origin": "wiretape.model",
    "PortInUse": "wiretape.errors",
    "RecordingProxy": "wiretape.attach",
    "ReplayingProxy": "wiretape.attach",
    "Run": "wiretape.api",
    "RunFileError": "wiretape.errors",
    "RunFileWriteError": "wiretape.errors",
    "RunNotFound": "wiretape.errors",
    "SchemaTooNew": "wiretape.errors",
    "UsageError": "wiretape.errors",
    "Verdict": "wiretape.playback.verdict",
    "WiretapeError": "wiretape.errors",
    "compare": "wiretape.api",
    "fork": "wiretape.api",
    "record": "wiretape.api",
    "record_async": "wiretape.api",
    "recording": "wiretape.attach",
    "replay": "wiretape.api",
    "replay_async": "wiretape.api",
    "replaying": "wiretape.attach",
}

__all__ = [
    "CommandNotFound",
    "ForkResult",
    "Interrupted",
    "InvalidUpstream",
    "Origin",
    "PortInUse",
    "RecordingProxy",
    "ReplayingProxy",
    "Run",
    "RunFileError",
    "RunFileWriteError",
    "RunNotFound",
    "SchemaTooNew",
    "UsageError",
    "Verdict",
    "WiretapeError",
    "__version__",
    "compare",
    "fork",
    "record",
    "record_async",
    "recording",
    "replay",
    "replay_async",
    "replaying",
]


def __getattr__(name: str) -> typing.Any:  # PEP 562: each name has its own type
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wiretape' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
