"""LMDeploy's api_server ``/metrics``, written with prometheus_client.

Every series carries ``model_name`` and ``engine`` (the data-parallel rank);
``_created`` samples are disabled, finish reasons are ``str(ResponseType.X)``.
Names, labels and buckets: see ``agent/inferwatch/engines/lmdeploy.py``
(InternLM/lmdeploy ``lmdeploy/metrics/loggers.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from inferwatch.engines.lmdeploy import (  # the engine's own bounds, defined once
    LATENCY_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.expo.common import WithoutCreated, buckets_1_2_5
from inferwatch.sim.stats import EngineSnapshot, HttpRecord, StepStats

FORMATS = ("pytorch",)

#: lmdeploy.messages.ResponseType members, in their order
RESPONSE_TYPES = (
    "SUCCESS", "FINISH", "ENGINE_STOP_ERROR", "SESSION_REPEAT", "SESSION_NOT_EXIST",
    "HANDLER_NOT_EXIST", "INPUT_LENGTH_ERROR", "INTERNAL_ENGINE_ERROR", "CANCEL",
    "PREFIX_CACHE_CONFLICT", "NO_QUEUE", "NOT_SUPPORTED", "OUT_OF_MEMORY",
)  # fmt: skip
#: the simulator's finish reasons -> the ResponseType LMDeploy reports
REASONS = {
    "stop": "FINISH", "length": "FINISH", "repetition": "FINISH", "abort": "CANCEL",
    "error": "INTERNAL_ENGINE_ERROR",
}  # fmt: skip
LABELS = ["model_name", "engine"]


class LmdeployWriter:
    metrics_path = "/metrics"
    supports_gzip = True

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        reg = self.registry = CollectorRegistry()

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge("lmdeploy:" + name, doc, LABELS, registry=reg)

        def counter(name: str, doc: str) -> Counter:
            return Counter("lmdeploy:" + name, doc, LABELS, registry=reg)

        def hist(name: str, doc: str, buckets: Sequence[float]) -> Histogram:
            return Histogram("lmdeploy:" + name, doc, LABELS, buckets=buckets, registry=reg)

        self.waiting = gauge("num_requests_waiting", "Number of requests waiting to be processed.")
        self.running = gauge("num_requests_running",
                             "Number of requests in model execution batches.")  # fmt: skip
        self.kv = gauge("gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.")
        self.prompt = counter("prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation = counter("generation_tokens_total",
                                  "Number of generation tokens processed.")  # fmt: skip
        self.cached = counter("cached_tokens_total", "Total prefix-cached input tokens served.")
        self.success = Counter("lmdeploy:request_success_total",
                               "Count of successfully processed requests.",
                               [*LABELS, "finished_reason"], registry=reg)  # fmt: skip
        lengths = buckets_1_2_5(cfg.max_model_len)
        self.req_prompt = hist("request_prompt_tokens", "Number of prefill tokens processed.",
                               lengths)  # fmt: skip
        self.req_gen = hist("request_generation_tokens", "Number of generation tokens processed.",
                            lengths)  # fmt: skip
        self.req_cached = hist(
            "request_cached_tokens", "Number of prefix-cached input tokens per request.", lengths
        )
        self.ttft = hist(
            "time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.tpot = hist(
            "time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            TPOT_BUCKETS,
        )
        self.itl = hist("iter_token_latency", "Histogram of inter-token latency", TPOT_BUCKETS)
        self.e2e = hist(
            "e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            LATENCY_BUCKETS,
        )
        self.queue_time = hist("request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.",
                               LATENCY_BUCKETS)  # fmt: skip
        # lmdeploy/metrics/loggers.py @ 0168eedaef9497414956cb20c2ad0f443de6c248
        self.prefill_time = hist("request_prefill_time_seconds",
                                 "Histogram of time spent in PREFILL phase for request.",
                                 LATENCY_BUCKETS)  # fmt: skip
        self.decode_time = hist("request_decode_time_seconds",
                                "Histogram of time spent in DECODE phase for request.",
                                LATENCY_BUCKETS)  # fmt: skip
        for e in range(cfg.data_parallel):
            lv = self._lv(e)
            for c in (self.prompt, self.generation, self.cached):
                c.labels(*lv)
            for name in RESPONSE_TYPES:
                self.success.labels(*lv, f"ResponseType.{name}")
            for h in (self.req_prompt, self.req_gen, self.req_cached, self.ttft, self.tpot,
                      self.itl, self.e2e, self.queue_time, self.prefill_time,
                      self.decode_time):  # fmt: skip
                h.labels(*lv)
        self._view = WithoutCreated(reg)

    def _lv(self, engine: int) -> tuple[str, str]:
        return (self.cfg.model, str(engine))

    def on_step(self, engine: int, stats: StepStats) -> None:
        lv = self._lv(engine)
        if stats.step:
            self.prompt.labels(*lv).inc(stats.prompt_tokens)
            self.generation.labels(*lv).inc(stats.generation_tokens)
        for v in stats.ttfts:
            self.ttft.labels(*lv).observe(v)
        for v in stats.itls:
            self.itl.labels(*lv).observe(v)
            self.tpot.labels(*lv).observe(v)
        for req in stats.finished:
            reason = REASONS.get(req.finish_reason, "FINISH")
            self.success.labels(*lv, f"ResponseType.{reason}").inc()
            self.e2e.labels(*lv).observe(req.e2e)
            self.queue_time.labels(*lv).observe(req.queue_time)
            self.prefill_time.labels(*lv).observe(req.prefill_time)
            self.decode_time.labels(*lv).observe(req.decode_time)
            self.req_prompt.labels(*lv).observe(req.prompt_tokens)
            self.req_gen.labels(*lv).observe(req.generation_tokens)
            self.req_cached.labels(*lv).observe(req.cached_tokens)
            self.cached.labels(*lv).inc(req.cached_tokens)

    def on_rejection(self, reason: str) -> None:
        """Not simulated for LMDeploy (no documented queue-limit refusal)."""

    def on_http(self, record: HttpRecord) -> None:
        """Not simulated for LMDeploy."""

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        for s in states:
            lv = self._lv(s.engine)
            self.waiting.labels(*lv).set(s.waiting)
            self.running.labels(*lv).set(s.running)
            self.kv.labels(*lv).set(s.kv_usage)
        # Always the 0.0.4 text format: prometheus_client's OpenMetrics encoder rewrites
        # ":" in sample names but not in TYPE lines, which no parser accepts.
        encoder, content_type = generate_latest, CONTENT_TYPE_LATEST
        return Exposition(encoder(self._view), content_type)


def create(cfg: SimConfig) -> LmdeployWriter:
    return LmdeployWriter(cfg)
