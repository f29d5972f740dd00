"""Tool exchanges (``record --tools``) in this process: each tool origin
answered from its own recorded exchanges through the forward proxy's
plain-HTTP handler on a real 127.0.0.1 socket, never from another's or a
model's; the verdict's tools line; the ledger's tool exchanges per call."""

from __future__ import annotations

from pathlib import Path

from test_proxy_handlers import CHAT, INFO, chat, logged, recorded

from support.inproc import RawClient, in_loop
from wiretape.inspect.formats import read_exchange
from wiretape.inspect.ledger import build_ledger
from wiretape.intercept.ca import RunCA
from wiretape.launch.intercept import tool_http_handler
from wiretape.model import (
    DEFAULT_MAX_BODY,
    Ending,
    Exchange,
    Frame,
    Request,
    Response,
    exchange_kind,
)
from wiretape.playback.decide import Mode, Policy
from wiretape.playback.verdict import compute
from wiretape.proxy.connect import ConnectProxy, tool_origin
from wiretape.proxy.http1 import plain_error
from wiretape.proxy.replay import Replayer
from wiretape.proxy.server import Listeners
from wiretape.store.runfile import RunFile, open_run


def page(seq: int, origin: str, target: bytes, body: bytes) -> Exchange:
    """A tool exchange as the recorder stores a GET through the proxy."""
    host = origin.split("://", 1)[1].encode()
    return Exchange(seq, 2, origin, INFO.started_at_ns + seq,
                    Request(b"GET", target, ((b"Host", host), (b"Accept", b"*/*")), b""),
                    Response(200, b"OK", ((b"Content-Length", str(len(body)).encode()),),
                             (Frame(1_000_000, body),)),
                    Ending.COMPLETE, 1_000_000, 2_000_000)


def test_tool_origins_name_scheme_host_and_any_other_port() -> None:
    assert tool_origin("https", "docs.test", 443) == "tool:https://docs.test"
    assert tool_origin("http", "search.test", 8080) == "tool:http://search.test:8080"
    assert tool_origin("https", "::1", 8443) == "tool:https://[::1]:8443"
    assert exchange_kind(tool_origin("http", "a.test", 80)) == "tool"


async def ask(port: int, target: str, host: str) -> tuple[int, bytes]:
    async with await RawClient.open(port) as client:
        await client.send(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n\r\n"
                          .encode())
        got = await client.response(b"GET")
        return got.status, got.body


@in_loop
async def test_each_tool_origin_is_answered_from_its_own_exchanges_only(tmp_path: Path) -> None:
    path = tmp_path / "r.wtape"
    run = RunFile.create(path, INFO)
    for exchange in (recorded(0, chat("hi")),
                     page(1, "tool:http://a.test", b"/page", b"page of a"),
                     page(2, "tool:http://b.test", b"/page", b"page of b")):
        run.write_exchange(exchange)
    run.close(compact=True)
    run = open_run(path, replay_logs=tmp_path / "replays")
    run.prepare_for_writes()
    replayer = Replayer(run, run.exchanges(), Policy(mode=Mode.DIAGNOSTIC))
    run.start_replay(replayer.replay_id, "diagnostic", {})
    ca = RunCA.create()
    listeners = Listeners(max_body=DEFAULT_MAX_BODY)
    # The forward proxy as a replay of a ``--tools`` run wires it.
    connect = ConnectProxy(ca, {}, lambda name, _a, conn_id: replayer.handler(name, conn_id),
                           tunnel=False, next_connection_id=listeners.next_connection_id,
                           max_body=DEFAULT_MAX_BODY, tools=True, tools_except=("db.test",))
    try:
        port = await listeners.listen(0, lambda conn_id: tool_http_handler(
            lambda name, _upstream: replayer.handler(name, conn_id), ("db.test",), plain_error),
            connect=connect)
        try:
            b = await ask(port, "http://b.test/page", "b.test")
            a = await ask(port, "http://a.test/page", "a.test")
            # a.test's page was served once: a second GET has nothing left.
            again = await ask(port, "http://a.test/page", "a.test")
            other = await ask(port, "http://c.test/page", "c.test")
            excepted = await ask(port, "http://db.test/x", "db.test")
        finally:
            await listeners.close(grace=1.0)
        await replayer.finish()
        rows = run.replay_requests(replayer.replay_id)
    finally:
        run.close(compact=True)
        ca.close()
    assert (b, a) == ((200, b"page of b"), (200, b"page of a"))
    for status, body in (again, other):
        assert status == 502
        assert b"no recorded tool exchange left for GET http://" in body
        assert b"never forwarded during a replay" in body
    assert excepted[0] == 400 and b"left out of the tool recording" in excepted[1]
    assert [(r["kind"], r["seq"], r["target"], r["detail"]["origin"]) for r in rows] == [
        ("exact", 2, "/page", "tool:http://b.test"), ("exact", 1, "/page", "tool:http://a.test"),
        ("missing", None, "/page", "tool:http://a.test"),
        ("missing", None, "/page", "tool:http://c.test")]
    assert logged(path, replayer.replay_id)[0][:3] == (0, "exact", 2)
    # The model's exchange was not touched: it is unused, counted apart.
    v = compute(run_id="r", replay_id="p", mode="diagnostic", complete=True, recorded_seqs=[0],
                tool_seqs=[1, 2], rows=rows)
    assert (v.recorded, v.exact, v.missing, v.unused) == (1, 0, 0, 1)
    assert v.tools is not None
    assert (v.tools.recorded, v.tools.exact, v.tools.missing, v.tools.unused) == (2, 2, 2, 0)


