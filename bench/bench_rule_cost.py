"""What the rules cost Prometheus on day 30: samples read and evaluation time, ours next to Sloth's
and Pyrra's way of writing the same three SLOs (issue 38).

One run, for each ``--workers`` count (default 4, 16 and 64):

1. **History.** ``--days`` (30) of a 15 s scrape are written as OpenMetrics text, one file per
   2 h block, and imported with ``promtool tsdb create-blocks-from openmetrics`` (each file is
   deleted once imported). The *long* series get the whole history: per worker the TTFT and TPOT
   buckets at the SLO thresholds of ``slos.default`` and ``+Inf``, their ``_count``, the warm-up
   TTFT histogram at the TTFT threshold and ``+Inf``, ``inferwatch_requests_finished_total`` by
   reason and ``inferwatch_requests_rejected_total``. Traffic follows a daily cycle; a small steady
   share of requests is bad (TTFT 0.4 %, TPOT 0.3 %, errors 0.15 %, rejections 0.05 %) and every
   61 hours a 2-hour incident raises the shares (12 %, 8 %, 4 %, 2 %), so the error ratios and
   burn rates are not trivial. Every other series a vLLM worker's agent exports (the series of
   ``tests/data/agent-capture-vllm.prom`` renamed per worker, plus the ones the rules read that a
   capture of one sidecar lacks: the four other histograms, worker-GPU and endpoint info, readiness,
   ``up``) gets only the last ``--short-hours`` (3): the other groups read windows of minutes. A
   dashboard whose time range is longer than that is measured on the history there is, and the
   table says so.
2. **Recorded history.** A recorded series that a rule reads over a range (Sloth's 30-day ratio
   reads the 5-minute one for 30 days) or that a dashboard plots is backfilled with ``promtool tsdb
   create-blocks-from rules`` over the span its readers need, at its group's interval, level by
   level (a record that reads other records waits for their blocks; Prometheus is restarted
   between levels), so a design that reads its own records is measured on a real history.
   Instant reads of recorded series are not backfilled: they read at most one sample a series.
3. **Measure.** Prometheus (Debian's 2.42 here) opens the blocks on a free loopback port and,
   once its compactor has merged the 2 h blocks as it would in production, evaluates every rule of
   every group as an instant query at the end of the data with ``stats=all``, ``--repeat`` times:
   ``totalQueryableSamples`` (samples read) and the median ``evalTotalTime``. A group's cost is
   the sum over its rules (Prometheus evaluates a group's rules one after the other).

Rule sets: ``--rules DIR`` (default the repository's ``alerts/``: every ``*.yaml`` directly in it,
all groups, the non-SLO ones too) and two the bench writes for the same SLOs (TTFT at or under
``slos.default``'s TTFT threshold, TPOT likewise, availability = requests finished without
``reason="error"`` and not rejected; the budget period ``slos.window``; burn windows 5m, 30m, 1h,
2h, 6h, 1d, 3d), per model, from the raw series:

- **Sloth-style**: per window ``sum by (model) (rate(bad[W])) / sum by (model) (rate(total[W]))``
  in one group (``sloth-slo-sli-recordings-<id>``), the period window as the mean of the 5-minute
  ratio, ``sum_over_time(r5m[30d]) / ignoring (sloth_window) count_over_time(r5m[30d])``
  (``optimizedSLIRecordGenerator`` in slok/sloth ``internal/prometheus/recording_rules.go``), the
  metadata group (objective, budget, period, current and period burn rate, remaining budget:
  ``GenerateMetadataRecordingRules`` there) and the multiwindow alerts (1h/5m x14.4, 6h/30m x6,
  1d/2h x3, 3d/6h x1). Sloth writes no interval by default (``internal/prometheus/storage.go``
  sets one only when the spec asks), so its groups run at the global evaluation interval, 15 s.
- **Pyrra-style**: the burn rates per window from the raw series in the SLO's group at 30 s
  (``Burnrates()`` in pyrra-dev/pyrra ``slo/rules.go``: latency as ``(rate(total) -
  rate(bucket{le=threshold})) / rate(total)``) with its four alert pairs (1h/5m x14, 6h/30m x7,
  1d/2h x2, 4d/6h x1 in Pyrra; here 3d for 4d so both anchors use the same windows) and
  ``sum by (model) (increase(raw[30d]))`` per raw series in ``<name>-increase`` at 2m30s (the
  interval ``IncreaseRules()`` gives a 28-35 day window), with its ``absent()`` alerts.
  Pyrra reads a latency SLO's total from ``_count``; here from ``_bucket{le="+Inf"}``, the same
  count in a series of the same length.

Also printed: the 1d, 3d and 30d error ratios each set's rules give against the exact ones
(``increase`` over the window on the raw counters), in % relative error, and the dashboards'
queries (``--dashboards DIR``) as range queries at their default time ranges (variables set to
``.*``, ``$__rate_interval`` = max(4 x 15 s, step + 15 s), step = range / 1000 rounded up to a
Grafana-like interval, at least 15 s).

    PYTHONPATH=agent python bench/bench_rule_cost.py                    # 4, 16, 64 workers, 30 d
    PYTHONPATH=agent python bench/bench_rule_cost.py --quick            # 2 d, 4 workers
    PYTHONPATH=agent python bench/bench_rule_cost.py --rules /work/main/alerts --workers 16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import yaml
from prometheus_client.utils import floatToGoString

from benchlib import REPO, free_port, machine, machine_line, write_json
from inferwatch.agent.collectors.warmup import WARMUP_TTFT_BOUNDS
from inferwatch.pack.thresholds import load_thresholds

STEP = 15
BLOCK = 7200
END = 1_800_000_000 // BLOCK * BLOCK  # a fixed end on a block boundary, so runs compare
BURN_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
#: (short, long, factor) of the multiwindow pairs; Sloth's factors, Pyrra's below
SLOTH_PAIRS = (("5m", "1h", 14.4), ("30m", "6h", 6.0), ("2h", "1d", 3.0), ("6h", "3d", 1.0))
PYRRA_PAIRS = (("5m", "1h", 14.0), ("30m", "6h", 7.0), ("2h", "1d", 2.0), ("6h", "3d", 1.0))
LONG_WINDOWS = ("1d", "3d", "30d")
MODELS = ("llama-3-8b", "qwen2-7b")
CAPTURE = REPO / "tests" / "data" / "agent-capture-vllm.prom"
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class BadInput(Exception):
    """A flag or file the bench cannot use: one line, exit 2."""


# --------------------------------------------------------------------------- durations
def seconds(text: str) -> int:
    """``"2m30s"`` -> 150 (Prometheus duration)."""
    parts = re.findall(r"(\d+)(ms|[smhdwy])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise BadInput(f"not a duration: {text!r}")
    return sum(int(n) * UNITS[u] for n, u in parts if u != "ms")


def duration(sec: float) -> str:
    sec = int(sec)
    for unit in ("d", "h", "m"):
        if sec % UNITS[unit] == 0 and sec >= UNITS[unit]:
            return f"{sec // UNITS[unit]}{unit}"
    return f"{sec}s"


# --------------------------------------------------------------------------- rule sets
@dataclass
class Rule:
    name: str
    expr: str
    record: bool
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Group:
    name: str
    interval: int
    rules: list[Rule]


@dataclass
class RuleSet:
    name: str
    groups: list[Group]
    #: expression of the error ratio the set records over a window, by SLO (None: none)
    ratio: dict[str, dict[str, str]] = field(default_factory=dict)

    def records(self) -> dict[str, list[tuple[Group, Rule]]]:
        """Recording rules by the name they record (Sloth records one name per SLO)."""
        out: dict[str, list[tuple[Group, Rule]]] = {}
        for g in self.groups:
            for r in g.rules:
                if r.record:
                    out.setdefault(r.name, []).append((g, r))
        return out


def load_rules(path: Path, default_interval: int) -> list[Group]:
    files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")) if path.is_dir() else [path]
    if not files:
        raise BadInput(f"--rules {path}: no *.yaml rule file there")
    groups = []
    for f in files:
        try:
            doc = yaml.safe_load(f.read_text())
            for g in doc["groups"]:
                rules = [
                    Rule(
                        r.get("record") or r["alert"],
                        str(r["expr"]),
                        "record" in r,
                        dict(r.get("labels") or {}),
                    )
                    for r in g["rules"]
                ]
                interval = seconds(g["interval"]) if g.get("interval") else default_interval
                groups.append(Group(g["name"], interval, rules))
        except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            raise BadInput(f"--rules {f}: groups[].name/rules[].expr expected ({exc})") from exc
    return groups


@dataclass(frozen=True)
class Slo:
    kind: str  # ttft, tpot, availability
    objective: float
    le: str | None  # the threshold as the agent writes it

    @property
    def budget(self) -> float:
        return round(1.0 - self.objective, 6)


def slos() -> list[Slo]:
    t = load_thresholds()
    (entry,) = (e for e in t.slos.entries if e.model is None)
    out = []
    for kind in ("ttft", "tpot", "availability"):
        o = entry.get(kind)
        if o is not None:
            le = floatToGoString(o.le) if o.le is not None else None
            out.append(Slo(kind, o.objective, le))
    return out


SEL = 'job="inferwatch"'


def bad_total(slo: Slo, w: str) -> tuple[str, str]:
    """The bad and total request rates of one SLO over ``w``, per model, from the raw series."""
    if slo.kind == "availability":
        fin = f"inferwatch_requests_finished_total{{{SEL}}}"
        err = f'inferwatch_requests_finished_total{{{SEL},reason="error"}}'
        rej = f"inferwatch_requests_rejected_total{{{SEL}}}"
        bad = f"(sum by (model) (rate({err}[{w}])) + sum by (model) (rate({rej}[{w}])))"
        total = f"(sum by (model) (rate({fin}[{w}])) + sum by (model) (rate({rej}[{w}])))"
        return bad, total
    h = f"inferwatch_{slo.kind}_seconds_bucket"
    good = f'sum by (model) (rate({h}{{{SEL},le="{slo.le}"}}[{w}]))'
    total = f'sum by (model) (rate({h}{{{SEL},le="+Inf"}}[{w}]))'
    return f"({total} - {good})", total


def sloth_set(objectives: list[Slo], period: str) -> RuleSet:
    groups = []
    ratio: dict[str, dict[str, str]] = {}
    for slo in objectives:
        sid = f"inference-{slo.kind}"
        lab = {"sloth_id": sid, "sloth_service": "inference", "sloth_slo": slo.kind}
        filt = f'{{sloth_id="{sid}", sloth_service="inference", sloth_slo="{slo.kind}"}}'
        sli = []
        for w in BURN_WINDOWS:
            bad, total = bad_total(slo, w)
            sli.append(
                Rule(f"slo:sli_error:ratio_rate{w}", f"({bad})\n/\n({total})", True,
                     {**lab, "sloth_window": w})
            )  # fmt: skip
        r5 = f"slo:sli_error:ratio_rate5m{filt}"
        sli.append(
            Rule(f"slo:sli_error:ratio_rate{period}",
                 f"sum_over_time({r5}[{period}])\n/ ignoring (sloth_window)\n"
                 f"count_over_time({r5}[{period}])",
                 True, {**lab, "sloth_window": period})
        )  # fmt: skip
        groups.append(Group(f"sloth-slo-sli-recordings-{sid}", STEP, sli))
        burn = (
            "{m}" + filt + "\n/ on(sloth_id, sloth_slo, sloth_service) group_left\n"
            "slo:error_budget:ratio" + filt
        )
        meta = [
            Rule("slo:objective:ratio", f"vector({slo.objective})", True, lab),
            Rule("slo:error_budget:ratio", f"vector(1-{slo.objective})", True, lab),
            Rule("slo:time_period:days", f"vector({seconds(period) / 86400:g})", True, lab),
            Rule("slo:current_burn_rate:ratio", burn.replace("{m}", "slo:sli_error:ratio_rate5m"), True,
                 lab),
            Rule("slo:period_burn_rate:ratio",
                 burn.replace("{m}", f"slo:sli_error:ratio_rate{period}"), True, lab),
            Rule("slo:period_error_budget_remaining:ratio",
                 f"1 - slo:period_burn_rate:ratio{filt}", True, lab),
            Rule("sloth_slo_info", "vector(1)", True, {**lab, "sloth_objective": str(slo.objective)}),
        ]  # fmt: skip
        groups.append(Group(f"sloth-slo-meta-recordings-{sid}", STEP, meta))
        alerts = []
        for sev, pairs in (("page", SLOTH_PAIRS[:2]), ("ticket", SLOTH_PAIRS[2:])):
            terms = []
            for short, long, factor in pairs:
                thr = f"({factor:g} * {slo.budget:g})"
                terms.append(
                    f"(max(slo:sli_error:ratio_rate{short}{filt} > {thr}) without (sloth_window)\n"
                    f"and\nmax(slo:sli_error:ratio_rate{long}{filt} > {thr}) without "
                    "(sloth_window))"
                )
            alerts.append(Rule(f"Sloth{slo.kind.title()}BudgetBurn", "\nor\n".join(terms), False,
                               {"sloth_severity": sev}))  # fmt: skip
        groups.append(Group(f"sloth-slo-alerts-{sid}", STEP, alerts))
        # the records' own expressions: only the 5-minute ratio has a stored history
        ratio[slo.kind] = {r.labels["sloth_window"]: r.expr for r in sli}
    return RuleSet("sloth-style", groups, ratio)


def pyrra_set(objectives: list[Slo], period: str) -> RuleSet:
    groups = []
    ratio: dict[str, dict[str, str]] = {}
    increase_interval = 150  # IncreaseRules(): 28 d <= window < 35 d
    for slo in objectives:
        name = f"inference-{slo.kind}"
        lab = {"slo": name}
        metric = (
            "inferwatch_requests"
            if slo.kind == "availability"
            else f"inferwatch_{slo.kind}_seconds"
        )
        burn = []
        for w in BURN_WINDOWS:
            bad, total = bad_total(slo, w)
            burn.append(Rule(f"{metric}:burnrate{w}", f"{bad}\n/\n{total}", True, lab))
        for short, long, factor in PYRRA_PAIRS:
            m = f'{{slo="{name}"}}'
            expr = (
                f"{metric}:burnrate{short}{m} > ({factor:g} * (1-{slo.objective})) and "
                f"{metric}:burnrate{long}{m} > ({factor:g} * (1-{slo.objective}))"
            )
            burn.append(Rule("ErrorBudgetBurn", expr, False, {**lab, "long": long}))
        groups.append(Group(name, 30, burn))
        inc = []
        if slo.kind == "availability":
            raw = {
                "inferwatch_requests_finished": f"inferwatch_requests_finished_total{{{SEL}}}",
                "inferwatch_requests_rejected": f"inferwatch_requests_rejected_total{{{SEL}}}",
            }
            for rec, sel in raw.items():
                by = "model, reason" if "finished" in rec else "model"
                inc.append(Rule(f"{rec}:increase{period}",
                                f"sum by ({by}) (increase({sel}[{period}]))", True, lab))  # fmt: skip
                inc.append(Rule("SLOMetricAbsent", f"absent({sel}) == 1", False, lab))
        else:
            h = f"inferwatch_{slo.kind}_seconds_bucket"
            for le in ("+Inf", slo.le):
                sel = f'{h}{{{SEL},le="{le}"}}'
                inc.append(Rule(f"{metric}:increase{period}",
                                f"sum by (model, le) (increase({sel}[{period}]))", True, lab))  # fmt: skip
                inc.append(Rule("SLOMetricAbsent", f"absent({sel}) == 1", False, lab))
        groups.append(Group(f"{name}-increase", increase_interval, inc))
        ratio[slo.kind] = {r.name.rsplit("burnrate", 1)[1]: r.expr for r in burn if r.record}
        # Pyrra's period ratio is the increase records' ratio: their expressions, inlined
        ratio[slo.kind][period] = exact_ratio(slo, period)
    return RuleSet("pyrra-style", groups, ratio)


def exact_ratio(slo: Slo, w: str) -> str:
    """The error ratio over ``w`` from the raw counters: ``increase`` on each."""
    bad, total = bad_total(slo, w)
    return f"({bad}) / ({total})".replace("rate(", "increase(")


# --------------------------------------------------------------------------- reading PromQL
def names_read(expr: str, known: set[str]) -> dict[str, int]:
    """The recorded series in ``known`` that ``expr`` reads: name -> longest range (0: instant)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    out: dict[str, int] = {}
    for m in re.finditer(r"(?<![\w:])([a-zA-Z_:][\w:]*)", text):
        name = m.group(1)
        if name not in known:
            continue
        rest = text[m.end():]  # fmt: skip
        rng = re.match(r"\s*(\{[^}]*\})?\s*\[(\w+)(?::\w*)?\]", rest)
        out[name] = max(out.get(name, 0), seconds(rng.group(2)) if rng else 0)
    return out


