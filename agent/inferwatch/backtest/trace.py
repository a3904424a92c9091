"""Recorded traces replayed: the agent's /metrics over time -> series, the phases -> truth.

The format and its reader are :mod:`inferwatch.traces` (a header with the phases
and the workers, then agent, engine, client, gpu and error records).

The backtest replays the agent's expositions as Prometheus would have scraped them
at the deployment's scrape interval (the latest exposition at or before each scrape;
unix timestamps moved to promtool's clock, which starts at the trace's first scrape).
The ground truth comes from the phases: during and after an ``overload`` phase the
queue page must fire for every worker (onset: the phase's start); any warning may
fire; no critical alert may fire outside an overload (the queue page leading).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from inferwatch.backtest.scenario import Allow, Expect, Scenario, Truth
from inferwatch.traces import Trace, read_trace

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_TIME_SUFFIXES = ("_timestamp_seconds", "_start_time_seconds")
PHASES = ("idle", "steady", "overload", "cooldown", "warmup")
#: critical alerts a sustained overload may raise, once the queue page had its bound
OVERLOAD_CRITICAL = (
    "InferenceTTFTSLOBreach",
    "InferenceVRAMPressureQueueRising",
    "InferenceTTFTBudgetBurn",
    "InferenceTPOTBudgetBurn",
    "InferenceAvailabilityBudgetBurn",
)


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels, value = m.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        out.append((name, dict(_LABEL.findall(labels or "")), v))
    return out


def trace_series(
    trace: Trace, scrape: float, instance: str = "agent:10127"
) -> tuple[dict[str, list[float | str | None]], float, float]:
    """The agent's series scraped every ``scrape`` seconds; also the trace's time 0 and length."""
    agent = sorted(trace.agent, key=lambda p: p[0])
    t0 = agent[0][0]
    length = agent[-1][0] - t0
    steps = int(length // scrape) + 1
    out: dict[str, list[float | str | None]] = {}
    i = 0
    for k in range(steps):
        at = t0 + k * scrape
        while i + 1 < len(agent) and agent[i + 1][0] <= at + 1e-6:
            i += 1
        t, text = agent[i]
        if at - t > scrape:  # no exposition within the last scrape interval: a failed scrape
            out.setdefault('up{job="inferwatch",instance="' + instance + '"}', [None] * steps)[
                k
            ] = 0.0
            continue
        out.setdefault('up{job="inferwatch",instance="' + instance + '"}', [None] * steps)[k] = 1.0
        for name, labels, value in _samples(text):
            if name.endswith(_TIME_SUFFIXES) and value > 1e9:
                value -= t0
            labels = {**labels, "job": "inferwatch", "instance": instance}
            sel = name + "{" + ",".join(f'{a}="{b}"' for a, b in sorted(labels.items())) + "}"
            if math.isnan(value):
                continue
            out.setdefault(sel, [None] * steps)[k] = value
    for values in out.values():
        for k in range(1, steps):
            if values[k] is None and values[k - 1] not in (None, "stale"):
                values[k] = "stale"
    return out, t0, length


def trace_truth(
    trace: Trace, t0: float, scrape: float, evaluation: float, alerts: frozenset[str]
) -> Truth:
    """Ground truth from the phases (module docstring)."""
    expect: list[Expect] = []
    allow: list[Allow] = [Allow(a, 0.0, {"severity": "warning"}) for a in sorted(alerts)]
    from inferwatch.backtest.truth import alert_facts
    from inferwatch.pack.thresholds import load_thresholds

    queue = alert_facts(load_thresholds())["InferenceQueueOverCapacity"]
    for ph in trace.header["phases"]:
        if ph["name"] != "overload":
            continue
        onset = float(ph["start"]) - t0
        if float(ph["end"]) - float(ph["start"]) < queue.bound(scrape, evaluation):
            continue
        for worker in trace.header["workers"]:
            expect.append(Expect("InferenceQueueOverCapacity", onset, {"worker": str(worker)}))
        lead = onset + queue.bound(scrape, evaluation)
        allow.extend(Allow(a, lead) for a in OVERLOAD_CRITICAL)
        # the queue page stays on until the queue drains after the phase
        allow.append(Allow("InferenceQueueOverCapacity", onset))
    return Truth(expect, allow, trace.header.get("xfail"))


def load_trace(path: Path, alerts: frozenset[str], scrape: float, evaluation: float) -> Scenario:
    trace = read_trace(path)
    series, t0, length = trace_series(trace, scrape)
    truth = trace_truth(trace, t0, scrape, evaluation, alerts)
    name = path.name.removesuffix(".jsonl.gz")
    return Scenario(
        f"trace:{name}", str(trace.header.get("source", "")), length, truth, str(path), series
    )
