"""A LangGraph workflow whose booking tool acts at most once, by idemkit-rs.

    cargo run -p idemkit --example appointments          # the reference service, :8080
    python langgraph_tool.py http://127.0.0.1:8080

The booking runs in a LangGraph ``@task``; its action id is the thread id plus the
task's checkpoint namespace (``langgraph_action_id``), which LangGraph computes again,
the same, when it resumes a thread from its checkpointer after a failure. Here the
worker dies once right after the service booked (before LangGraph checkpointed the
task); resumed on the same thread, the task sends the same idempotency key and gets
the same booking back, never a second one. An unknown outcome comes back to the graph
as ``{"state": "unknown", ...}``, never as a confirmation. Across processes, give
LangGraph a persistent checkpointer (SQLite, PostgreSQL) so that it can resume.
"""

import sys

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task

from idemkit_rs import Journal
from idemkit_rs.tools import current_action, idempotent_tool, langgraph_action_id

SERVICE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
journal = Journal("agent.journal")


@idempotent_tool(journal=journal, action_id=lambda: langgraph_action_id("book"))
def book_appointment(customer_id: str, slot_id: str) -> dict:
    """Books `slot_id` for `customer_id` at the appointments service."""
    return current_action().call(
        f"{SERVICE}/appointments",
        json={"customer_id": customer_id, "slot_id": slot_id},
        headers={"Authorization": "Bearer clinic-a"},  # a credential: sent, never journalled
        timeout=5.0,
    )


crashes = ["once"]


@task
def book(customer_id: str, slot_id: str) -> dict:
    booked = book_appointment(customer_id, slot_id)
    if crashes:
        crashes.pop()
        raise RuntimeError("the worker died before LangGraph checkpointed the booking")
    return booked


@entrypoint(checkpointer=InMemorySaver())
def assistant(request: dict) -> dict:
    return book(request["customer_id"], request["slot_id"]).result()


if __name__ == "__main__":
    config = {"configurable": {"thread_id": "run-42"}}
    try:
        assistant.invoke({"customer_id": "anna", "slot_id": "2026-12-01T10:00"}, config)
    except RuntimeError as e:
        print(f"first run: {e}")
    print(assistant.invoke(None, config))  # resumed: the same key, the same booking
