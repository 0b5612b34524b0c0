"""The scenarios through the Python SDK's client (PyPI `mcp` 2.x), mode `auto`:
server/discover, 2026-07-28 when the server offers it.

    python client_py.py URL SCENARIO MARKER   → one JSON report on stdout
"""

import json
import sys
import time

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

KEY_META = "io.idemkit/idempotency-key"


class DroppingTransport(httpx2.AsyncBaseTransport):
    """Swallows the answer to the first tools/call carrying `key` (none when
    `key` is None): the call runs at the server, its response is read to the
    end and thrown away, and the client gets a 504 instead, as from a load
    balancer whose timeout struck (a raised network error would end the
    client's session, not just the call)."""

    def __init__(self, key):
        self.inner = httpx2.AsyncHTTPTransport()
        self.key = key
        self.dropped = key is None

    async def handle_async_request(self, request):
        response = await self.inner.handle_async_request(request)
        body = request.content.decode("utf-8", "replace")
        if not self.dropped and '"tools/call"' in body and self.key in body:
            self.dropped = True
            await response.aread()
            await response.aclose()
            return httpx2.Response(504, request=request, content=b"")
        return response


def plain(value):
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


async def outcome(call):
    try:
        return {"result": plain(await call)}
    except MCPError as e:
        return {"error": {"code": e.error.code, "message": e.error.message, "data": e.error.data}}
    except Exception as e:  # a transport failure
        return {"error": {"code": None, "message": f"{type(e).__name__}: {e}", "data": None}}


async def main():
    url, scenario, marker = sys.argv[1:4]
    key = f"{marker}-key"
    elicitations = 0

    async def elicit(context, params):
        nonlocal elicitations
        elicitations += 1
        return types.ElicitResult(action="accept", content={"confirm": True})

    http = httpx2.AsyncClient(
        transport=DroppingTransport(key if scenario == "lost_response" else None),
        timeout=httpx2.Timeout(30, read=300),
    )
    async with http, Client(
        streamable_http_client(url, http_client=http), mode="auto", elicitation_callback=elicit
    ) as client:

        def call(name, arguments, with_key=None):
            meta = {KEY_META: with_key} if with_key else None
            return client.call_tool(name, arguments, meta=meta)

        book = {"customer": marker, "slot": "s-1"}
        report = {}
        if scenario == "lost_response":
            report["first"] = await outcome(call("book", book, key))
            report["retry"] = await outcome(call("book", book, key))
        elif scenario == "concurrent":
            args = dict(book, delay_ms=400)
            results = [None] * 50

            async def one(i):
                results[i] = await outcome(call("book", args, key))

            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(one, i)
            report["all"] = results
        elif scenario == "reuse":
            report["first"] = await outcome(call("book", book, key))
            report["other"] = await outcome(call("book", dict(book, slot="s-2"), key))
        elif scenario == "read_only":
            report["listed"] = await outcome(call("list_bookings", {}))
        elif scenario == "keyless":
            report["keyless"] = await outcome(call("book", book))
            note = {"customer": marker, "text": "hello"}
            report["first"] = await outcome(call("note", note))
            report["repeat"] = await outcome(call("note", note))
            time.sleep(4.5)
            report["later"] = await outcome(call("note", note))
        elif scenario == "input_required":
            report["first"] = await outcome(call("confirm_book", book, key))
            report["retry"] = await outcome(call("confirm_book", book, key))
            report["elicitations"] = elicitations
        elif scenario != "capability":
            raise SystemExit(f"unknown scenario {scenario}")
        report["protocolVersion"] = client.protocol_version
        report["capabilities"] = plain(client.server_capabilities)
        report["tools"] = [plain(t) for t in (await client.list_tools()).tools]
        # (the crash scenarios never reach this far: the Python client runs none)
    print(json.dumps(report))


anyio.run(main)
