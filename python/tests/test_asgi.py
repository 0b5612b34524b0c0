"""The ASGI middleware over HTTP: a Starlette app (``asgi_app.py``) in a real uvicorn
server, on the embedded redb store and on PostgreSQL, through the middleware's
scenario list: in flight (409 with Retry-After), another body, path or query (422,
nothing run), a byte-identical replay, 100 concurrent retries running once, a crash
around an external call left unknown and settled by an operator, and the refusals
(400, 401, 413), each answer core's problem+json.

The PostgreSQL cases need ``IDEMKIT_TEST_POSTGRES_URL``: ``scripts/with-postgres.sh``
starts a throwaway server and sets it (``scripts/test-all.sh`` runs this suite so).
Without it they fail, never skip.
"""

import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import httpx
import pytest

from conftest import HERE, PYTHON, REPO, Server, free_port
from idemkit_rs import Store

PG_URL = os.environ.get("IDEMKIT_TEST_POSTGRES_URL")
TENANT = {"Authorization": "Bearer acme"}


class App:
    """`asgi_app.py` under uvicorn on one store; restartable on the same store."""

    def __init__(self, backend: str, directory: Path, servers: list, lease: float) -> None:
        if backend == "postgres":
            assert PG_URL, "IDEMKIT_TEST_POSTGRES_URL is not set: run under scripts/with-postgres.sh"
            self.store_spec = f"postgres:{PG_URL}"
        else:
            self.store_spec = f"redb:{directory / 'records.redb'}"
        self.backend = backend
        self.directory = directory
        self.servers = servers
        self.lease = lease
        self.server: Server = self.start()

    def start(self) -> Server:
        port = free_port()
        env = dict(os.environ, IDEMKIT_TEST_STORE=self.store_spec, IDEMKIT_TEST_LEASE=str(self.lease),
                   IDEMKIT_TEST_DIR=str(self.directory))
        argv = [PYTHON, "-m", "uvicorn", "asgi_app:app", "--app-dir", str(HERE), "--port", str(port),
                "--log-level", "warning"]
        server = Server(argv, port, "uvicorn", env=env, log=self.directory / "uvicorn.log").start()
        self.servers.append(server)
        self.server = server
        return server

    def post(self, path: str, body: object, key: Optional[str], headers: Optional[dict] = None, **kw) -> httpx.Response:
        sent = dict(TENANT, **(headers or {}))
        if key is not None:
            sent["Idempotency-Key"] = key
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        kw.setdefault("timeout", 30)
        return httpx.post(self.server.url + path, content=content, headers=sent, **kw)

    def executions(self, route: str) -> int:
        return httpx.get(self.server.url + "/executions").json().get(route, 0)

    def operator_store(self) -> Store:
        """The store as an operator opens it (redb: only while the server is down)."""
        if self.backend == "postgres":
            return Store.postgres(PG_URL, schema="idemkit_py")
        return Store(str(self.directory / "records.redb"))


@pytest.fixture(params=["redb", "postgres"])
def app(request, tmp_path, servers):
    # A short lease, so that PostgreSQL's takeover after a crash comes soon.
    return App(request.param, tmp_path, servers, lease=3.0)


def new_key() -> str:
    return f"k-{uuid.uuid4()}"


def problem(response: httpx.Response) -> str:
    assert response.headers["content-type"] == "application/problem+json", response.text
    return response.json()["type"].rsplit("/", 1)[-1]


def test_a_retry_while_the_first_runs_gets_409_with_retry_after_then_the_replay(app):
    """The first request holds its execution 1.5 s; a retry meanwhile gets 409
    request-in-progress with Retry-After; after it ends, the retry replays."""
    key = new_key()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(app.post, "/accounts/A/withdraw", {"amount": 10, "delay": 1.5}, key)
        deadline = time.monotonic() + 20
        while app.executions("withdraw") == 0:
            assert time.monotonic() < deadline, "the first request never started"
            time.sleep(0.02)
        during = app.post("/accounts/A/withdraw", {"amount": 10, "delay": 1.5}, key)
        assert during.status_code == 409 and problem(during) == "request-in-progress"
        assert int(during.headers["retry-after"]) >= 1
        original = first.result()
    assert original.status_code == 201
    replay = app.post("/accounts/A/withdraw", {"amount": 10, "delay": 1.5}, key)
    assert replay.status_code == 201 and replay.content == original.content
    assert replay.headers["idempotent-replayed"] == "true"
    assert app.executions("withdraw") == 1


