"""Shared helpers of the Python tests: where the repository, the CLI and the
appointments service are, free ports, and servers started for a test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
HERE = Path(__file__).resolve().parent


def cargo_binary(name: str) -> Path:
    """A binary of the workspace's debug build; the test fails (never skips) without it."""
    path = TARGET / "debug" / name
    assert path.is_file(), (
        f"{path} is missing: build it first (`cargo build -p idemkit --bin idemkit "
        f"--example appointments`; scripts/test-all.sh does)"
    )
    return path


@pytest.fixture(scope="session")
def idemkit_bin() -> Path:
    """The `idemkit` CLI."""
    return cargo_binary("idemkit")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, what: str, seconds: float = 60.0) -> None:
    """Waits until something listens on 127.0.0.1:`port`, failing if `process` dies."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError(f"{what} did not listen on port {port} within {seconds} s")


class Server:
    """A child process serving HTTP on 127.0.0.1:`port`, killed at the end of the test."""

    def __init__(self, argv: List[str], port: int, what: str, env: Optional[dict] = None, log: Optional[Path] = None):
        self.argv = argv
        self.port = port
        self.what = what
        self.env = env
        self.log = log
        self.process: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.process = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=out)
        wait_for_port(self.port, self.process, self.what)
        return self

    def kill(self) -> None:
        """SIGKILL: nothing of the process runs after this (a crash)."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def servers() -> Iterator[List[Server]]:
    """Servers a test starts; every one still running at its end is killed."""
    started: List[Server] = []
    yield started
    for server in started:
        server.kill()


PYTHON = sys.executable


# --- an upstream that records what it was sent -------------------------------------

import http.server
import threading
from dataclasses import dataclass, field as dc_field


@dataclass
class Seen:
    """One request the recording upstream received."""

    method: str
    path: str
    headers: dict
    body: bytes


@dataclass
class Recording:
    """An HTTP server on 127.0.0.1 that answers from a script and records every
    request: `answers` are `(status, headers, body)`, used in order, the last one
    repeated."""

    answers: List[tuple]
    seen: List[Seen] = dc_field(default_factory=list)
    server: Optional[http.server.ThreadingHTTPServer] = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/bookings"

    def keys(self) -> List[str]:
        return [s.headers.get("idempotency-key", "") for s in self.seen]

    def start(self) -> "Recording":
        recording = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                recording.seen.append(
                    Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                index = min(len(recording.seen), len(recording.answers)) - 1
                status, headers, reply = recording.answers[index]
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_PUT = do_POST

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def upstream() -> Iterator[Callable[..., Recording]]:
    """`upstream(answers)` starts a recording upstream, stopped at the end of the test."""
    started: List[Recording] = []

    def start(answers: List[tuple]) -> Recording:
        recording = Recording(answers).start()
        started.append(recording)
        return recording

    yield start
    for recording in started:
        recording.stop()


PROBLEM = [("content-type", "application/problem+json")]


def problem(status: int, name: str, **members: object) -> tuple:
    """An idemkit problem answer for the recording upstream."""
    import json

    body = json.dumps({"type": f"https://idemkit.dev/problems/{name}", "status": status, **members}).encode()
    return (status, PROBLEM, body)


# --- the appointments reference service ---------------------------------------------


class Appointments:
    """The appointments reference service (`cargo build -p idemkit --example
    appointments`) on its own databases in `directory`, listening on a free port."""

    def __init__(self, directory: Path, *extra: str) -> None:
        binary = TARGET / "debug" / "examples" / "appointments"
        assert binary.is_file(), f"{binary} is missing: `cargo build -p idemkit --example appointments` first"
        self.process = subprocess.Popen(
            [
                str(binary),
                "--db", str(directory / "appointments.redb"),
                "--provider-db", str(directory / "provider.redb"),
                "--listen", "127.0.0.1:0",
                *extra,
            ],
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        self.url = "http://" + line.rsplit("http://", 1)[-1].strip()
        assert self.url.count(":") == 2, f"no address in {line!r}"
        # Keep draining stdout so the service never blocks on a full pipe.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def bookings(self, tenant: str) -> list:
        import httpx

        answer = httpx.get(f"{self.url}/appointments", headers={"Authorization": f"Bearer {tenant}"})
        assert answer.status_code == 200, answer.text
        return answer.json()["appointments"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def appointments(tmp_path: Path) -> Iterator[Callable[..., Appointments]]:
    started: List[Appointments] = []

    def start(*extra: str) -> Appointments:
        service = Appointments(tmp_path, *extra)
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()
