"""The "what to look at" list: the field guide's closed loops (section 6.2) applied to the week.

Each rule reads the figures of :mod:`summary` and, when its condition holds,
says what it saw (with the numbers) and what to do. The loops:

1. utilization persistently low (< ``idle_below``) while latency is fine:
   compute idles; check the spread of requests before scaling down;
2. TTFT P95 above ``warmup_p95_seconds`` while the GPU is not busy: a missing
   warm-up; warm up before joining the load balancer, prefix caching;
3. VRAM near its limit: prefix caching, FP8 KV cache, headroom with
   ``--gpu-memory-utilization 0.85``; scale out or rate-limit when the queue
   also overflows.

Plus the guide's other rules of thumb: the queue over ``max_num_seqs`` is the
leading indicator (6 FAQ), P99 five times P50 is a long tail (6.1), utilization
above the scale-review line (6.1) and in the waste band (6.1), SLO regressions
week over week, and the alerts that fired most.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from inferwatch.report import fmt
from inferwatch.report.model import SLO_TARGET, mean
from inferwatch.report.summary import Finding, GpuFigures, ModelFigures, Report, ScopeFigures

REGRESSION = 0.20  # week-over-week rise of a P99 worth a look
VRAM_GROWTH = 0.03  # VRAM peak growth (ratio points) worth a look
SCALE_REVIEW_SHARE = 0.10  # share of the week above the scale-review line
WASTE_DAY_SHARE = 0.5  # a day "in the waste band" when most of it was
IMBALANCE = 1.5  # busiest worker / quietest worker, by requests


def findings(report: Report) -> list[Finding]:
    out: list[Finding] = []
    gpus = {g.uuid: g for g in report.gpus}
    for m in report.models:
        model_gpus = [gpus[u] for u in m.gpus if u in gpus]
        out.extend(_slo_regressions(report, m, model_gpus))
        out.extend(_warmup(report, m))
        out.extend(_idle(report, m, model_gpus))
        out.extend(_queue(report, m))
        out.extend(_long_tail(report, m))
    for g in report.gpus:
        out.extend(_vram(report, g))
        out.extend(_scale_review(report, g))
    out.extend(_waste_days(report))
    out.extend(_alerts(report))
    if not any(f.level in ("act", "watch") for f in out):
        out.append(
            Finding(
                "ok",
                "All lifelines",
                "Nothing needs a look this week.",
                "GPU utilization, latency, VRAM and queue depth stayed within their bands.",
                "Keep the weekly review: compare next week's table with this one.",
            )
        )
    order = {"act": 0, "watch": 1, "ok": 2}
    return sorted(out, key=lambda f: order.get(f.level, 3))


def _days(report: Report, indices: Sequence[int]) -> str:
    starts = report.period.day_starts()
    return ", ".join(fmt.day(starts[i]) for i in indices)


def _current_indices(report: Report) -> range:
    return range(report.period.days, 2 * report.period.days)


def _gpu_util_on_day(gpus: Sequence[GpuFigures], i: int) -> float | None:
    return mean(g.util_daily.get("mean", ())[i] if g.util_daily.get("mean") else None for g in gpus)


def _latency_ok(scope: ScopeFigures) -> bool | None:
    """True when every latency with an SLO met it this period; None when none is known."""
    known = [
        lat.attainment.current
        for lat in scope.latency.values()
        if lat.attainment is not None and lat.attainment.current is not None
    ]
    if not known:
        return None
    return all(a >= SLO_TARGET for a in known)


def _slo_regressions(
    report: Report, m: ModelFigures, gpus: Sequence[GpuFigures]
) -> Iterator[Finding]:
    for name in ("ttft", "tpot"):
        lat = m.total.latency.get(name)
        if lat is None or lat.attainment is None or lat.slo is None:
            continue
        p99 = lat.week[0.99]
        att = lat.attainment.current
        rising = p99.ratio is not None and p99.ratio >= REGRESSION
        missed = att is not None and att < SLO_TARGET
        if not (rising or missed):
            continue
        label = "TTFT" if name == "ttft" else "TPOT"
        first = None
        for i in _current_indices(report):
            v = lat.daily[0.99][i]
            prev = p99.previous
            if v is not None and (
                v > lat.slo or (prev is not None and v > prev * (1 + REGRESSION))
            ):
                first = i
                break
        evidence = f"{label} P99 {fmt.seconds(p99.current)} this week"
        if p99.previous is not None:
            evidence += (
                f" against {fmt.seconds(p99.previous)} the week before ({fmt.delta(p99, 'rel')})"
            )
        evidence += "."
        if first is not None:
            evidence += f" It first went up on {_days(report, [first])}."
        if att is not None:
            evidence += (
                f" {fmt.percent(att, 1)} of {'requests' if name == 'ttft' else 'tokens'} "
                f"within the {fmt.seconds(lat.slo)} SLO (target {fmt.percent(SLO_TARGET)})."
            )
        busy = mean(g.util["mean"].current for g in gpus if "mean" in g.util)
        if name == "ttft":
            action = (
                "A slow first token points at prompt processing, a cold KV cache or model "
                "loading. Look for new long prompts (give them a separate long-context "
                "pool), warm-up after restarts and prefix caching; "
                "--max-num-batched-tokens 4096-8192 balances prefill against decoding."
            )
        else:
            action = (
                "Slow decoding means busy compute, batch settings or memory bandwidth: "
                "lower --max-num-seqs or scale out, and check for throttling."
            )
        if busy is not None and busy >= report.bands.scale_review_above:
            action += " Its GPUs were busy: this is compute-bound, review scaling out."
        yield Finding(
            "act" if missed else "watch",
            "SLO",
            f"{m.total.model}: {label} P99 {'missed its SLO' if missed else 'got worse'}",
            evidence,
            action,
        )


def _warmup(report: Report, m: ModelFigures) -> Iterator[Finding]:
    """Loop 2: TTFT P95 above the warm-up line while the GPU is not busy."""
    idle = report.bands.idle_below
    line = report.bands.ttft_warmup_p95_seconds
    gpus_of = {
        w: [g for g in report.gpus if w in g.workers] for g in report.gpus for w in g.workers
    }
    hits: list[tuple[str, list[int], float, float]] = []
    for w in m.workers:
        lat = w.latency.get("ttft")
        gpus = gpus_of.get(w.worker, [])
        if lat is None or not gpus:
            continue
        days = []
        worst = 0.0
        util_seen = []
        for i in _current_indices(report):
            p95 = lat.daily[0.95][i]
            util = _gpu_util_on_day(gpus, i)
            if p95 is not None and util is not None and p95 > line and util < idle:
                days.append(i)
                worst = max(worst, p95)
                util_seen.append(util)
        if days:
            hits.append((w.worker, days, worst, max(util_seen)))
    if not hits:
        return
    evidence = " ".join(
        f"{worker}: TTFT P95 up to {fmt.seconds(worst)} on {_days(report, days)} while its "
        f"GPU averaged {fmt.percent(util)} busy."
        for worker, days, worst, util in hits
    )
    yield Finding(
        "act",
        "Loop 2 · warm-up",
        f"{m.total.model}: slow first tokens on an idle GPU",
        evidence + f" (Lines: P95 {fmt.seconds(line)}, idle below {fmt.percent(idle)}.)",
        "Most likely a cold path: CUDA kernels and KV-cache blocks are set up by the first real "
        "requests. Send a warm-up request when a worker starts, before it joins the load "
        "balancer; with a fixed system prompt, enable prefix caching (--enable-prefix-caching): "
        "the guide reports 30-60 % lower TTFT.",
    )


def _idle(report: Report, m: ModelFigures, gpus: Sequence[GpuFigures]) -> Iterator[Finding]:
    """Loop 1: utilization persistently low while latency is fine."""
    util = mean(g.util["mean"].current for g in gpus if "mean" in g.util)
    if util is None or util >= report.bands.idle_below or _latency_ok(m.total) is not True:
        return
    evidence = (
        f"Its GPUs ({', '.join(g.label for g in gpus)}) averaged {fmt.percent(util)} "
        f"busy, below {fmt.percent(report.bands.idle_below)}, and latency met its SLOs."
    )
    loads = [(w.requests.current or 0.0, w.worker) for w in m.workers]
    if len(loads) >= 2:
        busiest, quietest = max(loads), min(loads)
        if quietest[0] > 0 and busiest[0] / quietest[0] >= IMBALANCE:
            evidence += (
                f" {busiest[1]} served {busiest[0] / quietest[0]:.1f}x the requests of "
                f"{quietest[1]}: the load is not spread evenly."
            )
    yield Finding(
        "watch",
        "Loop 1 · idle compute",
        f"{m.total.model}: GPUs mostly idle",
        evidence,
        "Before scaling down, check that requests reach every GPU evenly: route with least "
        "connections (nginx least_conn, HAProxy leastconn) instead of random, or run one model "
        "instance across the GPUs so the engine balances the load itself.",
    )


def _queue(report: Report, m: ModelFigures) -> Iterator[Finding]:
    for w in m.workers:
        over = w.over_capacity
        if over is None or not over.current:
            continue
        days = [
            i
            for i in _current_indices(report)
            if w.over_capacity_daily and (w.over_capacity_daily[i] or 0) > 0
        ]
        peak = w.queue_peak.current if w.queue_peak else None
        yield Finding(
            "act",
            "Queue · leading indicator",
            f"{w.worker}: queue above batch capacity for {fmt.duration(over.current)}",
            f"Queue depth peaked at {fmt.count(peak)} with max_num_seqs "
            f"{fmt.count(w.capacity)}; over capacity on {_days(report, days)} "
            f"({fmt.delta(over, 'abs_seconds')} against the week before).",
            "The queue moves before utilization and latency do: scale out or rate-limit when it "
            "stays above max_num_seqs, rather than waiting for latency alerts. If VRAM allows, "
            "size --max-num-seqs as (VRAM GB x 0.8 - weights GB) / KV GB per sequence.",
        )


def _long_tail(report: Report, m: ModelFigures) -> Iterator[Finding]:
    lat = m.total.latency.get("e2e")
    if lat is None:
        return
    p50, p99 = lat.week[0.5].current, lat.week[0.99].current
    if not p50 or p99 is None or p99 < report.bands.tail_ratio * p50:
        return
    yield Finding(
        "watch",
        "Long tail",
        f"{m.total.model}: end-to-end P99 is {p99 / p50:.1f}x the P50",
        f"P50 {fmt.seconds(p50)}, P99 {fmt.seconds(p99)} (line: {report.bands.tail_ratio:g}x).",
        "A few long requests hold the batch: route with least connections and send long-context "
        "requests to a separate pool with its own --max-model-len.",
    )


def _vram(report: Report, g: GpuFigures) -> Iterator[Finding]:
    b = report.bands
    peak = g.vram_peak.current
    if peak is None:
        return
    growth = []
    if g.vram_trend is not None and g.vram_trend >= VRAM_GROWTH:
        growth.append(f"the daily peak grew {g.vram_trend * 100:.0f} pts over the week")
    if g.vram_peak.delta is not None and g.vram_peak.delta >= VRAM_GROWTH:
        growth.append(
            f"{g.vram_peak.delta * 100:.0f} pts above last week's peak "
            f"({fmt.percent(g.vram_peak.previous)})"
        )
    grew = ("; " + " and ".join(growth)) if growth else ""
    workers = [w for m in report.models for w in m.workers if w.worker in g.workers]
    queued = [w.worker for w in workers if w.over_capacity and w.over_capacity.current]
    if peak >= b.vram_scale_above:
        if queued:
            action = (
                f"VRAM is full and the queue of {', '.join(queued)} overflowed: scale out "
                "or rate-limit."
            )
        else:
            action = (
                "Lowering --max-num-seqs only treats the symptom. Enable automatic prefix "
                "caching (30 %+ less KV memory when prompts share a prefix), an FP8 KV "
                "cache (--kv-cache-dtype fp8, about half the KV memory) and leave headroom "
                "with --gpu-memory-utilization 0.85."
            )
        yield Finding(
            "act",
            "Loop 3 · VRAM",
            f"{g.label}: VRAM peak {fmt.percent(peak)}, above the {fmt.percent(b.vram_scale_above)}"
            " line",
            f"Peak {fmt.percent(peak)} of {fmt.gib(g.vram_bytes_peak.current if g.vram_bytes_peak else None)} "
            f"used{grew}.",
            action,
        )
        return
    ttft_p99 = [
        m.total.latency["ttft"].week[0.99].current
        for m in report.models
        if m.total.model in g.models and "ttft" in m.total.latency
    ]
    known = [v for v in ttft_p99 if v is not None]
    if peak >= b.vram_squeeze_above:
        if known and max(known) <= b.vram_squeeze_p99_ok_seconds:
            yield Finding(
                "ok",
                "Loop 3 · VRAM",
                f"{g.label}: VRAM {fmt.percent(peak)} with fast first tokens: a healthy squeeze",
                f"TTFT P99 {fmt.seconds(max(known))} (under {fmt.seconds(b.vram_squeeze_p99_ok_seconds)}).",
                "No action: a full KV cache with a fast P99 is the memory doing its job.",
            )
            return
        if growth:
            yield Finding(
                "watch",
                "Loop 3 · VRAM",
                f"{g.label}: VRAM peak {fmt.percent(peak)} and rising",
                f"Peak {fmt.percent(peak)}{grew}; the scale line is "
                f"{fmt.percent(b.vram_scale_above)}.",
                "Make room before it gets there: prefix caching, an FP8 KV cache, "
                "--gpu-memory-utilization 0.85.",
            )
        return
    if growth:
        yield Finding(
            "watch",
            "Loop 3 · VRAM",
            f"{g.label}: VRAM peak rising ({fmt.percent(peak)})",
            f"Peak {fmt.percent(peak)}{grew}.",
            "Watch the trend: at this pace it reaches the squeeze line "
            f"({fmt.percent(b.vram_squeeze_above)}) in a few weeks.",
        )


def _scale_review(report: Report, g: GpuFigures) -> Iterator[Finding]:
    share = g.bands.get("scale_review")
    if share is None or share.current is None or share.current < SCALE_REVIEW_SHARE:
        return
    line = fmt.percent(report.bands.scale_review_above)
    yield Finding(
        "watch",
        "Scale review",
        f"{g.label}: above {line} busy for {fmt.percent(share.current)} of the week",
        f"Utilization P90 {fmt.percent(g.util['p90'].current if 'p90' in g.util else None)}; "
        f"{fmt.delta(share, 'pts')} against the week before.",
        "Review scaling out: near 80 %+ the P99 sits at its knee and a 10-20 % rise in traffic "
        f"makes it jump. Aim for the {fmt.percent(report.bands.healthy_low)}-"
        f"{fmt.percent(report.bands.healthy_high)} band.",
    )


def _waste_days(report: Report) -> Iterator[Finding]:
    per_day: dict[int, list[GpuFigures]] = {}
    for g in report.gpus:
        waste = g.band_daily.get("waste")
        if not waste:
            continue
        for i in _current_indices(report):
            v = waste[i]
            if v is not None and v >= WASTE_DAY_SHARE:
                per_day.setdefault(i, []).append(g)
    if not per_day:
        return
    days = sorted(per_day)
    names = sorted({g.label for gs in per_day.values() for g in gs})
    line = fmt.percent(report.bands.waste_below)
    yield Finding(
        "watch",
        "Waste band",
        f"GPUs below {line} busy most of {_days(report, days)}",
        f"{', '.join(names)} spent most of {'that day' if len(days) == 1 else 'those days'} in "
        f"the waste band (under {line}).",
        "If this is a quiet period every week, scale down on a schedule or co-locate small "
        "models on these GPUs (MIG, several workers per GPU); first make sure the traffic is "
        "spread evenly.",
    )


def _alerts(report: Report) -> Iterator[Finding]:
    for a in report.alerts[:2]:
        cur = a.firings.current or 0
        if cur == 0 and not a.seconds.current:
            continue
        evidence = (
            f"{a.alertname} ({a.severity or 'no severity'}) fired {cur:.0f} time"
            f"{'s' if cur != 1 else ''}, {fmt.duration(a.seconds.current)} in all "
            f"(the week before: {a.firings.previous or 0:.0f}, "
            f"{fmt.duration(a.seconds.previous)}); on {', '.join(a.subjects)}."
        )
        yield Finding(
            "watch" if a.severity != "critical" else "act",
            "Alerts",
            f"{a.alertname} fired {cur:.0f}x",
            evidence,
            f"Follow its runbook: {report.bands.runbook_url(a.alertname)}",
        )
