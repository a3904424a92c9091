"""Hold an alert timeline to a scenario's ground truth; the per-alert table.

An *episode* is a run of consecutive evaluation steps where an alert series is
pending or firing. One that reaches firing is a page (a ticket for a warning);
one that ends while still pending, before the scenario's end, is a *flap*.
A page that no ``expect`` or ``allow`` entry of the ground truth covers is a
*false page*, counted by severity; an ``expect`` entry no page matches after its
onset is a *miss*; the time from the onset to the first matching firing step is
the *time to detect*, held to the alert's bound (``truth.AlertFacts.bound``).

A burn-rate row with a ``share`` is held to its pair's bound
(``truth.AlertFacts.burn_bound``) and counted in a row of its own in the table,
``<alert> (<long>/<short>)``, since a ticket's pair takes hours where a page's takes
minutes; false pages and flaps stay on the alert's row. A recorded long-window error
ratio (the scenario's ``ratios:``) more than :data:`RATIO_TOLERANCE` (relative) away
from the exact one is a failure too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from inferwatch.backtest.engine import AlertKey, Timeline
from inferwatch.backtest.scenario import Truth
from inferwatch.backtest.truth import PAIRS, AlertFacts
from inferwatch.validate import format_duration

#: how far (relative) a recorded long-window error ratio may be from the exact one
RATIO_TOLERANCE = 0.02


@dataclass
class Episode:
    key: AlertKey
    start: float
    end: float  # the last step it was active
    fired_at: float | None
    open_at_end: bool

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.key[1])

    @property
    def severity(self) -> str:
        return self.labels.get("severity", "none")


@dataclass
class AlertScore:
    alert: str
    bound: float | None = None
    expected: int = 0
    detected: list[float] = field(default_factory=list)
    misses: int = 0
    slow: int = 0
    false_pages: dict[str, int] = field(default_factory=dict)
    flaps: int = 0
    allowed_pages: int = 0


@dataclass
class ScenarioScore:
    scenario: str
    source: str
    xfail: str | None
    alerts: dict[str, AlertScore]
    #: one line per problem: a false critical page, a miss, a detection over its bound
    failures: list[str]
    #: every page, as (alert, severity, first firing second, labels)
    pages: list[tuple[str, str, float, dict[str, str]]]
    #: the intervals it ran at (a scenario may set its own)
    scrape: float = 0.0
    evaluation: float = 0.0
    #: (window, model, slo, exact, recorded or None) of every ratio checked
    ratios: list[tuple[str, str, str, float, float | None]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_json(self) -> dict[str, object]:
        return {
            "scenario": self.scenario,
            "source": self.source,
            "xfail": self.xfail,
            "passed": self.passed,
            "failures": self.failures,
            "scrape_interval_s": self.scrape,
            "evaluation_interval_s": self.evaluation,
            "ratios": [
                {"window": w, "model": m, "slo": k, "exact": e, "recorded": r}
                for w, m, k, e, r in self.ratios
            ],
            "alerts": {name: asdict(a) for name, a in sorted(self.alerts.items())},
            "pages": [
                {"alert": a, "severity": s, "at": t, "labels": labels}
                for a, s, t, labels in self.pages
            ],
        }


def episodes(timeline: Timeline) -> list[Episode]:
    out = []
    step = timeline.steps[1] - timeline.steps[0] if len(timeline.steps) > 1 else 1.0
    last = timeline.steps[-1]
    for key, states in sorted(timeline.states.items()):
        times = sorted(states)
        run: list[float] = []
        for t in [*times, None]:
            if t is not None and (not run or abs(t - run[-1] - step) < 1e-6):
                run.append(t)
                continue
            if run:
                fired = next((x for x in run if states[x] == "firing"), None)
                out.append(Episode(key, run[0], run[-1], fired, run[-1] >= last))
            run = [t] if t is not None else []
    return out


def _matches(labels: dict[str, str], want: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in want.items())


def pair_row(alert: str, pair: str) -> str:
    """The table row of a burn-rate alert's expected firings of one window pair."""
    return f"{alert} ({pair}/{_secs(PAIRS[pair].short)})"


