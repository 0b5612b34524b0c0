"""The exceptions idemkit-rs raises.

Every one is an :class:`IdemkitError` with a stable ``code`` (the same codes the
Rust crate, the CLI and the npm package use), so callers compare codes, never
messages. The message is the Rust error's own text: the CLI prints the same one.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "IdemkitError",
    "JsonError",
    "FormError",
    "KeyFormatError",
    "SpecError",
    "JournalError",
    "PayloadChangedError",
    "StoreError",
]


class IdemkitError(Exception):
    """Base class of every idemkit-rs error; ``code`` is stable and machine-readable."""

    code: str

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class JsonError(IdemkitError, ValueError):
    """A JSON document was rejected by the strict RFC 8785 canonicalizer.

    ``offset`` is the byte offset in the input and ``pointer`` the RFC 6901 JSON
    Pointer of the value being parsed (``""`` is the whole document), as in
    ``duplicate member name "a" at byte 13 (pointer /x/0/a)``.
    """

    offset: int
    pointer: str

    def __init__(self, message: str, code: str, offset: int, pointer: str) -> None:
        super().__init__(message, code)
        self.offset = offset
        self.pointer = pointer


class FormError(IdemkitError, ValueError):
    """A form body (``application/x-www-form-urlencoded``) was rejected at byte ``offset``."""

    offset: int

    def __init__(self, message: str, code: str, offset: int) -> None:
        super().__init__(message, code)
        self.offset = offset


class KeyFormatError(IdemkitError, ValueError):
    """An idempotency key or ``Idempotency-Key`` header value was refused.

    ``offset`` is the byte offset of the problem in the header value, or ``None``
    when the whole value is at fault (empty, too long).
    """

    offset: Optional[int]

    def __init__(self, message: str, code: str, offset: Optional[int]) -> None:
        super().__init__(message, code)
        self.offset = offset


class SpecError(IdemkitError, ValueError):
    """A fingerprint specification is unusable: a malformed JSON Pointer, or a field
    selection on a body that is not JSON."""


class JournalError(IdemkitError):
    """The action journal failed or refused; nothing was acknowledged."""


class PayloadChangedError(JournalError):
    """The action id was begun with another payload: a new action needs a new action id."""

    action_id: str

    def __init__(self, message: str, code: str, action_id: str) -> None:
        super().__init__(message, code)
        self.action_id = action_id


class StoreError(IdemkitError):
    """The record store failed or refused an operation; nothing was acknowledged."""
