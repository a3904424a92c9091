"""What several rules share: a recording rule's entry and the conditions several rules
read. Numbers are written by :mod:`inferwatch.pack.fmt`."""

from __future__ import annotations

from typing import Any

from inferwatch.pack.fmt import num
from inferwatch.pack.names import names
from inferwatch.pack.thresholds import Thresholds

SEVERITIES = ("critical", "warning", "info")


#: clock-event reasons that mean heat or the power brake slowed the GPU down
THERMAL_REASONS = ("hw_slowdown", "hw_thermal", "power_brake", "sw_thermal")


def record(name: str, expr: str) -> dict[str, Any]:
    """A recording rule as the rule file writes it."""
    return {"record": name, "expr": expr}


def rising(t: Thresholds) -> str:
    """The condition "the worker's queue is rising", on the queue slope recording rule."""
    return f"{names(t).queue_deriv} > {num(t.queue.rising_min_per_minute / 60)}"
