"""llama.cpp's ``llama-server --metrics`` onto the contract.

Verified in ggml-org/llama.cpp ``tools/server/server-context.cpp`` @
001d906a6d86e2490e394361e7cc6f478b100088 (``get_metrics``: only with
``--metrics``, else an error response, ``text/plain; version=0.0.4``), the
older ``emit`` list of the same handler, and the server README's metrics table
as merged in PR #22879 (2026-05) and PR #26389 (2026-08). Every family is
written by hand as ``llamacpp:<name>`` with no labels at all:

- gauges ``llamacpp:requests_processing`` (busy slots: running) and
  ``llamacpp:requests_deferred`` (tasks waiting for a slot: queue depth);
- counters ``llamacpp:prompt_tokens_total`` (prompt tokens evaluated: tokens
  reused from the slot's cache are not counted), ``llamacpp:tokens_predicted_total``,
  ``llamacpp:tokens_predicted_seconds_total`` (seconds spent generating, the
  server's microsecond timer divided down to seconds).

TPOT is *derived*: llama.cpp has no latency histogram, so the agent exports
``inferwatch_tpot_mean_seconds`` = increase(tokens_predicted_seconds_total) /
increase(tokens_predicted_total) over the stats window: a window mean of
generation time per token, not a percentile. ``llamacpp:n_tokens_max`` and
``llamacpp:n_busy_slots_per_decode`` are typed counter/gauge but are not
monotonic counts and are not used.

Not available: TTFT, end-to-end latency, KV-cache usage (the kv_cache_* gauges
were removed in PR #13660), prefix-cache hits (a ``prompt_tokens_cached_total``
counter exists only in downstream forks we could read, unverified upstream),
preemptions, finished/rejected request counts, a model label.
"""

from __future__ import annotations

from inferwatch.engines.base import EngineMap, Ratio, Signal

LLAMACPP = EngineMap(
    name="llamacpp",
    prefixes=("llamacpp:",),
    model_label=None,
    signals=(
        Signal("inferwatch_queue_depth", "gauge", ("llamacpp:requests_deferred",)),
        Signal("inferwatch_requests_running", "gauge", ("llamacpp:requests_processing",)),
        Signal("inferwatch_prompt_tokens", "counter", ("llamacpp:prompt_tokens",)),
        Signal("inferwatch_generation_tokens", "counter", ("llamacpp:tokens_predicted",)),
        Signal(
            "inferwatch_generation_seconds",
            "counter",
            ("llamacpp:tokens_predicted_seconds",),
            export=False,
        ),
    ),
    ratios=(
        Ratio(
            "inferwatch_tpot_mean_seconds",
            "inferwatch_generation_seconds",
            "inferwatch_generation_tokens",
            cap=None,
        ),
    ),
)
