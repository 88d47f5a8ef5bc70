#!/usr/bin/env bash
# SPEC §19.6's conformance test: the official MCP conformance suite (npm
# @modelcontextprotocol/conformance, pinned) runs its server scenarios twice in one go, against
# @modelcontextprotocol/server-everything directly (its own Streamable HTTP transport) and against
# `airlock mcp serve --listen 127.0.0.1:0 --listen-no-auth` fronting server-everything (stdio
# upstream, `expose_unprefixed = true`). It prints both pass lists and fails when a scenario that
# passes directly does not pass through airlock.
#
#   bash .ci/mcp-conformance.sh
#
# Needs what `.ci/mcp.sh install` installs (server-everything in .ci/.mcp/npm) and Node.js; the
# suite goes into its own ignored prefix, .ci/.conformance. AIRLOCK_BIN names a prebuilt binary
# (default: `cargo build -p airlock`, then target/debug/airlock).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFORMANCE_VERSION=0.1.16
PREFIX=.ci/.conformance
EVERYTHING=.ci/.mcp/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js

command -v node >/dev/null 2>&1 || { echo "mcp-conformance.sh: node is missing" >&2; exit 1; }
if [ ! -f "$EVERYTHING" ]; then bash .ci/mcp.sh install; fi

SUITE_DIR="$PREFIX/node_modules/@modelcontextprotocol/conformance"
if ! grep -q "\"version\": \"$CONFORMANCE_VERSION\"" "$SUITE_DIR/package.json" 2>/dev/null; then
  echo "mcp-conformance.sh: installing @modelcontextprotocol/conformance $CONFORMANCE_VERSION into $PREFIX"
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-save --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
fi

# Node 20: the suite's entry (dist/index.js, one ESM bundle) imports `globSync` from `fs`, a
# Node 22 API that only its `tier-check` command calls. An ESM named import of a missing export
# fails at link time, before any code runs, so a `--require` preload defining fs.globSync cannot
# help. We generate, next to the original (so its package imports still resolve), a copy whose
# `fs` import lacks `globSync` and which declares a function of the same local name that throws
# if `tier-check` ever calls it. The server scenarios never do. Node >= 22 runs the original.
ENTRY="$SUITE_DIR/dist/index.js"
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 22 ]; then
  PATCHED="$SUITE_DIR/dist/index-node20.js"
  node - "$ENTRY" "$PATCHED" <<'EOF'
const fs = require("fs");
const [entry, patched] = process.argv.slice(2);
const text = fs.readFileSync(entry, "utf8");
const found = text.match(/globSync as ([A-Za-z_$][\w$]*),/);
if (!found) {
  console.error(`mcp-conformance.sh: no 'globSync as …,' import in ${entry}; the Node 20 copy needs a new rule`);
  process.exit(1);
}
const stub = `\nfunction ${found[1]}() { throw new Error("fs.globSync needs Node 22 (tier-check only)"); }\n`;
fs.writeFileSync(patched, text.replace(found[0], "") + stub);
EOF
  ENTRY="$PATCHED"
fi

if [ -z "${AIRLOCK_BIN:-}" ]; then
  cargo build -q -p airlock
  AIRLOCK_BIN=target/debug/airlock
fi

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# Waits until `url` answers HTTP at all (any status), at most 30 s.
wait_http() {
  for _ in $(seq 300); do
    if node -e 'fetch(process.argv[1],{method:"GET"}).then(()=>process.exit(0),()=>process.exit(1))' "$1" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "mcp-conformance.sh: $1 did not come up" >&2
  return 1
}

