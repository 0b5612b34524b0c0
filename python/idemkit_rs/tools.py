"""Agent tools that act at most once per logical action: :func:`idempotent_tool`.

A tool that books, charges or sends is called by an agent runtime that retries: a
lost answer, a restarted worker, a replanned step. Decorated with
:func:`idempotent_tool`, the tool runs as one *action* whose id comes from the run
and the step (``action_id``, a function of the tool's own arguments: the run
context, the LangGraph config), never from the model. Inside, :func:`current_action`
gives the :class:`ToolAction`, whose :meth:`~ToolAction.call` sends the request with
the action's journalled key (:func:`~idemkit_rs.call_with_retry`). The outcome the
model sees is structured: the answer's JSON when confirmed, else
``{"state": "unknown" | "rejected" | "pending", ...}`` with what to do, so an
unknown outcome is never read as "not done, try again".

LangGraph (thread id + task)::

    @tool
    @idempotent_tool(journal=journal, action_id=lambda: langgraph_action_id("book"))
    def book_appointment(customer_id: str, slot_id: str) -> dict:
        return current_action().call(URL, json={"customer_id": customer_id, "slot_id": slot_id})

OpenAI Agents SDK (run context)::

    @function_tool
    @idempotent_tool(journal=journal, action_id=lambda ctx: f"{ctx.context.run_id}/book")
    async def book_appointment(ctx: RunContextWrapper[Run], customer_id: str, slot_id: str) -> dict:
        return await current_action().acall(URL, json={"customer_id": customer_id, "slot_id": slot_id})
"""

from __future__ import annotations

import functools
import inspect
import json as jsonlib
from contextvars import ContextVar
from typing import Any, Callable, Dict, Optional, TypeVar

from ._native import Journal, canonicalize
from .client import CallResult, acall_with_retry, call_with_retry
from .errors import PayloadChangedError

__all__ = ["ToolAction", "current_action", "idempotent_tool", "langgraph_action_id", "outcome"]

F = TypeVar("F", bound=Callable[..., Any])

_current: ContextVar["ToolAction"] = ContextVar("idemkit_rs.tools.current_action")

#: What the model is told about each outcome that is not a confirmation.
_ADVICE = {
    "unknown": "The outcome is unknown: the action may or may not have happened. Do not call "
    "this tool again for it; tell the user it could not be confirmed and that it will be checked.",
    "rejected": "The action was refused and did not happen. Retrying the same request will not help.",
    "pending": "The action has no answer yet. The same step may be tried again later; it will not "
    "happen twice.",
}


class ToolAction:
    """The action one tool call runs as: its id from the run and the step, its
    journal, and the requests it sends with the action's key."""

    def __init__(self, journal: Journal, action_id: str) -> None:
        self.journal = journal
        self.action_id = action_id

    def _id(self, step: Optional[str]) -> str:
        # A tool that sends several requests names each step; each is its own action.
        return self.action_id if step is None else f"{self.action_id}/{step}"

    def call(self, url: str, *, step: Optional[str] = None, **request: Any) -> CallResult:
        """Sends the action's request with its journalled key (see
        :func:`~idemkit_rs.call_with_retry` for ``request``'s keywords)."""
        return call_with_retry(self.journal, self._id(step), url, **request)

    async def acall(self, url: str, *, step: Optional[str] = None, **request: Any) -> CallResult:
        """:meth:`call` over ``httpx.AsyncClient``."""
        return await acall_with_retry(self.journal, self._id(step), url, **request)

    def key(self, payload: Any, *, step: Optional[str] = None) -> str:
        """The action's idempotency key for a provider SDK that takes one (a payment
        API's ``idempotency_key=``): begun in the journal with ``payload`` (the
        approved arguments, as canonical JSON) before anything is sent, the same key
        on every retry of the action."""
        body = canonicalize(jsonlib.dumps(payload, ensure_ascii=False, allow_nan=False))
        return self.journal.begin(self._id(step), body).key


