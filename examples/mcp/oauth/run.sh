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
#    provider's keys go away, come back and rotate under a running gate;
# 5. token exchange (RFC 8693): for each tools/call by a person the gate
#    calls the shop with a token the provider issued for the shop in
#    exchange for the person's (aud = the shop, act = toolgate), cached per
#    person; the shop logs what each tools/call's Authorization carried
#    (shop_mcp.py --log-bearer) and never sees a caller's own token; an API
#    key's tools/call of a shop tool is refused (upstream_needs_person).
#    Then the provider's exchange grant on its own, with curl.
# Ends "mcp oauth: N passed, 0 failed" and exits non-zero on any failure.
# Takes about 25 seconds.
#
# TOOLGATE_OAUTH_EXCHANGE=0 strips [upstreams.token_exchange] from the
# gate's configuration, for a toolgate without token exchange: the checks
# of the gate's exchanges are skipped, the provider's own still run, and
# the shop must then get no bearer at all.
set -euo pipefail
exchange=${TOOLGATE_OAUTH_EXCHANGE:-1}
[[ $exchange == 0 || $exchange == 1 ]] || { echo "TOOLGATE_OAUTH_EXCHANGE must be 0 or 1" >&2; exit 2; }
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

passed=0 failed=0 skipped=0
exchanging() { [[ $exchange == 1 ]]; }
skip() { skipped=$((skipped + 1)); echo "skip $1 (TOOLGATE_OAUTH_EXCHANGE=0)"; }
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
# The sha256 of a token file, as shop_mcp.py --log-bearer and the
# provider's /_harness/exchanges name tokens.
sha() { python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1]).read().strip().encode()).hexdigest())' "$1"; }
# The shop's bearer log: its INDEXth (1-based) tools/call of TOOL, as
# "tool=… sub=… aud=… act=<act.sub> sha256=…", or "tool=… bearer=null".
bearer() {
  python3 - "$bearers" "$1" "$2" <<'EOF'
import json, sys
path, tool, index = sys.argv[1], sys.argv[2], int(sys.argv[3])
calls = [c for c in map(json.loads, open(path)) if c["tool"] == tool]
if len(calls) < index:
    print("no tools/call %d of %s in the shop's bearer log (%d there)" % (index, tool, len(calls)))
    sys.exit()
b = calls[index - 1]["bearer"]
if b is None:
    print("tool=%s bearer=null" % tool)
else:
    act = b.get("act")
    print("tool=%s sub=%s aud=%s act=%s sha256=%s" % (
        tool, b.get("sub"), b.get("aud"), act.get("sub") if isinstance(act, dict) else act, b["sha256"]))
EOF
}
sha_of() { sed -n 's/.*sha256=\([0-9a-f]*\).*/\1/p' <<<"$1"; }
exchanges() { curl -s "$issuer/_harness/exchanges"; }
# The provider's record of the last token exchange: what the gate sent.
last_exchange() {
  exchanges | python3 -c '
import json, sys
e = json.load(sys.stdin)["last"] or {}
keys = ("client_id", "client_auth", "grant_type", "subject_token_type", "requested_token_type",
        "resource", "audience", "scope", "subject_sha256", "issued_sha256")
print(" ".join("%s=%s" % (k, e.get(k)) for k in keys))'
}
last_issued() { last_exchange | sed -n 's/.* issued_sha256=\([0-9a-f]*\)$/\1/p'; }

shop_port=$(free_port)
gate_port=$(free_port)
idp_port=$(free_port)
gate="http://127.0.0.1:$gate_port"
url="$gate/mcp"
issuer="http://127.0.0.1:$idp_port"
shop_url="http://127.0.0.1:$shop_port/mcp"
bearers="$work/shop-bearers.jsonl"
touch "$bearers"
# The gate's secret as the provider's client `toolgate`, for both of them.
TOOLGATE_EXCHANGE_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
export TOOLGATE_EXCHANGE_SECRET

