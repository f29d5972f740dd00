"""pytest plugin: a recorded run as a regression test that needs no network
and no key, and fails with the divergence report.

    @pytest.mark.wiretape(upstream="https://api.openai.com/v1")
    def test_agent(wiretape_agent):
        result = wiretape_agent(["python", "agent.py", "How many apples?"])
        assert b"17" in result.stdout

    def test_sdk(wiretape_proxy):             # an agent in this process
        answer = my_agent(base_url=wiretape_proxy.url)

By default every test replays its run, kept next to the test module at
``runs/<module>/<test>.wtape``: nothing is forwarded anywhere, and a
missing run is an error. ``pytest --wiretape-record`` records the runs
again through the upstream, and saves each one only when its test passed.

Fixtures are the override points: ``wiretape_run_path`` (where a test's run
is), ``wiretape_upstream`` (where recording forwards to), and
``wiretape_recording`` (whether this session records).

Owns the marker, the fixtures, and turning a failed verdict into a test
failure. Must not know how a replay decides or how a run is stored: it uses
the public API only, on a copy of the run, so a test run never modifies the
committed file.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

if TYPE_CHECKING:
    from wiretape import RecordingProxy, ReplayingProxy, Run, Verdict
    from wiretape.api import ModeName

__all__ = ["AgentResult", "AgentRunner"]

RECORD_OPTION = "--wiretape-record"
MARKER_HELP = (
    "wiretape(run=None, *, upstream=None, mode='strict', port=None, substitutions=None, "
    "allow_substitutions=False): the test's recorded run (a path relative to the test module; "
    "default runs/<module>/<test>.wtape), where --wiretape-record forwards (a URL or "
    "{name: URL}), and how it is replayed."
)
_OPTIONS = ("run", "upstream", "mode", "port", "substitutions", "allow_substitutions")
_SESSIONS = pytest.StashKey[list["_Session"]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wiretape", "wiretape: record and replay agent runs")
    group.addoption(RECORD_OPTION, action="store_true", default=False,
                    help="Record the runs of tests that use wiretape again, through their "
                         "upstream (network, keys). Default: replay only, no network.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)


# --- settings from the marker ----------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    run: str | None = None
    upstream: str | Mapping[str, str] | None = None
    mode: str = "strict"
    port: int | Mapping[str, int] | None = None
    substitutions: Mapping[str, str] | None = None
    allow_substitutions: bool = False


def _settings(node: pytest.Item) -> _Settings:
    marker = node.get_closest_marker("wiretape")
    if marker is None:
        return _Settings()
    if len(marker.args) > 1:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.wiretape takes at most one "
                                "positional argument, the run's path")
    kwargs = dict(marker.kwargs)
    if marker.args:
        kwargs.setdefault("run", marker.args[0])
    unknown = sorted(set(kwargs) - set(_OPTIONS))
    if unknown:
        raise pytest.UsageError(f"{node.nodeid}: unknown @pytest.mark.wiretape option(s) "
                                f"{', '.join(unknown)}; known: {', '.join(_OPTIONS)}")
    return _Settings(**kwargs)


def _safe_name(name: str) -> str:
    """A test's name as a file name: ``test_x[a/b]`` -> ``test_x[a_b]``."""
    return re.sub(r"[^A-Za-z0-9_.\[\]-]+", "_", name).strip(".") or "test"


# --- the fixtures ----------------------------------------------------------------------------


@pytest.fixture
def wiretape_recording(request: pytest.FixtureRequest) -> bool:
    """True when this session records (``--wiretape-record``), else it replays."""
    return bool(request.config.getoption(RECORD_OPTION))


@pytest.fixture
def wiretape_run_path(request: pytest.FixtureRequest) -> Path:
    """The test's run file: the marker's ``run`` (relative to the test
    module's folder), else ``runs/<module>/<test>.wtape`` next to it."""
    module = Path(str(request.node.path))
    given = _settings(request.node).run
    if given is not None:
        return module.parent / given
    return module.parent / "runs" / module.stem / f"{_safe_name(request.node.name)}.wtape"


@pytest.fixture
def wiretape_upstream(request: pytest.FixtureRequest) -> str | Mapping[str, str] | None:
    """Where recording forwards: the marker's ``upstream``, a URL (for a
    command, the ``openai`` origin's) or ``{origin name: URL}``. Requested
    only with ``--wiretape-record``; override it to compute the URL (or to
    start a stand-in provider)."""
    return _settings(request.node).upstream


