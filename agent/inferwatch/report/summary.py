"""From query answers to the figures of the report: per worker, per model, per GPU, alerts.

Pure functions over :mod:`inferwatch.report.model`; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inferwatch.engines import contract
from inferwatch.pack import fmt
from inferwatch.pack import loops as L
from inferwatch.pack.ranking import Move
from inferwatch.pack.thresholds import Thresholds
from inferwatch.report.model import (
    DAY,
    HISTOGRAMS,
    LATENCIES,
    QUANTILES,
    Buckets,
    Change,
    Daily,
    Hourly,
    Over,
    Period,
    RawData,
    RawGpu,
    RawWorker,
    add_daily,
    max_daily,
    mean,
    merge_buckets,
    overlap,
    p99_slo,
    peak,
    quantile,
    share_within,
    subtract_buckets,
    total,
)

BANDS = ("waste", "low", "healthy", "scale_review")
BAND_NAMES = {b: b.replace("_", " ") for b in BANDS}


def band_ranges(t: Thresholds, gap: str = " ") -> dict[str, str]:
    """Each band of ``BANDS`` as its range of utilization: ``< 30%``, ``30-60%``, ``60-85%``,
    ``> 85%`` (``gap=""``: ``<30%``), from ``pack.loops.utilization_lines``."""
    u = L.utilization_lines(t)
    return {
        "waste": fmt.band(None, u.waste, gap),
        "low": fmt.band(u.waste, u.healthy_low),
        "healthy": fmt.band(u.healthy_low, u.healthy_high),
        "scale_review": fmt.band(u.scale_review, None, gap),
    }


@dataclass(frozen=True)
class LatencyFigures:
    name: str
    daily: dict[float, Daily]  # quantile -> 2N days
    week: dict[float, Change]
    slo: float | None
    attainment_daily: Daily | None
    attainment: Change | None


@dataclass(frozen=True)
class ScopeFigures:
    """One worker, one model (its workers together) or the whole fleet."""

    kind: str  # "worker", "model", "fleet"
    model: str
    worker: str
    engine: str
    requests_daily: Daily
    prompt_daily: Daily
    generation_daily: Daily
    requests: Change
    prompt: Change
    generation: Change
    latency: dict[str, LatencyFigures]
    queue_peak_daily: Daily | None
    queue_peak: Change | None
    over_capacity_daily: Daily | None
    over_capacity: Change | None
    capacity: float | None
    #: latency without what was observed within cold_start.within of a start (the
    #: window InferenceTTFTSLOBreach leaves to InferenceWorkerColdStart)
    warm_latency: dict[str, LatencyFigures] = field(default_factory=dict)
    #: latency observed within cold_start.within of a start only
    cold_latency: dict[str, LatencyFigures] = field(default_factory=dict)
    open_requests: Change | None = None
    queue_slope_peak: Change | None = None
    preemptions: Change | None = None
    #: [5.3] share of the period's prompts over pack.loops.LONG_PROMPT_TOKENS; None: the
    #: engine exports no prompt-length histogram
    long_prompt_share: Change | None = None

    @property
    def name(self) -> str:
        return self.worker or self.model or "all workers"


@dataclass(frozen=True)
class ModelFigures:
    total: ScopeFigures
    workers: tuple[ScopeFigures, ...]
    gpus: tuple[str, ...]  # uuids


@dataclass(frozen=True)
class GpuFigures:
    uuid: str
    instance: str
    gpu: str
    name: str
    workers: tuple[str, ...]
    models: tuple[str, ...]
    util_daily: dict[str, Daily]
    util: dict[str, Change]  # mean, p10, p50, p90, p99 over the period
    band_daily: dict[str, Daily]
    bands: dict[str, Change]
    sm_active: Change | None
    vram_peak_daily: Daily
    vram_peak: Change
    vram_bytes_daily: Daily | None
    vram_bytes_peak: Change | None
    vram_trend: float | None  # last day's peak minus the first day's, this period
    #: memory pressure: KV-cache usage where the engine exports it, else NVML's ratio
    pressure_peak: Change = field(default_factory=lambda: Change(None, None))
    pressure_from: str = "gpu_memory"
    pressure_trend: float | None = None
    #: share of the period InferenceGPUUnderutilized's condition held
    waste_alert_daily: Daily | None = None
    #: the day's memory pressure peak, as ``pressure_peak`` (both periods; empty: none)
    pressure_daily: Daily = ()

    @property
    def memory_source(self) -> str:
        """What the memory figures of this GPU are: ``KV cache`` where an engine on it
        exports its usage (an engine that pre-allocates, vLLM or SGLang, holds NVML's
        level flat at its reservation), else ``VRAM`` (NVML)."""
        return "KV cache" if self.pressure_from == "kv_cache" else "VRAM"

    @property
    def memory_daily(self) -> Daily:
        """The daily memory peak the report draws: the pressure, else NVML's VRAM peak."""
        return self.pressure_daily or self.vram_peak_daily

    @property
    def label(self) -> str:
        host = self.instance.rsplit(":", 1)[0] if self.instance else self.uuid
        return f"{host} GPU {self.gpu}" if self.gpu else host


