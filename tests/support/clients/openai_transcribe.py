"""OpenAI SDK: ``audio.transcriptions.create`` with the upload of a case's request.

Used for B05/B06. The multipart parts (model, response_format, file with its
filename, content type and bytes) are taken from the request file, and the
request's own boundary is passed in the Content-Type header so the SDK (via
its HTTP client) produces the same body bytes. ``--request
request.rerun.http`` sends the same upload with the other boundary;
``--flip-byte N`` flips one bit of byte N of the file data (a changed upload).
The body is always the SDK's own (``--body`` does not apply): with the
boundary fixed it is byte-identical to the request file.
"""

from __future__ import annotations

import os
import re

import httpx2
import openai
from _common import (
    Timing,
    base_parser,
    emit,
    exception_info,
    jsonable,
    parse_request_file,
    timing_transport,
)


def parse_multipart(content_type: str, body: bytes) -> tuple[str, list[dict]]:
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        raise SystemExit(f"no boundary in {content_type!r}")
    boundary = m.group(1)
    delim = b"--" + boundary.encode()
    parts = []
    for raw in body.split(delim)[1:]:
        if raw.startswith(b"--"):
            break
        raw = raw[2:]  # CRLF after the delimiter
        head, _, data = raw.partition(b"\r\n\r\n")
        data = data[:-2]  # CRLF before the next delimiter
        headers = {}
        for line in head.split(b"\r\n"):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        disp = headers.get("content-disposition", "")
        name = re.search(r'name="([^"]*)"', disp).group(1)
        fn = re.search(r'filename="([^"]*)"', disp)
        parts.append({"name": name, "filename": fn.group(1) if fn else None,
                      "content_type": headers.get("content-type"), "data": data})
    return boundary, parts


def main() -> None:
    p = base_parser(__doc__)
    p.add_argument("--flip-byte", type=int, default=None,
                   help="flip the low bit of this byte offset inside the file data")
    args = p.parse_args()
    _, headers, body = parse_request_file(os.path.join(args.case, args.request))
    ctype = next(v for k, v in headers if k.lower() == "content-type")
    boundary, parts = parse_multipart(ctype, body)
    fields = {pt["name"]: pt["data"].decode() for pt in parts if pt["filename"] is None}
    fpart = next(pt for pt in parts if pt["filename"] is not None)
    data = bytearray(fpart["data"])
    if args.flip_byte is not None:
        data[args.flip_byte] ^= 0x01
    timing = Timing()
    client = openai.OpenAI(
        api_key=os.environ.get("OPENAI_API_KEY", "sk-test-REDACTED"),
        http_client=openai.DefaultHttpxClient(transport=timing_transport(httpx2, timing)),
    )
    obs = {"client": "openai_transcribe", "text": None, "tool_calls": [], "stop_reason": None,
           "usage": None, "n_events": 0}
    exc = None
    try:
        resp = client.audio.transcriptions.create(
            file=(fpart["filename"], bytes(data), fpart["content_type"]),
            extra_headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
            **fields,
        )
        timing.event("transcription")
        obs["n_events"] = 1
        obs["text"] = resp.text
        obs["usage"] = jsonable(getattr(resp, "usage", None))
    except Exception as e:
        exc = e
    obs["exception"] = exception_info(exc)
    emit(obs, timing, args.timing_file)


if __name__ == "__main__":
    main()
