"""Per-worker latency bucket rates: the agent's copy, else the engine's own series.

A worker configured with ``export_histograms: false`` (docs/engines.md "When
Prometheus scrapes the engine too") has no ``inferwatch_*_bucket`` series: the
engine's own histograms are stored from Prometheus' direct scrape of it, under
that scrape's ``job`` and ``instance``. The agent exports
``inferwatch_worker_endpoint_info{worker, endpoint}``, whose ``endpoint`` is that
``instance``; joined through it, the engine's buckets get the worker's labels.

The expression reads, per worker, the agent's buckets where present (``or on``
the worker key: the agent's copy wins, nothing is counted twice), else the
engine's. The engine side is written from the engine mapping tables
(``inferwatch.engines``): the same families, current name first (an older name
counts only for a target that lacks the current one, as vLLM 0.11 exposed both
with the same observations), the same label handling (duplicate copies such as
API-server ``pid`` taken once, ranks summed, the model label renamed to
``model``, ``engine`` set to the table's name: vLLM's own ``engine`` label is its
data-parallel rank). Only engines whose latency histograms the agent passes
through unchanged and say so (``own_histograms``) are read this way
(:data:`ENGINES`); a table that converts
units or selects samples would need the conversion in PromQL as well.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypedDict

from inferwatch.engines import ENGINES as ENGINE_MAPS
from inferwatch.engines import contract
from inferwatch.engines.base import EngineMap, Signal
from inferwatch.pack import signals as S
from inferwatch.pack.names import CLUSTER, ENDPOINT_JOIN, ENDPOINT_KEY, INSTANCE, WORKER, WORKER_KEY
from inferwatch.pack.thresholds import Thresholds

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: engines whose own latency histograms the rules read (their tables' ``own_histograms``:
#: vLLM and SGLang, which the agent passes through as is), in the registry's order
ENGINES = tuple(name for name, table in ENGINE_MAPS.items() if table.own_histograms)

ENDPOINT_INFO = contract.WORKER_ENDPOINT_INFO.name


def _passthrough(engine: EngineMap, target: str) -> Signal | None:
    """The engine's histogram signal for ``target`` when the agent copies it unchanged."""
    for signal in engine.signals:
        if signal.target != target or signal.kind != "histogram":
            continue
        plain = (
            signal.scale == 1.0
            and not signal.select
            and not signal.const
            and not signal.labels
            and not signal.values
            and not signal.fallback
            and signal.combine == "sum"
        )
        return signal if plain and engine.model_label else None
    return None


def _indent(text: str, by: str) -> str:
    return text.replace("\n", "\n" + by)


def _engine_matcher(matcher: str, engine: EngineMap) -> str:
    """A matcher on a contract label, written for the engine's own series: ``model`` is
    the engine's model label there; ``le`` is the same (the agent copies the boundaries
    as the engine's client library wrote them)."""
    label = re.match(r"\w+", matcher)
    name = label.group(0) if label else ""
    if name == "le":
        return matcher
    if name == "model" and engine.model_label:
        return engine.model_label + matcher[len(name) :]
    raise ValueError(f"no engine-side label for the matcher {matcher!r}")


def _engine_side(engine: EngineMap, signal: Signal, window: str, matchers: tuple[str, ...]) -> str:
    """The engine's bucket rates per scrape target and model, ranks combined, with the
    labels the join and the worker rules need (``endpoint``, ``model``, ``engine``)."""
    copies = ", ".join(signal.duplicates)
    sel = "{" + ",".join(_engine_matcher(m, engine) for m in matchers) + "}" if matchers else ""
    per_target = f"\nor on ({INSTANCE})\n".join(
        f"max without ({copies}) (rate({source}_bucket{sel}[{window}]))"
        for source in signal.sources
    )
    return (
        f"label_replace(label_replace(label_replace(\n"
        f"  sum by (le, {CLUSTER}, instance, {engine.model_label}) (\n"
        f"    {_indent(per_target, '    ')}\n"
        f"  ),\n"
        f'  "{ENDPOINT_KEY}", "$1", "instance", "(.*)"),\n'
        f'  "model", "$1", "{engine.model_label}", "(.*)"),\n'
        f'  "engine", "{engine.name}", "", "")'
    )


#: the worker's key the join copies from the info series (the cluster is matched on)
_FROM_INFO = ", ".join(label for label in WORKER_KEY.split(", ") if label != CLUSTER)


