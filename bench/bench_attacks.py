"""Figures of the attack matrix (issue 22, SECURITY.md): the agent under hostile
workers and clients, on loopback.

For each attack it prints what a legitimate client sees meanwhile (latency of
``/healthz`` or ``/metrics``), the agent's RSS and its log volume. Run it on
the code before a change too (``INFERWATCH_SRC=/path/to/old/agent``) for the
before/after table. Nothing here asserts: tests/live/test_attacks.py holds budgets.

    PYTHONPATH=agent python3 bench/bench_attacks.py [--only NAME ...] [--seconds 15]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
AGENT_SRC = Path(os.environ.get("INFERWATCH_SRC") or REPO / "agent").resolve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_text(models: int = 0) -> str:
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 2.0',
    ]
    lines += [
        f'vllm:num_requests_running{{engine="0",model_name="attack-{i:06d}-padding-to-a-hundred-bytes"}} 1.0'
        for i in range(models)
    ]
    lines += [
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.3',
    ]
    return "\n".join(lines) + "\n"


class Worker:
    """A worker port: ``body()`` on /metrics; ``hang`` paths never answer."""

    def __init__(self, body: Callable[[], str], hang: tuple[str, ...] = ()) -> None:
        self.body = body
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path in hang:
                    time.sleep(3600)
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                outer.hits += 1
                data = outer.body().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@contextmanager
def agent(tmp: Path, *args: str, nofile: int | None = None) -> Iterator[tuple[int, Path, int]]:
    port = free_port()
    log = tmp / f"agent-{port}.log"
    cmd = [sys.executable, "-m", "inferwatch.cli", "run", "--listen", f"127.0.0.1:{port}", *args]
    if nofile:
        cmd = ["prlimit", f"--nofile={nofile}:{nofile}", *cmd]
    env = {**os.environ, "PYTHONPATH": str(AGENT_SRC)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
            break
        except OSError:
            time.sleep(0.2)
    try:
        yield port, log, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Probe(threading.Thread):
    def __init__(self, url: str, headers: dict[str, str] | None = None, every: float = 0.05):
        super().__init__(daemon=True)
        self.url, self.headers, self.every = url, headers or {}, every
        self.lat: list[float] = []
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            try:
                req = urllib.request.Request(self.url, headers=self.headers)
                urllib.request.urlopen(req, timeout=10).read()
                self.lat.append(time.perf_counter() - t)
            except (OSError, urllib.error.HTTPError):
                self.failed += 1
            self.stop.wait(self.every)

    def summary(self) -> dict[str, float]:
        lat = sorted(self.lat) or [float("nan")]
        return {
            "answered": len(self.lat),
            "failed": self.failed,
            "p50_ms": round(statistics.median(lat) * 1000, 1),
            "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1),
        }


def rss(pid: int) -> float:
    return round(psutil.Process(pid).memory_info().rss / 1e6, 1)


def cardinality(tmp: Path, seconds: float) -> dict[str, object]:
    hostile = vllm_text(60_000)
    normal = vllm_text()
    state = {"body": hostile}
    worker = Worker(lambda: state["body"])
    args = ("--gpu-backend", "none", "--worker", f"w={worker.url}", "--collect-interval", "1s")
    with agent(tmp, *args) as (port, _log, pid):
        health = Probe(f"http://127.0.0.1:{port}/healthz")
        metrics = Probe(f"http://127.0.0.1:{port}/metrics", every=0.25)
        health.start()
        metrics.start()
        peak = 0.0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            peak = max(peak, rss(pid))
            time.sleep(0.5)
        health.stop.set()
        metrics.stop.set()
        state["body"] = normal
        hits = worker.hits
        while worker.hits < hits + 5:
            time.sleep(0.5)
        return {
            "body_mb": round(len(hostile) / 1e6, 1),
            "rss_peak_mb": peak,
            "rss_after_mb": rss(pid),
            "healthz": health.summary(),
            "metrics": metrics.summary(),
        }


def bcrypt_guessing(tmp: Path, seconds: float, clients: int) -> dict[str, object]:
    import bcrypt

    password = "right"
    web = tmp / f"web-{clients}.yml"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    web.chmod(0o600)

    def auth(p: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"prometheus:{p}".encode()).decode()}

    with agent(tmp, "--gpu-backend", "fake", "--web-config-file", str(web)) as (port, _log, _):
        url = f"http://127.0.0.1:{port}/metrics"
        legit = Probe(url, auth(password))
        stop = threading.Event()
        guesses = [0]

        def guess() -> None:
            while not stop.is_set():
                try:
                    urllib.request.urlopen(
                        urllib.request.Request(url, headers=auth("x")), timeout=10
                    )
                except (OSError, urllib.error.HTTPError):
                    guesses[0] += 1

        threads = [threading.Thread(target=guess, daemon=True) for _ in range(clients)]
        legit.start()
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        legit.stop.set()
        return {
            "clients": clients,
            "guesses_per_s": round(guesses[0] / seconds, 1),
            "legit_metrics": legit.summary(),
        }


def slowloris(tmp: Path, seconds: float, nofile: int, conns: int) -> dict[str, object]:
    with agent(tmp, "--gpu-backend", "fake", nofile=nofile) as (port, log, pid):
        probe = Probe(f"http://127.0.0.1:{port}/metrics", every=0.2)
        probe.start()
        socks = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            while len(socks) < conns and time.monotonic() < end:
                s = socket.socket()
                s.settimeout(2)
                try:
                    s.connect(("127.0.0.1", port))
                    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
                    socks.append(s)
                except OSError:
                    s.close()
                    break
            for s in list(socks):  # a byte now and then, as a slowloris does
                try:
                    s.sendall(b"X")
                except OSError:
                    socks.remove(s)
                    s.close()
            time.sleep(1)
        probe.stop.set()
        fds = psutil.Process(pid).num_fds()
        for s in socks:
            s.close()
        return {
            "nofile": nofile,
            "connections": conns,
            "seconds": seconds,
            "agent_fds": fds,
            "log_bytes": log.stat().st_size,
            "metrics": probe.summary(),
        }


def hanging_worker(tmp: Path, seconds: float) -> dict[str, object]:
    healthy = Worker(vllm_text)
    hostile = Worker(lambda: "", hang=("/v1/metrics", "/prometheus/metrics"))
    args = ("--gpu-backend", "none", "--worker", f"good={healthy.url}",
            "--worker", f"bad={hostile.url}")  # fmt: skip
    with agent(tmp, *args):
        start = healthy.hits
        time.sleep(seconds)
        return {"seconds": seconds, "interval_s": 2, "healthy_scrapes": healthy.hits - start}


def never_answers(tmp: Path, seconds: float) -> dict[str, object]:
    """Issue 32's case: a worker that never answers, its time-out 10 s, beside a healthy
    one and a (fake) GPU, at the default 2 s interval: how often each is collected."""
    healthy = Worker(vllm_text)
    hostile = Worker(lambda: "", hang=("/metrics",))
    config = tmp / "never.yaml"
    config.write_text(
        "workers:\n"
        f"  - {{name: good, url: '{healthy.url}', engine: vllm}}\n"
        f"  - {{name: bad, url: '{hostile.url}', engine: vllm, timeout: 10s}}\n"
    )
    args = ("--config", str(config), "--gpu-backend", "fake", "--fake-gpus", "1")
    with agent(tmp, *args) as (port, _, _):
        time.sleep(3)  # the first passes: both workers started
        start = healthy.hits
        gpu: set[str] = set()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            for line in text.decode().splitlines():
                if line.startswith('inferwatch_last_collect_timestamp_seconds{collector="nvml"}'):
                    gpu.add(line.split()[-1])
            time.sleep(0.25)
        return {
            "seconds": seconds,
            "interval_s": 2,
            "expected": int(seconds / 2),
            "healthy_scrapes": healthy.hits - start,
            "gpu_passes_seen": len(gpu),
        }


def malformed(tmp: Path, count: int) -> dict[str, object]:
    with agent(tmp, "--gpu-backend", "none") as (port, log, _):
        size0 = log.stat().st_size
        for i in range(count):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET /\x00 HTTP/1.1\r\nHost: " + b"\x01" * (i % 5) + b"\r\n\r\n")
                with suppress(OSError):
                    s.recv(4096)
        time.sleep(1)
        return {"requests": count, "log_bytes": log.stat().st_size - size0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    runs: dict[str, Callable[[Path], object]] = {
        "cardinality": lambda t: cardinality(t, args.seconds),
        "bcrypt_4": lambda t: bcrypt_guessing(t, args.seconds, 4),
        "bcrypt_32": lambda t: bcrypt_guessing(t, args.seconds, 32),
        "slowloris_1024": lambda t: slowloris(t, args.seconds, 1024, 1500),
        "hanging_worker": lambda t: hanging_worker(t, 24.0),
        "never_answers_10s": lambda t: never_answers(t, 24.0),
        "malformed": lambda t: malformed(t, 300),
    }
    results: dict[str, object] = {"agent_src": str(AGENT_SRC)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in runs.items():
            if args.only and name not in args.only:
                continue
            results[name] = run(Path(tmp))
            print(name, json.dumps(results[name]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