@pytest.fixture
def wiretape_proxy(request: pytest.FixtureRequest, wiretape_recording: bool,
                   wiretape_run_path: Path, tmp_path_factory: pytest.TempPathFactory
                   ) -> Generator[RecordingProxy | ReplayingProxy, None, None]:
    """A proxy for an agent in this process: give it ``wiretape_proxy.url``
    as its base URL (an agent process started by the test: that, and
    ``wiretape_proxy.env`` in its environment, for the stdio MCP servers
    it starts through ``wiretape mcp``). It replays the test's run
    (recording it with ``--wiretape-record``); after the test, a failed
    verdict fails the test with the divergence report."""
    session = _register(request, _Session(
        request.node, wiretape_run_path, _settings(request.node), wiretape_recording,
        tmp_path_factory.mktemp("wiretape")))
    upstream = _upstream(request) if wiretape_recording else None
    proxy = session.open_proxy(upstream)
    try:
        yield proxy
    finally:
        session.close_proxy(test_passed=False)  # only if the test never reached its end


@dataclass(frozen=True)
class AgentResult:
    """What the agent did under wiretape: its exit status, its output
    (bytes), and the replay's verdict (None while recording)."""

    exit_status: int | None
    stdout: bytes
    stderr: bytes
    run_path: Path
    verdict: Verdict | None = None


@dataclass
class AgentRunner:
    """Runs a command under wiretape; see the ``wiretape_agent`` fixture."""

    _session: _Session
    _upstream: Callable[[], str | Mapping[str, str]]
    _used: bool = False

    def __call__(self, argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None,
                 snapshots: Sequence[str | os.PathLike[str]] = ()) -> AgentResult:
        """Run ``argv`` in ``cwd`` (default: the project's root folder)
        against the test's run: replayed (a failed verdict fails the test
        here, with the divergence report), or recorded with
        ``--wiretape-record``. ``snapshots``: folders stored with a new
        recording, restored into a sandbox for each replay and compared
        after it (default: none; the test's own files are used)."""
        if self._used:
            raise pytest.UsageError("wiretape_agent runs one command per test (one run file): "
                                    "split the test, or give each a run with the marker")
        self._used = True
        where = Path(cwd) if cwd is not None else self._session.item.config.rootpath
        return self._session.run_command(argv, where, snapshots, self._upstream)


@pytest.fixture
def wiretape_agent(request: pytest.FixtureRequest, wiretape_recording: bool,
                   wiretape_run_path: Path, tmp_path_factory: pytest.TempPathFactory
                   ) -> AgentRunner:
    """A function ``wiretape_agent(argv, cwd=None) -> AgentResult`` that runs
    the agent command against the test's run: replayed by default (a failed
    verdict fails the test with the divergence report), recorded through the
    upstream with ``--wiretape-record``."""
    session = _register(request, _Session(
        request.node, wiretape_run_path, _settings(request.node), wiretape_recording,
        tmp_path_factory.mktemp("wiretape")))
    return AgentRunner(session, lambda: _upstream(request))


def _register(request: pytest.FixtureRequest, session: _Session) -> _Session:
    sessions = request.node.stash.setdefault(_SESSIONS, [])
    if sessions:
        raise pytest.UsageError(f"{request.node.nodeid}: a test has one run, so it uses either "
                                "wiretape_agent or wiretape_proxy, not both")
    sessions.append(session)
    return session


def _upstream(request: pytest.FixtureRequest) -> str | Mapping[str, str]:
    upstream: str | Mapping[str, str] | None = request.getfixturevalue("wiretape_upstream")
    if not upstream:
        pytest.fail(f"wiretape: {RECORD_OPTION} needs an upstream for {request.node.nodeid}: "
                    "give @pytest.mark.wiretape(upstream=URL) or override the "
                    "wiretape_upstream fixture", pytrace=False)
    return upstream


# --- one test's run --------------------------------------------------------------------------