def score(
    name: str,
    source: str,
    timeline: Timeline,
    truth: Truth,
    facts: dict[str, AlertFacts],
    scrape: float,
    evaluation: float,
) -> ScenarioScore:
    alerts: dict[str, AlertScore] = {}

    def row(alert: str) -> AlertScore:
        if alert not in alerts:
            f = facts.get(alert)
            alerts[alert] = AlertScore(alert, f.bound(scrape, evaluation) if f else None)
        return alerts[alert]

    eps = episodes(timeline)
    failures: list[str] = []
    pages = [(e.key[0], e.severity, e.fired_at, e.labels) for e in eps if e.fired_at is not None]
    used: set[int] = set()
    for exp in truth.expect:
        r = row(exp.alert)
        f = facts.get(exp.alert)
        pair = exp.labels.get("burn_window", "")
        if exp.share is not None and f is not None and pair in PAIRS:
            key = pair_row(exp.alert, pair)
            own = f.burn_bound(pair, exp.share, exp.onset, scrape, evaluation)
            if own is None:
                failures.append(
                    f"bound: {exp.alert}{exp.labels} at a bad share of {exp.share:g} never "
                    f"passes {PAIRS[pair].factor:g} x its budget"
                )
                continue
            if key not in alerts:
                alerts[key] = AlertScore(key, own)
            r = alerts[key]
            r.bound = own if r.bound is None else max(r.bound, own)
        else:
            own = r.bound
        r.expected += 1
        hits = [
            (i, e)
            for i, e in enumerate(eps)
            if e.key[0] == exp.alert
            and e.fired_at is not None
            and _matches(e.labels, exp.labels)
            and e.end >= exp.onset
        ]
        for i, _ in hits:
            used.add(i)
        after = [e.fired_at for _, e in hits if e.fired_at is not None and e.fired_at >= exp.onset]
        where = f"{exp.alert}{exp.labels or ''}"
        if not after:
            r.misses += 1
            failures.append(f"miss: {where} never fired after its onset {exp.onset:g}s")
            continue
        took = min(after) - exp.onset
        r.detected.append(took)
        if own is not None and took > own:
            r.slow += 1
            failures.append(f"slow: {where} fired {took:g}s after its onset, bound {own:g}s")
    for i, e in enumerate(eps):
        alert = e.key[0]
        if e.fired_at is None:
            if not e.open_at_end:
                row(alert).flaps += 1
            continue
        early = any(
            x.alert == alert and _matches(e.labels, x.labels) and e.fired_at < x.onset
            for x in truth.expect
        )
        if i in used and not early:
            continue
        if any(
            a.alert == alert and _matches(e.labels, a.labels) and e.fired_at >= a.after
            for a in truth.allow
        ):
            row(alert).allowed_pages += 1
            continue
        r = row(alert)
        r.false_pages[e.severity] = r.false_pages.get(e.severity, 0) + 1
        if e.severity == "critical":
            failures.append(f"false critical page: {alert}{e.labels} fired at {e.fired_at:g}s")
    checked = []
    for ratio in truth.ratios:
        got = [
            v
            for labels, v in timeline.probes.get((ratio.record, ratio.at), [])
            if labels.get("model") == ratio.model and labels.get("slo") == ratio.slo
        ]
        recorded = got[0] if got else None
        checked.append((ratio.window, ratio.model, ratio.slo, ratio.exact, recorded))
        where = f"{ratio.window} {ratio.slo} error ratio of {ratio.model} at {_secs(ratio.at)}"
        if recorded is None:
            failures.append(f"ratio: no recorded {where}")
        elif abs(recorded - ratio.exact) > RATIO_TOLERANCE * abs(ratio.exact):
            failures.append(f"ratio: {where} recorded {recorded:.6g}, exact {ratio.exact:.6g}")
    return ScenarioScore(
        name, source, truth.xfail, alerts, failures, pages, scrape, evaluation, checked
    )


# --------------------------------------------------------------------------- the table


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 3600 and value % 3600 == 0:
        return f"{value / 3600:g}h"
    if value >= 7200:
        days, rest = divmod(value, 86400) if value >= 172800 else (0.0, value)
        hours, rest = divmod(rest, 3600)
        text = f"{hours:.0f}h{rest / 60:.1f}m".replace(".0m", "m")
        return f"{days:.0f}d{text}" if days else text
    if value >= 120:
        return f"{value / 60:.1f}m".replace(".0m", "m")
    return f"{value:g}s"


@dataclass
class Summary:
    alert: str
    severity: str
    bound: float | None
    expected: int = 0
    detect_max: float | None = None
    detect_median: float | None = None
    misses: int = 0
    slow: int = 0
    false_critical: int = 0
    false_warning: int = 0
    flaps: int = 0
    scenarios: list[str] = field(default_factory=list)


