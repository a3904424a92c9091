"""vLLM's /metrics onto the contract.

Facts from ``shared/reference/vllm-metrics.md`` (vLLM 0.33.0's
``vllm/v1/metrics/loggers.py`` and the rename history it lists): every series
carries ``model_name`` and, since V1, ``engine`` (the data-parallel rank);
ratios average over ranks, counts sum; in multiprocess mode a gauge may repeat
per API-server ``pid`` (max is right: idle processes report 0).
"""

from __future__ import annotations

from inferwatch.engines.base import (
    EngineFlags,
    EngineMap,
    Flag,
    InfoFamily,
    Launcher,
    LoraFamily,
    PodFacts,
    SelfDescribed,
    counter,
    gauge,
    histogram,
    prefix_cache_hit_ratio,
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


# vLLM. Option names: vllm-project/vllm vllm/engine/arg_utils.py
# @ 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b (EngineArgs.add_cli_args: -tp, -dp, -pp,
# BooleanOptionalAction for --enable-prefix-caching, served_model_name as a list, so
# nargs="+", max_model_len / max_num_batched_tokens parsed by human_readable_int); the
# same names at 001999d2f360c2c5da23a916510c273b1a73d06c (older, store_true switches);
# --host / --port: vllm/entrypoints/openai/cli_args.py
# @ 005223338608bc94fd165a4f976c102a57bd1fc4; `_` == `-` in option names and the
# k/K suffixes: vllm/utils/argparse_utils.py @ 00da11e37d1ffac917c3427fff227500302eb452;
# the positional model of `vllm serve`: vllm/entrypoints/cli/serve.py
# @ 00a5fdd20935ba7679750db22997dcf539ca4591 (model_tag).
FLAGS = EngineFlags(
    (
        Flag(("--model",), "model"),
        Flag(("--served-model-name",), "served_model_name", "names"),
        Flag(("--port",), "port", "int"),
        Flag(("--host",), "host"),
        Flag(("--max-num-seqs",), "max_num_seqs", "int"),
        Flag(("--max-model-len",), "max_model_len", "hint"),
        Flag(("--max-num-batched-tokens",), "max_num_batched_tokens", "hint"),
        Flag(("--gpu-memory-utilization",), "gpu_memory_utilization", "float"),
        Flag(("--enable-prefix-caching",), "prefix_caching", "true"),
        Flag(("--no-enable-prefix-caching",), "prefix_caching", "false"),
        Flag(("--tensor-parallel-size", "-tp"), "tensor_parallel_size", "int"),
        Flag(("--data-parallel-size", "-dp"), "data_parallel_size", "int"),
        Flag(("--pipeline-parallel-size", "-pp"), "pipeline_parallel_size", "int"),
        Flag(("--kv-cache-dtype",), "kv_cache_dtype"),
        Flag(("--config",), "config_file"),
    ),
    launchers=(
        Launcher("vllm", ("serve",), positional_model=True, modules=("vllm.entrypoints.cli.main",)),
        Launcher("vllm-api-server", modules=("vllm.entrypoints.openai.api_server",)),
    ),
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
    position=1,
    flags=FLAGS,
    # `vllm serve`, port 8000 (vLLM's documentation)
    pods=PodFacts(
        ("vllm/vllm-openai", "vllm-openai", "/vllm:"), ("vllm serve", "vllm.entrypoints"), 8000
    ),
    # vllm/entrypoints/openai/api_server.py (show_version)
    self_description=SelfDescribed("/version", version=("version",)),
    ttft_buckets=TTFT_BUCKETS,
    tpot_buckets=ITL_BUCKETS,
    own_histograms=True,
)

#: the registry's entry (inferwatch.engines finds every module's ENGINE)
ENGINE = VLLM
