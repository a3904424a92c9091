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

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from inferwatch.engines.nim import (  # the engine's own bounds, defined once
    E2E_BUCKETS,
    TOKEN_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.expo.common import WithoutCreated
from inferwatch.sim.stats import EngineSnapshot, HttpRecord, StepStats

FORMATS = ("v1",)


class NimWriter:
    metrics_path = "/v1/metrics"
    supports_gzip = True

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        reg = self.registry = CollectorRegistry()
        GCCollector(registry=reg)
        PlatformCollector(registry=reg)
        ProcessCollector(registry=reg)
        lab = ["model_name"]
        self.lv = (cfg.model,)
        self.running = Gauge("num_requests_running", "Number of requests currently running on GPU.",
                             lab, registry=reg)  # fmt: skip
        self.waiting = Gauge("num_requests_waiting", "Number of requests waiting to be processed.",
                             lab, registry=reg)  # fmt: skip
        self.max = Gauge("num_request_max", "Max number of concurrently running requests.", lab,
                         registry=reg)  # fmt: skip
        self.kv = Gauge("gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.",
                        lab, registry=reg)  # fmt: skip
        self.prompt = Counter("prompt_tokens", "Number of prefill tokens processed.", lab,
                              registry=reg)  # fmt: skip
        self.generation = Counter("generation_tokens", "Number of generation tokens processed.",
                                  lab, registry=reg)  # fmt: skip
        self.ttft = Histogram("time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", lab,
                              buckets=TTFT_BUCKETS, registry=reg)  # fmt: skip
        self.tpot = Histogram("time_per_output_token_seconds",
                              "Histogram of time per output token in seconds.", lab,
                              buckets=TPOT_BUCKETS, registry=reg)  # fmt: skip
        self.e2e = Histogram("e2e_request_latency_seconds",
                             "Histogram of end to end request latency in seconds.", lab,
                             buckets=E2E_BUCKETS, registry=reg)  # fmt: skip
        self.req_prompt = Histogram("request_prompt_tokens", "Number of prefill tokens processed.",
                                    lab, buckets=TOKEN_BUCKETS, registry=reg)  # fmt: skip
        self.req_gen = Histogram("request_generation_tokens",
                                 "Number of generation tokens processed.", lab,
                                 buckets=TOKEN_BUCKETS, registry=reg)  # fmt: skip
        self.finish = Counter("request_finish",
                              "Count of finished requests, differentiated by finish reason as "
                              "label.", [*lab, "finished_reason"], registry=reg)  # fmt: skip
        self.success = Counter("request_success", "Count of successful requests.", lab,
                               registry=reg)  # fmt: skip
        self.failure = Counter("request_failure", "Count of failed requests.", lab,
                               registry=reg)  # fmt: skip
        for c in (self.prompt, self.generation, self.success, self.failure):
            c.labels(*self.lv)
        for h in (self.ttft, self.tpot, self.e2e, self.req_prompt, self.req_gen):
            h.labels(*self.lv)
        self._view = WithoutCreated(reg)

    def on_step(self, engine: int, stats: StepStats) -> None:
        lv = self.lv
        if stats.step:
            self.prompt.labels(*lv).inc(stats.prompt_tokens)
            self.generation.labels(*lv).inc(stats.generation_tokens)
        for v in stats.ttfts:
            self.ttft.labels(*lv).observe(v)
        for v in stats.itls:
            self.tpot.labels(*lv).observe(v)
        for req in stats.finished:
            if req.finish_reason == "error":
                self.failure.labels(*lv).inc()
                continue
            self.finish.labels(*lv, req.finish_reason).inc()
            self.success.labels(*lv).inc()
            self.e2e.labels(*lv).observe(req.e2e)
            self.req_prompt.labels(*lv).observe(req.prompt_tokens)
            self.req_gen.labels(*lv).observe(req.generation_tokens)

    def on_rejection(self, reason: str) -> None:
        self.failure.labels(*self.lv).inc()

    def on_http(self, record: HttpRecord) -> None:
        """Not simulated for NIM."""

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        lv = self.lv
        self.running.labels(*lv).set(sum(s.running for s in states))
        self.waiting.labels(*lv).set(sum(s.waiting for s in states))
        self.max.labels(*lv).set(sum(s.max_num_seqs for s in states))
        used = sum(s.blocks_in_use for s in states)
        total = sum(s.num_gpu_blocks for s in states)
        self.kv.labels(*lv).set(used / total if total else 0.0)
        # Always the 0.0.4 text format: prometheus_client's OpenMetrics encoder rewrites
        # ":" in sample names but not in TYPE lines, which no parser accepts.
        encoder, content_type = generate_latest, CONTENT_TYPE_LATEST
        return Exposition(encoder(self._view), content_type)


def create(cfg: SimConfig) -> NimWriter:
    return NimWriter(cfg)
