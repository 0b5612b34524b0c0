"""An OpenAI Agents SDK tool that books at most once per run, by idemkit-rs.

    cargo run -p idemkit --example appointments          # the reference service, :8080
    OPENAI_API_KEY=... python openai_agents_tool.py http://127.0.0.1:8080

The action id comes from the run context your application passes to ``Runner.run``
(``Run.run_id``, persisted with the conversation, and the step the application is
at), never from the model's tool-call id: a regenerated turn, a retried run or a
second worker books under the same key. The model sees the booking when it is
confirmed, and ``{"state": "unknown", "message": "... Do not call this tool again
..."}`` when nobody knows whether it happened.
"""

import asyncio
import json
import os
import sys
from dataclasses import dataclass

from agents import Agent, RunContextWrapper, Runner, function_tool
from agents.tool_context import ToolContext

from idemkit_rs import Journal
from idemkit_rs.tools import current_action, idempotent_tool

SERVICE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
journal = Journal("agent.journal")


@dataclass
class Run:
    """The application's own run: an id it persists, and the step it is at."""

    run_id: str
    step: str = "book"


@function_tool
@idempotent_tool(journal=journal, action_id=lambda ctx: f"{ctx.context.run_id}/{ctx.context.step}")
async def book_appointment(ctx: RunContextWrapper[Run], customer_id: str, slot_id: str) -> dict:
    """Books a slot for a customer at the clinic."""
    return await current_action().acall(
        f"{SERVICE}/appointments",
        json={"customer_id": customer_id, "slot_id": slot_id},
        headers={"Authorization": "Bearer clinic-a"},
        timeout=5.0,
    )


agent = Agent(
    name="receptionist",
    instructions="Book the appointment the user asks for with book_appointment. If the outcome is "
    "unknown, say so and do not book again.",
    tools=[book_appointment],
)


async def main() -> None:
    run = Run(run_id="run-42")
    if os.environ.get("OPENAI_API_KEY"):
        result = await Runner.run(agent, "Book anna on 2026-12-01T10:00.", context=run)
        print(result.final_output)
    else:
        # No model at hand: call the tool as the SDK does for a model's tool call.
        arguments = json.dumps({"customer_id": "anna", "slot_id": "2026-12-01T10:00"})
        context = ToolContext(context=run, tool_name="book_appointment", tool_call_id="call_1", tool_arguments=arguments)
        print(await book_appointment.on_invoke_tool(context, arguments))


if __name__ == "__main__":
    asyncio.run(main())
