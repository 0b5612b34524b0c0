"""The agent side: the journal shared with ``idemkit call`` both ways,
``call_with_retry`` over httpx (sync and async) with core's retry rules and the
breaker kept in the journal, and ``@idempotent_tool`` in LangGraph and the OpenAI
Agents SDK, against a recording upstream and the appointments reference service.
"""


import asyncio
import json
import subprocess
from pathlib import Path
from typing import List

import httpx
import pytest

import idemkit_rs
from conftest import free_port, problem
from idemkit_rs import Journal, PayloadChangedError, call_with_retry, acall_with_retry
from idemkit_rs.tools import current_action, idempotent_tool, langgraph_action_id

BODY = {"customer_id": "c-7", "slot_id": "2026-12-02T09:30"}
CANONICAL = b'{"customer_id":"c-7","slot_id":"2026-12-02T09:30"}'
CREATED = (201, [("content-type", "application/json")], b'{"id":"bk_1"}')
FAST = dict(base_delay=0.01, max_delay=0.05)


def cli_call(idemkit_bin: Path, journal: Path, action_id: str, url: str, *extra: str) -> tuple:
    """`idemkit call` as a shell script would run it: (exit status, its JSON report)."""
    done = subprocess.run(
        [
            str(idemkit_bin), "call", "--journal", str(journal), "--action-id", action_id,
            "-X", "POST", "-H", "Content-Type: application/json", "-d", CANONICAL.decode(),
            "--base-delay-ms", "10", "--max-delay-ms", "50", *extra, url,
        ],
        capture_output=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout or b"null"), done.stderr.decode()


def test_an_action_begun_by_idemkit_call_is_continued_by_python_with_the_same_key(idemkit_bin, tmp_path, upstream):
    """`idemkit call` journals the action and its first answer is a 503 (pending);
    Python continues the same action id from the same journal file: the same key is
    sent, the upstream confirms, and the journal holds both runs' attempts. The CLI
    run carries an Authorization header, which Python sends from its own arguments."""
    journal_path = tmp_path / "agent.journal"
    service = upstream([(503, [], b"busy"), CREATED])
    code, report, stderr = cli_call(
        idemkit_bin, journal_path, "run-1/book", service.url,
        "-H", "Authorization: Bearer clinic-a", "--max-attempts", "1",
    )
    assert code == 75 and report["status"] == "pending", stderr

    journal = Journal(journal_path)
    result = call_with_retry(
        journal, "run-1/book", service.url,
        headers=[("Content-Type", "application/json"), ("Authorization", "Bearer clinic-b")],
        content=CANONICAL, **FAST,
    )
    assert result.status == "confirmed" and result.http_status == 201
    assert result.resumed and result.idempotency_key == report["idempotency_key"]
    assert service.keys() == [report["idempotency_key"]] * 2
    assert service.seen[1].headers["authorization"] == "Bearer clinic-b", "this run's credential"
    assert [s.body for s in service.seen] == [CANONICAL, CANONICAL]
    assert len(journal.attempts("run-1/book")) == 2
    assert journal.status("run-1/book") == "confirmed"


def test_an_action_begun_by_python_is_continued_by_idemkit_call_with_the_same_key(idemkit_bin, tmp_path, upstream):
    """Python begins the action (canonical JSON, `Content-Type` added, a credential
    sent and not journalled) and its only attempt gets 503 (pending); `idemkit call`
    with the same request and a rotated token continues it under the key Python
    journalled, and the upstream confirms."""
    journal_path = tmp_path / "agent.journal"
    service = upstream([(503, [], b"busy"), CREATED])
    began = call_with_retry(
        Journal(journal_path), "run-2/book", service.url, json=BODY,
        headers={"Authorization": "Bearer tok-1"}, max_attempts=1, **FAST,
    )
    assert began.status == "pending" and not began.resumed
    payload = Journal(journal_path).get("run-2/book").payload
    assert idemkit_rs.decode_request(payload) == ("POST", service.url, [("Content-Type", "application/json")], CANONICAL)

    code, report, stderr = cli_call(idemkit_bin, journal_path, "run-2/book", service.url, "-H", "Authorization: Bearer tok-2")
    assert code == 0 and report["status"] == "confirmed", stderr
    assert report["resumed"] is True
    assert [s.headers["authorization"] for s in service.seen] == ["Bearer tok-1", "Bearer tok-2"]
    assert report["idempotency_key"] == began.idempotency_key
    assert [a["outcome"] for a in report["attempts"]] == ["201"]
    assert service.keys() == [began.idempotency_key] * 2


