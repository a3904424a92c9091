"""llama.cpp's ``llama-server --metrics`` text.

llama-server writes its families by hand (``# HELP``, ``# TYPE``, one sample),
all named ``llamacpp:<name>``, counters first, with no labels and numbers as a
C++ stream prints them (six significant digits). Names, help texts, order and
counting moments follow the server that llama-cpp-python 0.3.36 vendors
(``tools/server/server-task.cpp`` ``to_metrics``, ``server-context.cpp``) and
are held to a capture of that server running
(``tests/data/llamacpp/metrics-*.txt``, ``tests/unit/test_llamacpp_capture.py``):

- prompt tokens are counted when the prompt is decoded (evaluated ones) or
  loaded from the slot's cache (cached ones), i.e. at prefill, not at finish;
- generated tokens and their seconds are counted when the slot releases its
  request;
- the two throughput gauges cover the time since the previous scrape (the
  server resets their buckets on every ``/metrics`` call);
- the speculative-decoding counters are 0 (no draft model), and the per-position
  family is absent, as on a server without ``--model-draft``.

Prompt seconds are added at finish: the simulator's step records do not carry
per-step prefill time. llama-server has one slot pool: with ``--data-parallel``
> 1 the simulated engines add up into one set of series.
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


#: (name, help) of the counters, in the server's order
COUNTERS = (
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding "
     "and multimodal decoding"),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total",
     "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
)  # fmt: skip
#: (name, help) of the gauges, in the server's order
GAUGES = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)


class _Bucket:
    """Tokens, decode steps and seconds, as the server's metric buckets keep them."""

    def __init__(self) -> None:
        self.count = 0
        self.steps = 0
        self.seconds = 0.0

    def add(self, count: int, steps: int, seconds: float) -> None:
        self.count += count
        self.steps += steps
        self.seconds += seconds

    def per_second(self) -> float:
        # the server's rate divides decode steps, not tokens, by the time
        return self.steps / self.seconds if self.seconds > 0 else 0.0


class LlamaCppWriter:
    metrics_path = "/metrics"
    supports_gzip = False

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.prompt = _Bucket()
        self.predict = _Bucket()
        # since the last scrape: the throughput gauges
        self.prompt_window = _Bucket()
        self.predict_window = _Bucket()
        self.prompt_cached = 0
        self.n_decode = 0
        self.n_busy_slots = 0
        self.n_tokens_max = 0

    def on_step(self, engine: int, stats: StepStats) -> None:
        if stats.step:
            self.n_decode += 1
            self.n_busy_slots += len(stats.itls) + len(stats.ttfts)
        # prefill: the evaluated part of the prompts and the part reused from the cache
        evaluated = stats.prompt_tokens - stats.cached_prompt_tokens
        for bucket in (self.prompt, self.prompt_window):
            bucket.add(evaluated, evaluated, 0.0)
        self.prompt_cached += stats.cached_prompt_tokens
        for req in stats.finished:
            # a slot's generated tokens and their time are flushed when it releases
            for bucket in (self.predict, self.predict_window):
                bucket.add(req.generation_tokens, req.generation_tokens, req.decode_time)
            for bucket in (self.prompt, self.prompt_window):
                bucket.add(0, 0, req.prefill_time)
            self.n_tokens_max = max(self.n_tokens_max, req.prompt_tokens + req.generation_tokens)

    def on_rejection(self, reason: str) -> None:
        """llama-server queues every request; it never refuses one."""

    def on_http(self, record: HttpRecord) -> None:
        """llama-server has no per-HTTP-request metrics."""

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        counters = (
            self.prompt.count,
            self.prompt_cached,
            self.prompt.seconds,
            self.predict.count,
            self.predict.seconds,
            self.n_decode,
            self.n_tokens_max,
            0,
            0,
            0,
        )
        gauges = (
            self.prompt_window.per_second(),
            self.predict_window.per_second(),
            sum(s.running for s in states),
            sum(s.waiting for s in states),
            self.n_busy_slots / max(self.n_decode, 1),
        )
        # every scrape starts a new window for the throughput gauges
        self.prompt_window = _Bucket()
        self.predict_window = _Bucket()
        lines: list[str] = []
        for kind, items, values in (
            ("counter", COUNTERS, counters),
            ("gauge", GAUGES, gauges),
        ):
            for (name, help_text), value in zip(items, values, strict=True):
                lines.append(f"# HELP llamacpp:{name} {help_text}")
                lines.append(f"# TYPE llamacpp:{name} {kind}")
                lines.append(f"llamacpp:{name} {cpp_number(value)}")
        body = "\n".join(lines) + "\n"
        return Exposition(body.encode(), CONTENT_TYPE)


def create(cfg: SimConfig) -> LlamaCppWriter:
    return LlamaCppWriter(cfg)
