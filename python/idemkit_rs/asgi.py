"""An ASGI middleware (Starlette, FastAPI, any ASGI app on asyncio) that makes routes
idempotent with the HTTP contract of idemkit's tower/axum layer.

For a request to a protected route, in this order: the principal names the tenant
(none: 401); the ``Idempotency-Key`` header is parsed (missing and required: 400
``missing-idempotency-key``; malformed: 400 ``invalid-idempotency-key``; missing on
an optional route: the request passes through); the body is read up to the route's
limit (over: 413) and fingerprinted with the method, the concrete path and the query
(not I-JSON: 400); the store claims ``(tenant, operation, key)`` (unavailable: 503,
nothing executed). Then a completed key is replayed byte for byte with
``Idempotent-Replayed: true`` (the status, the body and the headers the route's
allow list names); a running one gets 409 ``request-in-progress`` with
``Retry-After``; the key with another body, path or query gets 422; an unknown
outcome gets 409 ``outcome-uncertain``; a response past its replay window gets 410.
Every refusal is ``application/problem+json`` built by idemkit's core, the same bytes
the Rust layer and the npm handler send.

A retry of a running key that asked to wait (``Prefer: wait=N``, capped by the
route's ``max_wait``), or whose route waits by default (``wait``), is held instead of
answered 409: until the first attempt's answer exists (it gets that answer), the
first attempt's claim is released (it executes) or the wait ends (the 409), with
``Preference-Applied: wait=N`` when it asked. It claims again on core's fallback
poll (50 ms doubling to 1 s); at most ``max_waiters_per_key`` retries are held on
one key and ``max_waiters`` in all (past them: 503 ``too-many-waiters``); a client
that leaves stops its wait.

Otherwise the app runs, with the :class:`~idemkit_rs.Execution` at
``scope["state"]["idemkit"]`` (``request.state.idemkit`` in Starlette) for steps,
provider keys and evidence of dispatch; its lease is renewed meanwhile. Its response
is recorded before it is sent (durable before acknowledged): a definitive answer is
stored; a 408/409/425/429 or 5xx releases a Local route's record and makes an
External one unknown; an app that raises leaves an External record unknown (never
executed twice) and a Local one released. A client that goes away does not stop the
execution: it runs to its end and is recorded, so the client's retry gets 409 and
then the replay.

Every store call (claims and completions fsync; PostgreSQL waits on the network)
runs in the middleware's worker threads, never on the event loop, and releases the
GIL. Responses of protected routes are buffered whole before they are recorded.

Local effects: a write to your own database cannot join the record's transaction
from Python, so a Local route is at least once across a crash between your commit
and the record's; give such writes a natural key, or declare the route External.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Dict, List, Mapping, MutableMapping, Optional, Set, Tuple, Union

from ._native import DEFAULT_MAX_WAITERS, DEFAULT_MAX_WAITERS_PER_KEY, Answer, Execution, Route, Store, fallback_poll

__all__ = ["IdempotencyMiddleware", "bearer_tenant"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Principal = Callable[[Scope], Union[Optional[str], Awaitable[Optional[str]]]]

_TEMPLATE_PART = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(:path)?\}")


def _compile(template: str) -> "re.Pattern[str]":
    """A route path template (`/accounts/{account}/withdraw`, `/files/{rest:path}`)
    as a regular expression over the request's path."""
    pattern, last = [], 0
    for match in _TEMPLATE_PART.finditer(template):
        pattern.append(re.escape(template[last : match.start()]))
        pattern.append(".+" if match.group(2) else "[^/]+")
        last = match.end()
    pattern.append(re.escape(template[last:]))
    return re.compile("".join(pattern) + r"\Z")


