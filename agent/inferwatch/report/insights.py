"""The "what to look at" list: the closed loops of :mod:`inferwatch.pack.loops` over the week.

Each rule reads the figures of :mod:`summary` and asks ``pack.loops`` the same
condition the alert rules encode; when it holds, the finding says what it saw
(with the numbers) and what to do, and carries the loop's id (``Finding.id``):

- ``imbalance`` (low utilization with normal latency): a worker's GPUs or open requests more than
  ``load_imbalance.load_ratio`` times its peers' while the model's GPUs idle and
  its TTFT P99 is within the SLO; never "scale in";
- ``warmup`` and ``cold_start`` (slow first token on an idle GPU): TTFT P95 above the warm-up line on an
  idle GPU outside the cold-start window, and within it (after a (re)start);
- ``memory`` (VRAM near the limit): memory pressure (KV-cache usage where the engine exports
  it, NVML otherwise) above ``vram.scale_above`` with a worker's queue rising;
- ``preemptions``, ``over_capacity`` (the rules' batch capacity), ``long_tail``
  (TTFT or TPOT P99 at least ``latency.tail_ratio`` times the P50);
- ``consolidate``: days the GPU's utilization sat below the waste line, unless
  its model is imbalanced (the low-utilization loop forbids scaling in).

Each loop finding states its knob moves (``Finding.moves``, ``pack.ranking``), and the
list is ranked by ``pack.ranking`` within each level.

Outside the loops: SLO misses and regressions week over week (the TTFT SLO
leaves out the cold-start window after a start, as InferenceTTFTSLOBreach
does), the healthy squeeze and the pressure trend, the scale review (6.1) and
the alerts that fired most. Tuning numbers come from ``thresholds.yaml``
(``report.*``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

from inferwatch.pack import fmt
from inferwatch.pack import loops as L
from inferwatch.pack import ranking as R
from inferwatch.pack.ranking import Move
from inferwatch.report import words
from inferwatch.report.model import SLO_TARGET, mean
from inferwatch.report.summary import (
    Finding,
    GpuFigures,
    LatencyFigures,
    ModelFigures,
    Report,
    ScopeFigures,
)


def findings(report: Report) -> list[Finding]:
    out: list[Finding] = []
    gpus = {g.uuid: g for g in report.gpus}
    imbalanced: set[str] = set()
    for m in report.models:
        model_gpus = [gpus[u] for u in m.gpus if u in gpus]
        spread = list(_imbalance(report, m, model_gpus))
        if spread:
            imbalanced.add(m.total.model)
        model_findings = [
            *spread,
            *_slo_regressions(report, m, model_gpus),
            *_warmup(report, m),
            *_cold_start(report, m),
            *_queue(report, m),
            *_preemptions(report, m),
            *_long_tail(report, m),
        ]
        # what another loop suppresses (pack.loops: Loop.suppressed_by, in its scope)
        model = m.total.model
        holding = [(f.id, model, f.workers) for f in model_findings if f.id]
        out.extend(
            replace(f, models=(model,))
            for f in model_findings
            if not f.id or not L.silenced(f.id, model, f.workers, holding)
        )
    for g in report.gpus:
        out.extend(replace(f, models=tuple(g.models)) for f in _memory(report, g))
        out.extend(_scale_review(report, g))
    out.extend(_waste_days(report, imbalanced))
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
    # the level first, then pack.ranking's one order (critical loops before warnings)
    order = {"act": 0, "watch": 1, "ok": 2}
    return sorted(out, key=lambda f: (order.get(f.level, 3), _rank(f)))


def _rank(f: Finding) -> tuple[int, int, int, float]:
    alerts = L.BY_ID[f.id].alerts if f.id in L.BY_ID else ()
    return R.key(R.ALERT, R.severity(alerts), f.id)


def _label(loop_id: str, what: str = "") -> str:
    """A finding's loop label: the loop's name (pack.loops), never a number."""
    name = L.BY_ID[loop_id].name
    return f"{name} · {what}" if what else name


def loops_by_model(found: Sequence[Finding]) -> Mapping[str, frozenset[str]]:
    """The ``pack.loops`` ids the findings hold for each model (suppression applied): what
    the cost section names its wasters' loops from, so it never has a definition of its own."""
    out: dict[str, set[str]] = {}
    for f in found:
        if f.id:
            for model in f.models:
                out.setdefault(model, set()).add(f.id)
    return {model: frozenset(ids) for model, ids in out.items()}


