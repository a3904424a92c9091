"""Helpers for the attack matrix: an agent under limits, a probe, RSS, log volume.

The probe is a legitimate client that keeps asking while an attack runs and
records each answer's latency; tests compare those with SECURITY.md's budgets
(with margins for a noisy shared machine), bench/bench_attacks.py prints them.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from tests.support.agentrun import AgentRun
from tests.support.proc import Process

from inferwatch.agent.config import ServerConfig

#: the agent's memory limit in every deployment (systemd MemoryMax, Compose, Kubernetes)
RSS_LIMIT_MB = 256
#: descriptors every deployment grants at least: twice the default connection cap
NOFILE_FLOOR = 2 * ServerConfig().max_connections


def start_agent(
    tmp: Path,
    *args: str,
    config: dict | None = None,
    nofile: int | None = None,
    name: str = "agent",
    env: dict[str, str] | None = None,
) -> tuple[Process, int]:
    """``inferwatch run`` (support/agentrun.py) answering /healthz; ``nofile`` caps descriptors."""
    agent = AgentRun(tmp, *args, config=config, nofile=nofile, name=name, env=env)
    return agent.process, agent.port


def rss_mb(proc: Process) -> float:
    """Resident memory of the agent (through prlimit, which execs: the same pid)."""
    return psutil.Process(proc.popen.pid).memory_info().rss / 1e6


@dataclass
class Probe:
    """GETs ``url`` until stopped, pacing ``every`` seconds; latencies of answers."""

    url: str
    every: float = 0.05
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 10.0
    latencies: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    failures: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            req = urllib.request.Request(self.url, headers=self.headers)
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    resp.read()
                    self.statuses.append(resp.status)
            except urllib.error.HTTPError as err:
                self.statuses.append(err.code)
            except (OSError, ConnectionError):
                self.failures += 1
                self._stop.wait(self.every)
                continue
            self.latencies.append(time.perf_counter() - started)
            self._stop.wait(self.every)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)

    def p50(self) -> float:
        return statistics.median(self.latencies) if self.latencies else float("inf")

    def p99(self) -> float:
        if not self.latencies:
            return float("inf")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def slow_connections(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that send the start of a request head and never finish it."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks
