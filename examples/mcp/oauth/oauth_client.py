#!/usr/bin/env python3
"""An MCP client that signs in with OAuth, on the official Python SDK (`mcp` 2.x).

The SDK's `mcp.client.auth.OAuthClientProvider` does the whole dance on its own
when /mcp answers 401: the protected resource metadata (RFC 9728), the
authorization server's metadata, dynamic client registration (RFC 7591), the
authorization request with PKCE (S256) and a resource indicator (RFC 8707),
the token request, and the retry with the bearer. This script only plays the
person at the browser, with no browser: its redirect handler opens the
authorization URL it is handed with `login_hint=<person>` appended, follows
the provider's redirects with a cookie jar (the provider's own interaction
pages log that person in and consent, see provider.mjs), stops at the
redirect URI, and its callback handler returns the code, state and iss found
there. Tokens and the registration are kept in memory only.

  oauth_client.py URL --login alice [--decline SCOPE] [--token-out FILE] [--list] [--call TOOL ARGS_JSON]...

Each answer is one JSON line on stdout: {"oauth": …} says what the SDK sent
and got (the authorization request's resource and scope, the registration's
token endpoint auth method, the access token's claims, read unverified),
then {"tools": […]} for --list and {"result": …} for each --call, as
../client.py prints them. A JSON-RPC error prints {"error": …} and exits 1.
`--decline refunds` has the person untick that scope on the consent page.
`--token-out FILE` writes the access token there, for later raw checks.
"""

import argparse
import asyncio
import base64
import json
import sys
from urllib.parse import parse_qs, urlencode, urljoin, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.shared.exceptions import MCPError

# Never listened on: the redirect handler stops when a redirect points here.
REDIRECT_URI = "http://127.0.0.1:8976/callback"


def out(doc):
    print(json.dumps(doc, sort_keys=True), flush=True)


def dump(result):
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def part_of(jwt, index):
    """A JWT's header (0) or payload (1), unverified: only to show what the provider issued."""
    try:
        part = jwt.split(".")[index]
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (IndexError, ValueError):
        return None


class MemoryStorage(TokenStorage):
    """The SDK's TokenStorage, in memory: this process's tokens and registration."""

    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class AutomatedPerson:
    """The redirect and callback handlers: a person who logs in and consents at once."""

    def __init__(self, login, decline):
        self.login = login
        self.decline = decline
        self.result = None
        self.authorization_request = None

    async def redirect_handler(self, authorization_url: str) -> None:
        query = parse_qs(urlparse(authorization_url).query)
        self.authorization_request = {k: v[0] if len(v) == 1 else v for k, v in query.items()}
        extra = {"login_hint": self.login}
        if self.decline:
            extra["harness_decline"] = self.decline
        url = f"{authorization_url}&{urlencode(extra)}"
        # A client of its own, as a browser would be: the provider's cookies
        # (its interaction and session) live in this jar only.
        async with httpx2.AsyncClient(follow_redirects=False, timeout=10.0) as browser:
            for _ in range(20):
                if url.startswith(REDIRECT_URI):
                    params = {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}
                    if "error" in params:
                        raise SystemExit(f"the provider refused: {params}")
                    self.result = AuthorizationCodeResult(
                        code=params["code"], state=params.get("state"), iss=params.get("iss")
                    )
                    return
                response = await browser.get(url)
                if response.status_code not in (301, 302, 303, 307, 308):
                    raise SystemExit(
                        f"the authorization walk stopped at {url}: HTTP {response.status_code}: {response.text[:300]}"
                    )
                url = urljoin(url, response.headers["location"])
        raise SystemExit("the authorization walk did not reach the redirect URI in 20 redirects")

    async def callback_handler(self) -> AuthorizationCodeResult:
        if self.result is None:
            raise SystemExit("no authorization code was captured")
        return self.result


def first_leaf(group):
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    return group


async def run(args):
    storage = MemoryStorage()
    person = AutomatedPerson(args.login, args.decline)
    oauth = OAuthClientProvider(
        server_url=args.url,
        client_metadata=OAuthClientMetadata(
            client_name=f"toolgate oauth harness (python, {args.login})",
            redirect_uris=[REDIRECT_URI],
        ),
        storage=storage,
        redirect_handler=person.redirect_handler,
        callback_handler=person.callback_handler,
    )
    # What the SDK sends to the provider's token endpoint, seen on the wire.
    seen = {}

    async def on_request(request):
        if request.method == "POST" and request.url.path == "/token":
            body = parse_qs((await request.aread()).decode())
            seen["token_request"] = {
                "grant_type": body.get("grant_type", [None])[0],
                "resource": body.get("resource", [None])[0],
                "client_secret_in_body": "client_secret" in body,
                "basic_auth": request.headers.get("authorization", "").startswith("Basic "),
            }

    http = httpx2.AsyncClient(auth=oauth, timeout=httpx2.Timeout(30.0, read=60.0), event_hooks={"request": [on_request]})
    failure = None
    try:
        async with Client(streamable_http_client(args.url, http_client=http)) as client:
            token = storage.tokens.access_token if storage.tokens else None
            info = storage.client_info
            out({
                "oauth": {
                    "authorization_request": person.authorization_request,
                    "token_request": seen.get("token_request"),
                    "registered": info and {
                        "client_id": info.client_id,
                        "token_endpoint_auth_method": info.token_endpoint_auth_method,
                        "scope": info.scope,
                    },
                    "token": storage.tokens and {
                        "scope": storage.tokens.scope,
                        "header": part_of(token, 0),
                        "claims": part_of(token, 1),
                    },
                    "protocol_version": client.session.protocol_version,
                }
            })
            if args.token_out and token:
                with open(args.token_out, "w") as f:
                    f.write(token)
            if args.list:
                listed = await client.list_tools(cache_mode="refresh")
                out({"tools": [dump(t) for t in listed.tools]})
            for tool, arguments in args.call or []:
                result = await client.call_tool(tool, json.loads(arguments))
                out({"result": dump(result)})
    except* MCPError as group:
        failure = first_leaf(group)
    finally:
        await http.aclose()
    if failure is not None:
        out({"error": {"code": failure.error.code, "message": failure.error.message}})
        return 1
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url", help="the MCP endpoint, e.g. http://127.0.0.1:8080/mcp")
    p.add_argument("--login", required=True, help="the provider account the person logs in as")
    p.add_argument("--decline", help="scopes (space-separated) the person declines on the consent page")
    p.add_argument("--token-out", help="write the access token to this file")
    p.add_argument("--list", action="store_true", help="tools/list")
    p.add_argument("--call", nargs=2, action="append", metavar=("TOOL", "ARGS_JSON"), help="tools/call (repeatable)")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
