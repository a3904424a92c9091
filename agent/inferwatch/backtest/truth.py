"""What each alert is held to: its ``for`` from the guide's thresholds, its window's fill time.

The bound of an expected alert is ``for + 2 x (scrape + evaluation interval) + window``:
the ``for`` is the guide's (``pack/thresholds.yaml``, the ALERTS.md catalogue), the window
is the time the rule's own look-back needs before the condition can show (a 5-minute rate
or average, the 10-minute queue slope), stated here per alert and not read back from the
rules. The two intervals cover one scrape late and one evaluation late, twice.
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

    def bound(self, scrape: float, evaluation: float) -> float:
        return self.hold + 2 * (scrape + evaluation) + self.window


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
    return {
        name: AlertFacts(name, float(hold), float(window), note)
        for name, hold, window, note in rows
    }