# Runs the active server scenarios against $1; writes the passing scenario names (every check of
# the scenario passed) to $2, sorted, and keeps the suite's output in $2.log.
run_suite() {
  local url=$1 out=$2
  node "$ENTRY" server --url "$url" -o "$WORK/results-$(basename "$out")" >"$out.log" 2>&1 || true
  if ! grep -q '^=== SUMMARY ===' "$out.log"; then
    echo "mcp-conformance.sh: the suite printed no summary against $url:" >&2
    tail -20 "$out.log" >&2
    exit 1
  fi
  sed -n '/^=== SUMMARY ===/,$p' "$out.log" | sed -n 's/^✓ \([^:]*\):.*/\1/p' | sort >"$out"
  sed -n '/^=== SUMMARY ===/,$p' "$out.log" | grep -c '^[✓✗] ' >"$out.total"
}

# 1. server-everything directly, over its own Streamable HTTP transport.
DIRECT_PORT="$(free_port)"
PORT="$DIRECT_PORT" node "$EVERYTHING" streamableHttp >"$WORK/everything.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$DIRECT_PORT/mcp"
run_suite "http://localhost:$DIRECT_PORT/mcp" "$WORK/direct"

# 2. Through airlock: server-everything as the stdio upstream of `mcp serve --listen`.
gateway_file() {
  cat <<EOF
schema_version = 1
tenant_id = "conformance"
principal_id = "suite"
scopes = ["mcp.everything.call", "mcp.everything.read"]
origin_trust = "user"

[servers.everything]
command = "node"
args = ["$PWD/$EVERYTHING", "stdio"]
$1
# The suite calls every tool; none of server-everything's tools touches anything outside it.
default = { side_effect = "none", idempotency = "read_only", risk = "low" }
EOF
}
DATA="$WORK/data"
mkdir -p "$DATA"
gateway_file "expose_unprefixed = true" >"$WORK/gateway.toml"
UNPREFIXED=yes
if ! "$AIRLOCK_BIN" --data-dir "$DATA" mcp tools --config "$WORK/gateway.toml" >"$WORK/tools.json" 2>"$WORK/tools.err"; then
  if grep -q expose_unprefixed "$WORK/tools.json" "$WORK/tools.err"; then
    # A build without `expose_unprefixed` (SPEC §19.6): measure with the prefixed names, and say so.
    echo "mcp-conformance.sh: this airlock does not know expose_unprefixed; measuring with {server}__ prefixes"
    gateway_file "" >"$WORK/gateway.toml"
    UNPREFIXED=no
  else
    cat "$WORK/tools.json" "$WORK/tools.err" >&2
    exit 1
  fi
fi
"$AIRLOCK_BIN" --data-dir "$DATA" mcp serve --config "$WORK/gateway.toml" \
  --listen 127.0.0.1:0 --listen-no-auth </dev/null >/dev/null 2>"$WORK/airlock.log" &
PIDS+=($!)
AIRLOCK_URL=""
for _ in $(seq 300); do
  AIRLOCK_URL="$(sed -n 's/^airlock mcp serve: listening on //p' "$WORK/airlock.log" | head -1)"
  [ -n "$AIRLOCK_URL" ] && break
  sleep 0.1
done
if [ -z "$AIRLOCK_URL" ]; then
  echo "mcp-conformance.sh: airlock did not start listening:" >&2
  cat "$WORK/airlock.log" >&2
  exit 1
fi
run_suite "$AIRLOCK_URL" "$WORK/airlock"

echo
echo "=== @modelcontextprotocol/conformance $CONFORMANCE_VERSION, server scenarios (node $(node --version)) ==="
echo "directly against server-everything: $(wc -l <"$WORK/direct") of $(cat "$WORK/direct.total") pass"
sed 's/^/  /' "$WORK/direct"
echo "through airlock mcp serve --listen (expose_unprefixed: $UNPREFIXED): $(wc -l <"$WORK/airlock") of $(cat "$WORK/airlock.total") pass"
sed 's/^/  /' "$WORK/airlock"
LOST="$(comm -23 "$WORK/direct" "$WORK/airlock")"
if [ -n "$LOST" ]; then
  echo "FAIL: passing directly but not through airlock:"
  echo "$LOST" | sed 's/^/  /'
  exit 1
fi
echo "OK: every scenario that passes directly passes through airlock"
