"""Every non-vLLM engine's exposition, written here from the verified facts, mapped onto the contract.

Each text below follows what the engine's own source writes (names, types,
labels, units, bucket bounds; see the docstring of the engine's table in
``agent/inferwatch/engines/``), independently of the simulator's writers, so
that a mistake in one does not hide in the other.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.engine_text import (
    SGL_TTFT,
    LabelSet,
    counter,
    gauge,
    histogram,
    sglang_text,
)
from tests.support.proc import REPO, promtool

from inferwatch.engines import ENGINES, detect, metrics_locations, status_hint
from inferwatch.engines.mapping import (
    Mapped,
    ParseError,
    family_names,
    map_exposition,
    sample_names,
)

M = (("model", "m"),)


def only(mapped: Mapped, table: str, target: str) -> float:
    series = getattr(mapped, table)[target]
    assert len(series) == 1, series
    return next(iter(series.values()))


# --------------------------------------------------------------------------- SGLang
def test_sglang_tensor_parallel_copies_are_not_added_data_parallel_ranks_are() -> None:
    mapped = map_exposition(sglang_text(), ENGINES["sglang"])
    # one copy per DP rank (max over the identical TP copies), then DP ranks add up
    assert mapped.gauges["inferwatch_queue_depth"] == {M: 7.0}
    assert mapped.gauges["inferwatch_requests_running"] == {M: 14.0}
    assert mapped.gauges["inferwatch_kv_cache_usage_ratio"] == {M: pytest.approx(0.4)}
    assert mapped.counters["inferwatch_preemptions"] == {M: 3.0}
    assert mapped.counters["inferwatch_prompt_tokens"] == {M: 1000.0}
    assert mapped.counters["inferwatch_generation_tokens"] == {M: 200.0}
    assert mapped.counters["inferwatch_requests_finished"] == {(*M, ("reason", "unknown")): 10.0}
    assert "inferwatch_prefix_cache_hits" not in mapped.counters
    assert "inferwatch_prefix_cache_hits" in mapped.declared  # zero hits, not unknown
    ttft = mapped.histograms["inferwatch_ttft_seconds"][M]
    assert ttft.bounds == (*map(float, SGL_TTFT), math.inf)
    assert ttft.count == 3 and ttft.sum == pytest.approx(3.65)
    tpot = mapped.histograms["inferwatch_tpot_seconds"][M]
    assert tpot.count == 10 and tpot.bounds[0] == 0.002
    assert mapped.histograms["inferwatch_e2e_latency_seconds"][M].count == 2
    # the scheduler-side histogram is repeated per TP rank too: 2 DP ranks x 1 request
    assert mapped.histograms["inferwatch_queue_time_seconds"][M].count == 2
    assert "inferwatch_requests_rejected" not in mapped.counters


def test_sglang_older_time_per_output_token_name_feeds_tpot() -> None:
    old = map_exposition(
        sglang_text(itl_name="sglang:time_per_output_token_seconds"), ENGINES["sglang"]
    )
    new = map_exposition(sglang_text(), ENGINES["sglang"])
    assert old.histograms["inferwatch_tpot_seconds"] == new.histograms["inferwatch_tpot_seconds"]


# --------------------------------------------------------------------------- TGI
TGI_DURATION = tuple(0.0001 * 1.5**k for k in range(1, 36))


def tgi_text() -> str:
    """metrics-exporter-prometheus 0.15: bare counter names, no labels on most series."""
    no: LabelSet = {}
    input_buckets = tuple(float(40 * (i + 1)) for i in range(100))
    return "".join(
        [
            counter("tgi_request_count", [(no, 20)], suffix=""),
            counter("tgi_request_success", [(no, 12)], suffix=""),
            counter(
                "tgi_request_failure",
                [
                    ({"err": "overloaded"}, 4),
                    ({"err": "validation"}, 5),
                    ({"err": "generation"}, 2),
                    ({"err": "dropped"}, 1),
                ],
                suffix="",
            ),
            gauge("tgi_queue_size", [(no, 9)]),
            gauge("tgi_batch_current_size", [(no, 5)]),
            gauge("tgi_batch_current_max_tokens", [(no, 4096)]),
            histogram("tgi_request_duration", TGI_DURATION, [(no, [0.8, 2.0, 3.5])], le="{!r}"),
            histogram("tgi_request_queue_duration", TGI_DURATION, [(no, [0.01, 0.2])], le="{!r}"),
            histogram(
                "tgi_request_mean_time_per_token_duration",
                TGI_DURATION,
                [(no, [0.03, 0.04, 0.05])],
                le="{!r}",
            ),
            histogram("tgi_request_input_length", input_buckets, [(no, [100, 250, 650])]),
            histogram("tgi_request_generated_tokens", input_buckets, [(no, [30, 70])]),
        ]
    )


def test_tgi_token_counters_come_from_histogram_sums_and_failures_split() -> None:
    mapped = map_exposition(tgi_text(), ENGINES["tgi"])
    none = (("model", ""),)
    assert mapped.gauges["inferwatch_queue_depth"] == {none: 9.0}
    assert mapped.gauges["inferwatch_requests_running"] == {none: 5.0}
    assert mapped.counters["inferwatch_prompt_tokens"] == {none: 1000.0}
    assert mapped.counters["inferwatch_generation_tokens"] == {none: 100.0}
    finished = mapped.counters["inferwatch_requests_finished"]
    # validation failures are the client's (HTTP 422): not finished, not errors
    assert finished == {(*none, ("reason", "success")): 12.0, (*none, ("reason", "error")): 3.0}
    assert mapped.counters["inferwatch_requests_rejected"] == {none: 4.0}
    e2e = mapped.histograms["inferwatch_e2e_latency_seconds"][none]
    assert len(e2e.bounds) == 36 and e2e.bounds[0] == pytest.approx(0.00015)
    assert e2e.count == 3 and e2e.sum == pytest.approx(6.3)
    assert mapped.histograms["inferwatch_tpot_seconds"][none].count == 3
    assert mapped.histograms["inferwatch_queue_time_seconds"][none].count == 2
    for absent in ("inferwatch_kv_cache_usage_ratio",):
        assert absent not in mapped.gauges
    assert "inferwatch_ttft_seconds" not in mapped.histograms


# --------------------------------------------------------------------------- llama.cpp
def llamacpp_text(predicted: int = 400, seconds: float = 10.0) -> str:
    """As llama-server writes it by hand: no labels, C++ stream number formatting."""
    items = [
        ("prompt_tokens_total", "counter", 1200),
        ("prompt_tokens_cached_total", "counter", 300),
        ("prompt_seconds_total", "counter", 1.5),
        ("tokens_predicted_total", "counter", predicted),
        ("tokens_predicted_seconds_total", "counter", seconds),
        ("n_decode_total", "counter", 410),
        ("n_tokens_max", "counter", 900),
        ("prompt_tokens_seconds", "gauge", 800),
        ("predicted_tokens_seconds", "gauge", 40),
        ("requests_processing", "gauge", 3),
        ("requests_deferred", "gauge", 2),
        ("n_busy_slots_per_decode", "gauge", 2.5),
    ]
    out = []
    for name, kind, value in items:
        out += [f"# HELP llamacpp:{name} x", f"# TYPE llamacpp:{name} {kind}"]
        out.append(f"llamacpp:{name} {value:g}")
    return "\n".join(out) + "\n"


def test_llamacpp_counters_and_the_inputs_of_the_tpot_window_mean() -> None:
    mapped = map_exposition(llamacpp_text(), ENGINES["llamacpp"])
    none = (("model", ""),)
    assert mapped.gauges["inferwatch_queue_depth"] == {none: 2.0}
    assert mapped.gauges["inferwatch_requests_running"] == {none: 3.0}
    # the contract counts cached prompt tokens too: evaluated + cached
    assert mapped.counters["inferwatch_prompt_tokens"] == {none: 1500.0}
    assert mapped.counters["inferwatch_prefix_cache_hits"] == {none: 300.0}
    assert mapped.counters["inferwatch_generation_tokens"] == {none: 400.0}
    assert mapped.counters["inferwatch_generation_seconds"] == {none: 10.0}
    assert not mapped.histograms  # no latency histogram at all
    assert "inferwatch_kv_cache_usage_ratio" not in mapped.gauges
    ratios = {r.target: r for r in ENGINES["llamacpp"].ratios}
    hit = ratios["inferwatch_prefix_cache_hit_ratio"]
    assert (hit.numerator, hit.denominator, hit.cap) == (
        "inferwatch_prefix_cache_hits",
        "inferwatch_prompt_tokens",
        1.0,
    )
    tpot = ratios["inferwatch_tpot_mean_seconds"]
    assert (tpot.numerator, tpot.denominator, tpot.cap) == (
        "inferwatch_generation_seconds",
        "inferwatch_generation_tokens",
        None,
    )


def test_llamacpp_builds_without_the_cached_counter_count_evaluated_tokens_only() -> None:
    text = "\n".join(
        line for line in llamacpp_text().splitlines() if "prompt_tokens_cached" not in line
    )
    mapped = map_exposition(text + "\n", ENGINES["llamacpp"])
    none = (("model", ""),)
    assert mapped.counters["inferwatch_prompt_tokens"] == {none: 1200.0}
    assert "inferwatch_prefix_cache_hits" not in mapped.counters


# --------------------------------------------------------------------------- Triton
def triton_text(*, trt_llm: bool = True) -> str:
    """Core metrics (prometheus-cpp, bare counters) + the TensorRT-LLM backend's families."""
    llm = {"model": "tensorrt_llm", "version": "1"}
    ens = {"model": "ensemble", "version": "1"}
    gpu = {"gpu_uuid": "GPU-0a"}
    parts = [
        counter("nv_inference_request_success", [({**llm, **gpu}, 30), ({**ens}, 30)], suffix=""),
        counter(
            "nv_inference_request_failure",
            [
                ({**llm, **gpu, "reason": r}, n)
                for r, n in (("REJECTED", 5), ("CANCELED", 2), ("BACKEND", 1), ("OTHER", 1))
            ],
            suffix="",
        ),
        counter(
            "nv_inference_request_duration_us",
            [({**llm, **gpu}, 45_000_000), (ens, 46_000_000)],
            suffix="",
        ),
        counter("nv_inference_queue_duration_us", [({**llm, **gpu}, 30_000)], suffix=""),
        gauge("nv_inference_pending_request_count", [({**llm, **gpu}, 1), (ens, 0)]),
        histogram(
            "nv_inference_first_response_histogram_ms",
            (100, 500, 2000, 5000),
            [({**llm, **gpu}, [80.0, 300.0, 1200.0])],
        ),
    ]
    if trt_llm:
        parts += [
            gauge(
                "nv_trt_llm_request_metrics",
                [
                    ({**llm, "request_type": t}, v)
                    for t, v in (
                        ("waiting", 6),
                        ("context", 1),
                        ("scheduled", 7),
                        ("max", 64),
                        ("active", 8),
                    )
                ],
            ),
            gauge(
                "nv_trt_llm_kv_cache_block_metrics",
                [
                    ({**llm, "kv_cache_block_type": t}, v)
                    for t, v in (("fraction", 0.4875), ("used", 3042), ("max", 6239))
                ],
            ),
            histogram(
                "nv_llm_input_token_len",
                (10, 50, 100, 500, 1000),
                [({**llm, "response_metric_type": "total_input_tokens"}, [120, 600])],
            ),
            histogram(
                "nv_llm_output_token_len",
                (10, 50, 100, 500, 1000),
                [({**llm, "response_metric_type": "total_output_tokens"}, [40, 60])],
            ),
        ]
    return "".join(parts)


