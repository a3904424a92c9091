"""NVIDIA NIM for LLMs: vLLM-like names without a prefix, at ``/v1/metrics``.

Names, types, labels and buckets as NIM 1.x exposes them (NVIDIA's NIM
observability page and a captured NIM exposition; see
``agent/inferwatch/engines/nim.py``): prometheus_client text without
``_created`` samples, the ``model_name`` label, the Python process collectors,
``num_request_max`` for the concurrency limit and ``request_finish_total``,
``request_success_total``, ``request_failure_total`` for outcomes.

NIM reports one series per model: with ``--data-parallel`` > 1 the simulated
engines add up.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferwatch.engines.nim import (  # the engine's own bounds, defined once
    E2E_BUCKETS,
    TOKEN_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.expo.common import (
    E2E_HELP,
    RegistryWriter,
    WithoutCreated,
    observe_latencies,
    process_collectors,
)
from inferwatch.sim.stats import EngineSnapshot, StepStats

FORMATS = ("v1",)


class NimWriter(RegistryWriter):
    metrics_path = "/v1/metrics"
    labels = ("model_name",)

    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg)
        process_collectors(self.registry)
        self.lv = (cfg.model,)
        self.running = self.gauge("num_requests_running",
                                  "Number of requests currently running on GPU.")  # fmt: skip
        self.waiting = self.gauge("num_requests_waiting",
                                  "Number of requests waiting to be processed.")  # fmt: skip
        self.max = self.gauge("num_request_max", "Max number of concurrently running requests.")
        self.kv = self.gauge("gpu_cache_usage_perc",
                             "GPU KV-cache usage. 1 means 100 percent usage.")  # fmt: skip
        self.prompt = self.counter("prompt_tokens", "Number of prefill tokens processed.")
        self.generation = self.counter("generation_tokens",
                                       "Number of generation tokens processed.")  # fmt: skip
        self.ttft, self.tpot = self.ttft_tpot(TTFT_BUCKETS, TPOT_BUCKETS)
        self.finished = self.per_request((
            ("e2e", "e2e_request_latency_seconds", E2E_BUCKETS, E2E_HELP),
            ("prompt_tokens", "request_prompt_tokens", TOKEN_BUCKETS,
             "Number of prefill tokens processed."),
            ("generation_tokens", "request_generation_tokens", TOKEN_BUCKETS,
             "Number of generation tokens processed."),
        ))  # fmt: skip
        self.finish = self.counter("request_finish",
                                   "Count of finished requests, differentiated by finish reason "
                                   "as label.", [*self.labels, "finished_reason"])  # fmt: skip
        self.success = self.counter("request_success", "Count of successful requests.")
        self.failure = self.counter("request_failure", "Count of failed requests.")
        for c in (self.prompt, self.generation, self.success, self.failure):
            c.labels(*self.lv)
        for h in (self.ttft, self.tpot, *self.finished.histograms):
            h.labels(*self.lv)
        self._view = WithoutCreated(self.registry)

    def on_step(self, engine: int, stats: StepStats) -> None:
        lv = self.lv
        if stats.step:
            self.prompt.labels(*lv).inc(stats.prompt_tokens)
            self.generation.labels(*lv).inc(stats.generation_tokens)
        observe_latencies(stats, lv, self.ttft, self.tpot)
        for req in stats.finished:
            if req.finish_reason == "error":
                self.failure.labels(*lv).inc()
                continue
            self.finish.labels(*lv, req.finish_reason).inc()
            self.success.labels(*lv).inc()
            self.finished.observe(lv, req)

    def on_rejection(self, reason: str) -> None:
        self.failure.labels(*self.lv).inc()

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        lv = self.lv
        self.running.labels(*lv).set(sum(s.running for s in states))
        self.waiting.labels(*lv).set(sum(s.waiting for s in states))
        self.max.labels(*lv).set(sum(s.max_num_seqs for s in states))
        used = sum(s.blocks_in_use for s in states)
        total = sum(s.num_gpu_blocks for s in states)
        self.kv.labels(*lv).set(used / total if total else 0.0)
        return self.text(self._view)


def create(cfg: SimConfig) -> NimWriter:
    return NimWriter(cfg)
