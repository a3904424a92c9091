"""The report's PromQL: what is asked of Prometheus, and how the answers become ``RawData``.

Daily figures come from one range query per figure with a one-day step over
both periods (``2 * days`` points per series). Every query reads the agent's
raw series, not recording rules: rules are evaluated from the moment they are
loaded, never backwards, so a rule added mid-week would make the first days
look empty. Raw series over one day at a time stay cheap:

- counters: ``increase(x_total[1d])``;
- latency: ``increase(x_bucket[1d])`` summed by ``le``; quantiles and SLO
  attainment are computed here from those buckets (``histogram_quantile``'s
  interpolation), so per-worker, per-model and whole-week figures all come from
  one query per histogram; a worker whose engine's own buckets are stored
  instead of the agent's (``export_histograms: false``) is read from those
  (:func:`bucket_increase`);
- GPU utilization: ``avg_over_time`` / ``quantile_over_time`` on the raw gauge,
  band shares with a 1-minute subquery of a ``bool`` comparison;
- VRAM and queue peaks: ``max_over_time``;
- time over capacity: a 1-minute subquery of ``queue_depth > bool capacity``, the
  rules' batch capacity (max_num_seqs, or the running batch once the KV cache is
  at ``vram.scale_above``);
- loop figures: open requests (waiting + running, the day's mean), the day's
  steepest ``deriv`` of the queue over ``queue.rising_window``, preemptions,
  TTFT buckets observed within ``cold_start.within`` of a worker start (a
  1-minute subquery of ``increase``, kept apart from the SLO), memory pressure
  per GPU (its workers' KV-cache usage through ``inferwatch_worker_gpu_info``,
  else NVML's used ratio) and the share of the day InferenceGPUUnderutilized's
  condition held (utilization averaged over ``pack.rate_window``);
- alerts: ``count_over_time(ALERTS{alertstate="firing"}[1m])`` at a 1-minute
  step, which needs a rule evaluation interval of at most one minute (the
  Prometheus default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from inferwatch.engines import contract
from inferwatch.pack import signals as S
from inferwatch.pack.fmt import num
from inferwatch.pack.names import WORKER_KEY as RULES_WORKER_KEY
from inferwatch.pack.reading import upper_bound
from inferwatch.pack.rules import own_histograms
from inferwatch.pack.thresholds import Thresholds, format_duration
from inferwatch.report.model import (
    DAY,
    HISTOGRAMS,
    LATENCY_NAMES,
    Buckets,
    Daily,
    Hourly,
    Period,
    RawAlert,
    RawData,
    RawGpu,
    RawWorker,
    alert_runs,
)
from inferwatch.report.promapi import PrometheusClient, QueryError, ReportError, Sample, Series

SUBQUERY_STEP = 60
ALERT_STEP = 60
HOUR = 3600.0

WORKER_KEY = ("model", "worker")
#: a GPU's place: its agent and its index there (sorted by both)
_GPU_KEY = ("instance", "gpu")
#: each query of ``Collector.workers`` in order: the ``WorkerReading`` figure each day's
#: answer sets -> its progress step ("-": the same step as the line before) and the signal
#: read per day by model and worker (None: its PromQL is written out in the method)
WORKER_FIGURES: dict[str, tuple[str, S.Signal | None]] = {
    "requests": ("requests", S.REQUESTS),
    "prompt_tokens": ("prompt tokens", S.PROMPT_TOKENS),
    "generation_tokens": ("generation tokens", S.GENERATION_TOKENS),
    "ttft": ("TTFT buckets", None),
    "tpot": ("TPOT buckets", None),
    "e2e": ("end-to-end buckets", None),
    "prompt_length": ("prompt-length buckets", None),
    "queue_max": ("queue peaks", S.QUEUE_PEAK),
    "over_capacity_seconds": ("time over capacity", None),
    "capacity": ("capacity", None),
    "open_requests": ("open requests", None),
    "slope_max": ("queue slope", None),
    "preemptions": ("preemptions", S.PREEMPTIONS),
    "cold_ttft": ("cold-start TTFT buckets", None),
    "started": ("worker start times", None),
    "failed": ("errors and rejections", S.ERRORS),
    "rejected": ("-", S.REJECTED),
}
#: the figures answered as per-day buckets (``WorkerReading.buckets``)
BUCKETED = (*HISTOGRAMS, "prompt_length", "cold_ttft")


class NoData(ReportError):
    exit_code = 5


Progress = Callable[[str], None]


def count_steps() -> int:
    """How many calls :func:`collect` makes to ``progress`` (for a progress bar)."""
    return len(_STEPS)


#: the per-day queries of ``Collector.gpus`` by uuid, after the utilization's: the
#: ``RawGpu`` field each answers -> its progress step ("-": the same step as the line
#: before) and the signal read per day (None: its PromQL is written out in the method)
GPU_FIGURES: dict[str, tuple[str, S.Signal | None]] = {
    "vram_peak_ratio": ("VRAM peaks", S.GPU_MEMORY_PEAK),
    "vram_peak_bytes": ("-", S.GPU_MEMORY_BYTES_PEAK),
    "pressure_peak": ("memory pressure", None),
    "waste_alert_daily": ("waste condition", None),
}
#: the GPU steps, skipped together when there are no GPU series
_GPU_STEPS = (
    "GPU utilization",
    "GPU bands",
    "GPU weekly percentiles",
    "GPM SM activity",
    *(step for step, _ in GPU_FIGURES.values() if step != "-"),
    "GPU to worker map",
)
_STEPS = (
    "workers",
    *(step for step, _ in WORKER_FIGURES.values() if step != "-"),
    "GPUs",
    *_GPU_STEPS,
    "alerts",
    "hourly trend",
)


def _days_vector(series: Series, ends: Sequence[float]) -> Daily:
    by_time = {round(t): v for t, v in series.points}
    return tuple(by_time.get(round(t)) for t in ends)


def _key(labels: dict[str, str], keys: Sequence[str]) -> tuple[str, ...]:
    return tuple(labels.get(k, "") for k in keys)


def _instance(s: Sample) -> str:
    return s.labels.get("instance", "")


def _duration(seconds: float) -> str:
    if seconds % DAY == 0:
        return f"{int(seconds // DAY)}d"
    if seconds % HOUR == 0:
        return f"{int(seconds // HOUR)}h"
    return f"{int(seconds)}s"


#: worker key of the agent's series (the rules' WORKER_KEY)
AGENT_WORKER = "job, instance, worker"


def buckets_expr(t: Thresholds, family: contract.Family, seconds: float, by: str) -> str:
    """Observations of the histogram ``family`` per bucket over ``seconds``, by ``by`` and
    ``le``: the agent's buckets, else, for a worker whose engine's own series Prometheus
    stores instead (``export_histograms: false``), those, joined to the worker through
    the agent's endpoint info at each evaluation (``pack.rules.own_histograms``)."""
    window = _duration(seconds)
    agent = S.bucket_increase(family).render(window=window, by=by)
    own = own_histograms.engine_bucket_rates(t, family.name, window=window)
    if not own:
        return agent
    # increase() is rate() times the range, extrapolated alike
    per_worker = f"\nor on ({RULES_WORKER_KEY})\n".join(own).replace("\n", "\n    ")
    return f"{agent}\nor on ({by})\nsum by ({by}, le) (\n    {per_worker}\n) * {seconds:g}"


