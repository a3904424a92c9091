"""llama.cpp's ``llama-server --metrics`` text.

llama-server writes its families by hand (``# HELP``, ``# TYPE``, one sample),
all named ``llamacpp:<name>``, with no labels and numbers as a C++ stream
prints them (six significant digits). Counters count a slot's work when the
slot releases its request. Names and types: see
``agent/inferwatch/engines/llamacpp.py`` (ggml-org/llama.cpp
``tools/server/server-context.cpp``).

llama-server has one slot pool: with ``--data-parallel`` > 1 the simulated
engines add up into one set of series.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.stats import EngineSnapshot, HttpRecord, StepStats

FORMATS = ("server",)

CONTENT_TYPE = "text/plain; version=0.0.4"


def cpp_number(value: float) -> str:
    """``std::ostream << double`` with the default precision."""
    return f"{value:g}"


class LlamaCppWriter:
    metrics_path = "/metrics"
    supports_gzip = False

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.prompt_tokens = 0
        self.prompt_seconds = 0.0
        self.predicted_tokens = 0
        self.predicted_seconds = 0.0
        self.n_decode = 0
        self.n_busy_slots = 0
        self.n_tokens_max = 0

    def on_step(self, engine: int, stats: StepStats) -> None:
        if stats.step:
            self.n_decode += 1
            self.n_busy_slots += len(stats.itls) + len(stats.ttfts)
        for req in stats.finished:
            # tokens reused from the slot's cache are not evaluated, so not counted
            self.prompt_tokens += req.computed_prompt_tokens
            self.prompt_seconds += req.prefill_time
            self.predicted_tokens += req.generation_tokens
            self.predicted_seconds += req.decode_time
            self.n_tokens_max = max(self.n_tokens_max, req.prompt_tokens + req.generation_tokens)

    def on_rejection(self, reason: str) -> None:
        """llama-server queues every request; it never refuses one."""

    def on_http(self, record: HttpRecord) -> None:
        """llama-server has no per-HTTP-request metrics."""

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        def rate(n: float, seconds: float) -> float:
            return n / seconds if seconds > 0 else 0.0

        counters = (
            ("prompt_tokens_total", "Number of prompt tokens processed.", self.prompt_tokens),
            ("prompt_seconds_total", "Prompt process time", self.prompt_seconds),
            ("tokens_predicted_total", "Number of generation tokens processed.",
             self.predicted_tokens),
            ("tokens_predicted_seconds_total", "Predict process time", self.predicted_seconds),
            ("n_decode_total", "Total number of llama_decode() calls", self.n_decode),
            ("n_tokens_max", "Largest observed n_tokens.", self.n_tokens_max),
        )  # fmt: skip
        gauges = (
            ("prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
             rate(self.prompt_tokens, self.prompt_seconds)),
            ("predicted_tokens_seconds", "Average generation throughput in tokens/s.",
             rate(self.predicted_tokens, self.predicted_seconds)),
            ("requests_processing", "Number of requests processing.",
             sum(s.running for s in states)),
            ("requests_deferred", "Number of requests deferred.", sum(s.waiting for s in states)),
            ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             self.n_busy_slots / max(self.n_decode, 1)),
        )  # fmt: skip
        lines: list[str] = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, help_text, value in items:
                lines.append(f"# HELP llamacpp:{name} {help_text}")
                lines.append(f"# TYPE llamacpp:{name} {kind}")
                lines.append(f"llamacpp:{name} {cpp_number(value)}")
        body = "\n".join(lines) + "\n"
        return Exposition(body.encode(), CONTENT_TYPE)


def create(cfg: SimConfig) -> LlamaCppWriter:
    return LlamaCppWriter(cfg)