def bearer_tenant(scope: Scope) -> Optional[str]:
    """A principal for demos and tests: the token of ``Authorization: Bearer <t>``
    names the tenant. A real service verifies the token and names its owner."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


class IdempotencyMiddleware:
    """Makes the routes named in ``routes`` idempotent; everything else passes through.

    ``routes`` maps ``(method, path template)`` to a :class:`~idemkit_rs.Route`:
    ``{("POST", "/appointments"): Route("appointments.create")}``; a template
    segment ``{name}`` matches one path segment, ``{name:path}`` the rest. The
    template is matched against the path the app's router sees.

    ``principal(scope)`` (sync or async) names the authenticated tenant, or ``None``
    (401). It never comes from the body or the key.

    ``threads`` bounds the worker threads that run store calls; ``max_execution``
    (seconds) bounds how long a lease is renewed while the app runs;
    ``max_waiters_per_key`` and ``max_waiters`` bound the retries held waiting for a
    running key's answer (``Prefer: wait``), on one key and in all.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        store: Store,
        routes: Mapping[Tuple[str, str], Route],
        principal: Principal,
        threads: int = 32,
        max_execution: float = 900.0,
        max_waiters_per_key: int = DEFAULT_MAX_WAITERS_PER_KEY,
        max_waiters: int = DEFAULT_MAX_WAITERS,
    ) -> None:
        self.app = app
        self.store = store
        self.principal = principal
        self.max_execution = max_execution
        self._routes: List[Tuple[str, "re.Pattern[str]", Route]] = [
            (method.upper(), _compile(template), route) for (method, template), route in routes.items()
        ]
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="idemkit")
        # Executions outlive their requests (a client that left); kept here so the
        # event loop does not drop them.
        self._running: Set["asyncio.Task[Any]"] = set()
        self.max_waiters_per_key = max_waiters_per_key
        self.max_waiters = max_waiters
        # Retries held now, per (operation, tenant, key) and in all.
        self._waiters: Dict[Tuple[str, str, str], int] = {}
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """How many requests are held now, waiting for a running key's answer."""
        return self._waiting

    def _route(self, method: str, path: str) -> Optional[Route]:
        for wanted, pattern, route in self._routes:
            if wanted == method and pattern.match(path):
                return route
        return None

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in a worker thread: store calls never run on the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self._route(scope["method"].upper(), scope["path"])
        if route is None:
            await self.app(scope, receive, send)
            return
        tenant = self.principal(scope)
        if inspect.isawaitable(tenant):
            tenant = await tenant
        key_headers = _header_values(scope, b"idempotency-key")
        admitted = route.admit(tenant, key_headers)
        if admitted is None:
            await self.app(scope, receive, send)
            return
        if isinstance(admitted, Answer):
            await _send_answer(send, admitted.status, admitted.headers, admitted.body)
            return
        try:
            body = await _read_body(scope, receive, route.body_limit)
        except _ClientGone:
            return  # nothing was claimed
        if body is None:
            await _send_answer(send, *_parts(route.too_large()))
            return
        # The concrete path as sent (percent-encoding kept) and the raw query count.
        raw_path = scope.get("raw_path")
        path = raw_path.decode("latin-1") if raw_path else scope["path"]
        query = scope.get("query_string", b"").decode("latin-1") or None

        async def claim() -> Union[Execution, Answer]:
            try:
                return await self._blocking(
                    route.claim, self.store, tenant, admitted, scope["method"], path, query, body
                )
            except Exception:
                # Fail closed: nothing executes without a claim.
                return route.unavailable()

        claimed = await claim()
        applied: Optional[str] = None
        if isinstance(claimed, Answer) and claimed.outcome == "request-in-progress":
            seconds, asked = route.wait_for(_header_values(scope, b"prefer"))
            if seconds > 0:
                held_on = (route.operation, tenant, admitted)
                if not self._has_place(held_on):
                    await _send_answer(send, *_parts(route.too_many_waiters(claimed)))
                    return
                waited = await self._hold(held_on, seconds, claim, claimed, receive)
                if waited is None:
                    return  # the client left while it waited
                claimed, applied = waited, asked
        if isinstance(claimed, Answer):
            await _send_answer(send, *_parts(claimed), applied)
            return
        # The execution runs on its own task: a client that goes away (or a server
        # that cancels its request) does not stop it, and it is recorded either way.
        task = asyncio.ensure_future(self._execute(claimed, route, scope, body))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        status, headers, reply = await asyncio.shield(task)
        await _send_answer(send, status, headers, reply, applied)

    def _has_place(self, key: Tuple[str, str, str]) -> bool:
        """Whether one more retry may be held on `key` (`_hold` takes the place)."""
        return self._waiting < self.max_waiters and self._waiters.get(key, 0) < self.max_waiters_per_key

    async def _hold(
        self,
        key: Tuple[str, str, str],
        seconds: float,
        claim: Callable[[], Awaitable[Union[Execution, Answer]]],
        first: Answer,
        receive: Receive,
    ) -> Union[Execution, Answer, None]:
        """Holds a retry of a running key: claims again on core's fallback poll until
        the claim is no longer in progress (the first attempt's answer, or an
        `Execution` when its claim was released) or `seconds` pass (the last 409).
        `None` when the client left meanwhile."""
        self._waiting += 1
        self._waiters[key] = self._waiters.get(key, 0) + 1
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + seconds
            claimed: Union[Execution, Answer] = first
            polls = 0
            while isinstance(claimed, Answer) and claimed.outcome == "request-in-progress":
                left = deadline - loop.time()
                if left <= 0:
                    break
                done, _ = await asyncio.wait({gone}, timeout=min(fallback_poll(polls), left))
                if done:
                    return None
                polls += 1
                claimed = await claim()
            return claimed
        finally:
            gone.cancel()
            self._waiting -= 1
            left_on_key = self._waiters[key] - 1
            if left_on_key:
                self._waiters[key] = left_on_key
            else:
                del self._waiters[key]

    async def _execute(
        self, execution: Execution, route: Route, scope: Scope, body: bytes
    ) -> Tuple[int, List[Tuple[bytes, bytes]], bytes]:
        inner = dict(scope)
        inner["state"] = dict(scope.get("state") or {}, idemkit=execution)
        # The response is buffered and sent by the middleware: no server extension
        # may send around it.
        inner["extensions"] = {
            k: v for k, v in (scope.get("extensions") or {}).items() if k not in ("http.response.pathsend", "http.response.zerocopysend")
        }
        delivered = asyncio.Event()

        async def replay_body() -> Message:
            if not delivered.is_set():
                delivered.set()
                return {"type": "http.request", "body": body, "more_body": False}
            # The request has no more to give; an app waiting for a disconnect waits
            # until it is done (the execution finishes whether the client stays or not).
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        start: Dict[str, Any] = {}
        chunks: List[bytes] = []
        finished = False

        async def capture(message: Message) -> None:
            nonlocal finished
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))
                finished = not message.get("more_body", False)

        renewal = asyncio.ensure_future(self._renew(execution, route.lease))
        try:
            try:
                await self.app(inner, replay_body, capture)
                if not start or not finished:
                    raise RuntimeError("the app returned without a complete response")
            except BaseException:
                # No answer to record: an External record becomes unknown (never run
                # twice), a Local one is released; then the app's error goes on.
                await self._blocking(execution.settle)
                raise
            status = int(start["status"])
            headers = [(bytes(n), bytes(v)) for n, v in start.get("headers", [])]
            reply = b"".join(chunks)
            refused = await self._blocking(execution.finish, status, headers, reply)
        finally:
            renewal.cancel()
        if refused is not None:
            # Not durable, so not acknowledged.
            return _parts(refused)
        return status, headers, reply

    async def _renew(self, execution: Execution, lease: float) -> None:
        """Renews the lease every third of its length while the app runs, retrying a
        failing store sooner; stops when the store refuses (the lease really ended)
        or after `max_execution`, so that a hung app's lease expires."""
        every = max(lease / 3, 0.01)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_execution
        wait = every
        while loop.time() + wait <= deadline:
            await asyncio.sleep(wait)
            try:
                if not await self._blocking(execution.renew):
                    return
                wait = every
            except Exception:
                wait = max(every / 4, 0.01)


