#!/usr/bin/env node
// An MCP client that signs in with OAuth, on the official TypeScript SDK
// (@modelcontextprotocol/sdk 1.32, node/package.json).
//
//   node oauth_client.mjs URL --login bob [--token-out FILE] [--list] [--call TOOL ARGS_JSON]...
//
// The SDK drives the flow: the first request to /mcp gets 401, the transport
// calls the SDK's auth(), which reads the protected resource metadata named
// in WWW-Authenticate (RFC 9728), the authorization server's metadata,
// registers a client (RFC 7591), and hands our OAuthClientProvider the
// authorization URL (PKCE S256, resource indicator). Its
// redirectToAuthorization plays the person with no browser: it appends
// login_hint, follows the provider's redirects with a cookie jar of its own
// (the provider's automated login and consent, provider.mjs) and stops at
// the redirect URI with the code. connect() then fails with
// UnauthorizedError, as the SDK does for any host that must wait for a
// browser; transport.finishAuth(code) exchanges the code for a token, and a
// new transport on the same provider connects with it.
//
// Each answer is one JSON line: {"oauth": …} (what the SDK sent: the
// authorization request's resource and scope, the registration, the token
// request's client authentication, the token's claims read unverified), then
// {"tools": […]} for --list and {"result": …} for each --call. An error
// prints {"error": …} and exits 1. `--token-out FILE` writes the access
// token there, for later raw checks.
import { writeFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { sdk } from "./deps.mjs";

const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { UnauthorizedError } = await sdk("client/auth.js");

// Never listened on: the walk stops when a redirect points here.
const REDIRECT_URI = "http://127.0.0.1:8976/callback";

function usage(message) {
  if (message) process.stderr.write(`oauth_client.mjs: ${message}\n`);
  process.stderr.write("usage: node oauth_client.mjs URL --login PERSON [--token-out FILE] [--list] [--call TOOL ARGS_JSON]...\n");
  process.exit(2);
}

function parse(argv) {
  const o = { calls: [], list: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--login") o.login = argv[++i];
    else if (a === "--token-out") o.tokenOut = argv[++i];
    else if (a === "--list") o.list = true;
    else if (a === "--call") o.calls.push([argv[++i], argv[++i]]);
    else if (a.startsWith("--")) usage(`unknown option ${a}`);
    else if (!o.url) o.url = a;
    else usage(`unexpected ${a}`);
  }
  if (!o.url || !o.login) usage();
  if (o.calls.some(([t, args]) => !t || !args)) usage("--call needs TOOL and ARGS_JSON");
  return o;
}

function out(doc) {
  process.stdout.write(JSON.stringify(doc) + "\n");
}

// A JWT's header (0) or payload (1), unverified: only to show what the
// provider issued.
function partOf(jwt, index) {
  try {
    return JSON.parse(Buffer.from(jwt.split(".")[index], "base64url").toString());
  } catch {
    return null;
  }
}

// The person at the browser, as a minimal cookie-keeping user agent: it
// follows redirects by hand (fetch would drop Set-Cookie between hops) and
// stops at the redirect URI.
async function walk(start) {
  const jar = new Map();
  let url = start;
  for (let hop = 0; hop < 20; hop++) {
    if (url.startsWith(REDIRECT_URI)) return Object.fromEntries(new URL(url).searchParams);
    const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
    const response = await fetch(url, { redirect: "manual", headers: cookie ? { cookie } : {} });
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(";");
      const eq = pair.indexOf("=");
      jar.set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
    }
    const location = response.headers.get("location");
    if (response.status < 300 || response.status >= 400 || !location) {
      throw new Error(`the authorization walk stopped at ${url}: HTTP ${response.status}: ${(await response.text()).slice(0, 300)}`);
    }
    url = new URL(location, url).href;
  }
  throw new Error("the authorization walk did not reach the redirect URI in 20 redirects");
}

