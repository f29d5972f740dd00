#!/bin/sh
# curl as the client: one chat completion, streamed ("stream") or not
# ("plain"), to $OPENAI_BASE_URL. The response body goes to stdout as curl
# received it; the test compares those bytes.
set -eu
case "${1:-}" in
  stream) stream=true ;;
  plain) stream=false ;;
  *) echo "usage: curl_client.sh stream|plain" >&2; exit 2 ;;
esac
exec curl -sS -N --fail-with-body --noproxy '*' \
  -H 'content-type: application/json' \
  -H "authorization: Bearer ${OPENAI_API_KEY:-}" \
  --data-binary "{\"model\":\"gpt-4o-mini\",\"stream\":$stream,\"messages\":\
[{\"role\":\"user\",\"content\":\"Name three colours.\"}]}" \
  "${OPENAI_BASE_URL%/}/chat/completions"
