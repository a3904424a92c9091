"""A real Prometheus scrapes a running agent that scrapes a changing vLLM exposition.

Checks through Prometheus's HTTP API that the contract's series arrive with the
right values, and that the agent's window P99 agrees with Prometheus's own
``histogram_quantile`` over the histogram the agent passes through.

The stub adds the same batch of TTFT observations at every tick, so the
increase over any window is a whole multiple of that batch and every window's
quantile is the same number: the agent's window and Prometheus's range need not
line up for the two to agree exactly.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml
from tests.support.agentrun import AgentRun
from tests.support.proc import Prometheus, running, wait_until
from tests.support.stubworker import StubWorker
from tests.support.vllm_text import TTFT_BUCKETS, EngineValues, render

from inferwatch.stats import histogram_quantile

BATCH = [0.03, 0.09, 0.2, 0.3, 0.3, 0.45, 0.6, 0.9, 1.7, 3.2]  # added every tick


class Feed:
    """A vLLM engine whose counters and histograms grow at a steady, known rate."""

    def __init__(self) -> None:
        self.values = EngineValues(running=5, waiting=3, kv=0.42, prefix_queries=0, prefix_hits=0)
        self.lock = threading.Lock()
        self.ticks = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            with self.lock:
                v = self.values
                v.ttft.extend(BATCH)
                v.prompt_tokens += 100
                v.generation_tokens += 20
                v.prefix_queries += 100
                v.prefix_hits += 25
                v.finished["stop"] += 1
                self.ticks += 1

    def text(self) -> str:
        with self.lock:
            return render("v1", [self.values])

    def stop(self) -> None:
        self._stop.set()


@pytest.mark.slow
def test_contract_series_reach_prometheus_and_p99_agrees(tmp_path: Path) -> None:
    feed = Feed()
    feed.thread.start()
    stub = StubWorker(feed.text)
    agent = AgentRun(
        tmp_path,
        *("--worker", f"w1={stub.url}", "--gpu-backend", "fake", "--fake-gpus", "2"),
        *("--collect-interval", "0.5s", "--stats-window", "10s"),
        ready="/readyz",
        timeout=30,
    )
    port = agent.port
    try:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "inferwatch", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            ],
        }
        prom = Prometheus(tmp_path, yaml.safe_dump(config))
        with running(prom):
            wait_until(prom.targets_up, 30, message="agent target up")
            sel = '{job="inferwatch",worker="w1",engine="vllm",model="m"}'
            wait_until(
                lambda: prom.query(f"inferwatch_ttft_quantile_seconds{sel}"),
                30,
                message="window quantiles in prometheus",
            )
            assert prom.scalar('inferwatch_target_up{worker="w1"}') == 1
            assert prom.scalar(f"inferwatch_queue_depth{sel}") == 3
            assert prom.scalar(f"inferwatch_requests_running{sel}") == 5
            assert prom.scalar(f"inferwatch_kv_cache_usage_ratio{sel}") == pytest.approx(0.42)
            wait_until(lambda: prom.scalar(f"inferwatch_prefix_cache_hit_ratio{sel}"), 20)
            assert prom.scalar(f"inferwatch_prefix_cache_hit_ratio{sel}") == pytest.approx(0.25)
            # counters pass through exactly: 100 prompt tokens per tick of the feed
            with feed.lock:
                ticks_before = feed.ticks
            value = prom.scalar(f"inferwatch_prompt_tokens_total{sel}")
            assert value is not None and value % 100 == 0
            assert 0 < value / 100 <= ticks_before + 1
            wait_until(
                lambda: (prom.scalar(f"rate(inferwatch_prompt_tokens_total{sel}[5s])") or 0) > 0,
                20,
                message="a positive token rate",
            )
            reasons = {
                r["metric"]["reason"]
                for r in prom.query(f"inferwatch_requests_finished_total{sel}")
            }
            assert {"stop", "length", "abort", "error"} <= reasons
            # bucket bounds pass through unchanged
            les = {r["metric"]["le"] for r in prom.query(f"inferwatch_ttft_seconds_bucket{sel}")}
            assert les == {*(str(b) if b != int(b) else f"{b:.1f}" for b in TTFT_BUCKETS), "+Inf"}
            # max_num_seqs is unknown for a stub (no process, no config): absent, not 0
            assert prom.query('inferwatch_max_num_seqs{worker="w1"}') == []

            expected = histogram_quantile(
                0.99, list(zip((*TTFT_BUCKETS, float("inf")), _cumulative(BATCH), strict=True))
            )
            promql = (
                "histogram_quantile(0.99, sum by (le) "
                f"(rate(inferwatch_ttft_seconds_bucket{sel}[10s])))"
            )
            wait_until(lambda: prom.scalar(promql) is not None, 20)
            agent_p99 = prom.scalar('inferwatch_ttft_quantile_seconds{worker="w1",quantile="0.99"}')
            prom_p99 = prom.scalar(promql)
            assert agent_p99 == pytest.approx(expected, rel=1e-9)
            assert prom_p99 == pytest.approx(agent_p99, rel=1e-9)

            # GPU series from the fake backend, one per GPU, and the agent's own
            assert len(prom.query("inferwatch_gpu_up == 1")) == 2
            assert len(prom.query("inferwatch_gpu_memory_total_bytes > 0")) == 2
            assert prom.query('inferwatch_agent_info{job="inferwatch"}')
            assert prom.query('inferwatch_last_collect_timestamp_seconds{collector="engine"}')
            assert prom.query('process_resident_memory_bytes{job="inferwatch"}')
    finally:
        agent.stop()
        stub.stop()
        feed.stop()
    assert "Traceback" not in agent.log(), agent.log()[-3000:]


def _cumulative(observations: list[float]) -> list[float]:
    bounds = (*TTFT_BUCKETS, float("inf"))
    return [float(sum(1 for o in observations if o <= b)) for b in bounds]


@pytest.mark.slow
def test_agent_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    agent = AgentRun(tmp_path, "--gpu-backend", "fake", timeout=30)
    start = time.monotonic()
    assert agent.stop() == 0
    assert time.monotonic() - start < 10
    assert "shutting down" in agent.log()