// The SDK's OAuthClientProvider interface, in memory.
class AutomatedProvider {
  constructor(login) {
    this.login = login;
    this._state = randomUUID();
    this.seen = {};
  }
  get redirectUrl() {
    return REDIRECT_URI;
  }
  get clientMetadata() {
    // A public client, as a desktop MCP host is: no secret, PKCE alone.
    return {
      client_name: `toolgate oauth harness (node, ${this.login})`,
      redirect_uris: [REDIRECT_URI],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state() {
    return this._state;
  }
  clientInformation() {
    return this._client;
  }
  saveClientInformation(info) {
    this._client = info;
  }
  tokens() {
    return this._tokens;
  }
  saveTokens(tokens) {
    this._tokens = tokens;
  }
  saveCodeVerifier(verifier) {
    this._verifier = verifier;
  }
  codeVerifier() {
    return this._verifier;
  }
  async redirectToAuthorization(authorizationUrl) {
    const url = new URL(authorizationUrl);
    this.seen.authorization_request = Object.fromEntries(url.searchParams);
    url.searchParams.set("login_hint", this.login);
    const params = await walk(url.href);
    if (params.error) throw new Error(`the provider refused: ${JSON.stringify(params)}`);
    if (params.state !== this._state) throw new Error(`state mismatch: ${params.state}`);
    this.code = params.code;
    this.seen.iss = params.iss;
  }
}

async function main() {
  const o = parse(process.argv.slice(2));
  const provider = new AutomatedProvider(o.login);
  // What reaches the provider's token endpoint, seen on the wire.
  const watching = async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.pathname === "/token" && init?.body) {
      const body = new URLSearchParams(String(init.body));
      const headers = new Headers(init.headers);
      provider.seen.token_request = {
        grant_type: body.get("grant_type"),
        resource: body.get("resource"),
        client_secret_in_body: body.has("client_secret"),
        basic_auth: (headers.get("authorization") ?? "").startsWith("Basic "),
      };
    }
    return fetch(input, init);
  };
  const open = () => new StreamableHTTPClientTransport(new URL(o.url), { authProvider: provider, fetch: watching });
  let client = new Client({ name: "toolgate-oauth-harness-node", version: "1.0.0" });
  let transport = open();
  try {
    try {
      await client.connect(transport);
    } catch (e) {
      if (!(e instanceof UnauthorizedError) || !provider.code) throw e;
      // The browser came back with a code: exchange it, then connect anew.
      await transport.finishAuth(provider.code);
      await client.close().catch(() => {});
      client = new Client({ name: "toolgate-oauth-harness-node", version: "1.0.0" });
      transport = open();
      await client.connect(transport);
    }
    const info = provider.clientInformation();
    const tokens = provider.tokens();
    out({
      oauth: {
        authorization_request: provider.seen.authorization_request ?? null,
        authorization_response_iss: provider.seen.iss ?? null,
        token_request: provider.seen.token_request ?? null,
        registered: info
          ? { client_id: info.client_id, token_endpoint_auth_method: info.token_endpoint_auth_method ?? null, scope: info.scope ?? null }
          : null,
        token: tokens
          ? { scope: tokens.scope ?? null, header: partOf(tokens.access_token, 0), claims: partOf(tokens.access_token, 1) }
          : null,
        protocol_version: transport.protocolVersion ?? null,
      },
    });
    if (o.tokenOut && tokens?.access_token) writeFileSync(o.tokenOut, tokens.access_token);
    if (o.list) {
      const listed = await client.listTools();
      out({ tools: listed.tools });
    }
    if (o.calls.length) {
      // listTools first: the SDK validates structuredContent only for tools
      // whose outputSchema it has seen.
      await client.listTools();
      for (const [name, args] of o.calls) {
        out({ result: await client.callTool({ name, arguments: JSON.parse(args) }) });
      }
    }
  } catch (e) {
    out({ error: { code: e?.code ?? null, message: String(e?.message ?? e) } });
    process.exitCode = 1;
  } finally {
    await client.close().catch(() => {});
  }
}

await main();
