"""The planted ninth engine, live: ``inferwatch simulate --engine ninth`` watched by a real agent.

Both programs run from a copy of the package that differs from the repository
only by the engine's two files (tests/support/planted.py). The simulator serves
the planted writer on the engine's own path; the agent, configured with
``engine: ninth``, finds it there, maps it with the planted table (queue, running
batch, finished requests, TTFT buckets at the engine's own bounds) and reads its
self-description under the keys its table names.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from tests.support import planted
from tests.support.agentrun import AgentRun
from tests.support.proc import Process, free_port, http_get, wait_until

from inferwatch.sim.config import VLLM_VERSION

Sample = tuple[dict[str, str], float]


def scrape(url: str) -> dict[str, list[Sample]]:
    status, body, _ = http_get(url + "/metrics")
    assert status == 200
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def complete(url: str, n: int) -> None:
    body = json.dumps({"model": "m", "prompt": "hello " * 20, "max_tokens": 4}).encode()
    for _ in range(n):
        req = urllib.request.Request(
            url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200


def test_the_planted_engine_is_simulated_and_mapped_by_the_agent(tmp_path: Path) -> None:
    source_root = planted.planted_tree(tmp_path / "tree")
    env = planted.env(source_root)
    port = free_port()
    sim = Process(
        [
            sys.executable, "-m", "inferwatch.cli", "simulate", "--engine", planted.NAME,
            "--port", str(port), "--model", "m", "--time-scale", "0.05",
            "--cold-start-requests", "0",
        ],
        tmp_path / "sim.log",
        env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http_get(url + "/health")[0] == 200, 30, message="simulator up")
        status, _, _ = http_get(url + planted.METRICS_PATH)
        assert status == 200
        config = {"workers": [{"name": "w", "url": url, "engine": planted.NAME}]}
        with AgentRun(
            tmp_path,
            "--gpu-backend", "none", "--collect-interval", "0.2s", "--stats-window", "5s",
            config=config, env=env, ready="/readyz", timeout=30,
        ) as agent:  # fmt: skip
            complete(url, 4)

            def mapped() -> dict[str, list[Sample]] | None:
                s = scrape(agent.url)
                done = [
                    v
                    for lab, v in s.get("inferwatch_requests_finished_total", [])
                    if lab.get("engine") == planted.NAME
                ]
                return s if done and sum(done) >= 4 else None

            s = wait_until(mapped, 30, message="finished requests through the agent")
    finally:
        sim.stop()

    def worker(name: str) -> list[Sample]:
        return [(lab, v) for lab, v in s.get(name, []) if lab.get("worker") == "w"]

    assert [v for _, v in worker("inferwatch_target_up")] == [1.0]
    assert {lab["engine"] for lab, _ in worker("inferwatch_queue_depth")} == {planted.NAME}
    assert worker("inferwatch_requests_running")
    bounds = {lab["le"] for lab, _ in worker("inferwatch_ttft_seconds_bucket")}
    assert bounds == {"0.05", "0.5", "3.5", "35.0", "+Inf"}
    (info,) = [lab for lab, _ in worker("inferwatch_worker_info")]
    assert info["engine"] == planted.NAME
    # the simulator states vLLM's /version: read under the table's second version key
    assert info["version"] == VLLM_VERSION
