#!/usr/bin/env bash
# SPEC §19.7's conformance comparison: the official MCP conformance suite (npm
# @modelcontextprotocol/conformance, pinned) scores the project's own conformance server
# (tests/mcp/conformance_server.py, Python `mcp` SDK) twice per suite version: directly, over the
# server's own Streamable HTTP transport, and through `airlock mcp serve --listen 127.0.0.1:0
# --listen-no-auth` with the same server as its stdio upstream (`expose_unprefixed = true`).
#
#   - 0.1.16, `server` (its active suite, the 2025-11-25 scenarios);
#   - 0.2.0-alpha.12, `server --requirements 2026-07-28` (what the 2026-07-28 revision requires,
#     run at the 2026-07-28 wire). Its `not_scored` entries (the tasks-* extension, pending
#     scenarios) are run and printed, but never decide the outcome.
#
# It prints both pass lists per version, the failing checks of every scenario lost through
# airlock, and a summary. It fails when a scored scenario passes directly but not through airlock,
# or when our own server fails a scored scenario directly.
#
#   bash .ci/mcp-conformance.sh
#
# Needs Node.js and .ci/.venv (made by `.ci/mcp.sh install`, run here when missing). Each suite
# version goes into its own ignored prefix, .ci/.conformance/<version>. AIRLOCK_BIN names a
# prebuilt binary (default: `cargo build -p airlock`, then target/debug/airlock).
set -euo pipefail
cd "$(dirname "$0")/.."
SUITES=(0.1.16 0.2.0-alpha.12)
# What each version runs: 0.1.16's default (active) suite, alpha.12's 2026-07-28 requirement set.
declare -A SUITE_ARGS=([0.1.16]="" [0.2.0-alpha.12]="--requirements 2026-07-28")
PREFIX=.ci/.conformance
VENV_PYTHON="$PWD/.ci/.venv/bin/python"
SERVER="$PWD/tests/mcp/conformance_server.py"

# The venv as .ci/lib.sh's ci_venv leaves it (its copy of the requirements matches); Node.js too.
if ! command -v node >/dev/null 2>&1 || ! [ -x "$VENV_PYTHON" ] ||
  ! cmp -s .ci/requirements.txt .ci/.venv/requirements.txt; then
  bash .ci/mcp.sh install
fi

# Node 20: the suite's entry (dist/index.js, one ESM bundle) imports `globSync` from `fs`, a
# Node 22 API that only its `tier-check` command calls. An ESM named import of a missing export
# fails at link time, before any code runs, so a `--require` preload defining fs.globSync cannot
# help. We generate, next to the original (so its package imports still resolve), a copy whose
# `fs` import lacks `globSync` and which declares a function of the same local name that throws
# if `tier-check` ever calls it. The server scenarios never do. Node >= 22 runs the original.
node_major="$(node -p 'process.versions.node.split(".")[0]')"
declare -A ENTRY
for version in "${SUITES[@]}"; do
  dir="$PREFIX/$version/node_modules/@modelcontextprotocol/conformance"
  if ! grep -q "\"version\": \"$version\"" "$dir/package.json" 2>/dev/null; then
    echo "mcp-conformance.sh: installing @modelcontextprotocol/conformance $version into $PREFIX/$version"
    mkdir -p "$PREFIX/$version"
    npm install --prefix "$PREFIX/$version" --no-save --no-audit --no-fund --loglevel=error \
      "@modelcontextprotocol/conformance@$version"
  fi
  ENTRY[$version]="$dir/dist/index.js"
  if [ "$node_major" -lt 22 ]; then
    node - "$dir/dist/index.js" "$dir/dist/index-node20.js" <<'EOF'
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
    ENTRY[$version]="$dir/dist/index-node20.js"
  fi
done

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

# run_suite VERSION URL OUT: runs VERSION's server scenarios against URL, keeping its output in
# OUT.log and its per-scenario checks.json under OUT.results. From the `=== SUMMARY ===` block
# (one `✓ name: …` or `✗ name: …` line per scenario run, not_scored ones included) it writes
# OUT.all (every scenario run), OUT.pass (those whose checks all passed) and OUT.unscored (the
# names under `Not scored for …`, printed after the summary as `  ✓ name (reason)`), sorted.
run_suite() {
  local version=$1 url=$2 out=$3
  # shellcheck disable=SC2086 # SUITE_ARGS holds separate words
  node "${ENTRY[$version]}" server --url "$url" ${SUITE_ARGS[$version]} -o "$out.results" >"$out.log" 2>&1 || true
  if ! grep -q '^=== SUMMARY ===' "$out.log"; then
    echo "mcp-conformance.sh: suite $version printed no summary against $url:" >&2
    tail -20 "$out.log" >&2
    exit 1
  fi
  sed -n '/^=== SUMMARY ===/,/^Total:/p' "$out.log" | sed -n 's/^[✓✗] \([^:]*\):.*/\1/p' | sort >"$out.all"
  sed -n '/^=== SUMMARY ===/,/^Total:/p' "$out.log" | sed -n 's/^✓ \([^:]*\):.*/\1/p' | sort >"$out.pass"
  sed -n '/^Not scored for /,$p' "$out.log" | sed -n 's/^  [✓✗] \([^ ]*\) (.*/\1/p' | sort >"$out.unscored"
}

