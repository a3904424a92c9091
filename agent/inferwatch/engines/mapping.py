"""Parse an engine's exposition and map it onto the contract. Pure, no I/O.

Only the lines of families a mapping needs are handed to prometheus_client's
parser: an engine's exposition is mostly families we do not use (Python GC,
HTTP handlers, request-size histograms), and skipping them is most of the cost.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from inferwatch.engines import contract
from inferwatch.engines.base import EngineMap, LoraFamily, Signal

try:  # the parser's own pieces, for the lines the series cache cannot answer
    from prometheus_client.parser import (
        _is_valid_legacy_metric_name,
        _parse_sample,
        _parse_value_and_timestamp,
        _replace_help_escaping,
        _split_quoted,
        _unquote_unescape,
    )

    _SERIES_CACHE = True
except ImportError:  # another prometheus_client layout: its public parser does it all
    _SERIES_CACHE = False

#: a series' identity: sorted (label, value) pairs, always including "model"
LabelKey = tuple[tuple[str, str], ...]

_SUFFIXES = ("", "_total", "_bucket", "_count", "_sum")
#: families made from an engine's LoRA gauge (EngineMap.lora)
LORA_ACTIVE = contract.LORA_ADAPTER_ACTIVE.name
LORA_MAX = contract.LORA_MAX_ADAPTERS.name


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
    #: settings the engine states about itself (its info family), e.g. prefix_caching
    facts: Mapping[str, str] = field(default_factory=dict)

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
    return prefilter_limited(text, families, None)[0]


def prefilter_limited(text: str, families: set[str], max_samples: int | None) -> tuple[str, int]:
    """prefilter(), keeping at most ``max_samples`` sample lines; also the count cut.

    A hostile exposition can hold hundreds of thousands of series under the body
    cap; parsing them all would take the agent's memory. A family whose samples
    would take the total over the budget is cut whole (a counter summed over part
    of its ranks would be wrong, not merely incomplete); the families after it
    are still read while they fit. Kept lines stay in their order.
    """
    wanted = {f + suffix for f in families for suffix in _SUFFIXES}
    kept: list[str | None] = []
    #: sample name or TYPE/HELP name -> indexes in ``kept``, to cut a family whole
    lines_of: dict[str, list[int]] = {}
    counts: dict[str, int] = {}
    cut_names: set[str] = set()
    typed: set[str] = set()
    total = 0
    cut = 0
    for line in text.splitlines():
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP") and parts[2] in wanted:
                name = parts[2]
                if parts[1] == "TYPE":
                    # A family given twice is ambiguous (which copy is true?):
                    # Prometheus refuses such a scrape, and so does the agent.
                    if name in typed:
                        raise ParseError(f"family {name[:100]} appears twice")
                    typed.add(name)
                if _base(name) not in cut_names:
                    lines_of.setdefault(_base(name), []).append(len(kept))
                    kept.append(line)
            continue
        brace = line.find("{")
        space = line.find(" ")
        end = brace if brace != -1 and (space == -1 or brace < space) else space
        name = line[:end] if end != -1 else line
        if name not in wanted:
            continue
        family = _base(name)
        if family in cut_names:
            cut += 1
            continue
        lines_of.setdefault(family, []).append(len(kept))
        kept.append(line)
        counts[family] = counts.get(family, 0) + 1
        total += 1
        if max_samples is not None and total > max_samples:
            n = counts.pop(family)
            cut += n
            total -= n
            for i in lines_of.pop(family):
                kept[i] = None
            cut_names.add(family)
    out = [line for line in kept if line is not None]
    out.append("")
    return "\n".join(out), cut


def _base(name: str) -> str:
    """The family a sample or metadata name belongs to, for cutting (suffixes off)."""
    for suffix in ("_total", "_bucket", "_count", "_sum"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def parse(text: str, families: set[str] | None = None) -> dict[str, object]:
    """Families by parser name; counters also under ``name_total`` for untyped input."""
    if families is not None:
        text = prefilter(text, families)
    out: dict[str, object] = {}
    try:
        parsed = _cached_families(text) if _SERIES_CACHE else text_string_to_metric_families(text)
        for family in parsed:
            if family.name in out and family.type != "unknown":
                raise ParseError(f"family {family.name[:100]} appears twice")
            out[family.name] = family
    except ParseError:
        raise
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad input
        raise ParseError(str(exc)[:200] or type(exc).__name__) from None
    return out


# Series cache. A worker's exposition repeats the same series every scrape; only the
# values move. prometheus_client reads label sets one character at a time, which is
# most of a scrape's cost, so the text before the value (name and label set) is
# looked up here and parsed by prometheus_client only the first time it is seen.
# The result is the same families and samples as text_string_to_metric_families()
# (bench/bench_engine_parse.py checks it). Label dicts are shared between scrapes:
# nothing downstream modifies them.
_SERIES: dict[str, tuple[str, dict[str, str]]] = {}
#: Cleared when larger: label values that never repeat must not grow it without bound.
#: An entry takes about 0.7 KB; eight workers of one model need about 1,000 entries.
_SERIES_MAX = 20_000


def _sample(line: str) -> Sample:
    """One sample line, as prometheus_client's parser reads it."""
    open_ = line.find("{")
    if open_ == -1:
        cut = line.find(" ")
        if cut == -1 or "\t" in line or " # " in line:
            return _parse_sample(line)
    else:
        # One label set, no quote or exemplar around it: the series text ends at "}".
        cut = line.find("}") + 1
        if cut <= open_ or line.count("{") != 1 or line.count("}") != 1 or '"' in line[:open_]:
            return _parse_sample(line)
    key = line[:cut]
    series = _SERIES.get(key)
    if series is None:
        sample = _parse_sample(line)
        if len(_SERIES) >= _SERIES_MAX:
            _SERIES.clear()
        _SERIES[key] = (sample.name, sample.labels)
        return sample
    rest = line[cut:]
    value = rest.strip()
    if value and "_" not in value and " " not in value and "\t" not in value:
        digits = value[1:] if value[0] in "+-" else value
        number: float = int(value) if digits.isdecimal() else float(value)
        return Sample(series[0], series[1], number, None)
    number, timestamp = _parse_value_and_timestamp(rest)
    return Sample(series[0], series[1], number, timestamp)