def test_triton_units_are_seconds_and_selector_labels_pick_the_signal() -> None:
    mapped = map_exposition(triton_text(), ENGINES["triton"])
    llm = (("model", "tensorrt_llm"),)
    ens = (("model", "ensemble"),)
    # the executor's queue, not Triton's (nearly empty) scheduler queue
    assert mapped.gauges["inferwatch_queue_depth"] == {llm: 6.0}
    assert mapped.gauges["inferwatch_requests_running"] == {llm: 8.0}
    assert mapped.gauges["inferwatch_max_num_seqs"] == {llm: 64.0}
    assert mapped.gauges["inferwatch_kv_cache_usage_ratio"] == {llm: pytest.approx(0.4875)}
    assert mapped.counters["inferwatch_prompt_tokens"] == {llm: 720.0}
    assert mapped.counters["inferwatch_generation_tokens"] == {llm: 100.0}
    finished = mapped.counters["inferwatch_requests_finished"]
    assert finished == {
        (*llm, ("reason", "success")): 30.0,
        (*ens, ("reason", "success")): 30.0,
        (*llm, ("reason", "abort")): 2.0,
        (*llm, ("reason", "error")): 2.0,
    }
    assert mapped.counters["inferwatch_requests_rejected"] == {llm: 5.0}
    # microseconds -> seconds
    assert mapped.counters["inferwatch_request_seconds"][llm] == pytest.approx(45.0)
    assert mapped.counters["inferwatch_requests_succeeded"][llm] == 30.0
    # milliseconds -> seconds, bounds and sum
    ttft = mapped.histograms["inferwatch_ttft_seconds"][llm]
    assert ttft.bounds == (0.1, 0.5, 2.0, 5.0, math.inf)
    assert ttft.counts == (1, 2, 3, 3, 3)
    assert ttft.sum == pytest.approx(1.58)
    assert "inferwatch_tpot_seconds" not in mapped.histograms