"$py" "$mcp/shop_mcp.py" --db "$work/shop.sqlite" serve-http --port "$shop_port" --log-bearer "$bearers" >"$work/shop.log" 2>&1 &
pids+=($!)
node "$here/provider.mjs" "$idp_port" "$url" "$work/provider-jwks.json" "$shop_url" >"$work/provider.out" 2>"$work/provider.log" &
pids+=($!)
wait_port "$shop_port"
wait_port "$idp_port"

cp "$here/policy.toml" "$here/policy.cedar" "$work/"
sed -e "s#127.0.0.1:8080#127.0.0.1:$gate_port#g" \
    -e "s#127.0.0.1:8931#127.0.0.1:$shop_port#" \
    -e "s#127.0.0.1:8940#127.0.0.1:$idp_port#" \
    -e "s#sqlite://toolgate-mcp-oauth.db#sqlite://$work/toolgate.db#" \
    "$here/toolgate.toml" > "$work/toolgate.toml"
if ! exchanging; then
  # The section, up to the next table header.
  awk '/^\[upstreams\.token_exchange\]/ { skip = 1; next } /^\[/ { skip = 0 } !skip' \
    "$work/toolgate.toml" >"$work/toolgate.toml.tmp"
  mv "$work/toolgate.toml.tmp" "$work/toolgate.toml"
fi
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

# --- token exchange: the shop gets a token for itself, not alice's --------
seen=$(bearer refund_order 1)
if exchanging; then
  check "the shop got, for alice's refund, a token for itself: sub alice, aud the shop, act toolgate" \
    "^tool=refund_order sub=alice aud=$shop_url act=toolgate sha256=" "$seen"
  alice_exchanged=$(sha_of "$seen")
  check "that token is not alice's own" '^different$' \
    "$([[ -n $alice_exchanged && $alice_exchanged != "$(sha "$work/alice.token")" ]] && echo different || echo "not different: $seen")"
  check "the provider exchanged a token for alice once" '^1$' "$(field "$(exchanges)" by_sub.alice)"
  # resource: the upstream's url (the default); no audience, no scope.
  check "the gate's exchange: client_secret_basic, alice's token for one for the shop, the token the shop got" \
    "^client_id=toolgate client_auth=client_secret_basic grant_type=urn:ietf:params:oauth:grant-type:token-exchange subject_token_type=urn:ietf:params:oauth:token-type:access_token requested_token_type=urn:ietf:params:oauth:token-type:access_token resource=$shop_url audience=None scope=None subject_sha256=$(sha "$work/alice.token") issued_sha256=$alice_exchanged$" \
    "$(last_exchange)"
else
  check "without token exchange, the shop gets no bearer for alice's refund" '^tool=refund_order bearer=null$' "$seen"
  for c in "the shop's token for alice's refund" "not alice's own" "one exchange for alice" "the gate's exchange request"; do
    skip "$c"
  done
fi
# A second call with the same token, well within the exchanged token's
# lifetime: the gate has it cached, per (person, upstream).
out=$(node "$here/forge.mjs" step-up "$gate" "$work/alice.token" refund_order "$(refund 1002)")
check "alice's second call, same token (raw HTTP): her refund of eu order 1002 runs" '"status":200,.*refund_id.*isError\\":false' "$out"
if exchanging; then
  check "alice's second call: no new exchange" '^1$' "$(field "$(exchanges)" by_sub.alice)"
  check "the shop got the same exchanged token again" \
    "^tool=refund_order sub=alice aud=$shop_url act=toolgate sha256=$alice_exchanged$" "$(bearer refund_order 2)"
else
  skip "alice's second call: no new exchange"
  skip "the shop got the same exchanged token again"
fi

# --- the Node SDK signs bob in: the whole flow, then a tool call ----------
bob=$(node "$here/oauth_client.mjs" "$url" --login bob --token-out "$work/bob-first.token" --list --call refund_order "$(refund 1001)" 2>"$work/node-bob.log" || true)
check "node SDK: bob signs in (401, metadata, registration, PKCE, token)" \
  "\"code_challenge_method\":\"S256\",.*\"resource\":\"$url\"},\"authorization_response_iss\":\"$issuer\"" "$bob"
