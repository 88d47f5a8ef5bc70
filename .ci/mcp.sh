#!/usr/bin/env bash
# SPEC §19.5 peers for the MCP gateway's end-to-end tests (tests/tests/mcp_gateway.rs):
#   - the Python `mcp` SDK (PyPI, pinned in .ci/requirements.txt) in CI's one virtual environment,
#     .ci/.venv: the client of the scenarios and the SDK of the project's own test server
#     (tests/mcp/airlock_test_server.py);
#   - @modelcontextprotocol/server-filesystem and @modelcontextprotocol/server-everything (npm,
#     pinned) in a local prefix, .ci/.mcp/npm, run with the machine's Node.js 20.
# Nothing is installed globally. Works as root on a fresh Debian machine (installs python3-venv,
# nodejs and npm from Debian when missing).
#
#   bash .ci/mcp.sh install   # install what is missing (what .ci/run does before the tests)
#   bash .ci/mcp.sh           # install, then run the gateway scenarios
set -euo pipefail
cd "$(dirname "$0")/.."
FILESYSTEM_VERSION=2026.8.31
EVERYTHING_VERSION=2026.8.31
PREFIX=.ci/.mcp

. .ci/lib.sh
command -v node >/dev/null 2>&1 || apt_install nodejs
command -v npm >/dev/null 2>&1 || apt_install npm
ci_venv
MCP_SDK_VERSION="$("$CI_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')"

installed() {
  grep -q "\"version\": \"$2\"" "$PREFIX/npm/node_modules/@modelcontextprotocol/$1/package.json" 2>/dev/null
}
if ! installed server-filesystem "$FILESYSTEM_VERSION" || ! installed server-everything "$EVERYTHING_VERSION"; then
  echo "mcp.sh: installing server-filesystem $FILESYSTEM_VERSION and server-everything $EVERYTHING_VERSION into $PREFIX/npm"
  mkdir -p "$PREFIX/npm"
  npm install --prefix "$PREFIX/npm" --no-save --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION" \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION"
fi
echo "mcp.sh: node $(node --version), mcp $MCP_SDK_VERSION, server-filesystem $FILESYSTEM_VERSION, server-everything $EVERYTHING_VERSION"

if [ "${1:-}" = "install" ]; then exit 0; fi
cargo build -q -p airlock
cargo test -p airlock-e2e --test mcp_gateway