def _parts(answer: Answer) -> Tuple[int, List[Tuple[bytes, bytes]], bytes]:
    return answer.status, answer.headers, answer.body


def _header_values(scope: Scope, name: bytes) -> List[bytes]:
    """The values of every field line named `name` (lowercase), in order."""
    return [value for field, value in scope.get("headers", []) if field.lower() == name]


async def _disconnected(receive: Receive) -> None:
    """Returns once the client disconnected (the request body was read before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class _ClientGone(Exception):
    """The client disconnected before its request body was whole."""


async def _read_body(scope: Scope, receive: Receive, limit: int) -> Optional[bytes]:
    """The request body, or `None` when it is longer than `limit` (declared or
    sent). A client that leaves before the body ends raises `_ClientGone`: a
    partial body is never claimed."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                if int(value) > limit:
                    return None
            except ValueError:
                pass
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _send_answer(
    send: Send, status: int, headers: List[Tuple[bytes, bytes]], body: bytes, applied: Optional[str] = None
) -> None:
    """Sends a whole response; `applied` is the `Preference-Applied` value of a
    retry whose wait was honoured."""
    headers = [(n, v) for n, v in headers if n.lower() not in (b"content-length", b"preference-applied")]
    headers.append((b"content-length", str(len(body)).encode()))
    if applied is not None:
        headers.append((b"preference-applied", applied.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
