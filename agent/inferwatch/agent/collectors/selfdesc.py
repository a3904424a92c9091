"""What an engine says about itself on its API: version, model, batch capacity.

Several engines serve a small JSON document next to their metrics. The agent
reads it once per (re)start of a worker, after the first good scrape, and uses
it where the metrics are silent: the version label of ``inferwatch_worker_info``,
the ``model`` label of engines whose series have none (llama.cpp, TGI), and
``inferwatch_max_num_seqs`` where neither the configuration nor the command
line gives a capacity (llama.cpp picks its slot count itself without
``--parallel``).

| engine | path | version | model | capacity |
|---|---|---|---|---|
| vLLM | ``/version`` | ``version`` | - | - |
| llama.cpp | ``/props`` | ``build_info`` | ``model_alias`` | ``total_slots`` |
| SGLang | ``/get_server_info`` | ``version`` | ``served_model_name`` | ``max_running_requests`` |
| TGI | ``/info`` | ``version`` | ``model_id`` | ``max_concurrent_requests`` |

Sources: vLLM ``vllm/entrypoints/openai/api_server.py`` (``show_version``);
llama.cpp: the server that llama-cpp-python 0.3.36 vendors
(``tools/server/server-context.cpp``, ``get_res_props``), also read from the
running server by ``tests/live/test_llamacpp_live.py``; SGLang
``python/sglang/srt/entrypoints/http_server.py`` @
0025436eab0556737d615b36a4dd3e1e26e82f3d (``get_server_info``: the server
arguments, the scheduler's info and ``version``); TGI ``router/src/lib.rs`` @
014d3fd4effb4e1e742b64c1d6b68ab5c0420686 (``struct Info``). TGI's capacity is
its concurrent-request limit, the same fact the launch-flag table reads from
``--max-concurrent-requests``. The readers are pure; :func:`fetch` does the I/O.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from inferwatch.agent.httpio import Client, HttpError, TooLarge
from inferwatch.engines.mapping import LabelKey, Mapped

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


def _vllm(doc: Mapping[str, Any]) -> SelfDescription:
    return SelfDescription(version=_text(doc.get("version")))


def _llamacpp(doc: Mapping[str, Any]) -> SelfDescription:
    # total_slots is the slot count in use: with --parallel -1 (the default) the
    # server picks it at start and reports the number it picked
    return SelfDescription(
        version=_text(doc.get("build_info")),
        model=_text(doc.get("model_alias")) or _text(doc.get("model_path")),
        max_num_seqs=_count(doc.get("total_slots")),
    )


def _sglang(doc: Mapping[str, Any]) -> SelfDescription:
    return SelfDescription(
        version=_text(doc.get("version")),
        model=_text(doc.get("served_model_name")) or _text(doc.get("model_path")),
        max_num_seqs=_count(doc.get("max_running_requests")),
    )


def _tgi(doc: Mapping[str, Any]) -> SelfDescription:
    return SelfDescription(
        version=_text(doc.get("version")),
        model=_text(doc.get("model_id")),
        max_num_seqs=_count(doc.get("max_concurrent_requests")),
    )


@dataclass(frozen=True)
class Endpoint:
    path: str
    read: Callable[[Mapping[str, Any]], SelfDescription]


#: engine name -> where it describes itself and how to read it
ENDPOINTS: Mapping[str, Endpoint] = {
    "vllm": Endpoint("/version", _vllm),
    "llamacpp": Endpoint("/props", _llamacpp),
    "sglang": Endpoint("/get_server_info", _sglang),
    "tgi": Endpoint("/info", _tgi),
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
    return endpoint.read(doc) if isinstance(doc, dict) else SelfDescription()


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
