"""The Python package's figures of BENCHMARKS.md (benches/python/run.sh runs it on a
release build of the extension). Prints one JSON document:

- ``fingerprint``: ``idemkit_rs.fingerprint`` of each benchmark body (the bytes a
  server receives) against ``hashlib.sha256(json.dumps(obj, sort_keys=True,
  separators=(",", ":")))`` of the body already parsed, and of the body from its
  bytes (``json.loads`` first); ns per call, the best of 5 rounds over
  ``BENCH_SECONDS`` per figure;
- ``asgi``: what IdempotencyMiddleware adds to a bare Starlette route under uvicorn
  (one client, sequential requests on one keep-alive connection): the bare route, a
  fresh key (claim + complete: two durable redb commits) and a replay.

    python bench.py BODIES_DIR
"""

import hashlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

import idemkit_rs

SECONDS = float(os.environ.get("BENCH_SECONDS", "2"))
HERE = Path(__file__).resolve().parent


def per_call_ns(fn, seconds: float, rounds: int = 5) -> float:
    """ns per call of `fn()`: the best of `rounds` rounds of about `seconds / rounds`
    each (after one warm-up call); the best round is the one the other processes of a
    shared machine disturbed least."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        calls, started = 0, time.perf_counter_ns()
        deadline = started + int(seconds / rounds * 1e9)
        batch = 1
        while True:
            for _ in range(batch):
                fn()
            calls += batch
            now = time.perf_counter_ns()
            if now >= deadline:
                break
            batch = min(batch * 2, 1024)
        best = min(best, (now - started) / calls)
    return best


def fingerprints(bodies: Path) -> list:
    rows = []
    order = {"1KB": 0, "64KB": 1, "4MB": 2}
    for file in sorted(bodies.glob("*.json"), key=lambda f: (f.stem.split("-")[0], order.get(f.stem.split("-")[1], 9))):
        shape, size = file.stem.split("-")
        body = file.read_bytes()
        obj = json.loads(body)
        figures = {
            "idemkit_fingerprint": lambda: idemkit_rs.fingerprint(body, "bench.op"),
            "idemkit_canonicalize": lambda: idemkit_rs.canonicalize(body),
            "sha256_dumps_parsed": lambda: hashlib.sha256(
                json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
            ).hexdigest(),
            "sha256_dumps_from_bytes": lambda: hashlib.sha256(
                json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
            ).hexdigest(),
        }
        rows.append({
            "shape": shape,
            "size": size,
            "bytes": len(body),
            "mean_ns": {name: per_call_ns(fn, SECONDS) for name, fn in figures.items()},
        })
    return rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def latencies(client: httpx.Client, url: str, key_of, seconds: float) -> list:
    """Per-request ms of sequential POSTs for about `seconds` (after 20 warm-ups)."""
    body = b'{"customer_id":"c-1","slot_id":"s-9"}'
    out = []
    deadline = time.perf_counter() + seconds
    for i in range(10**9):
        headers = {"Authorization": "Bearer bench", "Content-Type": "application/json"}
        key = key_of(i)
        if key:
            headers["Idempotency-Key"] = key
        started = time.perf_counter()
        answer = client.post(url, content=body, headers=headers)
        took = (time.perf_counter() - started) * 1000
        assert answer.status_code == 201, answer.text
        if i >= 20:
            out.append(took)
            if time.perf_counter() >= deadline:
                return out
    return out


def summary(ms: list) -> dict:
    ms = sorted(ms)
    return {
        "requests": len(ms),
        "mean_ms": statistics.fmean(ms),
        "p50_ms": ms[len(ms) // 2],
        "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
    }


def asgi() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = dict(os.environ, IDEMKIT_BENCH_STORE=str(Path(tmp) / "bench.redb"))
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "asgi_app:app", "--app-dir", str(HERE), "--port", str(port),
             "--log-level", "warning", "--no-access-log"],
            env=env,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
            with httpx.Client() as client:
                replay_key = f"replay-{uuid.uuid4()}"
                return {
                    "bare": summary(latencies(client, base + "/bare", lambda i: None, SECONDS)),
                    "fresh": summary(latencies(client, base + "/protected", lambda i: f"k-{uuid.uuid4()}", SECONDS)),
                    "replay": summary(latencies(client, base + "/protected", lambda i: replay_key, SECONDS)),
                }
        finally:
            server.terminate()
            server.wait()


def main() -> None:
    bodies = Path(sys.argv[1])
    doc = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpu": platform.processor() or platform.machine(),
        "seconds_per_measurement": SECONDS,
        "fingerprint": fingerprints(bodies),
        "asgi": asgi(),
    }
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
