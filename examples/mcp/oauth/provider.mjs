#!/usr/bin/env node
// A real OpenID provider for the OAuth harness: panva's oidc-provider (the
// version node/package.json pins), configured the way an MCP deployment
// needs it, with no human in the loop.
//
//   node provider.mjs PORT RESOURCE PRIVATE_JWKS_FILE [EXCHANGE_RESOURCE]
//
// PORT      it listens on 127.0.0.1:PORT; the issuer is http://127.0.0.1:PORT
// RESOURCE  the one resource server it issues access tokens for: the gate's
//           /mcp (http://127.0.0.1:GATE/mcp), which is each token's `aud`
// PRIVATE_JWKS_FILE  where the signing keys are written, private parts
//           included, so that forge.mjs can sign tokens with the provider's
//           own key (written again on every rotation)
// EXCHANGE_RESOURCE  optional: the one resource token exchange issues tokens
//           for, the shop's MCP URL (http://127.0.0.1:SHOP/mcp). With it,
//           TOOLGATE_EXCHANGE_SECRET must be set in the environment: the
//           secret of the static client `toolgate` (the gate).
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
//     GET  /_harness/exchanges  the token exchanges so far (below)
// - Token exchange (RFC 8693), when EXCHANGE_RESOURCE is given: one static
//   confidential client, `toolgate` (client_secret_basic, the secret from
//   TOOLGATE_EXCHANGE_SECRET), allowed this grant only. It trades an access
//   token this provider issued for the gate (the person's) for a short-lived
//   one for EXCHANGE_RESOURCE: same `sub` and `team`, aud = the shop,
//   `act: {sub: "toolgate"}`. The grant is the library's extension API
//   (provider.registerGrantType); see tokenExchange below for what it checks.
//
// Everything is in memory; the process is the provider's whole state.
import http from "node:http";
import { createHash, randomBytes } from "node:crypto";
import { writeFileSync, renameSync } from "node:fs";
import { jose, oidcProvider } from "./deps.mjs";

const [port, resource, jwksFile, exchangeResource] = process.argv.slice(2);
const exchangeSecret = process.env.TOOLGATE_EXCHANGE_SECRET;
if (!port || !resource || !jwksFile || (exchangeResource && !exchangeSecret)) {
  process.stderr.write(
    "usage: node provider.mjs PORT RESOURCE PRIVATE_JWKS_FILE [EXCHANGE_RESOURCE]\n" +
      "       (EXCHANGE_RESOURCE needs TOOLGATE_EXCHANGE_SECRET in the environment)\n",
  );
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const { default: Provider, errors } = await oidcProvider();
const { generateKeyPair, exportJWK, importJWK, createLocalJWKSet, jwtVerify, SignJWT } = await jose();

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

// The keys the provider signs with now (private parts included): token
// exchange verifies subject tokens against them and signs with the RSA one.
let currentKeys = [];

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
    ...(exchangeResource ? exchangeClientConfiguration() : {}),
  };
}

// --- Token exchange (RFC 8693) ---------------------------------------------
const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token";
// An exchanged token's lifetime: short, and never past the subject token's.
const EXCHANGE_TTL = Number(process.env.HARNESS_EXCHANGE_TTL ?? 120);
// What the exchange endpoint did, for run.sh: GET /_harness/exchanges.
const exchanges = { count: 0, by_sub: {}, refused: 0, last: null, log: [] };

