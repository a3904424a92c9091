"""The interface every source of metrics implements.

A *source* polls one thing (NVML, a worker's /metrics, the worker processes)
on its own interval and keeps the latest snapshot. The agent asks each source
for metric families when it rebuilds the exposition, which happens after every
refresh, never during a scrape. A source owns its failures: ``refresh`` never
raises, it records the reason in its :class:`SourceHealth` and carries on.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Iterable, Sequence

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from inferwatch.engines.contract import Family

log = logging.getLogger(__name__)


def gauge_family(row: Family, labels: Sequence[str]) -> GaugeMetricFamily:
    """An empty family of a contract gauge (or info) row: its name, its HELP, ``labels``."""
    return GaugeMetricFamily(row.name, row.help, labels=labels)


def counter_family(row: Family, labels: Sequence[str]) -> CounterMetricFamily:
    """An empty family of a contract counter row (prometheus_client names it without
    ``_total``: :attr:`Family.base`)."""
    return CounterMetricFamily(row.base, row.help, labels=labels)


def histogram_family(row: Family, labels: Sequence[str]) -> HistogramMetricFamily:
    """An empty family of a contract histogram row."""
    return HistogramMetricFamily(row.name, row.help, labels=labels)


class ReasonError(Exception):
    """A failure with its reason: the ``reason`` label of the error counter it counts in."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class SourceHealth:
    """Errors, durations and freshness of one source, for the agent's own metrics.

    ``error`` logs a reason once when it starts and once when it clears, never on
    every pass, so a broken worker does not flood the log.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.errors: dict[str, int] = {}
        self.last_duration: float | None = None
        self.last_success: float | None = None
        self._active: dict[str, str] = {}

    def error(self, reason: str, message: str, *, key: str = "") -> None:
        """Count one error; log it only when (key) starts failing or changes reason.

        ``key`` names the thing that failed (a worker, a GPU); "" is the source
        as a whole.
        """
        self.errors[reason] = self.errors.get(reason, 0) + 1
        if self._active.get(key) != reason:
            where = f"{self.name} {key}" if key else self.name
            log.warning("%s: %s", where, message)
            self._active[key] = reason

    def ok(self, *, key: str = "") -> None:
        """Mark (key) healthy again; logs the recovery once."""
        if key in self._active:
            where = f"{self.name} {key}" if key else self.name
            log.info("%s: recovered", where)
            del self._active[key]

    def failing(self, key: str = "") -> str | None:
        """The reason (key) is failing for now, or None."""
        return self._active.get(key)

    def finished_pass(self, started: float) -> None:
        self.last_duration = time.perf_counter() - started
        self.last_success = time.time()


class Source(abc.ABC):
    """One source of metrics: polled on its own timer, read from its snapshot."""

    #: Short name used in ``collector`` labels and log lines ("nvml", "engine", ...).
    name: str = "source"
    #: Seconds between refreshes.
    interval: float = 5.0

    def __init__(self) -> None:
        self.health = SourceHealth(self.name)

    @abc.abstractmethod
    async def refresh(self) -> None:
        """Poll the source once and replace the snapshot. Must not raise."""

    @abc.abstractmethod
    def families(self) -> Iterable[Metric]:
        """Metric families built from the latest snapshot (cheap, no I/O)."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Optional set-up before the first refresh (threads, sessions)."""

    async def stop(self) -> None:  # noqa: B027 - optional hook
        """Optional clean-up on shutdown."""
