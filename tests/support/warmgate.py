"""The warm-up gate live: a simulator with a cold start, the gated agent, the gate's readings.

The simulator's first requests wait an extra delay before their first token
(``--cold-start-requests``, ``--cold-start-seconds``), as an unwarmed vLLM
does; the sleeps of that delay are lower bounds, so "the cold TTFT is at least
the delay" holds on any machine. Used by tests/live/test_warmup.py and the SIGHUP
case of tests/live/test_attacks.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from tests.support.agentrun import AgentRun
from tests.support.proc import Process, free_port, http_get, inferwatch_cmd, wait_until

TIME_SCALE = 0.1
COLD_SECONDS = 15.0  # x 0.1: the first request waits 1.5 s, the second 0.75 s
COLD_DELAY = COLD_SECONDS * TIME_SCALE
MODEL = "sim-warm"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics(url: str) -> Samples:
    """Every sample of ``url``/metrics by (name, labels)."""
    status, body, _ = http_get(f"{url}/metrics")
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    """The sum of the samples named ``name`` that carry ``labels`` (None when there is none)."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    return sum(found) if found else None


def readyz(url: str) -> int:
    return http_get(f"{url}/readyz", timeout=2)[0]


def gate_open(agent: str, worker: str, metric: str = "inferwatch_worker_ready") -> bool:
    """/readyz answers 200 and the exposition (rebuilt after each gate pass) shows it."""
    return readyz(agent) == 200 and sample(metrics(agent), metric, worker=worker) == 1


def simulator(tmp_path: Path, port: int, tag: str, cold_requests: int = 2) -> Process:
    """``inferwatch simulate`` serving MODEL with ``cold_requests`` cold, answering /health."""
    sim = Process(
        inferwatch_cmd(
            "simulate", "--port", str(port), "--model", MODEL,
            "--time-scale", str(TIME_SCALE),
            "--cold-start-requests", str(cold_requests), "--cold-start-seconds", str(COLD_SECONDS),
        ),
        tmp_path / f"sim-{tag}.log",
    )  # fmt: skip
    wait_until(
        lambda: sim.alive() and http_get(f"http://127.0.0.1:{port}/health", timeout=2)[0] == 200,
        timeout=30,
        message=f"simulator {tag} on :{port}",
    )
    return sim


def gated_agent(start: Callable[..., AgentRun], config: dict[str, Any]) -> AgentRun:
    """The agent (started by ``start``, e.g. the make_agent fixture) with fast gate passes."""
    return start(
        config={
            "collect_interval": "500ms",
            "process_interval": "1s",
            "gpu": {"backend": "none"},
            **config,
        }
    )


def gated_worker(start: Callable[..., AgentRun], **warmup: Any) -> tuple[int, str, str]:
    """One worker, ``w0``, on a free port nothing serves yet, and the agent gating it with
    ``warmup`` settings: (the worker's port, its URL, the agent's URL)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    agent = gated_agent(start, {"workers": [{"name": "w0", "url": url}], "warmup": warmup})
    return port, url, agent.url