def test_triton_without_the_trt_llm_backend_falls_back_to_the_pending_gauge() -> None:
    mapped = map_exposition(triton_text(trt_llm=False), ENGINES["triton"])
    assert mapped.gauges["inferwatch_queue_depth"] == {
        (("model", "tensorrt_llm"),): 1.0,
        (("model", "ensemble"),): 0.0,
    }
    assert "inferwatch_requests_running" not in mapped.gauges
    assert "inferwatch_kv_cache_usage_ratio" not in mapped.gauges


# --------------------------------------------------------------------------- trtllm-serve
VLLM_TTFT = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
VLLM_TPOT = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
VLLM_E2E = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


def trtllm_text() -> str:
    lab = {"model_name": "m", "engine_type": "trtllm"}
    return "".join(
        [
            gauge("trtllm_num_requests_waiting", [(lab, 11)]),
            gauge("trtllm_num_requests_running", [(lab, 32)]),
            gauge("trtllm_kv_cache_utilization", [(lab, 0.9)]),
            gauge("trtllm_max_num_active_requests", [(lab, 48)]),
            gauge("trtllm_max_batch_size_static", [(lab, 32)]),
            counter("trtllm_prompt_tokens", [(lab, 5000)]),
            counter("trtllm_generation_tokens", [(lab, 900)]),
            counter("trtllm_prompt_cached_tokens", [(lab, 1250)]),
            counter(
                "trtllm_request_success",
                [({**lab, "finished_reason": r}, n) for r, n in (("stop", 7), ("length", 2))],
            ),
            counter("trtllm_request_error", [({**lab, "http_code": "500"}, 1)]),
            histogram("trtllm_time_to_first_token_seconds", VLLM_TTFT, [(lab, [0.3, 0.7])]),
            histogram("trtllm_time_per_output_token_seconds", VLLM_TPOT, [(lab, [0.02])]),
            histogram("trtllm_e2e_request_latency_seconds", VLLM_E2E, [(lab, [3.0])]),
            histogram("trtllm_request_queue_time_seconds", VLLM_E2E, [(lab, [0.4])]),
        ]
    )


