"""Evaluate the committed rules over a scenario's series with ``promtool test rules``.

promtool is Prometheus' own rule manager and PromQL engine in a unit-test harness:
it loads the rule files, stores the input series, evaluates every group at its
interval, and keeps the ``ALERTS`` series the rule manager writes. One test file per
scenario asks, at every evaluation step, for ``ALERTS`` and expects nothing; every
step where an alert is pending or firing fails and promtool prints what it got.
Those "got:" lines are the alert timeline (nothing of PromQL is re-implemented here).
A scenario may add *probes*, other expressions asked for the same way at one step
(the recorded error ratios of the long windows): their "got:" lines are the values
Prometheus would have recorded.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from inferwatch.errors import UsageError
from inferwatch.validate import format_duration

#: a guard against a hung promtool, not a speed limit: a day-long scenario takes minutes
PROMTOOL_TIMEOUT = 1800
#: promtool's rule tests read at most this many samples of a series in one query
#: (Prometheus' promql test engine, MaxSamples); the records of a day or more read one
#: sample a step of their own 2m30s records, so a scenario must have fewer steps
PROMTOOL_MAX_SAMPLES = 10000

_EXPR = re.compile(r'^\s*expr: "([^"]*)", time: (\S+),\s*$')
_SERIES = re.compile(r"\{((?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*)\} ([-+0-9.eEInfNa]+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")

#: (alertname, labels without alertname/alertstate/__name__) of one alert series
AlertKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class Timeline:
    """The state of every alert series at every evaluation step (absent: inactive)."""

    steps: list[float]
    #: key -> {time: "pending" | "firing"}
    states: dict[AlertKey, dict[float, str]]
    #: (probe expression, time) -> [(labels, value)] of what it returned
    probes: dict[tuple[str, float], list[tuple[dict[str, str], float]]] = field(
        default_factory=dict
    )


def promtool_binary() -> str:
    found = shutil.which("promtool")
    if found is None:
        raise UsageError(
            "promtool not found on PATH (Prometheus' rule test tool: apt install prometheus, "
            "or the prometheus release tarball)"
        )
    return found


def _seconds(text: str) -> float:
    if text == "0s":
        return 0.0
    total = 0.0
    for m in _PART.finditer(text):
        total += int(m.group(1)) * _UNIT[m.group(2)]
    return total


def _values(values: list[float | str | None]) -> str:
    """promtool's expanding notation, run-length encoded (``5+0x9``, ``_x4``)."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        v = values[i]
        j = i
        if v is None or v == "stale":
            while j + 1 < len(values) and values[j + 1] == v:
                j += 1
            n = j - i + 1
            parts.append(
                ("_x" + str(n) if n > 1 else "_") if v is None else " ".join(["stale"] * n)
            )
            i = j + 1
            continue
        # a run of one step (a constant when 0): counters at a steady rate, clocks
        step = None
        nxt = values[i + 1] if i + 1 < len(values) else None
        if isinstance(nxt, (int, float)):
            step = round(float(nxt) - float(v), 6)
            while j + 1 < len(values):
                w = values[j + 1]
                if not isinstance(w, (int, float)):
                    break
                if abs(float(w) - (float(v) + step * (j + 1 - i))) > 1e-6 * max(1.0, abs(float(w))):
                    break
                j += 1
        n = j - i
        if n >= 1 and step is not None:
            parts.append(f"{_num(float(v))}{'+' if step >= 0 else '-'}{_num(abs(step))}x{n}")
        else:
            parts.append(_num(float(v)))
        i = j + 1
    return " ".join(parts)


