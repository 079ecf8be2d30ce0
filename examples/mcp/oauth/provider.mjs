#!/usr/bin/env node
// A real OpenID provider for the OAuth harness: panva's oidc-provider (the
// version node/package.json pins), configured the way an MCP deployment
// needs it, with no human in the loop.
//
//   node provider.mjs PORT RESOURCE PRIVATE_JWKS_FILE
//
// PORT      it listens on 127.0.0.1:PORT; the issuer is http://127.0.0.1:PORT
// RESOURCE  the one resource server it issues access tokens for: the gate's
//           /mcp (http://127.0.0.1:GATE/mcp), which is each token's `aud`
// PRIVATE_JWKS_FILE  where the signing keys are written, private parts
//           included, so that forge.mjs can sign tokens with the provider's
//           own key (written again on every rotation)
//
// What it does, and why:
// - Two accounts, alice (team eu) and bob (team us). The access token carries
//   the account's `team` claim, which the gate hands to Cedar.
// - Dynamic client registration is open (RFC 7591): MCP clients register
//   themselves. Client ID metadata documents are not offered: this version
//   has no such feature, and they need https client ids anyway.
// - PKCE with S256 is required of every client, confidential ones included
//   (the library's default requires it of public clients only).
// - Resource indicators (RFC 8707): the only resource is RESOURCE, its access
//   tokens are JWTs (RS256) with aud = RESOURCE and the `refunds` scope when
//   it was requested and granted.
// - Login and consent are automated: the interaction page logs in the account
//   the authorization request names in `login_hint` and grants what was
//   asked, except the scopes named in `harness_decline` (a person unticking
//   a scope on a consent screen), so a test can get a real token without
//   `refunds`.
// - Test-only controls, on the same port (this is a test harness):
//     POST /_harness/rotate     new signing keys; the old ones leave the JWKS
//     POST /_harness/jwks-down  the JWKS endpoint answers 503 from now on
//     POST /_harness/jwks-up    and serves again
//
// Everything is in memory; the process is the provider's whole state.
import http from "node:http";
import { randomBytes } from "node:crypto";
import { writeFileSync, renameSync } from "node:fs";
import { jose, oidcProvider } from "./deps.mjs";

const [port, resource, jwksFile] = process.argv.slice(2);
if (!port || !resource || !jwksFile) {
  process.stderr.write("usage: node provider.mjs PORT RESOURCE PRIVATE_JWKS_FILE\n");
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const { default: Provider, errors } = await oidcProvider();
const { generateKeyPair, exportJWK } = await jose();

// The people who can log in, and the attribute the gate's policy reads.
const ACCOUNTS = {
  alice: { team: "eu" },
  bob: { team: "us" },
};
// The resource server's scopes: what toolgate.toml maps to capabilities.
const RESOURCE_SCOPES = "refunds";

// Signing keys: an RSA key (RS256, which signs the access tokens) and an EC
// key (ES256), each with a kid and its alg, so the JWKS says what each key
// is for. A fresh set at start and on every rotation.
let generation = 0;
async function newKeys() {
  generation += 1;
  const stamp = `${Date.now().toString(36)}-${generation}`;
  const keys = [];
  for (const [alg, options] of [["RS256", { modulusLength: 2048 }], ["ES256", {}]]) {
    const { privateKey } = await generateKeyPair(alg, { ...options, extractable: true });
    const jwk = await exportJWK(privateKey);
    keys.push({ ...jwk, kid: `${alg.toLowerCase()}-${stamp}`, alg, use: "sig" });
  }
  // Written whole, then renamed: a reader never sees half a file.
  writeFileSync(`${jwksFile}.tmp`, JSON.stringify({ keys }, null, 2));
  renameSync(`${jwksFile}.tmp`, jwksFile);
  return keys;
}

// Cookie signing keys outlive a rotation: an interaction in flight keeps
// working across one.
const cookieKeys = [randomBytes(32).toString("hex")];

function configuration(keys) {
  return {
    jwks: { keys },
    cookies: { keys: cookieKeys },
    // No devInteractions: our own page (below) logs in and consents.
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    // A scope value must be known to be registered as a client's `scope`
    // (both SDKs register with the scope they are about to ask for).
    scopes: ["openid", "offline_access", RESOURCE_SCOPES],
    // The one non-standard authorization parameter: scopes the automated
    // person declines on the consent page.
    extraParams: ["harness_decline"],
    pkce: { methods: ["S256"], required: () => true },
    features: {
      devInteractions: { enabled: false },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // A client that names no resource gets one anyway: the gate.
        defaultResource: () => resource,
        // At the token endpoint, the resource granted at authorization is
        // used when the client does not repeat it.
        useGrantedResource: () => true,
        getResourceServerInfo(ctx, indicator) {
          if (indicator !== resource) throw new errors.InvalidTarget(`unknown resource ${indicator}`);
          return {
            scope: RESOURCE_SCOPES,
            audience: resource,
            accessTokenTTL: 600,
            accessTokenFormat: "jwt",
            jwt: { sign: { alg: "RS256" } },
          };
        },
      },
    },
    // The person's team goes into every access token issued for them.
    async extraTokenClaims(ctx, token) {
      const account = ACCOUNTS[token.accountId];
      return account ? { team: account.team } : undefined;
    },
    async findAccount(ctx, sub) {
      const account = ACCOUNTS[sub];
      if (!account) return undefined;
      return { accountId: sub, claims: async () => ({ sub, team: account.team }) };
    },
    ttl: { AccessToken: 600, AuthorizationCode: 60, Interaction: 300, Session: 3600, Grant: 3600 },
  };
}