def test_trtllm_serve_maps_like_vllm_with_its_own_names() -> None:
    mapped = map_exposition(trtllm_text(), ENGINES["trtllm"])
    assert mapped.gauges["inferwatch_queue_depth"] == {M: 11.0}
    assert mapped.gauges["inferwatch_requests_running"] == {M: 32.0}
    assert mapped.gauges["inferwatch_kv_cache_usage_ratio"] == {M: 0.9}
    assert mapped.gauges["inferwatch_max_num_seqs"] == {M: 32.0}  # static batch size first
    assert mapped.counters["inferwatch_prefix_cache_hits"] == {M: 1250.0}
    assert mapped.counters["inferwatch_requests_finished"] == {
        (*M, ("reason", "stop")): 7.0,
        (*M, ("reason", "length")): 2.0,
    }
    assert "inferwatch_requests_rejected" not in mapped.counters
    assert mapped.histograms["inferwatch_ttft_seconds"][M].count == 2
    assert mapped.histograms["inferwatch_tpot_seconds"][M].bounds[0] == 0.01
    assert mapped.histograms["inferwatch_queue_time_seconds"][M].count == 1


# --------------------------------------------------------------------------- LMDeploy
def lmdeploy_text() -> str:
    """Two data-parallel engines; prometheus_client without _created samples."""

    def lab(e: int) -> LabelSet:
        return {"model_name": "m", "engine": str(e)}

    reasons = [("ResponseType.FINISH", 9), ("ResponseType.CANCEL", 1)]
    reasons += [("ResponseType.INTERNAL_ENGINE_ERROR", 1), ("ResponseType.SUCCESS", 0)]
    return "".join(
        [
            gauge("lmdeploy:num_requests_waiting", [(lab(0), 2), (lab(1), 5)]),
            gauge("lmdeploy:num_requests_running", [(lab(0), 10), (lab(1), 12)]),
            gauge("lmdeploy:gpu_cache_usage_perc", [(lab(0), 0.5), (lab(1), 0.7)]),
            counter("lmdeploy:prompt_tokens", [(lab(0), 300), (lab(1), 700)]),
            counter("lmdeploy:generation_tokens", [(lab(0), 30), (lab(1), 70)]),
            counter(
                "lmdeploy:request_success",
                [({**lab(e), "finished_reason": r}, n) for e in (0, 1) for r, n in reasons],
            ),
            histogram(
                "lmdeploy:request_prompt_tokens",
                (1, 2, 5, 10, 20, 50, 100, 200, 500),
                [(lab(0), [100, 200]), (lab(1), [300])],
            ),
            histogram(
                "lmdeploy:request_cached_tokens",
                (1, 2, 5, 10, 20, 50, 100, 200, 500),
                [(lab(0), [50, 100]), (lab(1), [0])],
            ),
            histogram(
                "lmdeploy:time_to_first_token_seconds", VLLM_TTFT, [(lab(0), [0.2]), (lab(1), [])]
            ),
            histogram("lmdeploy:iter_token_latency", VLLM_TPOT, [(lab(0), [0.03]), (lab(1), [])]),
            histogram(
                "lmdeploy:time_per_output_token_seconds", VLLM_TPOT, [(lab(0), [9.0]), (lab(1), [])]
            ),
            histogram("lmdeploy:e2e_request_latency_seconds", VLLM_E2E, [(lab(0), [2.0])]),
            histogram("lmdeploy:request_queue_time_seconds", VLLM_E2E, [(lab(0), [0.1])]),
        ]
    )


