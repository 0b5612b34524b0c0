"""Types of the extension module ``idemkit_rs._native`` (written by hand, like the npm
package's ``index.d.ts``). Every function and class is re-exported by ``idemkit_rs``."""

from os import PathLike
from typing import Dict, List, Literal, Optional, Sequence, Tuple, Union

_Data = Union[bytes, bytearray, str]
_Status = Literal["pending", "confirmed", "rejected", "unknown"]

def canonicalize(
    document: _Data,
    *,
    profile: Literal["strict", "rfc8785"] = "strict",
    max_bytes: Optional[int] = None,
    max_depth: int = 128,
) -> bytes:
    """The RFC 8785 canonical form of a JSON document (strict profile by default), or
    ``JsonError`` with the byte offset and JSON Pointer. ``str`` is taken as UTF-8."""

def fingerprint(
    body: _Data,
    operation: str = "",
    *,
    content_type: str = "application/json",
    schema_version: int = 1,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    method: Optional[str] = None,
    path: Optional[str] = None,
    query: Optional[str] = None,
    ignore_query: bool = False,
    ignore_query_params: Sequence[str] = (),
) -> str:
    """What a request meant, 64 lowercase hex characters, as ``idemkit fingerprint``
    prints them. With ``method`` and ``path`` the request line counts too."""

def check_key(key: str) -> str:
    """``key`` if it is 1 to 255 visible ASCII characters, else ``KeyFormatError``."""

def parse_key_header(value: _Data) -> str:
    """The key of an ``Idempotency-Key`` header value, quoted or bare."""

def key_header_value(key: str) -> str:
    """What a client sends for ``key``: bare unless it must be quoted."""

def derive_key(namespace: str, run_id: str, step_id: str) -> str:
    """The deterministic key of ``(namespace, run_id, step_id)``: ``ik1-`` + 32 hex."""

DEFAULT_MAX_WAITERS_PER_KEY: int
"""Core's default cap on retries held at once on one key."""
DEFAULT_MAX_WAITERS: int
"""Core's default cap on retries held at once on every key together."""

def fallback_poll(polls: int) -> float:
    """Seconds a held retry sleeps before claiming again after ``polls`` earlier polls
    (50 ms, doubling, at most 1 s)."""

def encode_request(method: str, url: str, headers: Sequence[Tuple[str, str]], body: bytes) -> bytes:
    """A request as ``idemkit call`` journals it."""

def decode_request(payload: bytes) -> Tuple[str, str, List[Tuple[str, str]], bytes]:
    """A journalled request: ``(method, url, headers, body)``."""

def action_status(results: Sequence["AttemptResult"]) -> _Status:
    """An action's status from its finished attempts, oldest first."""

class AttemptResult:
    """What one attempt produced, as far as the client could tell."""

    @staticmethod
    def connect_error() -> "AttemptResult":
        """No connection was made: the request was never sent."""
    @staticmethod
    def timeout() -> "AttemptResult":
        """The request was (maybe) sent and no answer came."""
    @staticmethod
    def response(
        status: int,
        *,
        problem_type: Optional[str] = None,
        retry_after: Optional[float] = None,
        original_status: Optional[int] = None,
    ) -> "AttemptResult":
        """An answer (``retry_after`` in seconds)."""
    @property
    def kind(self) -> Literal["connect-error", "timeout", "response"]:
        """Which of the three."""
    @property
    def status(self) -> Optional[int]:
        """The HTTP status of a response."""
    @property
    def problem_type(self) -> Optional[str]:
        """The problem type of a response."""
    @property
    def retry_after(self) -> Optional[float]:
        """The ``Retry-After`` of a response, in seconds."""
    @property
    def original_status(self) -> Optional[int]:
        """A ``response-expired`` problem's ``original_status``."""
    def classify(self) -> Literal["success", "retryable", "rejected", "uncertain"]:
        """Core's class of this attempt."""
    def describe(self) -> str:
        """``connect-error``, ``timeout``, ``201``, ``409 request-in-progress``."""

