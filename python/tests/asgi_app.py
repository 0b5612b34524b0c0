"""The Starlette app the ASGI scenarios run in uvicorn, configured by environment:

- ``IDEMKIT_TEST_STORE``: ``redb:PATH`` or ``postgres:URL``;
- ``IDEMKIT_TEST_LEASE``: the lease in seconds (default 30);
- ``IDEMKIT_TEST_DIR``: where the external "provider" writes what it received.

Routes: ``POST /accounts/{account}/withdraw`` (External; ``delay`` in the body holds
it), ``POST /charge`` (External; writes to the provider, then ``then`` says what
happens: ``ok``, ``raise``, ``crash``), ``POST /notes`` (Local; ``fail`` answers
503), ``POST /open`` (key optional), ``GET /executions`` (counts, not protected).
"""

import asyncio
import json
import os
import signal
from collections import Counter
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route as Path_

from idemkit_rs import Route, Store
from idemkit_rs.asgi import IdempotencyMiddleware, bearer_tenant

kind, _, where = os.environ["IDEMKIT_TEST_STORE"].partition(":")
store = Store(where) if kind == "redb" else Store.postgres(where, schema="idemkit_py")
lease = float(os.environ.get("IDEMKIT_TEST_LEASE", "30"))
provider = Path(os.environ.get("IDEMKIT_TEST_DIR", "."))
executions: Counter = Counter()


async def withdraw(request: Request) -> JSONResponse:
    body = await request.json()
    executions["withdraw"] += 1
    n = executions["withdraw"]
    await asyncio.sleep(float(body.get("delay", 0)))
    return JSONResponse(
        {"account": request.path_params["account"], "amount": body.get("amount"), "execution": n},
        status_code=201,
        headers={"Location": f"/withdrawals/{n}", "X-Request-Cost": "3", "X-Session-Token": "tok", "Set-Cookie": "sid=secret"},
    )


async def charge(request: Request) -> JSONResponse:
    body = await request.json()
    execution = request.state.idemkit
    executions["charge"] += 1
    # The provider call: persisted step first, then the effect the provider keeps.
    _, provider_key = await asyncio.to_thread(execution.begin_step, "charge", f"pk-{execution.log_ref}")
    with open(provider / "provider.log", "a") as log:
        log.write(f"{provider_key}\n")
        log.flush()
        os.fsync(log.fileno())
    then = body.get("then", "ok")
    if then == "raise":
        raise RuntimeError("the handler failed after the provider call")
    if then == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.to_thread(execution.complete_step, "charge", "ch_1")
    execution.set_resource_ref("ch_1")
    return JSONResponse({"charged": body.get("amount")}, status_code=201)


async def notes(request: Request) -> JSONResponse:
    body = await request.json()
    executions["notes"] += 1
    if body.get("fail"):
        return JSONResponse({"error": "try later"}, status_code=503)
    return JSONResponse({"note": body.get("text")}, status_code=201)


async def open_route(request: Request) -> JSONResponse:
    executions["open"] += 1
    return JSONResponse({"ran": executions["open"]})


async def counts(request: Request) -> JSONResponse:
    return JSONResponse(dict(executions))


app = Starlette(
    routes=[
        Path_("/accounts/{account}/withdraw", withdraw, methods=["POST"]),
        Path_("/charge", charge, methods=["POST"]),
        Path_("/notes", notes, methods=["POST"]),
        Path_("/open", open_route, methods=["POST"]),
        Path_("/executions", counts, methods=["GET"]),
    ]
)
app.add_middleware(
    IdempotencyMiddleware,
    store=store,
    principal=bearer_tenant,
    routes={
        ("POST", "/accounts/{account}/withdraw"): Route(
            "accounts.withdraw", lease=lease, body_limit=4096,
            replayed_headers=["content-type", "location", "x-request-cost"],
        ),
        ("POST", "/charge"): Route("payments.charge", lease=lease),
        ("POST", "/notes"): Route("notes.create", effect="local", lease=lease),
        ("POST", "/open"): Route("open.create", key_required=False, lease=lease),
    },
)
