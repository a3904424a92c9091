"""Traces of a serving run, for the what-if twin's validation (docs/advise.md).

A trace is gzip JSON lines. Line 1 is the header::

    {"kind": "inferwatch-trace", "version": 1, "scrape_interval_s": 1.0, "source": "...",
     "phases": [{"name": "load", "start": unix, "end": unix}],
     "workers": {"llama": {"engine": "llamacpp", "slots": 4}}}

then, in time order, one record a line: ``{"t": unix, "agent": "<agent /metrics>"}``,
``{"t": unix, "engine": "<engine /metrics>"}`` and ``{"t": unix, "client": {"worker",
"ttft_s", "tpot_s", "e2e_s", "prompt_tokens", "gen_tokens", "ok"}}`` (``t``: when the
request was sent).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from inferwatch.advise.agent import Scrape, parse_exposition
from inferwatch.advise.twin import quantile
from inferwatch.errors import ConfigError

KIND = "inferwatch-trace"


@dataclass
class Trace:
    path: str
    header: dict[str, Any]
    agent: list[tuple[float, str]] = field(default_factory=list)
    engine: list[tuple[float, str]] = field(default_factory=list)
    client: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    def phase(self, name: str | None = None) -> tuple[float, float]:
        """(start, end) of the named phase, or of the first one."""
        phases = self.header.get("phases") or []
        for p in phases:
            if name is None or p.get("name") == name:
                return float(p["start"]), float(p["end"])
        raise ConfigError(self.path, "phases", f"a phase named {name!r}" if name else "a phase")

    def slots(self, worker: str | None = None) -> int:
        workers = self.header.get("workers") or {}
        if worker is None and workers:
            worker = next(iter(workers))
        try:
            return int(workers[worker]["slots"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(self.path, "workers", "a worker with its slots", worker) from None

    def scrapes(
        self, start: float | None = None, end: float | None = None
    ) -> list[tuple[float, Scrape]]:
        """The agent's expositions between ``start`` and ``end``, parsed."""
        return [
            (t, parse_exposition(text))
            for t, text in self.agent
            if (start is None or t >= start) and (end is None or t <= end)
        ]


def write_header(out: IO[str], header: Mapping[str, Any]) -> None:
    out.write(json.dumps({"kind": KIND, "version": 1, **header}) + "\n")


def write_record(out: IO[str], t: float, kind: str, value: Any) -> None:
    out.write(json.dumps({"t": round(t, 4), kind: value}) + "\n")


def read_trace(path: str | Path) -> Trace:
    name = str(path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = iter(f)
            try:
                header = json.loads(next(lines))
            except StopIteration:
                raise ConfigError(name, "line 1", "the trace header") from None
            if not isinstance(header, dict) or header.get("kind") != KIND:
                raise ConfigError(name, "line 1", f'a header with "kind": "{KIND}"')
            if header.get("version") != 1:
                raise ConfigError(name, "version", "1", header.get("version"))
            trace = Trace(name, header)
            for n, line in enumerate(lines, start=2):
                try:
                    rec = json.loads(line)
                    t = float(rec["t"])
                except (ValueError, KeyError, TypeError):
                    raise ConfigError(name, f"line {n}", 'a record with "t"') from None
                if "agent" in rec:
                    trace.agent.append((t, str(rec["agent"])))
                elif "engine" in rec:
                    trace.engine.append((t, str(rec["engine"])))
                elif "client" in rec:
                    trace.client.append((t, dict(rec["client"])))
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ConfigError(name, "file", f"a gzip JSON-lines trace ({exc})") from None
    return trace


@dataclass(frozen=True)
class Measured:
    """What the clients saw over a phase."""

    requests: int
    failed: int
    throughput: float  # generated tokens / s, from the first send to the last answer
    ttft_p50: float
    ttft_p95: float
    prompt_tokens: float
    gen_tokens: float
    duration: float


def measured(records: Iterable[tuple[float, Mapping[str, Any]]]) -> Measured:
    every = list(records)
    ok = [(t, r) for t, r in every if r.get("ok")]
    failed = len(every) - len(ok)
    if not ok:
        return Measured(0, failed, 0.0, float("nan"), float("nan"), 0.0, 0.0, 0.0)
    first = min(t for t, _ in ok)
    last = max(t + float(r["e2e_s"]) for t, r in ok)
    gen = sum(float(r["gen_tokens"]) for _, r in ok)
    ttfts = [float(r["ttft_s"]) for _, r in ok]
    return Measured(
        requests=len(ok),
        failed=failed,
        throughput=gen / max(last - first, 1e-9),
        ttft_p50=quantile(ttfts, 0.5),
        ttft_p95=quantile(ttfts, 0.95),
        prompt_tokens=sum(float(r["prompt_tokens"]) for _, r in ok) / len(ok),
        gen_tokens=gen / len(ok),
        duration=last - first,
    )