def test_lmdeploy_ranks_reasons_and_cache_token_sums() -> None:
    mapped = map_exposition(lmdeploy_text(), ENGINES["lmdeploy"])
    assert mapped.gauges["inferwatch_queue_depth"] == {M: 7.0}
    assert mapped.gauges["inferwatch_requests_running"] == {M: 22.0}
    assert mapped.gauges["inferwatch_kv_cache_usage_ratio"] == {M: pytest.approx(0.6)}
    assert mapped.counters["inferwatch_prompt_tokens"] == {M: 1000.0}
    assert mapped.counters["inferwatch_requests_finished"] == {
        (*M, ("reason", "success")): 18.0,
        (*M, ("reason", "abort")): 2.0,
        (*M, ("reason", "error")): 2.0,
    }
    assert mapped.counters["inferwatch_request_prompt_tokens"] == {M: 600.0}
    assert mapped.counters["inferwatch_prefix_cache_hits"] == {M: 150.0}
    # inter-token latency is preferred to the per-request mean
    assert mapped.histograms["inferwatch_tpot_seconds"][M].sum == pytest.approx(0.03)


# --------------------------------------------------------------------------- NIM
NIM_TTFT = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10,
)  # fmt: skip
NIM_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
NIM_E2E = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


def nim_text() -> str:
    lab = {"model_name": "meta/llama-3.1-8b-instruct"}
    return "".join(
        [
            counter("python_gc_objects_collected", [({"generation": "0"}, 12502)]),
            gauge("num_requests_running", [(lab, 1)]),
            gauge("num_requests_waiting", [(lab, 0)]),
            gauge("num_request_max", [(lab, 64)]),
            gauge("gpu_cache_usage_perc", [(lab, 0.0002848191398461977)]),
            counter("prompt_tokens", [(lab, 109)]),
            counter("generation_tokens", [(lab, 174)]),
            histogram("time_to_first_token_seconds", NIM_TTFT, [(lab, [0.015, 0.03, 0.7])]),
            histogram("time_per_output_token_seconds", NIM_TPOT, [(lab, [0.02] * 4)]),
            histogram("e2e_request_latency_seconds", NIM_E2E, [(lab, [0.5, 0.6])]),
            counter("request_finish", [({"finished_reason": "length", **lab}, 5)]),
            counter("request_success", [(lab, 5)]),
            counter("request_failure", [(lab, 0)]),
        ]
    )


