"""Triton Inference Server with the TensorRT-LLM backend: its metrics port's text.

Triton writes with prometheus-cpp, so this writer renders text by hand: counters
keep their bare names (``nv_inference_request_success`` with ``# TYPE ...
counter``, no ``_total``), every series has ``model`` and ``version``, the core's
per-instance series add ``gpu_uuid`` (one simulated instance per engine, on its
own GPU). Names, labels and buckets: see ``agent/inferwatch/engines/triton.py``
(triton-inference-server/core ``src/metrics.cc``, NVIDIA/TensorRT-LLM
``custom_metrics_reporter.cc``).

Formats:

``histograms``
    ``--metrics-config histogram_latencies=true``: adds
    ``nv_inference_first_response_histogram_ms`` (milliseconds; buckets 100, 500,
    2000, 5000).
``default``
    Triton's default: latency only as cumulative microsecond counters.

The simulated worker serves this on its own port at ``/metrics`` (a real Triton
serves it on port 8002, next to the API on 8000).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from inferwatch.engines.triton import (  # the engine's own bounds, defined once
    FIRST_RESPONSE_MS_BUCKETS,
    TOKEN_LEN_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.stats import EngineSnapshot, HttpRecord, StepStats

FORMATS = ("histograms", "default")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Triton's failure reasons (FailureReason in src/infer_stats.h)
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")

#: (name, HELP) of the core's cumulative counters, in Triton's order
CORE_COUNTERS = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes"),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)"),
    ("nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)"),
    ("nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds"),
)  # fmt: skip

Labels = tuple[tuple[str, str], ...]


def number(value: float) -> str:
    """A sample value as Prometheus text writes it."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def label_text(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return "{" + inner + "}"


@dataclass
class TextHistogram:
    """Cumulative bucket counts and a sum, rendered as ``_bucket``/``_sum``/``_count``."""

    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: Labels, le: str = "{:g}") -> list[str]:
        out = []
        for bound, count in zip(self.bounds, self.counts, strict=True):
            lab = label_text((*labels, ("le", le.format(bound))))
            out.append(f"{name}_bucket{lab} {count}")
        out.append(f"{name}_bucket{label_text((*labels, ('le', '+Inf')))} {self.n}")
        out.append(f"{name}_sum{label_text(labels)} {number(self.total)}")
        out.append(f"{name}_count{label_text(labels)} {self.n}")
        return out


def _failure(instance: Labels, reason: str) -> Labels:
    return (*instance, ("reason", reason))


def family(name: str, kind: str, help_text: str, lines: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines]


def scalar_lines(name: str, series: Mapping[Labels, float]) -> list[str]:
    return [f"{name}{label_text(lab)} {number(v)}" for lab, v in series.items()]


def scalar_family(
    name: str, kind: str, help_text: str, series: Mapping[Labels, float]
) -> list[str]:
    """A counter or gauge family with one sample per series."""
    return family(name, kind, help_text, scalar_lines(name, series))


