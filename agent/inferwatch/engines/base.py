"""How an engine's /metrics maps onto the metric contract: tables of data, not code.

An :class:`EngineMap` lists :class:`Signal` entries. Each signal names the
contract family it feeds, the engine families that can provide it (the current
name first, older names after: the first one present in a scrape wins, which is
how renames upstream never reach a dashboard), how per-rank copies combine, and
how labels and units translate.

The same :class:`EngineMap` holds every other fact about the engine that some
part of inferwatch needs: its launch flags and launchers (:class:`EngineFlags`,
read by :mod:`inferwatch.engines.launchflags`), how its pods look
(:class:`PodFacts`), where it describes itself (:class:`SelfDescribed`), the
bucket bounds its SLOs are checked against, and where it stands in lists. Adding
an engine means adding one module ``engines/<name>.py`` that defines ``ENGINE``
(the registry, :mod:`inferwatch.engines`, finds it) and its simulator writer
``sim/expo/<name>.py``; everything else is derived (docs/development.md).

Several signals may feed one contract family: their series are merged (two
engine families that count different finish reasons of one counter), unless a
signal is a ``fallback``, which is used only when the signals before it gave
nothing (Triton's generic pending-request gauge when the TensorRT-LLM backend's
own queue gauge is absent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
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


#: how a launch flag's value is read: int / float / str: one value; hint: an int that
#: may carry k/K/M... suffixes (vLLM, SGLang); names: one or more values up to the next
#: option (argparse nargs="+"); csv: one comma-separated value; multi: one value per
#: occurrence, all kept (a repeatable option); true / false: a switch that sets the key
#: without taking a value
FlagKind = Literal["int", "hint", "float", "str", "names", "csv", "multi", "true", "false"]

_EMPTY: Mapping[str, str] = MappingProxyType({})
_NO_SUBCOMMANDS: Mapping[str, bool] = MappingProxyType({})


@dataclass(frozen=True)
class Flag:
    """One launch option: the spellings the engine accepts and where its value goes.

    ``key`` is a :class:`~inferwatch.engines.launchflags.LaunchInfo` field name, or
    any other name, which then lands in its ``extra``.
    """

    names: tuple[str, ...]
    key: str
    kind: FlagKind = "str"
    #: environment variables the engine reads when the option is absent
    env: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launcher:
    """A program that starts the engine, as a process's command line shows it."""

    #: the executable's base name (or an alias that only ``modules`` lead to)
    program: str
    #: sub-commands that must follow the program (``vllm serve``)
    subcommand: tuple[str, ...] = ()
    #: whether the first argument after them, when not an option, is the model
    positional_model: bool = False
    #: Python modules (dotted) that run this launcher with ``python -m`` or as a script
    modules: tuple[str, ...] = ()
    #: sub-commands the program may take instead of running its default command, each
    #: with whether its first argument is the model (trtllm-serve's click group)
    optional_subcommands: Mapping[str, bool] = field(default_factory=lambda: _NO_SUBCOMMANDS)


@dataclass(frozen=True)
class EngineFlags:
    """How the engine is started and which of its launch options matter."""

    flags: tuple[Flag, ...]
    launchers: tuple[Launcher, ...] = ()
    #: environment variable -> key for settings that have no option at all
    env_only: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    @property
    def reads_environ(self) -> bool:
        """Whether the engine takes settings from its environment too (TGI, llama.cpp)."""
        return bool(self.env_only) or any(flag.env for flag in self.flags)


@dataclass(frozen=True)
class PodFacts:
    """How the engine's containers look in a pod (``kubernetes.auto_detect``)."""

    #: substrings of the image reference
    images: tuple[str, ...]
    #: substrings of the joined command and arguments
    commands: tuple[str, ...]
    #: the port the engine listens on when nothing says otherwise
    port: int


@dataclass(frozen=True)
class SelfDescribed:
    """Where the engine describes itself in JSON, and the keys that say what.

    Each fact is read from the first key of its tuple that holds a usable value.
    """

    path: str
    version: tuple[str, ...] = ()
    model: tuple[str, ...] = ()
    #: the batch capacity (a positive whole JSON number)
    max_num_seqs: tuple[str, ...] = ()


#: where an engine without a ``position`` stands: after the engines listed today
LAST = 1000


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
    #: where the engine stands in every list of engines (the configuration's choices,
    #: probing for ``engine: auto``, pod recognition, the rules' branches); ties by name
    position: int = LAST
    #: launch flags and launchers (None: the command line says nothing we read)
    flags: EngineFlags | None = None
    #: how its containers look in a pod (None: never recognised without annotations)
    pods: PodFacts | None = None
    #: its JSON self-description (None: it has none)
    self_description: SelfDescribed | None = None
    #: bucket bounds (seconds, as the agent exports them) of the histogram a TTFT / TPOT
    #: SLO is read from: the engine's own, else the measuring proxy's; () when none
    ttft_buckets: tuple[float, ...] = ()
    tpot_buckets: tuple[float, ...] = ()
    #: whether an availability SLO can be set (its finished requests are counted, by the
    #: engine or by the measuring proxy in front of it)
    availability: bool = True
    #: whether the pack's rules read its own latency histograms where Prometheus scrapes
    #: the engine directly (``export_histograms: false``; pack.rules.own_histograms):
    #: only for tables that pass their histograms through unchanged
    own_histograms: bool = False

    def source_families(self) -> set[str]:
        names: set[str] = set()
        for s in self.signals:
            names.update(s.sources)
        if self.info is not None:
            names.add(self.info.source)
        if self.lora is not None:
            names.add(self.lora.source)
        return names