#: sample names a family of each type owns (anything else starts an untyped family)
_OWNED = {"summary": ("_count", "_sum", ""), "histogram": ("_count", "_sum", "_bucket")}


def _family(name: str, documentation: str, typ: str, samples: list[Sample]) -> Metric:
    # Counters are kept in OpenMetrics form, as prometheus_client's parser keeps them.
    if typ == "counter":
        if name.endswith("_total"):
            name = name[:-6]
        else:
            samples = [Sample(s.name + "_total", *s[1:]) for s in samples]
    metric = Metric(name, documentation, typ)
    metric.samples = samples
    return metric


def _cached_families(text: str) -> Iterable[Metric]:
    """text_string_to_metric_families(), with sample lines read through the series cache."""
    name = ""
    documentation = ""
    typ = "untyped"
    samples: list[Sample] = []
    owned: list[str] | tuple[str, ...] = ()
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            # Without quotes or unusual characters, str.split() cuts a comment line as
            # the parser's quote-aware splitter does, and much faster.
            if '"' not in line and line.isascii() and line.isprintable():
                parts = line.split(None, 3)
            else:
                parts = _split_quoted(line, None, 3)
            if len(parts) < 2:
                continue
            candidate, quoted = "", False
            if len(parts) > 2:
                if parts[1] not in ("TYPE", "HELP"):
                    continue
                candidate, quoted = _unquote_unescape(parts[2])
                if not quoted and not _is_valid_legacy_metric_name(candidate):
                    raise ValueError
            if parts[1] == "HELP":
                if candidate != name:
                    if name:
                        yield _family(name, documentation, typ, samples)
                    name, typ, samples, owned = candidate, "untyped", [], [candidate]
                documentation = _replace_help_escaping(parts[3]) if len(parts) == 4 else ""
            elif parts[1] == "TYPE":
                if len(parts) < 4:
                    raise ValueError
                if candidate != name:
                    if name:
                        yield _family(name, documentation, typ, samples)
                    name, documentation, samples = candidate, "", []
                typ = parts[3]
                owned = [name + suffix for suffix in _OWNED.get(typ, ("",))]
            continue
        sample = _sample(line)
        if sample.name in owned:
            samples.append(sample)
            continue
        if name:
            yield _family(name, documentation, typ, samples)
        name, documentation, typ, samples, owned = "", "", "untyped", [], ()
        yield _family(sample.name, "", "untyped", [sample])
    if name:
        yield _family(name, documentation, typ, samples)


