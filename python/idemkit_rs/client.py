"""One logical action over HTTP, retried safely: the Python twin of ``idemkit call``.

:func:`call_with_retry` (``httpx.Client``) and :func:`acall_with_retry`
(``httpx.AsyncClient``) begin the action in a :class:`~idemkit_rs.Journal` before
anything is sent (one key per action id, forever), send the journalled request with
that key on every attempt, and stop by core's rules: bounded attempts, exponential
backoff with full jitter, ``Retry-After`` honoured, no retry after a definitive
answer or ``409 outcome-uncertain``, and a circuit breaker per origin kept in the
journal. The request is journalled in ``idemkit call``'s own format, so an action
begun by the CLI is continued here with the same key, and the reverse.

Credentials are sent but never journalled: ``Authorization``, ``Cookie``,
``Proxy-Authorization`` and every header named in ``secret_headers`` come from each
run's arguments, so a rotated token continues the same action.
"""

from __future__ import annotations

import asyncio
import email.utils
import json as jsonlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Generator, Iterable, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import urlsplit

import httpx

from ._native import AttemptResult, Journal, RetryPolicy, canonicalize, decode_request, encode_request, key_header_value
from .errors import PayloadChangedError

__all__ = ["Attempt", "CallResult", "SECRET_HEADERS", "acall_with_retry", "call_with_retry", "origin_of"]

#: Request headers that carry credentials: sent, never journalled.
SECRET_HEADERS = ("authorization", "cookie", "proxy-authorization")

Headers = Union[Mapping[str, str], Sequence[Tuple[str, str]], None]


@dataclass(frozen=True)
class Attempt:
    """One attempt of this run, as ``idemkit call`` reports it."""

    number: int
    attempt_id: str
    started_at: int
    ended_at: int
    #: ``connect-error``, ``timeout``, ``201``, ``409 request-in-progress``, ...
    outcome: str
    http_status: Optional[int]


@dataclass(frozen=True)
class CallResult:
    """How the action stands after this run.

    ``status`` is ``"confirmed"`` (it happened), ``"rejected"`` (it did not and will
    not by retrying), ``"pending"`` (no definitive answer yet: run the same action
    id again later) or ``"unknown"`` (it may or may not have happened: a person or
    a reconciler must decide; never report it as confirmed).
    """

    action_id: str
    idempotency_key: str
    #: True when the action was begun by an earlier run (or by ``idemkit call``).
    resumed: bool
    status: str
    #: The status of the last answer, if any answered.
    http_status: Optional[int]
    attempts: List[Attempt]
    #: The body of the last answer.
    body: Optional[bytes]
    #: The headers of the last answer.
    headers: Optional[httpx.Headers]
    #: The origin's breaker after the run: ``{"origin", "state", "failures", "retry_at"}``.
    breaker: Dict[str, Any]
    #: True when the origin's open circuit breaker kept the action pending.
    stopped_by_breaker: bool = False

    def json(self) -> Any:
        """The last answer's body as JSON."""
        return jsonlib.loads(self.body or b"null")


def origin_of(url: str) -> str:
    """The origin a URL's breaker is kept under, as ``idemkit call`` names it:
    ``scheme://host:port``, lowercase, the scheme's default port filled in."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"URL {url!r} is not an absolute http or https URL")
    host = (parts.hostname or "").lower()
    if not host:
        raise ValueError(f"URL {url!r} has no host")
    if ":" in host:
        host = f"[{host}]"
    port = parts.port or (80 if scheme == "http" else 443)
    return f"{scheme}://{host}:{port}"


def _header_pairs(headers: Headers) -> List[Tuple[str, str]]:
    items = headers.items() if isinstance(headers, Mapping) else (headers or [])
    pairs = []
    for name, value in items:
        name, value = str(name).strip(), str(value).strip()
        if not name:
            raise ValueError(f"header {name!r}: {value!r} has no name")
        if name.lower() == "idempotency-key":
            raise ValueError("the Idempotency-Key header comes from the journal; do not set it")
        pairs.append((name, value))
    return pairs


@dataclass
class _Request:
    """A request as the journal holds it, and this run's secret headers."""

    method: str
    url: str
    headers: List[Tuple[str, str]]
    body: bytes
    secrets: List[Tuple[str, str]] = field(default_factory=list)

    def payload(self) -> bytes:
        return encode_request(self.method, self.url, self.headers, self.body)


