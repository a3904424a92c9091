"""What an engine says about itself on its API: version, model, batch capacity.

Several engines serve a small JSON document next to their metrics. The agent
reads it once per (re)start of a worker, after the first good scrape, and uses
it where the metrics are silent: the version label of ``inferwatch_worker_info``,
the ``model`` label of engines whose series have none (llama.cpp, TGI), and
``inferwatch_max_num_seqs`` where neither the configuration nor the command
line gives a capacity (llama.cpp picks its slot count itself without
``--parallel``).

Which engine serves one, at which path, and under which JSON keys it states
each fact is its table's ``self_description``
(:class:`~inferwatch.engines.base.SelfDescribed`, in ``engines/<name>.py``,
with the sources cited there): vLLM ``/version``, llama.cpp ``/props``, SGLang
``/get_server_info``, TGI ``/info`` today. The readers are pure; :func:`fetch`
does the I/O.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from inferwatch.agent.httpio import Client, HttpError, TooLarge
from inferwatch.engines import ENGINES
from inferwatch.engines.base import SelfDescribed
from inferwatch.engines.mapping import LabelKey, Mapped

T = TypeVar("T")

#: the longest label value taken from a self-description
_MAX_TEXT = 128
#: a self-description larger than this is not read (llama.cpp's /props carries the
#: chat template: a few KB)
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class SelfDescription:
    """Facts an engine stated about itself; None where it said nothing usable."""

    version: str | None = None
    model: str | None = None
    max_num_seqs: int | None = None


def _text(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = str(value).strip()
    if not text or text.lower() in ("none", "null", "unknown"):
        return None
    return text[:_MAX_TEXT]


def _count(value: object) -> int | None:
    """A positive whole number (JSON numbers only: a capacity is never a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value <= 0 or value != int(value):
        return None
    return int(value)


def _first(doc: Mapping[str, Any], keys: tuple[str, ...], read: Callable[[object], T]) -> T | None:
    """The first usable value among ``keys``."""
    for key in keys:
        value = read(doc.get(key))
        if value is not None:
            return value
    return None


def read(described: SelfDescribed, doc: Mapping[str, Any]) -> SelfDescription:
    """The facts of one self-description document, under the keys the table names."""
    return SelfDescription(
        version=_first(doc, described.version, _text),
        model=_first(doc, described.model, _text),
        max_num_seqs=_first(doc, described.max_num_seqs, _count),
    )


#: engine name -> where it describes itself and under which keys (the registry's tables)
ENDPOINTS: Mapping[str, SelfDescribed] = {
    name: table.self_description
    for name, table in ENGINES.items()
    if table.self_description is not None
}


def describe(engine: str, body: bytes) -> SelfDescription:
    """The facts in an engine's self-description; empty for anything unreadable."""
    endpoint = ENDPOINTS.get(engine)
    if endpoint is None:
        return SelfDescription()
    try:
        doc = json.loads(body)
    except ValueError:
        return SelfDescription()
    return read(endpoint, doc) if isinstance(doc, dict) else SelfDescription()


async def fetch(
    session: Client, base_url: str, engine: str, timeout: float
) -> SelfDescription | None:
    """Ask the worker. None when it could not be asked (ask again later); an empty
    description when it answered without facts (an older build, a 404): that answer
    stands until the worker restarts."""
    endpoint = ENDPOINTS.get(engine)
    if endpoint is None:
        return SelfDescription()
    url = base_url.rstrip("/") + endpoint.path
    try:
        resp = await session.get(url, timeout=timeout, max_body=MAX_BYTES)
    except TooLarge:
        return SelfDescription()
    except (asyncio.TimeoutError, HttpError):
        return None
    if resp.status != 200:
        return SelfDescription()
    return describe(engine, resp.body)


def _named(series: Mapping[LabelKey, Any], model: str) -> dict[LabelKey, Any]:
    out: dict[LabelKey, Any] = {}
    for key, value in series.items():
        out[tuple((k, model if k == "model" and not v else v) for k, v in key)] = value
    return out


def with_model(mapped: Mapped, model: str | None) -> Mapped:
    """``mapped`` with an empty ``model`` label set to the engine's stated model.

    For engines whose series carry no model label, so that they join with
    ``inferwatch_worker_info`` and the process series, which name the model too.
    """
    if not model or mapped.models() - {""}:
        return mapped
    return replace(
        mapped,
        gauges={t: _named(s, model) for t, s in mapped.gauges.items()},
        counters={t: _named(s, model) for t, s in mapped.counters.items()},
        histograms={t: _named(s, model) for t, s in mapped.histograms.items()},
    )


def restarted(before: Mapped, now: Mapped) -> bool:
    """Whether a counter went down between two scrapes: the worker restarted (its
    self-description may have changed with its flags) though no scrape failed.

    Totals per family, so that a model label filled in on one side only does not
    hide the drop."""
    for target, series in now.counters.items():
        old = before.counters.get(target)
        if old and math.fsum(series.values()) < math.fsum(old.values()):
            return True
    return False