def test_a_retry_that_asks_to_wait_is_held_until_the_first_answer(app):
    """A retry with `Prefer: wait=10` while the first request runs (1.5 s) is held
    and gets the first attempt's answer, replayed, with `Preference-Applied`."""
    key = new_key()
    body = {"amount": 7, "delay": 1.5}
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(app.post, "/accounts/A/withdraw", body, key)
        deadline = time.monotonic() + 20
        while app.executions("withdraw") == 0:
            assert time.monotonic() < deadline, "the first request never started"
            time.sleep(0.02)
        held = app.post("/accounts/A/withdraw", body, key, headers={"Prefer": "wait=10"})
        original = first.result()
    assert original.status_code == 201
    assert held.status_code == 201 and held.content == original.content
    assert held.headers["idempotent-replayed"] == "true"
    assert held.headers["preference-applied"] == "wait=10"
    assert app.executions("withdraw") == 1


def test_a_client_that_times_out_does_not_stop_the_execution(app):
    """The client gives up after 0.3 s on a 1.5 s withdrawal and disconnects; the
    execution runs to its end and is recorded: the retry gets 409 in progress, then
    the replay of that one execution."""
    key = new_key()
    body = {"amount": 3, "delay": 1.5}
    with pytest.raises(httpx.TimeoutException):
        app.post("/accounts/A/withdraw", body, key, timeout=0.3)
    during = app.post("/accounts/A/withdraw", body, key)
    assert during.status_code == 409 and problem(during) == "request-in-progress"
    deadline = time.monotonic() + 20
    while True:
        retry = app.post("/accounts/A/withdraw", body, key)
        if retry.status_code != 409:
            break
        assert time.monotonic() < deadline, "the abandoned execution was never recorded"
        time.sleep(0.1)
    assert retry.status_code == 201 and retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["execution"] == 1
    assert app.executions("withdraw") == 1


def test_the_key_with_another_body_path_or_query_is_refused_and_nothing_runs(app):
    """Same key, another body / another account in the path / another query: 422
    idempotency-key-reused each time, and the handler ran once; the same body
    respelled (member order, whitespace) replays."""
    key = new_key()
    assert app.post("/accounts/A/withdraw", {"amount": 10, "note": "x"}, key).status_code == 201
    for path, body in [
        ("/accounts/A/withdraw", {"amount": 11, "note": "x"}),
        ("/accounts/B/withdraw", {"amount": 10, "note": "x"}),
        ("/accounts/A/withdraw?currency=EUR", {"amount": 10, "note": "x"}),
    ]:
        refused = app.post(path, body, key)
        assert refused.status_code == 422 and problem(refused) == "idempotency-key-reused", path
    respelled = app.post("/accounts/A/withdraw", b'{ "note" : "x",\n "amount" : 10.0 }', key)
    assert respelled.status_code == 201 and respelled.headers["idempotent-replayed"] == "true"
    assert app.executions("withdraw") == 1


def test_a_replay_is_byte_identical_and_keeps_only_the_allowed_headers(app):
    """Status, body bytes and the headers the route allows (content type, location,
    an application header it names) are the original's; a header it does not name
    (a session token) and Set-Cookie are answered once and never replayed."""
    key = new_key()
    original = app.post("/accounts/A/withdraw", {"amount": 5}, key)
    replay = app.post("/accounts/A/withdraw", {"amount": 5}, key)
    assert (replay.status_code, replay.content) == (original.status_code, original.content)
    for name in ["content-type", "location", "x-request-cost"]:
        assert replay.headers[name] == original.headers[name], name
    for name in ["set-cookie", "x-session-token"]:
        assert name in original.headers and name not in replay.headers, name
    assert "idempotent-replayed" not in original.headers