def _days(report: Report, indices: Sequence[int]) -> str:
    """The days as the tables name them (``words.day_name``): ``Sat 5 Dec, Sun 6 Dec``, and
    for 24-hour windows (``--end now``) when they end, ``Sun 6 Dec (the 24 hours to
    18:00)``."""
    p = report.period
    names = ", ".join(words.day_name(p, i) for i in indices)
    if p.aligned:
        return names
    each = " each" if len(indices) > 1 else ""
    return f"{names} (the 24 hours to {words.end_time(p)}{each})"


def _current_indices(report: Report) -> range:
    return range(report.period.days, 2 * report.period.days)


def _gpu_util_on_day(gpus: Sequence[GpuFigures], i: int) -> float | None:
    return mean(g.util_daily.get("mean", ())[i] if g.util_daily.get("mean") else None for g in gpus)


def _util(gpus: Sequence[GpuFigures]) -> float | None:
    """Mean utilization of these GPUs this period."""
    return mean(g.util["mean"].current for g in gpus if "mean" in g.util)


def _gpus_of(report: Report, worker: str) -> list[GpuFigures]:
    return [g for g in report.gpus if worker in g.workers]


def _ttft(scope: ScopeFigures) -> LatencyFigures | None:
    """The TTFT without the cold-start windows (the one the SLO and the slow-first-token
    loop read)."""
    return scope.warm_latency.get("ttft") or scope.latency.get("ttft")


def _slo_regressions(
    report: Report, m: ModelFigures, gpus: Sequence[GpuFigures]
) -> Iterator[Finding]:
    regression = report.thresholds.report.regression_ratio
    for name in ("ttft", "tpot"):
        lat = _ttft(m.total) if name == "ttft" else m.total.latency.get(name)
        if lat is None or lat.attainment is None or lat.slo is None:
            continue
        p99 = lat.week[0.99]
        att = lat.attainment.current
        rising = p99.ratio is not None and p99.ratio >= regression
        missed = att is not None and att < SLO_TARGET
        if not (rising or missed):
            continue
        label = "TTFT" if name == "ttft" else "TPOT"
        first = None
        for i in _current_indices(report):
            v = lat.daily[0.99][i]
            prev = p99.previous
            if v is not None and (
                v > lat.slo or (prev is not None and v > prev * (1 + regression))
            ):
                first = i
                break
        evidence = f"{label} P99 {fmt.seconds(p99.current)} this week"
        if p99.previous is not None:
            evidence += (
                f" against {fmt.seconds(p99.previous)} the week before ({words.delta(p99, 'rel')})"
            )
        evidence += "."
        if first is not None:
            evidence += f" It first went up on {_days(report, [first])}."
        if att is not None:
            evidence += (
                f" {fmt.percent(att, 1)} of {'requests' if name == 'ttft' else 'tokens'} "
                f"within the {fmt.seconds(lat.slo)} SLO (target {fmt.percent(SLO_TARGET)})."
            )
        if name == "ttft" and m.total.cold_latency.get("ttft") is not None:
            evidence += (
                " First tokens within "
                f"{fmt.duration(report.thresholds.cold_start.within)} of a worker start are left "
                "out (a cold start, not an SLO miss)."
            )
        busy = _util(gpus)
        if name == "ttft":
            low, high = L.BATCHED_TOKENS_RANGE
            action = (
                "A slow first token points at prompt processing, a cold KV cache or model "
                "loading. Look for new long prompts (give them a separate long-context "
                "pool), warm-up after restarts and prefix caching; "
                f"--max-num-batched-tokens {low}-{high} balances prefill against decoding."
            )
        else:
            action = (
                "Slow decoding means busy compute, batch settings or memory bandwidth: "
                "scale out, check the batch against --max-num-seqs, and check for throttling."
            )
        if busy is not None and busy >= L.SCALE_REVIEW.of(report.thresholds):
            action += " Its GPUs were busy: this is compute-bound, review scaling out."
        yield Finding(
            "act" if missed else "watch",
            "SLO",
            f"{m.total.model}: {label} P99 {'missed its SLO' if missed else 'got worse'}",
            evidence,
            action,
        )


