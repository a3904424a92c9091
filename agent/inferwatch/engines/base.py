"""How an engine's /metrics maps onto the metric contract: tables of data, not code.

An :class:`EngineMap` lists :class:`Signal` entries. Each signal names the
contract family it feeds, the engine families that can provide it (the current
name first, older names after: the first one present in a scrape wins, which is
how renames upstream never reach a dashboard), how per-rank copies combine, and
how labels and units translate. Adding an engine means adding a table.

Several signals may feed one contract family: their series are merged (two
engine families that count different finish reasons of one counter), unless a
signal is a ``fallback``, which is used only when the signals before it gave
nothing (Triton's generic pending-request gauge when the TensorRT-LLM backend's
own queue gauge is absent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypedDict

from inferwatch.engines import contract

if TYPE_CHECKING:  # only for the checker: Unpack is in typing from Python 3.11
    from typing_extensions import Unpack

#: the contract's latency histograms (engines.contract): the engine tables map onto
#: them, the measuring proxy fills them, and the pack's rules (pack.names), the report
#: and advise read them
TTFT = contract.TTFT_SECONDS.name
TPOT = contract.TPOT_SECONDS.name
E2E = contract.E2E_LATENCY_SECONDS.name

Kind = Literal["gauge", "counter", "histogram"]
Combine = Literal["sum", "avg", "max"]
#: which samples of an engine family a counter reads: its value, or the ``_sum`` /
#: ``_count`` of an engine histogram (TGI and Triton count tokens only in histograms)
Part = Literal["value", "sum", "count"]


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
    #: only samples whose labels have these values (selector labels such as Triton's);
    #: a tuple allows any of several values
    select: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    #: labels whose copies of one series are duplicates (max is taken first): API-server
    #: ``pid`` copies, SGLang's tensor/pipeline/expert-parallel ranks
    duplicates: tuple[str, ...] = ("pid",)
    #: False for inputs of a Ratio that are not contract families themselves
    export: bool = True
    #: engine label -> {engine value: contract value}; values not listed pass through
    values: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: contract labels with a fixed value (e.g. ``reason="error"`` for a failure counter)
    const: Mapping[str, str] = field(default_factory=dict)
    #: for counters: read the value, or an engine histogram's ``_sum`` or ``_count``
    part: Part = "value"
    #: use only when earlier signals of the same target produced no series
    fallback: bool = False


class SignalOptions(TypedDict, total=False):
    """The optional fields of a :class:`Signal`, for :func:`gauge`, :func:`counter` and
    :func:`histogram` (see the fields for what each means)."""

    combine: Combine
    labels: Mapping[str, str]
    scale: float
    select: Mapping[str, str | tuple[str, ...]]
    duplicates: tuple[str, ...]
    export: bool
    values: Mapping[str, Mapping[str, str]]
    const: Mapping[str, str]
    part: Part
    fallback: bool


#: how per-rank copies of a contract gauge combine where they do not add up: a share
#: of each rank's own pool averages, a capacity every rank states takes the max
GAUGE_COMBINE: Mapping[str, Combine] = {
    contract.KV_CACHE_USAGE_RATIO.name: "avg",
    contract.MAX_NUM_SEQS.name: "max",
    contract.LORA_MAX_ADAPTERS.name: "max",
}


def gauge(target: str, *sources: str, **options: Unpack[SignalOptions]) -> Signal:
    """A gauge signal from ``sources`` (current name first), combined as GAUGE_COMBINE says."""
    options.setdefault("combine", GAUGE_COMBINE.get(target, "sum"))
    return Signal(target, "gauge", sources, **options)


def counter(target: str, *sources: str, **options: Unpack[SignalOptions]) -> Signal:
    """A counter signal from ``sources`` (names without ``_total``, current name first)."""
    return Signal(target, "counter", sources, **options)


def histogram(target: str, *sources: str, **options: Unpack[SignalOptions]) -> Signal:
    """A histogram signal from ``sources`` (current name first)."""
    return Signal(target, "histogram", sources, **options)


@dataclass(frozen=True)
class Ratio:
    """A contract gauge computed as increase(numerator) / increase(denominator) over the window.

    Besides hit ratios this computes window means where an engine has counters but
    no histogram (llama.cpp's seconds per generated token, Triton's request time).
    """

    target: str
    numerator: str
    denominator: str
    #: results above this are clipped (ratios 0..1); None for means
    cap: float | None = 1.0
    #: a numerator family that is declared but has no series yet counts as 0 (engines
    #: that create a labelled counter's series on its first increment)
    zero_numerator: bool = False


def prefix_cache_hit_ratio(denominator: str, *, zero_numerator: bool = False) -> Ratio:
    """``inferwatch_prefix_cache_hit_ratio``: the mapped ``inferwatch_prefix_cache_hits``
    over ``denominator`` (the cache's queries, or the prompt tokens they are part of)."""
    return Ratio(
        contract.PREFIX_CACHE_HIT_RATIO.name,
        "inferwatch_prefix_cache_hits",
        denominator,
        zero_numerator=zero_numerator,
    )


@dataclass(frozen=True)
class InfoFamily:
    """A constant-1 family whose labels state the engine's effective settings."""

    source: str
    #: engine label -> fact key (``prefix_caching``, ``gpu_memory_utilization``)
    labels: Mapping[str, str]


@dataclass(frozen=True)
class LoraFamily:
    """A gauge whose labels name the LoRA adapters in use, comma-separated.

    vLLM sets it to the time of its last update under the current label set and
    never removes the older label sets, so the series with the highest value is
    the current one (``vllm/v1/metrics/loggers.py``: ``set_to_current_time``).
    It says which adapters are running or waiting, not how many requests each has.
    """

    source: str
    running_label: str
    waiting_label: str
    max_label: str | None = None


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
    #: exact family names that identify an engine without a prefix of its own (NIM)
    markers: tuple[str, ...] = ()
    #: how many markers must be present before they count (guards against one
    #: generic name such as ``num_requests_running`` in an unrelated exposition)
    min_markers: int = 2
    #: port of a separate metrics listener, tried when the worker URL is the API port
    #: (Triton serves /metrics on 8002, not on its HTTP port 8000)
    metrics_port: int | None = None
    #: settings the engine states about itself, for inferwatch_worker_info
    info: InfoFamily | None = None
    #: HTTP status of the metrics path -> what it means for this engine (llama.cpp
    #: answers 501 when metrics are off), added to the scrape error's message
    status_hints: Mapping[int, str] = field(default_factory=dict)
    #: the LoRA adapters in use (vLLM's lora_requests_info)
    lora: LoraFamily | None = None
    notes: str = ""

    def source_families(self) -> set[str]:
        names: set[str] = set()
        for s in self.signals:
            names.update(s.sources)
        if self.info is not None:
            names.add(self.info.source)
        if self.lora is not None:
            names.add(self.lora.source)
        return names
