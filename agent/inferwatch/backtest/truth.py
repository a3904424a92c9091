"""What each alert is held to: its ``for`` from the guide's thresholds, its window's fill time.

The bound of an expected alert is ``for + 2 x (scrape + evaluation interval) + window``:
the ``for`` is the guide's (``pack/thresholds.yaml``, the ALERTS.md catalogue), the window
is the time the rule's own look-back needs before the condition can show (a 5-minute rate
or average, the 10-minute queue slope), stated here per alert and not read back from the
rules. The two intervals cover one scrape late and one evaluation late, twice.

A burn-rate alert's ``expect`` row that names the pair it wants (``labels.burn_window``,
the pair's long window) and the scenario's bad ``share`` from its ``onset`` on is held
to that pair's own bound (:meth:`AlertFacts.burn_bound`), since a ticket's long window
takes hours where a page's takes minutes::

    2 x (scrape + evaluation) + max(L * f * B / share + rate, c * L - onset) [+ refresh]

for the pair's long window ``L`` and factor ``f`` (:data:`PAIRS`, the SRE workbook's
table), the objective's budget ``B`` (1 - objective, ``slos.default`` of the
thresholds) and ``c`` = ``slos.min_coverage``. ``L * f * B / share`` is the time the
long window's bad share needs to pass ``f * B`` when the window held only good
requests before the onset at a steady request rate (less history before the onset only
shortens it; the short window, shorter, passes first); ``rate`` (the pack's 5m) is
the short records' own window, as in the page's default bound. ``c * L - onset`` is
the wait for the coverage guard: the SLI must have been recorded since ``c * L``
(the scenario's history starts at 0, a fresh Prometheus). ``refresh``, for the
windows of a day or more, is the long records' interval (2m30s, docs/alerts.md,
"What the SLO rules cost"): they may be one refresh late. A row without ``share``
keeps the alert's default bound (the fast pair at 100 % bad).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferwatch.pack.thresholds import Thresholds


@dataclass(frozen=True)
class AlertFacts:
    name: str
    #: the ``for`` the guide gives it, in seconds
    hold: float
    #: seconds the rule's look-back window needs to fill before the condition can show
    window: float
    #: why that window (shown in docs/alerts.md)
    window_note: str

    #: a burn-rate alert's error budget (1 - objective of ``slos.default``)
    budget: float | None = None
    #: ``slos.min_coverage``: the share of a long window the SLI must have been recorded
    coverage: float = 0.5
    #: the pack's rate window (the short SLI records' own)
    rate: float = 300.0

    def bound(self, scrape: float, evaluation: float) -> float:
        return self.hold + 2 * (scrape + evaluation) + self.window

    def burn_bound(
        self, pair: str, share: float, onset: float, scrape: float, evaluation: float
    ) -> float | None:
        """The bound of an expected firing of ``pair`` at a bad ``share`` from ``onset``
        (the module's formula); None where the share never passes the pair's factor."""
        p = PAIRS[pair]
        if self.budget is None or share <= p.factor * self.budget:
            return None
        fill = p.long * p.factor * self.budget / share + self.rate
        wait = self.coverage * p.long - onset
        refresh = LONG_REFRESH if p.long >= 86400 else 0.0
        return round(self.hold + 2 * (scrape + evaluation) + max(fill, wait) + refresh, 3)


@dataclass(frozen=True)
class Pair:
    """A burn-rate window pair: ``factor`` x the budget over ``long`` and ``short``."""

    factor: float
    long: float
    short: float
    severity: str


#: the SRE workbook's pairs (ch. 5, table 5-8; docs/alerts.md, "SLOs and burn rates"),
#: by the long window's name, as the alerts' ``burn_window`` label names them
PAIRS = {
    "1h": Pair(14.4, 3600.0, 300.0, "critical"),
    "6h": Pair(6.0, 21600.0, 1800.0, "critical"),
    "1d": Pair(3.0, 86400.0, 7200.0, "warning"),
    "3d": Pair(1.0, 259200.0, 21600.0, "warning"),
}
#: the interval of the records of a day or more (docs/alerts.md: 2m30s)
LONG_REFRESH = 150.0
#: the objective each burn-rate alert watches
BURN_KINDS = {
    "InferenceTTFTBudgetBurn": "ttft",
    "InferenceTPOTBudgetBurn": "tpot",
    "InferenceAvailabilityBudgetBurn": "availability",
}


#: the ticket the issue 29 item 9 fix adds: a worker the agent cannot place on a GPU
UNATTRIBUTED = "InferenceWorkerUnattributed"


def alert_facts(t: Thresholds) -> dict[str, AlertFacts]:
    """Every alert of the catalogue (ALERTS.md) with its ``for`` and window."""
    rate = t.pack.rate_window
    rows = [
        ("InferenceGPUUnderutilized", t.gpu_utilization.waste_for, rate, "5m utilization average"),
        ("InferenceGPUScaleReview", t.gpu_utilization.scale_review_for, rate, "5m average"),
        (
            "InferenceVRAMPressureQueueRising",
            t.vram.pressure_for,
            t.queue.rising_window,
            "the queue's slope over queue.rising_window",
        ),
        ("InferenceGPULost", t.availability.gpu_lost_for, 0.0, "a gauge"),
        # the agent's last collection older than 60 s (the rule's staleness line), 1m
        ("InferenceGPUTelemetryDown", 60.0, 60.0, "last collection 60 s old"),
        ("InferenceGPUXidErrors", 0.0, 0.0, "a timestamp gauge"),
        ("InferenceGPUThermalThrottling", t.gpu_health.thermal_for, 0.0, "a gauge"),
        # [6 FAQ] three consecutive samples over capacity: two scrape intervals
        (
            "InferenceQueueOverCapacity",
            (t.queue.over_capacity_samples - 1) * t.pack.scrape_interval,
            0.0,
            "gauges (the samples are its for)",
        ),
        ("InferenceTTFTHighGPUIdle", t.ttft.idle_gpu_for, rate, "5m P95 and utilization"),
        ("InferenceTTFTSLOBreach", t.ttft.slo_for, rate, "5m P99"),
        ("InferenceTPOTSLOBreach", t.tpot.slo_for, rate, "5m P99"),
        ("InferenceLatencyLongTail", t.latency.tail_for, rate, "5m P99 / P50"),
        ("InferenceLoadImbalance", t.load_imbalance.imbalance_for, rate, "5m averages"),
        ("InferenceWorkerColdStart", t.cold_start.cold_start_for, rate, "5m P95"),
        ("InferenceWarmupDeadlineExceeded", t.cold_start.warmup_deadline_for, 0.0, "a gauge"),
        ("InferenceKVCachePreemptions", t.kv_cache.preemptions_for, rate, "5m rate"),
        ("InferenceRequestErrors", t.errors.errors_for, rate, "5m error ratio"),
        ("InferenceWorkerDown", t.availability.worker_down_for, 0.0, "a gauge"),
        ("InferenceAgentDown", t.availability.agent_down_for, 0.0, "the scrape's up"),
        # the fast burn pair: the 5m window fills, the 1h one passes 14.4 x the budget
        # at 100% bad within 14.4 % of an hour
        ("InferenceTTFTBudgetBurn", 0.0, 0.144 * 3600 + rate, "1h at 14.4x (fast pair)"),
        ("InferenceTPOTBudgetBurn", 0.0, 0.144 * 3600 + rate, "1h at 14.4x (fast pair)"),
        (
            "InferenceAvailabilityBudgetBurn",
            0.0,
            0.144 * 3600 + rate,
            "1h at 14.4x (fast pair)",
        ),
        (UNATTRIBUTED, t.availability.unattributed_for, rate, "a join of two gauges"),
    ]
    default = next((e for e in t.slos.entries if e.model is None), None)

    def budget(name: str) -> float | None:
        objective = default.get(BURN_KINDS[name]) if default and name in BURN_KINDS else None
        return objective.budget if objective else None

    return {
        name: AlertFacts(
            name,
            float(hold),
            float(window),
            note,
            budget(name),
            t.slos.min_coverage,
            float(rate),
        )
        for name, hold, window, note in rows
    }