def _warmup(report: Report, m: ModelFigures) -> Iterator[Finding]:
    """Slow first token on an idle GPU (InferenceTTFTHighGPUIdle): TTFT P95 above the warm-up line while the
    worker's GPUs idle, outside the cold-start window."""
    t = report.thresholds
    hits: list[tuple[str, list[int], float, float]] = []
    for w in m.workers:
        lat = _ttft(w)
        gpus = _gpus_of(report, w.worker)
        if lat is None or not gpus:
            continue
        days = []
        worst = 0.0
        util_seen = []
        for i in _current_indices(report):
            p95 = lat.daily[0.95][i]
            util = _gpu_util_on_day(gpus, i)
            # observations outside the cold window only: never young
            if L.warmup(p95, util, None, t):
                assert p95 is not None and util is not None
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
    line, idle = t.ttft.warmup_p95_seconds, t.gpu_utilization.idle_below
    yield Finding(
        "act",
        _label("warmup", "warm-up"),
        f"{m.total.model}: slow first tokens on an idle GPU",
        evidence + f" (Lines: P95 {fmt.seconds(line)}, idle below {fmt.percent(idle)}.)",
        "Long after a start the cold part is the prompt path: with a fixed system prompt, "
        "enable prefix caching (--enable-prefix-caching) and list the prompt under "
        "warmup.system_prompts; "
        f"the guide reports {fmt.percent(L.PREFIX_CACHE_TTFT_GAIN[0])}-"
        f"{fmt.percent(L.PREFIX_CACHE_TTFT_GAIN[1])} "
        "lower TTFT. Look for new long prompts too.",
        id="warmup",
        moves=(Move(R.PREFIX_CACHING, R.UP),),
    )


def _cold_start(report: Report, m: ModelFigures) -> Iterator[Finding]:
    """Slow first token on an idle GPU (InferenceWorkerColdStart): slow first tokens within cold_start.within of a
    worker start, on days the worker was never over capacity (the rule's ``unless``: the
    slow first tokens of an overloaded worker are queueing)."""
    t = report.thresholds
    hits = []
    for w in m.workers:
        lat = w.cold_latency.get("ttft")
        if lat is None:
            continue
        days = []
        worst = 0.0
        for i in _current_indices(report):
            p95 = lat.daily[0.95][i]
            over = bool(w.over_capacity_daily and (w.over_capacity_daily[i] or 0) > 0)
            # observed within the window after a start: young by construction
            if L.cold_start(p95, 0.0, over, t):
                days.append(i)
                worst = max(worst, p95 or 0.0)
        if days:
            hits.append((w.worker, days, worst))
    if not hits:
        return
    within = fmt.duration(t.cold_start.within)
    yield Finding(
        "act",
        _label("cold_start", "cold start"),
        f"{m.total.model}: slow first tokens after worker starts",
        " ".join(
            f"{worker}: TTFT P95 up to {fmt.seconds(p95)} within {within} of its starts on "
            f"{_days(report, days)}."
            for worker, days, p95 in hits
        )
        + f" (Line: P95 {fmt.seconds(t.ttft.warmup_p95_seconds)}.)",
        L.WARMUP_GATE,
        id="cold_start",
        workers=tuple(worker for worker, _, _ in hits),
    )