check "node SDK: his token is bob's, team us, for /mcp" "\"team\":\"us\",.*\"sub\":\"bob\",.*\"aud\":\"$url\"" "$bob"
check "node SDK: bob sees refund_order" '"name":"refund_order"' "$bob"
check "node SDK: bob's refund of the same eu order 1001 is forbidden" '"outcome":"forbidden"' "$bob"
out=$(node "$here/oauth_client.mjs" "$url" --login alice --token-out "$work/node-alice.token" \
  --call refund_order "$(refund 1004)" 2>"$work/node-alice.log" || true)
check "node SDK: alice's refund of eu order 1004 runs" '\\"refund_id\\"' "$out"
seen=$(bearer refund_order 3)
if exchanging; then
  # Another token of hers (a new sign-in): the cached token was exchanged
  # for the old one, so this one is exchanged anew.
  check "alice's call with another token of hers: exchanged anew" '^2$' "$(field "$(exchanges)" by_sub.alice)"
  check "the shop got the token exchanged for that one" \
    "^tool=refund_order sub=alice aud=$shop_url act=toolgate sha256=$(last_issued)$" "$seen"
  check "the provider exchanged her new token" "subject_sha256=$(sha "$work/node-alice.token") " "$(last_exchange)"
else
  check "without token exchange, the shop gets no bearer for alice's third refund" '^tool=refund_order bearer=null$' "$seen"
  for c in "exchanged anew" "the token exchanged for that one" "her new token"; do skip "$c"; done
fi
out=$("$py" "$mcp/shop_mcp.py" --db "$work/shop.sqlite" count)
check "alice's three refunds reached the shop, bob's none" '"refund_order_calls": 3, "refunds": 3' "$out"

# --- bob's exchange, for a refund of his team's order ---------------------
out=$(node "$here/oauth_client.mjs" "$url" --login bob --token-out "$work/bob.token" \
  --call refund_order "$(refund 1003)" 2>"$work/node-bob-us.log" || true)
check "node SDK: bob's refund of us order 1003 runs" '\\"refund_id\\"' "$out"
seen=$(bearer refund_order 4)
if exchanging; then
  # 1 or 2: his forbidden call above may have exchanged his first token
  # already (the gate exchanges before the decision); this call's token is
  # another one.
  check "bob's call got an exchange of his own" '^[12]$' "$(field "$(exchanges)" by_sub.bob)"
  check "the shop got bob's exchanged token: sub bob, aud the shop, act toolgate" \
    "^tool=refund_order sub=bob aud=$shop_url act=toolgate sha256=" "$seen"
  bob_exchanged=$(sha_of "$seen")
  check "that token is neither bob's own nor alice's exchanged one" '^different$' \
    "$([[ -n $bob_exchanged && $bob_exchanged != "$(sha "$work/bob.token")" && $bob_exchanged != "$alice_exchanged" ]] &&
      echo different || echo "not different: $seen")"
  check "the provider exchanged bob's token, as the gate received it, for that one" \
    "subject_sha256=$(sha "$work/bob.token") issued_sha256=$bob_exchanged$" "$(last_exchange)"
else
  check "without token exchange, the shop gets no bearer for bob's refund" '^tool=refund_order bearer=null$' "$seen"
  for c in "bob's exchange" "bob's exchanged token" "not bob's own" "bob's exchange request"; do skip "$c"; done
fi
out=$("$py" "$mcp/shop_mcp.py" --db "$work/shop.sqlite" count)
check "bob's refund reached the shop" '"refund_order_calls": 4, "refunds": 4' "$out"

# --- an API key has no person's token to exchange -------------------------
if exchanging; then
  before=$(field "$(exchanges)" count)
  out=$("$py" "$mcp/client.py" "$url" --token tg_mcp_example_agent_ana call refund_order "$(refund 1006)" 2>&1 || true)
  check "an API key's tools/call of refund_order is refused: upstream_needs_person" 'upstream_needs_person' "$out"
  out=$("$py" "$mcp/shop_mcp.py" --db "$work/shop.sqlite" count)
  check "and it reached neither the shop nor the provider" \
    "^{\"refund_order_calls\": 4, \"refunds\": 4} exchanges=$before$" "$out exchanges=$(field "$(exchanges)" count)"
