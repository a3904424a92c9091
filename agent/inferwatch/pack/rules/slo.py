"""SLOs with error budgets: SLI recording rules and burn-rate alerts.

From the ``slos:`` section of the thresholds (:mod:`inferwatch.pack.slo_spec`)::

    model:inferwatch_slo_errors:ratio_rate<W>          share of bad requests over W
    model:inferwatch_slo_error_budget:ratio            1 - objective
    model:inferwatch_slo_burn_rate:ratio_rate<W>       errors / budget (1 = on budget)
    model:inferwatch_slo_error_budget_remaining:ratio  1 - burn rate over slos.window

each with labels ``job, model, slo`` (``slo`` = ttft, tpot, availability), for W
in the burn windows of the Google SRE workbook (ch. 5, "Alerting on SLOs",
multiwindow multi-burn-rate) and ``slos.window``. A latency request is good
when it lands in the engine's bucket ``le`` = the threshold; an availability
request is good when it finished without ``reason="error"`` and was not rejected.
Rates are summed by model before the division, so several workers (and a
worker's restart: ``rate`` absorbs the counter reset) make one SLI. A model with
no requests in a window has no defined share there (0/0): its alerts stay
silent, as do the P99 alerts on an idle worker.

Alerts, one name per objective (``InferenceTTFTBudgetBurn``, ...), each a page
(critical: 14.4x over 1h confirmed over 5m, or 6x over 6h confirmed over 30m)
and a ticket (warning: 3x over 1d with 2h, or 1x over 3d with 6h). The short
window makes the alert resolve soon after the burn stops; no ``for`` is needed.
A pair fires only when its long window holds data (``slos.min_requests``
requests, and the SLI recorded since ``slos.min_coverage`` of the window ago):
on a fresh Prometheus or a new model every window is only minutes long.
The label ``burn_window`` says which pair fired (the faster one when both do).

This module imports nothing of ``pack.rules``: the rules call
:func:`recording_rules` and :func:`alert_fields`; the alerts' runbook pages are
the templates ``pack/runbooks/pages/*BudgetBurn.md.j2`` (their common text in
``_budget_burn.md.j2``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from prometheus_client.utils import floatToGoString

from inferwatch.pack.names import (
    MODEL,
    SLO_BUDGET_REMAINING,
    SLO_ERROR_BUDGET,
    SLO_LABELS,
    TTFT,
    WARMUP_REQUESTS_TTFT,
    WORKER_KEY,
    slo_burn_rate,
    slo_errors,
    slo_requests,
)
from inferwatch.pack.rules import own_histograms
from inferwatch.pack.rules.common import record
from inferwatch.pack.slo_spec import KINDS, Objective, SloEntry, SloSpec
from inferwatch.pack.thresholds import Thresholds, format_duration

RECORD_GROUP = "inferwatch-slo.rules"
ALERT_GROUP = "inferwatch-slo.alerts"

BY = MODEL


@dataclass(frozen=True)
class Burn:
    """One window pair: the budget burns ``factor`` times too fast over both windows."""

    factor: float
    long: str
    short: str
    severity: str


#: SRE workbook, table 5-8: pages at 2% of a 30-day budget in 1h or 5% in 6h; tickets
#: at 10% in 3 days (3x over 1d) or all of it (1x over 3d)
BURNS = (
    Burn(14.4, "1h", "5m", "critical"),
    Burn(6.0, "6h", "30m", "critical"),
    Burn(3.0, "1d", "2h", "warning"),
    Burn(1.0, "3d", "6h", "warning"),
)

ALERT_NAMES = {
    "ttft": "InferenceTTFTBudgetBurn",
    "tpot": "InferenceTPOTBudgetBurn",
    "availability": "InferenceAvailabilityBudgetBurn",
}
TITLES = {"ttft": "TTFT", "tpot": "TPOT", "availability": "availability"}


def window_name(seconds: float) -> str:
    """A PromQL duration in whole days where it is one (``30d``), else ``format_duration``."""
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{int(seconds // 86400)}d"
    return format_duration(seconds)


def windows(spec: SloSpec) -> tuple[str, ...]:
    """Every window an SLI is recorded over: the burn windows, then the budget's."""
    short_first = sorted(
        {w for b in BURNS for w in (b.long, b.short)}, key=lambda w: window_seconds(w)
    )
    budget = window_name(spec.window)
    return tuple(dict.fromkeys([*short_first, budget]))


def window_seconds(window: str) -> float:
    units = {"m": 60, "h": 3600, "d": 86400}
    return float(window[:-1]) * units[window[-1]]


def num_text(x: float) -> str:
    """A PromQL number literal: 14.4 -> ``14.4``, 6.0 -> ``6``."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def _string(value: str) -> str:
    """A PromQL double-quoted string literal's content."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _regex(values: tuple[str, ...]) -> str:
    return _string("|".join(re.escape(v) for v in values))


def model_matchers(spec: SloSpec, entry: SloEntry) -> tuple[str, ...]:
    """The ``model`` matcher of an entry's series (the default: unlisted models)."""
    if entry.model is not None:
        return (f'model="{_string(entry.model)}"',)
    if spec.models:
        return (f'model!~"{_regex(spec.models)}"',)
    return ()


