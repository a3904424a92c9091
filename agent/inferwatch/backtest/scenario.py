"""Scenario files: synthetic agent series and the ground truth that goes with them.

A scenario (YAML, ``scenarios/*.yaml``) names its workers, a list of phases that set
what each worker's engine and GPU do from a moment on (carried over until a later
phase changes them), and its ground truth: the alerts that must fire (with the
moment the condition starts, from the guide's lines), the alerts that may fire
(a consequence the guide agrees with), and by omission that every other alert
stays silent. :func:`synthesize` turns the phases into the agent's ``inferwatch_*``
series, one sample per scrape interval, as Prometheus would have stored them.

Signals of a phase (per worker, or ``all``): ``util`` GPU utilization, ``vram`` card
memory used ratio, ``waiting`` / ``running`` requests, ``kv`` KV-cache usage (null:
not exported), ``rps`` finished requests a second, ``errors`` their error share,
``preempt`` preemptions a second, ``ttft`` / ``tpot`` / ``e2e`` ``{p50, p99}`` in
seconds (a log-normal through both), ``up`` the worker's /metrics answers, ``gpu_up``,
``nvml`` (the agent's NVML collection works), ``agent_up`` (Prometheus reaches the
agent), ``throttle`` (thermal clock event), ``gate`` (the warm-up gate's
deadline gauge, null: no gate), ``warmup`` (the gate's own requests a second, in the
engine's histograms and in the gate's, ``inferwatch_warmup_requests_ttft_seconds``,
with their ``warmup_ttft`` ``{p50, p99}``), ``xid`` (an XID code raised at the phase start),
``restart`` (the process starts again at the phase start). A number may instead be
``{base, wobble, period, noise, diurnal, to}``: a sine of ``wobble`` around ``base``
with ``period``, Gaussian noise of ``noise``, a 24-hour sine of ``diurnal`` (peak
at 14:00), a linear ramp to ``to`` across the phase.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from inferwatch.backtest.truth import BURN_KINDS, PAIRS
from inferwatch.engines import ENGINES, contract, proxy
from inferwatch.engines.base import E2E, TPOT, TTFT
from inferwatch.engines.vllm import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from inferwatch.errors import ConfigError
from inferwatch.pack.names import slo_errors
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.validate import duration_seconds

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"

#: (upper bound, ...) per latency histogram the agent exports
HISTOGRAMS = {
    "ttft": (TTFT, TTFT_BUCKETS),
    "tpot": (TPOT, ITL_BUCKETS),
    "e2e": (E2E, REQUEST_LATENCY_BUCKETS),
}
#: the bounds of the same histograms where the agent's measuring proxy fills them
#: (a worker with ``proxy: true``, e.g. llama.cpp, whose engine exports none)
PROXY_BOUNDS = {"ttft": proxy.TTFT_BUCKETS, "tpot": proxy.TPOT_BUCKETS, "e2e": proxy.E2E_BUCKETS}


def latency_histograms(worker: Worker) -> dict[str, tuple[str, tuple[float, ...]]]:
    """The latency histograms the agent exports for ``worker``: the proxy's (its bounds)
    where it measures, else those of HISTOGRAMS the worker's engine maps (llama.cpp: none)."""
    if worker.proxy:
        return {key: (metric, PROXY_BOUNDS[key]) for key, (metric, _) in HISTOGRAMS.items()}
    engine = ENGINES.get(worker.engine)
    if engine is None:
        return dict(HISTOGRAMS)
    mapped = {signal.target for signal in engine.signals}
    return {key: spec for key, spec in HISTOGRAMS.items() if spec[0] in mapped}


NUMERIC = ("util", "vram", "waiting", "running", "kv", "rps", "errors", "preempt")
FLAGS = ("up", "gpu_up", "nvml", "agent_up", "throttle")
RATIOS = ("util", "vram", "kv", "errors")
DEFAULTS: dict[str, Any] = {
    "util": 0.6,
    "vram": 0.9,
    "waiting": 0,
    "running": 4,
    "kv": 0.3,
    "rps": 2.0,
    "errors": 0.0,
    "preempt": 0.0,
    "ttft": {"p50": 0.3, "p99": 0.9},
    "tpot": {"p50": 0.03, "p99": 0.06},
    "e2e": {"p50": 4.0, "p99": 9.0},
    "up": 1,
    "gpu_up": 1,
    "nvml": 1,
    "agent_up": 1,
    "throttle": 0,
    "gate": None,
    "warmup": 0.0,
    "warmup_ttft": {"p50": 3.0, "p99": 7.0},
}
SIGNALS = frozenset(DEFAULTS) | {"xid", "restart"}
MODIFIERS = frozenset({"base", "wobble", "period", "noise", "diurnal", "to"})
Z99 = 2.3263478740408408  # the standard normal's 0.99 quantile


