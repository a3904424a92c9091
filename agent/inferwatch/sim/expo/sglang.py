"""SGLang's ``/metrics`` (``--enable-metrics``), written with prometheus_client.

Scheduler series (queue, running, KV-pool share, retractions, queue time) carry
``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank`` (+ ``dp_rank`` with
``--data-parallel`` > 1); tokenizer series (tokens, TTFT, inter-token latency,
end-to-end latency, request counts, and the prompt and generation length
histograms of ``--collect-tokens-histogram``, served as if it were on) carry
``model_name, engine_type``. Names,
labels and buckets: see ``agent/inferwatch/engines/sglang.py`` (sgl-project/sglang
``python/sglang/srt/metrics/collector.py``).

Formats:

``tp1``
    one tensor-parallel rank: one scheduler series per data-parallel rank.
``tp2``
    ``--tp 2 --enable-metrics-for-all-schedulers``: both tensor-parallel ranks
    report the same scheduler gauges and counters (copies, not more load).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import Gauge

from inferwatch.engines.sglang import (  # the engine's own bounds, defined once
    E2E_BUCKETS,
    ITL_BUCKETS,
    QUEUE_BUCKETS,
    TOKEN_BUCKETS,
    TTFT_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.expo.common import TTFT_HELP, RegistryWriter, observe_latencies
from inferwatch.sim.stats import EngineSnapshot, StepStats

FORMATS = ("tp1", "tp2")

SCHEDULER_LABELS = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
TOKENIZER_LABELS = ("model_name", "engine_type")


class SglangWriter(RegistryWriter):
    """No admission rejections: SGLang has no counter for them."""

    labels = TOKENIZER_LABELS

    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg)
        self.tp = 2 if cfg.format == "tp2" else 1
        self.dp = cfg.data_parallel > 1
        reg = self.registry
        sched = SCHEDULER_LABELS + (["dp_rank"] if self.dp else [])
        self.tok = (cfg.model, "unified")
        counter, hist = self.counter, self.histogram

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, sched, registry=reg, multiprocess_mode="mostrecent")

        self.running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.queue = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.usage = gauge("sglang:token_usage", "The token usage.")
        self.used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.max_tokens = gauge(
            "sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."
        )
        self.retracted = counter("sglang:num_retracted_requests_total",
                                 "Total number of retracted requests.", sched)  # fmt: skip
        self.queue_time = hist("sglang:queue_time_seconds", "Histogram of queueing time in seconds.",
                               QUEUE_BUCKETS, sched)  # fmt: skip
        self.prompt = counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation = counter("sglang:generation_tokens_total",
                                  "Number of generation tokens processed.")  # fmt: skip
        self.cached = counter("sglang:cached_tokens_total", "Number of cached prompt tokens.")
        self.requests = counter("sglang:num_requests_total", "Number of requests processed.")
        self.aborted = counter("sglang:num_aborted_requests_total", "Number of requests aborted.")
        self.ttft = hist("sglang:time_to_first_token_seconds", TTFT_HELP, TTFT_BUCKETS)
        self.itl = hist("sglang:inter_token_latency_seconds",
                        "Histogram of inter-token latency in seconds.", ITL_BUCKETS)  # fmt: skip
        self.finished = self.per_request((
            ("e2e", "sglang:e2e_request_latency_seconds", E2E_BUCKETS,
             "Histogram of End-to-end request latency in seconds"),
            ("prompt_tokens", "sglang:prompt_tokens_histogram", TOKEN_BUCKETS,
             "Histogram of prompt token length."),
            ("generation_tokens", "sglang:generation_tokens_histogram", TOKEN_BUCKETS,
             "Histogram of generation token length."),
        ))  # fmt: skip
        for c in (self.prompt, self.generation, self.requests, self.aborted):
            c.labels(*self.tok)
        for h in (self.ttft, self.itl, *self.finished.histograms):
            h.labels(*self.tok)
        for e in range(cfg.data_parallel):
            for lv in self._sched(e):
                self.retracted.labels(*lv)
                self.queue_time.labels(*lv)

    def _sched(self, engine: int) -> list[tuple[str, ...]]:
        """One label set per tensor-parallel rank that reports (copies of one scheduler)."""
        dp = (str(engine),) if self.dp else ()
        return [(self.cfg.model, "unified", str(tp), "0", "0", *dp) for tp in range(self.tp)]

    def on_step(self, engine: int, stats: StepStats) -> None:
        for lv in self._sched(engine):
            if stats.preemptions:
                self.retracted.labels(*lv).inc(stats.preemptions)
            for req in stats.finished:
                self.queue_time.labels(*lv).observe(req.queue_time)
        tok = self.tok
        observe_latencies(stats, tok, self.ttft, self.itl)
        for req in stats.finished:
            if req.finish_reason == "abort":
                self.aborted.labels(*tok).inc()
            # the tokenizer manager counts a request's tokens when it finishes
            self.prompt.labels(*tok).inc(req.prompt_tokens)
            self.generation.labels(*tok).inc(req.generation_tokens)
            if req.cached_tokens > 0:
                self.cached.labels(*tok).inc(req.cached_tokens)
            self.requests.labels(*tok).inc()
            self.finished.observe(tok, req)

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        block = self.cfg.block_size
        for s in states:
            for lv in self._sched(s.engine):
                self.running.labels(*lv).set(s.running)
                self.queue.labels(*lv).set(s.waiting)
                self.usage.labels(*lv).set(s.kv_usage)
                self.used_tokens.labels(*lv).set(s.blocks_in_use * block)
                self.max_tokens.labels(*lv).set(s.num_gpu_blocks * block)
        return self.text(self.registry)


def create(cfg: SimConfig) -> SglangWriter:
    return SglangWriter(cfg)