// The static client and the one piece of client metadata the grant needs.
// `exchange_resources` (extra client metadata) lists the resources a client
// may exchange tokens for. registerGrantType puts the grant into the
// provider's grant_types, so any client could name it, dynamically
// registered ones included: the validator refuses the grant (and the
// property) in a registration request, the one time it is called with a
// ctx, which leaves both to the statically configured client.
function exchangeClientConfiguration() {
  return {
    clients: [
      {
        client_id: "toolgate",
        client_secret: exchangeSecret,
        client_name: "toolgate (the gate, exchanging a person's token per upstream)",
        grant_types: [TOKEN_EXCHANGE],
        // No authorization endpoint for this client: no response types, so
        // no redirect_uris either.
        response_types: [],
        redirect_uris: [],
        token_endpoint_auth_method: "client_secret_basic",
        exchange_resources: [exchangeResource],
      },
    ],
    extraClientMetadata: {
      properties: ["exchange_resources"],
      validator(ctx, key, value, metadata) {
        if (key !== "exchange_resources") return;
        const exchanging = (metadata.grant_types ?? []).includes(TOKEN_EXCHANGE);
        // ctx is set only while a Client Registration (or Update) Request
        // is being read.
        if (ctx && (exchanging || value !== undefined)) {
          throw new errors.InvalidClientMetadata(
            `${TOKEN_EXCHANGE} (and exchange_resources) is for statically configured clients only`,
          );
        }
        if (exchanging && !(Array.isArray(value) && value.length && value.every((v) => typeof v === "string"))) {
          throw new errors.InvalidClientMetadata("a token exchange client needs exchange_resources");
        }
      },
    },
  };
}

// invalid_grant with the reason in error_description: the library's
// InvalidGrant always says "grant request is invalid" and keeps the reason
// in error_detail, which it logs but never sends.
class ExchangeRefused extends errors.InvalidGrant {
  constructor(reason) {
    super(reason);
    this.error_description = reason;
  }
}

function publicJwk(jwk) {
  const { d, p, q, dp, dq, qi, ...rest } = jwk;
  return rest;
}

function sha256(text) {
  return createHash("sha256").update(text).digest("hex");
}

// The grant, registered on every Provider (see build). The library has
// already authenticated the client (client_secret_basic: a wrong secret is
// 401 invalid_client) and checked that its grant_types name this grant; the
// parameters below are the only ones ctx.oidc.params keeps for it.
const EXCHANGE_PARAMETERS = [
  "subject_token",
  "subject_token_type",
  "requested_token_type",
  "actor_token",
  "actor_token_type",
  "resource",
  "audience",
  "scope",
];

