"""SLOs with error budgets: SLI recording rules and burn-rate alerts.

From the ``slos:`` section of the thresholds (:mod:`inferwatch.pack.slo_spec`)::

    model:inferwatch_slo_good_requests:rate<W>         good requests per second over W
    model:inferwatch_slo_requests:rate<W>              requests per second the SLI counts
    model:inferwatch_slo_errors:ratio_rate<W>          share of bad requests over W
    model:inferwatch_slo_error_budget:ratio            1 - objective
    model:inferwatch_slo_burn_rate:ratio_rate<W>       errors / budget (1 = on budget)
    model:inferwatch_slo_error_budget_remaining:ratio  1 - burn rate over slos.window

each with labels ``job, model, slo`` (``slo`` = ttft, tpot, availability), for W
in the burn windows of the Google SRE workbook (ch. 5, "Alerting on SLOs",
multiwindow multi-burn-rate) and ``slos.window``. A latency request is good
when it lands in the engine's bucket ``le`` = the threshold; an availability
request is good when it finished without ``reason="error"`` and was not rejected.
Rates are summed by model, so several workers (and a worker's restart: ``rate``
absorbs the counter reset) make one SLI. A model with no requests in a window has
no defined share there (0/0): its alerts stay silent, as do the P99 alerts on an
idle worker.

What the rules cost (docs/alerts.md, "What the SLO rules cost"): every raw series
is read once per short window. The windows under a day (5m to 6h: the pages'
windows and the tickets' short ones) are read from the raw counters in
:data:`RECORD_GROUP`, at the pack's interval: ``good`` and ``requests`` per model,
then their ratio, so no series is read twice. The windows of a day or more (1d,
3d, ``slos.window``) never touch a raw series: :data:`LONG_GROUP`, evaluated every
:data:`LONG_INTERVAL` (Pyrra's interval for a 30-day window), first averages the
5m records over its own interval (one sample per model every 2m30s), then
averages those over the window (Sloth's way of building the period's ratio from a
short record). A day's window then reads 575 samples of one series per model
instead of 5,760 of every bucket series of every worker.

Alerts, one name per objective (``InferenceTTFTBudgetBurn``, ...), each a page
(critical: 14.4x over 1h confirmed over 5m, or 6x over 6h confirmed over 30m)
and a ticket (warning: 3x over 1d with 2h, or 1x over 3d with 6h). The short
window makes the alert resolve soon after the burn stops; no ``for`` is needed.
A pair fires only when its long window holds data (``slos.min_requests``
requests, and the SLI recorded since ``slos.min_coverage`` of the window ago):
on a fresh Prometheus or a new model every window is only minutes long.
The label ``burn_window`` says which pair fired (the faster one when both do).

This module imports nothing of ``pack.rules``: the rules call
:func:`recording_groups` and :func:`alert_fields`; the alerts' runbook pages are
the templates ``pack/runbooks/pages/*BudgetBurn.md.j2`` (their common text in
``_budget_burn.md.j2``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client.utils import floatToGoString

from inferwatch.engines import contract
from inferwatch.pack import signals as S
from inferwatch.pack.names import (
    MODEL,
    SLO_BUDGET_REMAINING,
    SLO_ERROR_BUDGET,
    SLO_LABELS,
    TTFT,
    WORKER_INFO,
    WORKER_KEY,
    slo_burn_rate,
    slo_errors,
    slo_good,
    slo_requests,
)
from inferwatch.pack.rules import own_histograms
from inferwatch.pack.rules.common import record
from inferwatch.pack.slo_spec import KINDS, Objective, SloEntry, SloSpec
from inferwatch.pack.thresholds import Thresholds, format_duration

RECORD_GROUP = "inferwatch-slo.rules"
#: the warm-up gate's own requests, taken out of the TTFT SLI (:func:`_warmup_negated`)
WARMUP_BUCKETS = S.bucket_rate(contract.WARMUP_REQUESTS_TTFT_SECONDS)
#: the windows of a day or more, built from the 5m records (never from raw series)
LONG_GROUP = "inferwatch-slo-long.rules"
#: Pyrra's interval for its 30-day window; under half of Prometheus' 5m lookback, so the
#: alerts (every pack interval) always find the long records' latest sample
LONG_INTERVAL = 150.0
ALERT_GROUP = "inferwatch-slo.alerts"
#: windows from this length on are long: derived in LONG_GROUP from the 5m records
LONG_FROM = 86400.0
#: the short window every long one is built from
BASE = "5m"

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


def _sum_rate(t: Thresholds, signal: S.Signal, matchers: tuple[str, ...], window: str) -> str:
    return signal.render(selector=t.pack.selector(*matchers), window=window, by=BY)


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
    indented = per_worker.replace("\n", "\n        ")
    if metric != TTFT:
        return f"sum by ({BY}) (\n        {indented}\n    )"
    warmup = _warmup_negated(t, entry_matchers(spec, entry), le, window).replace("\n", "\n        ")
    return (
        f"clamp_min(\n    sum by ({BY}) (\n        (\n        {indented}\n        )\n"
        f"        or\n        {warmup}\n    ),\n    0\n  )"
    )


def _warmup_negated(t: Thresholds, matchers: tuple[str, ...], le: str, window: str) -> str:
    """The warm-up gate's own requests in bucket ``le`` (``WARMUP_BUCKETS``), per
    worker, negated and labelled ``src="warmup"``: or-ed with the workers' bucket rates and
    summed by model, they take out of the SLI the requests no user sent, and each raw
    series is read once. The gate's histogram has no model label; the worker's model
    comes from ``inferwatch_worker_info``, where ``matchers`` (the entry's engines and
    models) pick the workers (a worker whose info names two models at once is left out of
    the join rather than breaking the rule). The sum is clamped at zero:
    the agent times a request a little later than the engine does, and the two counters
    are read at slightly different moments. A worker without a gate has no such series."""
    sel = t.pack.selector(f'le="{le}"')
    info = f"max by ({WORKER_KEY}, model) ({WORKER_INFO}{t.pack.selector(*matchers)})"
    return (
        "label_replace(\n"
        f"  -{WARMUP_BUCKETS.render(selector=sel, window=window, by=f'le, {WORKER_KEY}')}\n"
        f"  * on ({WORKER_KEY}) group_left (model)\n"
        f"  ({info} unless on ({WORKER_KEY}) count by ({WORKER_KEY}) ({info}) > 1),\n"
        '  "src", "warmup", "", ""\n'
        ")"
    )


def good_rate(t: Thresholds, spec: SloSpec, entry: SloEntry, o: Objective, w: str) -> str:
    """PromQL: the entry's good requests per second over ``w``, by model, from raw series."""
    if o.le is not None:
        # Per worker, the agent's buckets, else the engine's own (export_histograms:
        # false; pack.rules.own_histograms): the le of both is the engine's boundary, as its
        # client library wrote it.
        return _sum_buckets(
            t, spec, entry, f"inferwatch_{o.kind}_seconds", floatToGoString(o.le), w
        )
    m = entry_matchers(spec, entry)
    return _sum_rate(t, S.SERVED_RATE, m, w)


