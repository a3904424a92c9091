"""Detection latency of the inferwatch alerts, end to end on a live stack (issue 4, item 7).

Runs the scenarios of ``tests/live/test_e2e_alerts.py`` (the same code,
``tests/support/e2e.py``) on the same stack: simulated workers, the agent, a
real Prometheus with the rules generated from ``tests/data/e2e-thresholds.yaml``
and a real Alertmanager with the shipped routing, sending to a webhook in this
process. Prints, per alert, how long it took from the condition's start to the
notification at the webhook, where that time went, and what bounds it. Asserts
nothing.

    python bench/bench_alert_latency.py                # one run, about 2.5 minutes
    python bench/bench_alert_latency.py --runs 3 --json latency.json

Needs ``prometheus`` and ``prometheus-alertmanager`` on PATH (Debian packages).

Columns (seconds):

* ``latency``: condition start to the firing notification at the webhook;
* ``to pending``: condition start to Prometheus's ``activeAt`` (the first rule
  evaluation at which the expression held): the workload building the
  condition, the agent's collection, the scrape, windowed averages and
  quantiles catching up, the rule evaluation;
* ``pending``: ``activeAt`` to the firing (the alert's ``for``, rounded up to an
  evaluation);
* ``notify``: firing to the webhook (Prometheus -> Alertmanager ->
  ``group_wait`` -> POST);
* ``resolve``: the condition's end to the resolved notification.

"Condition start" is what the scenario does: the load starts (overload, cold
start), the load stops (idle), the worker is SIGKILLed. It includes the time the
workload itself needs to create the condition (a queue filling, a first token
after a 4.6 s warm-up), which no monitoring can remove.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.e2e import (  # noqa: E402 - needs the repository root on sys.path
    ALERT_WORKERS,
    COLD,
    COLLECT_INTERVAL,
    DOWN,
    E2E_THRESHOLDS,
    IDLE,
    OVER,
    STATS_WINDOW,
    AlertmanagerTimers,
    Detection,
    Stack,
    scenario_cold_start,
    scenario_idle,
    scenario_overload,
    scenario_worker_killed,
    seconds,
)
from tests.support.webhook import WebhookReceiver  # noqa: E402

from inferwatch.pack.thresholds import Thresholds, load_thresholds  # noqa: E402

Scenario = Callable[[Stack, WebhookReceiver, str], list[Detection]]

SCENARIOS: list[tuple[str, Scenario, str]] = [
    ("overload", scenario_overload, OVER),
    ("cold-start", scenario_cold_start, COLD),
    ("idle", scenario_idle, IDLE),
    ("worker killed", scenario_worker_killed, DOWN),
]


def for_seconds(t: Thresholds, alert: str) -> float:
    return {
        "InferenceQueueOverCapacity": (t.queue.over_capacity_samples - 1) * t.pack.scrape_interval,
        "InferenceVRAMPressureQueueRising": t.vram.pressure_for,
        "InferenceWorkerColdStart": t.cold_start.cold_start_for,
        "InferenceGPUUnderutilized": t.gpu_utilization.waste_for,
        "InferenceWorkerDown": t.availability.worker_down_for,
    }[alert]


def what_bounds(t: Thresholds, alert: str, timers: AlertmanagerTimers) -> str:
    """The terms of the detection latency after the condition exists in the workload."""
    collect = seconds(COLLECT_INTERVAL)
    scrape = t.pack.scrape_interval
    # every alert but WorkerDown reads a recording rule, evaluated in its own group
    recorded = f"recording rule <= {scrape:g} + " if alert != "InferenceWorkerDown" else ""
    pipeline = (
        f"collect <= {collect:g} + scrape <= {scrape:g} + {recorded}"
        f"alert eval <= {scrape:g} + for {for_seconds(t, alert):g} + "
        f"group_wait {seconds(timers.group_wait):g} (a new group; a group already notified: "
        f"the next group_interval tick, <= {seconds(timers.group_interval):g})"
    )
    window = f"{t.pack.window} window"
    extra = {
        "InferenceQueueOverCapacity": "the queue passing max_num_seqs (workload)",
        "InferenceVRAMPressureQueueRising": (
            f"the KV cache filling VRAM past {t.vram.scale_above:.0%} (workload); "
            f"queue slope over the agent's {STATS_WINDOW} window"
        ),
        "InferenceWorkerColdStart": (
            f"the first slow first token (warm-up, workload); P95 over the {window}"
        ),
        "InferenceGPUUnderutilized": (
            f"the {window} average falling below {t.gpu_utilization.waste_below:.0%}: "
            f"about (1 - {t.gpu_utilization.waste_below:g}/u) x window after a busy level u"
        ),
        "InferenceWorkerDown": "none: the agent's next collection fails at once",
    }[alert]
    return f"{extra}; then {pipeline}"


def run_once(run: int, thresholds: Path, timers: AlertmanagerTimers) -> list[Detection]:
    found: list[Detection] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-alert-latency-") as tmp,
        WebhookReceiver() as hook,
    ):
        started = time.monotonic()
        stack = Stack(Path(tmp), ALERT_WORKERS, thresholds=thresholds, webhook=hook.url)
        print(f"run {run}: stack up in {time.monotonic() - started:.1f} s", flush=True)
        try:
            for name, scenario, worker in SCENARIOS:
                began = time.monotonic()
                detections = scenario(stack, hook, worker)
                for d in detections:
                    print(
                        f"  {name:<14} {d.alert:<34} latency {d.latency:5.1f} s, "
                        f"resolve {d.resolve_latency:5.1f} s",
                        flush=True,
                    )
                print(f"  ({name}: {time.monotonic() - began:.0f} s)", flush=True)
                found += detections
        finally:
            stack.stop()
    return found


def fmt(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:6.1f}"
    return f"{statistics.median(values):6.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="fresh stacks to run (default 1)")
    parser.add_argument("--thresholds", type=Path, default=E2E_THRESHOLDS)
    parser.add_argument("--json", type=Path, help="write every measurement here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs: expected 1 or more")
    t = load_thresholds(str(args.thresholds))
    timers = AlertmanagerTimers()
    print(
        "intervals: "
        f"agent collect {COLLECT_INTERVAL}, agent stats window {STATS_WINDOW}; "
        f"Prometheus scrape and rule evaluation {t.pack.interval}, rate window {t.pack.window}; "
        f"Alertmanager group_wait {timers.group_wait}, group_interval {timers.group_interval}; "
        f"thresholds {args.thresholds.relative_to(REPO) if args.thresholds.is_relative_to(REPO) else args.thresholds}"
    )
    all_runs: list[Detection] = []
    for run in range(1, args.runs + 1):
        all_runs += run_once(run, args.thresholds, timers)

    alerts = list(dict.fromkeys(d.alert for d in all_runs))
    cols = ("latency", "to pending", "pending", "notify", "resolve")
    width = 8 if args.runs == 1 else 18
    header = f"{'alert':<34} {'for':>4} " + " ".join(f"{c:>{width}}" for c in cols)
    print(f"\ndetection latency, seconds ({args.runs} run(s); median (min-max) when several)")
    print(header)
    for alert in alerts:
        ds = [d for d in all_runs if d.alert == alert]
        figures = (
            [d.latency for d in ds],
            [d.to_pending for d in ds],
            [d.pending for d in ds],
            [d.notify for d in ds],
            [d.resolve_latency for d in ds],
        )
        print(
            f"{alert:<34} {for_seconds(t, alert):4g} "
            + " ".join(f"{fmt(values):>{width}}" for values in figures)
        )
    print("\nwhat bounds each latency (after the condition start):")
    for alert in alerts:
        print(f"  {alert}: {what_bounds(t, alert, timers)}")
    if args.json:
        doc: dict[str, Any] = {
            "machine": {"node": platform.node(), "python": platform.python_version()},
            "thresholds": str(args.thresholds),
            "intervals": {
                "collect": COLLECT_INTERVAL,
                "stats_window": STATS_WINDOW,
                "scrape_and_eval": t.pack.interval,
                "rate_window": t.pack.window,
                "group_wait": timers.group_wait,
                "group_interval": timers.group_interval,
            },
            "detections": [
                {
                    "alert": d.alert,
                    "labels": d.labels,
                    "for": for_seconds(t, d.alert),
                    "latency": d.latency,
                    "to_pending": d.to_pending,
                    "pending": d.pending,
                    "notify": d.notify,
                    "resolve": d.resolve_latency,
                }
                for d in all_runs
            ],
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
