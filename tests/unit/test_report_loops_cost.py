"""Issue 29: the weekly report's figures that contradicted the guide, each held by a test
that failed before its fix.

- the cost section named a waster's loop from its own TTFT P95 > 2 s figure, so an
  overloaded model was told to warm up: it reads the loops of ``pack.loops`` the
  report's findings hold (the definition the alerts, advise and the insights share);
- impossible latency figures: a TTFT P99 of 631 s for a load 377 s old, above the
  end-to-end P99 (interpolation in a wide bucket, or PromQL's answer for a rank in the
  +Inf bucket): a quantile past the largest finite bucket reads "over X", and a TTFT
  quantile is never shown above the end-to-end one;
- the weekly memory peak of a vLLM GPU was NVML's flat 97 % reservation: it is the
  KV-cache usage where the engine exports it (the memory pressure), named so.
"""

from __future__ import annotations

import math

from tests.support import scenarios as S

from inferwatch.pack import fmt
from inferwatch.pack import loops as L
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report import render
from inferwatch.report.build import build_report
from inferwatch.report.cost import RawCost, cost_section
from inferwatch.report.insights import loops_by_model
from inferwatch.report.model import (
    Buckets,
    Hourly,
    Over,
    Period,
    RawData,
    RawGpu,
    RawWorker,
    quantile,
)

T = load_thresholds()


def _cost_of(model: str) -> RawCost:
    """One model whose GPU was held idle 12 hours a day, both weeks."""
    day = (12.0,) * 14
    return RawCost(None, {(model, "held_idle"): day, (model, "serving"): day}, {}, {}, {}, {})


def test_an_overloaded_model_is_not_called_a_warm_up_problem() -> None:
    report = build_report(S.raw_data(S.run("overload", 1), T), T)
    (model,) = [m.total.model for m in report.models]
    # its first tokens were slow: queueing, far over the warm-up line, over the week
    ttft = report.models[0].total.latency["ttft"].week[0.95].current
    assert ttft is not None and ttft > T.ttft.warmup_p95_seconds
    loops = loops_by_model(report.findings)
    assert "over_capacity" in loops[model] and not {"warmup", "cold_start"} & loops[model]
    section = cost_section(_cost_of(model), Period(S.REPORT_END, 7), T, loops)
    assert section is not None
    (waster,) = section.wasters
    assert waster.loop_id == "over_capacity" and waster.loop == L.QUEUE_OVER_CAPACITY, waster
    text = "\n".join(render._cost_text(section))
    assert (
        "warm" not in text.lower()
        and "-> Queue over capacity (over capacity): scale with the load" in text
    )


def test_a_cold_start_is_the_warm_up_loop_and_idle_hours_alone_consolidate() -> None:
    report = build_report(S.raw_data(S.run("cold-start", 1), T), T)
    (model,) = [m.total.model for m in report.models]
    loops = loops_by_model(report.findings)
    section = cost_section(_cost_of(model), Period(S.REPORT_END, 7), T, loops)
    assert section is not None and section.wasters[0].loop_id == "cold_start"
    alone = cost_section(_cost_of("quiet"), Period(S.REPORT_END, 7), T, {})
    assert alone is not None and alone.wasters[0].loop_id == "consolidate"
    assert alone.wasters[0].loop == L.GPU_WASTE
    assert "-> GPU waste (consolidation): serve the model on fewer GPUs" in "\n".join(
        render._cost_text(alone)
    )


# --------------------------------------------------------------------------- figures

#: vLLM's TTFT buckets past 100 s (the wide ones the 631 s came from)
TTFT_BOUNDS = (1.0, 10.0, 80.0, 160.0, 320.0, 640.0, 2560.0, math.inf)


def _report(
    latency: dict[str, Buckets], started: tuple[float | None, ...] | None = None
) -> tuple[str, dict[str, object]]:
    period = Period(S.REPORT_END, 1)
    n = 2 * period.days
    worker = RawWorker.of_series(
        "m",
        "w0",
        "vllm",
        ("h:1",),
        histograms={name: (None, b) for name, b in latency.items()},
        requests=(None, 10.0),
        prompt_tokens=(None,) * n,
        generation_tokens=(None,) * n,
        started=started,
    )
    raw = RawData(period, (worker,), (), (), Hourly((), (), "", (), ()), ())
    report = build_report(raw, T)
    (w,) = report.models[0].workers
    return render.text(report), dict(w.latency)


def test_a_quantile_past_the_largest_finite_bucket_reads_over_the_bound() -> None:
    buckets = ((0.5, 10.0), (60.0, 90.0), (math.inf, 100.0))
    p99 = quantile(0.99, buckets)
    assert isinstance(p99, Over) and p99 == 60.0
    assert fmt.seconds(p99) == "over 60.0 s"
    # within the finite buckets: the interpolated number
    assert not isinstance(quantile(0.5, buckets), Over)
    text, lat = _report({"ttft": buckets})
    assert "over 60.0 s" in text, text
    assert isinstance(lat["ttft"].week[0.99].current, Over)  # type: ignore[attr-defined]