class Collector:
    """Runs the queries of one report against one client."""

    def __init__(
        self,
        client: PrometheusClient,
        period: Period,
        thresholds: Thresholds,
        progress: Progress | None = None,
    ) -> None:
        self.client = client
        self.period = period
        #: the one way a threshold reaches the queries: asked of this object, or of the
        #: lines of ``pack.loops`` that read it
        self.t = thresholds
        self.ends = period.day_ends()
        self._progress = progress or (lambda step: None)
        self.notes: list[str] = []

    def step(self, name: str) -> None:
        self._progress(name)

    def daily(self, expr: str) -> list[Series]:
        """``expr`` (using the range ``[1d]``) evaluated at the end of each day."""
        return self.client.range(expr, self.ends[0], self.ends[-1], DAY)

    def daily_by(self, expr: str, keys: Sequence[str] = WORKER_KEY) -> dict[tuple[str, ...], Daily]:
        return {_key(s.labels, keys): _days_vector(s, self.ends) for s in self.daily(expr)}

    # ------------------------------------------------------------------ workers

    def workers(self) -> tuple[RawWorker, ...]:
        """Each (model, worker) and its reading of each day: one query per figure of
        ``WORKER_FIGURES``, in its order."""
        span = _duration(2 * self.period.days * DAY)
        self.step("workers")
        identities, present = self._worker_identities(span)
        t, by, day, every = self.t, "model, worker", "1d", SUBQUERY_STEP
        written = {  # the figures of WORKER_FIGURES without a signal
            **{name: buckets_expr(t, family, DAY, by) for name, family in HISTOGRAMS.items()},
            "prompt_length": buckets_expr(t, contract.PROMPT_LENGTH_TOKENS, DAY, by),
            "over_capacity_seconds": S.over_capacity_seconds(
                key=AGENT_WORKER, full_at=num(t.vram.scale_above), window=day, step=every, by=by
            ),
            "capacity": S.BATCH_LIMIT_LAST.render(window=span, by=by),
            "open_requests": S.open_requests(S.OPEN_MEAN, window=day, by=by, agg="sum"),
            "slope_max": S.steepest_rise(
                slope_window=format_duration(t.queue.rising_window), window=day, step=every, by=by
            ),
            "cold_ttft": S.cold_start_buckets(
                contract.TTFT_SECONDS, key=AGENT_WORKER, within=num(t.cold_start.within),
                window=day, step=every, by=by,
            ),
            # by worker name only: the start-time gauge has no model label
            "started": S.WORKER_START_EARLIEST.render(window=day, by="worker"),
        }  # fmt: skip
        got: dict[str, dict[tuple[str, ...], Any]] = {}
        for figure, (step, signal) in WORKER_FIGURES.items():
            if step != "-":
                self.step(step)
            expr = signal.render(window=day, by=by) if signal else written[figure]
            if figure == "capacity":  # the limit at the period's end
                now = self.client.instant(expr, self.period.end)
                got[figure] = {_key(s.labels, WORKER_KEY): s.value for s in now}
            else:
                got[figure] = (self._buckets if figure in BUCKETED else self.daily_by)(expr)
        keys = sorted(set(got["requests"]) | set(identities))
        # A worker known only by name (target_up carries no model) folds into the
        # (model, worker) rows its other series name.
        named = {k[1] for k in keys if k[0]}
        got["started"] = {k: got["started"].get(("", k[1])) for k in keys}
        out = []
        for model, worker in (k for k in keys if k[0] or k[1] not in named):
            # RawWorker.of_series' arguments: each figure's series, the capacity, the histograms
            at: dict[str, Any] = {f: answers.get((model, worker)) for f, answers in got.items()}
            at.update(days=len(self.ends), histograms={f: at.pop(f) for f in BUCKETED})
            engine, instances = identities.get((model, worker), ("", ()))
            out.append(
                RawWorker.of_series(model, worker, engine, instances, worker in present, **at)
            )
        return tuple(out)

    def _worker_identities(
        self, span: str
    ) -> tuple[dict[tuple[str, ...], tuple[str, tuple[str, ...]]], set[str]]:
        """(model, worker) -> engine and agent instances, and the workers seen this period,
        through any of the series every engine has (``inferwatch_target_up``,
        ``inferwatch_worker_info``), not only ``inferwatch_requests_finished_total``, which
        llama.cpp, for one, lacks; one query: their union, and (label present="1") the
        workers whose agent reported them during this period."""
        week = _duration(self.period.days * DAY)
        named = (S.REQUESTS_FINISHED_LAST, S.WORKER_INFO_LAST, S.TARGET_UP_LAST)
        union = " or ".join(signal.render(window=span) for signal in named)
        seen = f'label_replace({S.TARGET_UP_LAST.render(window=week)}, "present", "1", "", "")'
        query = f"group by (model, worker, engine, instance, present) ({seen} or {union})"
        engines: dict[tuple[str, ...], str] = {}
        instances: dict[tuple[str, ...], set[str]] = {}
        present: set[str] = set()
        for s in self.client.instant(query, self.period.end):
            key, lb = _key(s.labels, WORKER_KEY), s.labels
            if key[1] and lb.get("present") == "1":
                present.add(key[1])
            elif key[1]:
                engines[key] = lb.get("engine") or engines.get(key, "")
                instances.setdefault(key, set()).add(lb.get("instance", ""))
        return {k: (engine, tuple(sorted(instances[k]))) for k, engine in engines.items()}, present

    def _buckets(self, expr: str) -> dict[tuple[str, ...], tuple[Buckets | None, ...]]:
        """Per key, each day's cumulative buckets (None: a day without its +Inf bucket)."""
        per: dict[tuple[str, ...], list[dict[float, float]]] = {}
        for s in self.daily(expr):
            if (le := upper_bound(s.labels)) is not None:
                days = per.setdefault(_key(s.labels, WORKER_KEY), [{} for _ in self.ends])
                for day, v in zip(days, _days_vector(s, self.ends), strict=True):
                    if v is not None:
                        day[le] = v
        return {
            key: tuple(tuple(sorted(d.items())) if math.inf in d else None for d in days)
            for key, days in per.items()
        }

    # --------------------------------------------------------------------- GPUs

    def gpus(self, workers: Sequence[RawWorker]) -> tuple[RawGpu, ...]:
        span, week = _duration(2 * self.period.days * DAY), _duration(self.period.days * DAY)
        end = self.period.end
        self.step("GPUs")
        seen = S.GPU_UTILIZATION_LAST.render(window=span, by="uuid, instance, gpu", agg="group")
        # After a pod restart a GPU shows up under a new instance: keep the last one in
        # sort order, which is stable from run to run.
        ident: dict[str, dict[str, str]] = {}
        for s in sorted(self.client.instant(seen, end), key=_instance, reverse=True):
            ident.setdefault(s.labels.get("uuid", ""), {k: s.labels.get(k, "") for k in _GPU_KEY})
        info = self.client.instant(S.GPU_INFO_LAST.render(window=span, by="uuid, name"), end)
        names = {s.labels.get("uuid", ""): s.labels.get("name", "") for s in info}
        if not ident:  # no GPU series in either period (summary.data_notes says so)
            for step in _GPU_STEPS:
                self.step(step)
            return ()
        self.step("GPU utilization")
        stats = S.gpu_utilization_stats("1d", 0.5, 0.9)
        util_daily = self.daily_by(self._union(stats, "stat"), ("uuid", "stat"))
        self.step("GPU bands")
        bands = S.utilization_band_shares(self.t, window="1d", step=SUBQUERY_STEP)
        band_daily = self.daily_by(self._union(bands, "band"), ("uuid", "band"))
        self.step("GPU weekly percentiles")
        util_week = self._labelled_weekly(
            S.gpu_utilization_stats(week, 0.1, 0.5, 0.9, 0.99), "stat"
        )
        self.step("GPM SM activity")
        sm = self._labelled_weekly({"mean": S.GPU_SM_ACTIVE_MEAN.render(window=week)}, "stat")
        written = {
            "pressure_peak": S.gpu_pressure_peak(window="1d", key=AGENT_WORKER),
            "waste_alert_daily": S.gpu_waste_share(
                self.t, window="1d", step=SUBQUERY_STEP, by="uuid"
            ),
        }
        daily: dict[str, dict[tuple[str, ...], Daily]] = {}
        for figure, (step, signal) in GPU_FIGURES.items():
            if step != "-":
                self.step(step)
            expr = signal.render(window="1d", by="uuid") if signal else written[figure]
            daily[figure] = self.daily_by(expr, ("uuid",))
        self.step("GPU to worker map")
        mapping: dict[str, set[str]] = {}
        mapped = S.GPU_PROCESS_MEMORY_LAST.render(window=span, by="uuid, worker", agg="group")
        for s in self.client.instant(mapped, end):
            mapping.setdefault(s.labels.get("uuid", ""), set()).add(s.labels["worker"])
        empty: Daily = (None,) * len(self.ends)
        out = []
        for uuid in sorted(ident, key=lambda u: (*ident[u].values(), u)):
            at: dict[str, Any] = {figure: d.get((uuid,)) for figure, d in daily.items()}
            host = ident[uuid]["instance"]
            served = mapping.get(uuid) or {w.worker for w in workers if host in w.instances}
            out.append(
                RawGpu(
                    **{**ident[uuid], **at, "vram_peak_ratio": at["vram_peak_ratio"] or empty},
                    uuid=uuid,
                    name=names.get(uuid, ""),
                    util_daily={k: util_daily.get((uuid, k), empty) for k in stats},
                    band_daily={k: band_daily.get((uuid, k), empty) for k in bands},
                    util_week=util_week.get(uuid, {}),
                    sm_active_week=sm.get(uuid, {}).get("mean"),
                    workers=tuple(sorted(served)),
                    pressure_from="gpu_memory" if at["pressure_peak"] is None else "kv_cache",
                )
            )
        return tuple(out)

    def _union(self, exprs: dict[str, str], label: str) -> str:
        return " or ".join(
            f'label_replace(max by (uuid) ({expr}), "{label}", "{name}", "", "")'
            for name, expr in exprs.items()
        )

    def _labelled_weekly(
        self, exprs: dict[str, str], label: str
    ) -> dict[str, dict[str, tuple[float | None, float | None]]]:
        query = self._union(exprs, label)
        prev: dict[tuple[str, str], float] = {}
        cur: dict[tuple[str, str], float] = {}
        for target, when in ((prev, self.period.start), (cur, self.period.end)):
            for s in self.client.instant(query, when):
                target[(s.labels.get("uuid", ""), s.labels.get(label, ""))] = s.value
        out: dict[str, dict[str, tuple[float | None, float | None]]] = {}
        for uuid, name in set(prev) | set(cur):
            out.setdefault(uuid, {})[name] = (prev.get((uuid, name)), cur.get((uuid, name)))
        return out

    # ------------------------------------------------------------------- alerts

    def alerts(self) -> tuple[RawAlert, ...]:
        self.step("alerts")
        series = self.client.range(
            f'count_over_time(ALERTS{{alertstate="firing"}}[{ALERT_STEP}s])',
            self.period.previous_start + ALERT_STEP,
            self.period.end,
            ALERT_STEP,
        )
        out = []
        for s in series:
            labels = {k: v for k, v in s.labels.items() if k not in ("__name__", "alertstate")}
            runs = alert_runs([t for t, _ in s.points], ALERT_STEP)
            out.append(RawAlert(labels, tuple(runs)))
        out.sort(key=lambda a: (a.labels.get("alertname", ""), sorted(a.labels.items())))
        return tuple(out)

    # ------------------------------------------------------------------- hourly

    def hourly(self, has_ttft: bool) -> Hourly:
        self.step("hourly trend")
        start, end = self.period.start + HOUR, self.period.end
        times = tuple(start + i * HOUR for i in range(int((end - start) // HOUR) + 1))
        latency = "ttft" if has_ttft else "e2e"
        buckets = buckets_expr(self.t, HISTOGRAMS[latency], HOUR, "model, worker")
        exprs = (  # the fleet's latency P99, mean utilization and memory peak, each hour
            S.quantile(0.99, f"sum by (le) (\n  {buckets}\n)"),
            S.GPU_UTILIZATION_MEAN.render(window="1h", by="", agg="avg"),
            # the KV-cache usage of the workers on each GPU where their engine exports one
            # (an engine that pre-allocates holds NVML's level flat at its reservation),
            # NVML's level for the other GPUs; the fleet's highest
            f"max(\n  {S.gpu_pressure_peak(window='1h', key=AGENT_WORKER)}\n  or\n"
            f"  {S.GPU_MEMORY_PEAK.render(window='1h', by='uuid')}\n)",
        )
        answers = (self.client.range(expr, start, end, HOUR) for expr in exprs)
        p99, util, vram = (
            _days_vector(a[0], times) if a else (None,) * len(times) for a in answers
        )
        name = LATENCY_NAMES[latency] if any(v is not None for v in p99) else ""
        return Hourly(times, p99, name, util, vram)


def collect(
    client: PrometheusClient,
    period: Period,
    thresholds: Thresholds,
    *,
    progress: Progress | None = None,
) -> RawData:
    """Run every query of the report with ``thresholds`` as loaded; raises :class:`NoData`
    when this period is empty."""
    c = Collector(client, period, thresholds, progress)
    workers = c.workers()
    gpus = c.gpus(workers)
    alerts = c.alerts()
    has_ttft = any(w.histogram("ttft") is not None for w in workers)
    hourly = c.hourly(has_ttft)

    def has_current(values: Daily | None) -> bool:
        return values is not None and any(v is not None for v in period.current(values))

    current_workers = any(has_current(w.daily("requests")) or w.present for w in workers)
    current_gpus = any(has_current(g.util_daily.get("mean")) for g in gpus)
    if not current_workers and not current_gpus:
        raise NoData(
            "no inferwatch data between "
            f"{_iso(period.start)} and {_iso(period.end)}: neither worker series "
            f"({contract.TARGET_UP}, {contract.REQUESTS_FINISHED}) nor GPU series "
            f"({contract.GPU_UTILIZATION_RATIO}). Check --end, --days and that this Prometheus "
            "scrapes the agents (job and retention)."
        )
    if not current_workers:
        c.notes.append("No worker series in this period: the worker sections are left out.")
    return RawData(period, workers, gpus, alerts, hourly, tuple(dict.fromkeys(c.notes)))


def _iso(t: float) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


__all__ = ["NoData", "QueryError", "collect", "count_steps"]