def test_nim_unprefixed_vllm_like_names() -> None:
    mapped = map_exposition(nim_text(), ENGINES["nim"])
    m = (("model", "meta/llama-3.1-8b-instruct"),)
    assert mapped.gauges["inferwatch_queue_depth"] == {m: 0.0}
    assert mapped.gauges["inferwatch_requests_running"] == {m: 1.0}
    assert mapped.gauges["inferwatch_max_num_seqs"] == {m: 64.0}
    assert mapped.gauges["inferwatch_kv_cache_usage_ratio"] == {m: pytest.approx(0.000284819)}
    assert mapped.counters["inferwatch_prompt_tokens"] == {m: 109.0}
    assert mapped.counters["inferwatch_requests_finished"] == {
        (*m, ("reason", "length")): 5.0,
        (*m, ("reason", "error")): 0.0,
    }
    assert mapped.histograms["inferwatch_ttft_seconds"][m].count == 3
    assert mapped.histograms["inferwatch_tpot_seconds"][m].count == 4
    assert mapped.histograms["inferwatch_e2e_latency_seconds"][m].count == 2


# --------------------------------------------------------------------------- detection
TEXTS = {
    "sglang": sglang_text,
    "tgi": tgi_text,
    "llamacpp": llamacpp_text,
    "triton": triton_text,
    "trtllm": trtllm_text,
    "lmdeploy": lmdeploy_text,
    "nim": nim_text,
}


@pytest.mark.parametrize("engine", sorted(TEXTS))
def test_auto_detection_by_prefix_or_markers(engine: str) -> None:
    text = TEXTS[engine]()
    assert detect(family_names(text)) is ENGINES[engine]
    # expositions without TYPE lines are detected from their sample names
    untyped = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert detect(sample_names(untyped)) is ENGINES[engine]


@pytest.mark.parametrize(
    "names",
    [
        {"num_requests_running"},  # one generic name is not NIM
        {"num_requests_running_total", "http_requests_total"},
        {"node_cpu_seconds_total", "go_goroutines"},
        {"nv_gpu_utilization", "DCGM_FI_DEV_GPU_UTIL"},  # GPU exporters are not Triton
        {"python_gc_objects_collected_total", "process_cpu_seconds_total"},
    ],
)
def test_no_false_positives(names: set[str]) -> None:
    assert detect(names) is None


