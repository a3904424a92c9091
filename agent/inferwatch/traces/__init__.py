"""Serving traces: one file format for what a run recorded (package).

A trace is gzip'd JSON lines. Line 1 is the header::

    {"kind": "inferwatch-trace", "version": 1, "scrape_interval_s": 1.0, "source": "...",
     "phases": [{"name": "load", "start": <unix s>, "end": <unix s>}],
     "workers": {"<worker>": {"engine": "llamacpp", "slots": 4}}}

with, optionally, ``"client_time": "answered"`` (below) and anything else the
recorder wants to keep (its load, ``xfail`` for the backtest). Then one record a
line, each ``{"t": <unix s>, <kind>: <value>}``:

* ``agent``: the agent's ``/metrics`` text;
* ``engine``: the engine's ``/metrics`` text;
* ``client``: one request as its client saw it: ``{"worker", "ttft_s", "tpot_s",
  "e2e_s", "prompt_tokens", "gen_tokens", "ok"}``; ``t`` is when it was sent, or,
  under ``"client_time": "answered"``, when its answer ended (the reader then
  takes ``t - e2e_s`` as the send);
* ``gpu``: nvidia-smi's fields (kept for docs/validation.md, read past);
* ``error``: a reading the recorder missed (read past).

:mod:`.read` checks and reads a trace (a malformed one is one line naming the
file, the line or key, and what was expected: :class:`~inferwatch.errors.ConfigError`,
exit 2); :mod:`.write` writes one, all at once or as the run goes. ``advise
--what-if`` fits the twin on traces, ``backtest`` replays them through the rules.
"""

from __future__ import annotations

from inferwatch.traces.read import (
    KIND,
    RECORD_KINDS,
    VERSION,
    Trace,
    check_header,
    read_into,
    read_trace,
)
from inferwatch.traces.write import TraceWriter, write_header, write_record, write_trace

__all__ = [
    "KIND",
    "RECORD_KINDS",
    "VERSION",
    "Trace",
    "TraceWriter",
    "check_header",
    "read_into",
    "read_trace",
    "write_header",
    "write_record",
    "write_trace",
]
