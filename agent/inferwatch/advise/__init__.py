"""``inferwatch advise``: from metrics to the flags that fix them (the guide's closed loops).

Reads the live picture of every worker, from an agent's ``/metrics`` (a few
samples spread over at least ``advice.min_rate_span``) or from Prometheus over
a time range, and prints ranked recommendations, each with the numbers that
triggered it and the alerts that detect the same condition. The loops and their
definitions are :mod:`inferwatch.pack.loops` (the same ones the alert rules
encode); every number comes from ``thresholds.yaml`` (``--thresholds``
overrides it); the worker's launch flags (``inferwatch_worker_info``) make the
advice concrete ("prefix caching is off", "from 48 to 38", nothing about FP8 for
a worker whose KV cache is FP8 already).

Modules: ``model`` (pictures, recommendations), ``agent`` and ``prometheus``
(where pictures come from), ``rules`` (the loops applied), ``render`` (text,
rich, JSON), ``cli`` (the command line). ``inferwatch advise capacity`` is the
guide's max-num-seqs arithmetic (:mod:`inferwatch.advise.capacity`).
"""

from __future__ import annotations

from inferwatch.advise.agent import parse_exposition, pictures_from_scrapes, read_agent
from inferwatch.advise.cli import add_arguments, main, parse_time
from inferwatch.advise.model import (
    Evidence,
    Recommendation,
    Unreachable,
    WarmupState,
    WorkerPicture,
)
from inferwatch.advise.prometheus import pictures_from_answers, read_prometheus
from inferwatch.advise.render import render_text, report_dict
from inferwatch.advise.rules import advise

__all__ = [
    "Evidence",
    "Recommendation",
    "Unreachable",
    "WarmupState",
    "WorkerPicture",
    "add_arguments",
    "advise",
    "main",
    "parse_exposition",
    "parse_time",
    "pictures_from_answers",
    "pictures_from_scrapes",
    "read_agent",
    "read_prometheus",
    "render_text",
    "report_dict",
]