def entry_matchers(spec: SloSpec, entry: SloEntry) -> tuple[str, ...]:
    """Label matchers selecting the series an entry covers (the default: unlisted models)."""
    return (f'engine=~"{_regex(entry.engines)}"', *model_matchers(spec, entry))


def _sum_rate(t: Thresholds, metric: str, matchers: tuple[str, ...], window: str) -> str:
    return f"sum by ({BY}) (rate({metric}{t.pack.selector(*matchers)}[{window}]))"


def _sum_buckets(
    t: Thresholds, spec: SloSpec, entry: SloEntry, metric: str, le: str, window: str
) -> str:
    """The entry's requests per second in bucket ``le`` over ``window``, by model."""
    per_worker = own_histograms.bucket_rate(
        t,
        metric,
        window=window,
        matchers=(*model_matchers(spec, entry), f'le="{le}"'),
        engines=entry.engines,
    )
    if metric == TTFT:
        per_worker = _without_warmup(t, per_worker, le, window)
    indented = per_worker.replace("\n", "\n        ")
    return f"sum by ({BY}) (\n        {indented}\n    )"


def _without_warmup(t: Thresholds, per_worker: str, le: str, window: str) -> str:
    """Per-worker TTFT bucket rates less the warm-up gate's own requests in that bucket
    (``WARMUP_REQUESTS_TTFT``): no user waited for them. Clamped at zero (the agent times
    a request a little later than the engine does, and the two counters are read at
    slightly different moments); a worker without a gate keeps its rates as they are."""
    sel = t.pack.selector(f'le="{le}"')
    warm = f"sum by (le, {WORKER_KEY}) (rate({WARMUP_REQUESTS_TTFT}_bucket{sel}[{window}]))"
    rates = per_worker.replace("\n", "\n    ")
    return (
        f"clamp_min(\n  (\n    {rates}\n  )\n  - on (le, {WORKER_KEY}) group_left ()\n  {warm},\n  0\n)\n"
        f"or\n(\n  {per_worker.replace(chr(10), chr(10) + '  ')}\n)"
    )


def error_ratio(t: Thresholds, spec: SloSpec, entry: SloEntry, o: Objective, w: str) -> str:
    """PromQL: the share of the entry's requests that missed objective ``o`` over ``w``."""
    m = entry_matchers(spec, entry)
    if o.le is not None:
        # Per worker, the agent's buckets, else the engine's own (export_histograms:
        # false; pack.rules.own_histograms): the le of both is the engine's boundary, as its
        # client library wrote it. The +Inf bucket, not _count: the same number, and a
        # bucket is what the engine mapping guarantees for every histogram it passes.
        good, total = (
            _sum_buckets(t, spec, entry, f"inferwatch_{o.kind}_seconds", le, w)
            for le in (floatToGoString(o.le), "+Inf")
        )
        return f"1 - (\n    {good}\n  /\n    {total}\n)"
    finished = _sum_rate(t, "inferwatch_requests_finished_total", m, w)
    failed = _sum_rate(t, "inferwatch_requests_finished_total", (*m, 'reason="error"'), w)
    rejected = _sum_rate(t, "inferwatch_requests_rejected_total", m, w)
    # an engine that never reported an error reason or has no rejection counter has
    # none of them, as long as it reports finished requests at all
    return (
        "(\n"
        f"    ({failed} or 0 * {finished})\n"
        f"  + ({rejected} or 0 * {finished})\n"
        ")\n/\n(\n"
        f"    {finished}\n"
        f"  + ({rejected} or 0 * {finished})\n"
        ")"
    )


def request_rate(t: Thresholds, spec: SloSpec, entry: SloEntry, o: Objective, w: str) -> str:
    """PromQL: the entry's requests per second over ``w`` (the SLI's denominator)."""
    if o.le is not None:
        return _sum_buckets(t, spec, entry, f"inferwatch_{o.kind}_seconds", "+Inf", w)
    m = entry_matchers(spec, entry)
    finished = _sum_rate(t, "inferwatch_requests_finished_total", m, w)
    rejected = _sum_rate(t, "inferwatch_requests_rejected_total", m, w)
    return f"{finished}\n+ ({rejected} or 0 * {finished})"


def long_windows() -> tuple[str, ...]:
    """The long window of every burn pair, shortest first."""
    return tuple(dict.fromkeys(b.long for b in BURNS))


def coverage(spec: SloSpec, b: Burn) -> str:
    """How far back the SLI must have been recorded for pair ``b`` to fire."""
    return format_duration(window_seconds(b.long) * spec.min_coverage)


def _objectives(spec: SloSpec) -> list[tuple[SloEntry, Objective]]:
    """(entry, objective) pairs, objective kind by kind."""
    return [
        (entry, o) for kind in KINDS for entry in spec.active if (o := entry.get(kind)) is not None
    ]


def kinds(spec: SloSpec) -> tuple[str, ...]:
    """The objectives at least one active entry has."""
    present = {o.kind for _, o in _objectives(spec)}
    return tuple(k for k in KINDS if k in present)


