"""vLLM's /metrics onto the contract.

Facts from ``shared/reference/vllm-metrics.md`` (vLLM 0.33.0's
``vllm/v1/metrics/loggers.py`` and the rename history it lists): every series
carries ``model_name`` and, since V1, ``engine`` (the data-parallel rank);
ratios average over ranks, counts sum; in multiprocess mode a gauge may repeat
per API-server ``pid`` (max is right: idle processes report 0).
"""

from __future__ import annotations

from inferwatch.engines.base import EngineMap, InfoFamily, LoraFamily, Ratio, Signal

VLLM = EngineMap(
    name="vllm",
    prefixes=("vllm:",),
    signals=(
        Signal("inferwatch_queue_depth", "gauge", ("vllm:num_requests_waiting",)),
        Signal("inferwatch_requests_running", "gauge", ("vllm:num_requests_running",)),
        Signal(
            "inferwatch_kv_cache_usage_ratio",
            "gauge",
            ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            combine="avg",
        ),
        Signal("inferwatch_preemptions", "counter", ("vllm:num_preemptions",)),
        Signal("inferwatch_prompt_tokens", "counter", ("vllm:prompt_tokens",)),
        Signal("inferwatch_generation_tokens", "counter", ("vllm:generation_tokens",)),
        Signal(
            "inferwatch_requests_finished",
            "counter",
            ("vllm:request_success",),
            labels={"finished_reason": "reason"},
        ),
        Signal("inferwatch_requests_rejected", "counter", ("vllm:admission_rejections",)),
        Signal(
            "inferwatch_prefix_cache_queries",
            "counter",
            ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
            export=False,
        ),
        Signal(
            "inferwatch_prefix_cache_hits",
            "counter",
            ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
            export=False,
        ),
        Signal("inferwatch_ttft_seconds", "histogram", ("vllm:time_to_first_token_seconds",)),
        Signal(
            "inferwatch_tpot_seconds",
            "histogram",
            ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        ),
        Signal(
            "inferwatch_e2e_latency_seconds", "histogram", ("vllm:e2e_request_latency_seconds",)
        ),
        Signal("inferwatch_queue_time_seconds", "histogram", ("vllm:request_queue_time_seconds",)),
        # issue 23 item 3: what vLLM's own dashboard shows (one observation per finished
        # request; token histograms on 1-2-5 buckets up to max_model_len)
        Signal(
            "inferwatch_prefill_time_seconds", "histogram", ("vllm:request_prefill_time_seconds",)
        ),
        Signal(
            "inferwatch_decode_time_seconds", "histogram", ("vllm:request_decode_time_seconds",)
        ),
        Signal("inferwatch_prompt_length_tokens", "histogram", ("vllm:request_prompt_tokens",)),
        Signal(
            "inferwatch_generation_length_tokens",
            "histogram",
            ("vllm:request_generation_tokens",),
        ),
    ),
    ratios=(
        Ratio(
            "inferwatch_prefix_cache_hit_ratio",
            "inferwatch_prefix_cache_hits",
            "inferwatch_prefix_cache_queries",
        ),
    ),
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