def test_the_breaker_python_opened_refuses_idemkit_call_too(idemkit_bin, tmp_path):
    """Two connect errors from Python open the origin's breaker in the journal; the
    CLI, on another action to the same origin, is refused without sending (exit 3)."""
    journal_path = tmp_path / "agent.journal"
    closed = f"http://127.0.0.1:{free_port()}/bookings"
    result = call_with_retry(
        Journal(journal_path), "run-5/book", closed, json=BODY, max_attempts=3,
        breaker_failures=2, breaker_cool_down=60.0, **FAST,
    )
    assert [a.outcome for a in result.attempts] == ["connect-error"] * 2
    assert result.stopped_by_breaker and result.breaker["state"] == "open"
    code, report, _ = cli_call(idemkit_bin, journal_path, "run-6/book", closed, "--breaker-failures", "2")
    assert code == 3 and report["attempts"] == [] and report["breaker"]["state"] == "open"


def test_the_journal_never_holds_a_credential(tmp_path, upstream):
    """Authorization, Cookie and a declared secret header are sent on every attempt
    and never written to the journal file; a rotated token continues the action."""
    journal_path = tmp_path / "agent.journal"
    service = upstream([(503, [], b""), CREATED])
    secret = dict(Authorization="Bearer tok-SECRET-1", Cookie="sid=COOKIE-SECRET", **{"X-Api-Key": "KEY-SECRET"})
    first = call_with_retry(
        Journal(journal_path), "run-7/book", service.url, json=BODY, headers=secret,
        secret_headers=["X-Api-Key"], max_attempts=1, **FAST,
    )
    assert first.status == "pending"
    rotated = dict(secret, Authorization="Bearer tok-SECRET-2")
    second = call_with_retry(
        Journal(journal_path), "run-7/book", service.url, json=BODY, headers=rotated,
        secret_headers=["x-api-key"], **FAST,
    )
    assert second.status == "confirmed" and second.idempotency_key == first.idempotency_key
    assert [s.headers["authorization"] for s in service.seen] == ["Bearer tok-SECRET-1", "Bearer tok-SECRET-2"]
    assert all(s.headers["x-api-key"] == "KEY-SECRET" for s in service.seen)
    stored = journal_path.read_bytes()
    for needle in [b"SECRET", b"Authorization", b"Cookie", b"X-Api-Key"]:
        assert needle not in stored, needle


def test_retries_stop_by_core_rules(tmp_path, upstream):
    """409 in progress is retried with the same key; 409 outcome-uncertain stops at
    once as unknown, 422 as rejected, 410 response-expired by its original status."""
    journal = Journal.in_memory()
    in_progress = upstream([problem(409, "request-in-progress", detail="x"), CREATED])
    result = call_with_retry(journal, "a/1", in_progress.url, json=BODY, **FAST)
    assert result.status == "confirmed"
    assert [a.outcome for a in result.attempts] == ["409 request-in-progress", "201"]
    assert len(set(in_progress.keys())) == 1

    uncertain = upstream([problem(409, "outcome-uncertain", log_ref="r1"), CREATED])
    result = call_with_retry(journal, "a/2", uncertain.url, json=BODY, **FAST)
    assert result.status == "unknown" and len(result.attempts) == 1

    reused = upstream([problem(422, "idempotency-key-reused")])
    assert call_with_retry(journal, "a/3", reused.url, json=BODY, **FAST).status == "rejected"

    expired = upstream([problem(410, "response-expired", original_status=201)])
    assert call_with_retry(journal, "a/4", expired.url, json=BODY, **FAST).status == "confirmed"

    with pytest.raises(PayloadChangedError) as changed:
        call_with_retry(journal, "a/1", in_progress.url, json={"other": 1}, **FAST)
    assert changed.value.action_id == "a/1"
    with pytest.raises(ValueError):
        call_with_retry(journal, "a/5", in_progress.url, headers={"Idempotency-Key": "mine"})