@dataclass(frozen=True)
class Worker:
    """One worker of a scenario (its ``workers:`` entry): the labels its synthetic
    series carry and how the agent would have seen it."""

    name: str
    model: str
    host: str
    gpus: tuple[int, ...]
    engine: str = "vllm"
    slots: int | None = 20
    #: seconds since the backtest's time 0 the process started (negative: before)
    start: float | None = -3 * 86400.0
    #: the agent places it on its GPUs (inferwatch_worker_gpu_info)
    attributed: bool = True
    mig: bool = False
    #: its latency histograms come from the agent's measuring proxy (PROXY_BOUNDS)
    proxy: bool = False


@dataclass(frozen=True)
class Expect:
    alert: str
    onset: float
    labels: dict[str, str] = field(default_factory=dict)
    #: a burn-rate row's share of bad requests from the onset on: the row is held to
    #: the bound of the pair its ``labels.burn_window`` names (truth.AlertFacts.burn_bound)
    share: float | None = None


@dataclass(frozen=True)
class Allow:
    alert: str
    after: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ratio:
    """A recorded error ratio the rules must reproduce: ``record`` (a window's
    ``model:inferwatch_slo_errors:ratio_rate<W>``) at ``at`` for one model and objective,
    and the exact share of bad requests the raw counters hold over that window."""

    record: str
    window: str
    at: float
    model: str
    slo: str
    exact: float


@dataclass
class Truth:
    expect: list[Expect]
    allow: list[Allow]
    #: the issue defect this scenario fails on today ("issue 29 item 1: ...")
    xfail: str | None = None
    #: long-window error ratios checked against the exact ones (``ratios:``)
    ratios: list[Ratio] = field(default_factory=list)


@dataclass
class Scenario:
    name: str
    description: str
    duration: float
    truth: Truth
    source: str
    #: series selector -> one value (or None: no sample, "stale") per scrape step
    series: dict[str, list[float | str | None]] = field(default_factory=dict)
    #: the scenario's own scrape and evaluation intervals (``scrape_interval``,
    #: ``evaluation_interval``); None: the run's (the CLI's, the deployment's)
    scrape: float | None = None
    evaluation: float | None = None


# --------------------------------------------------------------------------- reading


