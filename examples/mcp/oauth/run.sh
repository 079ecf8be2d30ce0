#!/usr/bin/env bash
# toolgate's /mcp as an OAuth protected resource, end to end with real
# processes and no mocks:
#
#   examples/mcp/oauth/run.sh target/debug/toolgate
#
# 1. the shop (../shop_mcp.py) over Streamable HTTP, on a database of its own;
# 2. a real OpenID provider, panva's oidc-provider (provider.mjs): dynamic
#    registration, PKCE, JWT access tokens for the gate's /mcp with the
#    person's `team`, automated login and consent, test-only controls to
#    rotate its keys and take its JWKS down;
# 3. `toolgate serve --config toolgate.toml` (this directory's): the gateway
#    example's deployment plus the provider as an `[[issuers]]` entry;
# 4. the official SDKs sign in on their own from the 401 (Python:
#    oauth_client.py, TypeScript: oauth_client.mjs) and call refund_order as
#    alice (team eu) and bob (team us); forge.mjs sends bad tokens; the
#    provider's keys go away, come back and rotate under a running gate.
# Ends "mcp oauth: N passed, 0 failed" and exits non-zero on any failure.
# Takes about 20 seconds.
set -euo pipefail
toolgate=$(realpath "${1:?usage: run.sh PATH_TO_TOOLGATE}")
here=$(cd "$(dirname "$0")" && pwd)
mcp=$(dirname "$here")
bash "$mcp/install.sh" >/dev/null
work=$(mktemp -d /tmp/toolgate-mcp-oauth.XXXXXX)
py="$mcp/.venv/bin/python"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 300); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2; exit 1
}

passed=0 failed=0
check() {
  local name=$1 pattern=$2 out=$3
  if grep -q -- "$pattern" <<<"$out"; then
    passed=$((passed + 1)); echo "ok   $name"
  else
    failed=$((failed + 1)); echo "FAIL $name: expected $pattern in:"; echo "$out" | cut -c1-600
  fi
}
# A field of the first JSON line holding KEY, e.g. `field "$out" oauth.registered.client_id`.
field() {
  python3 -c '
import json, sys
path = sys.argv[2].split(".")
for line in sys.argv[1].splitlines():
    try:
        doc = json.loads(line)
    except ValueError:
        continue
    if isinstance(doc, dict) and path[0] in doc:
        for p in path:
            doc = doc.get(p) if isinstance(doc, dict) else None
        print("" if doc is None else doc if isinstance(doc, str) else json.dumps(doc))
        break
' "$1" "$2"
}

shop_port=$(free_port)
gate_port=$(free_port)
idp_port=$(free_port)
gate="http://127.0.0.1:$gate_port"
url="$gate/mcp"
issuer="http://127.0.0.1:$idp_port"

"$py" "$mcp/shop_mcp.py" --db "$work/shop.sqlite" serve-http --port "$shop_port" >"$work/shop.log" 2>&1 &
pids+=($!)
node "$here/provider.mjs" "$idp_port" "$url" "$work/provider-jwks.json" >"$work/provider.out" 2>"$work/provider.log" &
pids+=($!)
wait_port "$shop_port"
wait_port "$idp_port"

cp "$here/policy.toml" "$here/policy.cedar" "$work/"
sed -e "s#127.0.0.1:8080#127.0.0.1:$gate_port#g" \
    -e "s#127.0.0.1:8931#127.0.0.1:$shop_port#" \
    -e "s#127.0.0.1:8940#127.0.0.1:$idp_port#" \
    -e "s#sqlite://toolgate-mcp-oauth.db#sqlite://$work/toolgate.db#" \
    "$here/toolgate.toml" > "$work/toolgate.toml"
export SHOP_DB_URL="sqlite://$work/shop.sqlite"

out=$("$toolgate" config check "$work/toolgate.toml" 2>&1) || { echo "$out" >&2; exit 1; }
"$toolgate" mcp import --upstream shop --config "$work/toolgate.toml" >/dev/null 2>"$work/import.log"
gate_pid=
start_gate() {
  "$toolgate" serve --config "$work/toolgate.toml" >>"$work/serve.out" 2>>"$work/serve.log" &
  gate_pid=$!
  pids+=($gate_pid)
  wait_port "$gate_port"
}
stop_gate() {
  kill "$gate_pid"
  wait "$gate_pid" 2>/dev/null || true
}
start_gate

refund() { printf '{"order_id": %s, "expected_version": 1, "amount_minor": 500, "reason": "damaged"}' "$1"; }
# Orders 1001, 1002, 1004, 1005 and 1006 are the eu team's, 1003 the us
# team's (shop_mcp.py, SEED).

# --- discovery: what a host finds before it has a token -------------------
out=$(curl -s -i -X POST -H 'content-type: application/json' -d '{}' "$url")
check "/mcp without a bearer: 401 naming the resource metadata" \
  "www-authenticate: Bearer resource_metadata=\"$gate/.well-known/oauth-protected-resource/mcp\"" "$out"