def test_the_async_call_retries_with_one_key(tmp_path, upstream):
    """`acall_with_retry` over httpx.AsyncClient: 503, a dropped connection's
    equivalent (502), then 201, one key on every attempt, journal writes off the loop."""
    service = upstream([(503, [("retry-after", "0")], b""), (502, [], b""), CREATED])
    journal = Journal(tmp_path / "agent.journal")
    result = asyncio.run(acall_with_retry(journal, "async/1", service.url, json=BODY, **FAST))
    assert result.status == "confirmed" and result.json() == {"id": "bk_1"}
    assert [a.outcome for a in result.attempts] == ["503", "502", "201"]
    assert len(set(service.keys())) == 1 and service.keys()[0] == result.idempotency_key


# --- tools ------------------------------------------------------------------------------


def test_a_tool_whose_first_attempt_times_out_after_the_server_acted_books_once(appointments, tmp_path):
    """The appointments service books with a 1.5 s provider latency; the tool's
    attempts time out after 0.5 s (the service keeps running the first one); the
    retries get 409 in progress, then the replay: one booking, one key, and the tool
    returns the confirmed booking to the model."""
    service = appointments("--provider-latency-ms", "1500", "--lease-ms", "1000")
    journal = Journal(tmp_path / "agent.journal")

    @idempotent_tool(journal=journal, action_id=lambda run_id: f"{run_id}/book")
    def book_appointment(run_id: str, customer_id: str, slot_id: str) -> dict:
        return current_action().call(
            f"{service.url}/appointments",
            json={"customer_id": customer_id, "slot_id": slot_id},
            headers={"Authorization": "Bearer clinic-py"},
            timeout=0.5,
            max_attempts=12,
            base_delay=0.1,
            max_delay=0.4,
        )

    booked = book_appointment("run-42", customer_id="anna", slot_id="2026-12-01T10:00")
    assert booked["status"] == "confirmed" and booked["slot_id"] == "2026-12-01T10:00"
    attempts = journal.attempts("run-42/book")
    outcomes = [a.result.describe() for a in attempts]
    assert outcomes[0] == "timeout", outcomes
    assert outcomes[-1] == "201", outcomes
    assert len(service.bookings("clinic-py")) == 1
    # The same step again (a restart, a replanned call) replays the same booking.
    again = book_appointment("run-42", customer_id="anna", slot_id="2026-12-01T10:00")
    assert again == booked
    assert len(service.bookings("clinic-py")) == 1


def test_an_unknown_outcome_reaches_the_model_as_a_structured_result(upstream):
    """409 outcome-uncertain is returned as {"state": "unknown", ...} telling the
    model not to call again, never raised and never confirmed; the step with other
    arguments is refused without sending."""
    journal = Journal.in_memory()
    service = upstream([problem(409, "outcome-uncertain", log_ref="abc")])

    @idempotent_tool(journal=journal, action_id=lambda: "run-9/book")
    def book(slot_id: str):
        return current_action().call(service.url, json={"slot_id": slot_id}, **FAST)

    result = book("s-1")
    assert result["state"] == "unknown" and result["action_id"] == "run-9/book"
    assert "Do not call this tool again" in result["message"]
    assert result["problem"]["log_ref"] == "abc"
    refused = book("s-2")
    assert refused["state"] == "rejected" and refused["code"] == "journal-payload-changed"
    assert len(service.seen) == 1


