"""The worker dashboard's "Warm-up" row: the agent's warm-up gate (docs/warmup.md)."""

from __future__ import annotations

from inferwatch.engines import contract
from inferwatch.pack import signals as S
from inferwatch.pack.dashboards import panels as p
from inferwatch.pack.dashboards.common import RATE_WINDOW, secs, slo_steps, worker_only
from inferwatch.pack.dashboards.panels import Query, Section
from inferwatch.pack.thresholds import Thresholds


def _gauge(aggregation: str, metric: str, *labels: str) -> Query:
    """A gate gauge per worker (and ``labels``), legend the same labels."""
    by = ("worker", *labels)
    return Query(
        f"{aggregation} by ({', '.join(by)}) ({metric}{worker_only()})",
        " ".join("{{" + label + "}}" for label in by),
    )


#: the gate's 0/1 gauges as stats: (title, description, worst of the workers, family,
#: (word, colour) at 0, (word, colour) at 1)
_GATE_FLAGS = (
    (
        "Warm",
        "Whether the agent's warm-up gate has warmed each worker "
        f"({contract.WORKER_READY}): cold while it waits for /health, warms the "
        "worker up, or after a restart; the agent's /readyz answers 200 only once "
        "every gated worker is warm or its deadline has passed.",
        "min",
        contract.WORKER_READY,
        ("cold", "red"),
        ("warm", "green"),
    ),
    (
        "Gate opened on deadline",
        "1 when the gate let a worker into service only because warmup.deadline "
        f"passed before a warm-up succeeded ({contract.WARMUP_DEADLINE_EXCEEDED}): "
        "the worker serves cold and InferenceWarmupDeadlineExceeded fires. It "
        "returns to 0 when a background warm-up succeeds.",
        "max",
        contract.WARMUP_DEADLINE_EXCEEDED,
        ("no", "green"),
        ("serving cold", "orange"),
    ),
)


def warmup_section(t: Thresholds) -> Section:
    """The agent's warm-up gate (docs/warmup.md). Its series carry only ``worker`` (plus
    Prometheus's ``job`` and ``instance``), so every query uses the worker-only selector;
    with the gate off they are absent and the panels stay empty rather than show zeros."""
    gate_off = " Empty when the agent's warm-up gate (warmup: in its configuration) is off."
    return Section(
        "Warm-up",
        p.line(
            *(
                p.flag_stat(title, text + gate_off, [_gauge(agg, row.name)], off=off, on=on)
                for title, text, agg, row, off, on in _GATE_FLAGS
            ),
            p.timeseries(
                "Warm-up TTFT",
                "Time to first token of the last warm-up: cold is its first request, "
                "warm the same request sent again at its end. A wide gap is what the "
                "warm-up saved the first users (field guide 5.2: 4.8 s unwarmed against "
                "180 ms warm). The dashed line is ttft.warmup_p95_seconds, "
                f"{secs(t.ttft.warmup_p95_seconds)}: a warm TTFT above it means the "
                "warm-up did not help." + gate_off,
                [_gauge("max", contract.WARMUP_TTFT_SECONDS.name, "phase")],
                unit="s",
                min_value=0,
                thresholds=slo_steps(t.ttft.warmup_p95_seconds),
                threshold_style="dashed",
                fill=0,
            ),
            p.timeseries(
                "Warm-up duration",
                "How long the last completed warm-up took, from its first warm-up request "
                "to ready (loading the model before /health answers is not counted)." + gate_off,
                [_gauge("max", contract.WARMUP_DURATION_SECONDS.name)],
                unit="s",
                min_value=0,
                fill=0,
            ),
            h=8,
            widths=(4, 4, 8, 8),
        ),
        p.line(
            p.event_bars(
                "Warm-ups and failures",
                "Completed warm-ups (one at start and one after each restart the gate "
                "noticed) and failed warm-up requests by reason (connect, timeout, "
                "http_status, bad_response, no_model), counted per interval. Failures "
                "that keep coming while the worker stays cold end in the deadline." + gate_off,
                [
                    Query(
                        S.WARMUPS.render(selector=worker_only(), window=RATE_WINDOW, by="worker"),
                        "{{worker}} warm-ups",
                    ),
                    Query(
                        S.WARMUP_FAILURES.render(
                            selector=worker_only(), window=RATE_WINDOW, by="worker, reason"
                        ),
                        "{{worker}} failed: {{reason}}",
                    ),
                ],
            ),
            h=8,
        ),
    )
