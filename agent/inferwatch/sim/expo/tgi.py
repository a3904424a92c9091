"""Text Generation Inference's ``/metrics``, as its Rust exporter writes it.

TGI records with the ``metrics`` crate and renders with
``metrics-exporter-prometheus``: counters keep their bare names (no ``_total``),
there is no model label, a metric appears once it was first recorded, and
durations are histograms with 35 geometric buckets (0.0001 x 1.5^k seconds).
Names, labels and units: see ``agent/inferwatch/engines/tgi.py``
(huggingface/text-generation-inference ``router/src/server.rs``).

TGI has a single router queue: with ``--data-parallel`` > 1 the simulated
engines' queues and batches add up into its one gauge.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferwatch.engines.tgi import (  # the engine's own bounds, defined once
    DURATION_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.expo.triton import TextHistogram, family, number
from inferwatch.sim.stats import EngineSnapshot, HttpRecord, StepStats

FORMATS = ("v3",)

CONTENT_TYPE = "text/plain; charset=utf-8"
#: the router's description of each family (describe_* calls in server.rs), our wording
DURATIONS = {
    "tgi_request_duration": "Request duration",
    "tgi_request_queue_duration": "Request queue duration",
    "tgi_request_inference_duration": "Request inference duration",
    "tgi_request_mean_time_per_token_duration": "Mean time per token per request",
}


class TgiWriter:
    metrics_path = "/metrics"
    supports_gzip = False

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        per_token = [cfg.max_model_len / 100 * (i + 1) for i in range(100)]
        self.counters: dict[str, float] = {}
        self.failures: dict[str, float] = {}
        self.durations = {name: TextHistogram(DURATION_BUCKETS) for name in DURATIONS}
        self.input_length = TextHistogram(per_token)
        self.generated = TextHistogram(per_token)
        self._touched: set[str] = set()

    def _inc(self, name: str, by: float = 1.0) -> None:
        self.counters[name] = self.counters.get(name, 0.0) + by

    def _fail(self, err: str) -> None:
        self.failures[err] = self.failures.get(err, 0.0) + 1

    # -- records in ---------------------------------------------------------------
    def on_step(self, engine: int, stats: StepStats) -> None:
        for req in stats.finished:
            self._inc("tgi_request_count")
            # the router validates (and records the input length) before queueing
            self.input_length.observe(req.prompt_tokens)
            self._touched.add("tgi_request_input_length")
            if req.finish_reason == "error":
                self._fail("generation")
                continue
            if req.finish_reason == "abort":
                continue  # a client that went away: TGI counts nothing
            self._inc("tgi_request_success")
            self.durations["tgi_request_duration"].observe(req.e2e)
            self.durations["tgi_request_queue_duration"].observe(req.queue_time)
            self.durations["tgi_request_inference_duration"].observe(req.inference_time)
            if req.generation_tokens:
                self.durations["tgi_request_mean_time_per_token_duration"].observe(
                    req.inference_time / req.generation_tokens
                )
            self.generated.observe(req.generation_tokens)
            self._touched.update(DURATIONS)
            self._touched.add("tgi_request_generated_tokens")

    def on_rejection(self, reason: str) -> None:
        self._inc("tgi_request_count")
        self._fail("overloaded")

    def on_http(self, record: HttpRecord) -> None:
        """TGI has no per-HTTP-request metrics beyond the request counters."""

    # -- exposition out -------------------------------------------------------------
    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        lines: list[str] = []
        for name, value in self.counters.items():
            lines += family(name, "counter", name, [f"{name} {number(value)}"])
        if self.failures:
            lines += family(
                "tgi_request_failure", "counter", "tgi_request_failure",
                [f'tgi_request_failure{{err="{err}"}} {number(n)}'
                 for err, n in self.failures.items()],
            )  # fmt: skip
        gauges = {
            "tgi_queue_size": sum(s.waiting for s in states),
            "tgi_batch_current_size": sum(s.running for s in states),
            "tgi_batch_max_total_tokens": sum(s.num_gpu_blocks for s in states)
            * self.cfg.block_size,
        }
        for name, value in gauges.items():
            lines += family(name, "gauge", name, [f"{name} {number(value)}"])
        for name, hist in self.durations.items():
            if name in self._touched:
                lines += family(name, "histogram", DURATIONS[name], hist.lines(name, (), "{!r}"))
        for name, hist in (
            ("tgi_request_input_length", self.input_length),
            ("tgi_request_generated_tokens", self.generated),
        ):
            if name in self._touched:
                lines += family(name, "histogram", name, hist.lines(name, (), "{!r}"))
        body = "\n".join(lines) + "\n"
        return Exposition(body.encode(), CONTENT_TYPE)


def create(cfg: SimConfig) -> TgiWriter:
    return TgiWriter(cfg)
