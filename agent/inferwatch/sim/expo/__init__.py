"""Exposition writers: how a simulated worker's ``/metrics`` looks, one module per engine.

A writer turns the engine's records (:mod:`inferwatch.sim.stats`) into one
engine's exact metric names, types, labels and buckets. The worker feeds it
and serves what it renders; it never sees a metric name itself.

Every engine of the registry (:data:`inferwatch.engines.ENGINES`) has a writer
``sim/expo/<name>.py`` with

- ``FORMATS``: the format names it accepts (the first is the default), e.g.
  ``("v1", "v0", "multiprocess")`` for vLLM;
- ``create(cfg: SimConfig) -> MetricsWriter``;

:data:`WRITERS` is derived from the registry, so ``inferwatch simulate --engine
NAME --format F`` serves a new engine once both its table and this module exist. A writer whose engine serves metrics somewhere
else sets ``metrics_path`` (NIM ``/v1/metrics``, trtllm-serve
``/prometheus/metrics``); the OpenAI-compatible API stays the same for all.
An engine that writes with prometheus_client subclasses
:class:`~inferwatch.sim.expo.common.RegistryWriter` (its registry, family makers,
text exposition and no-op handlers) and lists its per-request histograms as rows.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from inferwatch.engines import ENGINES
from inferwatch.errors import ConfigError
from inferwatch.sim.config import SimConfig
from inferwatch.sim.stats import EngineSnapshot, HttpRecord, StepStats

#: engine name -> writer module: one per engine of the registry
WRITERS: dict[str, str] = {name: f"inferwatch.sim.expo.{name}" for name in ENGINES}


@dataclass(frozen=True)
class Exposition:
    body: bytes
    content_type: str


class MetricsWriter(Protocol):
    """What a worker needs from an exposition writer."""

    #: HTTP path the engine serves its metrics on
    metrics_path: str
    #: whether the engine gzips its exposition when the client accepts it
    supports_gzip: bool

    def on_step(self, engine: int, stats: StepStats) -> None:
        """Account one engine step (or an abort outside a step)."""

    def on_rejection(self, reason: str) -> None:
        """A request was refused at admission (HTTP 503); ``reason`` is vLLM's label value."""

    def on_http(self, record: HttpRecord) -> None:
        """Account one finished HTTP request."""

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        """The exposition now, given the gauges of every engine and the Accept header."""


def formats(engine: str) -> tuple[str, ...]:
    """Formats the writer of ``engine`` accepts, the default first."""
    module = importlib.import_module(_module_name(engine))
    return tuple(module.FORMATS)


def create_writer(cfg: SimConfig) -> MetricsWriter:
    module = importlib.import_module(_module_name(cfg.engine))
    if cfg.format not in module.FORMATS:
        raise ConfigError(
            "inferwatch simulate",
            "--format",
            f"one of {', '.join(module.FORMATS)} for --engine {cfg.engine}",
            cfg.format,
        )
    writer: MetricsWriter = module.create(cfg)
    return writer


def _module_name(engine: str) -> str:
    try:
        return WRITERS[engine]
    except KeyError:
        raise ConfigError(
            "inferwatch simulate", "--engine", f"one of {', '.join(sorted(WRITERS))}", engine
        ) from None
