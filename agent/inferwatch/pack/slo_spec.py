"""The ``slos:`` section of thresholds.yaml: objectives per model, validated.

An SLO entry names the engine(s) it is for and up to three objectives::

    slos:
      enabled: true          # the burn-rate family (rules, alerts, runbooks, dashboard row)
      p99_alerts: true       # the simpler P99 threshold family (InferenceTTFTSLOBreach, ...)
      window: 30d            # the error budget's period
      min_requests: 100      # a burn alert needs this many requests in its long window
      min_coverage: 0.5      # ... and data since this share of its long window
      default:               # every model of these engines without an entry of its own
        engine: [vllm]
        ttft: {threshold_seconds: 2.5, objective: 0.99}
        tpot: {threshold_seconds: 0.1, objective: 0.99}
        availability: {objective: 0.995}
      models:
        meta-llama/Llama-3.1-8B-Instruct:
          ttft: {threshold_seconds: 1, objective: 0.995}   # the rest from default
          tpot: null                                       # no TPOT SLO for this one

A latency objective counts the requests at or under ``threshold_seconds``, read
from the engine's histogram bucket ``le`` of that value: a threshold between two
boundaries cannot be measured exactly, so it is refused with the boundaries
around it. ``ENGINE_BUCKETS`` lists which engine has which histogram; an engine
without one cannot have that SLO.

This module knows nothing of the other sections; ``pack.thresholds`` calls
:func:`parse` with its own duration parser, so durations read the same
everywhere.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from inferwatch.engines import ENGINES
from inferwatch.errors import ConfigError

#: the three objectives, in the order of every generated list
KINDS = ("ttft", "tpot", "availability")
LATENCY_KINDS = ("ttft", "tpot")

#: engines whose finished requests feed the availability SLI, counted by the engine or
#: (llama.cpp) by the measuring proxy in front of it (docs/proxy.md): the tables'
#: ``availability``
AVAILABILITY_ENGINES = tuple(name for name, table in ENGINES.items() if table.availability)

#: Bucket boundaries (seconds, as the agent re-exports them) of the histograms the agent
#: maps to inferwatch_ttft_seconds / inferwatch_tpot_seconds, per engine: each table's
#: ``ttft_buckets`` / ``tpot_buckets`` (engines/<name>.py cites where they come from; the
#: simulator writes the same tuples). An engine without its own histogram names the
#: measuring proxy's (workers[].proxy); one without either has no entry for that kind.
ENGINE_BUCKETS: dict[str, dict[str, tuple[float, ...]]] = {
    name: {
        kind: bounds
        for kind, bounds in (("ttft", table.ttft_buckets), ("tpot", table.tpot_buckets))
        if bounds
    }
    for name, table in ENGINES.items()
}

_KIND_TITLE = {"ttft": "TTFT", "tpot": "TPOT", "availability": "availability"}


@dataclass(frozen=True)
class Objective:
    """One SLO: ``objective`` of requests good; latency ones are good at or under ``le``."""

    kind: str
    objective: float
    #: the bucket boundary (seconds) for ttft / tpot; None for availability
    le: float | None = None

    @property
    def budget(self) -> float:
        """The error budget: the share of requests allowed to be bad."""
        return 1.0 - self.objective


@dataclass(frozen=True)
class SloEntry:
    """The objectives of one model (``model`` set) or of the default (``model`` None)."""

    model: str | None
    engines: tuple[str, ...]
    objectives: tuple[Objective, ...]

    def get(self, kind: str) -> Objective | None:
        return next((o for o in self.objectives if o.kind == kind), None)


@dataclass(frozen=True)
class SloSpec:
    """The ``slos:`` section of thresholds.yaml, checked: what the SLO rules, pages and
    the report's SLO lines are made from."""

    enabled: bool
    p99_alerts: bool
    window: float
    #: the listed models first (sorted), the default last when there is one
    entries: tuple[SloEntry, ...]
    #: a burn-rate alert needs at least this many requests in its long window
    min_requests: int = 100
    #: ... and the model's SLI recorded since this share of its long window (a fresh
    #: Prometheus or a new model has minutes of data in a "6h" window)
    min_coverage: float = 0.5

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(e.model for e in self.entries if e.model is not None)

    @property
    def active(self) -> tuple[SloEntry, ...]:
        """The entries rules are generated for: none when the family is off."""
        return self.entries if self.enabled else ()


Duration = Callable[[Any, str], float]


def merge(defaults: Any, override: Any) -> Any:
    """``override`` laid over ``defaults``, mapping by mapping (a value replaces)."""
    if isinstance(defaults, Mapping) and isinstance(override, Mapping):
        out = dict(defaults)
        for key, value in override.items():
            out[key] = merge(defaults.get(key), value) if key in defaults else value
        return out
    return override


def nearest(bounds: tuple[float, ...], value: float) -> tuple[float | None, float | None]:
    """The boundaries just below and just above ``value``."""
    ordered = sorted(bounds)
    i = bisect.bisect_left(ordered, value)
    below = ordered[i - 1] if i > 0 else None
    above = ordered[i] if i < len(ordered) else None
    return below, above


def on_boundary(bounds: tuple[float, ...], value: float) -> float | None:
    """The engine's own boundary equal to ``value`` (within float noise), else None."""
    return next((b for b in bounds if math.isclose(b, value, rel_tol=1e-9)), None)


def _g(x: float) -> str:
    return f"{x:.6g}"


