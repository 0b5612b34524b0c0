"""A FastAPI booking service whose POST /bookings is idempotent, by idemkit-rs.

    pip install idemkit-rs fastapi uvicorn
    IDEMKIT_DB=bookings.redb uvicorn fastapi_service:app --port 8000

    curl -si localhost:8000/bookings -H 'Authorization: Bearer clinic-a' \\
      -H 'Idempotency-Key: 7f9c2e1a-book-anna' -H 'Content-Type: application/json' \\
      -d '{"customer_id": "anna", "slot_id": "2026-12-01T10:00"}'

The same request again is answered from the record (``Idempotent-Replayed: true``),
another slot under the same key gets 422, a retry while the first runs gets 409 with
``Retry-After``. ``IDEMKIT_POSTGRES=postgres://...`` shares the records between
instances instead. ``Authorization: Bearer <tenant>`` names the tenant: demo-only
authentication; a real service verifies the token.
"""

import asyncio
import os
from typing import Dict, List

from fastapi import FastAPI, Request
from pydantic import BaseModel

from idemkit_rs import Route, Store
from idemkit_rs.asgi import IdempotencyMiddleware, bearer_tenant

store = (
    Store.postgres(os.environ["IDEMKIT_POSTGRES"])
    if "IDEMKIT_POSTGRES" in os.environ
    else Store(os.environ.get("IDEMKIT_DB", "bookings.redb"))
)
app = FastAPI(title="bookings")
bookings: Dict[str, List[dict]] = {}


class Booking(BaseModel):
    customer_id: str
    slot_id: str


async def calendar_book(slot_id: str, provider_key: str) -> str:
    """The calendar provider, which takes its own idempotency key (simulated)."""
    await asyncio.sleep(0.05)
    return f"cal_{provider_key[-8:]}"


@app.post("/bookings", status_code=201)
async def book(booking: Booking, request: Request) -> dict:
    execution = request.state.idemkit
    tenant = execution.tenant
    # The provider's key is persisted before the call: a retry after a crash sends
    # the same one, and a finished step is never sent again.
    step, found = await asyncio.to_thread(execution.begin_step, "calendar", f"bk-{execution.log_ref}")
    reference = found if step == "done" else await calendar_book(booking.slot_id, found)
    if step != "done":
        await asyncio.to_thread(execution.complete_step, "calendar", reference)
    execution.set_resource_ref(reference)
    created = {"id": reference, "customer_id": booking.customer_id, "slot_id": booking.slot_id}
    bookings.setdefault(tenant, []).append(created)
    return created


@app.get("/bookings")
async def list_bookings(request: Request) -> dict:
    return {"bookings": bookings.get(bearer_tenant(request.scope) or "", [])}


app.add_middleware(
    IdempotencyMiddleware,
    store=store,
    principal=bearer_tenant,
    routes={("POST", "/bookings"): Route("bookings.create", effect="external")},
)