def test_metrics_locations_for_auto_and_for_a_known_engine() -> None:
    url = "http://10.0.0.5:8000"
    assert metrics_locations(url) == [
        (url, "/metrics"),
        (url, "/prometheus/metrics"),
        (url, "/v1/metrics"),
        ("http://10.0.0.5:8002", "/metrics"),
    ]
    assert metrics_locations(url, ENGINES["nim"]) == [(url, "/v1/metrics")]
    assert metrics_locations(url, ENGINES["triton"]) == [
        (url, "/metrics"),
        ("http://10.0.0.5:8002", "/metrics"),
    ]
    assert metrics_locations("http://h:8002", ENGINES["triton"]) == [("http://h:8002", "/metrics")]


# --------------------------------------------------------------------------- table invariants
CONTRACT = {
    "inferwatch_queue_depth",
    "inferwatch_requests_running",
    "inferwatch_max_num_seqs",
    "inferwatch_kv_cache_usage_ratio",
    "inferwatch_preemptions",
    "inferwatch_prompt_tokens",
    "inferwatch_generation_tokens",
    "inferwatch_requests_finished",
    "inferwatch_requests_rejected",
    "inferwatch_ttft_seconds",
    "inferwatch_tpot_seconds",
    "inferwatch_e2e_latency_seconds",
    "inferwatch_queue_time_seconds",
    # docs/metrics.md, Extensions (issue 23 item 3)
    "inferwatch_prefill_time_seconds",
    "inferwatch_decode_time_seconds",
    "inferwatch_prompt_length_tokens",
    "inferwatch_generation_length_tokens",
    # a plain gauge where the engine states it (SGLang's LoRA pool), else from EngineMap.lora
    "inferwatch_lora_max_adapters",
}
DERIVED = {
    "inferwatch_prefix_cache_hit_ratio",
    "inferwatch_tpot_mean_seconds",
    "inferwatch_e2e_latency_mean_seconds",
}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_tables_export_only_contract_families_with_one_label_set_each(engine: str) -> None:
    table = ENGINES[engine]
    exported = {s.target for s in table.signals if s.export}
    assert exported <= CONTRACT, exported - CONTRACT
    assert {r.target for r in table.ratios} <= DERIVED
    internal = {s.target for s in table.signals}
    for r in table.ratios:
        assert {r.numerator, r.denominator} <= internal
    for s in table.signals:
        # every series of a family must carry the same labels: a finished-request
        # counter always says why, the others never carry a reason
        contract_labels = set(s.labels.values()) | set(s.const)
        if s.target == "inferwatch_requests_finished":
            assert contract_labels == {"reason"}, s
        else:
            assert not contract_labels, s


def test_alerts_on_signals_an_engine_lacks_stay_silent() -> None:
    """promtool runs alerts/tests/engines-missing-signals.test.yaml against the rule files."""
    case = REPO / "alerts" / "tests" / "engines-missing-signals.test.yaml"
    result = promtool("test", "rules", str(case))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@settings(max_examples=60, deadline=None)
@given(
    engine=st.sampled_from(sorted(TEXTS)),
    cut=st.integers(min_value=0, max_value=4000),
    junk=st.text(max_size=40),
)
def test_damaged_expositions_map_or_fail_cleanly(engine: str, cut: int, junk: str) -> None:
    """A cut-off or garbled exposition is a ParseError or maps to sane values, never a crash."""
    text = TEXTS[engine]()
    damaged = text[:cut] + junk + text[cut:]
    try:
        mapped = map_exposition(damaged, ENGINES[engine])
    except ParseError:
        return
    for series in mapped.counters.values():
        assert all(v >= 0 and math.isfinite(v) for v in series.values())
    for hseries in mapped.histograms.values():
        for h in hseries.values():
            assert all(c >= 0 for c in h.counts) and h.bounds[-1] == math.inf


def test_status_hints_name_what_an_http_error_means() -> None:
    # llama-server answers 501 on /metrics without --metrics
    assert "--metrics" in status_hint(501)
    assert status_hint(501, ENGINES["llamacpp"]) == status_hint(501)
    assert status_hint(501, ENGINES["vllm"]) == ""
    assert status_hint(404) == ""
