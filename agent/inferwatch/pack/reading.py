"""One worker's reading (the loops' inputs), from Prometheus or from the agent's own ``/metrics``.

A reading is the join of the answers of one table of queries (:data:`PROMETHEUS_QUERIES`,
each a ``pack.signals`` signal over the range read): the numbers ``pack.loops``'
conditions read (queue depth and its slope, running requests, batch capacity, KV cache,
GPU utilization and VRAM, the TTFT/TPOT/E2E quantiles, rates, restarts and XID errors),
its identity (model, engine, GPUs, launch flags) and its warm-up gate. From Prometheus,
:func:`prometheus_queries` renders the table and :func:`readings_from_answers` joins its
answers. From one agent's scrapes taken at known unix times (the exposition parsed by
:func:`parse_exposition`), :func:`read_workers` evaluates the same table over the scrapes
(``Signal.evaluate``: what Prometheus answers over the same samples) and joins the
answers the same way, so both readings combine every figure as the rules' PromQL does:
per series over the range, then over a worker's series or GPUs.

What only the scrapes have is added after the join: the agent's stats-window quantiles
and queue slope from the last scrape (instead of the range's), the batch in the scrapes
in which requests waited, and, for a worker started less than ``cold_within`` seconds
ago, its TTFT P95 since the start from the engine's cumulative buckets (that life is the
cold-start window itself, and holds the slow first tokens InferenceWorkerColdStart fired
on after they left the agent's stats window). Rates and shares are read only when the
scrapes span ``min_rate_span`` seconds at least: a counter's total over the worker's
uptime says nothing about now; one scrape gives a reading without them (the demo's view).

``advise``'s ``WorkerPicture``, the what-if twin's ``Observed``, the demo's view and the
report's day series are built from it; family names come from
:mod:`inferwatch.engines.contract`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from inferwatch.engines import contract as c
from inferwatch.engines.launchflags import WORKER_INFO_FLAGS
from inferwatch.pack import loops as L
from inferwatch.pack import signals as S
from inferwatch.stats import histogram_quantile

Labels = dict[str, str]
#: (sample name, labels, value): a histogram's samples keep their ``_bucket``,
#: ``_count`` and ``_sum`` names, a counter's its ``_total``
Sample = tuple[str, Labels, float]
Scrape = list[Sample]
#: scrapes at unix times, oldest first
Scrapes = Sequence[tuple[float, Scrape]]
#: a family (its samples are named by ``str(family)``) or a sample name
Name = c.Family | str
#: the series that name a worker: its target and its info
WORKER_NAMING = (c.TARGET_UP, c.WORKER_INFO)
#: the labels a GPU device's series are selected by: ``{"gpu": "0"}``, or with
#: ``gpu_instance`` for a MIG device ("" matches a series without the label)
Device = Mapping[str, str]


def parse_exposition(text: str) -> Scrape:
    """(sample name, labels, value) of every sample in a Prometheus text exposition;
    ``ValueError`` when the text is no exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    families = text_string_to_metric_families(text)
    return [(s.name, dict(s.labels), float(s.value)) for f in families for s in f.samples]


# --------------------------------------------------------------------------- one scrape


def values(scrape: Scrape, name: Name, **match: str) -> list[tuple[Labels, float]]:
    """The samples of ``name`` whose labels match (a label absent matches ""), NaN left out."""
    want = str(name)
    return [
        (labels, value)
        for n, labels, value in scrape
        if n == want
        and all(labels.get(k, "") == v for k, v in match.items())
        and not math.isnan(value)
    ]


def total(scrape: Scrape, name: Name, **match: str) -> float | None:
    """The sum over the matching series (None: no such series)."""
    found = values(scrape, name, **match)
    return sum(v for _, v in found) if found else None


