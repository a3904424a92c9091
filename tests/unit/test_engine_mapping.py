"""vLLM's exposition in every format of the reference doc, mapped onto the contract."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.vllm_text import TTFT_BUCKETS, EngineValues, render

from inferwatch.engines import ENGINES, detect
from inferwatch.engines.mapping import (
    Mapped,
    ParseError,
    family_names,
    map_exposition,
    parse,
    prefilter,
)
from inferwatch.stats import histogram_quantile

VLLM = ENGINES["vllm"]
M = (("model", "m"),)


def busy(scale: int = 1) -> EngineValues:
    return EngineValues(
        running=4 * scale,
        waiting=7 * scale,
        kv=0.25 * scale,
        prefix_queries=1000 * scale,
        prefix_hits=400 * scale,
        preemptions=2 * scale,
        prompt_tokens=5000 * scale,
        generation_tokens=800 * scale,
        finished={"stop": 10 * scale, "length": 3 * scale, "abort": 0, "error": 1},
        ttft=[0.05, 0.2, 0.3, 1.5] * scale,
        itl=[0.02, 0.03] * scale,
        e2e=[1.2, 3.0] * scale,
        queue_time=[0.1] * scale,
    )


def test_v1_single_engine_maps_every_signal() -> None:
    mapped = map_exposition(render("v1", [busy()]), VLLM)
    assert mapped.engine == "vllm"
    assert mapped.gauges["inferwatch_queue_depth"] == {M: 7.0}
    assert mapped.gauges["inferwatch_requests_running"] == {M: 4.0}
    assert mapped.gauges["inferwatch_kv_cache_usage_ratio"] == {M: 0.25}
    assert mapped.counters["inferwatch_preemptions"] == {M: 2.0}
    assert mapped.counters["inferwatch_prompt_tokens"] == {M: 5000.0}
    assert mapped.counters["inferwatch_generation_tokens"] == {M: 800.0}
    assert mapped.counters["inferwatch_requests_rejected"] == {M: 0.0}
    finished = mapped.counters["inferwatch_requests_finished"]
    assert finished[(("model", "m"), ("reason", "stop"))] == 10.0
    assert finished[(("model", "m"), ("reason", "error"))] == 1.0
    ttft = mapped.histograms["inferwatch_ttft_seconds"][M]
    assert ttft.bounds == (*TTFT_BUCKETS, math.inf)
    assert ttft.count == 4 and ttft.sum == pytest.approx(2.05)
    assert set(mapped.histograms) == {
        "inferwatch_ttft_seconds",
        "inferwatch_tpot_seconds",
        "inferwatch_e2e_latency_seconds",
        "inferwatch_queue_time_seconds",
    }


def test_created_samples_and_unused_families_are_ignored() -> None:
    text = render("v1", [busy()])
    assert "vllm:prompt_tokens_created" in text and "python_gc" in text
    kept = prefilter(text, VLLM.source_families())
    assert "_created" not in kept
    assert "python_gc" not in kept and "iteration_tokens" not in kept
    assert "vllm:prompt_tokens_total" in kept


def test_data_parallel_sums_counts_averages_ratios_and_takes_max_over_pids() -> None:
    a, b = busy(1), busy(2)
    b.kv = 0.75
    mapped = map_exposition(render("dp", [a, b]), VLLM)
    assert mapped.gauges["inferwatch_queue_depth"] == {M: 21.0}
    assert mapped.gauges["inferwatch_requests_running"] == {M: 12.0}
    # pid duplicates (0.0 from idle API servers) take the max, then ranks average
    assert mapped.gauges["inferwatch_kv_cache_usage_ratio"] == {M: pytest.approx(0.5)}
    assert mapped.counters["inferwatch_prompt_tokens"] == {M: 15000.0}
    hist = mapped.histograms["inferwatch_ttft_seconds"][M]
    assert hist.count == 12 and hist.sum == pytest.approx(6.15)


def test_v0_and_renamed_metrics_map_to_the_same_contract() -> None:
    current = map_exposition(render("v1", [busy()]), VLLM)
    for fmt in ("v0", "v011"):
        old = map_exposition(render(fmt, [busy()]), VLLM)
        for table in ("gauges", "histograms"):
            assert getattr(old, table) == getattr(current, table), (fmt, table)
        for name, series in current.counters.items():
            if fmt == "v0" and name == "inferwatch_requests_rejected":
                assert name not in old.counters  # V0 had no admission rejections
                continue
            assert old.counters[name] == series, (fmt, name)


def test_disabled_log_stats_has_no_engine_data() -> None:
    text = render("disabled", [])
    assert detect(family_names(text)) is None
    assert not map_exposition(text, VLLM).has_data


def test_detection_by_prefix() -> None:
    assert detect(family_names(render("v0", [busy()]))) is VLLM
    assert detect({"node_cpu_seconds_total"}) is None


def test_window_quantile_from_mapped_buckets_matches_promql_arithmetic() -> None:
    mapped = map_exposition(render("v1", [busy()]), VLLM)
    hist = mapped.histograms["inferwatch_ttft_seconds"][M]
    buckets = list(zip(hist.bounds, hist.counts, strict=True))
    # 4 observations 0.05, 0.2, 0.3, 1.5 fall in the buckets
    # (0.04, 0.06], (0.1, 0.25], (0.25, 0.5] and (1, 2.5]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.25)
    assert histogram_quantile(0.99, buckets) == pytest.approx(1.0 + 1.5 * 0.96)


def test_garbage_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse('vllm:num_requests_waiting{model_name="m" 3\n', {"vllm:num_requests_waiting"})


def mapped_or_none(text: str) -> Mapped | None:
    """``text`` mapped as vLLM's, None on a ParseError; counters finite and >= 0, no NaN gauge."""
    try:
        mapped = map_exposition(text, VLLM)
    except ParseError:
        return None
    for series in mapped.counters.values():
        assert all(v >= 0 and math.isfinite(v) for v in series.values())
    for series in mapped.gauges.values():
        assert not any(math.isnan(v) for v in series.values())
    return mapped


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_never_escapes_as_anything_but_parse_error(text: str) -> None:
    families = VLLM.source_families()
    mapped = mapped_or_none(text)
    if mapped is None:
        return
    for hseries in mapped.histograms.values():
        for h in hseries.values():
            assert all(c >= 0 for c in h.counts)
    assert families  # the table is never empty


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(
        [
            "vllm:num_requests_waiting",
            "vllm:prompt_tokens_total",
            "vllm:time_to_first_token_seconds_bucket",
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
)
def test_nan_and_negative_samples_never_reach_counters(name: str, value: float) -> None:
    labels = 'model_name="m",engine="0"'
    if name.endswith("_bucket"):
        labels += ',le="+Inf"'
    text = f"{name}{{{labels}}} {value!r}\n".replace("nan", "NaN").replace("inf", "Inf")
    mapped_or_none(text)


def _shape(families: object) -> list[tuple[object, ...]]:
    return [
        (f.name, f.type, f.documentation,
         [(s.name, s.labels, repr(s.value), s.timestamp) for s in f.samples])
        for f in families  # type: ignore[attr-defined]
    ]  # fmt: skip


@pytest.mark.parametrize("fmt", ["v1", "dp", "v0", "v011", "disabled"])
def test_series_cache_reads_exactly_like_the_public_parser(fmt: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from inferwatch.engines import mapping

    if not mapping._SERIES_CACHE:
        pytest.skip("the installed prometheus_client does not allow the series cache")
    text = render(fmt, [busy(1), busy(2)] if fmt == "dp" else [busy()])
    public = _shape(text_string_to_metric_families(text))
    assert _shape(mapping._cached_families(text)) == public  # first read fills the cache
    assert _shape(mapping._cached_families(text)) == public  # second read uses it


label_values = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(label_values, st.floats(allow_nan=False)), min_size=1, max_size=6))
def test_series_cache_matches_the_parser_on_escaped_labels(rows: list[tuple[str, float]]) -> None:
    from prometheus_client import CollectorRegistry, Gauge, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from inferwatch.engines import mapping

    if not mapping._SERIES_CACHE:
        pytest.skip("the installed prometheus_client does not allow the series cache")
    registry = CollectorRegistry()
    gauge = Gauge("vllm:odd", "Odd labels.", ["model_name", "engine"], registry=registry)
    for i, (label, value) in enumerate(rows):
        gauge.labels(label, str(i)).set(value)
    text = generate_latest(registry).decode()
    public = _shape(text_string_to_metric_families(text))
    assert _shape(mapping._cached_families(text)) == public
    assert _shape(mapping._cached_families(text)) == public


def test_engine_facts_from_cache_config_info() -> None:
    mapped = map_exposition(render("v1", [busy()]), VLLM)
    assert mapped.facts == {
        "prefix_caching": "true",
        "gpu_memory_utilization": "0.9",
        "kv_cache_dtype": "auto",
    }
    assert map_exposition(render("v0", [busy()]), VLLM).facts == {}  # V0 had no such family
