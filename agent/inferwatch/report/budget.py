"""The report's error-budget section: per model and SLO, the budget this period spent.

Pure arithmetic over :class:`~inferwatch.report.model.RawData` (the same daily
buckets and counters as the latency sections) and the ``slos:`` objectives
of the thresholds (:func:`~inferwatch.report.model.slo_targets`):

- latency SLOs: good = the cumulative count of the bucket ``le`` = the threshold,
  over the model's workers whose engine the objective covers; total = ``+Inf``;
- availability: bad = finished with ``reason="error"`` + rejected, total =
  finished + rejected (an absent error reason or rejection counter counts 0).

"Budget used" is the period's burn rate scaled to its share of the SLO window:
``(bad / total) / (1 - objective) x days / window``. With the default 30-day
window a week on exactly the objective spends 23.3% of the budget; 100% or more
means the week alone spent a month's budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from inferwatch.pack.thresholds import Thresholds
from inferwatch.report.model import (
    DAY,
    Buckets,
    RawData,
    RawWorker,
    SloTarget,
    merge_buckets,
    slo_targets,
    total,
)

TITLES = {"ttft": "TTFT", "tpot": "TPOT", "availability": "availability"}


@dataclass(frozen=True)
class BudgetFigures:
    model: str
    kind: str
    objective: float
    #: latency threshold in seconds; None for availability
    le: float | None
    requests: float
    bad: float
    #: the period's length over the SLO window (7 / 30 for a weekly report)
    share_of_window: float

    @property
    def sli(self) -> float:
        return 1.0 - self.bad / self.requests

    @property
    def burn_rate(self) -> float:
        return (self.bad / self.requests) / (1.0 - self.objective)

    @property
    def budget_used(self) -> float:
        return self.burn_rate * self.share_of_window


def _target(targets: Sequence[SloTarget], w: RawWorker, kind: str) -> SloTarget | None:
    own = [t for t in targets if t.kind == kind and t.model == w.model]
    if own:
        return own[0] if w.engine in own[0].engines else None
    listed = {t.model for t in targets if t.model is not None}
    if w.model in listed:
        return None  # the model has an entry without this objective
    default = [t for t in targets if t.kind == kind and t.model is None]
    return default[0] if default and w.engine in default[0].engines else None


def _count_at(buckets: Buckets | None, le: float) -> tuple[float, float] | None:
    """(count at ``le``, count at +Inf) of one histogram; None when ``le`` is not a bound."""
    if not buckets:
        return None
    at = next((c for b, c in buckets if math.isclose(b, le, rel_tol=1e-9)), None)
    inf = next((c for b, c in buckets if math.isinf(b)), None)
    if at is None or inf is None:
        return None
    return at, inf


def budgets(raw: RawData, t: Thresholds) -> tuple[BudgetFigures, ...]:
    """One row per model and objective with requests this period, sorted by model."""
    period = raw.period
    share = period.days * DAY / t.slos.window
    targets = slo_targets(t)
    kinds = ("ttft", "tpot", "availability")
    rows: dict[tuple[str, str], tuple[SloTarget, float, float]] = {}
    for w in raw.workers:
        for kind in kinds:
            target = _target(targets, w, kind)
            if target is None:
                continue
            if kind == "availability":
                finished = total(period.current(w.daily("requests") or ())) or 0.0
                rejected = total(period.current(w.daily("rejected") or ()))
                failed = total(period.current(w.daily("failed") or ()))
                requests = finished + (rejected or 0.0)
                bad = (failed or 0.0) + (rejected or 0.0)
            else:
                days = w.histogram(kind)
                if days is None or target.le is None:
                    continue
                merged = merge_buckets(period.current(days))  # type: ignore[arg-type]
                counts = _count_at(merged, target.le)
                if counts is None:
                    continue
                good, requests = counts
                bad = requests - good
            key = (w.model, kind)
            _, r0, b0 = rows.get(key, (target, 0.0, 0.0))
            rows[key] = (target, r0 + requests, b0 + bad)
    out = []
    for (model, kind), (target, requests, bad) in sorted(
        rows.items(), key=lambda kv: (kv[0][0], kinds.index(kv[0][1]))
    ):
        if requests > 0:
            out.append(
                BudgetFigures(model, kind, target.objective, target.le, requests, bad, share)
            )
    return tuple(out)