async function tokenExchange(ctx, next) {
  const { client, params } = ctx.oidc;
  if (!params.subject_token) throw new errors.InvalidRequest("missing required parameter 'subject_token'");
  if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest(`subject_token_type must be ${ACCESS_TOKEN_TYPE}`);
  }
  if (params.requested_token_type !== undefined && params.requested_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest(`requested_token_type must be ${ACCESS_TOKEN_TYPE}`);
  }
  // Delegation here is the client's own: it is the actor.
  if (params.actor_token !== undefined || params.actor_token_type !== undefined) {
    throw new errors.InvalidRequest("actor_token is not supported: the authenticated client is the actor");
  }
  // The target: exactly one resource, one this client may exchange for.
  const allowed = client.exchange_resources ?? [];
  if (params.resource === undefined) throw new errors.InvalidTarget("resource is required (the upstream's URL)");
  if (!allowed.includes(params.resource)) throw new errors.InvalidTarget(`unknown resource ${params.resource}`);
  if (params.audience !== undefined && params.audience !== params.resource) {
    throw new errors.InvalidTarget(`audience ${params.audience} is not the resource ${params.resource}`);
  }

  // The subject: an access token this provider issued for the gate, signed
  // with one of its current keys (RS256, as it signs them), not expired.
  let subject;
  try {
    const keys = createLocalJWKSet({ keys: currentKeys.map(publicJwk) });
    ({ payload: subject } = await jwtVerify(params.subject_token, keys, {
      issuer,
      audience: resource,
      algorithms: ["RS256"],
      typ: "at+jwt",
      requiredClaims: ["sub", "exp"],
    }));
  } catch (e) {
    throw new ExchangeRefused(`subject_token refused: ${e.code ?? e.name}: ${e.message}`);
  }
  if (!ACCOUNTS[subject.sub]) throw new ExchangeRefused(`subject_token names no account: ${subject.sub}`);

  // Scope: what was asked for, within what the subject token carries;
  // else the subject token's own.
  const had = String(subject.scope ?? "").split(" ").filter(Boolean);
  const scope = params.scope !== undefined ? [...new Set(params.scope.split(" ").filter(Boolean))] : had;
  const extra = scope.filter((s) => !had.includes(s));
  if (extra.length) {
    throw new errors.InvalidScope("requested scope exceeds the subject token's", extra.join(" "));
  }

  const now = Math.floor(Date.now() / 1000);
  const exp = Math.min(now + EXCHANGE_TTL, subject.exp);
  // RFC 8693 4.1: the actor, nesting any actor the subject token had.
  const act = subject.act ? { sub: client.clientId, act: subject.act } : { sub: client.clientId };
  const rsa = currentKeys.find((k) => k.alg === "RS256");
  const claims = { sub: subject.sub, client_id: client.clientId, act };
  if (subject.team !== undefined) claims.team = subject.team;
  if (scope.length) claims.scope = scope.join(" ");
  const accessToken = await new SignJWT(claims)
    .setProtectedHeader({ alg: "RS256", kid: rsa.kid, typ: "at+jwt" })
    .setIssuer(issuer)
    .setAudience(params.resource)
    .setIssuedAt(now)
    .setExpirationTime(exp)
    .setJti(randomBytes(16).toString("hex"))
    .sign(await importJWK(rsa, "RS256"));

  const seen = {
    sub: subject.sub,
    client_id: client.clientId,
    // The library takes a client_secret_basic client's secret in the body
    // too (client_secret_post): run.sh checks which one the gate used.
    client_auth: ctx.get("authorization").startsWith("Basic ")
      ? "client_secret_basic"
      : ctx.oidc.body?.client_secret !== undefined
        ? "client_secret_post"
        : "other",
    grant_type: params.grant_type,
    subject_token_type: params.subject_token_type,
    requested_token_type: params.requested_token_type ?? null,
    resource: params.resource,
    audience: params.audience ?? null,
    scope: params.scope ?? null,
    subject_sha256: sha256(params.subject_token),
    issued_sha256: sha256(accessToken),
    expires_in: exp - now,
  };
  exchanges.count += 1;
  exchanges.by_sub[subject.sub] = (exchanges.by_sub[subject.sub] ?? 0) + 1;
  exchanges.last = seen;
  exchanges.log.push(seen);

  ctx.body = {
    access_token: accessToken,
    issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: "Bearer",
    expires_in: exp - now,
    ...(scope.length ? { scope: scope.join(" ") } : {}),
  };
  await next();
}

async function countedTokenExchange(ctx, next) {
  try {
    await tokenExchange(ctx, next);
  } catch (e) {
    exchanges.refused += 1;
    throw e;
  }
}

// A rotation builds a new Provider with the new keys. oidc-provider keeps no
// way to swap keys in place, but its in-memory adapter is one store per
// process, so registered clients and grants carry over.
let provider;
let handler;
async function build() {
  const keys = await newKeys();
  currentKeys = keys;
  provider = new Provider(issuer, configuration(keys));
  // A handler (ctx, next) with its parameters. Not in the configuration: a
  // grant is registered on each Provider instance, after construction, so
  // a rotation (a new Provider) registers it again.
  if (exchangeResource) provider.registerGrantType(TOKEN_EXCHANGE, countedTokenExchange, EXCHANGE_PARAMETERS);
  for (const event of ["server_error", "authorization.error", "grant.error", "registration_create.error"]) {
    provider.on(event, (ctx, err) => {
      process.stderr.write(
        `provider ${event}: ${err?.message ?? err} ${err?.error_description ?? ""} ${err?.error_detail ?? ""}\n`,
      );
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
  if (path === "/_harness/exchanges") {
    if (req.method !== "GET") return json(res, 405, { error: "GET only" });
    return json(res, 200, exchanges);
  }
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
  const started = { issuer, resource, exchange_resource: exchangeResource ?? null, kids: initialKids };
  process.stdout.write(JSON.stringify(started) + "\n");
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
