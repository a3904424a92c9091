"""Reading a trace: the header checked, the records sorted by kind (format: the package).

Every malformed part is a :class:`~inferwatch.errors.ConfigError` naming the file,
the line or header key, and what was expected.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from inferwatch.errors import ConfigError

KIND = "inferwatch-trace"
VERSION = 1
#: the record kinds, each with the JSON type of its value
RECORD_KINDS: dict[str, type] = {
    "agent": str,
    "engine": str,
    "client": dict,
    "gpu": dict,
    "error": str,
}


@dataclass
class Trace:
    """A trace read: its header, and the agent, engine and client records in file order."""

    path: str
    header: dict[str, Any]
    #: (t, the agent's /metrics text)
    agent: list[tuple[float, str]] = field(default_factory=list)
    #: (t, the engine's /metrics text)
    engine: list[tuple[float, str]] = field(default_factory=list)
    #: (t when the request was sent, the client's record)
    client: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    def phase(self, name: str | None = None) -> tuple[float, float]:
        """(start, end) of the named phase, or of the first one."""
        for p in self.header.get("phases") or []:
            if name is None or p.get("name") == name:
                return float(p["start"]), float(p["end"])
        raise ConfigError(self.path, "phases", f"a phase named {name!r}" if name else "a phase")

    def slots(self, worker: str | None = None) -> int:
        """The slots (``--parallel``, ``max_num_seqs``) of the named worker, or of the first."""
        workers = self.header.get("workers") or {}
        if worker is None and workers:
            worker = next(iter(workers))
        try:
            return int(workers[worker]["slots"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(self.path, "workers", "a worker with its slots", worker) from None

    def agent_between(
        self, start: float | None = None, end: float | None = None
    ) -> list[tuple[float, str]]:
        """The agent's expositions between ``start`` and ``end`` (both included)."""
        return [
            (t, text)
            for t, text in self.agent
            if (start is None or t >= start) and (end is None or t <= end)
        ]


def _number(value: object, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(where, key, "a number", value)
    return float(value)


def check_header(header: object, where: str) -> dict[str, Any]:
    """The header, checked: kind, version, scrape interval, phases, workers."""
    if not isinstance(header, dict) or header.get("kind") != KIND:
        raise ConfigError(where, "kind", KIND)
    if header.get("version") != VERSION:
        raise ConfigError(where, "version", str(VERSION), header.get("version"))
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
    if header.get("client_time", "sent") not in ("sent", "answered"):
        raise ConfigError(where, "client_time", "sent or answered", header.get("client_time"))
    return header


def _record(line: str, where: str, n: int) -> tuple[float, str, Any]:
    """One record line -> (t, kind, value)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        raise ConfigError(where, f"line {n}", "a JSON object") from None
    if not isinstance(row, dict):
        raise ConfigError(where, f"line {n}", "a JSON object")
    t = _number(row.get("t"), where, f"line {n}.t")
    for kind, kind_type in RECORD_KINDS.items():
        if isinstance(row.get(kind), kind_type):
            return t, kind, row[kind]
    raise ConfigError(
        where,
        f"line {n}",
        "one of agent (text), client (object), engine (text), gpu (object), error (text)",
    )


def _fill(trace: Trace, lines: Iterable[str], where: str) -> None:
    # "client_time": "answered": client records were written when the answer ended
    # (bench/device/llamacpp_trace.py); the send is that less e2e_s
    answered = trace.header.get("client_time", "sent") == "answered"
    for n, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        t, kind, value = _record(line, where, n)
        if kind == "agent":
            trace.agent.append((t, value))
        elif kind == "engine":
            trace.engine.append((t, value))
        elif kind == "client":
            if answered and isinstance(value.get("e2e_s"), (int, float)):
                t -= float(value["e2e_s"])
            trace.client.append((t, value))
        # gpu (nvidia-smi, for docs/validation.md) and error (the recorder's misses): read past


_T = TypeVar("_T", bound=Trace)


def read_trace(path: str | Path) -> Trace:
    """Read and check a trace file; a malformed one raises :class:`ConfigError`."""
    return read_into(path, Trace)


def read_into(path: str | Path, kind: type[_T]) -> _T:
    """Read and check a trace file into ``kind``: :class:`Trace` or a reader's subclass."""
    where = str(path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            lines = iter(fh)
            first = next(lines, None)
            if first is None:
                raise ConfigError(where, "line 1", "the trace header")
            try:
                header = json.loads(first)
            except json.JSONDecodeError:
                raise ConfigError(where, "line 1", "a JSON header object") from None
            trace = kind(where, check_header(header, where))
            _fill(trace, lines, where)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ConfigError(where, "file", "a gzip'd JSON-lines trace", type(exc).__name__) from None
    if not trace.agent:
        raise ConfigError(where, "agent", "at least one agent exposition line")
    return trace


def header_of(header: Mapping[str, Any]) -> dict[str, Any]:
    """``header`` with the format's kind and version first."""
    return {"kind": KIND, "version": VERSION, **header}
