#!/bin/sh
# curl over https to the provider's own origin, through whatever proxy and
# CA bundle the environment names (HTTPS_PROXY, CURL_CA_BUNDLE). The body
# goes to stdout as curl received it.
set -eu
exec curl -sS -N --fail-with-body \
  -H 'content-type: application/json' \
  -H "authorization: Bearer ${OPENAI_API_KEY:-}" \
  --data-binary '{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Name three colours."}]}' \
  "https://${1:-api.openai.com}/v1/chat/completions"