class RetryPolicy:
    """Bounded retries, exponential backoff with full jitter (seconds)."""

    def __init__(
        self,
        *,
        max_attempts: int = 5,
        base_delay: float = 0.2,
        max_delay: float = 10.0,
        max_retry_after: float = 60.0,
    ) -> None: ...
    @property
    def max_attempts(self) -> int:
        """Attempts in all, the first included."""
    def decide(self, attempt: int, result: AttemptResult, random: int) -> Tuple[Literal["retry", "stop"], float, _Status]:
        """``("retry", seconds, "pending")`` or ``("stop", 0.0, status)``."""

class Action:
    """An action as the journal holds it."""

    action_id: str
    key: str
    payload: bytes
    created_at: int
    resumed: bool

class AttemptStart:
    """An attempt journalled as started."""

    number: int
    attempt_id: str

class AttemptRecord:
    """One journalled attempt."""

    attempt_id: str
    started_at: int
    ended_at: Optional[int]
    result: Optional[AttemptResult]

class Journal:
    """A durable journal of client actions (the Rust ``Journal``'s redb file)."""

    def __init__(self, path: Union[str, PathLike]) -> None: ...
    @staticmethod
    def in_memory() -> "Journal":
        """A journal in memory (tests, examples)."""
    def now(self) -> int:
        """The journal's clock, Unix milliseconds."""
    def begin(self, action_id: str, payload: bytes, *, key: Optional[str] = None, now: Optional[int] = None) -> Action:
        """Begins or resumes an action; its key is durable before this returns."""
    def get(self, action_id: str) -> Optional[Action]:
        """The action, if it was begun."""
    def start_attempt(self, action_id: str, *, now: Optional[int] = None) -> AttemptStart:
        """Journals the start of the next attempt, before it is sent."""
    def finish_attempt(self, action_id: str, number: int, result: AttemptResult, *, now: Optional[int] = None) -> None:
        """Journals how attempt ``number`` ended."""
    def attempts(self, action_id: str) -> List[AttemptRecord]:
        """Every attempt of the action, oldest first."""
    def status(self, action_id: str) -> Optional[_Status]:
        """The action's status, or ``None`` if it was never begun."""
    def breaker_allow(
        self,
        origin: str,
        *,
        failures: int = 5,
        cool_down: float = 30.0,
        probe_lease: float = 30.0,
        now: Optional[int] = None,
    ) -> Optional[float]:
        """``None`` if an attempt may go to ``origin``, else seconds until a probe may."""
    def breaker_record(
        self,
        origin: str,
        result: AttemptResult,
        *,
        failures: int = 5,
        cool_down: float = 30.0,
        now: Optional[int] = None,
    ) -> Dict[str, object]:
        """Reports an allowed attempt's result; returns the breaker's state."""
    def breaker_state(self, origin: str) -> Optional[Dict[str, object]]:
        """``origin``'s breaker, or ``None`` if nothing was sent there."""

class Store:
    """An idemkit record store: redb (``Store(path)``), PostgreSQL, or memory."""

    def __init__(self, path: Union[str, PathLike]) -> None: ...
    @staticmethod
    def in_memory() -> "Store":
        """A store in memory (tests, examples)."""
    @staticmethod
    def postgres(url: str, *, schema: Optional[str] = None, pool_size: int = 16) -> "Store":
        """The store in PostgreSQL, shared by a fleet."""
    def get(self, tenant: str, operation: str, key: str) -> Optional[Dict[str, object]]:
        """The record of ``(tenant, operation, key)`` as ``list`` shows it, with a Completed one's ``response``."""
    def list(self, state: Optional[Literal["running", "completed", "unknown", "released"]] = None, *, unresolved: bool = False) -> List[Dict[str, object]]:
        """Records as ``idemkit list --json`` shows them."""
    def resolve(
        self,
        tenant: str,
        operation: str,
        key: str,
        *,
        applied: bool,
        status: int = 200,
        headers: Sequence[Tuple[str, bytes]] = (),
        body: bytes = b"",
        resource_ref: Optional[str] = None,
    ) -> Dict[str, object]:
        """Settles an unresolved record."""
    def gc(self, *, max_batch: int = 1000) -> Dict[str, int]:
        """Prunes and deletes records past their windows."""
    def stats(self) -> Dict[str, object]:
        """Counts per state."""
    def health(self) -> str:
        """Whether the store can write now, as JSON."""

