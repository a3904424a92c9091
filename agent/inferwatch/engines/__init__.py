"""Engine mapping tables, by name. ``detect`` picks one from an exposition's names."""

from __future__ import annotations

from collections.abc import Iterable

from inferwatch.engines.base import EngineMap, Ratio, Signal
from inferwatch.engines.vllm import VLLM

ENGINES: dict[str, EngineMap] = {m.name: m for m in (VLLM,)}

__all__ = ["ENGINES", "EngineMap", "Ratio", "Signal", "detect"]


def detect(family_names: Iterable[str]) -> EngineMap | None:
    """The engine whose prefixes match most family names, or None if none match."""
    counts: dict[str, int] = {}
    for name in family_names:
        for engine in ENGINES.values():
            if name.startswith(engine.prefixes):
                counts[engine.name] = counts.get(engine.name, 0) + 1
    if not counts:
        return None
    return ENGINES[max(counts, key=lambda n: (counts[n], n))]
