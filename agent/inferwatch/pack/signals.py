"""The derived signals the loops read, each declared once: its PromQL with holes, and
its one evaluator over the agent's scrapes.

A :class:`Signal` is a function over one contract family in a window (``rate``,
``increase``, ``avg_over_time``, ``max_over_time``, ``deriv``, ...). Its PromQL is
a template with three holes, filled by whoever reads it::

    $fn($family$selector[$window])            one value per series
    $agg by ($by) ($fn($family$selector[$window]))   grouped

``selector`` is a complete selector (``{job="inferwatch"}``, or ``""``) to which
the signal's own matchers are added; ``window`` a PromQL duration (``5m``,
``1d``); ``by`` the grouping labels (a histogram's buckets keep ``le`` too: last,
unless ``by`` names it where the caller wants it, as the SLO rules' ``by (le, ...)``).
The recording rules fill them with the pack's selector and ``pack.rate_window``,
the weekly report with ``1d`` and no selector, ``inferwatch advise`` with its
``--selector`` and the range it reads, so each writes the same signal the same
way (the way Sloth declares an SLI once with a window hole and renders it per
window).

:meth:`Signal.evaluate` answers the same question from the agent's own
expositions: the scrapes of one window, oldest first, the first taken at the
window's start and the last at its end (two are enough). Over the samples a
range selector holds, it returns what Prometheus does: ``rate`` is the increase
(counter resets counted from zero) over the time between the first and last
scrape, which is PromQL's value when they span the window; a mean is the mean of
the scraped values; ``deriv`` the least-squares slope; a latency quantile is
``histogram_quantile`` (``inferwatch.stats``) of the buckets' increase.
``tests/unit/test_signals.py`` holds each evaluator and its PromQL to the same
answer on the same samples, in a real Prometheus.

Besides the per-family signals: :data:`BATCH_CAPACITY` (what a worker can batch
now, read by the queue loop, the autoscaling rules and the report), and
:func:`quantile` (a latency quantile over a bucket signal).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from string import Template

from inferwatch.engines import contract
from inferwatch.pack import loops as L
from inferwatch.pack.fmt import num
from inferwatch.pack.thresholds import Thresholds, format_duration
from inferwatch.stats import histogram_quantile, least_squares_slope

#: one sample of an exposition: (sample name, labels, value)
Sample = tuple[str, Mapping[str, str], float]
#: a group's label values, in the order of the ``by`` labels
Key = tuple[str, ...]


@dataclass(frozen=True)
class Scrape:
    """One parsed exposition of the agent and when it was taken (unix seconds)."""

    time: float
    samples: Sequence[Sample]


Points = Sequence[tuple[float, float]]


def _increase(points: Points) -> float | None:
    if len(points) < 2:
        return None
    total = 0.0
    for (_, before), (_, after) in itertools.pairwise(points):
        # a counter that went down restarted from zero: what it holds now is new
        total += after - before if after >= before else after
    return total


def _rate(points: Points) -> float | None:
    added = _increase(points)
    span = points[-1][0] - points[0][0] if points else 0.0
    return added / span if added is not None and span > 0 else None


def _changes(points: Points) -> float | None:
    if not points:
        return None
    return float(sum(1 for (_, a), (_, b) in itertools.pairwise(points) if a != b))


#: a range function -> its one evaluator over one series' (time, value) points
EVALUATORS: dict[str, Callable[[Points], float | None]] = {
    "rate": _rate,
    "increase": _increase,
    "avg_over_time": lambda p: sum(v for _, v in p) / len(p) if p else None,
    "max_over_time": lambda p: max(v for _, v in p) if p else None,
    "min_over_time": lambda p: min(v for _, v in p) if p else None,
    "last_over_time": lambda p: p[-1][1] if p else None,
    "changes": _changes,
    "deriv": least_squares_slope,
    # an instant selector: the value at the window's end
    "": lambda p: p[-1][1] if p else None,
}

#: how a group's series combine, in PromQL and here
AGGREGATIONS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "max": max,
    "min": min,
    "avg": lambda vs: sum(vs) / len(vs),
    "group": lambda vs: 1.0,
}

_MATCHER = re.compile(r'(\w+)(!?=)"((?:[^"\\]|\\.)*)"')


def labels_of(by: str) -> tuple[str, ...]:
    """``"job, instance, worker"`` -> ``("job", "instance", "worker")``."""
    return tuple(part.strip() for part in by.split(",") if part.strip())


def with_matchers(selector: str, matchers: Sequence[str]) -> str:
    """A complete selector (``{...}`` or ``""``) with ``matchers`` added at its end."""
    if not matchers:
        return selector
    if not selector:
        return "{" + ",".join(matchers) + "}"
    return selector[:-1] + "," + ",".join(matchers) + "}"


@dataclass(frozen=True)
class Signal:
    """One derived signal: ``fn`` of the contract family ``family`` over a window.

    ``sample`` names the series read (a histogram's ``_bucket``), ``matchers`` the
    signal's own label matchers (``reason="error"``), ``agg`` how a group's series
    combine unless the reader says otherwise; ``bucketed`` keeps ``le`` in a group.
    """

    name: str
    fn: str
    family: contract.Family
    agg: str = "sum"
    matchers: tuple[str, ...] = ()
    bucketed: bool = False
    sample: str = field(default="")

    def __post_init__(self) -> None:
        if self.fn not in EVALUATORS:
            raise ValueError(f"signal {self.name}: no evaluator for {self.fn}")
        if not self.sample:
            suffix = "_bucket" if self.bucketed else ""
            object.__setattr__(self, "sample", self.family.name + suffix)

    @property
    def promql(self) -> str:
        """The per-series template: holes ``$selector`` and ``$window`` (none for an
        instant signal, ``fn`` empty)."""
        if not self.fn:
            return f"{self.sample}$selector"
        return f"{self.fn}({self.sample}$selector[$window])"

    def render(
        self,
        *,
        selector: str = "",
        window: str = "",
        by: str | None = None,
        agg: str | None = None,
    ) -> str:
        """The PromQL: per series without ``by``; ``agg by (by)`` around it. A histogram's
        buckets keep ``le``: last, unless ``by`` names it where the caller wants it."""
        inner = Template(self.promql).substitute(
            selector=with_matchers(selector, self.matchers), window=window
        )
        if by is None:
            return inner
        return f"{agg or self.agg} by ({', '.join(self.group(by))}) ({inner})"

    def group(self, by: str) -> tuple[str, ...]:
        """The labels a group of ``by`` keeps: ``by``'s, then ``le`` for a histogram's
        buckets unless ``by`` names it already."""
        labels = labels_of(by)
        return (*labels, "le") if self.bucketed and "le" not in labels else labels

    def series(self, scrapes: Sequence[Scrape]) -> Mapping[tuple[tuple[str, str], ...], Points]:
        """Each series' (time, value) points in ``scrapes``, matched like the selector."""
        wanted = [_MATCHER.fullmatch(m) for m in self.matchers]
        out: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        for scrape in scrapes:
            for name, labels, value in scrape.samples:
                if name != self.sample or math.isnan(value):
                    continue
                if any(
                    m is None or (labels.get(m[1], "") == m[3]) != (m[2] == "=") for m in wanted
                ):
                    continue
                out.setdefault(tuple(sorted(labels.items())), []).append((scrape.time, value))
        return out

    def evaluate(
        self, scrapes: Sequence[Scrape], by: str, agg: str | None = None
    ) -> dict[Key, float]:
        """The signal per group of the ``by`` labels (then ``le`` for a histogram's
        buckets), from the agent's scrapes of one window."""
        return _grouped(self.per_series(scrapes), self.group(by), agg or self.agg)

    def per_series(self, scrapes: Sequence[Scrape]) -> Iterable[tuple[Mapping[str, str], float]]:
        """The signal of each series (its labels, its value), ungrouped."""
        evaluate = EVALUATORS[self.fn]
        # an instant signal reads the last scrape only: a series gone from it is gone
        for labels, points in self.series(scrapes if self.fn else scrapes[-1:]).items():
            value = evaluate(points)
            if value is not None:
                yield dict(labels), value


def _grouped(
    values: Iterable[tuple[Mapping[str, str], float]], keys: Sequence[str], agg: str
) -> dict[Key, float]:
    groups: dict[Key, list[float]] = {}
    for labels, value in values:
        groups.setdefault(tuple(labels.get(k, "") for k in keys), []).append(value)
    combine = AGGREGATIONS[agg]
    return {key: combine(vs) for key, vs in groups.items()}


# --------------------------------------------------------------------------- latency


def bucket_rate(family: contract.Family) -> Signal:
    """Per-bucket rate of the histogram ``family`` (the loops' latency quantiles)."""
    return Signal(f"{family.name}:bucket_rate", "rate", family, bucketed=True)


def bucket_increase(family: contract.Family) -> Signal:
    """Per-bucket increase of the histogram ``family`` (the report's, advise's)."""
    return Signal(f"{family.name}:bucket_increase", "increase", family, bucketed=True)


def quantile(q: float, buckets: str) -> str:
    """PromQL: the ``q`` quantile of grouped bucket rates or increases ``buckets``."""
    return f"histogram_quantile({q:g}, {buckets})"


def evaluate_quantile(
    q: float, buckets: Signal, scrapes: Sequence[Scrape], by: str
) -> dict[Key, float]:
    """The ``q`` quantile per group of ``by`` (:func:`quantile` over ``buckets``); a
    group with no observation in the window has none (PromQL's NaN)."""
    at = buckets.group(by).index("le")
    per: dict[Key, list[tuple[float, float]]] = {}
    for key, value in buckets.evaluate(scrapes, by, "sum").items():
        per.setdefault(key[:at] + key[at + 1 :], []).append((float(key[at]), value))
    out = {}
    for key, pairs in per.items():
        value = histogram_quantile(q, pairs)
        if not math.isnan(value):
            out[key] = value
    return out


LATENCY = (contract.TTFT_SECONDS, contract.TPOT_SECONDS, contract.E2E_LATENCY_SECONDS)
#: every histogram whose buckets the pack reads (rules, dashboards, report, advise)
HISTOGRAMS = (
    *LATENCY,
    contract.QUEUE_TIME_SECONDS,
    contract.PREFILL_TIME_SECONDS,
    contract.DECODE_TIME_SECONDS,
    contract.PROMPT_LENGTH_TOKENS,
    contract.GENERATION_LENGTH_TOKENS,
    contract.PROXY_TTFT_SECONDS,
    contract.WARMUP_REQUESTS_TTFT_SECONDS,
)


# --------------------------------------------------------------------------- rates

REQUEST_RATE = Signal("request_rate", "rate", contract.REQUESTS_FINISHED)
#: requests that did not fail: the availability SLI's good events
SERVED_RATE = Signal(
    "served_rate", "rate", contract.REQUESTS_FINISHED, matchers=('reason!="error"',)
)
ERROR_RATE = Signal("error_rate", "rate", contract.REQUESTS_FINISHED, matchers=('reason="error"',))
REJECT_RATE = Signal("reject_rate", "rate", contract.REQUESTS_REJECTED)
PROMPT_TOKEN_RATE = Signal("prompt_token_rate", "rate", contract.PROMPT_TOKENS)
GENERATION_TOKEN_RATE = Signal("generation_token_rate", "rate", contract.GENERATION_TOKENS)
PREEMPTION_RATE = Signal("preemption_rate", "rate", contract.PREEMPTIONS)
#: watts per GPU, from NVML's energy counter
GPU_POWER = Signal("gpu_power", "rate", contract.GPU_ENERGY_JOULES, agg="max")
#: CPU seconds per second of a worker's process tree (1 = one core)
WORKER_CPU = Signal("worker_cpu", "rate", contract.WORKER_CPU_SECONDS)
#: failed scrapes of an engine's /metrics, and the agent's own collectors' errors
SCRAPE_ERROR_RATE = Signal("scrape_error_rate", "rate", contract.TARGET_SCRAPE_ERRORS)
COLLECT_ERROR_RATE = Signal("collect_error_rate", "rate", contract.COLLECT_ERRORS)

#: the same counters added up over a window (the report's days, advise's range)
REQUESTS = Signal("requests", "increase", contract.REQUESTS_FINISHED)
ERRORS = Signal("errors", "increase", contract.REQUESTS_FINISHED, matchers=('reason="error"',))
REJECTED = Signal("rejected", "increase", contract.REQUESTS_REJECTED)
PROMPT_TOKENS = Signal("prompt_tokens", "increase", contract.PROMPT_TOKENS)
GENERATION_TOKENS = Signal("generation_tokens", "increase", contract.GENERATION_TOKENS)
PREEMPTIONS = Signal("preemptions", "increase", contract.PREEMPTIONS)
XID_ERRORS = Signal("xid_errors", "increase", contract.GPU_XID_ERRORS)
ECC_ERRORS = Signal("ecc_errors", "increase", contract.GPU_ECC_ERRORS)
#: the warm-up gate's completed warm-ups and failed warm-up requests
SCRAPE_ERRORS = Signal("scrape_errors", "increase", contract.TARGET_SCRAPE_ERRORS)
COLLECT_ERRORS = Signal("collect_errors", "increase", contract.COLLECT_ERRORS)
WARMUPS = Signal("warmups", "increase", contract.WARMUPS)
WARMUP_FAILURES = Signal("warmup_failures", "increase", contract.WARMUP_FAILURES)

# --------------------------------------------------------------------------- gauges

#: the gauges now (at the window's end)
QUEUE = Signal("queue", "", contract.QUEUE_DEPTH, agg="max")
RUNNING = Signal("running", "", contract.REQUESTS_RUNNING, agg="max")
BATCH_LIMIT = Signal("batch_limit", "", contract.MAX_NUM_SEQS, agg="max")
KV_USAGE = Signal("kv_usage", "", contract.KV_CACHE_USAGE_RATIO, agg="max")
GPU_UTILIZATION = Signal("gpu_utilization", "", contract.GPU_UTILIZATION_RATIO, agg="max")
GPU_MEMORY = Signal("gpu_memory", "", contract.GPU_MEMORY_USED_RATIO, agg="max")

#: over the window

QUEUE_MEAN = Signal("queue_mean", "avg_over_time", contract.QUEUE_DEPTH, agg="max")
RUNNING_MEAN = Signal("running_mean", "avg_over_time", contract.REQUESTS_RUNNING, agg="max")
#: least-squares slope of the queue depth (requests per second)
QUEUE_SLOPE = Signal("queue_slope", "deriv", contract.QUEUE_DEPTH, agg="max")
QUEUE_PEAK = Signal("queue_peak", "max_over_time", contract.QUEUE_DEPTH, agg="max")
RUNNING_PEAK = Signal("running_peak", "max_over_time", contract.REQUESTS_RUNNING, agg="max")
MAX_NUM_SEQS = Signal("max_num_seqs", "max_over_time", contract.MAX_NUM_SEQS, agg="max")
KV_USAGE_MEAN = Signal("kv_usage_mean", "avg_over_time", contract.KV_CACHE_USAGE_RATIO, agg="max")
KV_USAGE_PEAK = Signal("kv_usage_peak", "max_over_time", contract.KV_CACHE_USAGE_RATIO, agg="max")
PREFIX_HIT_MEAN = Signal(
    "prefix_hit_mean", "avg_over_time", contract.PREFIX_CACHE_HIT_RATIO, agg="avg"
)
GPU_UTILIZATION_MEAN = Signal(
    "gpu_utilization_mean", "avg_over_time", contract.GPU_UTILIZATION_RATIO, agg="max"
)
#: GPM SM activity: a MIG device's stand-in for utilization
GPU_SM_ACTIVE_MEAN = Signal(
    "gpu_sm_active_mean", "avg_over_time", contract.GPU_SM_ACTIVE_RATIO, agg="max"
)
GPU_MEMORY_MEAN = Signal(
    "gpu_memory_mean", "avg_over_time", contract.GPU_MEMORY_USED_RATIO, agg="max"
)
GPU_MEMORY_PEAK = Signal(
    "gpu_memory_peak", "max_over_time", contract.GPU_MEMORY_USED_RATIO, agg="max"
)


def gpu_utilization(*, selector: str, window: str, by: str) -> str:
    """PromQL: each GPU's utilization averaged over ``window``; a MIG device has no NVML
    utilization, and its GPM SM activity (Hopper and newer) stands in for it."""
    util = GPU_UTILIZATION_MEAN.render(selector=selector, window=window, by=by)
    sm = GPU_SM_ACTIVE_MEAN.render(selector=selector, window=window, by=by)
    return f"{util}\nor\n{sm}"


def evaluate_gpu_utilization(scrapes: Sequence[Scrape], by: str) -> dict[Key, float]:
    """:func:`gpu_utilization` from the agent's scrapes (``or``: utilization first)."""
    return {
        **GPU_SM_ACTIVE_MEAN.evaluate(scrapes, by),
        **GPU_UTILIZATION_MEAN.evaluate(scrapes, by),
    }


#: restarts in the window: changes of the worker's start time
RESTARTS = Signal("restarts", "changes", contract.WORKER_START_TIME_SECONDS, agg="max")
#: the earliest start of a worker's processes in the window (the report's data age)
WORKER_START_EARLIEST = Signal(
    "worker_start_earliest", "min_over_time", contract.WORKER_START_TIME_SECONDS, agg="min"
)

#: who was there in the window and what they said last (the report's identities over
#: both periods): workers by their target, info and finished requests, GPUs by their
#: utilization and info, which GPU a worker's processes use (a process of no worker left
#: out), and the batch limit a worker had last
TARGET_UP_LAST = Signal("target_up_last", "last_over_time", contract.TARGET_UP, agg="max")
WORKER_INFO_LAST = Signal("worker_info_last", "last_over_time", contract.WORKER_INFO, agg="group")
REQUESTS_FINISHED_LAST = Signal(
    "requests_finished_last", "last_over_time", contract.REQUESTS_FINISHED
)
GPU_UTILIZATION_LAST = Signal(
    "gpu_utilization_last", "last_over_time", contract.GPU_UTILIZATION_RATIO, agg="max"
)
GPU_INFO_LAST = Signal("gpu_info_last", "last_over_time", contract.GPU_INFO, agg="group")
GPU_PROCESS_MEMORY_LAST = Signal(
    "gpu_process_memory_last",
    "last_over_time",
    contract.GPU_PROCESS_MEMORY_USED_BYTES,
    agg="max",
    matchers=('worker!=""',),
)
BATCH_LIMIT_LAST = Signal("batch_limit_last", "last_over_time", contract.MAX_NUM_SEQS, agg="max")
#: the GPUs a worker ran on in the window (through inferwatch_worker_gpu_info)
WORKER_GPU_SEEN = Signal("worker_gpu_seen", "max_over_time", contract.WORKER_GPU_INFO, agg="group")
#: NVML's used bytes at their highest in the window
GPU_MEMORY_BYTES_PEAK = Signal(
    "gpu_memory_bytes_peak", "max_over_time", contract.GPU_MEMORY_USED_BYTES, agg="max"
)

#: every per-family signal, the latency buckets included
SIGNALS: tuple[Signal, ...] = (
    QUEUE,
    RUNNING,
    BATCH_LIMIT,
    KV_USAGE,
    GPU_UTILIZATION,
    GPU_MEMORY,
    REQUEST_RATE,
    SERVED_RATE,
    ERROR_RATE,
    REJECT_RATE,
    PROMPT_TOKEN_RATE,
    GENERATION_TOKEN_RATE,
    PREEMPTION_RATE,
    GPU_POWER,
    WORKER_CPU,
    SCRAPE_ERROR_RATE,
    COLLECT_ERROR_RATE,
    REQUESTS,
    ERRORS,
    REJECTED,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    PREEMPTIONS,
    XID_ERRORS,
    ECC_ERRORS,
    SCRAPE_ERRORS,
    COLLECT_ERRORS,
    WARMUPS,
    WARMUP_FAILURES,
    QUEUE_MEAN,
    RUNNING_MEAN,
    QUEUE_SLOPE,
    QUEUE_PEAK,
    RUNNING_PEAK,
    MAX_NUM_SEQS,
    KV_USAGE_MEAN,
    KV_USAGE_PEAK,
    PREFIX_HIT_MEAN,
    GPU_UTILIZATION_MEAN,
    GPU_SM_ACTIVE_MEAN,
    GPU_MEMORY_MEAN,
    GPU_MEMORY_PEAK,
    RESTARTS,
    WORKER_START_EARLIEST,
    TARGET_UP_LAST,
    WORKER_INFO_LAST,
    REQUESTS_FINISHED_LAST,
    GPU_UTILIZATION_LAST,
    GPU_INFO_LAST,
    GPU_PROCESS_MEMORY_LAST,
    BATCH_LIMIT_LAST,
    WORKER_GPU_SEEN,
    GPU_MEMORY_BYTES_PEAK,
    *(make(f) for f in HISTOGRAMS for make in (bucket_rate, bucket_increase)),
)


# --------------------------------------------------------------------------- capacity


@dataclass(frozen=True)
class BatchCapacity:
    """What a worker can batch now: ``max_num_seqs``, or the running batch once its KV
    cache is at ``full_at`` (an engine whose cache holds fewer sequences than
    max_num_seqs cannot batch more; one whose max_num_seqs is unknown still has this
    bound), whichever is smaller. The label ``capacity_from`` says which."""

    def render(self, *, selector: str, by: str, key: str, full_at: str) -> str:
        """PromQL per group of ``by``; the KV cache is matched on ``key`` (the worker)."""
        return (
            f"min by ({by}) (\n"
            f"    label_replace(\n"
            f"      {BATCH_LIMIT.render(selector=selector, by=by)},\n"
            f'      "capacity_from", "max_num_seqs", "", ""\n'
            f"    )\n"
            f"  or\n"
            f"    label_replace(\n"
            f"        {RUNNING.render(selector=selector, by=by)}\n"
            f"      and on ({key})\n"
            f"        {KV_USAGE.render(selector=selector, by=key)} >= {full_at},\n"
            f'      "capacity_from", "kv_cache", "", ""\n'
            f"    )\n"
            f")"
        )

    def evaluate(
        self, scrapes: Sequence[Scrape], by: str, key: str, full_at: float
    ) -> dict[Key, float]:
        """The capacity per group of ``by`` at the last scrape."""
        running = RUNNING.evaluate(scrapes, by)
        kv = KV_USAGE.evaluate(scrapes, key)
        by_labels, key_labels = labels_of(by), labels_of(key)
        out = BATCH_LIMIT.evaluate(scrapes, by)
        for group, value in running.items():
            labels = dict(zip(by_labels, group, strict=True))
            if kv.get(tuple(labels.get(k, "") for k in key_labels), -math.inf) >= full_at:
                out[group] = min(out.get(group, math.inf), value)
        return out


BATCH_CAPACITY = BatchCapacity()


# --------------------------------------------------------------------------- conditions
#
# The loops' conditions over these signals, and how long one held in a window. A
# condition is 1/0 per series (a ``bool`` comparison) or a filter; the rules read it
# now, the report the share or the seconds of each day it held, sampled every ``step``
# seconds by a subquery.


def past(value: str, line: L.Line, t: Thresholds, *, as_bool: bool = False) -> str:
    """PromQL: ``value`` past the loops' ``line`` in ``t`` (``value < 0.3``), a filter or,
    with ``as_bool``, 1/0 (the GPU waste and scale-review conditions, in the alerts,
    the scale-in rule and the report)."""
    keyword = "bool " if as_bool else ""
    return f"{value} {line.op} {keyword}{num(line.of(t))}"


def utilization_bands(value: str, t: Thresholds) -> dict[str, str]:
    """PromQL: 1/0 per band of GPU utilization ``value`` (``pack.loops.utilization_lines``):
    waste, healthy, scale review."""
    lines = L.utilization_lines(t)
    in_band = (
        f"({value} >= bool {num(lines.healthy_low)}) * ({value} <= bool {num(lines.healthy_high)})"
    )
    return {
        "waste": past(value, L.WASTE, t, as_bool=True),
        "healthy": in_band,
        "scale_review": past(value, L.SCALE_REVIEW, t, as_bool=True),
    }


def held_share(condition: str, *, window: str, step: int) -> str:
    """PromQL: the share of ``window`` that the 1/0 ``condition`` held, per series."""
    return f"avg_over_time(({condition})[{window}:{step}s])"


def held_sum(condition: str, *, window: str, step: int, by: str) -> str:
    """PromQL: ``condition``'s values added up over ``window``, one every ``step`` seconds,
    summed by ``by`` (with a 1/0 condition: how many steps it held)."""
    return f"sum by ({by}) (sum_over_time(({condition})[{window}:{step}s]))"


#: a worker's process start time (the gauge now)
WORKER_START = Signal("worker_start", "", contract.WORKER_START_TIME_SECONDS, agg="max")


def young(*, selector: str = "", key: str, within: str) -> str:
    """PromQL: the workers (by ``key``) whose process started less than ``within`` seconds
    ago: the cold-start loop's window (its alerts, the scale-in hold, the report's
    cold-start TTFT)."""
    return f"(time() - {WORKER_START.render(selector=selector, by=key)} < {within})"


#: open requests' two parts now, and averaged over a window
OPEN_NOW = (QUEUE, RUNNING)
OPEN_MEAN = (QUEUE_MEAN, RUNNING_MEAN)


def open_requests(signals: tuple[Signal, Signal], **holes: str) -> str:
    """PromQL: open requests, waiting plus running: :data:`OPEN_NOW` (the queue pressure
    rules) or :data:`OPEN_MEAN` over a window (the report's day)."""
    return " + ".join(signal.render(**holes) for signal in signals)


def over_capacity(*, selector: str = "", key: str, full_at: str) -> str:
    """PromQL: 1 where a worker's queue is deeper than its batch capacity, else 0, per queue
    series (matched to its worker on ``key``): the over-capacity loop's condition."""
    capacity = BATCH_CAPACITY.render(selector=selector, by=key, key=key, full_at=full_at)
    return f"{QUEUE.render(selector=selector)} > bool on ({key}) group_left {capacity}"


def over_capacity_seconds(
    *, selector: str = "", key: str, full_at: str, window: str, step: int, by: str
) -> str:
    """PromQL: the seconds of ``window`` each group of ``by`` spent over capacity."""
    over = over_capacity(selector=selector, key=key, full_at=full_at)
    return f"{held_sum(over, window=window, step=step, by=by)} * {step}"


def steepest_rise(*, selector: str = "", slope_window: str, window: str, step: int, by: str) -> str:
    """PromQL: the steepest queue slope (over ``slope_window``, the rising loop's) seen in
    ``window``, one every ``step`` seconds, by ``by``."""
    slope = QUEUE_SLOPE.render(selector=selector, window=slope_window)
    return f"max by ({by}) (max_over_time({slope}[{window}:{step}s]))"


def cold_start_buckets(
    family: contract.Family,
    *,
    selector: str = "",
    key: str,
    within: str,
    window: str,
    step: int,
    by: str,
) -> str:
    """PromQL: the histogram ``family``'s observations per bucket within ``within`` seconds
    of a worker's start, over ``window`` by ``by`` and ``le`` (kept apart from the SLO:
    InferenceTTFTSLOBreach leaves these first tokens to InferenceWorkerColdStart)."""
    increase = bucket_increase(family).render(selector=selector, window=f"{step}s")
    fresh = young(selector=selector, key=key, within=within)
    condition = f"{increase} and on ({key}) {fresh}"
    return held_sum(condition, window=window, step=step, by=f"{by}, le")


def gpu_pressure_peak(*, selector: str = "", window: str, key: str) -> str:
    """PromQL: memory pressure per GPU over ``window``: the peak KV-cache usage of the
    workers (by ``key``) on it, through inferwatch_worker_gpu_info, where their engine
    exports one (an engine that pre-allocates holds NVML's level flat at its reservation)."""
    kv = KV_USAGE_PEAK.render(selector=selector, window=window, by=key)
    seen = WORKER_GPU_SEEN.render(selector=selector, window=window, by=f"{key}, gpu, uuid")
    return f"max by (uuid) ({kv} * on ({key}) group_right () {seen})"


def gpu_utilization_stats(window: str, *qs: float, selector: str = "") -> dict[str, str]:
    """PromQL per GPU: its utilization's mean and ``qs`` quantiles (``p50``) over ``window``."""
    util = GPU_UTILIZATION.render(selector=selector)
    quantiles = {f"p{q * 100:g}": f"quantile_over_time({q:g}, {util}[{window}])" for q in qs}
    return {"mean": GPU_UTILIZATION_MEAN.render(selector=selector, window=window), **quantiles}


def utilization_band_shares(
    t: Thresholds, *, selector: str = "", window: str, step: int
) -> dict[str, str]:
    """PromQL per GPU series: the share of ``window`` its utilization spent in each band of
    :func:`utilization_bands` (the report's days)."""
    util = GPU_UTILIZATION.render(selector=selector)
    return {
        band: held_share(condition, window=window, step=step)
        for band, condition in utilization_bands(util, t).items()
    }


def gpu_waste_share(t: Thresholds, *, selector: str = "", window: str, step: int, by: str) -> str:
    """PromQL: the share of ``window`` that InferenceGPUUnderutilized's condition held
    (utilization averaged over ``pack.rate_window`` past the waste line), by ``by``."""
    rate_window = format_duration(t.pack.rate_window)
    mean = GPU_UTILIZATION_MEAN.render(selector=selector, window=rate_window)
    wasted = past(mean, L.WASTE, t, as_bool=True)
    return f"max by ({by}) ({held_share(wasted, window=window, step=step)})"
