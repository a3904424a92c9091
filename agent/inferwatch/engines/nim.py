"""NVIDIA NIM for LLMs onto the contract.

NIM is not open source. Facts from NVIDIA's "Observability for NVIDIA NIM for
LLMs" page (docs.nvidia.com/nim/large-language-models/latest/observability.html:
Prometheus text at ``/v1/metrics``, the metric table) and from a captured NIM
exposition kept as a test fixture in DataDog/integrations-core
``nvidia_nim/tests/fixtures/nim_metrics.txt`` @
8b7db5d2d8f53b4169be6919a2997570a7b2f617 (NIM 1.x serving
meta/llama-3.1-8b-instruct): vLLM-like names WITHOUT a prefix, the ``model_name``
label, prometheus_client text without ``_created`` samples.

- gauges ``num_requests_waiting``, ``num_requests_running``,
  ``gpu_cache_usage_perc`` (0..1), ``num_request_max`` (concurrency limit:
  max_num_seqs);
- counters ``prompt_tokens_total``, ``generation_tokens_total``,
  ``request_finish_total{finished_reason}`` (stop, length, ...),
  ``request_failure_total`` (failed requests, no reason; counted as
  ``reason="error"``: that failures never also appear in request_finish_total
  is an assumption, NIM's source being closed);
- histograms (seconds, vLLM V0 buckets): ``time_to_first_token_seconds``,
  ``time_per_output_token_seconds``, ``e2e_request_latency_seconds``;
- per-request token histograms ``request_prompt_tokens`` and
  ``request_generation_tokens`` (in the observability page's table and the
  capture): issue 23's length distributions.

Detection: no prefix, so an exposition counts as NIM when at least two of the
marker names below are declared. Not available: prefix-cache hits,
preemptions, queue time, admission rejections, prefill / decode time, LoRA
series (none in the page's table or the capture).
"""

from __future__ import annotations

from inferwatch.engines.base import (
    EngineMap,
    PodFacts,
    counter,
    gauge,
    histogram,
)

# Histogram bucket bounds of the engine's own /metrics (the simulator writes them,
# the SLO objectives are checked against them).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
TOKEN_BUCKETS = (
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000,
)  # fmt: skip


NIM = EngineMap(
    name="nim",
    prefixes=(),
    metrics_path="/v1/metrics",
    markers=(
        "num_requests_running",
        "num_requests_waiting",
        "num_request_max",
        "gpu_cache_usage_perc",
        "request_finish_total",
        "time_to_first_token_seconds",
        "time_per_output_token_seconds",
        "e2e_request_latency_seconds",
    ),
    signals=(
        gauge("inferwatch_queue_depth", "num_requests_waiting"),
        gauge("inferwatch_requests_running", "num_requests_running"),
        gauge("inferwatch_max_num_seqs", "num_request_max"),
        gauge("inferwatch_kv_cache_usage_ratio", "gpu_cache_usage_perc"),
        counter("inferwatch_prompt_tokens", "prompt_tokens"),
        counter("inferwatch_generation_tokens", "generation_tokens"),
        counter(
            "inferwatch_requests_finished", "request_finish", labels={"finished_reason": "reason"}
        ),
        counter("inferwatch_requests_finished", "request_failure", const={"reason": "error"}),
        histogram("inferwatch_ttft_seconds", "time_to_first_token_seconds"),
        histogram("inferwatch_tpot_seconds", "time_per_output_token_seconds"),
        histogram("inferwatch_e2e_latency_seconds", "e2e_request_latency_seconds"),
        histogram("inferwatch_prompt_length_tokens", "request_prompt_tokens"),
        histogram("inferwatch_generation_length_tokens", "request_generation_tokens"),
    ),
    position=7,
    # NVIDIA's images, port 8000 (NIM's documentation)
    pods=PodFacts(("nvcr.io/nim/",), (), 8000),
    ttft_buckets=TTFT_BUCKETS,
    tpot_buckets=TPOT_BUCKETS,
)

#: the registry's entry (inferwatch.engines finds every module's ENGINE)
ENGINE = NIM
