"""llama.cpp's ``llama-server --metrics`` onto the contract.

Read in the llama.cpp that the llama-cpp-python 0.3.36 sdist vendors
(``vendor/llama.cpp/tools/server/server-task.cpp``,
``server_task_result_metrics::to_metrics``; ``server-context.cpp`` for when
each counter moves) and checked against that server running
(``tests/live/test_llamacpp_live.py``). Only with ``--metrics`` (or
``LLAMA_ARG_ENDPOINT_METRICS``); otherwise ``/metrics`` answers HTTP 501.
Every family is written by hand as ``llamacpp:<name>`` with no labels:

- gauges ``llamacpp:requests_processing`` (busy slots: running) and
  ``llamacpp:requests_deferred`` (tasks waiting for a slot: queue depth);
- counters ``llamacpp:prompt_tokens_total`` (prompt tokens evaluated, counted
  as each prefill batch is decoded; tokens reused from the slot's cache are
  not in it), ``llamacpp:prompt_tokens_cached_total`` (those reused tokens,
  counted when the request's prompt is loaded), ``llamacpp:tokens_predicted_total``
  and ``llamacpp:tokens_predicted_seconds_total`` (both added when a slot
  releases its request).

The contract's prompt tokens include prefix-cache hits, so
``inferwatch_prompt_tokens`` is evaluated + cached, and the hit ratio is
cached / (evaluated + cached) over the stats window. Builds older than the
cached counter give evaluated tokens only and no ratio.

TPOT is *derived*: llama.cpp has no latency histogram, so the agent exports
``inferwatch_tpot_mean_seconds`` = increase(tokens_predicted_seconds_total) /
increase(tokens_predicted_total) over the stats window: a window mean of
generation time per token, not a percentile. ``llamacpp:n_tokens_max`` and
``llamacpp:n_busy_slots_per_decode`` are not monotonic counts and are not used,
nor are the speculative-decoding counters (no contract family).

The model and the slot count are not in the exposition: the agent reads them
from ``/props`` (:mod:`inferwatch.agent.collectors.selfdesc`).

Not available: TTFT, end-to-end latency, KV-cache usage (the kv_cache_* gauges
were removed in PR #13660), preemptions, finished/rejected request counts, and every histogram: no length
distributions, queue, prefill or decode time, no LoRA series.
"""

from __future__ import annotations

from inferwatch.engines import proxy
from inferwatch.engines.base import (
    EngineFlags,
    EngineMap,
    Flag,
    Launcher,
    PodFacts,
    Ratio,
    SelfDescribed,
    counter,
    gauge,
    prefix_cache_hit_ratio,
)

# llama.cpp server. Option names: ggml-org/llama.cpp common/arg.cpp
# @ 145b6280d6aa1890e22457143dad0badb3fd6820 (-m/--model LLAMA_ARG_MODEL, -a/--alias
# LLAMA_ARG_ALIAS, -hf/-hfr/--hf-repo, -np/--parallel LLAMA_ARG_N_PARALLEL, --host
# LLAMA_ARG_HOST, --port LLAMA_ARG_PORT, -ngl, --metrics); -c/--ctx-size
# LLAMA_ARG_CTX_SIZE in the same parser of other revisions; --metrics also from
# LLAMA_ARG_ENDPOINT_METRICS (common/arg.cpp of the llama.cpp that llama-cpp-python
# 0.3.36 vendors: a switch read from the environment is on for "on", "enabled",
# "true" or "1", common_arg_utils::is_truthy). --parallel -1 means "auto"
# in newer builds, so only a positive value is a capacity. --ctx-size is the context
# shared by all slots, not a per-request limit, so it is kept in extra.
FLAGS = EngineFlags(
    (
        Flag(("-m", "--model"), "model", env=("LLAMA_ARG_MODEL",)),
        Flag(("-hf", "-hfr", "--hf-repo"), "hf_repo", env=("LLAMA_ARG_HF_REPO",)),
        Flag(("-a", "--alias"), "served_model_name", "csv", env=("LLAMA_ARG_ALIAS",)),
        Flag(("--port",), "port", "int", env=("LLAMA_ARG_PORT",)),
        Flag(("--host",), "host", env=("LLAMA_ARG_HOST",)),
        Flag(("-np", "--parallel"), "max_num_seqs", "int", env=("LLAMA_ARG_N_PARALLEL",)),
        Flag(("-c", "--ctx-size"), "ctx_size", "int", env=("LLAMA_ARG_CTX_SIZE",)),
        Flag(("-ngl", "--gpu-layers", "--n-gpu-layers"), "n_gpu_layers", "int"),
        Flag(("--metrics",), "metrics", "true", env=("LLAMA_ARG_ENDPOINT_METRICS",)),
    ),
    launchers=(Launcher("llama-server"),),
)


LLAMACPP = EngineMap(
    name="llamacpp",
    prefixes=("llamacpp:",),
    model_label=None,
    # get_metrics answers ERROR_TYPE_NOT_SUPPORTED (HTTP 501) unless metrics are on
    status_hints={501: "llama-server without --metrics (or LLAMA_ARG_ENDPOINT_METRICS=1)"},
    signals=(
        gauge("inferwatch_queue_depth", "llamacpp:requests_deferred"),
        gauge("inferwatch_requests_running", "llamacpp:requests_processing"),
        # evaluated + cached: two signals of one target add up
        counter("inferwatch_prompt_tokens", "llamacpp:prompt_tokens"),
        counter("inferwatch_prompt_tokens", "llamacpp:prompt_tokens_cached"),
        counter("inferwatch_prefix_cache_hits", "llamacpp:prompt_tokens_cached", export=False),
        counter("inferwatch_generation_tokens", "llamacpp:tokens_predicted"),
        counter("inferwatch_generation_seconds", "llamacpp:tokens_predicted_seconds", export=False),
    ),
    ratios=(
        prefix_cache_hit_ratio("inferwatch_prompt_tokens"),
        Ratio(
            "inferwatch_tpot_mean_seconds",
            "inferwatch_generation_seconds",
            "inferwatch_generation_tokens",
            cap=None,
        ),
    ),
    position=4,
    flags=FLAGS,
    # `llama-server`, port 8080 (llama.cpp's documentation)
    pods=PodFacts(("ggml-org/llama.cpp", "ggerganov/llama.cpp"), ("llama-server",), 8080),
    # tools/server/server-context.cpp (get_res_props) of the vendored server; total_slots
    # is the slot count in use: with --parallel -1 (the default) the server picks it at
    # start and reports the number it picked
    self_description=SelfDescribed(
        "/props",
        version=("build_info",),
        model=("model_alias", "model_path"),
        max_num_seqs=("total_slots",),
    ),
    # no latency histogram: the measuring proxy's (workers[].proxy), which also counts the
    # finished requests of the availability SLO
    ttft_buckets=proxy.TTFT_BUCKETS,
    tpot_buckets=proxy.TPOT_BUCKETS,
)

#: the registry's entry (inferwatch.engines finds every module's ENGINE)
ENGINE = LLAMACPP