else
  # Without token exchange the key's refund would run: it is not sent.
  skip "an API key's tools/call is refused"
  skip "it reached neither the shop nor the provider"
fi

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

# --- the shop never saw a caller's token ----------------------------------
# Every tools/call the shop received, against every token the run obtained
# (each sign-in above wrote its token to a *.token file).
out=$(python3 - "$bearers" "$work"/*.token <<'EOF'
import hashlib, json, sys
calls = [json.loads(line) for line in open(sys.argv[1])]
callers = {hashlib.sha256(open(p).read().strip().encode()).hexdigest() for p in sys.argv[2:]}
leaked = [c for c in calls if c["bearer"] and c["bearer"]["sha256"] in callers]
exchanged = [c for c in calls if c["bearer"] and (c["bearer"].get("act") or {}).get("sub") == "toolgate"]
print("calls=%d caller_tokens=%d leaked=%d exchanged=%d" % (len(calls), len(callers), len(leaked), len(exchanged)))
EOF
)
if exchanging; then
  check "the shop's 4 tools/calls carried none of the run's 6 tokens, each an exchanged one" \
    '^calls=4 caller_tokens=6 leaked=0 exchanged=4$' "$out"
else
  check "the shop's 4 tools/calls carried none of the run's 6 tokens, nor any bearer" \
    '^calls=4 caller_tokens=6 leaked=0 exchanged=0$' "$out"
fi

# --- the provider's token exchange grant, on its own ----------------------
# Requests as the gate sends them (client_secret_basic, RFC 8693 2.1):
#   te SUBJECT_TOKEN_FILE RESOURCE|- [more curl arguments]
te() {
  local subject=$1 resource=$2
  shift 2
  local args=(-u "toolgate:$TOOLGATE_EXCHANGE_SECRET"
    --data-urlencode "grant_type=urn:ietf:params:oauth:grant-type:token-exchange"
    --data-urlencode "subject_token@$subject"
    --data-urlencode "subject_token_type=urn:ietf:params:oauth:token-type:access_token"
    --data-urlencode "requested_token_type=urn:ietf:params:oauth:token-type:access_token")
  [[ $resource == - ]] || args+=(--data-urlencode "resource=$resource")
  curl -s -w ' HTTP %{http_code}' "${args[@]}" "$@" "$issuer/token"
}
out=$(te "$work/alice-rotated.token" "$shop_url")
check "exchange by hand: 200, an access token, Bearer, 120 s at most, scope refunds" \
  '^{"access_token":"[^"]*","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":1[01][0-9],"scope":"refunds"} HTTP 200$' \
  "$(sed 's/"expires_in":120,/"expires_in":119,/' <<<"$out")"
python3 -c 'import json, sys; print(json.loads(sys.argv[1].rsplit(" HTTP", 1)[0])["access_token"], end="")' "$out" \
  >"$work/exchanged.jwt" 2>/dev/null || true
out=$(node "$here/forge.mjs" verify "$issuer" "$work/exchanged.jwt")
check "the exchanged token verifies with the provider's JWKS: RS256, its new key, typ at+jwt" \
  "^{\"verified\":true,\"header\":{\"alg\":\"RS256\",\"kid\":\"$new_kid\",\"typ\":\"at+jwt\"}" "$out"
check "its claims: alice, client and actor toolgate, team eu, scope refunds, iss the provider, aud the shop" \
  "\"claims\":{\"sub\":\"alice\",\"client_id\":\"toolgate\",\"act\":{\"sub\":\"toolgate\"},\"team\":\"eu\",\"scope\":\"refunds\",\"iss\":\"$issuer\",\"aud\":\"$shop_url\",\"iat\":[0-9]*,\"exp\":[0-9]*,\"jti\":\"[0-9a-f]\{32\}\"}" "$out"
check "it lives 120 s at most" '^ok$' "$(python3 -c '
import json, sys
c = json.loads(sys.argv[1])["claims"]
print("ok" if 0 < c["exp"] - c["iat"] <= 120 else c)' "$out" 2>&1)"
out=$(te "$work/alice-rotated.token" "$shop_url" --data-urlencode "scope=openid")
check "a scope beyond the subject token's: 400 invalid_scope" '"error":"invalid_scope".* HTTP 400$' "$out"
out=$(te "$work/alice-rotated.token" "http://127.0.0.1:9/another-upstream")
check "another resource: 400 invalid_target" '"error":"invalid_target".* HTTP 400$' "$out"
out=$(te "$work/alice-rotated.token" -)
check "no resource: 400 invalid_target" '"error":"invalid_target".* HTTP 400$' "$out"
out=$(te "$work/alice-rotated.token" "$shop_url" --data-urlencode "audience=http://127.0.0.1:9/another-upstream")
check "an audience other than the resource: 400 invalid_target" '"error":"invalid_target".* HTTP 400$' "$out"
out=$(curl -s -w ' HTTP %{http_code}' -u "toolgate:$TOOLGATE_EXCHANGE_SECRET" \
  --data-urlencode "grant_type=urn:ietf:params:oauth:grant-type:token-exchange" \
  --data-urlencode "subject_token@$work/alice-rotated.token" \
  --data-urlencode "subject_token_type=urn:ietf:params:oauth:token-type:id_token" \
  --data-urlencode "resource=$shop_url" "$issuer/token")
check "a subject_token_type other than access_token: 400 invalid_request" '"error":"invalid_request".* HTTP 400$' "$out"
out=$(te "$work/alice-rotated.token" "$shop_url" -u "toolgate:not-the-secret")
check "a wrong client secret: 401 invalid_client" '"error":"invalid_client".* HTTP 401$' "$out"
out=$(te "$work/alice.token" "$shop_url")
check "a subject token of the rotated-out key: 400 invalid_grant" \
  '"error":"invalid_grant","error_description":"subject_token refused: ERR_JWKS_NO_MATCHING_KEY.* HTTP 400$' "$out"
out=$(te "$work/exchanged.jwt" "$shop_url")
check "an exchanged token as the subject (aud the shop, not the gate): 400 invalid_grant" \
  '"error":"invalid_grant","error_description":"subject_token refused: ERR_JWT_CLAIM_VALIDATION_FAILED: unexpected \\"aud\\" claim value.* HTTP 400$' "$out"
mkdir "$work/subjects"
node "$here/forge.mjs" subjects "$issuer" "$url" "$work/provider-jwks.json" "$work/subjects" >/dev/null
out=$(te "$work/subjects/control.token" "$shop_url")
check "control: a subject token forged with the provider's own RSA key is exchanged" '"token_type":"Bearer".* HTTP 200$' "$out"
for expected in other_audience:ERR_JWT_CLAIM_VALIDATION_FAILED expired:ERR_JWT_EXPIRED \
  unknown_kid:ERR_JWKS_NO_MATCHING_KEY own_kid_other_key:ERR_JWS_SIGNATURE_VERIFICATION_FAILED \
  es256_with_provider_key:ERR_JOSE_ALG_NOT_ALLOWED not_an_access_token:ERR_JWT_CLAIM_VALIDATION_FAILED \
  no_such_account:names_no_account; do
  case=${expected%%:*} code=${expected#*:}
  out=$(te "$work/subjects/$case.token" "$shop_url")
  [[ $code == names_no_account ]] && reason="names no account" || reason="refused: $code"
  check "a subject token, $case: 400 invalid_grant ($code)" \
    "\"error\":\"invalid_grant\",\"error_description\":\"subject_token $reason.* HTTP 400$" "$out"
done
out=$(curl -s -w ' HTTP %{http_code}' -H 'content-type: application/json' \
  -d '{"redirect_uris": ["http://127.0.0.1:8976/callback"], "response_types": [], "grant_types": ["urn:ietf:params:oauth:grant-type:token-exchange"]}' \
  "$issuer/reg")
check "a dynamically registered client may not have the grant: 400 invalid_client_metadata" \
  '"error":"invalid_client_metadata".* HTTP 400$' "$out"

if ! exchanging; then
  echo "mcp oauth: $skipped skipped (TOOLGATE_OAUTH_EXCHANGE=0)"
fi
echo "mcp oauth: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
