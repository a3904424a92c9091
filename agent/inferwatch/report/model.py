"""The report's data: what the queries return (``Raw*``) and the figures made from it.

Everything here is pure: frozen dataclasses and functions without I/O, so the
arithmetic is tested on its own. Days are kept in one tuple of ``2 * days``
values per figure, oldest first: the previous period, then this one. ``None``
means "no data" and is never replaced by zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferwatch.engines import contract
from inferwatch.pack.reading import WorkerReading
from inferwatch.pack.thresholds import Thresholds
from inferwatch.stats import Over, histogram_quantile

DAY = 86400.0
QUANTILES = (0.5, 0.95, 0.99)
LATENCIES = ("ttft", "tpot", "e2e")
LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "End-to-end"}
#: the histogram each latency is read from
HISTOGRAMS = {
    "ttft": contract.TTFT_SECONDS,
    "tpot": contract.TPOT_SECONDS,
    "e2e": contract.E2E_LATENCY_SECONDS,
}
# The SLOs of thresholds.yaml are on the P99: a period meets one when at least
# 99 % of its observations are within the target.
SLO_TARGET = 0.99

Daily = tuple[float | None, ...]
# One day of a classic histogram: (upper bound, cumulative count), sorted, +Inf last.
Buckets = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Period:
    """``days`` days ending at ``end`` (unix seconds), and the same span before them."""

    end: float
    days: int

    @property
    def start(self) -> float:
        return self.end - self.days * DAY

    @property
    def previous_start(self) -> float:
        return self.end - 2 * self.days * DAY

    def day_ends(self) -> tuple[float, ...]:
        """End of each day, previous period first (2 * days values)."""
        return tuple(self.previous_start + (i + 1) * DAY for i in range(2 * self.days))

    def day_starts(self) -> tuple[float, ...]:
        return tuple(t - DAY for t in self.day_ends())

    @property
    def aligned(self) -> bool:
        """Whether the days are UTC calendar days (``--end today`` or a midnight)."""
        return self.end % DAY == 0

    def current(self, daily: Sequence[float | None]) -> Daily:
        return tuple(daily[self.days :])

    def previous(self, daily: Sequence[float | None]) -> Daily:
        return tuple(daily[: self.days])


@dataclass(frozen=True)
class SloTarget:
    """One objective of ``slos:`` (pack.slo_spec) with its entry's model and engines
    (:func:`slo_targets`)."""

    model: str | None  # None: the default entry (models of ``engines`` without their own)
    engines: tuple[str, ...]
    kind: str  # ttft, tpot, availability
    objective: float
    le: float | None  # the latency threshold (a bucket boundary); None for availability


def slo_targets(t: Thresholds) -> tuple[SloTarget, ...]:
    """The objectives of ``t.slos`` one row each (an entry's objectives flattened)."""
    return tuple(
        SloTarget(e.model, e.engines, o.kind, o.objective, o.le)
        for e in t.slos.active
        for o in e.objectives
    )


def p99_slo(t: Thresholds, latency: str) -> float | None:
    """The P99 SLO of thresholds.yaml for ``ttft`` or ``tpot`` (None for end-to-end)."""
    return {"ttft": t.ttft.p99_slo_seconds, "tpot": t.tpot.p99_slo_seconds}.get(latency)


# --------------------------------------------------------------------------- raw


@dataclass(frozen=True)
class RawWorker:
    """One worker over the report's days: who it is, and its reading of each day
    (``pack.reading.WorkerReading``, previous period first) as Prometheus returned it,
    before any figure is made from it."""

    model: str
    worker: str
    engine: str
    instances: tuple[str, ...]
    days: tuple[WorkerReading, ...]
    # the agent watched it during this period (inferwatch_target_up), requests or not
    present: bool = False

    def daily(self, figure: str) -> Daily | None:
        """A figure of ``WorkerReading`` day by day; None where no day has it (its series
        is absent)."""
        values = tuple(getattr(day, figure) for day in self.days)
        return values if any(v is not None for v in values) else None

    def histogram(self, name: str) -> tuple[Buckets | None, ...] | None:
        """The day-by-day buckets of ``WorkerReading.buckets[name]``; None where the
        series is absent."""
        if all(name not in day.buckets for day in self.days):
            return None
        return tuple(day.buckets.get(name) for day in self.days)

    @property
    def capacity(self) -> float | None:
        """The batch limit (max_num_seqs) at the period's end."""
        return self.days[-1].capacity if self.days else None

    @classmethod
    def of_series(
        cls,
        model: str,
        worker: str,
        engine: str = "",
        instances: tuple[str, ...] = (),
        present: bool = False,
        *,
        days: int = 0,
        histograms: Mapping[str, Sequence[Buckets | None] | None] = {},
        capacity: float | None = None,
        **daily: Sequence[float | None] | None,
    ) -> RawWorker:
        """A worker from its series as queried (``days`` of them, else as many as the
        longest): ``daily`` a figure of ``WorkerReading`` -> one value per day,
        ``histograms`` a name of ``WorkerReading.buckets`` -> one day's buckets per day
        (None: the series is absent), ``capacity`` at the period's end."""
        series = (*daily.values(), *histograms.values())
        readings = []
        for i in range(days or max(len(s) for s in series if s is not None)):
            figures: dict[str, Any] = {k: s[i] for k, s in daily.items() if s is not None}
            buckets = {k: s[i] for k, s in histograms.items() if s is not None}
            readings.append(WorkerReading(**figures, buckets=buckets))
        readings[-1].capacity = capacity
        return cls(model, worker, engine, instances, tuple(readings), present)


@dataclass(frozen=True)
class RawGpu:
    """One GPU's per-day series as Prometheus returned them: utilization, its bands,
    VRAM and memory pressure, and the workers on it."""

    uuid: str
    instance: str
    gpu: str
    name: str
    util_daily: dict[str, Daily]  # "mean", "p50", "p90"
    band_daily: dict[str, Daily]  # "waste", "healthy", "scale_review" shares of time
    util_week: dict[str, tuple[float | None, float | None]]  # stat -> (previous, current)
    sm_active_week: tuple[float | None, float | None] | None  # None: no GPM series
    vram_peak_ratio: Daily
    vram_peak_bytes: Daily | None
    workers: tuple[str, ...]
    #: the day's peak memory pressure: its workers' KV-cache usage where the engine
    #: exports it, else NVML's used ratio (the rules' memory pressure); None: as VRAM
    pressure_peak: Daily | None = None
    #: "kv_cache" or "gpu_memory": what pressure_peak is
    pressure_from: str = "gpu_memory"
    #: share of each day the GPU's utilization, averaged over pack.rate_window, was past
    #: ``pack.loops.WASTE`` (InferenceGPUUnderutilized's condition); None: unknown
    waste_alert_daily: Daily | None = None


@dataclass(frozen=True)
class RawAlert:
    labels: dict[str, str]
    firings: tuple[tuple[float, float], ...]  # (start, end) in unix seconds


@dataclass(frozen=True)
class Hourly:
    times: tuple[float, ...]
    latency_p99: tuple[float | None, ...]
    latency_name: str  # "TTFT" or "End-to-end"; "" when no latency histogram at all
    util_mean: tuple[float | None, ...]
    vram_peak: tuple[float | None, ...]


@dataclass(frozen=True)
class RawData:
    period: Period
    workers: tuple[RawWorker, ...]
    gpus: tuple[RawGpu, ...]
    alerts: tuple[RawAlert, ...]
    hourly: Hourly
    notes: tuple[str, ...]


# --------------------------------------------------------------------- arithmetic


def subtract_buckets(whole: Buckets | None, part: Buckets | None) -> Buckets | None:
    """``whole`` without the observations of ``part`` (counts never below zero)."""
    if whole is None or part is None:
        return whole
    less = dict(part)
    return tuple((le, max(0.0, count - less.get(le, 0.0))) for le, count in whole)


def merge_buckets(parts: Iterable[Buckets | None]) -> Buckets | None:
    """Sum histograms bucket by bucket (as ``sum by (le)`` does); None when all are None."""
    total: dict[float, float] = {}
    seen = False
    for part in parts:
        if part is None:
            continue
        seen = True
        for le, count in part:
            total[le] = total.get(le, 0.0) + count
    if not seen:
        return None
    return tuple(sorted(total.items()))


def observations(buckets: Buckets | None) -> float:
    if not buckets or not math.isinf(buckets[-1][0]):
        return 0.0
    return buckets[-1][1]


def quantile(q: float, buckets: Buckets | None, at_most: float | None = None) -> float | None:
    """PromQL's ``histogram_quantile``; None (not zero) when there were no observations,
    :class:`Over` the largest finite bound when the rank lands in the +Inf bucket.

    ``at_most``: a figure the quantile cannot truly exceed (a TTFT quantile: the
    end-to-end one of the same requests, since every first token comes before its
    last). Linear interpolation inside a wide bucket invents the position within it;
    where it lands above ``at_most`` the quantile is ``at_most``, never less than the
    bucket's lower bound (the observations are known to be above it: a request still
    streaming has a first token and no end-to-end figure yet). An :class:`Over`
    ``at_most`` bounds nothing.
    """
    total = observations(buckets)
    if total <= 0:
        return None
    assert buckets is not None
    finite = [(le, count) for le, count in buckets if not math.isinf(le)]
    rank = q * total
    if finite and rank > finite[-1][1]:
        return Over(finite[-1][0])
    value = histogram_quantile(q, list(buckets))
    if math.isnan(value):
        return None
    if at_most is not None and not isinstance(at_most, Over) and value > at_most:
        floor = max((le for le, count in finite if count < rank), default=0.0)
        value = max(floor, at_most)
    return value


def share_within(threshold: float, buckets: Buckets | None) -> float | None:
    """Share of observations at or below ``threshold``.

    Interpolates linearly inside the bucket that holds the threshold, the same
    assumption ``histogram_quantile`` makes, so ``share_within(quantile(q)) == q``.
    Above the highest finite bound nothing more is known: the +Inf bucket counts
    as over.
    """
    total = observations(buckets)
    if total <= 0:
        return None
    assert buckets is not None
    lower_bound, lower_count = 0.0, 0.0
    for le, count in buckets:
        if math.isinf(le):
            break
        if threshold <= le:
            if threshold <= lower_bound or le == lower_bound:
                return lower_count / total
            part = (threshold - lower_bound) / (le - lower_bound)
            return (lower_count + part * (count - lower_count)) / total
        lower_bound, lower_count = le, count
    return lower_count / total


def total(values: Iterable[float | None]) -> float | None:
    """Sum of the values present; None when none is."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def peak(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def add_daily(series: Sequence[Daily | None]) -> Daily | None:
    """Day-by-day sum of several series (a day is None when no series has it)."""
    present = [s for s in series if s is not None]
    if not present:
        return None
    return tuple(total(day) for day in zip(*present, strict=True))


def max_daily(series: Sequence[Daily | None]) -> Daily | None:
    present = [s for s in series if s is not None]
    if not present:
        return None
    return tuple(peak(day) for day in zip(*present, strict=True))


@dataclass(frozen=True)
class Change:
    """A figure this period against the period before."""

    current: float | None
    previous: float | None

    @property
    def delta(self) -> float | None:
        if self.current is None or self.previous is None:
            return None
        return self.current - self.previous

    @property
    def ratio(self) -> float | None:
        """Relative change (0.25 = 25 % up); None without a usable previous value."""
        if self.current is None or self.previous is None or self.previous == 0:
            return None
        return self.current / self.previous - 1.0

    def direction(self, flat: float = 0.02) -> str:
        """ "up", "down", "flat" (within ``flat`` relative), or "" when not comparable."""
        if self.current is None or self.previous is None:
            return ""
        if self.previous == 0:
            return "flat" if self.current == 0 else "up"
        r = self.current / self.previous - 1.0
        if abs(r) <= flat:
            return "flat"
        return "up" if r > 0 else "down"


def alert_runs(points: Sequence[float], step: float) -> list[tuple[float, float]]:
    """Firing intervals from the timestamps at which an alert was seen firing.

    A range query with ``count_over_time(ALERTS{...}[step])`` at ``step``
    resolution yields one point per step while the alert fires, and one more
    step after its last evaluation; consecutive points make one firing that
    lasted ``(points - 1) * step`` (at least one step).
    """
    runs: list[tuple[float, float]] = []
    if not points:
        return runs
    ordered = sorted(points)
    first = last = ordered[0]
    for t in ordered[1:]:
        if t - last > step * 1.5:
            runs.append((first, max(last, first + step)))
            first = t
        last = t
    runs.append((first, max(last, first + step)))
    return runs


def overlap(interval: tuple[float, float], start: float, end: float) -> float:
    return max(0.0, min(interval[1], end) - max(interval[0], start))
