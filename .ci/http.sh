#!/usr/bin/env bash
# SPEC §20 external checks against a real `airlock serve` on loopback:
#   1. a headless Chromium (Debian's chromium, driven by playwright-core, which downloads no
#      browser) signs in, sees a parked run's approval appear live, is refused a cross-site
#      POST, approves with the keyboard, watches the run complete and settles an UNCERTAIN call;
#      screenshots in target/console/;
#   2. schemathesis (PyPI) fuzzes every operation of adapters/http/openapi.json: no 5xx, every
#      response as documented.
# Installs what is missing, pinned, into ignored local prefixes (.ci/.venv from
# .ci/requirements.txt, .ci/.npm) and, as
# root on a fresh Debian machine, the chromium and chromium-driver packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PLAYWRIGHT_CORE_VERSION=1.64.1

. .ci/lib.sh
if ! [ -x /usr/bin/chromium ] || ! command -v chromedriver >/dev/null 2>&1; then
  echo "http.sh: installing Debian's chromium and chromium-driver"
  apt_install chromium chromium-driver
fi
command -v curl >/dev/null 2>&1 || apt_install curl
ci_venv
SCHEMATHESIS_VERSION="$("$CI_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))')"
PLAYWRIGHT_CORE="$PWD/.ci/.npm/node_modules/playwright-core"
if ! grep -q "\"version\": \"$PLAYWRIGHT_CORE_VERSION\"" "$PLAYWRIGHT_CORE/package.json" 2>/dev/null; then
  echo "http.sh: installing playwright-core $PLAYWRIGHT_CORE_VERSION into .ci/.npm"
  mkdir -p .ci/.npm
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix .ci/.npm --no-save --no-audit \
    --no-fund --loglevel=error "playwright-core@$PLAYWRIGHT_CORE_VERSION"
fi

cargo build -q -p airlock
BIN="$PWD/target/debug/airlock"
WORK="$(mktemp -d)"
SERVER=""
cleanup() {
  if [ -n "$SERVER" ] && kill -0 "$SERVER" 2>/dev/null; then kill -TERM "$SERVER"; wait "$SERVER" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
DATA="$WORK/data"

# A completed run and an UNCERTAIN call in tenant acme (the demo's crash after the watermark).
"$BIN" demo --data-dir "$DATA" >"$WORK/demo.log" 2>&1
token() {
  "$BIN" --data-dir "$DATA" --tenant acme --principal "$1" tokens create --expires-in 1h --label "$2" \
    ${3:+--scopes "$3"} | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])'
}
REVIEWER_TOKEN="$(token bob ci-reviewer)"
AGENT_TOKEN="$(token alice ci-agent)"
# The platform scopes, policy.admin and notify.admin, so schemathesis also reaches POST
# /v1/admin/reload's 200 (a reload of the shipped files: the same version, harmless) and the
# /v1/notify/targets routes (targets it adds point at addresses nothing answers on here).
FUZZ_TOKEN="$(token carol ci-schemathesis "run.read,run.write,run.cancel,approval.read,approval.resolve,invocation.read,invocation.settle,workspace.read,workspace.write,demo.write,policy.admin,notify.admin")"

"$BIN" --data-dir "$DATA" serve --listen 127.0.0.1:0 >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER=$!
for _ in $(seq 1 100); do [ -s "$WORK/serve.out" ] && break; sleep 0.1; done
URL="$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["url"])' "$WORK/serve.out")"
echo "http.sh: airlock serve at $URL"

echo "http.sh: browser test (headless Chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'))"
AIRLOCK_URL="$URL" REVIEWER_TOKEN="$REVIEWER_TOKEN" AGENT_TOKEN="$AGENT_TOKEN" \
  PLAYWRIGHT_CORE="$PLAYWRIGHT_CORE" SCREENS="$PWD/target/console" \
  DOCS_SCREENSHOT="${AIRLOCK_DOCS_SCREENSHOT:-}" node .ci/browser/console.cjs

# Real ids for schemathesis, so it also sees 200s: a parked run's approval, that run, and an
# UNCERTAIN call.
PARKED="$(curl -sf -X POST "${URL}v1/runs" -H "Authorization: Bearer $AGENT_TOKEN" \
  -H 'content-type: application/json' -d '{"schema_version":1,"tenant_id":"acme",
  "principal_id":"alice","principal_scopes":["demo.write"],"origin_trust":"user",
  "steps":[{"calls":[{"call_id":"c1","tool":"demo.external_write",
  "arguments":{"destination":"fuzz","content":"x"},
  "argument_trust":{"destination":"user","content":"user"}}]}]}' \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["run_id"])')"
APPROVAL=""
for _ in $(seq 1 100); do
  APPROVAL="$(curl -sf "${URL}v1/approvals?run=$PARKED" -H "Authorization: Bearer $FUZZ_TOKEN" \
    | python3 -c 'import json, sys; items = json.load(sys.stdin)["items"]; print(items[0]["id"] if items else "")')"
  [ -n "$APPROVAL" ] && break
  sleep 0.1
done
[ -n "$APPROVAL" ] || { echo "http.sh: the run did not park" >&2; exit 1; }
INVOCATION="$(curl -sf "${URL}v1/invocations/uncertain?all=true" -H "Authorization: Bearer $FUZZ_TOKEN" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["items"][0]["id"])')"
cat >"$WORK/schemathesis.toml" <<TOML
# Every check schemathesis has (the per-operation exception below needs them set here, not
# with --checks on the command line, which would override it).
[checks]
enabled = true

# The stream is read with follow=false so each response ends (an open SSE stream never would).
[[operations]]
include-path = "/v1/events/stream"
parameters = { "follow" = "false" }

[[operations]]
include-path-regex = "^/v1/approvals/\\\\{id\\\\}"
parameters = { "id" = "$APPROVAL" }

[[operations]]
include-path-regex = "^/v1/runs/\\\\{id\\\\}"
parameters = { "id" = "$PARKED" }

[[operations]]
include-path = "/v1/invocations/{id}/settle"
parameters = { "id" = "$INVOCATION" }

# A target's secret must be the caller's tenant's own (its name carries a hash of the tenant id),
# which a schema cannot state, so a schema-valid target may be 400.
[[operations]]
include-path = "/v1/notify/targets"
include-method = "POST"
checks.positive_data_acceptance.enabled = false

# A run script has rules a schema cannot state (its tenant, principal and scopes must be the
# caller's, fewer steps than max_steps, unique call ids), so a schema-valid script may be 400.
[[operations]]
include-path = "/v1/runs"
include-method = "POST"
checks.positive_data_acceptance.enabled = false
TOML
echo "http.sh: schemathesis $SCHEMATHESIS_VERSION against every operation"
"$CI_VENV/bin/st" --config-file "$WORK/schemathesis.toml" run adapters/http/openapi.json \
  --url "${URL%/}" -H "Authorization: Bearer $FUZZ_TOKEN" \
  --max-examples 50 --seed 20 --request-timeout 15 --workers 1 --no-color

kill -TERM "$SERVER"
wait "$SERVER"
SERVER=""
echo "http.sh: serve stopped cleanly on SIGTERM"