def summarize(
    scores: list[ScenarioScore], facts: dict[str, AlertFacts], scrape: float, evaluation: float
) -> list[Summary]:
    out: dict[str, Summary] = {
        name: Summary(name, "", f.bound(scrape, evaluation)) for name, f in facts.items()
    }
    detected: dict[str, list[float]] = {}
    for s in scores:
        for name, a in s.alerts.items():
            row = out.setdefault(name, Summary(name, "", a.bound))
            if name not in facts and a.bound is not None:
                row.bound = max(row.bound or 0.0, a.bound)
            row.expected += a.expected
            row.misses += a.misses
            row.slow += a.slow
            row.flaps += a.flaps
            row.false_critical += a.false_pages.get("critical", 0)
            row.false_warning += sum(v for k, v in a.false_pages.items() if k != "critical")
            detected.setdefault(name, []).extend(a.detected)
            if a.expected or a.false_pages:
                row.scenarios.append(s.scenario)
        for alert, severity, _, _ in s.pages:
            if alert in out and severity not in out[alert].severity.split("/"):
                out[alert].severity = "/".join(x for x in (out[alert].severity, severity) if x)
    for name, values in detected.items():
        if values:
            ordered = sorted(values)
            out[name].detect_max = ordered[-1]
            out[name].detect_median = ordered[len(ordered) // 2]
    return sorted(out.values(), key=lambda r: r.alert)


HEADER = (
    "alert",
    "expected",
    "detect median",
    "detect max",
    "bound",
    "misses",
    "false critical",
    "false warning",
    "flaps",
)


def table_rows(summary: list[Summary]) -> list[tuple[str, ...]]:
    return [
        (
            r.alert,
            str(r.expected),
            _secs(r.detect_median),
            _secs(r.detect_max),
            _secs(r.bound),
            str(r.misses),
            str(r.false_critical),
            str(r.false_warning),
            str(r.flaps),
        )
        for r in summary
    ]


def text_table(summary: list[Summary], scores: list[ScenarioScore]) -> str:
    rows = [HEADER, *table_rows(summary)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append("")
    for s in scores:
        verdict = "pass" if s.passed else ("xfail" if s.xfail else "FAIL")
        lines.append(f"{s.scenario}: {verdict}" + (f" ({s.xfail})" if s.xfail else ""))
        lines.extend(f"  {f}" for f in s.failures)
    return "\n".join(lines) + "\n"


def markdown(
    summary: list[Summary], scores: list[ScenarioScore], scrape: float, evaluation: float
) -> str:
    own = [
        f"{s.scenario} at {format_duration(s.scrape)} and {format_duration(s.evaluation)}"
        for s in scores
        if (s.scrape, s.evaluation) != (scrape, evaluation) and s.scrape
    ]
    lines = [
        f"Scrape interval {_secs(scrape)}, evaluation interval {_secs(evaluation)}"
        + (f" ({', '.join(own)}, its own)" if own else "")
        + f"; {len(scores)} scenarios. Times to detect run from the scenario's ground-truth "
        "onset to the first firing evaluation; a burn-rate row with its window pair "
        "(long/short) is held to that pair's bound (the largest of its scenarios' shown).",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(summary)]
    lines += ["", "| scenario | result | pages (first firing) |", "|---|---|---|"]
    for s in scores:
        verdict = "pass" if s.passed else ("xfail: " + s.xfail if s.xfail else "**FAIL**")
        first: dict[tuple[str, str], float] = {}
        for a, sev, t, _ in s.pages:
            first[(a, sev)] = min(t, first.get((a, sev), t))
        pages = ", ".join(
            f"{a} ({sev}, {_secs(t)})" for (a, sev), t in sorted(first.items(), key=lambda p: p[1])
        )
        lines.append(f"| {s.scenario} | {verdict} | {pages or 'none'} |")
    checked = [(s.scenario, *r) for s in scores for r in s.ratios]
    if checked:
        lines += [
            "",
            "| scenario | window | model | SLO | exact error ratio | recorded | recorded / exact - 1 |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, window, model, slo, exact, recorded in checked:
            off = "-" if recorded is None or not exact else f"{recorded / exact - 1:+.1e}"
            shown = "none" if recorded is None else f"{recorded:.6g}"
            lines.append(f"| {name} | {window} | {model} | {slo} | {exact:.6g} | {shown} | {off} |")
    return "\n".join(lines) + "\n"