def _tag(expr: str, label: str, value: str) -> str:
    indented = expr.replace("\n", "\n  ")
    return f'label_replace(\n  {indented},\n  "{label}", "{value}", "", ""\n)'


def recording_rules(t: Thresholds) -> list[dict[str, Any]]:
    """The SLI, budget, burn-rate and budget-left rules, in dependency order (none when off)."""
    spec = t.slos
    pairs = _objectives(spec)
    if not pairs:
        return []
    rules: list[dict[str, Any]] = []
    budget_window = window_name(spec.window)
    for w in windows(spec):
        expr = "\nor\n".join(
            _tag(error_ratio(t, spec, entry, o, w), "slo", o.kind) for entry, o in pairs
        )
        rules.append(record(slo_errors(w), expr))
    # The budget exists for each model and objective that has an SLI at all (a value,
    # NaN included, over the budget window).
    budget_parts = []
    for entry, o in pairs:
        sel = [f'slo="{o.kind}"']
        if entry.model is not None:
            sel.append(f'model="{_string(entry.model)}"')
        elif spec.models:
            sel.append(f'model!~"{_regex(spec.models)}"')
        budget_parts.append(
            f"(0 * group by ({SLO_LABELS}) ({slo_errors(budget_window)}{{{','.join(sel)}}}) "
            f"+ {num_text(round(o.budget, 12))})"
        )
    rules.append(record(SLO_ERROR_BUDGET, "\nor\n".join(budget_parts)))
    for w in windows(spec):
        rules.append(record(slo_burn_rate(w), f"{slo_errors(w)}\n/\n{SLO_ERROR_BUDGET}"))
    rules.append(record(SLO_BUDGET_REMAINING, f"1 - {slo_burn_rate(budget_window)}"))
    # How much data each long burn window holds: a pair fires only on enough requests.
    for w in long_windows():
        expr = "\nor\n".join(
            _tag(request_rate(t, spec, entry, o, w), "slo", o.kind) for entry, o in pairs
        )
        rules.append(record(slo_requests(w), expr))
    return rules


def _burning(spec: SloSpec, kind: str, b: Burn) -> str:
    """Both windows of pair ``b`` over its factor, and the long window full enough to mean
    it: ``min_requests`` requests in it, and the SLI recorded since ``min_coverage`` of it
    (on a fresh Prometheus or a new model, the long window holds only minutes)."""
    sel = f'{{slo="{kind}"}}'
    f = num_text(b.factor)
    return (
        f"{slo_burn_rate(b.long)}{sel} > {f}\n"
        f"and\n{slo_burn_rate(b.short)}{sel} > {f}\n"
        f"and on ({SLO_LABELS})\n"
        f"{slo_requests(b.long)}{sel} * {num_text(window_seconds(b.long))} >= {spec.min_requests}\n"
        f"and on ({SLO_LABELS})\n"
        f"{slo_errors(b.long)}{sel} offset {coverage(spec, b)}"
    )


def alert_expr(kind: str, severity: str, spec: SloSpec) -> str:
    """The alert of one objective and severity: its window pairs, the faster one first."""
    pairs = [b for b in BURNS if b.severity == severity]
    expr = ""
    for b in pairs:
        tagged = _tag(_burning(spec, kind, b), "burn_window", b.long)
        expr = tagged if not expr else f"(\n{expr}\n)\nor on ({SLO_LABELS})\n{tagged}"
    return expr


def alert_fields(t: Thresholds) -> list[dict[str, Any]]:
    """Keyword arguments of ``rules.Alert`` for every burn-rate alert (none when off)."""
    spec = t.slos
    budget = window_name(spec.window)
    out = []
    for kind in kinds(spec):
        title = TITLES[kind]
        for severity, summary, what in (
            (
                "critical",
                f"A model's {title} error budget is burning fast: it will be gone within days.",
                "page",
            ),
            (
                "warning",
                f"A model's {title} error budget is burning faster than it can last.",
                "ticket",
            ),
        ):
            pairs = ", ".join(
                f"{num_text(b.factor)}x over {b.long} and {b.short}"
                for b in BURNS
                if b.severity == severity
            )
            out.append(
                {
                    "name": ALERT_NAMES[kind],
                    "group": ALERT_GROUP,
                    "expr": alert_expr(kind, severity, spec),
                    "for_seconds": 0,
                    "severity": severity,
                    "summary": summary,
                    "description": (
                        "Model {{ $labels.model }} is spending its "
                        f"{title} error budget ({budget}) "
                        "{{ $value | humanize }} times as fast as the objective allows over the "
                        "last {{ $labels.burn_window }}, confirmed over the short window "
                        f"({what} pairs: {pairs})."
                    ),
                }
            )
    return out


def p99_alerts_kept(t: Thresholds, name: str) -> bool:
    """False for the P99 threshold family's alerts when ``slos.p99_alerts`` is off."""
    return t.slos.p99_alerts or name not in P99_FAMILY


#: the simpler family: a P99 above a fixed threshold for a while
P99_FAMILY = ("InferenceTTFTSLOBreach", "InferenceTPOTSLOBreach")
