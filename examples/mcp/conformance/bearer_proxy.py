#!/usr/bin/env python3
"""A loopback HTTP proxy that adds `Authorization: Bearer <key>` to every request.

The conformance suite (`conformance server --url ...`) sends no credentials,
and toolgate's `/mcp` answers 401 to a request without an API key. This
proxy lets the suite reach the gateway as one caller: it forwards each
request unchanged (method, path, body, and the client's own `Host` and
`Origin`, so the gateway's DNS-rebinding check still sees what the suite
sent) with the key added, and streams the answer back as it arrives (SSE
included).

  bearer_proxy.py TARGET_BASE_URL KEY PORT
"""

import sys

import httpx2
import uvicorn

HOP = {
    "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
    "proxy-authorization", "proxy-authenticate", "content-length", "authorization",
}


def main(argv):
    target, key, port = argv[0].rstrip("/"), argv[1], int(argv[2])
    client = httpx2.AsyncClient(timeout=None)

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.decode().lower() not in HOP]
        headers.append(("authorization", f"Bearer {key}"))
        url = target + scope["path"]
        if scope["query_string"]:
            url += "?" + scope["query_string"].decode()
        request = client.build_request(scope["method"], url, headers=headers, content=body)
        response = await client.send(request, stream=True)
        try:
            await send({
                "type": "http.response.start",
                "status": response.status_code,
                "headers": [(k.encode(), v.encode()) for k, v in response.headers.items() if k.lower() not in HOP],
            })
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