def test_ttft_is_never_shown_above_end_to_end() -> None:
    """The issue's figures: ten requests of a load 377 s old, every first token in the
    (320, 640] s bucket, every last token in (300, 400]: interpolation made a TTFT P99
    of 637 s against an end-to-end P99 of 399 s."""
    ttft = tuple((le, 0.0 if le <= 320.0 else 10.0) for le in TTFT_BOUNDS)
    e2e = ((100.0, 0.0), (300.0, 0.0), (400.0, 10.0), (math.inf, 10.0))
    assert (quantile(0.99, ttft) or 0) > 600  # what PromQL's interpolation says
    text, lat = _report({"ttft": ttft, "e2e": e2e})
    for q in (0.5, 0.95, 0.99):
        t_q = lat["ttft"].week[q].current  # type: ignore[attr-defined]
        e_q = lat["e2e"].week[q].current  # type: ignore[attr-defined]
        assert t_q is not None and e_q is not None and t_q <= e_q, (q, t_q, e_q)
        days = zip(lat["ttft"].daily[q], lat["e2e"].daily[q], strict=True)  # type: ignore[attr-defined]
        assert all(a is None or a <= b for a, b in days)
    assert "637" not in text and "631" not in text


def test_the_end_to_end_bound_never_goes_below_the_buckets_own_floor() -> None:
    """Requests still streaming have a first token and no end-to-end figure yet: where the
    end-to-end P99 is below the TTFT bucket's lower bound, the TTFT shown is that bound,
    which the observations are known to pass, never the smaller end-to-end figure."""
    ttft = tuple((le, 0.0 if le <= 320.0 else 10.0) for le in TTFT_BOUNDS)
    assert quantile(0.99, ttft, at_most=100.0) == 320.0
    assert quantile(0.99, ttft, at_most=400.0) == 400.0
    assert quantile(0.99, ttft, at_most=Over(60.0)) == quantile(0.99, ttft)


# --------------------------------------------------------------------------- memory peak


def test_the_memory_peak_of_a_pre_allocating_engine_is_its_kv_cache() -> None:
    period = Period(S.REPORT_END, 7)
    n = 2 * period.days
    kv = (None,) * 7 + (0.30, 0.40, 0.50, 0.55, 0.60, 0.70, 0.80)
    gpu = RawGpu(
        uuid="GPU-0",
        instance="h:10127",
        gpu="0",
        name="NVIDIA H200",
        util_daily={"mean": (0.5,) * n},
        band_daily={"waste": (0.0,) * n, "healthy": (1.0,) * n, "scale_review": (0.0,) * n},
        util_week={"mean": (0.5, 0.5)},
        sm_active_week=None,
        # vLLM reserved 0.95 of the card at start: NVML reads 97 % all week
        vram_peak_ratio=(0.97,) * n,
        vram_peak_bytes=None,
        workers=("vllm-0",),
        pressure_peak=kv,
        pressure_from="kv_cache",
    )
    raw = RawData(period, (), (gpu,), (), Hourly((), (), "", (), ()), ())
    report = build_report(raw, T)
    (g,) = report.gpus
    assert g.memory_source == "KV cache" and g.memory_daily[7:] == kv[7:]
    text = render.text(report)
    assert "80% KV cache" in text and "97%" not in text, text
    page = render.html(report, [], lambda c: c.name)
    assert "h GPU 0 (KV cache)" in page and "Memory peak" in page
    assert "97%" not in page
    # the CSV keeps NVML's figure under its own name, and adds the KV cache's
    rows = render.csv_text(report, None)
    assert "vram_peak_ratio,0.97" in rows and "kv_cache_usage_peak_ratio,0.8" in rows
    # a GPU whose engine exports no KV gauge: NVML's level, named VRAM
    plain = RawData(
        period,
        (),
        (RawGpu(**{**gpu.__dict__, "pressure_peak": None, "pressure_from": "gpu_memory"}),),
        (),
        Hourly((), (), "", (), ()),
        (),
    )
    (g,) = build_report(plain, T).gpus
    assert g.memory_source == "VRAM" and g.memory_daily == (0.97,) * n


def test_no_latency_above_the_datas_age() -> None:
    """The issue's report: TTFT P99 631 s when the load was 377 s old. Every first and last
    token of the ten requests fell in the (320, 640] s buckets; the worker's process
    started 377 s before the report's end, so no request took longer."""
    wide = tuple((le, 0.0 if le <= 320.0 else 10.0) for le in TTFT_BOUNDS)
    assert (quantile(0.99, wide) or 0) > 630  # PromQL's interpolation
    text, lat = _report({"ttft": wide, "e2e": wide}, started=(None, S.REPORT_END - 377.0))
    for name in ("ttft", "e2e"):
        figures = lat[name]
        assert figures.week[0.99].current == 377.0, name  # type: ignore[attr-defined]
        assert figures.daily[0.99][-1] == 377.0, name  # type: ignore[attr-defined]
    assert "377 s" in text and "637" not in text
    # the start not known: nothing bounds it (the interpolated figure, as PromQL's)
    _, lat = _report({"ttft": wide})
    assert (lat["ttft"].week[0.99].current or 0) > 630  # type: ignore[attr-defined]