# failed_checks RESULTS SCENARIO: the FAILURE checks of SCENARIO's newest checks.json under
# RESULTS (directories `server-<scenario>-<timestamp>`), one `id: errorMessage` line each.
failed_checks() {
  node - "$1" "$2" <<'EOF'
const fs = require("fs"), path = require("path");
const [root, scenario] = process.argv.slice(2);
const stamp = /^server-(.*)-\d{4}-\d\d-\d\dT[\d-]+Z$/;
const dirs = fs.existsSync(root)
  ? fs.readdirSync(root).filter((d) => (d.match(stamp) || [])[1] === scenario).sort()
  : [];
if (dirs.length === 0) { console.log("(no checks.json found)"); process.exit(0); }
const checks = JSON.parse(fs.readFileSync(path.join(root, dirs[dirs.length - 1], "checks.json"), "utf8"));
for (const c of checks.filter((c) => c.status === "FAILURE")) {
  console.log(`${c.id}: ${(c.errorMessage || c.description || "").replace(/\s+/g, " ")}`);
}
EOF
}

# 1. Our server directly, over its own Streamable HTTP transport.
DIRECT_PORT="$(free_port)"
"$VENV_PYTHON" "$SERVER" --http "$DIRECT_PORT" >"$WORK/server.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$DIRECT_PORT/mcp"
DIRECT_URL="http://localhost:$DIRECT_PORT/mcp"

# 2. Through airlock: the same server as the stdio upstream of `mcp serve --listen`.
gateway_file() {
  cat <<EOF
schema_version = 1
tenant_id = "conformance"
principal_id = "suite"
scopes = ["mcp.conformance.call", "mcp.conformance.read"]
origin_trust = "user"

[servers.conformance]
command = "$VENV_PYTHON"
args = ["$SERVER", "--stdio"]
$1
# The suite calls every tool; none of the conformance server's tools touches anything outside it.
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

# 3. Each suite version against both, then the comparison.
FAILED=0
SUMMARY=()
count() { if [ -s "$1" ]; then wc -l <"$1" | tr -d ' '; else echo 0; fi; }

# report_failed TITLE LIST RESULTS: when LIST names scenarios, marks the run failed and prints
# each with its failing checks from the suite's RESULTS.
report_failed() {
  [ -s "$2" ] || return 0
  FAILED=1
  echo "FAIL: $1:"
  while read -r name; do
    echo "  $name"
    failed_checks "$3" "$name" | sed 's/^/    /'
  done <"$2"
}
for version in "${SUITES[@]}"; do
  tag="${version//./_}"
  run_suite "$version" "$DIRECT_URL" "$WORK/direct-$tag"
  run_suite "$version" "$AIRLOCK_URL" "$WORK/airlock-$tag"
  d="$WORK/direct-$tag" a="$WORK/airlock-$tag"
  # Scored: every scenario run except the not_scored ones (0.1.16 has none).
  sort -u "$d.all" "$a.all" | comm -23 - "$d.unscored" >"$d.scored"
  comm -12 "$d.pass" "$d.scored" >"$d.scored-pass"
  comm -12 "$a.pass" "$d.scored" >"$a.scored-pass"
  comm -23 "$d.scored" "$d.pass" >"$d.scored-fail"
  comm -23 "$d.scored-pass" "$a.pass" >"$d.lost"
  scored_total="$(count "$d.scored")"

  echo
  echo "=== @modelcontextprotocol/conformance $version, server ${SUITE_ARGS[$version]:-(active suite)} (node $(node --version)) ==="
  echo "directly against tests/mcp/conformance_server.py: $(count "$d.scored-pass") of $scored_total scored scenarios pass"
  sed 's/^/  /' "$d.scored-pass"
  echo "through airlock mcp serve --listen (expose_unprefixed: $UNPREFIXED): $(count "$a.scored-pass") of $scored_total scored scenarios pass"
  sed 's/^/  /' "$a.scored-pass"
  if [ -s "$d.unscored" ]; then
    echo "not scored (printed only; never fails the run), directly / through airlock:"
    while read -r name; do
      grep -qx "$name" "$d.pass" && direct=pass || direct=FAIL
      grep -qx "$name" "$a.pass" && through=pass || through=FAIL
      echo "  $name: $direct / $through"
    done <"$d.unscored"
  fi
  report_failed "our own conformance server fails scored scenarios directly" "$d.scored-fail" "$d.results"
  report_failed "passing directly but not through airlock" "$d.lost" "$a.results"
  lost="$(paste -sd, "$d.lost" | sed 's/,/, /g')"
  SUMMARY+=("$version: directly $(count "$d.scored-pass")/$scored_total, through airlock $(count "$a.scored-pass")/$scored_total, lost: ${lost:-none}")
done

echo
echo "=== summary ==="
printf '%s\n' "${SUMMARY[@]}"
if [ "$FAILED" -ne 0 ]; then
  exit 1
fi
echo "OK: our server passes every scored scenario directly, and every one passes through airlock"
