#!/usr/bin/env node
// Bad bearer tokens, and raw probes of the gate with any token.
//
//   node forge.mjs bad GATE ISSUER RESOURCE PRIVATE_JWKS_FILE
//       every forged token below, each sent to GATE/mcp and GATE/v1/decisions
//   node forge.mjs probe GATE TOKEN_FILE LABEL [mcp|v1]
//       one token, sent to both doors or the one named (is it accepted, or
//       why not?)
//   node forge.mjs step-up GATE TOKEN_FILE TOOL ARGS_JSON
//       initialize, then tools/call TOOL over raw HTTP: the status and the
//       WWW-Authenticate challenge a host would see
//   node forge.mjs subjects ISSUER RESOURCE PRIVATE_JWKS_FILE OUT_DIR
//       subject tokens for the provider's token exchange, each with one
//       thing wrong (and a control with nothing wrong), written to
//       OUT_DIR/<case>.token; prints the case names
//   node forge.mjs verify ISSUER TOKEN_FILE
//       verify a token with the provider's published JWKS (jose's
//       createRemoteJWKSet): {"verified": true, "header": …, "claims": …}
//       or {"verified": false, "error": …}
//
// Each probe prints one JSON line per door:
//   {"case": …, "door": "mcp"|"v1", "status": 401, "code": "invalid_token",
//    "challenge": "<WWW-Authenticate>", "detail": "<problem detail>"}
// `code` is the stable reason toolgate gives: the `error_description` of
// the challenge, else the code after "refused: " in the problem's detail,
// else the problem's own `code` (`unauthorized` when the bearer was not even
// read as a token).
//
// The forged tokens use jose (the copy oidc-provider depends on) and, where
// the point is that only one thing is wrong, the provider's own private key
// from PRIVATE_JWKS_FILE (provider.mjs writes it), so the signature is real.
import { readFileSync, writeFileSync } from "node:fs";
import { createPublicKey } from "node:crypto";
import { jose } from "./deps.mjs";

const { SignJWT, importJWK, generateKeyPair, jwtVerify, createRemoteJWKSet, decodeProtectedHeader } = await jose();

function b64url(x) {
  return Buffer.from(typeof x === "string" ? x : JSON.stringify(x)).toString("base64url");
}

function reasonOf(status, challenge, problem) {
  const described = /error_description="([a-z_]+)"/.exec(challenge ?? "");
  if (described) return described[1];
  const refused = /refused: ([a-z_]+)/.exec(problem?.detail ?? "");
  if (refused) return refused[1];
  return problem?.code ?? (status === 200 ? "accepted" : null);
}

const INITIALIZE = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "forge", version: "1" } },
};

