#!/usr/bin/env bash
# Regenerate the API client's types from the control plane's OpenAPI schema.
#   scripts/gen-api.sh          write web/openapi.json and web/src/api/schema.d.ts
#   scripts/gen-api.sh --check  regenerate into a temporary folder and fail if the
#                               committed files differ (the API changed; rerun without --check)
set -euo pipefail

web="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(dirname "$web")"
python="${CRUCIBLE_PYTHON:-$repo/.venv/bin/python}"

if [[ ! -x "$python" ]]; then
  echo "no Python at $python; run scripts/start (or set CRUCIBLE_PYTHON)" >&2
  exit 1
fi

out="$web"
if [[ "${1:-}" == "--check" ]]; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
  mkdir -p "$out/src/api"
fi

# A throwaway CRUCIBLE_HOME so the dump neither reads nor writes the user's state.
"$python" -c "from crucible.api.app import create_app; from crucible.settings import load_settings; import json, tempfile; print(json.dumps(create_app(load_settings(home=tempfile.mkdtemp())).openapi(), indent=2, sort_keys=True))" \
  >"$out/openapi.json"
"$web/node_modules/.bin/openapi-typescript" "$out/openapi.json" \
  --output "$out/src/api/schema.d.ts" --alphabetize >/dev/null

if [[ "$out" != "$web" ]]; then
  if ! diff -u "$web/openapi.json" "$out/openapi.json" >/dev/null \
    || ! diff -u "$web/src/api/schema.d.ts" "$out/src/api/schema.d.ts"; then
    diff -u "$web/openapi.json" "$out/openapi.json" | head -40 || true
    echo "the generated API client is out of date: run 'npm run gen:api' in web/ and commit the result" >&2
    exit 1
  fi
  echo "API client is up to date"
fi
