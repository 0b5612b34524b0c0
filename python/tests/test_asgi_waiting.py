"""A retry of a running key that asks to wait (``Prefer: wait=N``) or whose route waits
by default, through the ASGI middleware in process (no server): held until the first
attempt's answer exists, its claim is released or the wait ends; capped in number;
stopped by a client that leaves; never for a changed body. The same over uvicorn and a
real store is in ``test_asgi.py``."""

import asyncio
import json
import time
from typing import Dict, List, Optional

from idemkit_rs import Route, Store
from idemkit_rs.asgi import IdempotencyMiddleware, bearer_tenant


class Slow:
    """An app that answers after `delay` seconds: 201 with how many times it ran, or
    503 (a Local route then releases the record) while `failing` is set."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.ran = 0
        self.failing = False

    async def __call__(self, scope, receive, send) -> None:
        await receive()
        self.ran += 1
        run = self.ran
        await asyncio.sleep(self.delay)
        status = 503 if self.failing else 201
        body = json.dumps({"run": run}).encode()
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


class Reply:
    def __init__(self, messages: List[dict], took: float) -> None:
        self.status: Optional[int] = messages[0]["status"] if messages else None
        self.headers: Dict[str, str] = {n.decode(): v.decode() for n, v in messages[0]["headers"]} if messages else {}
        self.body = b"".join(m.get("body", b"") for m in messages[1:])
        self.took = took

    def problem(self) -> str:
        assert self.headers["content-type"] == "application/problem+json", self.body
        return json.loads(self.body)["type"].rsplit("/", 1)[-1]


async def send_request(middleware, body: bytes, key: str = "k-1", prefer: Optional[str] = None,
                       leave_after: Optional[float] = None) -> Reply:
    """One request; `leave_after` seconds after it began, its client disconnects."""
    headers = [(b"authorization", b"Bearer acme"), (b"idempotency-key", key.encode())]
    if prefer is not None:
        headers.append((b"prefer", prefer.encode()))
    scope = {"type": "http", "method": "POST", "path": "/x", "raw_path": b"/x", "query_string": b"", "headers": headers}
    delivered = False
    started = time.monotonic()

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        if leave_after is None:
            await asyncio.Event().wait()
        await asyncio.sleep(max(0.0, started + leave_after - time.monotonic()))
        return {"type": "http.disconnect"}

    sent: list = []

    async def send(message):
        sent.append(message)

    await middleware(scope, receive, send)
    return Reply(sent, time.monotonic() - started)


def middleware_over(app, route: Route, **options) -> IdempotencyMiddleware:
    return IdempotencyMiddleware(app, store=Store.in_memory(), principal=bearer_tenant,
                                 routes={("POST", "/x"): route}, **options)


async def first_then(middleware, app: Slow, *retries):
    """Starts the first request, waits until it runs, then sends `retries` (each a
    dict of send_request's arguments) side by side; returns every reply, the first's
    first."""
    first = asyncio.ensure_future(send_request(middleware, b'{"a":1}'))
    while app.ran == 0:
        await asyncio.sleep(0.005)
    others = [asyncio.ensure_future(send_request(middleware, **retry)) for retry in retries]
    return [await first] + [await other for other in others]


def test_a_retry_that_asks_to_wait_gets_the_first_attempts_answer_when_it_is_recorded():
    app = Slow(delay=0.4)
    middleware = middleware_over(app, Route("x.create"))
    first, held = asyncio.run(first_then(middleware, app, dict(body=b'{"a":1}', prefer="wait=10")))
    assert first.status == 201 and "idempotent-replayed" not in first.headers
    assert held.status == 201 and held.body == first.body
    assert held.headers["idempotent-replayed"] == "true"
    assert held.headers["preference-applied"] == "wait=10"
    # Held, not refused: it came back once the first attempt was recorded, well before its 10 s.
    assert held.took < 5
    assert app.ran == 1 and middleware.waiting == 0


def test_a_requested_wait_is_capped_by_the_routes_max_wait_and_ends_in_409():
    app = Slow(delay=2.5)
    middleware = middleware_over(app, Route("x.create", max_wait=1.0))
    first, held = asyncio.run(first_then(middleware, app, dict(body=b'{"a":1}', prefer="wait=30")))
    assert held.status == 409 and held.problem() == "request-in-progress"
    assert int(held.headers["retry-after"]) >= 1
    assert held.headers["preference-applied"] == "wait=1"
    assert 0.9 <= held.took < 2.4, held.took
    assert first.status == 201 and app.ran == 1


def test_a_route_that_waits_by_default_holds_a_retry_that_asked_nothing():
    app = Slow(delay=0.3)
    middleware = middleware_over(app, Route("x.create", wait=5.0))
    first, held = asyncio.run(first_then(middleware, app, dict(body=b'{"a":1}')))
    assert held.status == 201 and held.headers["idempotent-replayed"] == "true"
    # It asked for nothing, so nothing is said to be applied.
    assert "preference-applied" not in held.headers
    assert app.ran == 1


def test_without_a_wait_a_retry_is_answered_409_at_once():
    app = Slow(delay=0.5)
    middleware = middleware_over(app, Route("x.create"))
    first, refused, zero = asyncio.run(first_then(
        middleware, app, dict(body=b'{"a":1}'), dict(body=b'{"a":1}', prefer="wait=0")))
    for retry in (refused, zero):
        assert retry.status == 409 and retry.problem() == "request-in-progress"
        assert "preference-applied" not in retry.headers
        assert retry.took < 1.0


def test_a_changed_body_is_refused_at_once_even_when_it_asks_to_wait():
    app = Slow(delay=2.0)
    middleware = middleware_over(app, Route("x.create"))
    first, changed = asyncio.run(first_then(middleware, app, dict(body=b'{"a":2}', prefer="wait=10")))
    assert changed.status == 422 and changed.problem() == "idempotency-key-reused"
    assert "preference-applied" not in changed.headers
    # Not held until the first attempt's answer (2 s): refused when it claimed.
    assert changed.took < 1.5
    assert app.ran == 1


def test_past_the_waiter_caps_a_retry_gets_503_too_many_waiters():
    app = Slow(delay=0.6)
    middleware = middleware_over(app, Route("x.create"), max_waiters_per_key=1)
    first, *retries = asyncio.run(first_then(
        middleware, app, dict(body=b'{"a":1}', prefer="wait=10"), dict(body=b'{"a":1}', prefer="wait=10")))
    # Whichever claim came back first was held; the other found the key's one place taken.
    held, refused = sorted(retries, key=lambda reply: reply.status)
    assert held.status == 201 and held.headers["idempotent-replayed"] == "true"
    assert refused.status == 503 and refused.problem() == "too-many-waiters"
    assert int(refused.headers["retry-after"]) >= 1
    assert "preference-applied" not in refused.headers

    # The cap in all counts every key together.
    app = Slow(delay=0.6)
    middleware = middleware_over(app, Route("x.create"), max_waiters=0)
    first, refused = asyncio.run(first_then(middleware, app, dict(body=b'{"a":1}', prefer="wait=10")))
    assert refused.status == 503 and refused.problem() == "too-many-waiters"


def test_a_client_that_leaves_while_held_stops_waiting_and_frees_its_place():
    app = Slow(delay=1.5)
    middleware = middleware_over(app, Route("x.create"), max_waiters_per_key=1)

    async def scenario():
        first = asyncio.ensure_future(send_request(middleware, b'{"a":1}'))
        while app.ran == 0:
            await asyncio.sleep(0.005)
        left = await send_request(middleware, b'{"a":1}', prefer="wait=10", leave_after=0.2)
        waiting_after = middleware.waiting
        # Its place is free again: the next retry that asks to wait is held.
        held = await send_request(middleware, b'{"a":1}', prefer="wait=10")
        return left, waiting_after, held, await first

    left, waiting_after, held, first = asyncio.run(scenario())
    assert left.status is None, "nothing is sent to a client that left"
    # Back before the first attempt's answer (1.5 s), which it would have waited for.
    assert left.took < 1.4
    assert waiting_after == 0
    assert held.status == 201 and held.body == first.body


def test_a_released_claim_lets_the_held_retry_execute():
    """A Local route's attempt that answers 503 releases its record: the held retry
    claims and executes as a new attempt, and gets its own answer."""
    app = Slow(delay=0.3)
    app.failing = True
    middleware = middleware_over(app, Route("x.create", effect="local"))

    async def scenario():
        first = asyncio.ensure_future(send_request(middleware, b'{"a":1}'))
        while app.ran == 0:
            await asyncio.sleep(0.005)
        held = asyncio.ensure_future(send_request(middleware, b'{"a":1}', prefer="wait=10"))
        await first
        app.failing = False
        return await first, await held

    first, held = asyncio.run(scenario())
    assert first.status == 503
    assert held.status == 201 and json.loads(held.body) == {"run": 2}
    assert "idempotent-replayed" not in held.headers
    assert held.headers["preference-applied"] == "wait=10"
    assert app.ran == 2