class TritonWriter:
    metrics_path = "/metrics"
    supports_gzip = False

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.histograms = cfg.format == "histograms"
        self.model: Labels = (("model", cfg.model), ("version", "1"))
        self.success: dict[Labels, float] = {}
        self.failure: dict[Labels, float] = {}
        self.duration_us: dict[Labels, float] = {}
        self.queue_us: dict[Labels, float] = {}
        self.infer_us: dict[Labels, float] = {}
        self.first_response: dict[Labels, TextHistogram] = {}
        for e in range(cfg.data_parallel):
            inst = self._instance(e)
            self.success[inst] = 0.0
            self.duration_us[inst] = 0.0
            self.queue_us[inst] = 0.0
            self.infer_us[inst] = 0.0
            for reason in FAILURE_REASONS:
                self.failure[_failure(inst, reason)] = 0.0
            self.first_response[inst] = TextHistogram(FIRST_RESPONSE_MS_BUCKETS)
        self.input_len = TextHistogram(TOKEN_LEN_BUCKETS)
        self.output_len = TextHistogram(TOKEN_LEN_BUCKETS)

    def _instance(self, engine: int) -> Labels:
        return (*self.model, ("gpu_uuid", f"GPU-5151-{engine:04d}"))

    # -- records in ---------------------------------------------------------------
    def on_step(self, engine: int, stats: StepStats) -> None:
        inst = self._instance(engine)
        for ttft in stats.ttfts:
            self.first_response[inst].observe(ttft * 1000.0)
        for req in stats.finished:
            if req.finish_reason == "abort":
                self.failure[_failure(inst, "CANCELED")] += 1
                continue
            if req.finish_reason == "error":
                self.failure[_failure(inst, "BACKEND")] += 1
                continue
            self.success[inst] += 1
            # Triton counts whole microseconds per request
            self.duration_us[inst] += int(req.e2e * 1e6)
            self.queue_us[inst] += int(req.queue_time * 1e6)
            self.infer_us[inst] += int(req.inference_time * 1e6)
            self.input_len.observe(req.prompt_tokens)
            self.output_len.observe(req.generation_tokens)

    def on_rejection(self, reason: str) -> None:
        self.failure[_failure(self._instance(0), "REJECTED")] += 1

    def on_http(self, record: HttpRecord) -> None:
        """Triton has no per-HTTP-request metrics."""

    # -- exposition out -------------------------------------------------------------
    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        counters = (self.success, self.failure, self.success, self.duration_us, self.queue_us,
                    self.infer_us)  # fmt: skip
        lines: list[str] = []
        for (name, help_text), series in zip(CORE_COUNTERS, counters, strict=True):
            lines += scalar_family(name, "counter", help_text, series)
        # requests wait inside the TensorRT-LLM executor, not in Triton's scheduler
        pending = {self._instance(s.engine): 0.0 for s in states}
        lines += scalar_family(
            "nv_inference_pending_request_count", "gauge",
            "Instantaneous number of pending requests awaiting execution per-model.", pending,
        )  # fmt: skip
        if self.histograms:
            hist_lines: list[str] = []
            for inst, hist in self.first_response.items():
                hist_lines += hist.lines("nv_inference_first_response_histogram_ms", inst)
            lines += family(
                "nv_inference_first_response_histogram_ms", "histogram",
                "Duration from request to first response in milliseconds", hist_lines,
            )  # fmt: skip
        lines += self._trt_llm(states)
        body = "\n".join(lines) + "\n"
        return Exposition(body.encode(), CONTENT_TYPE)

    def _trt_llm(self, states: Sequence[EngineSnapshot]) -> list[str]:
        """The backend reports once per model: the executor behind all instances."""
        waiting = sum(s.waiting for s in states)
        running = sum(s.running for s in states)
        capacity = sum(s.max_num_seqs for s in states)
        used = sum(s.blocks_in_use for s in states)
        total = sum(s.num_gpu_blocks for s in states)
        requests = {
            "active": running, "max": capacity, "scheduled": running,
            "context": 0, "waiting": waiting,
        }  # fmt: skip
        blocks = {
            "max": total, "free": total - used, "used": used, "tokens_per": self.cfg.block_size,
            "reused": 0, "fraction": used / total if total else 0.0,
        }  # fmt: skip
        lines = scalar_family(
            "nv_trt_llm_request_metrics", "gauge", "TRT LLM request metrics",
            {(*self.model, ("request_type", k)): float(v) for k, v in requests.items()},
        )  # fmt: skip
        lines += scalar_family(
            "nv_trt_llm_kv_cache_block_metrics", "gauge", "TRT LLM KV cache block metrics",
            {(*self.model, ("kv_cache_block_type", k)): float(v) for k, v in blocks.items()},
        )  # fmt: skip
        for name, hist, response_type in (
            ("nv_llm_input_token_len", self.input_len, "total_input_tokens"),
            ("nv_llm_output_token_len", self.output_len, "total_output_tokens"),
        ):
            labels = (*self.model, ("response_metric_type", response_type))
            lines += family(name, "histogram", "TRT LLM response metrics", hist.lines(name, labels))
        return lines


def create(cfg: SimConfig) -> TritonWriter:
    return TritonWriter(cfg)
