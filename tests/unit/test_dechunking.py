"""The recorder reads a chunked body's data chunks itself (fast, in the
callback for their arrival) and hands the rest to h11 at the first line it
does not take: whatever the bytes and however they arrive, the frames and
the outcome are those h11 alone gives (RFC 9112 §7.1). A property test
over generated bodies: chunk sizes, size lines with extensions and
leading zeros, trailers, a byte corrupted, the stream cut short, and
arrivals split anywhere."""

from __future__ import annotations

from types import SimpleNamespace

import h11
import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wiretape.proxy.upstream import OriginResponse, Timeouts

HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def _machine() -> tuple[h11.Connection, h11.Response]:
    machine = h11.Connection(h11.CLIENT)
    machine.send(h11.Request(method=b"GET", target=b"/", headers=[(b"Host", b"origin")]))
    machine.send(h11.EndOfMessage())
    machine.receive_data(HEAD)
    head = machine.next_event()
    assert isinstance(head, h11.Response)
    return machine, head


def by_h11(arrivals: list[bytes]) -> tuple[list[bytes], str]:
    machine, _ = _machine()
    frames: list[bytes] = []
    for data in [*arrivals, b""]:
        machine.receive_data(data)
        while True:
            try:
                event = machine.next_event()
            except h11.RemoteProtocolError:
                return frames, "error"
            if event is h11.NEED_DATA:
                break
            if isinstance(event, h11.EndOfMessage):
                return frames, "complete"
            assert isinstance(event, h11.Data)
            frames.append(bytes(event.data))
    return frames, "incomplete"


def by_origin_response(arrivals: list[bytes],
                       fast: list[bool] | None = None) -> tuple[list[bytes], str]:
    """``fast``: told, per frame, whether the fast reading gave it."""
    machine, head = _machine()
    conn = SimpleNamespace(h11=machine)
    response = OriginResponse(head, conn, None, Timeouts(), chunked=True)  # type: ignore[arg-type]
    frames: list[bytes] = []

    def take(frame: bytes) -> bool:
        frames.append(frame)
        if fast is not None:
            fast.append(response._fast)
        return False

    for data in [*arrivals, b""]:
        try:
            response._receive(machine, data)
            if response._deliver(machine, take) is False:
                return frames, "complete"
        except httpx.RemoteProtocolError:
            return frames, "error"
    return frames, "incomplete"


@st.composite
def chunked_bodies(draw: st.DrawFn) -> bytes:
    wire = b""
    for data in draw(st.lists(st.binary(min_size=1, max_size=12), max_size=5)):
        size = f"{len(data):x}"
        size = draw(st.sampled_from([size, size.upper(), "0" + size, "00" + size]))
        ext = draw(st.sampled_from(["", "", ";a=b", " ;x"]))
        wire += f"{size}{ext}\r\n".encode() + data + b"\r\n"
    wire += draw(st.sampled_from([b"0\r\n", b"000\r\n", b"0;end=1\r\n"]))
    wire += draw(st.sampled_from([b"", b"X-Trailer: 1\r\n"])) + b"\r\n"
    # a byte corrupted: anywhere, or in a line's end (a size line's, a
    # chunk's footer, the last line's), where framing is decided
    breaks = [i for i in range(len(wire)) if wire[i:i + 1] in (b"\r", b"\n")]
    where = draw(st.sampled_from(["none", "anywhere", "line end"]))
    if where != "none" and wire:
        at = draw(st.sampled_from(breaks) if where == "line end" and breaks
                  else st.integers(0, len(wire) - 1))
        wire = wire[:at] + bytes([draw(st.integers(0, 255))]) + wire[at + 1:]
    if draw(st.booleans()):
        wire = wire[:draw(st.integers(0, len(wire)))]
    return wire


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wire=chunked_bodies(), cuts=st.lists(st.integers(0, 300), max_size=8))
def test_the_fast_reading_gives_the_frames_and_the_outcome_h11_gives(
        wire: bytes, cuts: list[int]) -> None:
    points = sorted({c for c in cuts if 0 < c < len(wire)})
    arrivals = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]
    assert by_origin_response(arrivals) == by_h11(arrivals)


def test_the_property_holds_on_a_body_read_fast_to_its_end() -> None:
    """The generated bodies do reach the fast path: a plain body's frames
    are each chunk's data, as h11's are, and it ends complete."""
    wire = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    fast: list[bool] = []
    assert by_origin_response([wire], fast) == by_h11([wire]) == ([b"hello", b" world"],
                                                                    "complete")
    assert fast == [True, True]
    split = [wire[:4], wire[4:9], wire[9:]]
    fast.clear()
    assert by_origin_response(split, fast) == by_h11(split) == ([b"h", b"ello", b" world"],
                                                               "complete")
    assert fast == [True, True, True]
