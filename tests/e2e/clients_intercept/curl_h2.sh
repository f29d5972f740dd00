#!/bin/sh
# curl over https speaking HTTP/2 (offered by ALPN) to the provider's own
# origin, through whatever proxy and CA bundle the environment names
# (HTTPS_PROXY, CURL_CA_BUNDLE). The body goes to stdout as curl received
# it, then the HTTP version curl used.
set -eu
exec curl -sS -N --http2 --fail-with-body \
  -H 'content-type: application/json' \
  -H "authorization: Bearer ${OPENAI_API_KEY:-}" \
  --data-binary '{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Name three colours."}]}' \
  -w '\nhttp_version %{http_version}\n' \
  "https://${1:-api.openai.com}/v1/chat/completions"
