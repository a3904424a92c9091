"""Text Generation Inference's /metrics onto the contract.

Verified in huggingface/text-generation-inference @
db931fcf42da018a3657580c64bf2720f167f9ab (``router/src/server.rs``,
``router/src/infer/mod.rs``, ``router/src/validation.rs``,
``backends/v3/src/{backend,queue}.rs``). TGI records with the Rust ``metrics``
crate and renders with ``metrics-exporter-prometheus`` 0.15
(metrics-rs/metrics tag metrics-exporter-prometheus-v0.15.3, ``recorder.rs``):
counters keep their bare names (``# TYPE tgi_request_count counter`` then
``tgi_request_count 3``: no ``_total``), there is no model label at all, and
only metrics given buckets are histograms. ``/metrics`` is served on the API
port (and on ``--prometheus-port``, default 9000).

- gauges: ``tgi_queue_size`` (waiting), ``tgi_batch_current_size`` (running).
- histograms, seconds, 35 geometric buckets 0.0001 x 1.5^k (0.00015 ..):
  ``tgi_request_duration`` (end to end, validation + queue + inference),
  ``tgi_request_queue_duration``, ``tgi_request_mean_time_per_token_duration``
  (one observation per successful request: its inference time / generated
  tokens, prefill included; the only TPOT TGI has).
- token counts only as histograms: ``tgi_request_input_length`` (each validated
  request) and ``tgi_request_generated_tokens`` (each successful request); their
  ``_sum`` is the token counter.
- ``tgi_request_success`` and ``tgi_request_failure{err}`` with err = overloaded
  (HTTP 429, ``--max-concurrent-requests`` reached: an admission rejection),
  validation and template (the client's fault, HTTP 422: not counted here),
  generation, dropped, incomplete (server-side: ``reason="error"``).

Not available: TTFT, KV-cache usage, prefix caching, preemptions, per-request
prefill / decode time (its forward and inference durations are per batch or
whole), per-adapter LoRA series.
"""

from __future__ import annotations

from types import MappingProxyType

from inferwatch.engines import base as b
from inferwatch.engines import proxy

# Histogram bucket bounds of the engine's own /metrics (the simulator writes them,
# the SLO objectives are checked against them).
DURATION_BUCKETS = tuple(0.0001 * 1.5**k for k in range(1, 36))


def _clap(names: tuple[str, ...], key: str, kind: b.FlagKind = "str") -> b.Flag:
    """A TGI launcher option and its variable: clap's ``#[clap(long, env)]`` names the
    variable after the field, upper case (``--max-batch-size``: ``MAX_BATCH_SIZE``)."""
    return b.Flag(names, key, kind, env=(names[0].removeprefix("--").replace("-", "_").upper(),))


# TGI. Option names: huggingface/text-generation-inference launcher/src/main.rs
# @ 009c4e0b945b2c111368afdc2c9813c32db0a9b7 (clap `#[clap(long, env)]`: the option is
# the field name in kebab case, the environment variable the field name in upper case;
# `port` also has `short`, so -p). PREFIX_CACHING is read from the environment only
# (resolve_attention). HOSTNAME is deliberately not read: every container sets it.
FLAGS = b.EngineFlags(
    (
        _clap(("--model-id",), "model"),
        _clap(("--port", "-p"), "port", "int"),
        b.Flag(("--hostname",), "host"),
        _clap(("--max-concurrent-requests",), "max_num_seqs", "int"),
        _clap(("--max-total-tokens",), "max_model_len", "int"),
        _clap(("--cuda-memory-fraction",), "gpu_memory_utilization", "float"),
        _clap(("--num-shard",), "tensor_parallel_size", "int"),
        _clap(("--max-input-tokens",), "max_input_tokens", "int"),
        _clap(("--max-input-length",), "max_input_length", "int"),
        _clap(("--max-batch-prefill-tokens",), "max_batch_prefill_tokens", "int"),
        _clap(("--max-batch-total-tokens",), "max_batch_total_tokens", "int"),
        _clap(("--max-batch-size",), "max_batch_size", "int"),
    ),
    launchers=(b.Launcher("text-generation-launcher"),),
    env_only=MappingProxyType({"PREFIX_CACHING": "prefix_caching"}),
)


TGI = b.EngineMap(
    name="tgi",
    prefixes=("tgi_",),
    model_label=None,
    signals=(
        b.gauge("inferwatch_queue_depth", "tgi_queue_size"),
        b.gauge("inferwatch_requests_running", "tgi_batch_current_size"),
        b.counter("inferwatch_prompt_tokens", "tgi_request_input_length", part="sum"),
        b.counter("inferwatch_generation_tokens", "tgi_request_generated_tokens", part="sum"),
        b.counter(
            "inferwatch_requests_finished", "tgi_request_success", const={"reason": "success"}
        ),
        b.counter(
            "inferwatch_requests_finished",
            "tgi_request_failure",
            select={"err": ("generation", "dropped", "incomplete")},
            const={"reason": "error"},
        ),
        b.counter(
            "inferwatch_requests_rejected", "tgi_request_failure", select={"err": "overloaded"}
        ),
        b.histogram("inferwatch_tpot_seconds", "tgi_request_mean_time_per_token_duration"),
        b.histogram("inferwatch_e2e_latency_seconds", "tgi_request_duration"),
        b.histogram("inferwatch_queue_time_seconds", "tgi_request_queue_duration"),
        # the same token histograms as distributions (issue 23 item 3)
        b.histogram("inferwatch_prompt_length_tokens", "tgi_request_input_length"),
        b.histogram("inferwatch_generation_length_tokens", "tgi_request_generated_tokens"),
    ),
    position=3,
    flags=FLAGS,
    # `text-generation-launcher`, port 80 in its image (TGI's documentation)
    pods=b.PodFacts(("text-generation-inference",), ("text-generation-launcher",), 80),
    # router/src/lib.rs @ 014d3fd4effb4e1e742b64c1d6b68ab5c0420686 (struct Info); the
    # capacity is its concurrent-request limit, what --max-concurrent-requests sets
    self_description=b.SelfDescribed(
        "/info",
        version=("version",),
        model=("model_id",),
        max_num_seqs=("max_concurrent_requests",),
    ),
    # no TTFT histogram: the measuring proxy's (workers[].proxy)
    ttft_buckets=proxy.TTFT_BUCKETS,
    tpot_buckets=DURATION_BUCKETS,
)

#: the registry's entry (inferwatch.engines finds every module's ENGINE)
ENGINE = TGI