def request_rate(t: Thresholds, spec: SloSpec, entry: SloEntry, o: Objective, w: str) -> str:
    """PromQL: the entry's requests per second over ``w`` (the SLI's denominator), reading
    no raw series that :func:`good_rate` read: availability adds the failed and rejected
    requests to the recorded good ones."""
    if o.le is not None:
        # the +Inf bucket, not _count: the same number, and a bucket is what the engine
        # mapping guarantees for every histogram it passes
        return _sum_buckets(t, spec, entry, f"inferwatch_{o.kind}_seconds", "+Inf", w)
    m = entry_matchers(spec, entry)
    good = slo_good(w) + "{" + ",".join((f'slo="{o.kind}"', *model_matchers(spec, entry))) + "}"
    failed = _sum_rate(t, S.ERROR_RATE, m, w)
    rejected = _sum_rate(t, S.REJECT_RATE, m, w)
    # an engine that never reported an error reason or has no rejection counter has
    # none of them, as long as it reports finished requests at all
    return (
        f"{good}\n"
        f"+ on ({BY}) group_left ()\n({failed} or 0 * sum by ({BY}) ({good}))\n"
        f"+ on ({BY}) group_left ()\n({rejected} or 0 * sum by ({BY}) ({good}))"
    )


def error_ratio(w: str) -> str:
    """PromQL over the window's records: the share of requests that missed the objective."""
    return f"1 - {slo_good(w)} / {slo_requests(w)}"


