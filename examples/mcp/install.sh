#!/usr/bin/env bash
# Installs what the MCP example runs, inside this directory only (no global
# installs): a Python virtual environment in .venv with requirements.txt, and
# the Node packages of node/package-lock.json in node/node_modules (the
# TypeScript SDK client, server-everything, the conformance suite).
#
#   examples/mcp/install.sh        idempotent; a second run only checks
#
# Needs python3 (3.10+, with venv) and Node 20 with npm. .ci/run calls it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [[ ! -x "$here/.venv/bin/python" ]]; then
  python3 -m venv "$here/.venv"
fi
if ! "$here/.venv/bin/python" -c 'import mcp, httpx2' 2>/dev/null ||
   ! "$here/.venv/bin/pip" freeze 2>/dev/null | grep -qx 'mcp==2.3.0'; then
  "$here/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
fi

# `npm ci` installs exactly the lock file; skipped when node_modules was
# installed from this very lock (a copy of it is kept there as a stamp).
stamp="$here/node/node_modules/.installed-from-lock.json"
if ! cmp -s "$here/node/package-lock.json" "$stamp" 2>/dev/null; then
  (cd "$here/node" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$here/node/package-lock.json" "$stamp"
fi
echo "mcp example: python $("$here/.venv/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))'), node $(node --version), sdk $(node -p 'require("'"$here"'/node/node_modules/@modelcontextprotocol/sdk/package.json").version')"
