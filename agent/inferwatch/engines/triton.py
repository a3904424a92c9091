"""Triton Inference Server with the TensorRT-LLM backend onto the contract.

Triton serves Prometheus text on its own metrics port (8002 by default), not on
the HTTP API port (8000). Every series carries ``model`` (the Triton model name:
an ensemble and each of its steps are separate models) and ``version``;
per-instance core series add ``gpu_uuid`` (and ``namespace`` / ``_<tag>`` labels
when configured). Version and GPU copies add up.

Core metrics, verified in triton-inference-server/core @
73aad7c3348d040c7087d57837d75822c488495e (``src/metrics.cc``,
``src/metric_model_reporter.{h,cc}``, ``src/infer_stats.cc``), rendered by
prometheus-cpp (counters keep their bare names, no ``_total``):

- ``nv_inference_pending_request_count`` gauge: requests waiting in Triton's
  scheduler (used for queue depth only without the TensorRT-LLM gauges: with
  the decoupled TensorRT-LLM model requests wait inside the executor instead);
- ``nv_inference_request_success`` counter; ``nv_inference_request_failure``
  counter with ``reason`` = REJECTED (queue policy: admission rejection),
  CANCELED (abort), BACKEND / OTHER (error); releases before the reason label
  are not counted as errors;
- ``nv_inference_request_duration_us`` counter: cumulative MICROseconds of
  successful requests; with the success count it gives the window mean
  end-to-end time ``inferwatch_e2e_latency_mean_seconds`` (derived: there is no
  end-to-end histogram);
- ``nv_inference_first_response_histogram_ms`` histogram in MILLIseconds, only
  with ``--metrics-config histogram_latencies=true`` (default buckets 100, 500,
  2000, 5000 ms): time to first token, bounds and sum scaled to seconds.

TensorRT-LLM backend metrics, verified in NVIDIA/TensorRT-LLM
``triton_backend/inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc``
@ 0d5352f5fc5f39ee2eaed948e67236e64ff68e2a and the example output in
triton-inference-server/tensorrtllm_backend ``README.md`` @
0b9d7d5a195820d53abadfcf7208d0ccdbfd5332; labels ``model, version`` plus one
selector label per family:

- ``nv_trt_llm_request_metrics{request_type}`` gauge: waiting (queued in the
  executor: queue depth), active (requests in flight: running), max (the batch
  capacity: max_num_seqs), scheduled, context;
- ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}`` gauge:
  share of KV blocks in use, 0..1;
- ``nv_llm_input_token_len`` / ``nv_llm_output_token_len`` histograms
  (``response_metric_type`` = total_input_tokens / total_output_tokens, buckets
  10 .. 1000): their ``_sum`` counts prompt and generated tokens.

Not available: TPOT (no inter-token timing in either), prefix-cache hits,
preemptions, queue-time histogram, prompt / generation length distributions,
prefill / decode time, LoRA series. Whether "waiting" counts exactly the
executor's queued requests was read from the label name and README, not from
``model_instance_state.cc``.
"""

from __future__ import annotations

from inferwatch.engines import base as b

_TRT_REQUESTS = "nv_trt_llm_request_metrics"

# Histogram bucket bounds of the engine's own /metrics (the simulator writes them,
# the SLO objectives are checked against them).
FIRST_RESPONSE_MS_BUCKETS = (100.0, 500.0, 2000.0, 5000.0)
TOKEN_LEN_BUCKETS = (10.0, 50.0, 100.0, 500.0, 1000.0)


# Triton Inference Server. Option names: triton-inference-server/server
# src/command_line_parser.cc @ 0299e638036b53bd5426fc2051161dc1da484358 (--http-port,
# --grpc-port, --metrics-port, --model-repository and its older spelling --model-store,
# --load-model, all repeatable where noted there). The batch capacity lives in each
# model's config.pbtxt / the TensorRT-LLM engine, never on this command line.
FLAGS = b.EngineFlags(
    (
        b.Flag(("--http-port",), "port", "int"),
        b.Flag(("--grpc-port",), "grpc_port", "int"),
        b.Flag(("--metrics-port",), "metrics_port", "int"),
        b.Flag(("--model-repository", "--model-store"), "model_repository", "multi"),
        b.Flag(("--load-model",), "load_model", "multi"),
    ),
    launchers=(b.Launcher("tritonserver"),),
)


TRITON = b.EngineMap(
    name="triton",
    prefixes=("nv_inference_", "nv_trt_llm_", "nv_llm_"),
    model_label="model",
    metrics_port=8002,
    signals=(
        b.gauge("inferwatch_queue_depth", _TRT_REQUESTS, select={"request_type": "waiting"}),
        b.gauge("inferwatch_queue_depth", "nv_inference_pending_request_count", fallback=True),
        b.gauge("inferwatch_requests_running", _TRT_REQUESTS, select={"request_type": "active"}),
        b.gauge("inferwatch_max_num_seqs", _TRT_REQUESTS, select={"request_type": "max"}),
        b.gauge(
            "inferwatch_kv_cache_usage_ratio",
            "nv_trt_llm_kv_cache_block_metrics",
            select={"kv_cache_block_type": "fraction"},
        ),
        b.counter(
            "inferwatch_prompt_tokens",
            "nv_llm_input_token_len",
            select={"response_metric_type": "total_input_tokens"},
            part="sum",
        ),
        b.counter(
            "inferwatch_generation_tokens",
            "nv_llm_output_token_len",
            select={"response_metric_type": "total_output_tokens"},
            part="sum",
        ),
        b.counter(
            "inferwatch_requests_finished",
            "nv_inference_request_success",
            const={"reason": "success"},
        ),
        b.counter(
            "inferwatch_requests_finished",
            "nv_inference_request_failure",
            select={"reason": ("CANCELED", "BACKEND", "OTHER")},
            labels={"reason": "reason"},
            values={"reason": {"CANCELED": "abort", "BACKEND": "error", "OTHER": "error"}},
        ),
        b.counter(
            "inferwatch_requests_rejected",
            "nv_inference_request_failure",
            select={"reason": "REJECTED"},
        ),
        b.counter(
            "inferwatch_request_seconds",
            "nv_inference_request_duration_us",
            scale=1e-6,
            export=False,
        ),
        b.counter("inferwatch_requests_succeeded", "nv_inference_request_success", export=False),
        b.histogram(
            "inferwatch_ttft_seconds", "nv_inference_first_response_histogram_ms", scale=1e-3
        ),
    ),
    ratios=(
        b.Ratio(
            "inferwatch_e2e_latency_mean_seconds",
            "inferwatch_request_seconds",
            "inferwatch_requests_succeeded",
            cap=None,
        ),
    ),
    position=5,
    flags=FLAGS,
    # `tritonserver`, HTTP port 8000 (Triton's documentation)
    pods=b.PodFacts(("tritonserver",), ("tritonserver",), 8000),
    # the first-response histogram in ms, as the agent exports it (seconds); no TPOT
    ttft_buckets=tuple(ms * 0.001 for ms in FIRST_RESPONSE_MS_BUCKETS),
)

#: the registry's entry (inferwatch.engines finds every module's ENGINE)
ENGINE = TRITON