// A rotation builds a new Provider with the new keys. oidc-provider keeps no
// way to swap keys in place, but its in-memory adapter is one store per
// process, so registered clients and grants carry over.
let provider;
let handler;
async function build() {
  const keys = await newKeys();
  provider = new Provider(issuer, configuration(keys));
  for (const event of ["server_error", "authorization.error", "grant.error", "registration_create.error"]) {
    provider.on(event, (ctx, err) => {
      process.stderr.write(`provider ${event}: ${err?.message ?? err} ${err?.error_description ?? ""}\n`);
    });
  }
  handler = provider.callback();
  return keys.map((k) => k.kid);
}

// The automated interaction page: one pass logs in, the next consents.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  if (prompt.name === "login") {
    const who = params.login_hint;
    if (!ACCOUNTS[who]) {
      res.writeHead(400, { "content-type": "text/plain" });
      res.end(`login_hint names no account of this provider: ${JSON.stringify(who)}\n`);
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: who } }, { mergeWithLastSubmission: false });
    return;
  }
  if (prompt.name === "consent") {
    const declined = new Set(String(params.harness_decline ?? "").split(" ").filter(Boolean));
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const { missingOIDCScope = [], missingOIDCClaims = [], missingResourceScopes = {} } = prompt.details;
    const split = (scopes) => [scopes.filter((s) => !declined.has(s)), scopes.filter((s) => declined.has(s))];
    const [oidcGranted, oidcRejected] = split(missingOIDCScope);
    if (oidcGranted.length) grant.addOIDCScope(oidcGranted.join(" "));
    // A rejected scope is remembered as such, so the provider does not ask
    // again (and loop) but issues the token without it.
    if (oidcRejected.length) grant.rejectOIDCScope(oidcRejected.join(" "));
    if (missingOIDCClaims.length) grant.addOIDCClaims(missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missingResourceScopes)) {
      const [granted, rejected] = split(scopes);
      if (granted.length) grant.addResourceScope(indicator, granted.join(" "));
      if (rejected.length) grant.rejectResourceScope(indicator, rejected.join(" "));
    }
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    return;
  }
  res.writeHead(400, { "content-type": "text/plain" });
  res.end(`no automated answer for the prompt ${prompt.name}\n`);
}

let jwksDown = false;
function json(res, status, doc) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(doc) + "\n");
}

async function harness(req, res, path) {
  if (req.method !== "POST") return json(res, 405, { error: "POST only" });
  if (path === "/_harness/rotate") return json(res, 200, { kids: await build() });
  if (path === "/_harness/jwks-down") {
    jwksDown = true;
    return json(res, 200, { jwks: "down" });
  }
  if (path === "/_harness/jwks-up") {
    jwksDown = false;
    return json(res, 200, { jwks: "up" });
  }
  return json(res, 404, { error: "no such control" });
}

const initialKids = await build();
const server = http.createServer((req, res) => {
  const path = new URL(req.url, issuer).pathname;
  const done = (e) => {
    process.stderr.write(`provider: ${req.method} ${path}: ${e?.stack ?? e}\n`);
    if (!res.headersSent) json(res, 500, { error: String(e?.message ?? e) });
  };
  if (path.startsWith("/_harness/")) return harness(req, res, path).catch(done);
  if (path.startsWith("/interaction/")) return interaction(req, res).catch(done);
  // The outage a resource server must survive: keys unreachable while the
  // rest of the provider (discovery included) answers.
  if (path === "/jwks" && jwksDown) return json(res, 503, { error: "temporarily_unavailable" });
  return handler(req, res);
});
server.listen(Number(port), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ issuer, resource, kids: initialKids }) + "\n");
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