def is_long(window: str) -> bool:
    return window_seconds(window) >= LONG_FROM


def sampled(name: str) -> str:
    """The long group's own sample of a 5m record: its mean over the group's interval."""
    return f"{name}_avg{format_duration(LONG_INTERVAL)}"


def long_average(name: str, window: str) -> str:
    """PromQL: the mean of the 5m record ``name`` over ``window``, from its samples in the
    long group. The 5m rates taken over the last ``window - 5m`` cover exactly ``window`` of
    raw data, centred where the window is (its first and last 5 minutes weigh less)."""
    span = format_duration(window_seconds(window) - window_seconds(BASE))
    return f"avg_over_time({sampled(name)}[{span}])"


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


def _by_kind(
    t: Thresholds, pairs: list[tuple[SloEntry, Objective]], part: Callable[..., str], w: str
) -> str:
    """``part(t, spec, entry, objective, w)`` for every pair, tagged with its ``slo``, or-ed."""
    return "\nor\n".join(_tag(part(t, t.slos, e, o, w), "slo", o.kind) for e, o in pairs)


def recording_groups(t: Thresholds) -> list[dict[str, Any]]:
    """The SLO rule groups (none when off): the windows under a day from raw series at the
    pack's interval, the longer ones from the 5m records every :data:`LONG_INTERVAL`."""
    spec = t.slos
    pairs = _objectives(spec)
    if not pairs:
        return []
    short = [w for w in windows(spec) if not is_long(w)]
    long = [w for w in windows(spec) if is_long(w)]
    fast: list[dict[str, Any]] = []
    for w in short:
        fast.append(record(slo_good(w), _by_kind(t, pairs, good_rate, w)))
        fast.append(record(slo_requests(w), _by_kind(t, pairs, request_rate, w)))
        fast.append(record(slo_errors(w), error_ratio(w)))
    slow: list[dict[str, Any]] = [
        record(sampled(name), f"avg_over_time({name}[{format_duration(LONG_INTERVAL)}])")
        for name in (slo_good(BASE), slo_requests(BASE))
    ]
    for w in long:
        slow.append(record(slo_good(w), long_average(slo_good(BASE), w)))
        slow.append(record(slo_requests(w), long_average(slo_requests(BASE), w)))
        slow.append(record(slo_errors(w), error_ratio(w)))
    budget_window = window_name(spec.window)
    # The budget exists for each model and objective that has an SLI at all (a value,
    # NaN included) over the budget window, or, before the long group's first evaluation
    # (a fresh Prometheus), over the longest short window: it lives in the fast group, so
    # the short windows' burn rates never wait for the long group.
    budget_parts = []
    for entry, o in pairs:
        where = "{" + ",".join((f'slo="{o.kind}"', *model_matchers(spec, entry))) + "}"
        seen = f"{slo_requests(short[-1])}{where} or {slo_errors(budget_window)}{where}"
        budget_parts.append(
            f"(0 * group by ({SLO_LABELS}) ({seen}) + {num_text(round(o.budget, 12))})"
        )
    fast.append(record(SLO_ERROR_BUDGET, "\nor\n".join(budget_parts)))
    for rules, ws in ((fast, short), (slow, long)):
        rules.extend(
            record(slo_burn_rate(w), f"{slo_errors(w)}\n/\n{SLO_ERROR_BUDGET}") for w in ws
        )
    slow.append(record(SLO_BUDGET_REMAINING, f"1 - {slo_burn_rate(budget_window)}"))
    return [
        {"name": RECORD_GROUP, "interval": t.pack.interval, "rules": fast},
        {"name": LONG_GROUP, "interval": format_duration(LONG_INTERVAL), "rules": slow},
    ]


def recording_rules(t: Thresholds) -> list[dict[str, Any]]:
    """Every SLO recording rule, the fast group's first (none when off)."""
    return [rule for group in recording_groups(t) for rule in group["rules"]]


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