class Answer:
    """A ready-to-send answer."""

    status: int
    outcome: str
    @property
    def headers(self) -> List[Tuple[bytes, bytes]]: ...
    @property
    def body(self) -> bytes: ...

class Route:
    """How one route is made idempotent (the Rust layer's ``RouteConfig``)."""

    def __init__(
        self,
        operation: str,
        *,
        effect: Literal["external", "local"] = "external",
        content_type: str = "application/json",
        schema_version: int = 1,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        ignore_query: bool = False,
        ignore_query_params: Sequence[str] = (),
        key_required: bool = True,
        lease: float = 30.0,
        replay_window: float = 86400.0,
        record_window: float = 604800.0,
        mismatch_status: Literal[422, 409] = 422,
        store_everything: bool = False,
        body_limit: int = 1048576,
        max_stored_response_bytes: int = 1048576,
        replayed_headers: Optional[Sequence[str]] = None,
        owner: Optional[str] = None,
        store_retry_after: float = 1.0,
        dispatches_only_through_steps: bool = False,
        wait: float = 0.0,
        max_wait: Optional[float] = None,
    ) -> None: ...
    @property
    def operation(self) -> str: ...
    @property
    def body_limit(self) -> int: ...
    @property
    def lease(self) -> float: ...
    def admit(self, tenant: Optional[str], key_headers: Sequence[bytes]) -> Union[str, Answer, None]:
        """The key to claim, ``None`` to pass through, or the refusal."""
    def too_large(self) -> Answer:
        """413 ``body-too-large``."""
    def unavailable(self) -> Answer:
        """503 ``store-unavailable``."""
    def wait_for(self, prefer_headers: Sequence[bytes]) -> Tuple[float, Optional[str]]:
        """How long to hold a retry of a running key, given its ``Prefer`` field lines,
        and the ``Preference-Applied`` value to send when it asked to wait."""
    def too_many_waiters(self, in_progress: Answer) -> Answer:
        """503 ``too-many-waiters``, with the ``Retry-After`` of ``in_progress``."""
    def claim(
        self,
        store: Store,
        tenant: str,
        key: str,
        method: str,
        path: str,
        query: Optional[str],
        body: bytes,
    ) -> Union["Execution", Answer]:
        """Fingerprints and claims (blocking; releases the GIL)."""

class Execution:
    """The execution a request runs under (``request.state.idemkit``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def operation(self) -> str: ...
    @property
    def log_ref(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def fencing_token(self) -> int: ...
    @property
    def steps(self) -> List[Dict[str, Optional[str]]]: ...
    def begin_step(self, name: str, provider_key: str) -> Tuple[Literal["dispatch", "done"], Optional[str]]:
        """Persists a step before its dispatch (blocking)."""
    def complete_step(self, name: str, provider_ref: Optional[str] = None) -> None:
        """Records a step as done (blocking)."""
    def nothing_dispatched(self) -> None:
        """Nothing was sent downstream: a retry-later answer releases the record."""
    def sent_downstream(self) -> None:
        """The request went where this process cannot see its transaction."""
    def set_resource_ref(self, reference: str) -> None:
        """The created resource, kept after the body is pruned."""
    def record_as(self, disposition: Literal["store", "release", "unknown"]) -> None:
        """Overrides how the response is recorded."""
    def renew(self) -> bool:
        """Renews the lease (blocking); ``False`` once the store refuses."""
    def finish(self, status: int, headers: Sequence[Tuple[bytes, bytes]], body: bytes) -> Optional[Answer]:
        """Records the response before it is sent (blocking)."""
    def settle(self) -> None:
        """Settles an attempt that ended without a response (blocking)."""
