"""Parse an engine's exposition and map it onto the contract. Pure, no I/O.

Only the lines of families a mapping needs are handed to prometheus_client's
parser: an engine's exposition is mostly families we do not use (Python GC,
HTTP handlers, request-size histograms), and skipping them is most of the cost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from inferwatch.engines.base import EngineMap, Signal

#: a series' identity: sorted (label, value) pairs, always including "model"
LabelKey = tuple[tuple[str, str], ...]

_SUFFIXES = ("", "_total", "_bucket", "_count", "_sum")


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: finite and +Inf upper bounds with cumulative counts."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float

    @property
    def count(self) -> float:
        return self.counts[-1] if self.counts else 0.0


@dataclass(frozen=True)
class Mapped:
    """One scrape of one worker, in contract terms."""

    engine: str
    gauges: Mapping[str, Mapping[LabelKey, float]] = field(default_factory=dict)
    counters: Mapping[str, Mapping[LabelKey, float]] = field(default_factory=dict)
    histograms: Mapping[str, Mapping[LabelKey, Histogram]] = field(default_factory=dict)
    #: targets whose engine family was present, with or without series (an engine that
    #: creates a counter's series on its first increment declares it before that)
    declared: frozenset[str] = frozenset()

    @property
    def has_data(self) -> bool:
        return any(
            series for table in (self.gauges, self.counters, self.histograms)
            for series in table.values()
        )  # fmt: skip

    def models(self) -> set[str]:
        found: set[str] = set()
        for table in (self.gauges, self.counters, self.histograms):
            for series in table.values():
                for key in series:
                    found.update(v for k, v in key if k == "model")
        return found


class ParseError(ValueError):
    """The exposition is not valid Prometheus text."""


def family_names(text: str) -> set[str]:
    """Names declared by ``# TYPE`` lines (cheap; used to detect the engine)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if len(parts) >= 3:
                names.add(parts[2])
    return names