def test_a_hundred_concurrent_retries_run_once(app):
    """100 requests with one key at once against a handler that takes 0.5 s: one
    execution; every answer is the 201 (first or replayed) or 409 in progress; a
    retry afterwards replays the one result."""
    key = new_key()
    body = {"amount": 7, "delay": 0.5}
    with ThreadPoolExecutor(100) as pool:
        answers = list(pool.map(lambda _: app.post("/accounts/A/withdraw", body, key), range(100)))
    statuses = sorted({a.status_code for a in answers})
    assert set(statuses) <= {201, 409}, statuses
    assert sum(1 for a in answers if a.status_code == 201 and "idempotent-replayed" not in a.headers) == 1
    assert all(problem(a) == "request-in-progress" for a in answers if a.status_code == 409)
    assert app.executions("withdraw") == 1
    created = [a for a in answers if a.status_code == 201]
    replay = app.post("/accounts/A/withdraw", body, key)
    assert replay.status_code == 201 and replay.content == created[0].content
    assert replay.json()["execution"] == 1


def test_a_handler_failing_after_the_external_call_leaves_the_outcome_unknown(app):
    """The charge reaches the provider, then the handler raises: the client gets 500,
    the retry 409 outcome-uncertain (never a second charge), the record is listed as
    unresolved, and once an operator resolves it applied, the retry replays that."""
    key = new_key()
    failed = app.post("/charge", {"amount": 9, "then": "raise"}, key)
    assert failed.status_code == 500
    retry = app.post("/charge", {"amount": 9, "then": "raise"}, key)
    assert retry.status_code == 409 and problem(retry) == "outcome-uncertain"
    assert retry.json()["log_ref"]
    assert app.executions("charge") == 1
    assert len((app.directory / "provider.log").read_text().splitlines()) == 1

    if app.backend == "redb":
        app.server.stop()  # one process holds a redb file
    store = app.operator_store()
    unresolved = [r for r in store.list(unresolved=True) if r["key"] == key]
    assert [r["state"] for r in unresolved] == ["unknown"]
    assert unresolved[0]["tenant"] == "acme" and unresolved[0]["operation"] == "payments.charge"
    resolved = store.resolve("acme", "payments.charge", key, applied=True, status=201,
                             headers=[("content-type", b"application/json")], body=b'{"charged":9}')
    assert resolved["state"] == "completed"
    assert store.gc()["deleted"] == 0  # nothing is past its window
    del store
    if app.backend == "redb":
        app.start()
    settled = app.post("/charge", {"amount": 9, "then": "raise"}, key)
    assert settled.status_code == 201 and settled.content == b'{"charged":9}'
    assert settled.headers["idempotent-replayed"] == "true"


def test_a_crash_after_the_external_call_leaves_the_outcome_unknown(app):
    """The server process is SIGKILLed right after the provider call. Restarted on
    the same store, a retry gets 409 outcome-uncertain and the provider was called
    once: on redb at once (the new process settles what the dead one left running),
    on PostgreSQL once the dead process's lease has expired."""
    key = new_key()
    with pytest.raises(httpx.TransportError):
        app.post("/charge", {"amount": 9, "then": "crash"}, key)
    app.server.process.wait(timeout=10)
    app.start()
    deadline = time.monotonic() + app.lease + 20
    while True:
        retry = app.post("/charge", {"amount": 9, "then": "crash"}, key)
        if retry.status_code != 409 or problem(retry) != "request-in-progress":
            break
        assert time.monotonic() < deadline, "the crashed execution's lease never ended"
        time.sleep(0.2)
    assert retry.status_code == 409 and problem(retry) == "outcome-uncertain"
    assert len((app.directory / "provider.log").read_text().splitlines()) == 1