def _prepare(
    method: str,
    url: str,
    headers: Headers,
    json: Any,
    content: Union[bytes, str, None],
    secret_headers: Iterable[str],
) -> _Request:
    if json is not None and content is not None:
        raise ValueError("give json or content, not both")
    secret = {s.lower() for s in SECRET_HEADERS} | {s.strip().lower() for s in secret_headers}
    pairs = _header_pairs(headers)
    if json is not None:
        # Journalled and sent as canonical JSON: key order is not another payload.
        body = canonicalize(jsonlib.dumps(json, ensure_ascii=False, allow_nan=False))
        if not any(name.lower() == "content-type" for name, _ in pairs):
            pairs.append(("Content-Type", "application/json"))
    elif isinstance(content, str):
        body = content.encode("utf-8")
    else:
        body = bytes(content or b"")
    origin_of(url)
    return _Request(
        method=method.upper(),
        url=url,
        headers=[(n, v) for n, v in pairs if n.lower() not in secret],
        body=body,
        secrets=[(n, v) for n, v in pairs if n.lower() in secret],
    )


def _retry_after(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` is delay-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, at.timestamp() - time.time())


def _problem_fields(body: bytes) -> Tuple[Optional[str], Optional[int]]:
    """The ``type`` and ``original_status`` members of a problem+json body, if it is one."""
    try:
        members = jsonlib.loads(body)
    except ValueError:
        return None, None
    if not isinstance(members, dict):
        return None, None
    problem_type = members.get("type") if isinstance(members.get("type"), str) else None
    original = members.get("original_status")
    if isinstance(original, bool) or not isinstance(original, int) or not 0 <= original <= 0xFFFF:
        original = None
    return problem_type, original


def _result_of(response: httpx.Response, body: bytes) -> AttemptResult:
    problem_type, original_status = _problem_fields(body)
    return AttemptResult.response(
        response.status_code,
        problem_type=problem_type,
        retry_after=_retry_after(response.headers.get("retry-after")),
        original_status=original_status,
    )


#: The transport errors that prove the request was never sent.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


def _breaker_view(origin: str, state: Optional[Dict[str, Any]], now: int) -> Dict[str, Any]:
    """The breaker as ``idemkit call`` reports it: a probe that is out reads as open."""
    state = state or {"state": "closed", "failures": 0}
    view: Dict[str, Any] = {"origin": origin, "state": state["state"], "failures": None, "retry_at": None}
    if state["state"] == "closed":
        view["failures"] = state["failures"]
    elif state["state"] == "open":
        view["retry_at"] = max(state["until"], now)
    elif state["probing"]:
        view.update(state="open", retry_at=now)
    return view


# The one retry loop, shared by the sync and async calls: a generator that yields
# what to do (a journal call to run, a request to send, a pause) and is sent back
# what came of it. The drivers below only carry those out.
_Effect = Tuple[str, Any]


def _call(
    journal: Journal,
    action_id: str,
    request: _Request,
    *,
    key: Optional[str],
    policy: RetryPolicy,
    timeout: float,
    failures: int,
    cool_down: float,
) -> Generator[_Effect, Any, CallResult]:
    origin = origin_of(request.url)
    try:
        action = yield ("journal", lambda: journal.begin(action_id, request.payload(), key=key))
    except PayloadChangedError:
        # An action journalled with its credentials (by a client that journalled
        # them) continues under its key instead of being refused for a rotated token.
        action = yield ("journal", lambda: journal.get(action_id))
        if action is None or not _same_without_secrets(action.payload, request):
            raise
    # From here on the journalled request is the one sent, byte for byte, with this
    # run's secret headers.
    method, url, journalled, body = decode_request(action.payload)
    secret = {n.lower() for n, _ in request.secrets} | set(SECRET_HEADERS)
    headers = [(n, v) for n, v in journalled if n.lower() not in secret] + request.secrets
    key_header = key_header_value(action.key)
    # A probe keeps others out for as long as it may take, and no longer.
    probe_lease = max(cool_down, timeout)

    attempts: List[Attempt] = []
    last: Optional[Tuple[httpx.Response, bytes]] = None
    refused = False
    while True:
        wait = yield ("journal", lambda: journal.breaker_allow(origin, failures=failures, cool_down=cool_down, probe_lease=probe_lease))
        if wait is not None:
            refused = True
            break
        start = yield ("journal", lambda: journal.start_attempt(action_id))
        started_at = journal.now()
        sent = headers + [("Idempotency-Key", key_header), ("Idemkit-Attempt-Id", start.attempt_id)]
        result, answer = yield ("send", (method, url, sent, body))
        ended_at = journal.now()
        yield ("journal", lambda: journal.finish_attempt(action_id, start.number, result, now=ended_at))
        yield ("journal", lambda: journal.breaker_record(origin, result, failures=failures, cool_down=cool_down, now=ended_at))
        if answer is not None:
            last = answer
        attempts.append(
            Attempt(start.number, start.attempt_id, started_at, ended_at, result.describe(), result.status)
        )
        decision, delay, _ = policy.decide(len(attempts), result, secrets.randbits(64))
        if decision != "retry":
            break
        yield ("sleep", delay)
    status = (yield ("journal", lambda: journal.status(action_id))) or "pending"
    state = yield ("journal", lambda: journal.breaker_state(origin))
    return CallResult(
        action_id=action_id,
        idempotency_key=action.key,
        resumed=action.resumed,
        status=status,
        http_status=last[0].status_code if last else None,
        attempts=attempts,
        body=last[1] if last else None,
        headers=last[0].headers if last else None,
        breaker=_breaker_view(origin, state, journal.now()),
        stopped_by_breaker=refused and status == "pending",
    )


def _same_without_secrets(payload: bytes, request: _Request) -> bool:
    try:
        method, url, headers, body = decode_request(payload)
    except Exception:
        return False
    secret = {n.lower() for n, _ in request.secrets} | set(SECRET_HEADERS)
    kept = [(n, v) for n, v in headers if n.lower() not in secret]
    return (method, url, kept, body) == (request.method, request.url, request.headers, request.body)


def _send(client: httpx.Client, method: str, url: str, headers: list, body: bytes, timeout: float):
    try:
        response = client.send(client.build_request(method, url, headers=headers, content=body, timeout=timeout), stream=True)
    except _NOT_SENT:
        return AttemptResult.connect_error(), None
    except httpx.TransportError:
        # Anything else may have happened after the request was sent.
        return AttemptResult.timeout(), None
    try:
        # If the body breaks off after the status arrived, the outcome is still what
        # the status says; only the body is lost.
        try:
            data = response.read()
        except httpx.TransportError:
            data = b""
    finally:
        response.close()
    return _result_of(response, data), (response, data)


async def _asend(client: httpx.AsyncClient, method: str, url: str, headers: list, body: bytes, timeout: float):
    try:
        response = await client.send(client.build_request(method, url, headers=headers, content=body, timeout=timeout), stream=True)
    except _NOT_SENT:
        return AttemptResult.connect_error(), None
    except httpx.TransportError:
        return AttemptResult.timeout(), None
    try:
        try:
            data = await response.aread()
        except httpx.TransportError:
            data = b""
    finally:
        await response.aclose()
    return _result_of(response, data), (response, data)


def _start(
    journal: Journal,
    action_id: str,
    url: str,
    method: str,
    headers: Headers,
    json: Any,
    content: Union[bytes, str, None],
    secret_headers: Iterable[str],
    key: Optional[str],
    timeout: float,
    policy: RetryPolicy,
    failures: int,
    cool_down: float,
) -> Generator[_Effect, Any, CallResult]:
    """The retry loop of one call, its arguments checked before anything is journalled."""
    request = _prepare(method, url, headers, json, content, secret_headers)
    return _call(journal, action_id, request, key=key, policy=policy, timeout=timeout,
                 failures=failures, cool_down=cool_down)


class _Steps:
    """Steps a driver through the loop: `next()` is the next effect to carry out
    (`None` once the loop returned `result`); the driver sets `reply` to what the
    effect gave, or `error` to what it raised."""

    def __init__(self, loop: Generator[_Effect, Any, CallResult]) -> None:
        self.loop = loop
        self.reply: Any = None
        self.error: Optional[BaseException] = None
        self.result: Optional[CallResult] = None

    def next(self) -> Optional[_Effect]:
        try:
            effect = self.loop.throw(self.error) if self.error else self.loop.send(self.reply)
        except StopIteration as done:
            self.result = done.value
            return None
        self.reply, self.error = None, None
        return effect


def call_with_retry(
    journal: Journal,
    action_id: str,
    url: str,
    *,
    method: str = "POST",
    headers: Headers = None,
    json: Any = None,
    content: Union[bytes, str, None] = None,
    secret_headers: Iterable[str] = (),
    key: Optional[str] = None,
    timeout: float = 10.0,
    max_attempts: int = 5,
    base_delay: float = 0.2,
    max_delay: float = 10.0,
    max_retry_after: float = 60.0,
    breaker_failures: int = 5,
    breaker_cool_down: float = 30.0,
    client: Optional[httpx.Client] = None,
) -> CallResult:
    """Sends one logical action, ``action_id`` (from the workflow: run and step, never
    the model), with one journalled idempotency key, retrying safely.

    ``json`` is sent as canonical JSON (with ``Content-Type: application/json``
    unless given); ``content`` as it is. ``timeout`` bounds each attempt (httpx's
    connect, read and write timeouts), in seconds. ``key`` sets the key of a new
    action (for example :func:`~idemkit_rs.derive_key`'s); a resumed action keeps
    its own. Raises :class:`~idemkit_rs.PayloadChangedError` when the action id was
    begun with another request.
    """
    steps = _Steps(
        _start(journal, action_id, url, method, headers, json, content, secret_headers, key, timeout,
               RetryPolicy(max_attempts=max_attempts, base_delay=base_delay, max_delay=max_delay,
                           max_retry_after=max_retry_after),
               breaker_failures, breaker_cool_down)
    )
    http = client or httpx.Client()
    try:
        while (effect := steps.next()) is not None:
            kind, arg = effect
            if kind == "journal":
                try:
                    steps.reply = arg()
                except Exception as e:  # handed back to the loop, which decides
                    steps.error = e
            elif kind == "send":
                steps.reply = _send(http, *arg, timeout)
            else:
                time.sleep(arg)
        return steps.result
    finally:
        if client is None:
            http.close()


async def acall_with_retry(
    journal: Journal,
    action_id: str,
    url: str,
    *,
    method: str = "POST",
    headers: Headers = None,
    json: Any = None,
    content: Union[bytes, str, None] = None,
    secret_headers: Iterable[str] = (),
    key: Optional[str] = None,
    timeout: float = 10.0,
    max_attempts: int = 5,
    base_delay: float = 0.2,
    max_delay: float = 10.0,
    max_retry_after: float = 60.0,
    breaker_failures: int = 5,
    breaker_cool_down: float = 30.0,
    client: Optional[httpx.AsyncClient] = None,
) -> CallResult:
    """:func:`call_with_retry` over ``httpx.AsyncClient``. Every journal write
    (an fsync) runs in a worker thread, off the event loop."""
    steps = _Steps(
        _start(journal, action_id, url, method, headers, json, content, secret_headers, key, timeout,
               RetryPolicy(max_attempts=max_attempts, base_delay=base_delay, max_delay=max_delay,
                           max_retry_after=max_retry_after),
               breaker_failures, breaker_cool_down)
    )
    http = client or httpx.AsyncClient()
    try:
        while (effect := steps.next()) is not None:
            kind, arg = effect
            if kind == "journal":
                try:
                    steps.reply = await asyncio.to_thread(arg)
                except Exception as e:
                    steps.error = e
            elif kind == "send":
                steps.reply = await _asend(http, *arg, timeout)
            else:
                await asyncio.sleep(arg)
        return steps.result
    finally:
        if client is None:
            await http.aclose()