def _num(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def rule_copies(
    rule_files: list[Path], evaluation: float, into: Path, order: list[str] | None = None
) -> list[str]:
    """The rule files as promtool should run them, with each group's interval honoured;
    ``order`` gets the groups' names, recording rules' files first.

    promtool evaluates every group at every step of the test's evaluation interval,
    whatever the group's own ``interval``. A group with a longer interval gets its
    recording rules rewritten to sample and hold
    (:func:`held`): they take a new value only at the steps where Prometheus would
    evaluate the group and keep their last one in between, as a recorded series does
    in Prometheus between two evaluations of its group. Every other group is evaluated
    at the evaluation interval."""
    out = []
    for path in rule_files:
        doc = yaml.safe_load(path.read_text())
        for group in doc.get("groups", []):
            own = _seconds(str(group.get("interval", "0s")))
            if own > evaluation:
                group["rules"] = [held(rule, own, evaluation) for rule in group["rules"]]
            group["interval"] = format_duration(evaluation)
            if order is not None:
                order.append(group["name"])
        target = into / path.name
        target.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(str(target))
    return out


def held(rule: dict[str, Any], interval: float, evaluation: float) -> dict[str, Any]:
    """A recording rule of a group evaluated every ``interval``, for a harness that
    evaluates it every ``evaluation``: its own expression at the first step at or after
    each multiple of ``interval`` (the multiple itself where ``evaluation`` divides
    ``interval``), else its own last sample (one step old). A series its expression
    stops returning at such a step ends there (Prometheus' staleness marker), as in
    Prometheus. Alerting rules are left as they are."""
    if "record" not in rule:
        return rule
    on_step = f"vector(time()) % {_num(interval)} < {_num(evaluation)}"
    off_step = f"vector(time()) % {_num(interval)} >= {_num(evaluation)}"
    return {
        **rule,
        "expr": f"(\n{rule['expr']}\n) and on () ({on_step})\n"
        f"or\n({rule['record']} and on () ({off_step}))",
    }


def evaluate(
    series: dict[str, list[float | str | None]],
    duration: float,
    rule_files: list[Path],
    scrape: float,
    evaluation: float,
    keep: Path | None = None,
    probes: tuple[tuple[str, float], ...] = (),
) -> Timeline:
    """Every alert's state at every evaluation step of ``duration``, as promtool has it,
    and what each probe (a series name, a time) returned. A probe must be a bare name:
    promtool quotes the expression it reports on."""
    binary = promtool_binary()
    steps = [k * evaluation for k in range(int(duration // evaluation) + 1)]
    if len(steps) >= PROMTOOL_MAX_SAMPLES:
        least = format_duration(math.ceil(duration / (PROMTOOL_MAX_SAMPLES - 1)))
        raise UsageError(
            f"a {format_duration(duration)} backtest at a {format_duration(evaluation)} "
            f"evaluation interval has {len(steps)} steps, and promtool reads at most "
            f"{PROMTOOL_MAX_SAMPLES} samples of a series in one query (the long windows' "
            f"records would fail): give the scenario an evaluation_interval of {least} or more"
        )
    with tempfile.TemporaryDirectory(prefix="inferwatch-backtest-") as tmp:
        work = Path(tmp)
        order: list[str] = []
        files = rule_copies(rule_files, evaluation, work, order)
        doc = {
            "rule_files": files,
            "evaluation_interval": format_duration(evaluation),
            # promtool otherwise walks the groups in Go's map order, a different one each
            # run: recorded series first, so a run is repeatable (a live server may see a
            # recorded value one evaluation later: the bound's 2 x intervals cover it)
            "group_eval_order": order,
            "tests": [
                {
                    "interval": format_duration(scrape),
                    "input_series": [
                        {"series": sel, "values": _values(vals)} for sel, vals in series.items()
                    ],
                    "promql_expr_test": [
                        {"expr": "ALERTS", "eval_time": format_duration(t), "exp_samples": []}
                        for t in steps
                    ]
                    + [
                        {"expr": expr, "eval_time": format_duration(t), "exp_samples": []}
                        for expr, t in probes
                    ],
                }
            ],
        }
        test = work / "backtest.test.yaml"
        test.write_text(yaml.safe_dump(doc, sort_keys=False, width=1 << 30))
        if keep is not None:
            keep.write_text(test.read_text())
        try:
            done = subprocess.run(
                [binary, "test", "rules", str(test)],
                capture_output=True,
                text=True,
                timeout=PROMTOOL_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise UsageError(
                f"promtool did not finish a {format_duration(duration)} backtest within "
                f"{PROMTOOL_TIMEOUT} s (a busy machine: fewer --jobs, or a shorter scenario)"
            ) from None
    out = done.stdout + done.stderr
    if done.returncode != 0 and "    expr: " not in out:
        first = next((line.strip() for line in out.splitlines() if line.strip()), "no output")
        raise UsageError(f"promtool test rules failed on the backtest: {first[-300:]}")
    return parse(out, steps)


def parse(output: str, steps: list[float]) -> Timeline:
    """The timeline out of promtool's failure report (and the probes' values)."""
    states: dict[AlertKey, dict[float, str]] = {}
    probes: dict[tuple[str, float], list[tuple[dict[str, str], float]]] = {}
    at: float | None = None
    expr = ""
    for line in output.splitlines():
        m = _EXPR.match(line)
        if m:
            expr, at = m.group(1), _seconds(m.group(2))
            continue
        stripped = line.strip()
        if at is None or not stripped.startswith("got:"):
            continue
        for series in _SERIES.finditer(stripped[4:]):
            labels = dict(_LABEL.findall(series.group(1)))
            if expr != "ALERTS":
                labels.pop("__name__", None)
                probes.setdefault((expr, at), []).append((labels, float(series.group(2))))
                continue
            name = labels.pop("alertname", "")
            state = labels.pop("alertstate", "")
            labels.pop("__name__", None)
            key = (name, tuple(sorted(labels.items())))
            states.setdefault(key, {})[at] = state
    return Timeline(steps, states, probes)