_SELF_TEST = """# HELP t:requests_total Requests.
# TYPE t:requests_total counter
t:requests_total{engine="0",model_name="m",reason="a \\"b\\""} 3.0
t:requests_created{engine="0",model_name="m"} 1.7e+09
# TYPE t:latency_seconds histogram
t:latency_seconds_bucket{le="0.5",model_name="m"} 1.0
t:latency_seconds_bucket{le="+Inf",model_name="m"} 2.0
t:latency_seconds_count{model_name="m"} 2.0
t:latency_seconds_sum{model_name="m"} 1.25
# TYPE t:waiting gauge
t:waiting{model_name="m"} NaN
stray_untyped 7
"""


def _cache_agrees() -> bool:
    """Whether the cached reader gives the public parser's result on a known exposition.

    It leans on prometheus_client's private helpers; if a release changes them, the
    agent falls back to the public parser instead of failing every scrape.
    """

    def shape(families: Iterable[Metric]) -> list[tuple[object, ...]]:
        return [
            (f.name, f.type, f.documentation,
             [(x.name, x.labels, repr(x.value), x.timestamp) for x in f.samples])
            for f in families
        ]  # fmt: skip

    try:
        _SERIES.clear()
        first = shape(_cached_families(_SELF_TEST))
        second = shape(_cached_families(_SELF_TEST))  # the second read hits the cache
        return first == second == shape(text_string_to_metric_families(_SELF_TEST))
    except Exception:  # any surprise from the private helpers disables the cache
        return False
    finally:
        _SERIES.clear()


if _SERIES_CACHE:
    _SERIES_CACHE = _cache_agrees()


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


def _readings(
    family: object, signal: Signal, model_label: str | None
) -> Iterator[tuple[str, float, Mapping[str, str], LabelKey, LabelKey]]:
    """(sample name, value, labels, contract series, rank) of each sample that carries
    the signal's value and passes its selector.

    Every contract family fed by an engine is a count, a share or a histogram: a
    non-finite or negative value is a broken engine, not a reading.
    """
    for sample in family.samples:  # type: ignore[attr-defined]
        name = sample.name
        if not _wanted_sample(name, family, signal):
            continue
        value = float(sample.value)
        if not math.isfinite(value) or value < 0:
            continue
        labels = sample.labels
        if not _selected(labels, signal):
            continue
        yield (
            name,
            value,
            labels,
            _key(labels, signal, model_label),
            _rank(labels, signal, model_label),
        )


def _map_scalar(family: object, signal: Signal, model_label: str | None) -> dict[LabelKey, float]:
    counter = signal.kind == "counter"
    ratio = not counter and signal.target.endswith("_ratio")
    grouped: dict[LabelKey, dict[LabelKey, list[float]]] = {}
    for _name, value, _labels, key, rank in _readings(family, signal, model_label):
        if ratio and value * signal.scale > 1.0:
            continue  # a share above 1 is no reading either
        grouped.setdefault(key, {}).setdefault(rank, []).append(value * signal.scale)
    return _reduce(grouped, "sum" if counter else signal.combine)


def _map_histogram(
    family: object, signal: Signal, model_label: str | None
) -> dict[LabelKey, Histogram]:
    buckets: dict[LabelKey, dict[float, dict[LabelKey, list[float]]]] = {}
    sums: dict[LabelKey, dict[LabelKey, list[float]]] = {}
    for name, value, labels, key, rank in _readings(family, signal, model_label):
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
        if any(later < earlier for earlier, later in itertools.pairwise(counts)):
            continue  # cumulative counts that go down would invent quantiles
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
    if engine.lora is not None and engine.lora.source in families:
        declared.add(LORA_ACTIVE)
        gauges.update(_lora(families[engine.lora.source], engine.lora, _models(gauges, counters)))
    return Mapped(
        engine.name,
        {k: v for k, v in gauges.items() if v},
        {k: v for k, v in counters.items() if v},
        {k: v for k, v in histograms.items() if v},
        frozenset(declared),
        _facts(families, engine),
    )