async function post(url, token, body, extra = {}) {
  const response = await fetch(url, {
    method: "POST",
    headers: {
      authorization: `Bearer ${token}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...extra,
    },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  let problem = null;
  try {
    problem = JSON.parse(text);
  } catch {
    // an SSE stream or plain text: no problem document
  }
  return { response, text, problem };
}

async function probe(gate, token, label, doors = "mcp v1") {
  const lines = [];
  // /mcp: an initialize, which any accepted bearer may send.
  if (doors.includes("mcp")) {
    const { response, problem } = await post(`${gate}/mcp`, token, INITIALIZE);
    const challenge = response.headers.get("www-authenticate");
    lines.push({ case: label, door: "mcp", status: response.status, code: reasonOf(response.status, challenge, problem), challenge, detail: problem?.detail ?? null });
  }
  // /v1/decisions: the sidecar's door reads the same bearer first.
  if (doors.includes("v1")) {
    const body = { provider: "openai-chat", response: {}, scope: { order_id: 1001, version_seen: 1 } };
    const { response, problem } = await post(`${gate}/v1/decisions`, token, body);
    const challenge = response.headers.get("www-authenticate");
    lines.push({ case: label, door: "v1", status: response.status, code: reasonOf(response.status, challenge, problem), challenge, detail: problem?.detail ?? null });
  }
  for (const line of lines) process.stdout.write(JSON.stringify(line) + "\n");
}

async function bad(gate, issuer, resource, jwksFile) {
  const { keys } = JSON.parse(readFileSync(jwksFile, "utf8"));
  const rsa = keys.find((k) => k.alg === "RS256");
  const ec = keys.find((k) => k.alg === "ES256");
  const providerRsa = await importJWK(rsa, "RS256");
  const providerEc = await importJWK(ec, "ES256");
  const now = Math.floor(Date.now() / 1000);
  // What the provider issues for alice, less what each case changes.
  const claims = { sub: "alice", client_id: "forged-client", scope: "refunds", team: "eu" };
  const sign = (payload, key, header, { iss = issuer, aud = resource, exp = now + 300, iat = now } = {}) =>
    new SignJWT({ ...payload, iat }).setProtectedHeader(header).setIssuer(iss).setAudience(aud).setExpirationTime(exp).sign(key);
  const rsHeader = { alg: "RS256", kid: rsa.kid, typ: "at+jwt" };

  const cases = [];
  // Control: only the algorithm differs from the provider's own tokens, so a
  // refusal below is the case's fault and not the harness's.
  cases.push(["es256_with_provider_key", await sign(claims, providerEc, { alg: "ES256", kid: ec.kid, typ: "at+jwt" })]);
  cases.push(["other_audience", await sign(claims, providerRsa, rsHeader, { aud: "http://127.0.0.1:9/another-resource" })]);
  cases.push(["expired", await sign(claims, providerRsa, rsHeader, { exp: now - 3600, iat: now - 7200 })]);
  cases.push(["no_subject", await sign({ client_id: "forged-client", scope: "refunds" }, providerRsa, rsHeader)]);
  // alg none, as RFC 7519 writes it: an empty signature. Then with a
  // signature part, so that the token has a JWT's three non-empty parts.
  const payload = { ...claims, iss: issuer, aud: resource, exp: now + 300, iat: now };
  const unsigned = `${b64url({ alg: "none", kid: rsa.kid })}.${b64url(payload)}`;
  cases.push(["alg_none", `${unsigned}.`]);
  cases.push(["alg_none_with_signature", `${unsigned}.${b64url("not a signature")}`]);
  // The classic confusion: HS256 keyed with the provider's public key (its
  // PEM, as a verifier that takes "the key" for any alg would use it).
  const publicPem = createPublicKey({ key: rsa, format: "jwk" }).export({ type: "spki", format: "pem" });
  cases.push(["hs256_public_key_as_secret", await sign(claims, new Uint8Array(Buffer.from(publicPem)), { alg: "HS256", kid: rsa.kid, typ: "at+jwt" })]);
  // A key of our own: under a kid the provider never published, then as
  // another issuer altogether.
  const { privateKey: ours } = await generateKeyPair("RS256");
  cases.push(["unknown_kid", await sign(claims, ours, { alg: "RS256", kid: "no-such-kid", typ: "at+jwt" })]);
  cases.push(["other_issuer", await sign(claims, ours, { alg: "RS256", kid: "ours" }, { iss: "http://127.0.0.1:9/another-issuer" })]);

  for (const [label, token] of cases) await probe(gate, token, label);
}

// Subject tokens for RFC 8693 token exchange at the provider: the provider
// must exchange only its own access tokens for the gate (RS256, one of its
// current keys, typ at+jwt, aud = RESOURCE, not expired, a known account).
async function subjects(issuer, resource, jwksFile, outDir) {
  const { keys } = JSON.parse(readFileSync(jwksFile, "utf8"));
  const rsa = keys.find((k) => k.alg === "RS256");
  const ec = keys.find((k) => k.alg === "ES256");
  const providerRsa = await importJWK(rsa, "RS256");
  const providerEc = await importJWK(ec, "ES256");
  const { privateKey: ours } = await generateKeyPair("RS256");
  const now = Math.floor(Date.now() / 1000);
  const claims = { sub: "alice", client_id: "forged-client", scope: "refunds", team: "eu" };
  const sign = (payload, key, header, { aud = resource, exp = now + 300, iat = now } = {}) =>
    new SignJWT({ ...payload, iat, jti: `forged-${Math.random()}` })
      .setProtectedHeader(header)
      .setIssuer(issuer)
      .setAudience(aud)
      .setExpirationTime(exp)
      .sign(key);
  const rsHeader = { alg: "RS256", kid: rsa.kid, typ: "at+jwt" };
  const cases = [
    // Control: what the provider issues, signed with its own current key.
    ["control", await sign(claims, providerRsa, rsHeader)],
    ["other_audience", await sign(claims, providerRsa, rsHeader, { aud: "http://127.0.0.1:9/another-resource" })],
    ["expired", await sign(claims, providerRsa, rsHeader, { exp: now - 60, iat: now - 660 })],
    ["unknown_kid", await sign(claims, ours, { alg: "RS256", kid: "no-such-kid", typ: "at+jwt" })],
    ["own_kid_other_key", await sign(claims, ours, rsHeader)],
    ["es256_with_provider_key", await sign(claims, providerEc, { alg: "ES256", kid: ec.kid, typ: "at+jwt" })],
    // An ID token's shape (typ JWT), for the right audience even.
    ["not_an_access_token", await sign(claims, providerRsa, { alg: "RS256", kid: rsa.kid, typ: "JWT" })],
    ["no_such_account", await sign({ ...claims, sub: "mallory" }, providerRsa, rsHeader)],
  ];
  for (const [label, token] of cases) {
    writeFileSync(`${outDir}/${label}.token`, token);
    process.stdout.write(`${label}\n`);
  }
}

async function verify(issuer, token) {
  try {
    const { payload, protectedHeader } = await jwtVerify(token, createRemoteJWKSet(new URL(`${issuer}/jwks`)), { issuer });
    process.stdout.write(JSON.stringify({ verified: true, header: protectedHeader, claims: payload }) + "\n");
  } catch (e) {
    let header = null;
    try {
      header = decodeProtectedHeader(token);
    } catch {
      // not even a JWS
    }
    process.stdout.write(JSON.stringify({ verified: false, error: `${e.code ?? e.name}: ${e.message}`, header }) + "\n");
  }
}

async function stepUp(gate, token, tool, args) {
  const url = `${gate}/mcp`;
  const init = await post(url, token, INITIALIZE);
  const session = init.response.headers.get("mcp-session-id");
  const headers = session ? { "mcp-session-id": session, "mcp-protocol-version": "2025-11-25" } : {};
  if (init.response.ok) await post(url, token, { jsonrpc: "2.0", method: "notifications/initialized" }, headers);
  const call = { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: tool, arguments: JSON.parse(args) } };
  const { response, text, problem } = await post(url, token, call, headers);
  process.stdout.write(
    JSON.stringify({
      initialize: init.response.status,
      status: response.status,
      challenge: response.headers.get("www-authenticate"),
      code: problem?.code ?? null,
      body: text.slice(0, 400),
    }) + "\n",
  );
}

const [command, ...rest] = process.argv.slice(2);
if (command === "bad" && rest.length === 4) await bad(...rest);
else if (command === "probe" && (rest.length === 3 || (rest.length === 4 && ["mcp", "v1"].includes(rest[3]))))
  await probe(rest[0], readFileSync(rest[1], "utf8").trim(), rest[2], rest[3]);
else if (command === "step-up" && rest.length === 4) await stepUp(rest[0], readFileSync(rest[1], "utf8").trim(), rest[2], rest[3]);
else if (command === "subjects" && rest.length === 4) await subjects(...rest);
else if (command === "verify" && rest.length === 2) await verify(rest[0], readFileSync(rest[1], "utf8").trim());
else {
  process.stderr.write(
    "usage: node forge.mjs bad GATE ISSUER RESOURCE PRIVATE_JWKS_FILE\n" +
      "       node forge.mjs probe GATE TOKEN_FILE LABEL [mcp|v1]\n" +
      "       node forge.mjs step-up GATE TOKEN_FILE TOOL ARGS_JSON\n" +
      "       node forge.mjs subjects ISSUER RESOURCE PRIVATE_JWKS_FILE OUT_DIR\n" +
      "       node forge.mjs verify ISSUER TOKEN_FILE\n",
  );
  process.exit(2);
}