out=$(curl -s "$gate/.well-known/oauth-protected-resource/mcp" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("resource=%s authorization_servers=%s scopes_supported=%s" % (
    d.get("resource"), ",".join(d.get("authorization_servers", [])), ",".join(d.get("scopes_supported", []))))')
check "the resource metadata names /mcp, the provider and the refunds scope" \
  "^resource=$url authorization_servers=$issuer scopes_supported=refunds$" "$out"
out=$("$py" "$mcp/client.py" "$url" --token tg_mcp_example_agent_ana list)
check "the gateway example's API keys still work beside tokens" '"name": "refund_order"' "$out"

# --- the Python SDK signs alice in, and refunds an eu order ---------------
alice=$("$py" "$here/oauth_client.py" "$url" --login alice --token-out "$work/alice.token" \
  --list --call refund_order "$(refund 1001)" 2>"$work/python-alice.log" || true)
check "python SDK: alice signs in (registration, PKCE S256, resource = /mcp)" \
  "\"code_challenge_method\": \"S256\", .*\"resource\": \"$url\"" "$alice"
check "python SDK: her token is for /mcp, with refunds and team eu" \
  "\"aud\": \"$url\", \"client_id\": \"[^\"]*\", .*\"scope\": \"refunds\", \"sub\": \"alice\", \"team\": \"eu\"" "$alice"
check "python SDK: alice sees refund_order" '"name": "refund_order"' "$alice"
check "python SDK: alice's refund of eu order 1001 runs" '\\"refund_id\\"' "$alice"
alice_client=$(field "$alice" oauth.registered.client_id)

# --- the Node SDK signs bob in: the whole flow, then a tool call ----------
bob=$(node "$here/oauth_client.mjs" "$url" --login bob --list --call refund_order "$(refund 1001)" 2>"$work/node-bob.log" || true)
check "node SDK: bob signs in (401, metadata, registration, PKCE, token)" \
  "\"code_challenge_method\":\"S256\",.*\"resource\":\"$url\"},\"authorization_response_iss\":\"$issuer\"" "$bob"
check "node SDK: his token is bob's, team us, for /mcp" "\"team\":\"us\",.*\"sub\":\"bob\",.*\"aud\":\"$url\"" "$bob"
check "node SDK: bob sees refund_order" '"name":"refund_order"' "$bob"
check "node SDK: bob's refund of the same eu order 1001 is forbidden" '"outcome":"forbidden"' "$bob"
out=$(node "$here/oauth_client.mjs" "$url" --login alice --call refund_order "$(refund 1004)" 2>"$work/node-alice.log" || true)
check "node SDK: alice's refund of eu order 1004 runs" '\\"refund_id\\"' "$out"
out=$("$py" "$mcp/shop_mcp.py" --db "$work/shop.sqlite" count)
check "alice's two refunds reached the shop, bob's none" '"refund_order_calls": 2, "refunds": 2' "$out"

# --- the audit names the person and the client ---------------------------
audit() {
  python3 - "$work/toolgate.db" "$@" <<'EOF'
import sqlite3, sys
db, actor, via = sys.argv[1:4]
rows = sqlite3.connect(db).execute(
    "SELECT actor, via, tool, outcome, reason FROM toolgate_audit WHERE actor = ? AND via = ?",
    (actor, via)).fetchall()
for r in rows:
    print("audit actor=%s via=%s tool=%s outcome=%s reason=%s" % r)
EOF
}
out=$(audit alice "$alice_client")
check "an audit entry names alice and her client ($alice_client)" "audit actor=alice via=$alice_client tool=refund_order" "$out"
check "and it is alice's executed refund" "outcome=executed" "$out"
out=$(audit bob "$(field "$bob" oauth.registered.client_id)")
check "bob's refund was denied by the policy, not for a missing Agent entity" "outcome=forbidden reason=not_authorized" "$out"

# --- a caller of /v1/decisions may not name the identity's scope field ----
decision=$(python3 -c '
import json, sys
arguments = json.dumps({"order_id": 1005, "expected_version": 1, "amount_minor": 500, "reason": "damaged"})
call = {"id": "call_1", "type": "function", "function": {"name": "refund_order", "arguments": arguments}}
response = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1764547200, "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
print(json.dumps({"provider": "openai-chat", "response": response,
                  "scope": {"order_id": 1005, "version_seen": 1, "agent": "alice"}}))')
out=$(curl -s -w '\nHTTP %{http_code}' -X POST -H "authorization: Bearer $(cat "$work/alice.token")" \
  -H 'content-type: application/json' -d "$decision" "$gate/v1/decisions")
check "/v1/decisions with alice's token naming scope.agent: 422 identity_scope_field" \
  '"code":"identity_scope_field"}.*HTTP 422' "$(tr '\n' ' ' <<<"$out")"

# --- bad tokens: each refused with its reason, on both doors --------------
out=$(node "$here/forge.mjs" bad "$gate" "$issuer" "$url" "$work/provider-jwks.json")
check "control: a token signed ES256 with the provider's EC key is accepted" \
  '"case":"es256_with_provider_key","door":"mcp","status":200' "$out"
for expected in other_audience:invalid_token expired:invalid_token no_subject:no_principal \
  alg_none_with_signature:malformed_token hs256_public_key_as_secret:algorithm_not_allowed \
  unknown_kid:unknown_key other_issuer:unknown_issuer; do
  case=${expected%%:*} code=${expected#*:}
  for door in mcp v1; do
    check "$case on /$door: 401 $code" "\"case\":\"$case\",\"door\":\"$door\",\"status\":401,\"code\":\"$code\"" "$out"
  done
done
# `alg: none` as RFC 7519 writes it has an empty third part: not a JWT's
# shape to toolgate, so it is read as an (unknown) API key, never a token.
for door in mcp v1; do
  check "alg_none (empty signature) on /$door: 401, not read as a token" \
    "\"case\":\"alg_none\",\"door\":\"$door\",\"status\":401,\"code\":\"unauthorized\"" "$out"
done
check "/mcp's 401 for a bad token: error=\"invalid_token\", the reason, the metadata" \
  "\"case\":\"expired\",\"door\":\"mcp\",\"status\":401,\"code\":\"invalid_token\",\"challenge\":\"Bearer error=\\\\\"invalid_token\\\\\", error_description=\\\\\"invalid_token\\\\\", resource_metadata=" "$out"

# --- a real token without the refunds scope (alice declines it) ----------
out=$("$py" "$here/oauth_client.py" "$url" --login alice --decline refunds \
  --token-out "$work/alice-no-refunds.token" --list 2>"$work/python-decline.log" || true)
check "alice declines refunds: her token has no scope" '^sub=alice scope=$' \
  "sub=$(field "$out" oauth.token.claims.sub) scope=$(field "$out" oauth.token.claims.scope)"
check "without refunds, tools/list shows no refund_order" '"tools": \[\]' "$out"
out=$(node "$here/forge.mjs" step-up "$gate" "$work/alice-no-refunds.token" refund_order "$(refund 1005)")
check "without refunds, tools/call is 403 insufficient_scope naming refunds" \
  '"status":403,"challenge":"Bearer error=\\"insufficient_scope\\", scope=\\"refunds\\"' "$out"

# --- the provider's keys: an outage, a restart, a rotation ---------------
probe() { node "$here/forge.mjs" probe "$gate" "$@"; }
out=$(probe "$work/alice.token" up)
check "alice's token verifies (its key is cached now)" '"door":"mcp","status":200' "$out"
curl -s -X POST "$issuer/_harness/jwks-down" >/dev/null
sleep 1.2 # past refetch_secs: a fetch would be allowed, and would fail
out=$(probe "$work/alice.token" cached)
check "JWKS down: a token whose key is cached still verifies" '"door":"mcp","status":200' "$out"
stop_gate
start_gate
out=$(probe "$work/alice.token" fresh mcp)
check "JWKS down, gate restarted (nothing cached): 401 keys_unavailable on /mcp" \
  '"door":"mcp","status":401,"code":"keys_unavailable"' "$out"
# Within refetch_secs of that failed fetch no fetch is tried, and the
# answer still says why; past it, /v1 tries again, and fails the same way.
out=$(probe "$work/alice.token" fresh v1)
check "JWKS down, within refetch_secs: 401 keys_unavailable, not unknown_key" '"door":"v1","status":401,"code":"keys_unavailable"' "$out"
sleep 1.2
out=$(probe "$work/alice.token" fresh v1)
check "JWKS down, gate restarted: 401 keys_unavailable on /v1" '"door":"v1","status":401,"code":"keys_unavailable"' "$out"
curl -s -X POST "$issuer/_harness/jwks-up" >/dev/null
sleep 1.2
out=$(probe "$work/alice.token" back)
check "JWKS back: the token verifies again" '"door":"mcp","status":200' "$out"

new_kid=$(curl -s -X POST "$issuer/_harness/rotate" | python3 -c 'import json,sys; print([k for k in json.load(sys.stdin)["kids"] if k.startswith("rs256")][0])')
sleep 1.2 # past refetch_secs since the last fetch
out=$("$py" "$here/oauth_client.py" "$url" --login alice --token-out "$work/alice-rotated.token" --list 2>"$work/python-rotated.log" || true)
check "rotated: the provider signs with its new key" "\"kid\": \"$new_kid\"" "$out"
check "rotated: the gate fetches it and the new token works" '"name": "refund_order"' "$out"
out=$(probe "$work/alice.token" rotated-out)
check "rotated: a token of the removed key is refused, 401 unknown_key" '"door":"mcp","status":401,"code":"unknown_key"' "$out"

echo "mcp oauth: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