def sample_names(text: str) -> set[str]:
    """Names of the samples (for expositions without TYPE lines)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def prefilter(text: str, families: set[str]) -> str:
    """Keep only the comment and sample lines of ``families`` (parser names, no _total)."""
    wanted = {f + suffix for f in families for suffix in _SUFFIXES}
    kept: list[str] = []
    for line in text.splitlines():
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP") and parts[2] in wanted:
                kept.append(line)
            continue
        brace = line.find("{")
        space = line.find(" ")
        end = brace if brace != -1 and (space == -1 or brace < space) else space
        if (line[:end] if end != -1 else line) in wanted:
            kept.append(line)
    kept.append("")
    return "\n".join(kept)


def parse(text: str, families: set[str] | None = None) -> dict[str, object]:
    """Families by parser name; counters also under ``name_total`` for untyped input."""
    if families is not None:
        text = prefilter(text, families)
    out: dict[str, object] = {}
    try:
        for family in text_string_to_metric_families(text):
            out[family.name] = family
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad input
        raise ParseError(str(exc) or type(exc).__name__) from None
    return out


def _key(labels: Mapping[str, str], signal: Signal, model_label: str | None) -> LabelKey:
    pairs = [("model", labels.get(model_label, "") if model_label else "")]
    for src, dst in signal.labels.items():
        if src in labels:
            value = labels[src]
            pairs.append((dst, signal.values.get(src, {}).get(value, value)))
    pairs.extend(signal.const.items())
    return tuple(sorted(pairs))


def _rank(labels: Mapping[str, str], signal: Signal, model_label: str | None) -> LabelKey:
    """The labels that tell per-rank copies apart (everything not kept nor duplicate).

    Series that become one contract series through a value translation or a
    several-valued selector (Triton's BACKEND and OTHER failures, both errors) are
    distinct series, not copies: their engine values stay in the rank so they add up.
    """
    skip = {model_label, "le", *signal.duplicates}
    skip.update(k for k in signal.labels if k not in signal.values)
    skip.update(k for k, v in signal.select.items() if isinstance(v, str))
    return tuple(sorted((k, v) for k, v in labels.items() if k not in skip))


def _selected(labels: Mapping[str, str], signal: Signal) -> bool:
    for name, wanted in signal.select.items():
        value = labels.get(name)
        if value is None or (value != wanted if isinstance(wanted, str) else value not in wanted):
            return False
    return True


def _combine(values: Iterable[float], how: str) -> float:
    vals = list(values)
    if how == "sum":
        return math.fsum(vals)
    if how == "max":
        return max(vals)
    return math.fsum(vals) / len(vals)


def _reduce(
    grouped: dict[LabelKey, dict[LabelKey, list[float]]], how: str
) -> dict[LabelKey, float]:
    """Duplicates of one rank take the max; ranks then combine with ``how``."""
    return {
        key: _combine((max(dups) for dups in ranks.values()), how) for key, ranks in grouped.items()
    }


def _wanted_sample(name: str, family: object, signal: Signal) -> bool:
    """Whether a sample of ``family`` carries the signal's value."""
    if name.endswith("_created"):
        return False
    if signal.kind != "counter":
        return True
    if signal.part != "value":
        return name == family.name + "_" + signal.part  # type: ignore[attr-defined]
    return name.endswith("_total") or family.type == "unknown"  # type: ignore[attr-defined]


def _map_scalar(family: object, signal: Signal, model_label: str | None) -> dict[LabelKey, float]:
    counter = signal.kind == "counter"
    grouped: dict[LabelKey, dict[LabelKey, list[float]]] = {}
    for sample in family.samples:  # type: ignore[attr-defined]
        name = sample.name
        if not _wanted_sample(name, family, signal):
            continue
        value = float(sample.value)
        if math.isnan(value) or (counter and (value < 0 or math.isinf(value))):
            continue
        labels = sample.labels
        if not _selected(labels, signal):
            continue
        key = _key(labels, signal, model_label)
        rank = _rank(labels, signal, model_label)
        grouped.setdefault(key, {}).setdefault(rank, []).append(value * signal.scale)
    return _reduce(grouped, "sum" if counter else signal.combine)


def _map_histogram(
    family: object, signal: Signal, model_label: str | None
) -> dict[LabelKey, Histogram]:
    buckets: dict[LabelKey, dict[float, dict[LabelKey, list[float]]]] = {}
    sums: dict[LabelKey, dict[LabelKey, list[float]]] = {}
    for sample in family.samples:  # type: ignore[attr-defined]
        name = sample.name
        value = float(sample.value)
        if not math.isfinite(value) or value < 0:
            continue
        labels = sample.labels
        if not _selected(labels, signal):
            continue
        key = _key(labels, signal, model_label)
        rank = _rank(labels, signal, model_label)
        if name.endswith("_bucket"):
            try:
                bound = float(labels["le"])
            except (KeyError, ValueError):
                continue
            if math.isfinite(bound):
                bound *= signal.scale
            buckets.setdefault(key, {}).setdefault(bound, {}).setdefault(rank, []).append(value)
        elif name.endswith("_sum"):
            sums.setdefault(key, {}).setdefault(rank, []).append(value * signal.scale)
    out: dict[LabelKey, Histogram] = {}
    for key, by_bound in buckets.items():
        if math.inf not in by_bound:
            continue  # not a usable histogram without its +Inf bucket
        bounds = tuple(sorted(by_bound))
        counts = tuple(_reduce({(): by_bound[b]}, "sum")[()] for b in bounds)
        total = _reduce({(): sums[key]}, "sum")[()] if key in sums else 0.0
        out[key] = Histogram(bounds, counts, total)
    return out


def _find(families: Mapping[str, object], signal: Signal) -> object | None:
    """The first source family present; untyped counters keep their ``_total`` name."""
    for name in signal.sources:
        for candidate in (name, name + "_total"):
            if candidate in families:
                return families[candidate]
    return None


def map_families(families: Mapping[str, object], engine: EngineMap) -> Mapped:
    """Apply an engine's table to parsed families.

    Signals of one target merge (series with the same labels add up; a histogram
    keeps the first); a ``fallback`` signal only fills a target that is still empty.
    """
    gauges: dict[str, dict[LabelKey, float]] = {}
    counters: dict[str, dict[LabelKey, float]] = {}
    histograms: dict[str, dict[LabelKey, Histogram]] = {}
    declared: set[str] = set()
    for signal in engine.signals:
        if signal.fallback:
            done = histograms if signal.kind == "histogram" else None
            scalars = counters if signal.kind == "counter" else gauges
            if (done if done is not None else scalars).get(signal.target):
                continue
        family = _find(families, signal)
        if family is None:
            continue
        declared.add(signal.target)
        if signal.kind == "histogram":
            hist = _map_histogram(family, signal, engine.model_label)
            merged_h = histograms.setdefault(signal.target, {})
            for key, h in hist.items():
                merged_h.setdefault(key, h)
        else:
            values = _map_scalar(family, signal, engine.model_label)
            merged = (counters if signal.kind == "counter" else gauges).setdefault(
                signal.target, {}
            )
            for key, value in values.items():
                merged[key] = merged.get(key, 0.0) + value
    return Mapped(
        engine.name,
        {k: v for k, v in gauges.items() if v},
        {k: v for k, v in counters.items() if v},
        {k: v for k, v in histograms.items() if v},
        frozenset(declared),
    )


def map_exposition(text: str, engine: EngineMap) -> Mapped:
    """Parse only what ``engine`` needs from ``text`` and map it."""
    return map_families(parse(text, engine.source_families()), engine)
