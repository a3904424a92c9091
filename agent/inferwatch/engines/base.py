"""How an engine's /metrics maps onto the metric contract: tables of data, not code.

An :class:`EngineMap` lists :class:`Signal` entries. Each signal names the
contract family it feeds, the engine families that can provide it (the current
name first, older names after: the first one present in a scrape wins, which is
how renames upstream never reach a dashboard), how per-rank copies combine, and
how labels and units translate. Adding an engine means adding a table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["gauge", "counter", "histogram"]
Combine = Literal["sum", "avg", "max"]


@dataclass(frozen=True)
class Signal:
    """One contract family fed from one of several engine families."""

    #: contract family name, e.g. "inferwatch_queue_depth" (counters without "_total")
    target: str
    kind: Kind
    #: engine family names as prometheus_client's parser reports them (counters
    #: without "_total"), current name first
    sources: tuple[str, ...]
    #: how series that differ only in rank labels combine
    combine: Combine = "sum"
    #: engine label -> contract label; labels not listed (and not the model label)
    #: are dropped and their series combined with ``combine``
    labels: Mapping[str, str] = field(default_factory=dict)
    #: unit conversion applied to values (gauges, counters) or bucket bounds and sums
    scale: float = 1.0
    #: only samples whose labels have these values (selector labels such as Triton's)
    select: Mapping[str, str] = field(default_factory=dict)
    #: labels whose copies of one series are duplicates (max is taken first)
    duplicates: tuple[str, ...] = ("pid",)
    #: False for inputs of a Ratio that are not contract families themselves
    export: bool = True


@dataclass(frozen=True)
class Ratio:
    """A contract gauge computed as increase(numerator) / increase(denominator) over the window."""

    target: str
    numerator: str
    denominator: str


@dataclass(frozen=True)
class EngineMap:
    name: str
    #: metric name prefixes that identify the engine in an exposition
    prefixes: tuple[str, ...]
    signals: tuple[Signal, ...]
    #: window ratios computed from two mapped counters (contract names, no "_total")
    ratios: tuple[Ratio, ...] = ()
    #: where the engine serves Prometheus text
    metrics_path: str = "/metrics"
    #: label that carries the served model name (None: the engine has none)
    model_label: str | None = "model_name"
    #: engine family whose presence alone shows stats are on, if signals are sparse
    notes: str = ""

    def source_families(self) -> set[str]:
        names: set[str] = set()
        for s in self.signals:
            names.update(s.sources)
        return names