def _duration(value: object, where: str, key: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        seconds = duration_seconds(text.lstrip("-"))
        if seconds is not None:
            return sign * seconds
    raise ConfigError(where, key, "a duration such as 90s, 15m or -3d", value)


def _mapping(value: object, where: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(where, key, "a mapping", value)
    return value


def _labels(value: object, where: str, key: str) -> dict[str, str]:
    out = _mapping(value if value is not None else {}, where, key)
    return {str(k): str(v) for k, v in out.items()}


def _alert_rows(
    doc: dict[str, Any], section: str, where: str, alerts: frozenset[str]
) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(key, row, alert) of each row of ``expect`` or ``allow``, its alert checked."""
    for i, row in enumerate(doc.get(section) or []):
        key = f"{section}[{i}]"
        row = _mapping(row, where, key)
        name = row.get("alert")
        if name not in alerts:
            raise ConfigError(where, f"{key}.alert", "an alert of the catalogue", name)
        yield key, row, str(name)


def read_truth(doc: dict[str, Any], where: str, alerts: frozenset[str]) -> Truth:
    """The ground truth of a scenario file (``expect``, ``allow``, ``xfail``)."""

    def labels(row: dict[str, Any], key: str) -> dict[str, str]:
        return _labels(row.get("labels"), where, f"{key}.labels")

    def share(row: dict[str, Any], key: str) -> float | None:
        value = row.get("share")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ConfigError(where, f"{key}.share", "a share of bad requests in (0, 1]", value)
        if row.get("alert") not in BURN_KINDS:
            raise ConfigError(where, f"{key}.share", "only on a burn-rate alert's row", value)
        pair = labels(row, key).get("burn_window")
        if pair not in PAIRS:
            raise ConfigError(
                where, f"{key}.labels.burn_window", f"one of {', '.join(PAIRS)} with share", pair
            )
        return float(value)

    expect = [
        Expect(
            name,
            _duration(row.get("onset"), where, f"{key}.onset"),
            labels(row, key),
            share(row, key),
        )
        for key, row, name in _alert_rows(doc, "expect", where, alerts)
    ]
    allow = [
        Allow(name, _duration(row.get("after", 0), where, f"{key}.after"), labels(row, key))
        for key, row, name in _alert_rows(doc, "allow", where, alerts)
    ]
    xfail = doc.get("xfail")
    if xfail is not None and not isinstance(xfail, str):
        raise ConfigError(where, "xfail", "the defect's name as text", xfail)
    return Truth(expect, allow, xfail)


def _workers(doc: dict[str, Any], where: str) -> list[Worker]:
    raw = _mapping(doc.get("workers"), where, "workers")
    if not raw:
        raise ConfigError(where, "workers", "at least one worker")
    out: list[Worker] = []
    for name, spec in raw.items():
        key = f"workers.{name}"
        spec = _mapping(spec if spec is not None else {}, where, key)
        unknown = set(spec) - {
            "model",
            "host",
            "gpus",
            "engine",
            "slots",
            "start",
            "attributed",
            "mig",
            "proxy",
        }
        if unknown:
            raise ConfigError(where, f"{key}.{sorted(unknown)[0]}", "a known worker key")
        gpus = spec.get("gpus", [len(out)])
        if not isinstance(gpus, list) or not all(isinstance(g, int) for g in gpus):
            raise ConfigError(where, f"{key}.gpus", "a list of GPU indexes", gpus)
        slots = spec.get("slots", 20)
        if slots is not None and not isinstance(slots, int):
            raise ConfigError(where, f"{key}.slots", "an integer or null", slots)
        start = spec.get("start", "-3d")
        out.append(
            Worker(
                name=str(name),
                model=str(spec.get("model", "model")),
                host=str(spec.get("host", "node-0")),
                gpus=tuple(gpus),
                engine=str(spec.get("engine", "vllm")),
                slots=slots,
                start=None if start is None else _duration(start, where, f"{key}.start"),
                attributed=bool(spec.get("attributed", True)),
                mig=bool(spec.get("mig", False)),
                proxy=bool(spec.get("proxy", False)),
            )
        )
    return out


def _check_signals(signals: dict[str, Any], where: str, key: str) -> None:
    for name, value in signals.items():
        if name not in SIGNALS:
            raise ConfigError(where, f"{key}.{name}", f"one of {', '.join(sorted(SIGNALS))}")
        if name in ("ttft", "tpot", "e2e", "warmup_ttft"):
            spec = _mapping(value, where, f"{key}.{name}")
            p50, p99 = spec.get("p50"), spec.get("p99")
            if not all(isinstance(v, (int, float)) and v > 0 for v in (p50, p99)) or p99 < p50:  # type: ignore[operator]
                raise ConfigError(where, f"{key}.{name}", "{p50, p99}: seconds, p99 >= p50 > 0")
        elif isinstance(value, dict):
            bad = set(value) - MODIFIERS
            if bad or "base" not in value:
                raise ConfigError(
                    where, f"{key}.{name}", "a number or {base, wobble, period, noise, diurnal, to}"
                )
            for mod in ("period",):
                if mod in value:
                    value[mod] = _duration(value[mod], where, f"{key}.{name}.{mod}")
        elif value is not None and not isinstance(value, (int, float)):
            raise ConfigError(where, f"{key}.{name}", "a number, a mapping or null", value)


def _own_interval(doc: dict[str, Any], where: str, key: str) -> float | None:
    if doc.get(key) is None:
        return None
    seconds = _duration(doc[key], where, key)
    if seconds <= 0:
        raise ConfigError(where, key, "a positive duration such as 1m", doc[key])
    return seconds


def load_scenario(path: Path, alerts: frozenset[str], scrape: float) -> Scenario:
    """Read one scenario file; a malformed one raises :class:`ConfigError`. Its series
    are at its own ``scrape_interval`` where it sets one, else at ``scrape``."""
    where = str(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(
            where, "(file)", f"a readable YAML scenario ({type(exc).__name__})"
        ) from None
    doc = _mapping(doc, where, "(top level)")
    if doc.get("kind") != "inferwatch-scenario":
        raise ConfigError(where, "kind", "inferwatch-scenario", doc.get("kind"))
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(where, "name", "the scenario's name", name)
    duration = _duration(doc.get("duration"), where, "duration")
    if duration <= 0:
        raise ConfigError(where, "duration", "a positive duration", doc.get("duration"))
    workers = _workers(doc, where)
    phases_raw = doc.get("phases")
    if not isinstance(phases_raw, list) or not phases_raw:
        raise ConfigError(where, "phases", "a list of phases, each with `at`")
    phases: list[tuple[float, dict[str, dict[str, Any]]]] = []
    names = {w.name for w in workers} | {"all"}
    for i, phase in enumerate(phases_raw):
        phase = _mapping(phase, where, f"phases[{i}]")
        at = _duration(phase.get("at"), where, f"phases[{i}].at")
        per: dict[str, dict[str, Any]] = {}
        for who, signals in phase.items():
            if who in ("at", "note"):
                continue
            if who not in names:
                raise ConfigError(where, f"phases[{i}].{who}", "a worker's name or `all`")
            signals = _mapping(signals, where, f"phases[{i}].{who}")
            _check_signals(signals, where, f"phases[{i}].{who}")
            per[str(who)] = signals
        phases.append((at, per))
    if any(b[0] < a[0] for a, b in itertools.pairwise(phases)):
        raise ConfigError(where, "phases", "phases in time order")
    truth = read_truth(doc, where, alerts)
    own_scrape = _own_interval(doc, where, "scrape_interval")
    own_evaluation = _own_interval(doc, where, "evaluation_interval")
    scrape = own_scrape or scrape
    series = synthesize(name, workers, phases, duration, scrape)
    truth.ratios = ratios(doc, where, series, workers, duration, scrape)
    return Scenario(
        name,
        str(doc.get("description", "")),
        duration,
        truth,
        where,
        series,
        own_scrape,
        own_evaluation,
    )


def ratios(
    doc: dict[str, Any],
    where: str,
    series: dict[str, list[float | str | None]],
    workers: list[Worker],
    duration: float,
    scrape: float,
) -> list[Ratio]:
    """The ``ratios:`` a scenario asks for (windows such as ``3d``, ``30d``): at the
    scenario's end, every model's and objective's exact share of bad requests over that
    window, from the synthesized raw counters (the thresholds' ``slos.default``)."""
    wanted = doc.get("ratios") or []
    if not isinstance(wanted, list):
        raise ConfigError(where, "ratios", "a list of windows such as [3d, 30d]", wanted)
    out = []
    for i, window in enumerate(wanted):
        seconds = _duration(window, where, f"ratios[{i}]")
        if seconds <= 0 or seconds > duration:
            raise ConfigError(where, f"ratios[{i}]", "a window within the scenario", window)
        for model in sorted({w.model for w in workers}):
            for kind, exact in exact_error_ratios(
                series, model, duration - seconds, duration, scrape
            ):
                out.append(
                    Ratio(slo_errors(str(window)), str(window), duration, model, kind, exact)
                )
    return out


def _counter(series: dict[str, list[float | str | None]], selector: str, k: int) -> float:
    """A synthesized counter at step ``k`` (its last value before a gap), 0 where absent."""
    values = series.get(selector)
    if values is None:
        return 0.0
    for v in reversed(values[: k + 1]):
        if isinstance(v, (int, float)):
            return float(v)
    return 0.0


def exact_error_ratios(
    series: dict[str, list[float | str | None]],
    model: str,
    start: float,
    end: float,
    scrape: float,
) -> list[tuple[str, float]]:
    """(objective, share of bad requests) of ``model`` over (start, end], straight from
    the raw counters' increases: a latency request is good in the bucket at the
    objective's threshold, less the warm-up gate's own; an availability one is bad when
    it failed (``reason="error"``). Objectives with no request in the window are left out."""
    entry = next(e for e in load_thresholds().slos.entries if e.model is None)
    a, b = round(start / scrape), round(end / scrape)

    def increase(name: str, match: dict[str, str]) -> float:
        total = 0.0
        for sel in series:
            if not sel.startswith(name + "{"):
                continue
            labels = dict(pair.split("=", 1) for pair in sel[len(name) + 1 : -1].split(","))
            if all(labels.get(k) == f'"{v}"' for k, v in match.items()):
                total += _counter(series, sel, b) - _counter(series, sel, a)
        return total

    out = []
    for o in entry.objectives:
        if o.le is not None:
            metric = f"{HISTOGRAMS[o.kind][0]}_bucket"
            le = repr(float(o.le))
            good = increase(metric, {"model": model, "le": le})
            total = increase(metric, {"model": model, "le": "+Inf"})
            if o.kind == "ttft":
                warm = {"le": le}, {"le": "+Inf"}
                workers = {
                    sel.split('worker="', 1)[1].split('"', 1)[0]
                    for sel in series
                    if sel.startswith(contract.WORKER_INFO.name + "{") and f'model="{model}"' in sel
                }
                for w in workers:
                    good -= increase(
                        contract.WARMUP_REQUESTS_TTFT_SECONDS.name + "_bucket",
                        {**warm[0], "worker": w},
                    )
                    total -= increase(
                        contract.WARMUP_REQUESTS_TTFT_SECONDS.name + "_bucket",
                        {**warm[1], "worker": w},
                    )
            bad = total - good
        else:
            bad = increase(contract.REQUESTS_FINISHED.name, {"model": model, "reason": "error"})
            total = increase(contract.REQUESTS_FINISHED.name, {"model": model})
        if total > 0:
            out.append((o.kind, bad / total))
    return out


# --------------------------------------------------------------------------- series


@functools.lru_cache(maxsize=4096)
def _lognormal_cdf(x: float, p50: float, p99: float) -> float:
    if math.isinf(x):
        return 1.0
    sigma = math.log(p99 / p50) / Z99
    if sigma <= 0:
        return 1.0 if x >= p50 else 0.0
    return 0.5 * (1.0 + math.erf(math.log(x / p50) / (sigma * math.sqrt(2.0))))


def _value(
    spec: Any, t: float, phase_start: float, phase_end: float, rng: random.Random
) -> float | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        return float(spec)
    v = float(spec["base"])
    if "to" in spec and phase_end > phase_start:
        v += (float(spec["to"]) - v) * min(1.0, (t - phase_start) / (phase_end - phase_start))
    if spec.get("wobble"):
        period = float(spec.get("period", 600.0))
        v += float(spec["wobble"]) * math.sin(2 * math.pi * t / period)
    if spec.get("diurnal"):
        v += float(spec["diurnal"]) * math.sin(2 * math.pi * ((t / 86400.0) - 8 / 24))
    if spec.get("noise"):
        v += rng.gauss(0.0, float(spec["noise"]))
    return v


def _signal(
    s: dict[str, Any], t: float, start: float, end: float, rng: random.Random, key: str
) -> float | None:
    """A signal's value at ``t``, ratios held to [0, 1], counts to >= 0."""
    v = _value(s[key], t, start, end, rng)
    if v is None:
        return None
    if key in RATIOS:
        return min(1.0, max(0.0, v))
    return max(0.0, v)


def _selector(name: str, labels: dict[str, str]) -> str:
    return _selector_of(name, tuple(labels.items()))


@functools.lru_cache(maxsize=65536)
def _selector_of(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def synthesize(
    name: str,
    workers: list[Worker],
    phases: list[tuple[float, dict[str, dict[str, Any]]]],
    duration: float,
    scrape: float,
) -> dict[str, list[float | str | None]]:
    """The agent's series for the phases, one value per scrape from time 0 to ``duration``."""
    rng = random.Random(zlib.crc32(name.encode()))
    steps = int(duration // scrape) + 1
    out: dict[str, list[float | str | None]] = {}

    def put(sel: str, k: int, value: float | str | None) -> None:
        # not setdefault: that builds a list of every step on every call (a month: 43,200)
        values = out.get(sel)
        if values is None:
            values = out[sel] = [None] * steps
        values[k] = value

    counters: dict[str, float] = {}
    last_collect: dict[str, float] = {}
    xid_at: dict[tuple[str, int, str], float] = {}
    starts: dict[str, float | None] = {w.name: w.start for w in workers}
    applied_restarts: set[tuple[str, int]] = set()
    hosts = sorted({w.host for w in workers})
    for k in range(steps):
        t = k * scrape
        idx = max(i for i, (at, _) in enumerate(phases) if at <= t) if phases[0][0] <= t else -1
        start_t = phases[idx][0] if idx >= 0 else 0.0
        end_t = phases[idx + 1][0] if idx + 1 < len(phases) else duration
        state: dict[str, dict[str, Any]] = {}
        for w in workers:
            merged = dict(DEFAULTS)
            for _, per in phases[: idx + 1]:
                merged.update(per.get("all", {}))
                merged.update(per.get(w.name, {}))
            state[w.name] = merged
            for i, (at, per) in enumerate(phases[: idx + 1]):
                signals = {**per.get("all", {}), **per.get(w.name, {})}
                if signals.get("restart") and (w.name, i) not in applied_restarts:
                    applied_restarts.add((w.name, i))
                    starts[w.name] = at
                if signals.get("xid") is not None:
                    for g in w.gpus:
                        xid_at.setdefault((w.host, g, str(signals["xid"])), at)
        for host in hosts:
            instance = f"{host}:10127"
            base = {"job": "inferwatch", "instance": instance}
            on_host = [w for w in workers if w.host == host]
            agent_up = all(float(state[w.name]["agent_up"]) >= 1 for w in on_host)
            put(_selector("up", base), k, 1.0 if agent_up else 0.0)
            nvml_ok = all(float(state[w.name]["nvml"]) >= 1 for w in on_host)
            coll = {**base, "collector": "nvml"}
            if nvml_ok:
                last_collect[host] = t
            else:
                counters[host] = counters.get(host, 0.0) + 1.0
            if agent_up:
                if host in last_collect:
                    put(
                        _selector(contract.LAST_COLLECT_TIMESTAMP_SECONDS.name, coll),
                        k,
                        last_collect[host],
                    )
                put(_selector(contract.COLLECT_ERRORS.name, coll), k, counters.get(host, 0.0))
        for w in workers:
            s = state[w.name]
            instance = f"{w.host}:10127"
            base = {"job": "inferwatch", "instance": instance}
            eng = {**base, "worker": w.name, "model": w.model, "engine": w.engine}
            agent_up = float(s["agent_up"]) >= 1
            if not agent_up:
                continue

            val = functools.partial(_signal, s, t, start_t, end_t, rng)

            up = float(s["up"]) >= 1
            put(
                _selector(contract.TARGET_UP.name, {**base, "worker": w.name}),
                k,
                1.0 if up else 0.0,
            )
            # the agent names every worker it watches, up or not (the SLO rules read its model)
            put(_selector(contract.WORKER_INFO.name, eng), k, 1.0)
            if starts[w.name] is not None:
                put(_selector(contract.WORKER_START_TIME_SECONDS.name, eng), k, starts[w.name])
            if s["gate"] is not None:
                put(
                    _selector(contract.WARMUP_DEADLINE_EXCEEDED.name, {**base, "worker": w.name}),
                    k,
                    float(s["gate"]),
                )
                # the gate's histogram exists from its start, at zero before a warm-up
                warm = (val("warmup") or 0.0) * scrape if up else 0.0
                dist = s["warmup_ttft"]
                for le in (*TTFT_BUCKETS, math.inf):
                    frac = _lognormal_cdf(le, float(dist["p50"]), float(dist["p99"]))
                    sel = _selector(
                        contract.WARMUP_REQUESTS_TTFT_SECONDS.name + "_bucket",
                        {
                            **base,
                            "worker": w.name,
                            "le": "+Inf" if math.isinf(le) else repr(float(le)),
                        },
                    )
                    counters[sel] = counters.get(sel, 0.0) + warm * frac
                    put(sel, k, round(counters[sel], 6))
            gpu_up = float(s["gpu_up"]) >= 1
            for g in w.gpus:
                uuid = f"MIG-{w.host}-{g}" if w.mig else f"GPU-{w.host}-{g}"
                gpu = {**base, "gpu": str(g), "uuid": uuid}
                put(_selector(contract.GPU_UP.name, gpu), k, 1.0 if gpu_up else 0.0)
                if nvml_ok_for(state, workers, w.host) and gpu_up:
                    put(_selector(contract.GPU_UTILIZATION_RATIO.name, gpu), k, val("util"))
                    put(_selector(contract.GPU_MEMORY_USED_RATIO.name, gpu), k, val("vram"))
                    put(
                        _selector(
                            contract.GPU_CLOCK_EVENT_ACTIVE.name, {**gpu, "reason": "hw_thermal"}
                        ),
                        k,
                        float(s["throttle"]),
                    )
                if w.attributed:
                    put(
                        _selector(
                            contract.WORKER_GPU_INFO.name,
                            {**base, "worker": w.name, "gpu": str(g), "uuid": uuid},
                        ),
                        k,
                        1.0,
                    )
                for (h, gi, code), at in xid_at.items():
                    if h == w.host and gi == g:
                        put(
                            _selector(
                                contract.GPU_XID_LAST_TIMESTAMP_SECONDS.name, {**gpu, "xid": code}
                            ),
                            k,
                            at,
                        )
            if not up:
                continue
            put(_selector(contract.QUEUE_DEPTH.name, eng), k, val("waiting"))
            put(_selector(contract.REQUESTS_RUNNING.name, eng), k, val("running"))
            kv = val("kv")
            if kv is not None:
                put(_selector(contract.KV_CACHE_USAGE_RATIO.name, eng), k, kv)
            if w.slots is not None:
                put(_selector(contract.MAX_NUM_SEQS.name, eng), k, float(w.slots))
            done = (val("rps") or 0.0) * scrape
            bad = done * (val("errors") or 0.0)
            for reason, n in (("length", done - bad), ("error", bad)):
                sel = _selector(contract.REQUESTS_FINISHED.name, {**eng, "reason": reason})
                counters[sel] = counters.get(sel, 0.0) + n
                put(sel, k, round(counters[sel], 6))
            sel = _selector(contract.PREEMPTIONS.name, eng)
            counters[sel] = counters.get(sel, 0.0) + (val("preempt") or 0.0) * scrape
            put(sel, k, round(counters[sel], 6))
            # the gate's warm-up requests (max_tokens 1): in the engine's TTFT histogram too
            warm = (val("warmup") or 0.0) * scrape if s["gate"] is not None else 0.0
            wdist = s["warmup_ttft"]
            for key, (metric, bounds) in latency_histograms(w).items():
                dist = s[key]
                # one token per TPOT observation: a request's output tokens, about 100
                n = done * (100.0 if key == "tpot" else 1.0)
                for le in (*bounds, math.inf):
                    add = n * _lognormal_cdf(le, float(dist["p50"]), float(dist["p99"]))
                    if key == "ttft" and warm:
                        add += warm * _lognormal_cdf(le, float(wdist["p50"]), float(wdist["p99"]))
                    sel = _selector(
                        f"{metric}_bucket",
                        {**eng, "le": "+Inf" if math.isinf(le) else repr(float(le))},
                    )
                    counters[sel] = counters.get(sel, 0.0) + add
                    put(sel, k, round(counters[sel], 6))
                extra = (warm, warm * float(wdist["p50"])) if key == "ttft" else (0.0, 0.0)
                for suffix, add in (
                    ("_count", n + extra[0]),
                    ("_sum", n * float(dist["p50"]) + extra[1]),
                ):
                    sel = _selector(metric + suffix, eng)
                    counters[sel] = counters.get(sel, 0.0) + add
                    put(sel, k, round(counters[sel], 6))
    # a series missing from a scrape that succeeded before gets Prometheus' stale marker
    for values in out.values():
        for k in range(1, steps):
            if values[k] is None and values[k - 1] not in (None, "stale"):
                values[k] = "stale"
    return out


def nvml_ok_for(state: dict[str, dict[str, Any]], workers: list[Worker], host: str) -> bool:
    return all(float(state[w.name]["nvml"]) >= 1 for w in workers if w.host == host)


def scenario_files(directory: Path = SCENARIO_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))