@dataclass
class _Session:
    """One test's use of its run: replaying a copy, or recording a new one
    that replaces the committed run once the test has passed."""

    item: pytest.Item
    run_path: Path
    settings: _Settings
    recording: bool
    scratch: Path
    proxy: RecordingProxy | ReplayingProxy | None = None
    new_run: Path | None = None
    verdicts: list[Verdict] = field(default_factory=list)

    def _replay_copy(self) -> Path:
        if not self.run_path.is_file():
            pytest.fail(f"wiretape: no recorded run for {self.item.nodeid} at {self.run_path}: "
                        f"record it once with `pytest {RECORD_OPTION}` (this calls the real "
                        "upstream)", pytrace=False)
        copy = self.scratch / self.run_path.name
        shutil.copyfile(self.run_path, copy)
        return copy

    def _new_run_path(self) -> Path:
        self.new_run = self.scratch / f"new-{self.run_path.name}"
        return self.new_run

    def _mode(self) -> ModeName:
        mode = self.settings.mode
        if mode in ("strict", "diagnostic"):
            return cast("ModeName", mode)
        raise pytest.UsageError(f"{self.item.nodeid}: wiretape mode must be 'strict' or "
                                f"'diagnostic', not {mode!r}")

    # -- an agent in this process --------------------------------------------------------------

    def open_proxy(
        self, upstream: str | Mapping[str, str] | None
    ) -> RecordingProxy | ReplayingProxy:
        import wiretape

        port = self.settings.port
        if self.recording:
            assert upstream is not None
            proxy: RecordingProxy | ReplayingProxy = wiretape.recording(
                upstream, port=port or 0, out=self._new_run_path())
        else:
            proxy = wiretape.replaying(self._replay_copy(), mode=self._mode(), port=port,
                                       substitutions=self.settings.substitutions,
                                       allow_substitutions=self.settings.allow_substitutions)
        self.proxy = proxy.__enter__()
        return self.proxy

    def close_proxy(self, *, test_passed: bool) -> None:
        proxy, self.proxy = self.proxy, None
        if proxy is None:
            return
        proxy.__exit__(None, None, None)
        if not self.recording:  # open_proxy made a ReplayingProxy
            self.verdicts.append(cast("ReplayingProxy", proxy).verdict)
        elif test_passed:
            self._keep_new_run()

    # -- an agent command ----------------------------------------------------------------------

    def run_command(self, argv: Sequence[str], cwd: Path,
                    snapshots: Sequence[str | os.PathLike[str]],
                    upstream: Callable[[], str | Mapping[str, str]]) -> AgentResult:
        import io

        import wiretape

        out, err = io.BytesIO(), io.BytesIO()
        if self.recording:
            given = upstream()
            upstreams = {"openai": given} if isinstance(given, str) else dict(given)
            port = self.settings.port
            run: Run = wiretape.record(
                argv, out=self._new_run_path(), upstreams=upstreams, cwd=cwd,
                snapshots=snapshots,
                port=port if isinstance(port, int) else None,
                ports=port if isinstance(port, Mapping) else None)
            return AgentResult(run.exit_status, run.stdout, run.stderr, self.run_path)
        verdict = wiretape.replay(
            self._replay_copy(), argv, mode=self._mode(),
            port=self.settings.port if isinstance(self.settings.port, int) else None,
            ports=self.settings.port if isinstance(self.settings.port, Mapping) else None,
            substitutions=self.settings.substitutions, cwd=cwd,
            allow_substitutions=self.settings.allow_substitutions, stdout=out, stderr=err)
        self.verdicts.append(verdict)
        if not verdict.passed:
            self.verdicts.remove(verdict)  # reported here, not again after the test
            pytest.fail(failure_report(verdict, self.run_path), pytrace=False)
        exit_status = verdict.outcome.get("exit_status", {}).get("replayed")
        return AgentResult(exit_status, out.getvalue(), err.getvalue(), self.run_path, verdict)

    # -- after the test ------------------------------------------------------------------------

    def finish(self, *, test_passed: bool) -> list[str]:
        """Close what is open; keep a new recording only if the test passed.
        Returns the failure reports of failed verdicts."""
        self.close_proxy(test_passed=test_passed)
        if self.recording and self.new_run is not None and self.new_run.exists():
            if test_passed:
                self._keep_new_run()
            else:
                self.item.add_report_section(
                    "call", "wiretape", f"the new recording was not saved (the test failed); "
                    f"{self.run_path} is unchanged")
        reports = []
        for verdict in self.verdicts:
            self.item.add_report_section("call", "wiretape", verdict.line())
            if not verdict.passed:
                reports.append(failure_report(verdict, self.run_path))
        self.verdicts.clear()
        return reports

    def _keep_new_run(self) -> None:
        if self.new_run is None or not self.new_run.exists():
            return
        self.run_path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.new_run, self.run_path)
        self.new_run = None


def failure_report(verdict: Verdict, run_path: Path) -> str:
    """The verdict line, the divergence report (plain text), and what to do."""
    lines = [verdict.line(), *verdict.details()]
    lines.append(f"wiretape: run {run_path}; if the change is intended, record it again with "
                 f"`pytest {RECORD_OPTION}`")
    return "\n".join(lines)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """After the test body: stop its proxies, and fail the test with the
    divergence report when a verdict failed (also when the body failed
    first, since a refused request is the likelier cause)."""
    try:
        result = yield
    except BaseException as exc:
        reports = _finish(item, test_passed=False)
        if reports and isinstance(exc, Exception):  # not skip, xfail, fail or KeyboardInterrupt
            summary = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            pytest.fail("\n\n".join(reports) + f"\n(the test body also failed: {summary})",
                        pytrace=False)
        raise
    reports = _finish(item, test_passed=True)
    if reports:
        pytest.fail("\n\n".join(reports), pytrace=False)
    return result


def _finish(item: pytest.Item, *, test_passed: bool) -> list[str]:
    reports: list[str] = []
    for session in item.stash.get(_SESSIONS, []):
        reports += session.finish(test_passed=test_passed)
    return reports
