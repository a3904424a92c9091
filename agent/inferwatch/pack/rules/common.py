"""How the rules write numbers and durations (the runbooks write them the same way),
and the conditions several rules share."""

from __future__ import annotations

from typing import Any

from inferwatch.pack.names import names
from inferwatch.pack.thresholds import Thresholds, format_duration

SEVERITIES = ("critical", "warning", "info")


#: clock-event reasons that mean heat or the power brake slowed the GPU down
THERMAL_REASONS = ("hw_slowdown", "hw_thermal", "power_brake", "sw_thermal")


def record(name: str, expr: str) -> dict[str, Any]:
    """A recording rule as the rule file writes it."""
    return {"record": name, "expr": expr}


def num(x: float) -> str:
    """A PromQL number literal: 0.3 -> ``0.3``, 600.0 -> ``600``."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def pct(x: float) -> str:
    """Human text for a ratio: 0.3 -> ``30%``."""
    return f"{x * 100:g}%"


def dur(seconds: float) -> str:
    """A rule-file duration (``for``, windows): 1800 -> ``30m``."""
    return format_duration(seconds)


def secs(seconds: float) -> str:
    """A latency the way Prometheus' humanizeDuration writes it: 2 -> ``2s``, 0.1 -> ``100ms``."""
    if seconds >= 1:
        return f"{seconds:.4g}s"
    return f"{seconds * 1000:.4g}ms"


def rising(t: Thresholds) -> str:
    """The condition "the worker's queue is rising", on the queue slope recording rule."""
    return f"{names(t).queue_deriv} > {num(t.queue.rising_min_per_minute / 60)}"