def _endpoints(t: Thresholds) -> str:
    """Each watched endpoint once; one claimed by two workers is left out rather than
    letting the duplicate break the whole rule (a many-to-many match is an error)."""
    info = f"max by ({WORKER_KEY}, {ENDPOINT_KEY}) ({ENDPOINT_INFO}{t.pack.selector()})"
    return (
        f"{info}\n"
        f"unless on ({ENDPOINT_JOIN})\n"
        f"count by ({ENDPOINT_JOIN}) ({ENDPOINT_INFO}{t.pack.selector()}) > 1"
    )


class Reach(TypedDict, total=False):
    """Which buckets a per-worker bucket rate reads (every key may be left out).

    ``window``: the range (``pack.rate_window`` when absent or None); ``matchers``: on the
    contract labels ``le`` and ``model`` (both sides); ``engines``: the workers of those
    engines only (every engine when absent or None).
    """

    window: str | None
    matchers: tuple[str, ...]
    engines: tuple[str, ...] | None


def engine_bucket_rates(t: Thresholds, metric: str, **reach: Unpack[Reach]) -> list[str]:
    """PromQL, one per engine read this way that maps ``metric``: the rate over the
    window of that engine's own buckets, by (le, worker labels), for the workers whose
    endpoint it is."""
    w = reach.get("window") or t.pack.window
    matchers = reach.get("matchers", ())
    engines = reach.get("engines")
    out = []
    for name in ENGINES:
        if engines is not None and name not in engines:
            continue
        engine = ENGINE_MAPS[name]
        signal = _passthrough(engine, metric)
        if signal is None:
            continue
        out.append(
            f"sum by (le, {WORKER}) (\n"
            f"    {_indent(_engine_side(engine, signal, w, matchers), '    ')}\n"
            f"  * on ({ENDPOINT_JOIN}) group_left ({_FROM_INFO})\n"
            f"    (\n"
            f"      {_indent(_endpoints(t), '      ')}\n"
            f"    )\n"
            f")"
        )
    return out


def engine_only_rate(t: Thresholds, metric: str) -> str:
    """PromQL of the recorded per-worker bucket rate: the engine's own buckets, only for
    the workers whose agent does not re-export them (``export_histograms: false``).

    Recording the agent's copy as well would store every bucket of every worker a
    second time (about 100 more recorded series per worker); the readers take the
    agent's buckets first and this rate where they are absent (:func:`agent_or_recorded`).
    """
    branches = engine_bucket_rates(t, metric)
    if not branches:
        raise ValueError(f"no engine maps {metric} onto its own histogram")
    agent = f"group by ({WORKER_KEY}) ({metric}_bucket{t.pack.selector()})"
    engine = f"\nor on ({WORKER_KEY})\n".join(branches)
    return f"(\n  {_indent(engine, '  ')}\n)\nunless on ({WORKER_KEY})\n{agent}"


def agent_or_recorded(t: Thresholds, metric: str, recorded: str) -> str:
    """PromQL: per-worker bucket rates of ``metric`` by (le, worker labels), the agent's
    copy where it exports one, else the recorded engine-side rate ``recorded``."""
    agent = _agent_rate(t, metric, t.pack.window, ())
    return f"(\n  {agent}\n  or on ({WORKER_KEY})\n  {recorded}\n)"


def _agent_rate(t: Thresholds, metric: str, window: str, matchers: tuple[str, ...]) -> str:
    """The agent's copy of ``metric``'s buckets: their rate by (le, worker labels)."""
    buckets = S.bucket_rate(contract.BY_NAME[metric])
    return buckets.render(selector=t.pack.selector(*matchers), window=window, by=f"le, {WORKER}")


def bucket_rate(t: Thresholds, metric: str, **reach: Unpack[Reach]) -> str:
    """PromQL: the rate over the window of the buckets of the contract histogram
    ``metric`` (``inferwatch_ttft_seconds``), by (le, worker labels): the agent's copy
    per worker, else the engine's own series (:class:`Reach` says which buckets)."""
    agent = list(reach.get("matchers", ()))
    engines = reach.get("engines")
    if engines is not None:
        agent.insert(0, f'engine=~"{"|".join(re.escape(e) for e in engines)}"')
    window = reach.get("window") or t.pack.window
    branches = [_agent_rate(t, metric, window, tuple(agent))]
    branches += engine_bucket_rates(t, metric, **reach)
    return f"\nor on ({WORKER_KEY})\n".join(branches)
