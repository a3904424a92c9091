"""LMDeploy's api_server /metrics onto the contract.

Verified in InternLM/lmdeploy ``lmdeploy/metrics/loggers.py``
(``PrometheusStatLogger``) and ``lmdeploy/messages.py`` (``ResponseType``) @
1263d5cd889b7ad500e85b8eb20401327a4516ab. Written with prometheus_client with
``disable_created_metrics()`` (no ``_created`` samples); every series carries
``model_name`` and ``engine`` (the data-parallel rank): ranks add up, ratios
average.

- gauges: ``lmdeploy:num_requests_waiting``, ``lmdeploy:num_requests_running``,
  ``lmdeploy:gpu_cache_usage_perc`` (0..1 despite the name);
- counters: ``lmdeploy:prompt_tokens_total``, ``lmdeploy:generation_tokens_total``,
  ``lmdeploy:request_success_total{finished_reason}`` where the reason is
  ``str(ResponseType.X)``, e.g. "ResponseType.FINISH" (translated below);
- per finished request histograms ``lmdeploy:request_prompt_tokens`` and
  ``lmdeploy:request_cached_tokens``: the ratio of their ``_sum`` increases is
  the prefix-cache hit ratio (cached tokens are a part of the request's prompt
  tokens: LMDeploy's own ``request_cache_hit_ratio`` is cached / prompt);
- histograms, seconds: ``lmdeploy:time_to_first_token_seconds``,
  ``lmdeploy:iter_token_latency`` (inter-token latency; no ``_seconds`` suffix
  but observed in seconds), else ``lmdeploy:time_per_output_token_seconds``,
  ``lmdeploy:e2e_request_latency_seconds``, ``lmdeploy:request_queue_time_seconds``.

Issue 23's signals, read in ``lmdeploy/metrics/loggers.py`` @
0168eedaef9497414956cb20c2ad0f443de6c248 (the version of the file stored for
this check): per finished request ``lmdeploy:request_prompt_tokens`` and
``lmdeploy:request_generation_tokens`` (1-2-5 buckets up to ``max_model_len``,
as vLLM's) are the length distributions; ``lmdeploy:request_prefill_time_seconds``
and ``lmdeploy:request_decode_time_seconds`` (the end-to-end buckets 0.3 ..
7680) the prefill / decode split.

Not available: LoRA series, preemptions, admission rejections (``ResponseType.NO_QUEUE`` is
not documented as a queue-limit refusal; it is counted as an error).
"""

from __future__ import annotations

from inferwatch.engines.base import (
    EngineFlags,
    EngineMap,
    Flag,
    Launcher,
    PodFacts,
    counter,
    gauge,
    histogram,
    prefix_cache_hit_ratio,
)

#: ResponseType members -> contract finish reasons
_REASONS = {
    "ResponseType.SUCCESS": "success",
    "ResponseType.FINISH": "success",
    "ResponseType.CANCEL": "abort",
    "ResponseType.ENGINE_STOP_ERROR": "error",
    "ResponseType.INTERNAL_ENGINE_ERROR": "error",
    "ResponseType.OUT_OF_MEMORY": "error",
    "ResponseType.NO_QUEUE": "error",
    "ResponseType.SESSION_REPEAT": "error",
    "ResponseType.SESSION_NOT_EXIST": "error",
    "ResponseType.HANDLER_NOT_EXIST": "error",
    "ResponseType.PREFIX_CACHE_CONFLICT": "error",
    "ResponseType.INPUT_LENGTH_ERROR": "error",
    "ResponseType.NOT_SUPPORTED": "error",
}

# Histogram bucket bounds of the engine's own /metrics (the simulator writes them,
# the SLO objectives are checked against them).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TPOT_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


# LMDeploy. Option names: InternLM/lmdeploy lmdeploy/cli/serve.py
# @ 00596da999e74d269a3557cb300a5a64b2c7175f (`lmdeploy serve api_server MODEL_PATH`,
# --server-name, --server-port) and lmdeploy/cli/utils.py
# @ 00948ee273c696465b3a301519c08ef9c674683f (ArgumentHelper: --model-name, --tp,
# --session-len, --max-batch-size, --cache-max-entry-count, --enable-prefix-caching,
# --backend). --cache-max-entry-count is a share of free memory, so it stays in extra.
FLAGS = EngineFlags(
    (
        Flag(("--server-port",), "port", "int"),
        Flag(("--server-name",), "host"),
        Flag(("--model-name",), "served_model_name"),
        Flag(("--max-batch-size",), "max_num_seqs", "int"),
        Flag(("--session-len",), "max_model_len", "int"),
        Flag(("--tp",), "tensor_parallel_size", "int"),
        Flag(("--enable-prefix-caching",), "prefix_caching", "true"),
        Flag(("--cache-max-entry-count",), "cache_max_entry_count", "float"),
        Flag(("--max-prefill-token-num",), "max_prefill_token_num", "int"),
        Flag(("--backend",), "backend"),
    ),
    launchers=(Launcher("lmdeploy", ("serve", "api_server"), positional_model=True),),
)


LMDEPLOY = EngineMap(
    name="lmdeploy",
    prefixes=("lmdeploy:",),
    signals=(
        gauge("inferwatch_queue_depth", "lmdeploy:num_requests_waiting"),
        gauge("inferwatch_requests_running", "lmdeploy:num_requests_running"),
        gauge("inferwatch_kv_cache_usage_ratio", "lmdeploy:gpu_cache_usage_perc"),
        counter("inferwatch_prompt_tokens", "lmdeploy:prompt_tokens"),
        counter("inferwatch_generation_tokens", "lmdeploy:generation_tokens"),
        counter(
            "inferwatch_requests_finished",
            "lmdeploy:request_success",
            labels={"finished_reason": "reason"},
            values={"finished_reason": _REASONS},
        ),
        counter(
            "inferwatch_request_prompt_tokens",
            "lmdeploy:request_prompt_tokens",
            part="sum",
            export=False,
        ),
        counter(
            "inferwatch_prefix_cache_hits",
            "lmdeploy:request_cached_tokens",
            part="sum",
            export=False,
        ),
        histogram("inferwatch_ttft_seconds", "lmdeploy:time_to_first_token_seconds"),
        histogram(
            "inferwatch_tpot_seconds",
            "lmdeploy:iter_token_latency",
            "lmdeploy:time_per_output_token_seconds",
        ),
        histogram("inferwatch_e2e_latency_seconds", "lmdeploy:e2e_request_latency_seconds"),
        histogram("inferwatch_queue_time_seconds", "lmdeploy:request_queue_time_seconds"),
        histogram("inferwatch_prefill_time_seconds", "lmdeploy:request_prefill_time_seconds"),
        histogram("inferwatch_decode_time_seconds", "lmdeploy:request_decode_time_seconds"),
        histogram("inferwatch_prompt_length_tokens", "lmdeploy:request_prompt_tokens"),
        histogram("inferwatch_generation_length_tokens", "lmdeploy:request_generation_tokens"),
    ),
    ratios=(prefix_cache_hit_ratio("inferwatch_request_prompt_tokens"),),
    position=8,
    flags=FLAGS,
    # `lmdeploy serve api_server`, port 23333 (LMDeploy's documentation)
    pods=PodFacts(("openmmlab/lmdeploy",), ("lmdeploy serve",), 23333),
    ttft_buckets=TTFT_BUCKETS,
    tpot_buckets=TPOT_BUCKETS,
)

#: the registry's entry (inferwatch.engines finds every module's ENGINE)
ENGINE = LMDEPLOY