def tool_row(kind: str, seq: int | None, origin: str = "tool:https://docs.test"
             ) -> dict[str, object]:
    return {"index": 0, "kind": kind, "seq": seq, "served": seq is not None, "method": "GET",
            "target": "/p", "detail": {"origin": origin}}


def test_the_verdict_counts_tool_exchanges_on_a_line_of_their_own() -> None:
    model = [{"index": 0, "kind": "exact", "seq": 0, "served": True, "method": "POST",
              "target": CHAT, "detail": {}}]
    same = {"exit_status": {"same": True}}
    v = compute(run_id="r", replay_id="p", mode="strict", complete=True, recorded_seqs=[0],
                tool_seqs=[1, 2], rows=[*model, tool_row("exact", 1), tool_row("exact", 2)],
                outcome=same)  # type: ignore[list-item]
    assert (v.recorded, v.exact, v.reused) == (1, 1, 1)
    assert v.passed and v.exit_code == 0
    assert v.line().startswith("wiretape: verdict PASS (strict): recorded 1, exact 1, ")
    assert ("; tools: recorded 2, exact 2, substituted 0, equivalent 0, diverged 0, missing 0, "
            "unused 0; outcome: exit_status same") in v.line()
    assert v.to_json()["tools"]["passed"] is True
    # A tool request with no recorded counterpart fails the replay.
    v = compute(run_id="r", replay_id="p", mode="diagnostic", complete=True, recorded_seqs=[0],
                tool_seqs=[1], rows=[*model, tool_row("exact", 1), tool_row("missing", None)],
                outcome=same)  # type: ignore[list-item]
    assert (v.exact, v.missing, v.exchanges_pass, v.passed, v.exit_code) == (1, 0, False,
                                                                           False, 3)
    assert v.tools is not None and (v.tools.exact, v.tools.missing) == (1, 1)
    assert ("tool request 0 GET https://docs.test/p: missing (no recorded counterpart, "
            "rejected)") in v.details()
    # ... and so does one never asked for, or a diverged one.
    for rows in ([*model], [*model, tool_row("diverged", 1)]):
        v = compute(run_id="r", replay_id="p", mode="diagnostic", complete=True,
                    recorded_seqs=[0], tool_seqs=[1], rows=rows,
                    outcome=same)  # type: ignore[arg-type]
        assert not v.passed and v.exit_code == 3
    # A run with no tool exchange reads as it always has.
    v = compute(run_id="r", replay_id="p", mode="strict", complete=True, recorded_seqs=[0],
                rows=model, outcome=same)  # type: ignore[arg-type]
    assert v.tools is None and "tools" not in v.to_json() and "tools:" not in v.line()


def test_the_ledger_lists_the_tool_exchanges_each_call_made() -> None:
    call = (b'{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,'
            b'"finish_reason":"tool_calls","message":{"role":"assistant","content":null,'
            b'"tool_calls":[{"id":"call_1","type":"function","function":{"name":"web_fetch",'
            b'"arguments":"{\\"url\\":\\"https://docs.test/p\\"}"}}]}}]}')
    issued = Exchange(0, 1, "openai", 1, Request(b"POST", CHAT.encode(), (), chat("read it")),
                      Response(200, b"OK", ((b"Content-Type", b"application/json"),),
                               (Frame(1, call),)), Ending.COMPLETE, 1, 2)
    answer = (b'{"model":"m","messages":[{"role":"user","content":"read it"},{"role":'
              b'"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",'
              b'"function":{"name":"web_fetch","arguments":"{}"}}]},{"role":"tool",'
              b'"tool_call_id":"call_1","content":"the page"}]}')
    answered = Exchange(2, 1, "openai", 3, Request(b"POST", CHAT.encode(), (), answer),
                        None, Ending.COMPLETE, None, 1)
    views = [(e.seq, read_exchange(e)) for e in (issued, answered)]
    ledger = build_ledger(views, [(1, "GET https://docs.test/p"), (3, "GET https://late.test/")])
    (entry,) = ledger.entries
    assert (entry.name, entry.issued_in, entry.answered_in) == ("web_fetch", 0, 2)
    assert entry.made == ("#1 GET https://docs.test/p",)
    assert entry.to_json()["made"] == ["#1 GET https://docs.test/p"]