def _imbalance(report: Report, m: ModelFigures, gpus: Sequence[GpuFigures]) -> Iterator[Finding]:
    """Low utilization with normal latency (InferenceLoadImbalance): one worker far above its peers while the model's GPUs
    idle and its latency is fine."""
    t = report.thresholds
    util = _util(gpus)
    # the rule compares the model's whole TTFT P99 (young workers included)
    ttft = m.total.latency.get("ttft")
    p99 = ttft.week[0.99].current if ttft is not None else None
    loads = [
        L.WorkerLoad(
            w.worker,
            _util(_gpus_of(report, w.worker)),
            w.open_requests.current if w.open_requests is not None else None,
        )
        for w in m.workers
    ]
    busy = L.imbalanced(loads, util, p99, t)
    if not busy:
        return
    assert util is not None
    parts = []
    for load in loads:
        bits = []
        if load.gpu_utilization is not None:
            bits.append(f"GPUs {fmt.percent(load.gpu_utilization)} busy")
        if load.open_requests is not None:
            bits.append(f"{load.open_requests:.1f} open requests")
        parts.append(f"{load.worker}: {', '.join(bits) or 'no load figures'}")
    evidence = (
        f"Its GPUs ({', '.join(g.label for g in gpus)}) averaged {fmt.percent(util)} busy, "
        f"below {fmt.percent(t.gpu_utilization.idle_below)}, with TTFT P99 within the SLO; "
        f"{', '.join(sorted(busy))} carried over {t.load_imbalance.load_ratio:g}x the mean of "
        f"the others ({'; '.join(parts)})."
    )
    yield Finding(
        "watch",
        _label("imbalance", "imbalance"),
        f"{m.total.model}: one worker carries the load while the GPUs idle",
        evidence,
        f"{L.LEAST_CONNECTIONS} {L.NO_SCALE_IN} {L.DATA_PARALLEL}",
        id="imbalance",
        moves=(Move(R.REPLICAS, R.NO_DOWN),),
    )


def _queue(report: Report, m: ModelFigures) -> Iterator[Finding]:
    """InferenceQueueOverCapacity [6 FAQ]: the queue above what the worker can batch."""
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
            _label("over_capacity", "leading indicator"),
            f"{w.worker}: queue above batch capacity for {fmt.duration(over.current)}",
            f"Queue depth peaked at {fmt.count(peak)} with max_num_seqs "
            f"{fmt.count(w.capacity)} (or fewer, the running batch, while the KV cache was "
            f"full); over capacity on {_days(report, days)} "
            f"({words.delta(over, 'abs_seconds')} against the week before).",
            "The queue moves before utilization and latency do: scale out or rate-limit when it "
            "stays above capacity, rather than waiting for latency alerts. If VRAM allows, "
            "size --max-num-seqs with `inferwatch advise capacity`.",
            id="over_capacity",
            moves=(Move(R.REPLICAS, R.UP),),
        )


def _preemptions(report: Report, m: ModelFigures) -> Iterator[Finding]:
    """InferenceKVCachePreemptions [4.2]: the KV pool too small for the batch."""
    t = report.thresholds
    seconds = report.period.days * 86400.0
    for w in m.workers:
        count = w.preemptions.current if w.preemptions is not None else None
        if count is None or not L.preempting(count / seconds, t):
            continue
        yield Finding(
            "act",
            _label("preemptions", "preemptions"),
            f"{w.worker}: {fmt.count(count)} requests preempted",
            f"The engine evicted running requests {fmt.count(count)} times this week "
            f"({words.delta(w.preemptions, 'rel') if w.preemptions else ''} against the week "
            "before): its KV cache is too small for the batch.",
            " ".join((L.raise_kv_pool(), L.FP8_KV, L.fewer_seqs(), L.SCALE_OUT)),
            id="preemptions",
            # raise_kv_pool's raise needs room on the card, which the week does not say:
            # only its "never lower" is a move here
            moves=(
                Move(R.GPU_MEMORY_UTILIZATION, R.NO_DOWN),
                Move(R.KV_CACHE_DTYPE, R.DOWN),
                Move(R.MAX_NUM_SEQS, R.DOWN),
                Move(R.REPLICAS, R.UP),
            ),
        )


