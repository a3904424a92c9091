"""Recorded traces: the agent's /metrics over time, the client's requests, the phases.

A trace is gzip'd JSON lines. Line 1 is the header::

    {"kind": "inferwatch-trace", "version": 1, "scrape_interval_s": 1.0,
     "source": "...", "phases": [{"name": "idle", "start": <unix s>, "end": <unix s>}],
     "workers": {"<worker>": {"engine": "llamacpp", "slots": 4}}}

then one object a line: ``{"t": <unix s>, "agent": "<the agent's /metrics text>"}``,
``{"t": ..., "client": {"worker", "ttft_s", "tpot_s", "e2e_s", "prompt_tokens",
"gen_tokens", "ok"}}`` or ``{"t": ..., "engine": "<the engine's /metrics text>"}``;
``{"t": ..., "gpu": {nvidia-smi's fields}}`` and ``{"t": ..., "error": "..."}`` (a
reading the recorder missed) are read past.

The backtest replays the agent's expositions as Prometheus would have scraped them
at the deployment's scrape interval (the latest exposition at or before each scrape;
unix timestamps moved to promtool's clock, which starts at the trace's first scrape).
The ground truth comes from the phases: during and after an ``overload`` phase the
queue page must fire for every worker (onset: the phase's start); any warning may
fire; no critical alert may fire outside an overload (the queue page leading).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferwatch.backtest.scenario import Allow, Expect, Scenario, Truth
from inferwatch.errors import ConfigError

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_TIME_SUFFIXES = ("_timestamp_seconds", "_start_time_seconds")
PHASES = ("idle", "steady", "overload", "cooldown", "warmup")
#: critical alerts a sustained overload may raise, once the queue page had its bound
OVERLOAD_CRITICAL = (
    "InferenceTTFTSLOBreach",
    "InferenceVRAMPressureQueueRising",
    "InferenceTTFTBudgetBurn",
    "InferenceTPOTBudgetBurn",
    "InferenceAvailabilityBudgetBurn",
)


@dataclass
class Trace:
    path: Path
    header: dict[str, Any]
    #: (t, agent exposition text)
    agent: list[tuple[float, str]] = field(default_factory=list)
    client: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    engine: list[tuple[float, str]] = field(default_factory=list)


def _number(value: object, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(where, key, "a number", value)
    return float(value)


def read_trace(path: Path) -> Trace:
    """Read and check a trace file; a malformed one raises :class:`ConfigError`."""
    where = str(path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ConfigError(where, "(file)", f"gzip'd JSON lines ({type(exc).__name__})") from None
    if not lines:
        raise ConfigError(where, "line 1", "the trace header")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        raise ConfigError(where, "line 1", "a JSON header object") from None
    if not isinstance(header, dict) or header.get("kind") != "inferwatch-trace":
        raise ConfigError(where, "kind", "inferwatch-trace")
    if header.get("version") != 1:
        raise ConfigError(where, "version", "1", header.get("version"))
    interval = _number(header.get("scrape_interval_s"), where, "scrape_interval_s")
    if interval <= 0:
        raise ConfigError(where, "scrape_interval_s", "a positive number of seconds", interval)
    phases = header.get("phases")
    if not isinstance(phases, list) or not phases:
        raise ConfigError(where, "phases", "a list of {name, start, end}")
    for i, ph in enumerate(phases):
        if not isinstance(ph, dict) or not isinstance(ph.get("name"), str):
            raise ConfigError(where, f"phases[{i}].name", "a phase name such as idle or overload")
        start = _number(ph.get("start"), where, f"phases[{i}].start")
        end = _number(ph.get("end"), where, f"phases[{i}].end")
        if end < start:
            raise ConfigError(where, f"phases[{i}].end", "a time at or after its start", end)
    workers = header.get("workers")
    if not isinstance(workers, dict) or not workers:
        raise ConfigError(where, "workers", "a mapping of worker name to {engine, slots}")
    trace = Trace(path, header)
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(where, f"line {n}", "a JSON object") from None
        if not isinstance(row, dict):
            raise ConfigError(where, f"line {n}", "a JSON object")
        t = _number(row.get("t"), where, f"line {n}.t")
        if isinstance(row.get("agent"), str):
            trace.agent.append((t, row["agent"]))
        elif isinstance(row.get("client"), dict):
            trace.client.append((t, row["client"]))
        elif isinstance(row.get("engine"), str):
            trace.engine.append((t, row["engine"]))
        elif isinstance(row.get("gpu"), dict) or isinstance(row.get("error"), str):
            pass  # nvidia-smi readings (for docs/validation.md) and the recorder's misses
        else:
            raise ConfigError(
                where,
                f"line {n}",
                "one of agent (text), client (object), engine (text), gpu (object), error (text)",
            )
    if not trace.agent:
        raise ConfigError(where, "agent", "at least one agent exposition line")
    return trace


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels, value = m.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        out.append((name, dict(_LABEL.findall(labels or "")), v))
    return out


def trace_series(
    trace: Trace, scrape: float, instance: str = "agent:10127"
) -> tuple[dict[str, list[float | str | None]], float, float]:
    """The agent's series scraped every ``scrape`` seconds; also the trace's time 0 and length."""
    agent = sorted(trace.agent, key=lambda p: p[0])
    t0 = agent[0][0]
    length = agent[-1][0] - t0
    steps = int(length // scrape) + 1
    out: dict[str, list[float | str | None]] = {}
    i = 0
    for k in range(steps):
        at = t0 + k * scrape
        while i + 1 < len(agent) and agent[i + 1][0] <= at + 1e-6:
            i += 1
        t, text = agent[i]
        if at - t > scrape:  # no exposition within the last scrape interval: a failed scrape
            out.setdefault('up{job="inferwatch",instance="' + instance + '"}', [None] * steps)[
                k
            ] = 0.0
            continue
        out.setdefault('up{job="inferwatch",instance="' + instance + '"}', [None] * steps)[k] = 1.0
        for name, labels, value in _samples(text):
            if name.endswith(_TIME_SUFFIXES) and value > 1e9:
                value -= t0
            labels = {**labels, "job": "inferwatch", "instance": instance}
            sel = name + "{" + ",".join(f'{a}="{b}"' for a, b in sorted(labels.items())) + "}"
            if math.isnan(value):
                continue
            out.setdefault(sel, [None] * steps)[k] = value
    for values in out.values():
        for k in range(1, steps):
            if values[k] is None and values[k - 1] not in (None, "stale"):
                values[k] = "stale"
    return out, t0, length


def trace_truth(
    trace: Trace, t0: float, scrape: float, evaluation: float, alerts: frozenset[str]
) -> Truth:
    """Ground truth from the phases (module docstring)."""
    expect: list[Expect] = []
    allow: list[Allow] = [Allow(a, 0.0, {"severity": "warning"}) for a in sorted(alerts)]
    from inferwatch.backtest.truth import alert_facts
    from inferwatch.pack.thresholds import load_thresholds

    queue = alert_facts(load_thresholds())["InferenceQueueOverCapacity"]
    for ph in trace.header["phases"]:
        if ph["name"] != "overload":
            continue
        onset = float(ph["start"]) - t0
        if float(ph["end"]) - float(ph["start"]) < queue.bound(scrape, evaluation):
            continue
        for worker in trace.header["workers"]:
            expect.append(Expect("InferenceQueueOverCapacity", onset, {"worker": str(worker)}))
        lead = onset + queue.bound(scrape, evaluation)
        allow.extend(Allow(a, lead) for a in OVERLOAD_CRITICAL)
        # the queue page stays on until the queue drains after the phase
        allow.append(Allow("InferenceQueueOverCapacity", onset))
    return Truth(expect, allow, trace.header.get("xfail"))


def load_trace(path: Path, alerts: frozenset[str], scrape: float, evaluation: float) -> Scenario:
    trace = read_trace(path)
    series, t0, length = trace_series(trace, scrape)
    truth = trace_truth(trace, t0, scrape, evaluation, alerts)
    name = path.name.removesuffix(".jsonl.gz")
    return Scenario(
        f"trace:{name}", str(trace.header.get("source", "")), length, truth, str(path), series
    )
