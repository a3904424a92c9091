"""Windowed statistics over cumulative engine metrics. Pure functions, no I/O.

- :func:`histogram_quantile` interpolates exactly like PromQL's function of the
  same name (Prometheus ``promql/quantile.go``, classic histograms), so the
  agent's window quantiles agree with what a dashboard computes from the
  passed-through buckets.
- :class:`CumulativeWindow` keeps timestamped snapshots of cumulative values
  (histogram buckets, counters) and answers "how much was added during the
  last W seconds", restarting at a counter reset instead of going negative.
- :func:`least_squares_slope` gives the queue trend.
- :class:`Over` marks a quantile past the largest finite bucket (only "over" it is known).
- :func:`share_above` gives the share of a histogram's observations above a
  bound (the long prompts of advise and the report).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

INF = math.inf


class Over(float):
    """A quantile past a histogram's largest finite bucket: only "over" that bound is known.

    Its value is the bound (a floor: comparisons and sums read it as one), and the
    report prints it as "over 60 s", never as a number: PromQL's ``histogram_quantile``
    returns the bound itself there, which reads as a measured figure.
    """

    def __repr__(self) -> str:
        return f"Over({float(self)!r})"


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """The q-quantile of a classic histogram given as ``(upper_bound, cumulative_count)``.

    Follows PromQL: NaN without a +Inf bucket, with fewer than two buckets or no
    observations; a rank that lands in the +Inf bucket returns the highest finite
    bound; linear interpolation inside the bucket, with a lower bound of 0 for the
    first bucket (unless its upper bound is <= 0).
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -INF
    if q > 1:
        return INF
    merged = _cumulative(buckets)
    if len(merged) < 2:
        return math.nan
    observations = merged[-1][1]
    if observations == 0:
        return math.nan
    rank = q * observations
    # First bucket (excluding +Inf) whose cumulative count reaches the rank.
    idx = len(merged) - 1
    for i in range(len(merged) - 1):
        if merged[i][1] >= rank:
            idx = i
            break
    if idx == len(merged) - 1:
        return merged[-2][0]
    if idx == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, end, count = 0.0, merged[idx][0], merged[idx][1]
    if idx > 0:
        start = merged[idx - 1][0]
        count -= merged[idx - 1][1]
        rank -= merged[idx - 1][1]
    if count == 0:
        # Only for q = 0 with an empty first bucket: no observation inside, rank 0
        # sits at the bucket's start (rather than the 0/0 of the interpolation).
        return start
    return start + (end - start) * (rank / count)


def _cumulative(buckets: Sequence[tuple[float, float]]) -> list[list[float]]:
    """``[bound, cumulative count]`` by bound, as PromQL reads a classic histogram.

    Empty without a +Inf bucket. Duplicate bounds (they can appear after
    aggregation) are merged and the counts made monotonic, as scrapes of a
    histogram in flux are not atomic.
    """
    ordered = sorted(buckets, key=lambda b: b[0])
    if not ordered or not math.isinf(ordered[-1][0]):
        return []
    merged: list[list[float]] = []
    for bound, count in ordered:
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])
    highest = -INF
    for b in merged:
        if b[1] < highest:
            b[1] = highest
        highest = b[1]
    return merged


def share_above(bound: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The share of a classic histogram's observations above ``bound``.

    Exact when ``bound`` is a bucket bound; inside a bucket, observations are
    taken as spread evenly (the interpolation of :func:`histogram_quantile`, with
    0 as the first bucket's lower bound); above the highest finite bound, what
    the +Inf bucket holds counts as above. None without a +Inf bucket or
    without observations.
    """
    merged = _cumulative(buckets)
    if not merged or merged[-1][1] <= 0:
        return None
    total = merged[-1][1]
    below = merged[-2][1] if len(merged) > 1 else 0.0
    lower, lower_count = 0.0, 0.0
    for upper, count in merged[:-1]:
        if bound < upper:
            if bound <= lower:
                below = lower_count
            else:
                below = lower_count + (count - lower_count) * (bound - lower) / (upper - lower)
            break
        lower, lower_count = upper, count
    return min(1.0, max(0.0, 1.0 - below / total))


@dataclass(frozen=True)
class Snapshot:
    """Cumulative values at one time: for a histogram, bucket counts by bound order."""

    time: float
    values: tuple[float, ...]


class CumulativeWindow:
    """Increase of cumulative values over the last ``window`` seconds.

    Until a full window has passed, the window starts at the first sample. When
    any value goes down (the worker restarted, or a data-parallel rank vanished)
    the history restarts from zero at the previous sample's time: what the
    restarted process counted since is real, what came before is gone. The
    increase is therefore never negative.
    """

    def __init__(self, window: float) -> None:
        self.window = window
        self._history: deque[Snapshot] = deque()
        self.resets = 0

    def __len__(self) -> int:
        return len(self._history)

    def add(self, time: float, values: Sequence[float]) -> None:
        values = tuple(values)
        if self._history:
            last = self._history[-1]
            if len(last.values) != len(values) or any(
                v < p for v, p in zip(values, last.values, strict=True)
            ):
                self.resets += 1
                self._history.clear()
                self._history.append(Snapshot(last.time, tuple(0.0 for _ in values)))
            elif time <= last.time:
                return
        self._history.append(Snapshot(time, values))
        self._prune(time)

    def _prune(self, now: float) -> None:
        # Keep one snapshot at or before the window's start as the baseline.
        cutoff = now - self.window
        while len(self._history) > 2 and self._history[1].time <= cutoff:
            self._history.popleft()

    def increase(self) -> tuple[float, ...] | None:
        """Latest minus baseline, or None with fewer than two samples."""
        if len(self._history) < 2:
            return None
        first, last = self._history[0], self._history[-1]
        return tuple(b - a for a, b in zip(first.values, last.values, strict=True))


class GaugeWindow:
    """Recent (time, value) samples of a gauge, for trends over the window."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, time: float, value: float) -> None:
        if self._samples and time <= self._samples[-1][0]:
            return
        self._samples.append((time, value))
        cutoff = time - self.window
        while self._samples and self._samples[0][0] < cutoff:
            self._samples.popleft()

    def slope(self) -> float | None:
        return least_squares_slope(self._samples)

    def __len__(self) -> int:
        return len(self._samples)


def least_squares_slope(
    points: Sequence[tuple[float, float]] | deque[tuple[float, float]],
) -> float | None:
    """Slope of the least-squares line through (t, y) points; None with < 2 distinct times."""
    n = len(points)
    if n < 2:
        return None
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (y - mean_y) for t, y in points)
    return cov / var


def window_quantiles(
    bounds: Sequence[float], increase: Sequence[float], quantiles: Sequence[float]
) -> dict[float, float] | None:
    """Quantiles from the per-bucket increase over a window; None when nothing was observed."""
    if not increase or increase[-1] <= 0:
        return None
    buckets = list(zip(bounds, increase, strict=True))
    out: dict[float, float] = {}
    for q in quantiles:
        value = histogram_quantile(q, buckets)
        if not math.isnan(value):
            out[q] = value
    return out or None
