"""The report's "What-if advice, checked" section: the shadow's predictions against outcomes.

``inferwatch advise --shadow STATE --shadow-metrics FILE`` (``advise/shadow.py``)
writes, for the last launch-flag change per worker and flag, the gauges
``inferwatch_whatif_predicted``, ``inferwatch_whatif_measured`` and
``inferwatch_whatif_error_ratio`` (labels ``worker, flag, from, to, figure``) and
``inferwatch_whatif_change_timestamp_seconds`` (``worker, flag, from, to``), which
node_exporter's textfile collector exposes. The report reads them from Prometheus
(never the state file), in one instant query at the period's end over the period
(``last_over_time``): a change superseded later in the week left its series in the
store, with its own ``to`` label, and is found too. A change is listed when its
timestamp is within the period; one row per worker, flag, old and new value (two
changes to the same values in one week show as the later).

Missing or non-finite figures (NaN is dropped by the client) read as unknown; the
error is the shadow's own ``error_ratio`` where present, else computed from the two.
The section is absent when no change falls in the period.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inferwatch.report.model import DAY, Period
from inferwatch.report.promapi import PrometheusClient

#: the figures the shadow records, in its order (advise.shadow.FIGURES; the report does
#: not import advise), and their names in the report
FIGURE_NAMES = {
    "throughput": "Throughput (tokens/s)",
    "queue": "Queue (requests)",
    "ttft_p50": "TTFT P50",
    "ttft_p95": "TTFT P95",
}
FIGURES = tuple(FIGURE_NAMES)
KEY = ("worker", "flag", "from", "to")
SERIES = {
    "predicted": "inferwatch_whatif_predicted",
    "measured": "inferwatch_whatif_measured",
    "error": "inferwatch_whatif_error_ratio",
    "at": "inferwatch_whatif_change_timestamp_seconds",
}


def query(period: Period) -> str:
    """One instant query (at the period's end) for the four gauges, tagged ``kind``."""
    window = f"{int(period.days * DAY)}s"
    by = ", ".join((*KEY, "figure"))
    return " or ".join(
        f"label_replace(max by ({by}) (last_over_time({metric}[{window}])), "
        f'"kind", "{kind}", "", "")'
        for kind, metric in SERIES.items()
    )


@dataclass(frozen=True)
class FigureCheck:
    figure: str
    predicted: float | None
    measured: float | None
    #: (predicted - measured) / measured; None when not known
    error: float | None


@dataclass(frozen=True)
class FlagChange:
    worker: str
    flag: str
    old: str  # "" when the shadow's series carry no ``from`` label
    new: str
    at: float
    figures: tuple[FigureCheck, ...]


@dataclass(frozen=True)
class WhatIfSection:
    changes: tuple[FlagChange, ...]
    #: figure -> (median absolute error, number of changes it rests on)
    median_abs_error: dict[str, tuple[float, int]]


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def changes_from(
    samples: Sequence[tuple[Mapping[str, str], float]], period: Period
) -> tuple[FlagChange, ...]:
    """The changes whose timestamp is within the period, oldest first."""
    at: dict[tuple[str, ...], float] = {}
    values: dict[tuple[str, ...], dict[str, dict[str, float]]] = {}
    for labels, value in samples:
        key = tuple(labels.get(k, "") for k in KEY)
        if not key[0] or not key[1]:
            continue
        kind = labels.get("kind", "")
        v = _finite(value)
        if v is None:
            continue
        if kind == "at":
            at[key] = v
        elif kind in ("predicted", "measured", "error") and labels.get("figure") in FIGURES:
            values.setdefault(key, {}).setdefault(labels["figure"], {})[kind] = v
    out = []
    for key, when in at.items():
        if not period.start <= when < period.end:
            continue
        per = values.get(key, {})
        figures = []
        for f in FIGURES:
            got = per.get(f)
            if not got:
                continue
            p, m = got.get("predicted"), got.get("measured")
            err = got.get("error")
            if err is None and p is not None and m:
                err = (p - m) / m
            figures.append(FigureCheck(f, p, m, err))
        out.append(FlagChange(key[0], key[1], key[2], key[3], when, tuple(figures)))
    out.sort(key=lambda c: (c.at, c.worker, c.flag))
    return tuple(out)


def section(changes: Sequence[FlagChange]) -> WhatIfSection | None:
    if not changes:
        return None
    errors: dict[str, list[float]] = {}
    for c in changes:
        for f in c.figures:
            if f.error is not None:
                errors.setdefault(f.figure, []).append(abs(f.error))
    median = {f: (statistics.median(errors[f]), len(errors[f])) for f in FIGURES if f in errors}
    return WhatIfSection(tuple(changes), median)


def collect_whatif(client: PrometheusClient, period: Period) -> WhatIfSection | None:
    samples = [(s.labels, s.value) for s in client.instant(query(period), period.end)]
    return section(changes_from(samples, period))