def _series_cost(value: object) -> int:
    """Samples a series takes in the exposition: a histogram its buckets, sum and count."""
    return len(value.bounds) + 2 if isinstance(value, Histogram) else 1


def _model_of(key: LabelKey) -> str:
    return next((v for k, v in key if k == "model"), "")


def cap_series(mapped: Mapped, max_series: int) -> tuple[Mapped, int]:
    """At most ``max_series`` exported samples, whole models first; also the count dropped.

    Models are admitted in name order while their series fit, so the kept set is the
    same from one scrape to the next (windows and quantiles stay continuous) and a
    kept model has all of its series. Only when the first model alone is over the
    budget are its series kept one by one, in name order.
    """
    tables = {"gauges": mapped.gauges, "counters": mapped.counters, "histograms": mapped.histograms}
    total = sum(
        _series_cost(v) for table in tables.values() for series in table.values()
        for v in series.values()
    )  # fmt: skip
    if total <= max_series:
        return mapped, 0
    by_model: dict[str, list[tuple[str, str, LabelKey, object]]] = {}
    for kind, table in tables.items():
        for target, series in table.items():
            for key, value in series.items():
                by_model.setdefault(_model_of(key), []).append((kind, target, key, value))
    kept: dict[str, dict[str, dict[LabelKey, object]]] = {k: {} for k in tables}
    used = 0
    for i, model in enumerate(sorted(by_model)):
        entries = sorted(by_model[model], key=lambda e: (e[0], e[1], e[2]))
        cost = sum(_series_cost(e[3]) for e in entries)
        if used + cost > max_series and i > 0:
            break
        for kind, target, key, value in entries:
            c = _series_cost(value)
            if used + c > max_series:
                break
            kept[kind].setdefault(target, {})[key] = value
            used += c
        if used >= max_series:
            break
    capped = Mapped(
        mapped.engine,
        kept["gauges"],  # type: ignore[arg-type]
        kept["counters"],  # type: ignore[arg-type]
        kept["histograms"],  # type: ignore[arg-type]
        mapped.declared,
        mapped.facts,
    )
    return capped, total - used


def _models(*tables: Mapping[str, Mapping[LabelKey, object]]) -> set[str]:
    return {
        v
        for table in tables
        for series in table.values()
        for key in series
        for k, v in key
        if k == "model"
    }


def _lora(family: object, lora: LoraFamily, models: set[str]) -> dict[str, dict[LabelKey, float]]:
    """Adapter -> running / waiting (1 each), and the adapter limit, from the current series.

    The gauge carries no model label: the worker's one model is used where it has one.
    """
    latest: Sample | None = None
    for sample in family.samples:  # type: ignore[attr-defined]
        if not math.isnan(sample.value) and (latest is None or sample.value > latest.value):
            latest = sample
    if latest is None:
        return {}
    model = next(iter(models)) if len(models) == 1 else ""
    active: dict[LabelKey, float] = {}
    for state, label in (("running", lora.running_label), ("waiting", lora.waiting_label)):
        for adapter in latest.labels.get(label, "").split(","):
            if adapter.strip():
                key = (("adapter", adapter.strip()[:128]), ("model", model), ("state", state))
                active[key] = 1.0
    out = {LORA_ACTIVE: active}
    limit = latest.labels.get(lora.max_label, "") if lora.max_label else ""
    if limit.strip().isdigit():
        out[LORA_MAX] = {(("model", model),): float(limit)}
    return out


_BOOLEAN_WORDS = {"true": "true", "false": "false", "1": "true", "0": "false"}


def _facts(families: Mapping[str, object], engine: EngineMap) -> dict[str, str]:
    """The engine's stated settings, from the first series of its info family."""
    info = engine.info
    family = families.get(info.source) if info is not None else None
    if info is None or family is None:
        return {}
    for sample in family.samples:  # type: ignore[attr-defined]
        facts = {}
        for label, key in info.labels.items():
            value = sample.labels.get(label, "").strip()
            if key == "prefix_caching":
                value = _BOOLEAN_WORDS.get(value.lower(), "")
            if value and value.lower() not in ("none", "null"):
                facts[key] = value[:64]
        return facts
    return {}


def map_exposition(text: str, engine: EngineMap) -> Mapped:
    """Parse only what ``engine`` needs from ``text`` and map it."""
    return map_families(parse(text, engine.source_families()), engine)
