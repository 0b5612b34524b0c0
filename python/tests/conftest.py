"""Shared helpers of the Python tests: where the repository, the CLI and the
appointments service are, free ports, and servers started for a test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List, Optional

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