# --------------------------------------------------------------------------- dashboards
@dataclass
class Panel:
    dashboard: str
    title: str
    expr: str
    range_s: int
    step: int
    instant: bool


NICE = (15, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def grafana_step(range_s: int) -> int:
    raw = range_s / 1000
    return next((n for n in NICE if n >= raw), NICE[-1])


def load_dashboards(path: Path) -> list[Panel]:
    panels = []
    for f in sorted(path.glob("*.json")):
        doc = json.loads(f.read_text())
        rng = doc.get("time", {}).get("from", "now-1h")
        m = re.fullmatch(r"now-(\w+)", rng)
        if not m:
            raise BadInput(f"--dashboards {f}: time.from 'now-<duration>' expected, got {rng!r}")
        default_range = seconds(m.group(1))
        variables = {v["name"] for v in doc.get("templating", {}).get("list", [])}

        def walk(o: Any) -> Iterator[dict[str, Any]]:
            if isinstance(o, dict):
                if "targets" in o and isinstance(o["targets"], list):
                    yield o
                for v in o.values():
                    yield from walk(v)
            elif isinstance(o, list):
                for v in o:
                    yield from walk(v)

        for panel in walk(doc):
            range_s = seconds(panel["timeFrom"]) if panel.get("timeFrom") else default_range
            step = grafana_step(range_s)
            for t in panel["targets"]:
                if not t.get("expr"):
                    continue
                expr = substitute(t["expr"], variables, range_s, step)
                panels.append(
                    Panel(f.stem, str(panel.get("title", "")), expr, range_s, step,
                          bool(t.get("instant")))
                )  # fmt: skip
    return panels


def substitute(expr: str, variables: set[str], range_s: int, step: int) -> str:
    fixed = {
        "__rate_interval": f"{max(4 * STEP, step + STEP)}s",
        "__interval": f"{step}s",
        "__interval_ms": str(step * 1000),
        "__range": f"{range_s}s",
        "__range_s": str(range_s),
        "__range_ms": str(range_s * 1000),
    }

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name in fixed:
            return fixed[name]
        if name in variables:
            return ".*"
        return m.group(0)

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", one, expr)


# --------------------------------------------------------------------------- the history
@dataclass
class Series:
    name: str
    labels: str  # rendered, without braces
    value: float
    counter: bool


def capture_template() -> list[Series]:
    """One worker's agent exposition (the capture), less process and Python self-metrics."""
    out = []
    for line in CAPTURE.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([\w:]+)(?:\{(.*)\})? (\S+)", line)
        if not m or m.group(1).startswith(("python_", "process_")):
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        counter = name.endswith(("_total", "_bucket", "_count", "_sum"))
        out.append(Series(name, labels, value, counter))
    return out


EXTRA_HISTOGRAMS = {
    "inferwatch_prompt_length_tokens": (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
    "inferwatch_generation_length_tokens": (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000),
    "inferwatch_prefill_time_seconds": (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 20.0, 60.0),
    "inferwatch_decode_time_seconds": (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 20.0, 60.0),
}


def worker_short_series(w: int, long_keys: set[tuple[str, str]]) -> list[Series]:
    """Every series of worker ``w`` that gets the short history, labels final."""
    model = MODELS[w % len(MODELS)]
    uuid = f"GPU-{w:08d}-0000-4000-8000-000000000000"
    out = []
    for s in capture_template():
        lab = s.labels.replace('model="sim-llama-2-7b-int8"', f'model="{model}"')
        lab = lab.replace('worker="vllm-0"', f'worker="vllm-{w}"')
        lab = re.sub(r'uuid="[^"]*"', f'uuid="{uuid}"', lab)
        out.append(Series(s.name, lab, s.value, s.counter))
    base = f'engine="vllm",model="{model}",worker="vllm-{w}"'
    for name, bounds in EXTRA_HISTOGRAMS.items():
        for i, b in enumerate((*bounds, math.inf)):
            le = floatToGoString(b)
            out.append(Series(f"{name}_bucket", f'{base},le="{le}"', 10.0 * (i + 1), True))
        out.append(Series(f"{name}_count", base, 10.0 * (len(bounds) + 1), True))
        out.append(Series(f"{name}_sum", base, 100.0, True))
    for b in (*WARMUP_TTFT_BOUNDS, math.inf):
        le = floatToGoString(b)
        out.append(
            Series("inferwatch_warmup_requests_ttft_seconds_bucket", f'worker="vllm-{w}",le="{le}"',
                   4.0 if b >= 1.0 else 0.0, False)
        )  # fmt: skip
    out += [
        Series("inferwatch_worker_gpu_info", f'gpu="0",uuid="{uuid}",worker="vllm-{w}"', 1, False),
        Series("inferwatch_worker_endpoint_info",
               f'endpoint="10.0.{w // 250}.{w % 250 + 1}:8000",worker="vllm-{w}"', 1, False),
        Series("inferwatch_worker_ready", f'worker="vllm-{w}"', 1, False),
        Series("inferwatch_warmup_deadline_exceeded", f'worker="vllm-{w}"', 0, False),
        Series("inferwatch_collect_errors_total", 'collector="engine",reason="timeout"', 0, True),
        Series("up", "", 1, False),
    ]  # fmt: skip
    keep = []
    for s in out:
        key = re.search(r'(?:le|reason)="([^"]*)"', s.labels)
        if (s.name, key.group(1) if key else "") in long_keys:
            continue
        keep.append(s)
    return keep


def instance(w: int) -> str:
    return f'job="inferwatch",instance="node-{w:03d}:10127"'


class Traffic:
    """Per worker and step: requests, and the bad ones per SLO (a steady share, plus incidents)."""

    BASE: ClassVar[dict[str, float]] = {
        "ttft": 0.004,
        "tpot": 0.003,
        "error": 0.0015,
        "rejected": 0.0005,
    }
    INCIDENT: ClassVar[dict[str, float]] = {
        "ttft": 0.12,
        "tpot": 0.08,
        "error": 0.04,
        "rejected": 0.02,
    }
    TOKENS = 100

    def __init__(self, workers: int, seed: int = 38) -> None:
        self.rng = np.random.default_rng(seed)
        self.rate = 1.0 + 3.0 * self.rng.random(workers)  # requests per second, by worker

    def step(self, w: int, ts: np.ndarray) -> dict[str, np.ndarray]:
        day = 2 * math.pi * (ts % 86400) / 86400
        lam = self.rate[w] * STEP * (1.0 + 0.6 * np.sin(day))
        n = self.rng.poisson(lam).astype(np.int64)
        incident = (ts % (61 * 3600)) < 2 * 3600
        out = {"n": n}
        #: TPOT is observed per output token, not per request
        out["tokens"] = n * self.TOKENS
        for k in self.BASE:
            p = np.where(incident, self.INCIDENT[k], self.BASE[k])
            out[k] = self.rng.binomial(out["tokens"] if k == "tpot" else n, p)
        return out


@dataclass
class History:
    """Writes and imports the history; returns the counts it wrote."""

    root: Path
    workers: int
    days: float
    short_hours: float
    objectives: list[Slo]
    promtool: str
    #: the last sample's time (seconds); a fixed one by default, so that runs compare
    end: int = END
    #: workers spread over this many ``cluster`` label values (0: no cluster label)
    clusters: int = 0
    samples: int = 0
    series_long: int = 0
    series_short: int = 0

    def long_keys(self) -> set[tuple[str, str]]:
        keys = set()
        for slo in self.objectives:
            if slo.le is not None:
                for le in (slo.le, "+Inf"):
                    keys.add((f"inferwatch_{slo.kind}_seconds_bucket", le))
                keys.add((f"inferwatch_{slo.kind}_seconds_count", ""))
        ttft = next((s.le for s in self.objectives if s.kind == "ttft"), None)
        if ttft is not None:
            for le in (ttft, "+Inf"):
                keys.add(("inferwatch_warmup_requests_ttft_seconds_bucket", le))
        keys.add(("inferwatch_requests_rejected_total", ""))
        for reason in ("stop", "length", "abort", "repetition", "error"):
            keys.add(("inferwatch_requests_finished_total", reason))
        return keys

    def prepare(self) -> None:
        """The traffic, the short series and the counters' state; :meth:`series_at` continues it."""
        self.traffic = Traffic(self.workers)
        self.short = [worker_short_series(w, self.long_keys()) for w in range(self.workers)]
        self.series_short = sum(len(s) for s in self.short)
        self.carry: dict[tuple[int, str], int] = {}

    def spans(self) -> Iterator[np.ndarray]:
        """The timestamps of the history, one array per 2 h block (aligned on the epoch)."""
        start = self.end - int(self.days * 86400)
        for block_start in range(start - start % BLOCK, self.end, BLOCK):
            ts = np.arange(max(block_start, start), min(block_start + BLOCK, self.end + 1), STEP)
            if ts.size:
                yield ts

    def series_at(self, ts: np.ndarray) -> Iterator[tuple[str, np.ndarray | list[str]]]:
        """Every series' samples at ``ts`` (after the ones asked for before): ``(head, values)``,
        head = ``name{labels}``; the long series' values are integers (counts), the short ones'
        rendered text; a short series only at the timestamps in the last ``short_hours``."""
        yield from self._long(self.traffic, ts, self.carry)
        self.series_long = len(self.carry)
        short_start = self.end - int(self.short_hours * 3600)
        if ts[-1] >= short_start:
            yield from self._short(self.short, ts[ts >= short_start], short_start)

    def build(self, tsdb: Path) -> None:
        self.prepare()
        pending: subprocess.Popen[bytes] | None = None
        for ts in self.spans():
            path = self.root / f"chunk-{ts[0] - ts[0] % BLOCK}.om"
            with path.open("w") as f:
                self._write(f, ts)
                f.write("# EOF\n")
            if pending is not None:
                self._wait(pending)
            pending = subprocess.Popen(
                [self.promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(path),
                 str(tsdb)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
            pending.args_path = path  # type: ignore[attr-defined]
        if pending is not None:
            self._wait(pending)

    def _write(self, f: Any, ts: np.ndarray) -> None:
        """OpenMetrics lines (timestamps in seconds) of :meth:`series_at`."""
        lines: list[str] = []
        stamps = [f" {t}\n" for t in ts.tolist()]
        for head, values in self.series_at(ts):
            vals = values.tolist() if isinstance(values, np.ndarray) else values
            # a short series has only the last of the timestamps
            tstr = stamps[len(stamps) - len(vals) :]
            lines.extend(f"{head} {v}{t}" for v, t in zip(vals, tstr, strict=True))
            self.samples += len(vals)
        f.write("".join(lines))

    def _wait(self, proc: subprocess.Popen[bytes]) -> None:
        _, err = proc.communicate()
        path: Path = proc.args_path  # type: ignore[attr-defined]
        if proc.returncode:
            raise RuntimeError(f"promtool failed on {path}: {err.decode()[-2000:]}")
        path.unlink()

    def target(self, w: int) -> str:
        """Worker ``w``'s scrape labels: job, instance, and with ``clusters`` the cluster (the
        workers in contiguous runs, so that every cluster serves every model)."""
        if not self.clusters:
            return instance(w)
        return f'cluster="cluster-{w * self.clusters // self.workers}",{instance(w)}'

    def _long(
        self, traffic: Traffic, ts: np.ndarray, carry: dict[tuple[int, str], int]
    ) -> Iterator[tuple[str, np.ndarray]]:
        for w in range(self.workers):
            model = MODELS[w % len(MODELS)]
            base = f'{self.target(w)},engine="vllm",model="{model}",worker="vllm-{w}"'
            step = traffic.step(w, ts)
            n = step["n"]
            finished = n - step["rejected"]
            series: dict[str, tuple[str, np.ndarray]] = {}
            for slo in self.objectives:
                if slo.le is None:
                    continue
                h = f"inferwatch_{slo.kind}_seconds"
                seen = finished * Traffic.TOKENS if slo.kind == "tpot" else finished
                ok = seen - step[slo.kind]
                series[f"{slo.kind}-inf"] = (f'{h}_bucket{{{base},le="+Inf"}}', seen)
                series[f"{slo.kind}-le"] = (f'{h}_bucket{{{base},le="{slo.le}"}}', ok)
                series[f"{slo.kind}-count"] = (f"{h}_count{{{base}}}", seen)
                if slo.kind == "ttft":
                    warm = np.zeros_like(n)
                    wl = f'{self.target(w)},worker="vllm-{w}"'
                    name = "inferwatch_warmup_requests_ttft_seconds_bucket"
                    series["warm-inf"] = (f'{name}{{{wl},le="+Inf"}}', warm)
                    series["warm-le"] = (f'{name}{{{wl},le="{slo.le}"}}', warm)
            errors = step["error"]
            rest = finished - errors
            shares = {"stop": 0.7, "length": 0.28, "abort": 0.015, "repetition": 0.005}
            parts = {k: (rest * v).astype(np.int64) for k, v in shares.items()}
            parts["stop"] += rest - sum(parts.values())
            parts["error"] = errors
            fin = "inferwatch_requests_finished_total"
            for reason, inc in parts.items():
                series[f"fin-{reason}"] = (f'{fin}{{{base},reason="{reason}"}}', inc)
            series["rejected"] = (
                f"inferwatch_requests_rejected_total{{{base}}}",
                step["rejected"],
            )
            for key, (head, inc) in series.items():
                first = carry.get((w, key), 6 if key.startswith("warm") else 0)
                values = first + np.cumsum(inc)
                carry[(w, key)] = int(values[-1])
                yield head, values

    def _short(
        self, short: list[list[Series]], ts: np.ndarray, short_start: int
    ) -> Iterator[tuple[str, list[str]]]:
        elapsed = (ts - short_start).astype(np.float64)
        wave = 1.0 + 0.1 * np.sin(2 * math.pi * ts / 1800.0)
        for w, series in enumerate(short):
            for s in series:
                lab = ",".join(x for x in (self.target(w), s.labels) if x)
                head = f"{s.name}{{{lab}}}"
                if s.counter:
                    values = s.value + s.value / 600.0 * elapsed
                    vals = [f"{v:.6g}" for v in values.tolist()]
                elif s.name.endswith("_ratio"):
                    vals = [f"{min(1.0, s.value * x):.6g}" for x in wave.tolist()]
                elif s.value in (0.0, 1.0) or s.name.endswith(("_info", "_bucket")):
                    vals = [f"{s.value:g}"] * len(ts)
                else:
                    vals = [f"{s.value * x:.6g}" for x in wave.tolist()]
                yield head, vals


# --------------------------------------------------------------------------- Prometheus
class Prometheus:
    def __init__(self, binary: str, tsdb: Path, log: Path) -> None:
        self.binary, self.tsdb, self.log = binary, tsdb, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        config = self.tsdb.parent / "prometheus.yml"
        config.write_text("global: {}\n")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={config}", f"--storage.tsdb.path={self.tsdb}",
                 "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}",
                 "--query.max-samples=2000000000", "--query.timeout=10m",
                 "--query.lookback-delta=5m"],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.5)
        raise RuntimeError("prometheus not ready after 300 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def self_metric(self, name: str) -> float:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
        return math.nan

    def settle(self, budget: float) -> tuple[int, bool]:
        """Wait (at most ``budget`` s) until the compactor has run and gone quiet.

        Quiet: no block compacted and the blocks loaded unchanged for 30 s after its first
        trigger (about a minute after the start). Returns the blocks loaded and whether it
        settled; 2 h blocks left uncompacted make a long window slower to read, not larger.
        """
        deadline = time.monotonic() + budget
        last: tuple[float, float] = (-1.0, -1.0)
        quiet = 0
        while budget > 0:
            state = (
                self.self_metric("prometheus_tsdb_blocks_loaded"),
                self.self_metric("prometheus_tsdb_compactions_total"),
            )
            quiet = quiet + 1 if state == last else 0
            last = state
            if self.self_metric("prometheus_tsdb_compactions_triggered_total") >= 1 and quiet >= 6:
                return int(state[0]), True
            if time.monotonic() > deadline:
                break
            time.sleep(5)
        return int(self.self_metric("prometheus_tsdb_blocks_loaded")), False

    def query(self, expr: str, at: float, rng: tuple[int, int] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"query": expr, "stats": "all"}
        if rng is None:
            params["time"] = at
            path = "query"
        else:
            params.update(start=at - rng[0], end=at, step=rng[1])
            path = "query_range"
        data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(f"{self.url}/api/v1/{path}", data=data)
        with urllib.request.urlopen(req, timeout=900) as r:
            doc = json.load(r)
        if doc.get("status") != "success":
            raise RuntimeError(f"query failed: {expr[:200]}: {doc}")
        return dict(doc["data"])


@dataclass
class Cost:
    samples: int
    seconds: float
    series_out: int


def measure(prom: Prometheus, expr: str, repeat: int, rng: tuple[int, int] | None = None) -> Cost:
    times, samples, out = [], 0, 0
    for _ in range(repeat):
        data = prom.query(expr, END, rng)
        stats = data["stats"]
        samples = int(stats["samples"]["totalQueryableSamples"])
        times.append(float(stats["timings"]["evalTotalTime"]))
        out = len(data["result"])
    return Cost(samples, statistics.median(times), out)


# --------------------------------------------------------------------------- backfill of records
Plan = dict[str, tuple[list[tuple[Group, Rule]], int]]


def reads(rules: list[tuple[Group, Rule]], known: set[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, r in rules:
        for name, rng in names_read(r.expr, known).items():
            out[name] = max(out.get(name, 0), rng)
    return out


def backfill_plan(
    sets: list[RuleSet], panels: list[Panel], days: float, short_hours: float
) -> Plan:
    """Records that need a history: name -> (its rules, seconds of history before END)."""
    records: dict[str, list[tuple[Group, Rule]]] = {}
    for s in sets:
        for name, rules in s.records().items():
            records.setdefault(name, []).extend(rules)
    known = set(records)
    need: dict[str, int] = {}
    limit = int(days * 86400)
    for s in sets:
        for g in s.groups:
            for r in g.rules:
                for name, rng in names_read(r.expr, known).items():
                    if rng:
                        need[name] = max(need.get(name, 0), min(limit, rng))
    short = int(short_hours * 3600)
    for p in panels:
        for name, rng in names_read(p.expr, known).items():
            need[name] = max(need.get(name, 0), min(short, p.range_s + rng))
    # what a backfilled record reads must exist over its span, plus its own ranges
    changed = True
    while changed:
        changed = False
        for name in list(need):
            for dep, rng in reads(records[name], known).items():
                span = min(limit, need[name] + rng)
                if need.get(dep, 0) < span:
                    need[dep] = span
                    changed = True
    return {n: (records[n], h) for n, h in need.items()}


def levels(plan: Plan) -> list[list[str]]:
    known = set(plan)
    level: dict[str, int] = {}

    def of(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name in level:
            return level[name]
        if name in seen:
            raise BadInput(f"recording rule {name} reads itself through other records")
        deps = reads(plan[name][0], known)
        level[name] = 1 + max((of(d, seen | {name}) for d in deps), default=-1)
        return level[name]

    for n in plan:
        of(n)
    out: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for n, lv in level.items():
        out[lv].append(n)
    return out


def backfill_records(
    prom: Prometheus, promtool: str, plan: Plan, root: Path,
    tsdb: Path, log: list[str],
) -> None:  # fmt: skip
    for lv, names in enumerate(levels(plan)):
        # one promtool run per (interval, history span): rules of one level are independent
        batches: dict[tuple[int, int], list[Rule]] = {}
        for n in names:
            owners, hist = plan[n]
            for g, r in owners:
                batches.setdefault((g.interval, hist), []).append(r)
        for (interval, hist), rules in sorted(batches.items()):
            rule_file = root / f"backfill-{lv}-{interval}-{hist}.yaml"
            doc = {"groups": [{"name": f"backfill-{lv}", "interval": f"{interval}s", "rules": [
                {"record": r.name, "expr": r.expr, **({"labels": r.labels} if r.labels else {})}
                for r in rules]}]}  # fmt: skip
            rule_file.write_text(yaml.safe_dump(doc, sort_keys=False))
            out = root / f"rules-out-{lv}-{interval}-{hist}"
            t0 = time.perf_counter()
            res = subprocess.run(
                [promtool, "tsdb", "create-blocks-from", "rules", "-q", f"--url={prom.url}",
                 f"--start={END - hist}", f"--end={END}", f"--eval-interval={interval}s",
                 f"--output-dir={out}", str(rule_file)],
                capture_output=True, text=True,
            )  # fmt: skip
            if res.returncode:
                raise RuntimeError(f"promtool rules backfill failed: {res.stderr[-2000:]}")
            moved = 0
            for block in out.iterdir():
                if block.is_dir():
                    shutil.move(str(block), tsdb / block.name)
                    moved += 1
            shutil.rmtree(out, ignore_errors=True)
            log.append(
                f"level {lv}: {len(rules)} record(s) at {interval}s over {duration(hist)}: "
                f"{moved} block(s), {time.perf_counter() - t0:.0f} s"
            )
        prom.stop()
        prom.start()


# --------------------------------------------------------------------------- one fleet size
def run_size(
    args: argparse.Namespace, workers: int, sets: list[RuleSet], objectives: list[Slo],
    panels: list[Panel], promtool: str, prometheus: str, period: str,
) -> dict[str, Any]:  # fmt: skip
    result: dict[str, Any] = {"workers": workers, "sets": {}, "notes": []}
    base = Path(args.tmp) if args.tmp else None
    with tempfile.TemporaryDirectory(prefix="rulecost-", dir=base) as tmp:
        root = Path(tmp)
        tsdb = root / "tsdb"
        tsdb.mkdir()
        hist = History(root, workers, args.days, args.short_hours, objectives, promtool)
        t0 = time.perf_counter()
        hist.build(tsdb)
        result["history"] = {
            "samples": hist.samples,
            "series_full": hist.series_long,
            "series_short": hist.series_short,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(
            f"[{workers} workers] history: {hist.samples:,} samples, {hist.series_long} series over "
            f"{args.days:g} d, {hist.series_short} over the last {args.short_hours:g} h; "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        prom = Prometheus(prometheus, tsdb, root / "prometheus.log")
        prom.start()
        try:
            plan = backfill_plan(sets, panels, args.days, args.short_hours)
            t0 = time.perf_counter()
            backfill_records(prom, promtool, plan, root, tsdb, result["notes"])
            result["records_backfill_seconds"] = round(time.perf_counter() - t0, 1)
            for note in result["notes"]:
                print(f"[{workers} workers] records: {note}", flush=True)
            t0 = time.perf_counter()
            blocks, settled = prom.settle(args.settle)
            result["blocks"], result["compacted"] = blocks, settled
            state = "compacted" if settled else "compaction not finished (or not awaited)"
            print(f"[{workers} workers] {blocks} blocks, {state} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
            for s in sets:
                result["sets"][s.name] = measure_set(prom, s, workers, args.repeat)
                print(f"[{workers} workers] measured {s.name}", flush=True)
            result["accuracy"] = accuracy(prom, sets, objectives, period)
            result["dashboards"] = [
                {"dashboard": p.dashboard, "title": p.title, "range_s": p.range_s,
                 "step": p.step, "instant": p.instant,
                 "samples": measure(prom, p.expr, 1,
                                    None if p.instant else (p.range_s, p.step)).samples}
                for p in panels
            ]  # fmt: skip
        finally:
            prom.stop()
    return result


def measure_set(prom: Prometheus, s: RuleSet, workers: int, repeat: int) -> dict[str, Any]:
    groups = []
    for g in s.groups:
        rules: list[dict[str, Any]] = []
        for r in g.rules:
            c = measure(prom, r.expr, repeat)
            rules.append({"rule": r.name, "samples": c.samples, "seconds": c.seconds,
                          "series": c.series_out})  # fmt: skip
        per_eval = sum(r["samples"] for r in rules)
        secs = sum(r["seconds"] for r in rules)
        per_hour = per_eval * 3600 / g.interval
        groups.append({
            "group": g.name, "interval_s": g.interval, "rules": rules,
            "samples_per_eval": per_eval, "samples_per_hour": per_hour,
            "samples_per_hour_per_worker": per_hour / workers,
            "eval_seconds": secs, "interval_share": secs / g.interval,
        })  # fmt: skip
    return {"groups": groups}


def accuracy(
    prom: Prometheus, sets: list[RuleSet], objectives: list[Slo], period: str
) -> list[dict[str, Any]]:
    rows = []
    for slo in objectives:
        for w in (*LONG_WINDOWS[:-1], period):
            exact = by_model(prom.query(exact_ratio(slo, w), END))
            row: dict[str, Any] = {"slo": slo.kind, "window": w, "exact": exact, "sets": {}}
            for s in sets:
                expr = s.ratio.get(slo.kind, {}).get(w)
                if expr is None:
                    continue
                got = by_model(prom.query(expr, END))
                errs = [abs(got[m] - exact[m]) / exact[m] * 100 for m in exact
                        if m in got and exact[m] > 0]  # fmt: skip
                row["sets"][s.name] = {
                    "values": got,
                    "max_rel_error_pct": max(errs) if errs else None,
                }
            rows.append(row)
    return rows


def by_model(data: dict[str, Any]) -> dict[str, float]:
    out = {}
    for r in data["result"]:
        m = r["metric"].get("model", "")
        out[m] = float(r["value"][1])
    return out


def ours_set(args: argparse.Namespace, objectives: list[Slo], period: str) -> RuleSet:
    groups = load_rules(Path(args.rules), args.default_interval)
    ratio: dict[str, dict[str, str]] = {}
    records = {r.name: r for g in groups for r in g.rules if r.record}
    for slo in objectives:
        ratio[slo.kind] = {}
        for w in (*LONG_WINDOWS[:-1], period):
            name = args.ratio_record.format(window=w)
            if name in records:
                # the record's own expression, narrowed to the SLO by its `slo` label
                ratio[slo.kind][w] = (
                    f"sum by (model) (({records[name].expr}) * on (slo) group_left () "
                    f'label_replace(vector(1), "slo", "{slo.kind}", "", ""))'
                )
    return RuleSet(args.name, groups, ratio)


# --------------------------------------------------------------------------- report
def fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.2e}"


def report(results: list[dict[str, Any]], slo_pattern: str, ours: str) -> str:
    lines = []
    pat = re.compile(slo_pattern)
    for res in results:
        w = res["workers"]
        h = res["history"]
        lines.append("")
        lines.append(
            f"== {w} workers: {h['samples']:,} samples backfilled ({h['series_full']} series over "
            f"the whole history, {h['series_short']} over the short one), {res['blocks']} blocks"
            + ("" if res.get("compacted") else " (not compacted: evaluation times pessimistic)")
        )
        head = (f"{'set':<12} {'group':<38} {'every':>6} {'samples/eval':>13} {'samples/h':>10} "
                f"{'/h/worker':>10} {'eval s':>8} {'of interval':>11}")  # fmt: skip
        lines.append(head)
        lines.append("-" * len(head))
        totals: dict[str, dict[str, float]] = {}
        for name, s in res["sets"].items():
            tot = {"eval": 0.0, "hour": 0.0, "sec": 0.0, "slo_hour": 0.0}
            for g in s["groups"]:
                lines.append(
                    f"{name:<12} {g['group'][:38]:<38} {duration(g['interval_s']):>6} "
                    f"{fmt(g['samples_per_eval']):>13} {fmt(g['samples_per_hour']):>10} "
                    f"{fmt(g['samples_per_hour_per_worker']):>10} {g['eval_seconds']:>8.3f} "
                    f"{g['interval_share'] * 100:>10.2f}%"
                )
                tot["eval"] += g["samples_per_eval"]
                tot["hour"] += g["samples_per_hour"]
                tot["sec"] += g["eval_seconds"]
                if name != ours or pat.search(g["group"]):
                    tot["slo_hour"] += g["samples_per_hour"]
            lines.append(
                f"{name:<12} {'TOTAL':<38} {'':>6} {fmt(tot['eval']):>13} {fmt(tot['hour']):>10} "
                f"{fmt(tot['hour'] / w):>10} {tot['sec']:>8.3f}"
            )
            totals[name] = tot
        lines.append("")
        if ours in totals:
            o = totals[ours]["slo_hour"] / w
            lines.append(f"SLO groups only (/{slo_pattern}/ in ours; all of each anchor), "
                         f"samples read per hour per worker:")  # fmt: skip
            for name, tot in totals.items():
                ratio = "" if name == ours else f"   ours / this = {o / (tot['slo_hour'] / w):.3g}x"
                lines.append(f"  {name:<12} {fmt(tot['slo_hour'] / w):>10}{ratio}")
        lines.append("")
        lines.append("long-window error ratios against the exact ones (increase on raw counters), "
                     "largest relative error over the models:")  # fmt: skip
        for row in res["accuracy"]:
            exact = ", ".join(f"{m}={v:.5f}" for m, v in sorted(row["exact"].items()))
            cells = []
            for name, cell in row["sets"].items():
                e = cell["max_rel_error_pct"]
                cells.append(f"{name} {'n/a' if e is None else f'{e:.2f} %'}")
            lines.append(
                f"  {row['slo']:<12} {row['window']:>4}  exact {exact}; " + "; ".join(cells)
            )
        lines.append("")
        lines.append(
            "dashboards (range queries at their default ranges; samples read per refresh):"
        )
        short = res["history"].get("short_hours")
        per_dash: dict[str, list[dict[str, Any]]] = {}
        for p in res["dashboards"]:
            per_dash.setdefault(p["dashboard"], []).append(p)
        for d, ps in per_dash.items():
            total = sum(p["samples"] for p in ps)
            rng = max(p["range_s"] for p in ps)
            top = max(ps, key=lambda p: p["samples"])
            note = ""
            if short is not None and rng > short * 3600:
                note = f" (history of the non-SLO series: {short:g} h of the {duration(rng)})"
            lines.append(
                f"  {d:<28} {len(ps):>3} queries over {duration(rng):>4}: {fmt(total):>9} samples; "
                f"largest {fmt(top['samples'])} ({top['title'][:40]}){note}"
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- markdown
MARK_BEGIN, MARK_END = "<!-- rule-cost:begin", "<!-- rule-cost:end -->"


def markdown(doc: dict[str, Any], slo_pattern: str, ours: str) -> str:
    """The docs' table of one run (``--json`` of a run): per fleet size, each set's SLO rules
    (samples read per hour per worker, evaluation seconds per round), all of our groups,
    and the long windows' largest error against the exact ratio."""
    pat = re.compile(slo_pattern)
    m = doc["machine"]
    out = [
        f"{MARK_BEGIN} (bench/bench_rule_cost.py --json FILE, then --markdown-from FILE "
        "--markdown-into docs/alerts.md docs/performance.md) -->",
        f"One run of `bench/bench_rule_cost.py` ({doc['days']:g} days at a {doc['step']} s scrape, "
        f"Prometheus 2.42, {m['cpu']} x{m['cpus_allowed']}, load {m['loadavg_at_start'][0]:g} "
        f"at the start, {m['date']}). Samples read are Prometheus' `totalQueryableSamples`; "
        "the SLO rules are our `inferwatch-slo.rules`, `inferwatch-slo-long.rules` and "
        "`inferwatch-slo.alerts`, and every group of each anchor.",
        "",
        "| workers | SLO rules | samples read per hour per worker | ours ÷ this | "
        "evaluation s per hour | largest 1d / 3d / 30d error vs exact |",
        "|---|---|---|---|---|---|",
    ]
    for res in doc["results"]:
        w = res["workers"]
        per: dict[str, tuple[float, float]] = {}
        for name, st in res["sets"].items():
            groups = [g for g in st["groups"] if name != ours or pat.search(g["group"])]
            hour = sum(g["samples_per_hour"] for g in groups)
            secs = sum(g["eval_seconds"] * 3600 / g["interval_s"] for g in groups)
            per[name] = (hour / w, secs)
        for name, (hour, secs) in per.items():
            errs = []
            for win in ("1d", "3d", "30d"):
                cells = [
                    row["sets"][name]["max_rel_error_pct"]
                    for row in res["accuracy"]
                    if row["window"] == win and name in row["sets"]
                ]
                known = [e for e in cells if e is not None]
                errs.append(f"{max(known):.2f} %" if known else "n/a")
            ratio = "" if name == ours else f"{per[ours][0] / hour:.3g}"
            out.append(
                f"| {w} | {name} | {fmt(hour)} | {ratio} | {secs:.1f} | {' / '.join(errs)} |"
            )
    sizes = [res["workers"] for res in doc["results"]]
    out += [
        "",
        "Every group of ours, evaluation seconds per round and their share of the group's "
        "interval, by fleet size (blocks left unmerged by Prometheus' compactor make a "
        "figure pessimistic: the run says how many):",
        "",
        "| group | interval | " + " | ".join(f"{w} workers" for w in sizes) + " |",
        "|---|---|" + "---|" * len(sizes),
    ]
    rows: dict[str, list[str]] = {}
    every: dict[str, str] = {}
    for res in doc["results"]:
        for g in res["sets"][ours]["groups"]:
            every[g["group"]] = duration(g["interval_s"])
            rows.setdefault(g["group"], []).append(
                f"{g['eval_seconds']:.3f} s ({g['interval_share'] * 100:.2f} %)"
            )
    for group, cells in rows.items():
        out.append(f"| `{group}` | {every[group]} | " + " | ".join(cells) + " |")
    out.append(
        "| blocks at measurement | | " + " | ".join(str(r["blocks"]) for r in doc["results"]) + " |"
    )
    out.append(MARK_END)
    return "\n".join(out)


def splice(path: Path, table: str) -> None:
    """Replace the text between the rule-cost markers of ``path`` with ``table``."""
    text = path.read_text()
    start, end = text.find(MARK_BEGIN), text.find(MARK_END)
    if start < 0 or end < start:
        raise BadInput(f"{path}: no {MARK_BEGIN} ... {MARK_END} markers")
    path.write_text(text[:start] + table + text[end + len(MARK_END) :])


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--rules",
        default=str(REPO / "alerts"),
        help="a directory of rule files (*.yaml) or one file; default alerts/",
    )
    ap.add_argument("--name", default="inferwatch", help="the name of --rules' set in the table")
    ap.add_argument("--dashboards", default=str(REPO / "dashboards"))
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--workers", default="4,16,64", help="comma-separated fleet sizes")
    ap.add_argument(
        "--short-hours",
        type=float,
        default=3.0,
        help="history of the series only non-SLO rules read (default 3)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="evaluations of each rule (median)")
    ap.add_argument(
        "--settle",
        type=float,
        default=900.0,
        help="seconds at most to wait for Prometheus' compaction to go quiet (0: none)",
    )
    ap.add_argument(
        "--default-interval",
        type=seconds,
        default=STEP,
        help="interval of a group without one (the global evaluation interval)",
    )
    ap.add_argument("--slo-groups", default="slo", help="regex: our groups counted as SLO rules")
    ap.add_argument(
        "--ratio-record",
        default="model:inferwatch_slo_errors:ratio_rate{window}",
        help="our recorded error ratio, {window} = 1d, 3d, 30d",
    )
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 days, 4 workers, 1 repeat")
    ap.add_argument("--tmp", help="directory for the blocks (default the system's temp)")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument(
        "--markdown-from",
        metavar="FILE",
        help="write the docs' table from a run's --json FILE instead of running (no Prometheus)",
    )
    ap.add_argument(
        "--markdown-into",
        metavar="DOC",
        nargs="+",
        default=[],
        help="with --markdown-from: replace the table between the rule-cost markers of DOC",
    )
    args = ap.parse_args(argv)
    if args.markdown_from:
        try:
            table = markdown(
                json.loads(Path(args.markdown_from).read_text()), args.slo_groups, args.name
            )
            for doc in args.markdown_into:
                splice(Path(doc), table)
        except (OSError, ValueError, KeyError, BadInput) as exc:
            print(f"--markdown-from {args.markdown_from}: {exc}", file=sys.stderr)
            return 2
        if not args.markdown_into:
            print(table)
        return 0
    # a TERM (a time limit) still stops Prometheus and removes the blocks on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.days, args.workers, args.repeat, args.settle = 2.0, "4", 1, 0.0
        args.short_hours = min(args.short_hours, 1.0)
    try:
        sizes = [int(x) for x in args.workers.split(",")]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        print(f"--workers: comma-separated positive integers expected, got {args.workers!r}",
              file=sys.stderr)  # fmt: skip
        return 2
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if not (promtool and prometheus):
        print("needs promtool and prometheus on PATH", file=sys.stderr)
        return 2
    try:
        if not 1 <= args.days <= 400:
            raise BadInput(f"--days: 1 to 400 expected, got {args.days:g}")
        if not 0 < args.short_hours <= args.days * 24:
            raise BadInput(f"--short-hours: 0 < h <= --days x 24 expected, got {args.short_hours}")
        objectives = slos()
        period = duration(load_thresholds().slos.window)
        sets = [
            ours_set(args, objectives, period),
            sloth_set(objectives, period),
            pyrra_set(objectives, period),
        ]
        panels = load_dashboards(Path(args.dashboards)) if args.dashboards else []
    except BadInput as exc:
        print(exc, file=sys.stderr)
        return 2
    m = machine()
    print(machine_line(m))
    version = subprocess.run([prometheus, "--version"], capture_output=True, text=True)
    print(f"prometheus: {version.stdout.splitlines()[0]}")
    print(f"rules: {args.rules}; {args.days:g} d at {STEP} s; non-SLO series {args.short_hours:g} h;"
          f" objectives {', '.join(f'{s.kind} {s.objective} le={s.le}' for s in objectives)};"
          f" period {period}", flush=True)  # fmt: skip
    results = []
    for n in sizes:
        t0 = time.perf_counter()
        res = run_size(args, n, sets, objectives, panels, promtool, prometheus, period)
        res["history"]["short_hours"] = args.short_hours
        res["wall_seconds"] = round(time.perf_counter() - t0, 1)
        results.append(res)
        print(report([res], args.slo_groups, args.name), flush=True)
        print(f"[{n} workers] {res['wall_seconds']:.0f} s in all", flush=True)
        write_json(  # after each size, so a long run keeps what it measured
            Path(args.json) if args.json else None,
            {"machine": m, "rules": args.rules, "days": args.days, "step": STEP,
             "short_hours": args.short_hours, "results": results},
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
