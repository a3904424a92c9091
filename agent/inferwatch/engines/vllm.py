"""vLLM's /metrics onto the contract.

Facts from ``shared/reference/vllm-metrics.md`` (vLLM 0.33.0's
``vllm/v1/metrics/loggers.py`` and the rename history it lists): every series
carries ``model_name`` and, since V1, ``engine`` (the data-parallel rank);
ratios average over ranks, counts sum; in multiprocess mode a gauge may repeat
per API-server ``pid`` (max is right: idle processes report 0).
"""

from __future__ import annotations

from inferwatch.engines.base import (
    EngineMap,
    InfoFamily,
    LoraFamily,
    counter,
    gauge,
    histogram,
    prefix_cache_hit_ratio,
)

VLLM = EngineMap(
    name="vllm",
    prefixes=("vllm:",),
    signals=(
        gauge("inferwatch_queue_depth", "vllm:num_requests_waiting"),
        gauge("inferwatch_requests_running", "vllm:num_requests_running"),
        gauge(
            "inferwatch_kv_cache_usage_ratio",
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
        ),
        counter("inferwatch_preemptions", "vllm:num_preemptions"),
        counter("inferwatch_prompt_tokens", "vllm:prompt_tokens"),
        counter("inferwatch_generation_tokens", "vllm:generation_tokens"),
        counter(
            "inferwatch_requests_finished",
            "vllm:request_success",
            labels={"finished_reason": "reason"},
        ),
        counter("inferwatch_requests_rejected", "vllm:admission_rejections"),
        counter(
            "inferwatch_prefix_cache_queries",
            "vllm:prefix_cache_queries",
            "vllm:gpu_prefix_cache_queries",
            export=False,
        ),
        counter(
            "inferwatch_prefix_cache_hits",
            "vllm:prefix_cache_hits",
            "vllm:gpu_prefix_cache_hits",
            export=False,
        ),
        histogram("inferwatch_ttft_seconds", "vllm:time_to_first_token_seconds"),
        histogram(
            "inferwatch_tpot_seconds",
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
        ),
        histogram("inferwatch_e2e_latency_seconds", "vllm:e2e_request_latency_seconds"),
        histogram("inferwatch_queue_time_seconds", "vllm:request_queue_time_seconds"),
        # issue 23 item 3: what vLLM's own dashboard shows (one observation per finished
        # request; token histograms on 1-2-5 buckets up to max_model_len)
        histogram("inferwatch_prefill_time_seconds", "vllm:request_prefill_time_seconds"),
        histogram("inferwatch_decode_time_seconds", "vllm:request_decode_time_seconds"),
        histogram("inferwatch_prompt_length_tokens", "vllm:request_prompt_tokens"),
        histogram("inferwatch_generation_length_tokens", "vllm:request_generation_tokens"),
    ),
    ratios=(prefix_cache_hit_ratio("inferwatch_prefix_cache_queries"),),
    # CacheConfig as labels: the effective settings, also when the command line
    # left them at vLLM's defaults (which differ across versions)
    info=InfoFamily(
        "vllm:cache_config_info",
        {
            "enable_prefix_caching": "prefix_caching",
            "gpu_memory_utilization": "gpu_memory_utilization",
            # "auto" (the model's dtype), "fp8", "fp8_e4m3", ...: advise says nothing
            # about an FP8 KV cache to a worker that has one
            "cache_dtype": "kv_cache_dtype",
        },
    ),
    lora=LoraFamily(
        "vllm:lora_requests_info",
        running_label="running_lora_adapters",
        waiting_label="waiting_lora_adapters",
        max_label="max_lora",
    ),
)

# Histogram bucket bounds of the engine's own /metrics (the simulator writes them,
# the SLO objectives are checked against them).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKEN_BUCKETS = tuple(2**i for i in range(3, 15))  # 8 .. 16384, after a leading 1
N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
#: FastAPI instrumentator defaults, as vLLM uses them
HTTP_HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5,
    10, 30, 60,
)  # fmt: skip
HTTP_LOWR_BUCKETS = (0.1, 0.5, 1)
