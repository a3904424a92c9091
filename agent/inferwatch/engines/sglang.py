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

from inferwatch.engines import base as b

#: copies of one series reported by every tensor/pipeline/expert-parallel rank
_RANK_COPIES = ("pid", "tp_rank", "pp_rank", "moe_ep_rank")

# Histogram bucket bounds of the engine's own /metrics (the simulator writes them,
# the SLO objectives are checked against them).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800,
    2400,
)  # fmt: skip
QUEUE_BUCKETS = (
    0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
    400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)  # fmt: skip
#: the tokenizer's default prompt and generation token buckets (--collect-tokens-histogram;
#: collector.py @ 00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538: one list for both)
TOKEN_BUCKETS = (
    100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
    12000, 15000, 20000, 22000, 25000, 30000, 35000, 40000, 66000, 99000, 132000, 300000,
    600000, 900000, 1100000,
)  # fmt: skip


# SGLang. Option names: sgl-project/sglang python/sglang/srt/server_args.py
# @ 001067fffe33427bee0ed2f007fb7551a1d76b44 (flags derived from the ServerArgs field
# names plus their aliases; --context-length and --max-total-tokens use
# human_readable_int); `sglang serve`: python/sglang/cli/main.py
# @ 16c8ff4f96e743ce5a1dbf3f640caadd6ae32e07. Radix (prefix) caching is on unless
# --disable-radix-cache, but that default is not assumed here.
FLAGS = b.EngineFlags(
    (
        b.Flag(("--model-path", "--model"), "model"),
        b.Flag(("--served-model-name",), "served_model_name"),
        b.Flag(("--port",), "port", "int"),
        b.Flag(("--host",), "host"),
        b.Flag(("--max-running-requests",), "max_num_seqs", "int"),
        b.Flag(("--context-length",), "max_model_len", "hint"),
        b.Flag(("--mem-fraction-static",), "gpu_memory_utilization", "float"),
        b.Flag(("--disable-radix-cache",), "prefix_caching", "false"),
        b.Flag(("--tp-size", "--tensor-parallel-size"), "tensor_parallel_size", "int"),
        b.Flag(("--dp-size", "--data-parallel-size"), "data_parallel_size", "int"),
        b.Flag(("--pp-size", "--pipeline-parallel-size"), "pipeline_parallel_size", "int"),
        b.Flag(("--chunked-prefill-size",), "chunked_prefill_size", "int"),
        b.Flag(("--max-prefill-tokens",), "max_prefill_tokens", "hint"),
        b.Flag(("--max-total-tokens",), "max_total_tokens", "hint"),
        b.Flag(("--max-queued-requests",), "max_queued_requests", "int"),
        b.Flag(("--enable-metrics",), "enable_metrics", "true"),
        b.Flag(("--config",), "config_file"),
    ),
    launchers=(
        b.Launcher("sglang-launch-server", modules=("sglang.launch_server",)),
        b.Launcher("sglang", ("serve",), modules=("sglang.cli.main",)),
    ),
)


SGLANG = b.EngineMap(
    name="sglang",
    prefixes=("sglang:",),
    signals=(
        b.gauge("inferwatch_queue_depth", "sglang:num_queue_reqs", duplicates=_RANK_COPIES),
        b.gauge("inferwatch_requests_running", "sglang:num_running_reqs", duplicates=_RANK_COPIES),
        b.gauge("inferwatch_kv_cache_usage_ratio", "sglang:token_usage", duplicates=_RANK_COPIES),
        b.counter(
            "inferwatch_preemptions", "sglang:num_retracted_requests", duplicates=_RANK_COPIES
        ),
        b.counter("inferwatch_prompt_tokens", "sglang:prompt_tokens"),
        b.counter("inferwatch_generation_tokens", "sglang:generation_tokens"),
        b.counter(
            "inferwatch_requests_finished", "sglang:num_requests", const={"reason": "unknown"}
        ),
        b.counter("inferwatch_prefix_cache_hits", "sglang:cached_tokens", export=False),
        b.histogram("inferwatch_ttft_seconds", "sglang:time_to_first_token_seconds"),
        b.histogram(
            "inferwatch_tpot_seconds",
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ),
        b.histogram("inferwatch_e2e_latency_seconds", "sglang:e2e_request_latency_seconds"),
        b.histogram(
            "inferwatch_queue_time_seconds", "sglang:queue_time_seconds", duplicates=_RANK_COPIES
        ),
        # SchedulerMetricsCollector with --enable-lora: the adapters one batch can hold
        b.gauge(
            "inferwatch_lora_max_adapters", "sglang:lora_pool_slots_total", duplicates=_RANK_COPIES
        ),
        # issue 23 item 3 (TokenizerMetricsCollector, --collect-tokens-histogram)
        b.histogram("inferwatch_prompt_length_tokens", "sglang:prompt_tokens_histogram"),
        b.histogram("inferwatch_generation_length_tokens", "sglang:generation_tokens_histogram"),
    ),
    ratios=(
        # cached prompt tokens / prompt tokens, both counted per finished request
        b.prefix_cache_hit_ratio("inferwatch_prompt_tokens", zero_numerator=True),
    ),
    position=2,
    flags=FLAGS,
    # `sglang.launch_server`, port 30000 (SGLang's documentation)
    pods=b.PodFacts(
        ("lmsysorg/sglang", "/sglang:"), ("sglang.launch_server", "sglang serve"), 30000
    ),
    # python/sglang/srt/entrypoints/http_server.py @ 0025436eab0556737d615b36a4dd3e1e26e82f3d
    # (get_server_info: the server arguments, the scheduler's info and version)
    self_description=b.SelfDescribed(
        "/get_server_info",
        version=("version",),
        model=("served_model_name", "model_path"),
        max_num_seqs=("max_running_requests",),
    ),
    ttft_buckets=tuple(map(float, TTFT_BUCKETS)),
    tpot_buckets=ITL_BUCKETS,
    own_histograms=True,
)

#: the registry's entry (inferwatch.engines finds every module's ENGINE)
ENGINE = SGLANG
