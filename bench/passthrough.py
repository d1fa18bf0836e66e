"""The floor for any Python gateway: a bare aiohttp proxy for POST /v1/chat/completions.

It forwards the request body unchanged over one pooled ClientSession and relays the response,
streams chunk by chunk. No auth, no parsing, no metering: whatever a gateway costs above this is
its own work. Run: `python bench/passthrough.py --port 0 --upstream http://127.0.0.1:9100/v1`
(prints `ready <port>` when listening).
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
import uvloop
from aiohttp import web


async def proxy(request: web.Request) -> web.StreamResponse:
    """Forward the body upstream and relay the answer as it arrives."""
    body = await request.read()
    async with request.app["session"].post(request.app["url"], data=body,
                                           headers={"Content-Type": "application/json"}) as upstream:
        content_type = upstream.headers.get("Content-Type", "application/json")
        if not content_type.startswith("text/event-stream"):
            return web.Response(body=await upstream.read(), status=upstream.status,
                                headers={"Content-Type": content_type})
        response = web.StreamResponse(status=upstream.status, headers={"Content-Type": content_type})
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def serve(host: str, port: int, upstream: str) -> None:
    """Run the proxy until killed."""
    app = web.Application()
    app["url"] = upstream.rstrip("/") + "/chat/completions"
    app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    app.router.add_post("/v1/chat/completions", proxy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    print(f"ready {site._server.sockets[0].getsockname()[1]}", flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9200)
    parser.add_argument("--upstream", default="http://127.0.0.1:9100/v1", help="upstream base URL")
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port, args.upstream))