def buckets(scrape: Scrape, histogram: c.Family, **match: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts by bound, summed over the other labels."""
    out: dict[float, float] = {}
    for labels, value in values(scrape, f"{histogram}_bucket", **match):
        if (bound := upper_bound(labels)) is not None:
            out[bound] = out.get(bound, 0.0) + value
    return out


def upper_bound(labels: Mapping[str, str]) -> float | None:
    """A bucket's upper bound (its ``le``; None: not a number)."""
    try:
        return float(labels.get("le", ""))
    except ValueError:
        return None


def quantiles(
    scrape: Scrape, family: c.Family, label: str = "quantile", **match: str
) -> dict[str, float]:
    """A gauge's values by its ``label`` (a quantile gauge's ``quantile``; the highest where
    series repeat)."""
    out: dict[str, float] = {}
    for labels, value in values(scrape, family, **match):
        if (q := labels.get(label)) is not None:
            out[q] = max(out.get(q, value), value)
    return out


def workers_of(scrape: Scrape, naming: Iterable[Name] = WORKER_NAMING) -> list[str]:
    """The workers a scrape names in ``naming`` (its targets and workers' info), in order."""
    names = {str(f) for f in naming}
    return list(dict.fromkeys(lb["worker"] for n, lb, _ in scrape if n in names and "worker" in lb))


def mean(items: Iterable[float | None]) -> float | None:
    known = [v for v in items if v is not None]
    return sum(known) / len(known) if known else None


def maximum(items: Iterable[float | None]) -> float | None:
    known = [v for v in items if v is not None]
    return max(known) if known else None


# --------------------------------------------------------------------------- over scrapes


def series(
    scrapes: Scrapes, name: Name, worker: str, per: Callable[..., float | None] = total
) -> list[float | None]:
    """A worker's series in every scrape (summed over its labels, or as ``per`` says)."""
    return [per(s, name, worker=worker) for _, s in scrapes]


def increase(first: Scrape, last: Scrape, counter: Name, worker: str) -> float | None:
    """A worker's counter increase between two scrapes (None: not in both, or reset)."""
    begin, end = total(first, counter, worker=worker), total(last, counter, worker=worker)
    if begin is None or end is None or end < begin:
        return None
    return end - begin


def since_start(scrape: Scrape, worker: str, q: float = 0.95) -> tuple[float | None, float | None]:
    """(the q-quantile of TTFT, the first tokens counted) over the worker's life: the
    engine's cumulative buckets as the agent passes them through (None, None without)."""
    by_bound = buckets(scrape, c.TTFT_SECONDS, worker=worker)
    count = by_bound.get(math.inf)
    if not count:
        return None, None
    value = histogram_quantile(q, sorted(by_bound.items()))
    return (None if math.isnan(value) else value), count


# --------------------------------------------------------------------------- the reading


@dataclass
class WorkerReading:
    """One worker as the loops read it, over the range read; None where the source does
    not say. Levels are means over the range (``gpu_util``, ``queue``, ``running``,
    ``kv_mean``, ``prefix_hit_ratio``) or peaks (``vram``, ``kv``, ``queue_max``,
    ``running_max``, ``capacity``); rates, shares and latency quantiles come from counter
    and bucket increases over it (from scrapes, quantiles and ``slope`` are the agent's
    stats-window figures in the last scrape)."""

    worker: str = ""
    #: the agent reads the worker's ``/metrics`` (inferwatch_target_up)
    up: bool = False
    model: str | None = None
    engine: str = ""
    gpus: tuple[str, ...] = ()
    #: GPU utilization, the mean over the worker's GPUs
    gpu_util: float | None = None
    #: the fullest of its GPUs' VRAM (used / total)
    vram: float | None = None
    vram_total_bytes: float | None = None
    queue: float | None = None
    queue_max: float | None = None
    #: requests per second; > 0 is a growing queue
    slope: float | None = None
    running: float | None = None
    running_max: float | None = None
    #: the batch over the scrapes in which requests waited (None: none waited)
    running_when_queued: float | None = None
    #: inferwatch_max_num_seqs (the launch flag may say it too: ``flags``)
    capacity: float | None = None
    kv: float | None = None
    kv_mean: float | None = None
    prefix_hit_ratio: float | None = None
    #: per second (set by the demo between its views, where it reads one scrape at a time)
    preemption_rate: float | None = None
    request_rate: float | None = None
    #: [5.3] share of the span's prompts over pack.loops.LONG_PROMPT_TOKENS
    long_prompt_share: float | None = None
    #: seconds since the worker process started (the last scrape's time less its start)
    uptime: float | None = None
    #: evidence of running out: restarts of the worker process over the scrapes and XID
    #: errors on its GPUs (None: not known)
    restarts: float | None = None
    xid_errors: float | None = None
    #: quantile ("0.5", "0.95", "0.99") -> seconds, the agent's stats window
    ttft: dict[str, float] = field(default_factory=dict)
    tpot: dict[str, float] = field(default_factory=dict)
    e2e: dict[str, float] = field(default_factory=dict)
    #: TTFT P95 over the worker's whole life and the first tokens counted in it (read for
    #: a worker started within ``cold_within``)
    ttft_p95_since_start: float | None = None
    ttft_count_since_start: float | None = None
    #: the warm-up gate: inferwatch_worker_ready, ..._deadline_exceeded (None: no gate)
    ready: bool | None = None
    gate_deadline_exceeded: bool | None = None
    #: the gate's TTFT by phase ("cold", "warm")
    warmup_ttft: dict[str, float] = field(default_factory=dict)
    #: the launch flags inferwatch_worker_info states, as written ("unknown" included)
    flags: dict[str, str] = field(default_factory=dict)
    #: TTFT P99 of the worker's model over all its workers read (from one agent's scrapes:
    #: that agent's)
    model_ttft_p99: float | None = None
    # The weekly report keeps one reading per day (report.model.RawWorker): the figures
    # below are its, over the day; ``queue_max`` is the day's queue peak and ``capacity``
    # the batch limit at the period's end (on the last day's reading only).
    #: requests finished, prompt and generated tokens, preemptions, requests finished
    #: with reason="error" and rejected requests, counted over the day
    requests: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    preemptions: float | None = None
    failed: float | None = None
    rejected: float | None = None
    #: seconds the queue was over the batch capacity (None: max_num_seqs unknown)
    over_capacity_seconds: float | None = None
    #: waiting plus running requests, the day's mean
    open_requests: float | None = None
    #: the day's steepest queue slope over queue.rising_window, requests per second
    slope_max: float | None = None
    #: the earliest start (unix seconds) of the worker's processes seen that day; no
    #: request observed by the day's end took longer than the day's end minus this
    started: float | None = None
    #: "ttft", "tpot", "e2e", "prompt_length" and "cold_ttft" (first tokens observed within
    #: cold_start.within of a start) -> the day's cumulative (bound, count) pairs, +Inf last;
    #: a histogram is absent when its series is, None on a day without its +Inf bucket
    buckets: dict[str, tuple[tuple[float, float], ...] | None] = field(default_factory=dict)

    def set(self, attr: str, value: float | None, end: float) -> None:
        """Set a field from its series' figure at ``end`` (None: left as it is)."""
        if value is not None:
            setattr(self, attr, _FROM_FIGURE[attr](value, end) if attr in _FROM_FIGURE else value)

    def identify(
        self, batch: Mapping[str, str], info: Mapping[str, str], other: Mapping[str, str] = {}
    ) -> None:
        """Model and engine from the labels of its batch, else of its info (the model else
        from ``other``, another series of the worker's); its flags."""
        self.model = batch.get("model") or info.get("model") or other.get("model") or None
        self.engine = batch.get("engine", "") or info.get("engine", "")
        self.flags = {f: info[f] for f in WORKER_INFO_FLAGS if info.get(f)}

    @property
    def known_flags(self) -> dict[str, str]:
        """The launch flags with a value (not "unknown")."""
        return {k: v for k, v in self.flags.items() if v != "unknown"}


# --------------------------------------------------------------------------- the queries

#: one instant query's answer: (labels, value) per series
Answer = Sequence[tuple[Mapping[str, str], float]]
#: the key of a reading: one agent's worker (the instance is "" in one agent's scrapes)
WORKER_BY = "instance, worker"


def _over(fn: str, family: c.Family) -> S.Signal:
    return S.Signal(family.name, fn, family, agg="max")


#: reading fields read per (instance, worker) from one query each: query name -> (field,
#: the signal rendered over the range read, how a worker's series combine)
PROMETHEUS_FIELDS: dict[str, tuple[str, S.Signal, str]] = {
    "queue_depth": ("queue", S.QUEUE_MEAN, "sum"),
    "queue_depth_max": ("queue_max", S.QUEUE_PEAK, "sum"),
    # the slope the rules read (deriv), over the whole range
    "queue_slope": ("slope", S.QUEUE_SLOPE, "max"),
    "running": ("running", S.RUNNING_MEAN, "sum"),
    "running_max": ("running_max", S.RUNNING_PEAK, "sum"),
    "max_num_seqs": ("capacity", S.MAX_NUM_SEQS, "max"),
    "kv_usage": ("kv", S.KV_USAGE_PEAK, "max"),
    "kv_usage_mean": ("kv_mean", S.KV_USAGE_MEAN, "max"),
    "prefix_hit_ratio": ("prefix_hit_ratio", S.PREFIX_HIT_MEAN, "avg"),
    "preemption_rate": ("preemption_rate", S.PREEMPTION_RATE, "sum"),
    "request_rate": ("request_rate", S.REQUEST_RATE, "sum"),
    # evidence of running out: restarts over the range (XID errors are per GPU)
    "restarts": ("restarts", S.RESTARTS, "max"),
    "start_time": ("uptime", _over("max_over_time", c.WORKER_START_TIME_SECONDS), "max"),
    "target_up": ("up", _over("max_over_time", c.TARGET_UP), "max"),
    "ready": ("ready", _over("last_over_time", c.WORKER_READY), "max"),
    "deadline": (
        "gate_deadline_exceeded",
        _over("last_over_time", c.WARMUP_DEADLINE_EXCEEDED),
        "max",
    ),
}
#: a field's value from its series' figure at ``end``, where it is not the figure itself
_FROM_FIGURE: dict[str, Callable[[float, float], object]] = {
    "uptime": lambda v, end: end - v,
    "up": lambda v, end: v >= 1,
    "ready": lambda v, end: v >= 1,
    "gate_deadline_exceeded": lambda v, end: v >= 1,
}
#: latency quantiles over the range: query name -> (field, histogram, quantile)
PROMETHEUS_QUANTILES: dict[str, tuple[str, c.Family, str]] = {
    f"{field_}_p{q[2:].ljust(2, '0')}": (field_, family, q)
    for field_, family, qs in (
        ("ttft", c.TTFT_SECONDS, ("0.5", "0.95", "0.99")),
        ("tpot", c.TPOT_SECONDS, ("0.5", "0.99")),
        ("e2e", c.E2E_LATENCY_SECONDS, ("0.5", "0.99")),
    )
    for q in qs
}
#: the fullest of a worker's devices, from answers per GPU series (a MIG device's too):
#: reading field -> query name (utilization is the mean over its devices)
GPU_PEAKS = {"vram": "vram", "vram_total_bytes": "vram_total"}


@dataclass(frozen=True)
class Query:
    """One instant query at the end of the range read: ``signal`` over the range, grouped
    ``by`` (None: per series) and combined by ``agg`` (None: the signal's own); with
    ``q``, that quantile of the grouped buckets."""

    signal: S.Signal
    by: str | None = WORKER_BY
    agg: str | None = None
    q: float | None = None

    def render(self, selector: str, window: str) -> str:
        promql = self.signal.render(selector=selector, window=window, by=self.by, agg=self.agg)
        return promql if self.q is None else S.quantile(self.q, promql)

    def evaluate(self, scrapes: Sequence[S.Scrape]) -> list[tuple[Labels, float]]:
        """The answer Prometheus gives over the same samples (``Signal.evaluate``): a
        group's labels without the empty ones, as Prometheus has no empty label."""
        if self.by is None:
            return [(dict(labels), v) for labels, v in self.signal.per_series(scrapes)]
        if self.q is None:
            keys = self.signal.group(self.by)
            found = self.signal.evaluate(scrapes, self.by, self.agg)
        else:
            keys = S.labels_of(self.by)
            found = S.evaluate_quantile(self.q, self.signal, scrapes, self.by)
        answer = []
        for key, value in found.items():
            labels = {k: v for k, v in zip(keys, key, strict=True) if v}
            answer.append((labels, value))
        return answer


#: the queries behind a reading, in the order they are asked: each field's, then what
#: the join needs (XID errors per GPU, the prompt buckets, the model's TTFT P99, the
#: worker's identity and info, the gate's TTFT by phase, the GPUs' figures and which
#: workers' processes hold memory on them)
PROMETHEUS_QUERIES: dict[str, Query] = {
    **{n: Query(sig, agg=agg) for n, (_, sig, agg) in PROMETHEUS_FIELDS.items()},
    **{n: Query(S.bucket_increase(f), q=float(q)) for n, (_, f, q) in PROMETHEUS_QUANTILES.items()},
    "xid": Query(S.XID_ERRORS, "instance, gpu"),
    "prompt_buckets": Query(S.bucket_increase(c.PROMPT_LENGTH_TOKENS)),
    "model_ttft_p99": Query(S.bucket_increase(c.TTFT_SECONDS), "model", q=0.99),
    "identity": Query(
        _over("last_over_time", c.REQUESTS_RUNNING), f"{WORKER_BY}, model, engine", "group"
    ),
    "info": Query(_over("last_over_time", c.WORKER_INFO), None),
    "warmup_ttft": Query(_over("last_over_time", c.WARMUP_TTFT_SECONDS), f"{WORKER_BY}, phase"),
    "gpu_utilization": Query(S.GPU_UTILIZATION_MEAN, None),
    "gpu_sm_active": Query(S.GPU_SM_ACTIVE_MEAN, None),
    "vram": Query(S.GPU_MEMORY_PEAK, None),
    "vram_total": Query(_over("last_over_time", c.GPU_MEMORY_TOTAL_BYTES), None),
    "gpu_workers": Query(
        _over("max_over_time", c.GPU_PROCESS_MEMORY_USED_BYTES), "instance, gpu, worker"
    ),
}
#: the queries a reading from scrapes answers only over ``min_rate_span`` seconds at least:
#: rates and shares of now, never of a counter's lifetime
RATE_QUERIES = (
    "preemption_rate",
    "request_rate",
    "prompt_buckets",
    "model_ttft_p99",
    *PROMETHEUS_QUANTILES,
)


def prometheus_queries(selector: str, window: str) -> dict[str, str]:
    """The instant queries of :data:`PROMETHEUS_QUERIES`, for the series ``selector``
    selects over a range ``window`` long."""
    return {n: q.render(selector, window) for n, q in PROMETHEUS_QUERIES.items()}


# --------------------------------------------------------------------------- the join


def _key(labels: Mapping[str, str], label: str = "worker") -> tuple[str, str]:
    """A series' (instance, worker), or (instance, GPU) with ``label="gpu"``."""
    return labels.get("instance", ""), labels.get(label, "")


def _device_figure(answer: Answer, device: Device) -> float | None:
    """The highest of the answer's series on ``device`` (its labels match, an absent
    label matching "")."""
    found = [
        v
        for labels, v in answer
        if all(labels.get(k, "") == want for k, want in device.items()) and not math.isnan(v)
    ]
    return max(found) if found else None


def readings_from_answers(
    answers: Mapping[str, Answer],
    end: float,
    devices: Mapping[str, Sequence[Device]] | None = None,
    named: Sequence[str] = (),
) -> dict[tuple[str, str], WorkerReading]:
    """Join the answers of :data:`PROMETHEUS_QUERIES` (evaluated at ``end``) into one
    reading per (instance, worker), in the order the workers' target, batch and info name
    them, then a worker ``named`` that none names. A worker's devices are its ``devices``
    (by its name), else the GPUs its processes hold memory on, or, where it is its agent's
    only worker, every GPU of that agent."""
    out: dict[tuple[str, str], WorkerReading] = {}
    first: dict[str, dict[tuple[str, str], Mapping[str, str]]] = {}
    for name in ("target_up", "identity", "info"):
        for lb, _ in answers.get(name, ()):
            if "worker" in lb:
                out.setdefault(_key(lb), WorkerReading(worker=lb["worker"]))
                first.setdefault(name, {}).setdefault(_key(lb), lb)
    seen = {k[1] for k in out}
    for w in named:
        if w not in seen:
            out[("", w)] = WorkerReading(worker=w)
    held: dict[tuple[str, str], set[str]] = {}
    prompts: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for name, lb, v in ((n, lb, v) for n in answers for lb, v in answers[n]):
        if (r := out.get(_key(lb))) is None:
            continue
        if name == "warmup_ttft":
            r.warmup_ttft[lb.get("phase", "")] = v
        elif name == "gpu_workers" and "gpu" in lb:
            held.setdefault(_key(lb), set()).add(lb["gpu"])
        elif math.isnan(v):
            continue
        elif name in PROMETHEUS_FIELDS:
            r.set(PROMETHEUS_FIELDS[name][0], v, end)
        elif name in PROMETHEUS_QUANTILES:
            attr, _, q = PROMETHEUS_QUANTILES[name]
            getattr(r, attr)[q] = v
        elif name == "prompt_buckets" and (bound := upper_bound(lb)) is not None:
            prompts.setdefault(_key(lb), []).append((bound, v))
    model_p99 = {
        lb.get("model", ""): v for lb, v in answers.get("model_ttft_p99", ()) if not math.isnan(v)
    }
    xid = {_key(lb, "gpu"): v for lb, v in answers.get("xid", ())}
    util, sm = answers.get("gpu_utilization", ()), answers.get("gpu_sm_active", ())
    for k, r in out.items():
        r.identify(*(first.get(n, {}).get(k, {}) for n in ("identity", "info")))
        own = (devices or {}).get(k[1])
        if own is None:
            alone = [o for o in out if o[0] == k[0]] == [k]
            agents = {lb["gpu"] for lb, _ in util if _key(lb, "gpu")[0] == k[0] and "gpu" in lb}
            own = [
                {"instance": k[0], "gpu": g} for g in sorted(held.get(k, agents if alone else ()))
            ]
        r.gpus = tuple(dict.fromkeys(d["gpu"] for d in own))
        for attr, name in GPU_PEAKS.items():
            setattr(r, attr, maximum(_device_figure(answers.get(name, ()), d) for d in own))
        # a device without utilization (a MIG slice) reads its SM activity: the rules' `or`
        busy = [_device_figure(util, d) for d in own]
        r.gpu_util = mean(
            _device_figure(sm, d) if u is None else u for u, d in zip(busy, own, strict=True)
        )
        r.xid_errors = sum(xid.get((k[0], g), 0.0) for g in r.gpus) if r.gpus and xid else None
        r.long_prompt_share = L.long_prompt_share(prompts[k]) if k in prompts else None
        r.model_ttft_p99 = model_p99.get(r.model or "")
    return out


# --------------------------------------------------------------------------- from scrapes

#: the agent's own stats-window figures, which a reading from scrapes takes from the last
#: scrape instead of the range's: field -> (family, label); the queue slope besides
AGENT_WINDOW = {
    "ttft": (c.TTFT_QUANTILE_SECONDS, "quantile"),
    "tpot": (c.TPOT_QUANTILE_SECONDS, "quantile"),
    "e2e": (c.E2E_LATENCY_QUANTILE_SECONDS, "quantile"),
}


def read_workers(
    scrapes: Scrapes,
    min_rate_span: float = 0.0,
    cold_within: float | None = None,
    workers: Sequence[str] | None = None,
    devices: Mapping[str, Sequence[Device]] | None = None,
) -> dict[str, WorkerReading]:
    """Each worker's reading from one agent's scrapes (see the module's text): the
    queries of :data:`PROMETHEUS_QUERIES` evaluated over the scrapes, joined as
    Prometheus's answers are, then what only the agent says.

    ``workers``: the workers to read (default: those the scrapes name; one named but
    absent reads as an empty reading, not up). ``devices``: each worker's GPU devices
    (default: the GPUs its processes hold memory on, or all the agent's GPUs where it
    watches one worker only). ``cold_within``: for a worker started less than that many
    seconds ago, its TTFT P95 since the start (``since_start``).
    """
    if not scrapes:
        return {}
    window = [S.Scrape(t, s) for t, s in scrapes]
    (first_t, _), (last_t, last) = scrapes[0], scrapes[-1]
    short = last_t - first_t < min_rate_span
    answers = {
        name: query.evaluate(window)
        for name, query in PROMETHEUS_QUERIES.items()
        if not (short and name in RATE_QUERIES)
    }
    readings = readings_from_answers(answers, last_t, devices, workers or ())
    by_worker = {k[1]: r for k, r in readings.items()}
    out = by_worker if workers is None else {w: by_worker[w] for w in workers}
    for w, r in out.items():
        for attr, (family, label) in AGENT_WINDOW.items():
            setattr(r, attr, quantiles(last, family, label, worker=w))
        r.slope = total(last, c.QUEUE_DEPTH_SLOPE, worker=w)
        running, queue = series(scrapes, c.REQUESTS_RUNNING, w), series(scrapes, c.QUEUE_DEPTH, w)
        r.running_when_queued = mean(n for n, q in zip(running, queue, strict=True) if q and q >= 1)
        if cold_within is not None and r.uptime is not None and r.uptime < cold_within:
            r.ttft_p95_since_start, r.ttft_count_since_start = since_start(last, w)
    return out