def test_langgraph_resumes_a_failed_task_with_the_same_key(upstream, tmp_path):
    """A LangGraph workflow books in a @task, and the worker dies after the request
    was answered (the task raises). Resumed on the same thread, the task runs again
    with the same action id (thread id + task namespace), so the same key is sent
    and the upstream sees one action."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint, task

    service = upstream([CREATED])
    journal = Journal(tmp_path / "agent.journal")
    runs: List[str] = []

    @idempotent_tool(journal=journal, action_id=lambda: langgraph_action_id("book"))
    def book(slot_id: str):
        return current_action().call(service.url, json={"slot_id": slot_id}, **FAST)

    @task
    def book_task(slot_id: str) -> dict:
        booked = book(slot_id)
        runs.append(slot_id)
        if len(runs) == 1:
            raise RuntimeError("the worker died before the step was checkpointed")
        return booked

    @entrypoint(checkpointer=InMemorySaver())
    def workflow(slot_id: str) -> dict:
        return book_task(slot_id).result()

    config = {"configurable": {"thread_id": "thread-1"}}
    with pytest.raises(RuntimeError):
        workflow.invoke("s-9", config)
    assert workflow.invoke(None, config) == {"id": "bk_1"}
    keys = service.keys()
    assert len(keys) == 2 and keys[0] == keys[1], keys
    # Another thread is another run: its own key.
    workflow.invoke("s-9", {"configurable": {"thread_id": "thread-2"}})
    assert len(set(service.keys())) == 2


def test_openai_agents_function_tool_takes_its_action_id_from_the_run_context(upstream, tmp_path):
    """`@function_tool` over `@idempotent_tool`: the schema the model sees is the
    tool's own arguments (not the context); invoked twice for one run (a retry of
    the turn) it sends one key, and another run gets another key."""
    from dataclasses import dataclass

    from agents import RunContextWrapper, function_tool
    from agents.tool_context import ToolContext

    service = upstream([CREATED])
    journal = Journal(tmp_path / "agent.journal")

    @dataclass
    class Run:
        run_id: str

    @function_tool
    @idempotent_tool(journal=journal, action_id=lambda ctx: f"{ctx.context.run_id}/book_appointment")
    async def book_appointment(ctx: RunContextWrapper[Run], customer_id: str, slot_id: str) -> dict:
        """Books a slot for a customer."""
        return await current_action().acall(service.url, json={"customer_id": customer_id, "slot_id": slot_id}, **FAST)

    assert set(book_appointment.params_json_schema["properties"]) == {"customer_id", "slot_id"}
    arguments = json.dumps({"customer_id": "c-1", "slot_id": "s-9"})

    async def invoke(run_id: str, call_id: str):
        context = ToolContext(context=Run(run_id), tool_name="book_appointment", tool_call_id=call_id, tool_arguments=arguments)
        return await book_appointment.on_invoke_tool(context, arguments)

    first = asyncio.run(invoke("run-1", "call_model_A"))
    again = asyncio.run(invoke("run-1", "call_model_B"))  # the model's id changed; the action did not
    other = asyncio.run(invoke("run-2", "call_model_C"))
    assert first == again == other
    keys = service.keys()
    assert keys[0] == keys[1] and keys[2] != keys[0]


def test_the_agent_examples_book_once_against_the_appointments_service(appointments, tmp_path):
    """python/examples/langgraph_tool.py (its worker dies once after the booking, then
    the thread resumes) and openai_agents_tool.py run twice for one run: one booking."""
    import os

    from conftest import PYTHON, REPO

    service = appointments()
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}

    def run(example: str, directory: Path) -> bytes:
        directory.mkdir(exist_ok=True)
        done = subprocess.run([PYTHON, str(REPO / "python" / "examples" / example), service.url],
                              cwd=directory, env=env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout

    langgraph = run("langgraph_tool.py", tmp_path / "langgraph")
    assert b"first run: the worker died" in langgraph and b"'status': 'confirmed'" in langgraph
    assert len(service.bookings("clinic-a")) == 1
    agents = [run("openai_agents_tool.py", tmp_path / "agents") for _ in range(2)]
    assert agents[0] == agents[1] and b"'status': 'confirmed'" in agents[0]
    assert len(service.bookings("clinic-a")) == 2  # the agent's run-42 is its own action