def current_action() -> ToolAction:
    """The :class:`ToolAction` of the :func:`idempotent_tool` call running now."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("current_action() is only available inside an @idempotent_tool function") from None


def outcome(result: Any, action: ToolAction) -> Any:
    """What the model sees of a :class:`~idemkit_rs.CallResult`: the answer's JSON
    (or text) when confirmed, else ``{"state", "action_id", "idempotency_key",
    "http_status", "problem", "message"}``. Anything else passes unchanged."""
    if not isinstance(result, CallResult):
        return result
    body: Any = None
    if result.body:
        try:
            body = jsonlib.loads(result.body)
        except ValueError:
            body = result.body.decode("utf-8", "replace")
    if result.status == "confirmed":
        return body
    structured: Dict[str, Any] = {
        "state": result.status,
        "action_id": result.action_id,
        "idempotency_key": result.idempotency_key,
        "http_status": result.http_status,
        "message": _ADVICE[result.status],
    }
    if body is not None:
        structured["problem"] = body
    if result.stopped_by_breaker:
        structured["retry_at"] = result.breaker.get("retry_at")
    return structured


def _refused(e: PayloadChangedError, action_id: str) -> Dict[str, Any]:
    return {
        "state": "rejected",
        "action_id": action_id,
        "code": e.code,
        "message": "This step already ran with other arguments; nothing was sent. A different "
        "action needs a new step.",
    }


def _action_ids(fn: Callable[..., Any], action_id: Callable[..., str]) -> Callable[..., str]:
    """`action_id` called with the tool's arguments that it names (all of them if it
    takes `**kwargs`), bound as the tool binds them, whether passed by position or
    by name: `lambda ctx: ...`, `lambda config: ...`, `lambda run_id, **_: ...`."""
    tool = inspect.signature(fn)
    wanted = inspect.signature(action_id).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in wanted.values())
    names = [n for n, p in wanted.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for name in names:
        if name not in tool.parameters and wanted[name].default is inspect.Parameter.empty:
            raise TypeError(f"action_id takes {name!r}, which {fn.__name__} does not take")

    def compute(args: tuple, kwargs: dict) -> str:
        bound = tool.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        chosen = dict(values) if takes_all else {n: values[n] for n in names if n in values}
        made = action_id(**chosen)
        if not isinstance(made, str) or not made:
            raise TypeError(f"action_id must return a non-empty string, not {made!r}")
        return made

    return compute


def idempotent_tool(*, journal: Journal, action_id: Callable[..., str]) -> Callable[[F], F]:
    """Makes a tool function act at most once per logical action.

    ``action_id`` returns the action's id: the run and the step, from the runtime
    (LangGraph's thread and task, the Agents SDK's run context), never a
    model-generated id or the arguments alone. It is called with those of the
    tool's arguments that its parameters name (``lambda ctx: ...`` gets the tool's
    ``ctx``), or none. The decorated function (sync or async) finds its
    :class:`ToolAction` with :func:`current_action` and returns what
    :meth:`ToolAction.call` returned (or anything else); a
    :class:`~idemkit_rs.CallResult` is turned into the structured :func:`outcome`.
    A step called again with other arguments gets a structured refusal and sends
    nothing. The signature is kept, so ``@tool`` and ``@function_tool`` build the
    same schema as for the undecorated function.
    """

    def decorate(fn: F) -> F:
        action_of = _action_ids(fn, action_id)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                action = ToolAction(journal, action_of(args, kwargs))
                token = _current.set(action)
                try:
                    return outcome(await fn(*args, **kwargs), action)
                except PayloadChangedError as e:
                    return _refused(e, action.action_id)
                finally:
                    _current.reset(token)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            action = ToolAction(journal, action_of(args, kwargs))
            token = _current.set(action)
            try:
                return outcome(fn(*args, **kwargs), action)
            except PayloadChangedError as e:
                return _refused(e, action.action_id)
            finally:
                _current.reset(token)

        return run  # type: ignore[return-value]

    return decorate


def langgraph_action_id(step: str) -> str:
    """The action id of `step` in the LangGraph task running now: the thread id and
    the task's checkpoint namespace, which LangGraph computes again, the same, when
    it resumes the thread from its checkpointer after a failure (across processes:
    a persistent checkpointer). Call it inside a node or a ``@task``."""
    from langgraph.config import get_config

    configurable = get_config().get("configurable", {})
    thread_id = configurable.get("thread_id")
    if not thread_id:
        raise RuntimeError("langgraph_action_id needs a thread_id: run the graph with a checkpointer and a thread")
    return f"{thread_id}/{configurable.get('checkpoint_ns', '')}/{step}"