def _long_tail(report: Report, m: ModelFigures) -> Iterator[Finding]:
    """InferenceLatencyLongTail [6.1]: TTFT or TPOT P99 >= tail_ratio x P50 (never end-to-end:
    a healthy mix of short and long answers makes that one long)."""
    t = report.thresholds
    for w in m.workers:
        found = []
        for name in ("ttft", "tpot"):
            lat = w.latency.get(name)
            if lat is None:
                continue
            p50, p99 = lat.week[0.5].current, lat.week[0.99].current
            if L.long_tail(p50, p99, t):
                assert p50 is not None and p99 is not None
                found.append(
                    f"{name.upper()} P50 {fmt.seconds(p50)}, P99 {fmt.seconds(p99)} "
                    f"({p99 / p50:.1f}x)"
                )
        if not found:
            continue
        share = w.long_prompt_share.current if w.long_prompt_share else None
        evidence = "; ".join(found) + f" (line: {t.latency.tail_ratio:g}x)"
        if share is not None:
            evidence += (
                f"; {L.LONG_PROMPT_EVIDENCE} {fmt.percent(share)} "
                f"(line: {fmt.percent(t.latency.long_prompt_share)})"
            )
        yield Finding(
            "watch",
            _label("long_tail"),
            f"{w.worker}: P99 is {t.latency.tail_ratio:g}x the P50 or more",
            evidence + ".",
            f"{L.long_context_pool(share, t)} {L.LEAST_CONNECTIONS}",
            id="long_tail",
            workers=(w.worker,),
        )


def _memory(report: Report, g: GpuFigures) -> Iterator[Finding]:
    """VRAM near the limit (InferenceVRAMPressureQueueRising): memory pressure above vram.scale_above
    with a worker's queue rising; else the squeeze and the trend."""
    t = report.thresholds
    v = t.vram
    peak = g.pressure_peak.current
    if peak is None:
        return
    what = "KV cache" if g.pressure_from == "kv_cache" else "VRAM"
    growth_line = t.report.pressure_growth
    growth = []
    if g.pressure_trend is not None and g.pressure_trend >= growth_line:
        growth.append(f"the daily peak grew {fmt.points(g.pressure_trend)} over the week")
    if g.pressure_peak.delta is not None and g.pressure_peak.delta >= growth_line:
        growth.append(
            f"{fmt.points(g.pressure_peak.delta)} above last week's peak "
            f"({fmt.percent(g.pressure_peak.previous)})"
        )
    grew = ("; " + " and ".join(growth)) if growth else ""
    workers = [w for m in report.models for w in m.workers if w.worker in g.workers]
    rising = [
        w.worker
        for w in workers
        if w.queue_slope_peak is not None and L.queue_rising(w.queue_slope_peak.current, t)
    ]
    size = fmt.gib(g.vram_bytes_peak.current if g.vram_bytes_peak else None)
    kv = peak if g.pressure_from == "kv_cache" else None
    if L.memory(kv, g.vram_peak.current, max_slope(workers), t):
        actions = [
            f"The {what} is full while the queue of {', '.join(rising)} grows: scale out or "
            "rate-limit.",
            f"Make room in the KV cache: automatic prefix caching (--enable-prefix-caching). "
            f"{L.PREFIX_CACHING}",
            f"{L.FP8_KV} (Where the KV cache is not FP8 yet.)",
            L.fewer_seqs(),
        ]
        moves = [
            Move(R.REPLICAS, R.UP),
            Move(R.PREFIX_CACHING, R.UP),
            Move(R.KV_CACHE_DTYPE, R.DOWN),
            Move(R.MAX_NUM_SEQS, R.DOWN),
        ]
        if what == "VRAM":
            # NVML's ratio: the card itself is nearly full (no KV gauge)
            actions.append(L.headroom())
            moves.append(Move(R.GPU_MEMORY_UTILIZATION, R.DOWN))
        yield Finding(
            "act",
            _label("memory", "memory"),
            f"{g.label}: {what} peak {fmt.percent(peak)} with a rising queue",
            f"Peak {fmt.percent(peak)} (line {fmt.percent(v.scale_above)}) of {size} "
            f"GPU memory{grew}; the queue of {', '.join(rising)} rose.",
            " ".join(actions),
            id="memory",
            moves=tuple(moves),
        )
        return
    ttft_p99 = [
        lat.week[0.99].current
        for m in report.models
        if m.total.model in g.models and (lat := m.total.latency.get("ttft")) is not None
    ]
    known = [v for v in ttft_p99 if v is not None]
    if peak >= v.squeeze_above and known and max(known) <= v.squeeze_p99_ok_seconds:
        yield Finding(
            "ok",
            _label("memory", "memory"),
            f"{g.label}: {what} {fmt.percent(peak)} with fast first tokens: a healthy squeeze",
            f"TTFT P99 {fmt.seconds(max(known))} (under {fmt.seconds(v.squeeze_p99_ok_seconds)}).",
            "No action: a full KV cache with a fast P99 is the memory doing its job.",
        )
        return
    if growth:
        yield Finding(
            "watch",
            _label("memory", "memory"),
            f"{g.label}: {what} peak {fmt.percent(peak)} and rising",
            f"Peak {fmt.percent(peak)}{grew}; the scale line is {fmt.percent(v.scale_above)}.",
            "Make room before it gets there: prefix caching, an FP8 KV cache; watch the queue.",
        )


