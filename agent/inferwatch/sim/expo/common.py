"""Pieces shared by the simulator's exposition writers."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric


def buckets_1_2_5(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (token-count buckets of vLLM and kin)."""
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(m * scale)
        scale *= 10


class WithoutCreated:
    """A view of a registry without ``_created`` samples.

    For servers that do not emit them: vLLM's V0 and multiprocess output, and
    engines that turn them off.
    """

    def __init__(self, inner: CollectorRegistry) -> None:
        self._inner = inner

    def collect(self) -> Iterator[Metric]:
        for family in self._inner.collect():
            if family.type in ("counter", "histogram", "summary"):
                copy = Metric(family.name, family.documentation, family.type, family.unit)
                copy.samples = [s for s in family.samples if not s.name.endswith("_created")]
                yield copy
            else:
                yield family
