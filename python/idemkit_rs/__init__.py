"""idemkit-rs: safe retries for HTTP APIs and AI-agent tool calls, from idemkit's Rust core.

The core, byte for byte the Rust crate's and the ``idemkit`` CLI's:

- :func:`canonicalize` — strict RFC 8785 canonical JSON, or :class:`JsonError` with
  the byte offset and JSON Pointer;
- :func:`fingerprint` — what a request meant (64 hex characters), with the request
  line and field selection;
- :func:`check_key`, :func:`parse_key_header`, :func:`derive_key` — idempotency keys.

The agent side:

- :class:`Journal` — one durable key per logical action, in the file format of the
  Rust ``Journal`` (``idemkit call --journal`` shares it);
- :func:`call_with_retry` / :func:`acall_with_retry` — one action over httpx with
  core's retry rules and circuit breaker (``idemkit_rs.client``);
- :func:`idempotent_tool` — a decorator for agent tools (``idemkit_rs.tools``).

The server side: :class:`Store` (redb or PostgreSQL) and the ASGI middleware
``idemkit_rs.asgi.IdempotencyMiddleware`` for Starlette and FastAPI.
"""

from __future__ import annotations

from ._native import (
    Action,
    Answer,
    AttemptRecord,
    AttemptResult,
    AttemptStart,
    Execution,
    Journal,
    RetryPolicy,
    Route,
    Store,
    action_status,
    canonicalize,
    check_key,
    decode_request,
    derive_key,
    encode_request,
    fingerprint,
    key_header_value,
    parse_key_header,
)
from .errors import (
    FormError,
    IdemkitError,
    JournalError,
    JsonError,
    KeyFormatError,
    PayloadChangedError,
    SpecError,
    StoreError,
)

__all__ = [
    "Action",
    "Answer",
    "AttemptRecord",
    "AttemptResult",
    "AttemptStart",
    "CallResult",
    "Execution",
    "FormError",
    "IdemkitError",
    "Journal",
    "JournalError",
    "JsonError",
    "KeyFormatError",
    "PayloadChangedError",
    "RetryPolicy",
    "Route",
    "SpecError",
    "Store",
    "StoreError",
    "ToolAction",
    "acall_with_retry",
    "action_status",
    "call_with_retry",
    "canonicalize",
    "check_key",
    "current_action",
    "decode_request",
    "derive_key",
    "encode_request",
    "fingerprint",
    "idempotent_tool",
    "key_header_value",
    "parse_key_header",
]


def __getattr__(name: str) -> object:
    # The client and the tool decorator need httpx, which the core and the ASGI
    # middleware do not: imported on first use.
    if name in ("CallResult", "call_with_retry", "acall_with_retry"):
        from . import client

        return getattr(client, name)
    if name in ("ToolAction", "current_action", "idempotent_tool"):
        from . import tools

        return getattr(tools, name)
    raise AttributeError(f"module 'idemkit_rs' has no attribute {name!r}")