@dataclass(frozen=True)
class AlertFigures:
    alertname: str
    severity: str
    firings: Change
    seconds: Change
    longest: float | None
    subjects: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    level: str  # "act", "watch", "ok"
    loop: str  # which closed loop of the guide (or rule) it comes from, for people
    title: str
    evidence: str
    action: str
    #: the pack.loops id it applies ("" for findings outside the loops: SLO, alerts...)
    id: str = ""
    #: the workers it is about, where a loop that suppresses it per worker needs them
    workers: tuple[str, ...] = ()
    #: the models it is about (the cost section names the loop of each model from these)
    models: tuple[str, ...] = ()
    #: the knobs its action turns (pack.ranking): advise's answer never undoes them
    moves: tuple[Move, ...] = ()


@dataclass(frozen=True)
class Report:
    period: Period
    #: the thresholds the report was built with, as loaded (the one way they reach it)
    thresholds: Thresholds
    generated_at: float
    fleet: ScopeFigures | None
    models: tuple[ModelFigures, ...]
    gpus: tuple[GpuFigures, ...]
    alerts: tuple[AlertFigures, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    hourly: Hourly


def _change(period: Period, daily: Daily | None, how: str = "sum") -> Change:
    if daily is None:
        return Change(None, None)
    fn = {"sum": total, "max": peak, "mean": mean}[how]
    return Change(fn(period.current(daily)), fn(period.previous(daily)))


def _smallest(*values: float | None) -> float | None:
    known = [v for v in values if v is not None and not isinstance(v, Over)]
    return min(known) if known else None


def data_age(workers: Sequence[RawWorker], period: Period) -> tuple[Daily, Change] | None:
    """How old the latency data of these workers can be, per day and per period: each day's
    (or period's) end minus the earliest start of their processes in it; None where a
    worker's start is not known (then nothing bounds it)."""
    starts = [s for w in workers if (s := w.daily("started")) is not None]
    if not workers or len(starts) < len(workers):
        return None

    def age(end: float, values: Sequence[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return end - min(known) if known else None

    daily = tuple(
        age(end, [s[i] for s in starts]) if all(s[i] is not None for s in starts) else None
        for i, end in enumerate(period.day_ends())
    )
    cur = [v for s in starts for v in period.current(s)]
    prev = [v for s in starts for v in period.previous(s)]
    return daily, Change(age(period.end, cur), age(period.end - period.days * DAY, prev))


def latency_figures(
    name: str,
    days: tuple[Buckets | None, ...],
    period: Period,
    t: Thresholds,
    bound: LatencyFigures | None = None,
    age: tuple[Daily, Change] | None = None,
) -> LatencyFigures:
    """Quantiles never above what the data allows where interpolation alone put them there
    (``model.quantile``'s ``at_most``): ``bound``, the same quantiles of the same requests'
    end-to-end latency (for TTFT); ``age``, the data's age (``data_age``)."""

    def limit(q: float, i: int) -> float | None:
        return _smallest(
            bound.daily[q][i] if bound is not None else None, age[0][i] if age else None
        )

    def week_limit(q: float, which: str) -> float | None:
        return _smallest(
            getattr(bound.week[q], which) if bound is not None else None,
            getattr(age[1], which) if age else None,
        )

    daily = {q: tuple(quantile(q, b, limit(q, i)) for i, b in enumerate(days)) for q in QUANTILES}
    cur = merge_buckets(period.current(days))  # type: ignore[arg-type]
    prev = merge_buckets(period.previous(days))  # type: ignore[arg-type]
    week = {
        q: Change(
            quantile(q, cur, week_limit(q, "current")),
            quantile(q, prev, week_limit(q, "previous")),
        )
        for q in QUANTILES
    }
    slo = p99_slo(t, name)
    attainment_daily = None
    attainment = None
    if slo is not None:
        attainment_daily = tuple(share_within(slo, b) for b in days)
        attainment = Change(share_within(slo, cur), share_within(slo, prev))
    return LatencyFigures(name, daily, week, slo, attainment_daily, attainment)


def scope_figures(
    kind: str,
    model: str,
    worker: str,
    workers: Sequence[RawWorker],
    period: Period,
    t: Thresholds,
) -> ScopeFigures:
    n = 2 * period.days
    empty: Daily = (None,) * n
    requests = add_daily([w.daily("requests") for w in workers]) or empty
    prompt = add_daily([w.daily("prompt_tokens") for w in workers]) or empty
    generation = add_daily([w.daily("generation_tokens") for w in workers]) or empty
    latency: dict[str, LatencyFigures] = {}
    warm: dict[str, LatencyFigures] = {}
    cold: dict[str, LatencyFigures] = {}
    # end-to-end first: every request's first token comes before its last, so a TTFT
    # quantile that interpolation in a wide bucket put above the end-to-end one is held
    # to it (model.quantile's at_most; the warm requests' end-to-end where they have
    # their own, else all of them: the warm ones are the faster part)
    # and none above the data's age (a load 377 s old has no 631 s request)
    age = data_age(workers, period)
    for name in sorted(LATENCIES, key=lambda n: n != "e2e"):
        parts = [d for w in workers if (d := w.histogram(name)) is not None]
        if not parts:
            continue
        ttft = name == "ttft"
        days = tuple(merge_buckets(day) for day in zip(*parts, strict=True))
        latency[name] = latency_figures(
            name, days, period, t, latency.get("e2e") if ttft else None, age
        )
        cold_parts = [d for w in workers if (d := w.histogram(f"cold_{name}")) is not None]
        if not cold_parts:
            warm[name] = latency[name]
            continue
        cold_days = tuple(merge_buckets(day) for day in zip(*cold_parts, strict=True))
        warm_days = tuple(subtract_buckets(d, c) for d, c in zip(days, cold_days, strict=True))
        warm_bound = (warm.get("e2e") or latency.get("e2e")) if ttft else None
        warm[name] = latency_figures(name, warm_days, period, t, warm_bound, age)
        cold[name] = latency_figures(
            name, cold_days, period, t, cold.get("e2e") if ttft else None, age
        )
    latency = {name: latency[name] for name in LATENCIES if name in latency}
    warm = {name: warm[name] for name in LATENCIES if name in warm}
    queue = max_daily([w.daily("queue_max") for w in workers])
    over = add_daily([w.daily("over_capacity_seconds") for w in workers])
    capacities = [w.capacity for w in workers if w.capacity is not None]
    engines = sorted({w.engine for w in workers if w.engine})
    open_ = add_daily([w.daily("open_requests") for w in workers])
    slope = max_daily([w.daily("slope_max") for w in workers])
    preempted = add_daily([w.daily("preemptions") for w in workers])
    lengths = [d for w in workers if (d := w.histogram("prompt_length")) is not None]
    long_share = None
    if lengths:
        length_days = tuple(merge_buckets(day) for day in zip(*lengths, strict=True))

        def share(days: Sequence[Buckets | None]) -> float | None:
            merged = merge_buckets(days)
            return L.long_prompt_share(merged) if merged else None

        long_share = Change(
            share(period.current(length_days)),  # type: ignore[arg-type]
            share(period.previous(length_days)),  # type: ignore[arg-type]
        )
    return ScopeFigures(
        kind=kind,
        model=model,
        worker=worker,
        engine=", ".join(engines),
        requests_daily=requests,
        prompt_daily=prompt,
        generation_daily=generation,
        requests=_change(period, requests),
        prompt=_change(period, prompt),
        generation=_change(period, generation),
        latency=latency,
        queue_peak_daily=queue,
        queue_peak=_change(period, queue, "max") if queue else None,
        over_capacity_daily=over,
        over_capacity=_change(period, over) if over else None,
        capacity=sum(capacities) if capacities else None,
        warm_latency=warm,
        cold_latency=cold,
        open_requests=_change(period, open_, "mean") if open_ else None,
        queue_slope_peak=_change(period, slope, "max") if slope else None,
        preemptions=_change(period, preempted) if preempted else None,
        long_prompt_share=long_share,
    )


def gpu_figures(raw: RawGpu, period: Period, worker_models: dict[str, str]) -> GpuFigures:
    n = 2 * period.days
    band_daily = dict(raw.band_daily)
    low: list[float | None] = []
    for i in range(n):
        parts = [
            raw.band_daily.get(b, (None,) * n)[i] for b in ("waste", "healthy", "scale_review")
        ]
        low.append(
            None
            if any(p is None for p in parts)
            else max(0.0, 1.0 - sum(p for p in parts if p is not None))
        )
    band_daily["low"] = tuple(low)
    util = {stat: Change(cur, prev) for stat, (prev, cur) in raw.util_week.items()}
    cur_peaks = [v for v in period.current(raw.vram_peak_ratio) if v is not None]
    trend = cur_peaks[-1] - cur_peaks[0] if len(cur_peaks) >= 2 else None
    pressure = raw.pressure_peak or raw.vram_peak_ratio
    cur_pressure = [v for v in period.current(pressure) if v is not None]
    pressure_trend = cur_pressure[-1] - cur_pressure[0] if len(cur_pressure) >= 2 else None
    return GpuFigures(
        uuid=raw.uuid,
        instance=raw.instance,
        gpu=raw.gpu,
        name=raw.name,
        workers=raw.workers,
        models=tuple(sorted({worker_models[w] for w in raw.workers if w in worker_models})),
        util_daily=raw.util_daily,
        util=util,
        band_daily=band_daily,
        bands={b: _change(period, band_daily.get(b), "mean") for b in BANDS},
        sm_active=Change(raw.sm_active_week[1], raw.sm_active_week[0])
        if raw.sm_active_week
        else None,
        vram_peak_daily=raw.vram_peak_ratio,
        vram_peak=_change(period, raw.vram_peak_ratio, "max"),
        vram_bytes_daily=raw.vram_peak_bytes,
        vram_bytes_peak=_change(period, raw.vram_peak_bytes, "max")
        if raw.vram_peak_bytes
        else None,
        vram_trend=trend,
        pressure_peak=_change(period, pressure, "max"),
        pressure_from=raw.pressure_from if raw.pressure_peak else "gpu_memory",
        pressure_trend=pressure_trend,
        waste_alert_daily=raw.waste_alert_daily,
        pressure_daily=pressure,
    )


def data_notes(raw: RawData) -> tuple[str, ...]:
    """What the report leaves out and why, once each: a worker's latency histogram or
    batch capacity missing, no GPU series, GPUs without GPM; then the collector's notes."""
    out = []
    for w in raw.workers:
        for name in (n for n in HISTOGRAMS if w.histogram(n) is None):
            out.append(
                f"{w.worker} ({w.model}): no {HISTOGRAMS[name]}_bucket series, so its "
                f"{name.upper() if name != 'e2e' else 'end-to-end'} figures are left "
                "out (the engine may not export it)."
            )
        if w.daily("over_capacity_seconds") is None:
            out.append(
                f"{w.worker} ({w.model}): batch capacity ({contract.MAX_NUM_SEQS}) unknown, so "
                "time over capacity is left out; set max_num_seqs in the agent's worker "
                "config."
            )
    if not raw.gpus:
        out.append(
            f"No GPU series ({contract.GPU_UTILIZATION_RATIO}) in either period: the GPU "
            "sections are left out."
        )
    if no_gpm := [f"{g.instance} GPU {g.gpu}" for g in raw.gpus if g.sm_active_week is None]:
        out.append(
            "SM activity (GPM) is not available for "
            + ", ".join(no_gpm)
            + ": GPM needs a Hopper or newer GPU and a recent driver; only NVML "
            "utilization is shown for it."
        )
    return tuple(dict.fromkeys([*out, *raw.notes]))


def alert_figures(raw: RawData) -> tuple[AlertFigures, ...]:
    period = raw.period
    grouped: dict[str, list[tuple[dict[str, str], tuple[tuple[float, float], ...]]]] = {}
    for a in raw.alerts:
        grouped.setdefault(a.labels.get("alertname", "?"), []).append((a.labels, a.firings))
    out = []
    for name, items in grouped.items():
        counts = [0, 0]
        secs = [0.0, 0.0]
        longest: float | None = None
        subjects: set[str] = set()
        severity = ""
        for labels, firings in items:
            severity = severity or labels.get("severity", "")
            for f in firings:
                for i, (start, end) in enumerate(
                    ((period.previous_start, period.start), (period.start, period.end))
                ):
                    part = overlap(f, start, end)
                    secs[i] += part
                    if start <= f[0] < end:
                        counts[i] += 1
                    if i == 1 and part > 0:
                        longest = max(longest or 0.0, part)
                        subjects.add(_subject(labels))
        if counts == [0, 0] and secs == [0.0, 0.0]:
            continue
        out.append(
            AlertFigures(
                alertname=name,
                severity=severity,
                firings=Change(float(counts[1]), float(counts[0])),
                seconds=Change(secs[1], secs[0]),
                longest=longest,
                subjects=tuple(sorted(subjects)),
            )
        )
    order = {"critical": 0, "warning": 1, "info": 2}
    out.sort(key=lambda a: (order.get(a.severity, 3), -(a.seconds.current or 0), a.alertname))
    return tuple(out)


def _subject(labels: dict[str, str]) -> str:
    if labels.get("worker"):
        return labels["worker"]
    if labels.get("gpu"):
        host = labels.get("instance", "").rsplit(":", 1)[0]
        return f"{host} GPU {labels['gpu']}".strip()
    return labels.get("instance", "") or labels.get("model", "") or "(no labels)"