def _mapping(value: Any, source: str, key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(source, key, "a mapping of keys to values", value)
    for k in value:
        if k not in allowed:
            raise ConfigError(source, f"{key}.{k}", "one of the known keys " + ", ".join(allowed))
    return dict(value)


def _ratio(value: Any, source: str, key: str) -> float:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and 0 < value < 1
    )
    if not ok:
        raise ConfigError(source, key, "a share between 0 and 1 such as 0.99 (exclusive)", value)
    return float(value)


def _engines(value: Any, source: str, key: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    expected = "an engine or a list of engines among " + ", ".join(ENGINE_BUCKETS)
    if not isinstance(items, list) or not items:
        raise ConfigError(source, key, expected, value)
    for item in items:
        if item not in ENGINE_BUCKETS:
            raise ConfigError(source, key, expected, item)
    return tuple(dict.fromkeys(items))


def _objective(
    kind: str, raw: Any, engines: tuple[str, ...], source: str, key: str
) -> Objective | None:
    if raw is None:
        return None
    allowed = ("threshold_seconds", "objective") if kind in LATENCY_KINDS else ("objective",)
    body = _mapping(raw, source, key, allowed)
    if "objective" not in body:
        raise ConfigError(source, f"{key}.objective", "a share between 0 and 1 such as 0.99")
    objective = _ratio(body["objective"], source, f"{key}.objective")
    if kind not in LATENCY_KINDS:
        for engine in engines:
            if engine not in AVAILABILITY_ENGINES:
                raise ConfigError(
                    source,
                    key,
                    f"no availability SLO for engine {engine} (it counts no finished "
                    "requests); set it to null",
                )
        return Objective(kind=kind, objective=objective)
    where = f"{key}.threshold_seconds"
    threshold = body.get("threshold_seconds")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold <= 0:
        raise ConfigError(source, where, "a number of seconds greater than 0", threshold)
    le: float | None = None
    for engine in engines:
        bounds = ENGINE_BUCKETS[engine].get(kind)
        if not bounds:
            raise ConfigError(
                source,
                key,
                f"no {_KIND_TITLE[kind]} SLO for engine {engine} (it exports no "
                f"{_KIND_TITLE[kind]} histogram); set it to null",
            )
        match = on_boundary(bounds, float(threshold))
        if match is None:
            below, above = nearest(bounds, float(threshold))
            around = " or ".join(_g(b) for b in (below, above) if b is not None)
            raise ConfigError(
                source,
                where,
                f"a bucket boundary of {engine}'s {_KIND_TITLE[kind]} histogram; "
                f"the nearest are {around}",
                threshold,
            )
        le = match if le is None else le
    return Objective(kind=kind, objective=objective, le=le)


_ENTRY_KEYS = ("engine", *KINDS)


def _entry(model: str | None, raw: dict[str, Any], source: str, key: str) -> SloEntry:
    if "engine" not in raw:
        raise ConfigError(source, f"{key}.engine", "an engine or a list of engines")
    engines = _engines(raw["engine"], source, f"{key}.engine")
    objectives = tuple(
        o
        for kind in KINDS
        if (o := _objective(kind, raw.get(kind), engines, source, f"{key}.{kind}")) is not None
    )
    return SloEntry(model=model, engines=engines, objectives=objectives)


def parse(raw: Any, source: str, duration: Duration) -> SloSpec:
    """The merged ``slos`` mapping (defaults with the user's file laid over) as a spec."""
    body = _mapping(
        raw,
        source,
        "slos",
        ("enabled", "p99_alerts", "window", "min_requests", "min_coverage", "default", "models"),
    )
    flags = {}
    for flag in ("enabled", "p99_alerts"):
        if not isinstance(body.get(flag), bool):
            raise ConfigError(source, f"slos.{flag}", "true or false", body.get(flag))
        flags[flag] = body[flag]
    window = duration(body.get("window"), "slos.window")
    if window < 86400:
        raise ConfigError(source, "slos.window", "a duration of at least 1d such as 30d", window)
    min_requests = body.get("min_requests", 100)
    if isinstance(min_requests, bool) or not isinstance(min_requests, int) or min_requests < 1:
        raise ConfigError(
            source, "slos.min_requests", "a whole number of requests, at least 1", min_requests
        )
    min_coverage = body.get("min_coverage", 0.5)
    ok = (
        not isinstance(min_coverage, bool)
        and isinstance(min_coverage, (int, float))
        and 0 < min_coverage <= 1
    )
    if not ok:
        raise ConfigError(
            source, "slos.min_coverage", "a share above 0 and at most 1 such as 0.5", min_coverage
        )
    default_raw = body.get("default")
    default: dict[str, Any] | None = None
    if default_raw is not None:
        default = _mapping(default_raw, source, "slos.default", _ENTRY_KEYS)
    models_raw = body.get("models") or {}
    if not isinstance(models_raw, Mapping):
        raise ConfigError(source, "slos.models", "a mapping of model names to SLOs", models_raw)
    entries: list[SloEntry] = []
    for model in sorted(models_raw, key=str):
        key = f"slos.models.{model}"
        if not isinstance(model, str) or not model:
            raise ConfigError(source, key, "a model name (the served model's label)")
        own = _mapping(models_raw[model] or {}, source, key, _ENTRY_KEYS)
        entries.append(_entry(model, merge(default or {}, own), source, key))
    if default is not None:
        entries.append(_entry(None, default, source, "slos.default"))
    return SloSpec(
        enabled=flags["enabled"],
        p99_alerts=flags["p99_alerts"],
        window=window,
        entries=tuple(entries),
        min_requests=min_requests,
        min_coverage=float(min_coverage),
    )
