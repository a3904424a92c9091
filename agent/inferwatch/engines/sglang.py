"""SGLang's /metrics (``--enable-metrics``) onto the contract.

Verified in sgl-project/sglang ``python/sglang/srt/metrics/collector.py`` @
00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538 (SchedulerMetricsCollector,
TokenizerMetricsCollector; written with prometheus_client, so counters end in
``_total`` and carry ``_created``) and the scheduler's label set in
``python/sglang/srt/managers/scheduler.py`` of the same era:

- scheduler gauges and counters carry ``model_name, engine_type, tp_rank,
  pp_rank, moe_ep_rank`` (+ ``dp_rank`` with data parallelism, + ``priority``
  with priority scheduling, + user ``extra_metric_labels``). Only attention-TP
  rank 0 reports unless ``--enable-metrics-for-all-schedulers``; then every
  tensor-parallel rank reports its own copy of the same gauge. Those copies are
  duplicates (max), never added; data-parallel ranks are real and add up
  (ratios average).
- tokenizer-side series (tokens, TTFT, ITL, E2E, request counts) carry
  ``model_name`` (+ ``engine_type`` in newer releases).
- gauges: ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  ``sglang:token_usage`` (KV pool share in use, 0..1).
- counters: ``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``,
  ``sglang:cached_tokens_total`` (cached prompt tokens; its series appears on the
  first hit), ``sglang:num_requests_total`` (finished requests, no reason label),
  ``sglang:num_retracted_requests_total`` (requests retracted back to the queue
  for lack of KV space: SGLang's preemption).
- histograms (seconds): ``sglang:time_to_first_token_seconds`` (0.1 .. 400),
  ``sglang:inter_token_latency_seconds`` (0.002 .. 8), older releases
  ``sglang:time_per_output_token_seconds`` (docs/references/production_metrics.md
  of older revisions), ``sglang:e2e_request_latency_seconds`` (0.1 .. 2400),
  ``sglang:queue_time_seconds`` (scheduler side, 0 .. 3000).

- with ``--collect-tokens-histogram`` (folded into ``--enable-metrics`` by later
  releases), per finished request on the tokenizer side:
  ``sglang:prompt_tokens_histogram`` and ``sglang:generation_tokens_histogram``,
  both on the same default token buckets 100, 300, 500, 700, 1000, 1500, 2000,
  3000 .. 40000, 66000 .. 1100000 (``--prompt-tokens-buckets`` and
  ``--generation-tokens-buckets`` change them): issue 23's length distributions.

Not available: per-request prefill and decode time (``sglang:per_stage_req_latency_seconds``
is per scheduler stage, not a request's prefill/decode split), per-adapter LoRA
series: with ``--enable-lora`` the scheduler counts pool slots only
(``sglang:lora_pool_slots_used``, ``sglang:lora_pool_slots_total``, the latter
``max_loras_per_batch``: mapped to ``inferwatch_lora_max_adapters``; no adapter
names, so no ``inferwatch_lora_adapter_active``), admission rejections (no counter), finish reasons (the request
counter has no reason label: series carry ``reason="unknown"``). Very old
releases labelled series ``name=`` instead of ``model_name=``; their model label
is empty here.
"""

from __future__ import annotations

from inferwatch.engines.base import EngineMap, Ratio, Signal

#: copies of one series reported by every tensor/pipeline/expert-parallel rank
_RANK_COPIES = ("pid", "tp_rank", "pp_rank", "moe_ep_rank")

SGLANG = EngineMap(
    name="sglang",
    prefixes=("sglang:",),
    signals=(
        Signal(
            "inferwatch_queue_depth", "gauge", ("sglang:num_queue_reqs",), duplicates=_RANK_COPIES
        ),
        Signal(
            "inferwatch_requests_running",
            "gauge",
            ("sglang:num_running_reqs",),
            duplicates=_RANK_COPIES,
        ),
        Signal(
            "inferwatch_kv_cache_usage_ratio",
            "gauge",
            ("sglang:token_usage",),
            combine="avg",
            duplicates=_RANK_COPIES,
        ),
        Signal(
            "inferwatch_preemptions",
            "counter",
            ("sglang:num_retracted_requests",),
            duplicates=_RANK_COPIES,
        ),
        Signal("inferwatch_prompt_tokens", "counter", ("sglang:prompt_tokens",)),
        Signal("inferwatch_generation_tokens", "counter", ("sglang:generation_tokens",)),
        Signal(
            "inferwatch_requests_finished",
            "counter",
            ("sglang:num_requests",),
            const={"reason": "unknown"},
        ),
        Signal("inferwatch_prefix_cache_hits", "counter", ("sglang:cached_tokens",), export=False),
        Signal("inferwatch_ttft_seconds", "histogram", ("sglang:time_to_first_token_seconds",)),
        Signal(
            "inferwatch_tpot_seconds",
            "histogram",
            ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        ),
        Signal(
            "inferwatch_e2e_latency_seconds", "histogram", ("sglang:e2e_request_latency_seconds",)
        ),
        Signal(
            "inferwatch_queue_time_seconds",
            "histogram",
            ("sglang:queue_time_seconds",),
            duplicates=_RANK_COPIES,
        ),
        # SchedulerMetricsCollector with --enable-lora: the adapters one batch can hold
        Signal(
            "inferwatch_lora_max_adapters",
            "gauge",
            ("sglang:lora_pool_slots_total",),
            combine="max",
            duplicates=_RANK_COPIES,
        ),
        # issue 23 item 3 (TokenizerMetricsCollector, --collect-tokens-histogram)
        Signal("inferwatch_prompt_length_tokens", "histogram", ("sglang:prompt_tokens_histogram",)),
        Signal(
            "inferwatch_generation_length_tokens",
            "histogram",
            ("sglang:generation_tokens_histogram",),
        ),
    ),
    ratios=(
        # cached prompt tokens / prompt tokens, both counted per finished request
        Ratio(
            "inferwatch_prefix_cache_hit_ratio",
            "inferwatch_prefix_cache_hits",
            "inferwatch_prompt_tokens",
            zero_numerator=True,
        ),
    ),
)
