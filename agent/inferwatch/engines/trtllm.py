"""trtllm-serve (TensorRT-LLM's OpenAI server) onto the contract.

Verified in NVIDIA/TensorRT-LLM ``tensorrt_llm/metrics/collector.py`` @
050f80def8df236e326949c8bd9dee10fd896a83 (``MetricsCollector``, written with
prometheus_client: counters end in ``_total``). Labels are the collector's
``labels`` (``model_name``, ``engine_type``); per-request series need
``return_perf_metrics`` and iteration series ``enable_iter_perf_stats`` in the
LLM arguments.

- gauges: ``trtllm_num_requests_waiting`` (the executor's queued requests),
  ``trtllm_num_requests_running`` (its active requests),
  ``trtllm_kv_cache_utilization`` (used / max KV blocks, 0..1),
  ``trtllm_max_batch_size_static`` (configured batch capacity; falling back to
  ``trtllm_max_num_active_requests``);
- counters: ``trtllm_prompt_tokens_total``, ``trtllm_generation_tokens_total``,
  ``trtllm_prompt_cached_tokens_total`` (its series exists from start),
  ``trtllm_request_success_total{finished_reason}`` (every finished request by
  reason, "unknown" when the engine gave none);
- histograms, seconds, vLLM's bucket sets: ``trtllm_time_to_first_token_seconds``,
  ``trtllm_time_per_output_token_seconds`` (per-request mean),
  ``trtllm_e2e_request_latency_seconds``, ``trtllm_request_queue_time_seconds``;
  ``trtllm_request_prefill_time_seconds`` (first token - first scheduled; buckets
  0.001 .. 2560) and ``trtllm_request_decode_time_seconds`` (last token - first
  token; the end-to-end buckets): issue 23's prefill / decode split.

The Prometheus text is served at ``/prometheus/metrics``; ``/metrics`` answers
JSON iteration statistics. That path was read in downstream code that scrapes
trtllm-serve (and TensorRT-LLM's docs list ``/metrics`` as the JSON endpoint),
not in ``tensorrt_llm/serve/openai_server.py`` itself: unverified, which is why
discovery tries it rather than assuming it.

Not available: prompt and generation length histograms (token counts are
counters only; ``trtllm_prompt_cached_tokens_per_request`` counts cached tokens),
LoRA series, preemptions, admission rejections (``trtllm_request_error_total``
counts HTTP errors by code, not queue-limit rejections; not mapped).
"""

from __future__ import annotations

from types import MappingProxyType

from inferwatch.engines import base as b

# Histogram bucket bounds of the engine's own /metrics (the simulator writes them,
# the SLO objectives are checked against them).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
#: trtllm_request_prefill_time_seconds' default buckets (tensorrt_llm/metrics/collector.py
#: @ 050f80def8df236e326949c8bd9dee10fd896a83); decode time uses LATENCY_BUCKETS
PREFILL_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
)  # fmt: skip


# trtllm-serve. Option names: NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py
# @ 00209af149e7774406881a37283dce303571eb11 (click options spelled with underscores;
# the group defaults to the `serve` command, whose MODEL is positional).
# --kv_cache_free_gpu_memory_fraction is a share of the memory left after the weights,
# not of the whole GPU, so it stays in extra.
FLAGS = b.EngineFlags(
    (
        b.Flag(("--port",), "port", "int"),
        b.Flag(("--host",), "host"),
        b.Flag(("--max_batch_size",), "max_num_seqs", "int"),
        b.Flag(("--max_seq_len",), "max_model_len", "int"),
        b.Flag(("--max_num_tokens",), "max_num_batched_tokens", "int"),
        b.Flag(("--tensor_parallel_size", "--tp_size"), "tensor_parallel_size", "int"),
        b.Flag(("--pipeline_parallel_size", "--pp_size"), "pipeline_parallel_size", "int"),
        b.Flag(
            ("--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction"),
            "kv_cache_free_gpu_memory_fraction",
            "float",
        ),
        b.Flag(("--backend",), "backend"),
        b.Flag(("--config", "--extra_llm_api_options"), "config_file"),
    ),
    launchers=(
        b.Launcher(
            "trtllm-serve",
            positional_model=True,
            modules=("tensorrt_llm.commands.serve",),
            # its click group runs `serve` for anything that is not a sub-command
            optional_subcommands=MappingProxyType(
                {
                    "serve": True,
                    "grpc": True,
                    "mm_embedding_serve": True,
                    "disaggregated": False,
                    "disaggregated_mpi_worker": False,
                }
            ),
        ),
    ),
)


TRTLLM = b.EngineMap(
    name="trtllm",
    prefixes=("trtllm_",),
    metrics_path="/prometheus/metrics",
    signals=(
        b.gauge("inferwatch_queue_depth", "trtllm_num_requests_waiting"),
        b.gauge("inferwatch_requests_running", "trtllm_num_requests_running"),
        b.gauge("inferwatch_kv_cache_usage_ratio", "trtllm_kv_cache_utilization"),
        b.gauge(
            "inferwatch_max_num_seqs",
            "trtllm_max_batch_size_static",
            "trtllm_max_num_active_requests",
        ),
        b.counter("inferwatch_prompt_tokens", "trtllm_prompt_tokens"),
        b.counter("inferwatch_generation_tokens", "trtllm_generation_tokens"),
        b.counter("inferwatch_prefix_cache_hits", "trtllm_prompt_cached_tokens", export=False),
        b.counter(
            "inferwatch_requests_finished",
            "trtllm_request_success",
            labels={"finished_reason": "reason"},
        ),
        b.histogram("inferwatch_ttft_seconds", "trtllm_time_to_first_token_seconds"),
        b.histogram("inferwatch_tpot_seconds", "trtllm_time_per_output_token_seconds"),
        b.histogram("inferwatch_e2e_latency_seconds", "trtllm_e2e_request_latency_seconds"),
        b.histogram("inferwatch_queue_time_seconds", "trtllm_request_queue_time_seconds"),
        b.histogram("inferwatch_prefill_time_seconds", "trtllm_request_prefill_time_seconds"),
        b.histogram("inferwatch_decode_time_seconds", "trtllm_request_decode_time_seconds"),
    ),
    ratios=(b.prefix_cache_hit_ratio("inferwatch_prompt_tokens", zero_numerator=True),),
    position=6,
    flags=FLAGS,
    # `trtllm-serve`, port 8000 (TensorRT-LLM's documentation)
    pods=b.PodFacts(("tensorrt-llm", "tensorrt_llm"), ("trtllm-serve",), 8000),
    ttft_buckets=TTFT_BUCKETS,
    tpot_buckets=TPOT_BUCKETS,
)

#: the registry's entry (inferwatch.engines finds every module's ENGINE)
ENGINE = TRTLLM
