"""The app of the ASGI overhead figure: the same Starlette handler at ``/bare`` (no
idempotency) and at ``/protected`` (behind IdempotencyMiddleware, External, on a
redb store in ``IDEMKIT_BENCH_STORE``)."""

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route as Path_

from idemkit_rs import Route, Store
from idemkit_rs.asgi import IdempotencyMiddleware, bearer_tenant


async def handler(request: Request) -> JSONResponse:
    body = await request.json()
    return JSONResponse({"id": "bk_1", "slot_id": body.get("slot_id")}, status_code=201)


app = Starlette(routes=[Path_("/bare", handler, methods=["POST"]), Path_("/protected", handler, methods=["POST"])])
app.add_middleware(
    IdempotencyMiddleware,
    store=Store(os.environ["IDEMKIT_BENCH_STORE"]),
    principal=bearer_tenant,
    routes={("POST", "/protected"): Route("bench.create")},
)