def test_refusals_are_core_problems(app):
    """No key → 400 missing-idempotency-key; two keys or a bad one → 400
    invalid-idempotency-key; no credentials → 401; a body over the route's limit →
    413; a body that is not I-JSON → 400 invalid-request-body; nothing runs. A
    Local route's 503 releases the key (a retry runs again); an optional route
    without a key passes through."""
    assert problem(app.post("/accounts/A/withdraw", {"amount": 1}, None)) == "missing-idempotency-key"
    bad = app.post("/accounts/A/withdraw", {"amount": 1}, "a,b")
    assert bad.status_code == 400 and problem(bad) == "invalid-idempotency-key"
    assert bad.json()["code"] == "key-bare-comma"
    two = httpx.post(app.server.url + "/accounts/A/withdraw", content=b"{}",
                     headers=[("Authorization", "Bearer acme"), ("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
    assert two.status_code == 400 and problem(two) == "invalid-idempotency-key"
    anonymous = httpx.post(app.server.url + "/accounts/A/withdraw", content=b"{}", headers={"Idempotency-Key": new_key()})
    assert anonymous.status_code == 401 and problem(anonymous) == "unauthenticated"
    large = app.post("/accounts/A/withdraw", {"pad": "x" * 5000}, new_key())
    assert large.status_code == 413 and problem(large) == "body-too-large"
    duplicate = app.post("/accounts/A/withdraw", b'{"amount":1,"amount":2}', new_key())
    assert duplicate.status_code == 400 and problem(duplicate) == "invalid-request-body"
    assert duplicate.json()["code"] == "json-duplicate-member-name"
    assert app.executions("withdraw") == 0

    key = new_key()
    assert app.post("/notes", {"text": "hi", "fail": True}, key).status_code == 503
    assert app.post("/notes", {"text": "hi", "fail": True}, key).status_code == 503
    assert app.executions("notes") == 2, "a Local 503 is released: the retry ran again"
    assert app.post("/open", {}, None).json() == {"ran": 1}


def test_the_fastapi_example_service_books_once(tmp_path, servers):
    """python/examples/fastapi_service.py: a booking retried with its key replays."""
    port = free_port()
    env = dict(os.environ, IDEMKIT_DB=str(tmp_path / "bookings.redb"))
    argv = [PYTHON, "-m", "uvicorn", "fastapi_service:app", "--app-dir", str(REPO / "python" / "examples"),
            "--port", str(port), "--log-level", "warning"]
    server = Server(argv, port, "the FastAPI example", env=env, log=tmp_path / "example.log").start()
    servers.append(server)
    headers = {"Authorization": "Bearer clinic-a", "Idempotency-Key": new_key()}
    body = {"customer_id": "anna", "slot_id": "2026-12-01T10:00"}
    first = httpx.post(server.url + "/bookings", json=body, headers=headers)
    again = httpx.post(server.url + "/bookings", json=body, headers=headers)
    assert first.status_code == 201 and again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    listed = httpx.get(server.url + "/bookings", headers={"Authorization": "Bearer clinic-a"}).json()
    assert len(listed["bookings"]) == 1


def test_a_request_cancelled_by_its_server_still_records_its_execution():
    """A server that cancels a request's task when its client leaves (as some ASGI
    servers do) does not cancel the execution: it runs on its own task to the end
    and is recorded, so the retry replays it (in process, no server)."""
    import asyncio

    from idemkit_rs import Route
    from idemkit_rs.asgi import IdempotencyMiddleware, bearer_tenant

    ran = []

    async def slow_app(scope, receive, send):
        await receive()
        await asyncio.sleep(0.3)
        ran.append(1)
        await send({"type": "http.response.start", "status": 201, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"ok":true}'})

    store = Store.in_memory()
    middleware = IdempotencyMiddleware(
        slow_app, store=store, principal=bearer_tenant, routes={("POST", "/x"): Route("x.create")}
    )
    scope = {"type": "http", "method": "POST", "path": "/x", "raw_path": b"/x", "query_string": b"",
             "headers": [(b"authorization", b"Bearer acme"), (b"idempotency-key", b"k-1")]}

    async def request(sent: list) -> None:
        async def receive():
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(message):
            sent.append(message)

        await middleware(scope, receive, send)

    async def scenario():
        first: list = []
        task = asyncio.ensure_future(request(first))
        await asyncio.sleep(0.1)
        task.cancel()  # the client left and the server cancelled its request
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)
        retry: list = []
        await request(retry)
        return first, retry

    first, retry = asyncio.run(scenario())
    assert first == [] and ran == [1]
    assert retry[0]["status"] == 201 and (b"idempotent-replayed", b"true") in retry[0]["headers"]
    assert store.get("acme", "x.create", "k-1")["state"] == "completed"