def max_slope(workers: Sequence[ScopeFigures]) -> float | None:
    """The steepest queue slope of these workers this period (requests per second)."""
    slopes = [
        w.queue_slope_peak.current
        for w in workers
        if w.queue_slope_peak is not None and w.queue_slope_peak.current is not None
    ]
    return max(slopes) if slopes else None


def _scale_review(report: Report, g: GpuFigures) -> Iterator[Finding]:
    share = g.bands.get("scale_review")
    if (
        share is None
        or share.current is None
        or share.current < report.thresholds.report.scale_review_share
    ):
        return
    line = fmt.percent(L.SCALE_REVIEW.of(report.thresholds))
    u = L.utilization_lines(report.thresholds)
    yield Finding(
        "watch",
        "Scale review",
        f"{g.label}: above {line} busy for {fmt.percent(share.current)} of the week",
        f"Utilization P90 {fmt.percent(g.util['p90'].current if 'p90' in g.util else None)}; "
        f"{words.delta(share, 'pts')} against the week before.",
        "Review scaling out: near 80 %+ the P99 sits at its knee and a 10-20 % rise in traffic "
        f"makes it jump. Aim for the {fmt.percent(u.healthy_low)}-"
        f"{fmt.percent(u.healthy_high)} band.",
    )


def _waste_days(report: Report, imbalanced: set[str]) -> Iterator[Finding]:
    """InferenceGPUUnderutilized, outside the loops: days a GPU spent mostly below the waste
    line (its rate_window average, as the alert reads it). GPUs of an imbalanced model are
    left to the low-utilization loop, which forbids scaling in."""
    share_line = report.thresholds.report.waste_day_share
    per_day: dict[int, list[GpuFigures]] = {}
    for g in report.gpus:
        if set(g.models) & imbalanced:
            continue
        waste = g.waste_alert_daily or g.band_daily.get("waste")
        if not waste:
            continue
        for i in _current_indices(report):
            v = waste[i]
            if v is not None and v >= share_line:
                per_day.setdefault(i, []).append(g)
    if not per_day:
        return
    days = sorted(per_day)
    names = sorted({g.label for gs in per_day.values() for g in gs})
    line = fmt.percent(L.WASTE.of(report.thresholds))
    yield Finding(
        "watch",
        _label("consolidate", "waste band"),
        f"GPUs below {line} busy most of {_days(report, days)}",
        f"{', '.join(names)} spent most of {'that day' if len(days) == 1 else 'those days'} in "
        f"the waste band (under {line}).",
        "If this is a quiet period every week, scale down on a schedule or co-locate small "
        "models on these GPUs (MIG, several workers per GPU); first make sure the traffic is "
        "spread evenly.",
        id="consolidate",
        # a scale-down on a schedule, if the quiet period comes back every week: a plan
        # for next week, not a move now (advise may say "not yet" to a young worker)
        models=tuple(sorted({m for gs in per_day.values() for g in gs for m in g.models})),
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
            f"Follow its runbook: {report.thresholds.pack.runbook_page(a.alertname)}",
        )
