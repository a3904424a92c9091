"""``inferwatch advise``: from metrics to the flags that fix them (the guide's closed loops).

Reads the live picture of every worker, from an agent's ``/metrics`` (a few
samples a second apart) or from Prometheus over a time range, and prints
ranked recommendations, each with the numbers that triggered it. The rules
follow the field guide's loops (section 6.2, with 4.2, 5.3 and the 6 FAQ):

1. low GPU utilization with good latency -> check the request spread and
   route with least connections (only with two or more workers of a model);
2. high TTFT while the GPU idles -> warm-up before joining the load balancer,
   prefix caching for long system prompts;
3. VRAM (or the KV cache) near its limit -> prefix caching, FP8 KV cache,
   ``--gpu-memory-utilization 0.85``, and lower ``--max-num-seqs`` first;
4. a rising queue with full batches -> scale out or rate-limit;
5. end-to-end P99 far above P50 -> a separate pool for long-context traffic.

Plus one outside the loops: a GPU in the waste band with good latency and no
spread problem -> consolidate. Every number comes from ``thresholds.yaml``
(``--thresholds`` overrides it); the worker's launch flags
(``inferwatch_worker_info``) make the advice concrete ("prefix caching is
off", "from 0.95 to 0.85").

``inferwatch advise capacity`` is the guide's max-num-seqs arithmetic
(:mod:`inferwatch.capacity`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from inferwatch.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from inferwatch.capacity import CapacityPlan
    from inferwatch.pack.thresholds import Thresholds

#: where flag values come from, in error messages
SOURCE = "command line"

#: a batch this full (of max_num_seqs) counts as full
FULL_BATCH = 0.9
#: a KV cache this full limits the batch whatever max_num_seqs says
FULL_KV = 0.9
#: a mean queue below one request is noise, not a queue
MIN_QUEUE = 1.0
#: lowering max-num-seqs under memory pressure: by a fifth, which frees about a
#: fifth of the peak KV (inferwatch default; the guide gives no number)
SEQS_CUT = 0.8
#: counter deltas over a shorter sampling span are too noisy for a rate
RATE_MIN_SPAN = 10.0
#: the guide's advice for --gpu-memory-utilization headroom (2.3, 6.2)
GPU_MEMORY_UTILIZATION = 0.85
#: requests that waited in the queue this share of the TTFT P95 or more on average: the
#: slow first tokens are queueing (loop 4's problem), not a cold start
QUEUE_SHARE = 0.5
#: a long-context pool takes requests above roughly this many prompt tokens (5.3)
LONG_PROMPT_TOKENS = 2000


# --------------------------------------------------------------------------- the picture


@dataclass(frozen=True)
class WarmupState:
    """What the agent's warm-up gate says about a worker."""

    ready: bool
    deadline_exceeded: bool = False
    cold_ttft: float | None = None
    warm_ttft: float | None = None


@dataclass(frozen=True)
class WorkerPicture:
    """One worker over the observed span; None where the data does not say."""

    worker: str
    instance: str
    model: str = ""
    engine: str = ""
    gpus: tuple[str, ...] = ()
    gpu_utilization: float | None = None
    vram_used_ratio: float | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    ttft_p99: float | None = None
    e2e_p50: float | None = None
    e2e_p99: float | None = None
    tpot_p99: float | None = None
    queue_depth: float | None = None
    queue_depth_max: float | None = None
    queue_slope: float | None = None
    #: mean seconds a request waited before it was scheduled
    queue_time_mean: float | None = None
    running: float | None = None
    running_max: float | None = None
    max_num_seqs: float | None = None
    kv_usage: float | None = None
    prefix_hit_ratio: float | None = None
    preemption_rate: float | None = None
    request_rate: float | None = None
    #: share of prompts longer than LONG_PROMPT_TOKENS (inferwatch_prompt_length_tokens)
    long_prompt_share: float | None = None
    uptime_seconds: float | None = None
    #: launch flags from inferwatch_worker_info that the command line stated
    flags: Mapping[str, str] = field(default_factory=dict)
    warmup: WarmupState | None = None
    #: shown name: the worker, with its instance when another instance has the same name
    name: str = ""

    @property
    def key(self) -> str:
        return f"{self.instance}/{self.worker}"

    @property
    def label(self) -> str:
        return self.name or self.worker

    def flag(self, name: str) -> str | None:
        value = self.flags.get(name)
        return value if value not in (None, "", "unknown") else None

    def flag_number(self, name: str) -> float | None:
        value = self.flag(name)
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    def capacity(self) -> float | None:
        return self.max_num_seqs if self.max_num_seqs else self.flag_number("max_num_seqs")

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["name"] = self.label
        out["flags"] = dict(self.flags)
        return out


FLAG_LABELS = (
    "max_num_seqs",
    "max_model_len",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "prefix_caching",
)


def name_pictures(pictures: Sequence[WorkerPicture]) -> list[WorkerPicture]:
    """Give each picture its shown name: ``worker``, or ``worker@instance`` when ambiguous."""
    counts: dict[str, int] = {}
    for p in pictures:
        counts[p.worker] = counts.get(p.worker, 0) + 1
    return [
        replace(p, name=p.worker if counts[p.worker] == 1 else f"{p.worker}@{p.instance}")
        for p in pictures
    ]


# --------------------------------------------------------------------------- from an agent

Labels = Mapping[str, str]
Scrape = list[tuple[str, dict[str, str], float]]


def parse_exposition(text: str) -> Scrape:
    """(sample name, labels, value) of every sample in a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Scrape = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append((s.name, dict(s.labels), float(s.value)))
    return out


def _values(scrape: Scrape, name: str, **match: str) -> list[tuple[dict[str, str], float]]:
    return [
        (labels, value)
        for n, labels, value in scrape
        if n == name and all(labels.get(k) == v for k, v in match.items()) and not math.isnan(value)
    ]


def _sum(scrape: Scrape, name: str, **match: str) -> float | None:
    found = _values(scrape, name, **match)
    return sum(v for _, v in found) if found else None


def _max(scrape: Scrape, name: str, **match: str) -> float | None:
    found = _values(scrape, name, **match)
    return max(v for _, v in found) if found else None


def share_over(buckets: Mapping[float, float], threshold: float) -> float | None:
    """Share of a histogram's observations above ``threshold`` (cumulative counts by bound).

    Interpolated inside the bucket that holds the threshold, as histogram_quantile
    assumes (:func:`inferwatch.report.model.share_within`); None with no observations.
    """
    from inferwatch.report.model import share_within

    within = share_within(threshold, tuple(sorted(buckets.items())))
    return None if within is None else max(0.0, 1.0 - within)


def _buckets(scrape: Scrape, name: str, **match: str) -> dict[float, float]:
    """Cumulative counts by upper bound of one histogram, summed over its other labels."""
    out: dict[float, float] = {}
    for labels, value in _values(scrape, f"{name}_bucket", **match):
        try:
            le = float(labels.get("le", ""))
        except ValueError:
            continue
        out[le] = out.get(le, 0.0) + value
    return out


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _maximum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def pictures_from_scrapes(
    scrapes: Sequence[tuple[float, Scrape]], instance: str
) -> list[WorkerPicture]:
    """Each worker's picture from one agent's expositions read at the given unix times.

    Gauges are averaged over the samples (utilization, queue, running) or
    their peak kept (VRAM, KV cache, queue and batch peaks); window quantiles,
    the queue slope and the prefix-cache hit ratio come from the last sample
    (the agent already computes them over its stats window). Rates come from
    counter deltas when the samples span ``RATE_MIN_SPAN`` seconds, else from
    the counter's total over the worker's uptime.
    """
    if not scrapes:
        return []
    first_t, first = scrapes[0]
    last_t, last = scrapes[-1]
    span = last_t - first_t
    workers: dict[str, None] = {}
    for _, scrape in scrapes:
        for name, labels, _value in scrape:
            if name in ("inferwatch_target_up", "inferwatch_worker_info") and "worker" in labels:
                workers.setdefault(labels["worker"], None)
    all_gpus = sorted({labels["gpu"] for labels, _ in _values(last, "inferwatch_gpu_up")})
    pictures = []
    for worker in workers:
        gpus = sorted(
            {
                labels["gpu"]
                for _, scrape in scrapes
                for labels, _ in _values(
                    scrape, "inferwatch_gpu_process_memory_used_bytes", worker=worker
                )
                if "gpu" in labels
            }
        )
        if not gpus and len(workers) == 1:
            gpus = all_gpus  # one worker on this agent: its GPUs are the agent's

        def gpu_mean(scrape: Scrape, metric: str, gpus: list[str] = gpus) -> float | None:
            return _mean(_max(scrape, metric, gpu=g) for g in gpus)

        def gpu_max(scrape: Scrape, metric: str, gpus: list[str] = gpus) -> float | None:
            return _maximum(_max(scrape, metric, gpu=g) for g in gpus)

        def quantile(metric: str, q: str, worker: str = worker) -> float | None:
            return _max(last, metric, worker=worker, quantile=q)

        info = _values(last, "inferwatch_worker_info", worker=worker)
        info_labels = info[0][0] if info else {}
        model = engine = ""
        for labels, _ in _values(last, "inferwatch_requests_running", worker=worker) or [
            (info_labels, 0.0)
        ]:
            model = labels.get("model", "") or model
            engine = labels.get("engine", "") or engine
        flags = {k: info_labels[k] for k in FLAG_LABELS if info_labels.get(k)}
        queue = [_sum(s, "inferwatch_queue_depth", worker=worker) for _, s in scrapes]
        running = [_sum(s, "inferwatch_requests_running", worker=worker) for _, s in scrapes]
        start = _max(last, "inferwatch_worker_start_time_seconds", worker=worker)
        uptime = last_t - start if start is not None else None

        def rate(metric: str, worker: str = worker, uptime: float | None = uptime) -> float | None:
            end = _sum(last, metric, worker=worker)
            if end is None:
                return None
            begin = _sum(first, metric, worker=worker)
            if span >= RATE_MIN_SPAN and begin is not None and end >= begin:
                return (end - begin) / span
            if uptime is not None and uptime > 0:
                return end / uptime
            return None

        def mean_of(metric: str, worker: str = worker) -> float | None:
            total, count = (
                _sum(last, f"{metric}_sum", worker=worker),
                _sum(last, f"{metric}_count", worker=worker),
            )
            if total is None or not count:
                return None
            t0, c0 = (
                _sum(first, f"{metric}_sum", worker=worker),
                _sum(first, f"{metric}_count", worker=worker),
            )
            if span >= RATE_MIN_SPAN and t0 is not None and c0 is not None and count > c0:
                return (total - t0) / (count - c0)
            return total / count

        prompts = _buckets(last, "inferwatch_prompt_length_tokens", worker=worker)
        before = _buckets(first, "inferwatch_prompt_length_tokens", worker=worker)
        if span >= RATE_MIN_SPAN and before.keys() == prompts.keys():
            grown = {le: prompts[le] - before[le] for le in prompts}
            if all(v >= 0 for v in grown.values()) and any(grown.values()):
                prompts = grown  # the prompts of the sampled span, else all since start
        long_share = share_over(prompts, LONG_PROMPT_TOKENS) if prompts else None

        warmup = None
        ready = _max(last, "inferwatch_worker_ready", worker=worker)
        if ready is not None:
            warmup = WarmupState(
                ready=ready >= 1,
                deadline_exceeded=(
                    _max(last, "inferwatch_warmup_deadline_exceeded", worker=worker) or 0
                )
                >= 1,
                cold_ttft=_max(last, "inferwatch_warmup_ttft_seconds", worker=worker, phase="cold"),
                warm_ttft=_max(last, "inferwatch_warmup_ttft_seconds", worker=worker, phase="warm"),
            )
        pictures.append(
            WorkerPicture(
                worker=worker,
                instance=instance,
                model=model,
                engine=engine,
                gpus=tuple(gpus),
                gpu_utilization=_mean(
                    gpu_mean(s, "inferwatch_gpu_utilization_ratio") for _, s in scrapes
                ),
                vram_used_ratio=_maximum(
                    gpu_max(s, "inferwatch_gpu_memory_used_ratio") for _, s in scrapes
                ),
                ttft_p50=quantile("inferwatch_ttft_quantile_seconds", "0.5"),
                ttft_p95=quantile("inferwatch_ttft_quantile_seconds", "0.95"),
                ttft_p99=quantile("inferwatch_ttft_quantile_seconds", "0.99"),
                e2e_p50=quantile("inferwatch_e2e_latency_quantile_seconds", "0.5"),
                e2e_p99=quantile("inferwatch_e2e_latency_quantile_seconds", "0.99"),
                tpot_p99=quantile("inferwatch_tpot_quantile_seconds", "0.99"),
                queue_depth=_mean(queue),
                queue_depth_max=_maximum(queue),
                queue_slope=_sum(last, "inferwatch_queue_depth_slope", worker=worker),
                queue_time_mean=mean_of("inferwatch_queue_time_seconds"),
                running=_mean(running),
                running_max=_maximum(running),
                max_num_seqs=_max(last, "inferwatch_max_num_seqs", worker=worker),
                kv_usage=_maximum(
                    _max(s, "inferwatch_kv_cache_usage_ratio", worker=worker) for _, s in scrapes
                ),
                prefix_hit_ratio=_max(last, "inferwatch_prefix_cache_hit_ratio", worker=worker),
                preemption_rate=rate("inferwatch_preemptions_total"),
                request_rate=rate("inferwatch_requests_finished_total"),
                long_prompt_share=long_share,
                uptime_seconds=uptime,
                flags=flags,
                warmup=warmup,
            )
        )
    return name_pictures(pictures)


def read_agent(url: str, samples: int, every: float, timeout: float = 10.0) -> list[WorkerPicture]:
    """Scrape an agent ``samples`` times, ``every`` seconds apart, and build the pictures."""
    from urllib.parse import urlsplit

    base = url.rstrip("/")
    target = base if base.endswith("/metrics") else base + "/metrics"
    scrapes: list[tuple[float, Scrape]] = []
    for i in range(samples):
        if i:
            time.sleep(every)
        try:
            with urllib.request.urlopen(target, timeout=timeout) as resp:
                text = resp.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"cannot read {target}: {reason}") from None
        try:
            scrapes.append((time.time(), parse_exposition(text)))
        except ValueError as exc:
            raise Unreachable(f"{target} is not a Prometheus exposition: {exc}") from None
    parts = urlsplit(base)
    return pictures_from_scrapes(scrapes, parts.netloc or base)


class Unreachable(Exception):
    """The agent or Prometheus did not answer (exit code 3)."""


# --------------------------------------------------------------------------- from Prometheus


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def prometheus_queries(selector: str, window: str) -> dict[str, str]:
    """The instant queries (evaluated at the end of the range) behind each picture field."""
    s = selector

    def hq(q: float, metric: str) -> str:
        return (
            f"histogram_quantile({q}, sum by (instance, worker, le) "
            f"(increase({metric}_bucket{s}[{window}])))"
        )

    def by(fn: str, inner: str, agg: str = "sum") -> str:
        return f"{agg} by (instance, worker) ({fn}({inner}{s}[{window}]))"

    return {
        "ttft_p50": hq(0.5, "inferwatch_ttft_seconds"),
        "ttft_p95": hq(0.95, "inferwatch_ttft_seconds"),
        "ttft_p99": hq(0.99, "inferwatch_ttft_seconds"),
        "e2e_p50": hq(0.5, "inferwatch_e2e_latency_seconds"),
        "e2e_p99": hq(0.99, "inferwatch_e2e_latency_seconds"),
        "tpot_p99": hq(0.99, "inferwatch_tpot_seconds"),
        "queue_depth": by("avg_over_time", "inferwatch_queue_depth"),
        "queue_depth_max": by("max_over_time", "inferwatch_queue_depth"),
        "queue_slope": by("avg_over_time", "inferwatch_queue_depth_slope"),
        "queue_time_mean": f"{by('rate', 'inferwatch_queue_time_seconds_sum')} / "
        f"{by('rate', 'inferwatch_queue_time_seconds_count')}",
        "running": by("avg_over_time", "inferwatch_requests_running"),
        "running_max": by("max_over_time", "inferwatch_requests_running"),
        "max_num_seqs": by("max_over_time", "inferwatch_max_num_seqs", "max"),
        "kv_usage": by("max_over_time", "inferwatch_kv_cache_usage_ratio", "max"),
        "prefix_hit_ratio": by("avg_over_time", "inferwatch_prefix_cache_hit_ratio", "avg"),
        "preemption_rate": by("rate", "inferwatch_preemptions_total"),
        "request_rate": by("rate", "inferwatch_requests_finished_total"),
        "start_time": by("max_over_time", "inferwatch_worker_start_time_seconds", "max"),
        "target_up": by("max_over_time", "inferwatch_target_up", "max"),
        "ready": by("last_over_time", "inferwatch_worker_ready", "max"),
        "deadline": by("last_over_time", "inferwatch_warmup_deadline_exceeded", "max"),
        # the rest keep labels the join needs
        "identity": f"group by (instance, worker, model, engine) "
        f"(last_over_time(inferwatch_requests_running{s}[{window}]))",
        "info": f"last_over_time(inferwatch_worker_info{s}[{window}])",
        "warmup_ttft": f"max by (instance, worker, phase) "
        f"(last_over_time(inferwatch_warmup_ttft_seconds{s}[{window}]))",
        "gpu_utilization": f"avg_over_time(inferwatch_gpu_utilization_ratio{s}[{window}])",
        "vram": f"max_over_time(inferwatch_gpu_memory_used_ratio{s}[{window}])",
        "prompt_buckets": f"sum by (instance, worker, le) "
        f"(increase(inferwatch_prompt_length_tokens_bucket{s}[{window}]))",
        "gpu_workers": f"max by (instance, gpu, worker) "
        f"(max_over_time(inferwatch_gpu_process_memory_used_bytes{s}[{window}]))",
    }


def read_prometheus(
    url: str, start: float, end: float, selector: str, timeout: float = 60.0
) -> list[WorkerPicture]:
    """Each worker's picture over ``[start, end]`` from a Prometheus-compatible API."""
    from inferwatch.report.promapi import PrometheusClient, PrometheusUnreachable, QueryError

    client = PrometheusClient(url, timeout=timeout)
    queries = prometheus_queries(selector, _duration(end - start))
    answers: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for name, query in queries.items():
            answers[name] = [(s.labels, s.value) for s in client.instant(query, end)]
    except PrometheusUnreachable as exc:
        raise Unreachable(str(exc)) from None
    except QueryError as exc:
        raise Unreachable(str(exc).splitlines()[0]) from None
    return pictures_from_answers(answers, end)


def pictures_from_answers(
    answers: Mapping[str, Sequence[tuple[Mapping[str, str], float]]], end: float
) -> list[WorkerPicture]:
    """Join the answers of :func:`prometheus_queries` into one picture per (instance, worker)."""

    def per_worker(name: str) -> dict[tuple[str, str], float]:
        return {
            (labels.get("instance", ""), labels["worker"]): value
            for labels, value in answers.get(name, ())
            if "worker" in labels and not math.isnan(value)
        }

    keys: dict[tuple[str, str], None] = {}
    for name in ("target_up", "identity", "info"):
        for labels, _ in answers.get(name, ()):
            if "worker" in labels:
                keys.setdefault((labels.get("instance", ""), labels["worker"]), None)
    gpu_workers: dict[tuple[str, str], set[str]] = {}
    for labels, _ in answers.get("gpu_workers", ()):
        if "worker" in labels and "gpu" in labels:
            key = (labels.get("instance", ""), labels["worker"])
            gpu_workers.setdefault(key, set()).add(labels["gpu"])
    util = {
        (lb.get("instance", ""), lb.get("gpu", "")): v
        for lb, v in answers.get("gpu_utilization", ())
    }
    vram = {(lb.get("instance", ""), lb.get("gpu", "")): v for lb, v in answers.get("vram", ())}
    fields_ = {
        name: per_worker(name)
        for name in (
            "ttft_p50",
            "ttft_p95",
            "ttft_p99",
            "e2e_p50",
            "e2e_p99",
            "tpot_p99",
            "queue_depth",
            "queue_depth_max",
            "queue_slope",
            "queue_time_mean",
            "running",
            "running_max",
            "max_num_seqs",
            "kv_usage",
            "prefix_hit_ratio",
            "preemption_rate",
            "request_rate",
        )
    }
    prompt_buckets: dict[tuple[str, str], dict[float, float]] = {}
    for labels, value in answers.get("prompt_buckets", ()):
        try:
            le = float(labels.get("le", ""))
        except ValueError:
            continue
        if "worker" in labels and not math.isnan(value):
            key = (labels.get("instance", ""), labels["worker"])
            prompt_buckets.setdefault(key, {})[le] = value
    start_time = per_worker("start_time")
    ready = per_worker("ready")
    deadline = per_worker("deadline")
    pictures = []
    for key in keys:
        instance, worker = key
        gpus = gpu_workers.get(key)
        if gpus is None:
            workers_here = [k for k in keys if k[0] == instance]
            gpus = (
                {g for (inst, g) in util if inst == instance} if len(workers_here) == 1 else set()
            )
        identity = next(
            (
                lb
                for lb, _ in answers.get("identity", ())
                if (lb.get("instance", ""), lb.get("worker")) == key
            ),
            {},
        )
        info = next(
            (
                lb
                for lb, _ in answers.get("info", ())
                if (lb.get("instance", ""), lb.get("worker")) == key
            ),
            {},
        )
        warmup = None
        if key in ready:
            ttfts = {
                lb.get("phase"): v
                for lb, v in answers.get("warmup_ttft", ())
                if (lb.get("instance", ""), lb.get("worker")) == key
            }
            warmup = WarmupState(
                ready=ready[key] >= 1,
                deadline_exceeded=deadline.get(key, 0) >= 1,
                cold_ttft=ttfts.get("cold"),
                warm_ttft=ttfts.get("warm"),
            )
        values: dict[str, Any] = {name: table.get(key) for name, table in fields_.items()}
        picture = WorkerPicture(
            worker=worker,
            instance=instance,
            model=identity.get("model", "") or info.get("model", ""),
            engine=identity.get("engine", "") or info.get("engine", ""),
            gpus=tuple(sorted(gpus)),
            gpu_utilization=_mean(util.get((instance, g)) for g in gpus),
            vram_used_ratio=_maximum(vram.get((instance, g)) for g in gpus),
            uptime_seconds=end - start_time[key] if key in start_time else None,
            long_prompt_share=(
                share_over(prompt_buckets[key], LONG_PROMPT_TOKENS)
                if key in prompt_buckets
                else None
            ),
            flags={k: info[k] for k in FLAG_LABELS if info.get(k)},
            warmup=warmup,
        )
        pictures.append(replace(picture, **values))
    return name_pictures(pictures)


# --------------------------------------------------------------------------- the rules


@dataclass(frozen=True)
class Evidence:
    """One number behind a recommendation, with the threshold it crossed (if any)."""

    name: str
    value: float
    unit: str = ""
    relation: str = ""
    threshold: float | None = None
    #: thresholds.yaml key of the threshold
    key: str | None = None
    worker: str | None = None

    def text(self) -> str:
        who = f"{self.worker}: " if self.worker else ""
        out = f"{who}{self.name} {fmt(self.value, self.unit)}"
        if self.threshold is not None:
            out += f" {self.relation} {fmt(self.threshold, self.unit)}"
            if self.key:
                out += f" ({self.key})"
        return out

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["text"] = self.text()
        return out


@dataclass(frozen=True)
class Recommendation:
    id: str
    #: the guide's loop (1-5), or None for advice outside the loops
    loop: int | None
    title: str
    workers: tuple[str, ...]
    model: str
    #: lower is more urgent
    priority: int
    #: how far past its threshold (for ranking within a priority)
    score: float
    evidence: tuple[Evidence, ...]
    actions: tuple[str, ...]
    guide: str

    def as_dict(self, rank: int) -> dict[str, Any]:
        return {
            "rank": rank,
            "id": self.id,
            "loop": self.loop,
            "title": self.title,
            "workers": list(self.workers),
            "model": self.model,
            "evidence": [e.as_dict() for e in self.evidence],
            "actions": list(self.actions),
            "guide": self.guide,
        }


PRIORITY = {
    "scale_out": 0,
    "vram": 1,
    "warmup": 2,
    "long_context_pool": 3,
    "spread": 4,
    "consolidate": 5,
}


def fmt(value: float, unit: str) -> str:
    """A number for people: ratios as percent, seconds in ms below one second."""
    if unit == "ratio":
        return f"{value * 100:.0f}%"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.2f} s"
    if unit == "x":
        return f"{value:.1f}x"
    if unit:
        return f"{value:.3g} {unit}"
    return f"{value:.3g}"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def latency_ok(p: WorkerPicture, t: Thresholds) -> bool:
    """TTFT P95 under the warm-up line and P99 under the SLO (unknown counts as fine)."""
    p95_ok = p.ttft_p95 is None or p.ttft_p95 <= t.ttft.warmup_p95_seconds
    p99_ok = p.ttft_p99 is None or p.ttft_p99 <= t.ttft.p99_slo_seconds
    return p95_ok and p99_ok


def _prefix_action(p: WorkerPicture, why: str) -> str | None:
    state = p.flags.get("prefix_caching", "unknown")
    if state == "false":
        return f"Prefix caching is off: add --enable-prefix-caching. {why}"
    if state == "true":
        return None
    return (
        "Make sure prefix caching is on (--enable-prefix-caching; the worker's launch flags "
        f"do not say). {why}"
    )


def rule_scale_out(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """Loop 4 and the 6 FAQ: a rising queue with full batches, or a queue over capacity."""
    cap = p.capacity()
    full_seqs = cap is not None and p.running_max is not None and p.running_max >= FULL_BATCH * cap
    full_kv = p.kv_usage is not None and p.kv_usage >= FULL_KV
    queue = p.queue_depth or 0.0
    rising = p.queue_slope is not None and p.queue_slope > 0 and queue >= MIN_QUEUE
    over = bool(cap) and queue > (cap or 0) and queue >= MIN_QUEUE
    if not ((rising and (full_seqs or full_kv)) or over):
        return None
    ev = [Evidence("queue depth (mean)", queue, "requests")]
    if over and cap:
        ev[0] = Evidence("queue depth (mean)", queue, "requests", ">", cap, "max_num_seqs")
    if p.queue_slope is not None:
        ev.append(Evidence("queue trend", p.queue_slope, "requests/s", ">", 0.0))
    if cap and p.running_max is not None:
        ev.append(Evidence("running (peak)", p.running_max, "requests", "of", cap, "max_num_seqs"))
    if p.kv_usage is not None:
        ev.append(Evidence("KV cache usage (peak)", p.kv_usage, "ratio"))
    if p.gpu_utilization is not None:
        ev.append(Evidence("GPU utilization", p.gpu_utilization, "ratio"))
    actions = [
        f"Scale out: add a replica of {p.model or 'this model'} behind the load balancer. The "
        "queue is the leading indicator: act on it before the latency alerts fire.",
        "Or rate-limit at the gateway until capacity catches up, so the queue stops growing "
        "and client time-outs do not turn into retry storms.",
    ]
    if full_kv or (p.vram_used_ratio or 0) >= t.vram.scale_above:
        actions.append(
            "Do not raise --max-num-seqs: the KV cache is full, more sequences would only be "
            "preempted."
        )
    elif (
        cap
        and p.gpu_utilization is not None
        and p.gpu_utilization < t.gpu_utilization.scale_review_above
    ):
        actions.append(
            f"The batch is full but the GPU is at {fmt(p.gpu_utilization, 'ratio')}: a larger "
            f"batch than --max-num-seqs {cap:g} may fit; check `inferwatch advise capacity` "
            "first."
        )
    return Recommendation(
        "scale_out",
        4,
        "The queue is rising with full batches: scale out or rate-limit",
        (p.label,),
        p.model,
        PRIORITY["scale_out"],
        queue / max(1.0, cap or 1.0),
        tuple(ev),
        tuple(actions),
        "6.2 loop 4, 4.2, 6 FAQ",
    )


def rule_vram(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """Loop 3: VRAM (or the KV cache) near its limit, and not a healthy squeeze (4.2)."""
    v = t.vram
    vram, kv = p.vram_used_ratio, p.kv_usage
    high = (vram is not None and vram >= v.scale_above) or (kv is not None and kv >= v.scale_above)
    # vLLM reserves its KV pool at start, so NVML shows a full card on an idle worker;
    # a KV cache below the squeeze line says the memory is not actually short
    if kv is not None and kv < v.squeeze_above:
        high = False
    if not high:
        return None
    preempting = p.preemption_rate is not None and p.preemption_rate > 0
    slow = p.ttft_p99 is not None and p.ttft_p99 > v.squeeze_p99_ok_seconds
    if not (preempting or slow):
        return None  # a healthy squeeze: no action (4.2)
    ev = []
    if vram is not None:
        ev.append(
            Evidence(
                "VRAM used (peak)",
                vram,
                "ratio",
                ">=" if vram >= v.scale_above else "<",
                v.scale_above,
                "vram.scale_above",
            )
        )
    if kv is not None:
        ev.append(
            Evidence(
                "KV cache usage (peak)", kv, "ratio", ">=", v.squeeze_above, "vram.squeeze_above"
            )
        )
    if preempting and p.preemption_rate is not None:
        ev.append(Evidence("preemptions", p.preemption_rate, "/s", ">", 0.0))
    if slow and p.ttft_p99 is not None:
        ev.append(
            Evidence(
                "TTFT P99",
                p.ttft_p99,
                "s",
                ">",
                v.squeeze_p99_ok_seconds,
                "vram.squeeze_p99_ok_seconds",
            )
        )
    actions = []
    prefix = _prefix_action(
        p, "Requests that share a system prompt then share its KV blocks (30% or more saved)."
    )
    if prefix:
        actions.append(prefix)
    actions.append(
        "Store the KV cache in FP8: --kv-cache-dtype fp8 about halves it (accuracy loss "
        "usually under 0.5%)."
    )
    gmu = p.flag_number("gpu_memory_utilization")
    if gmu is None:
        actions.append(
            f"Set --gpu-memory-utilization {GPU_MEMORY_UTILIZATION} for headroom: PyTorch's "
            "temporary allocations and the CUDA context need room outside the KV pool."
        )
    elif gmu > GPU_MEMORY_UTILIZATION:
        actions.append(
            f"Lower --gpu-memory-utilization from {gmu:g} to {GPU_MEMORY_UTILIZATION} for "
            "headroom: PyTorch's temporary allocations and the CUDA context need room outside "
            "the KV pool."
        )
    cap = p.capacity()
    if cap:
        lower = max(1, math.floor(cap * SEQS_CUT))
        actions.append(
            f"If memory must come down now, lower --max-num-seqs first (from {cap:g} to "
            f"{lower}) rather than turning prefix caching off: prefix caching saves more than "
            "it costs."
        )
    else:
        actions.append(
            "If memory must come down now, lower --max-num-seqs first rather than turning "
            "prefix caching off: prefix caching saves more than it costs."
        )
    return Recommendation(
        "vram",
        3,
        "VRAM is near its limit: make the KV cache smaller before it runs out",
        (p.label,),
        p.model,
        PRIORITY["vram"],
        max(vram or 0.0, kv or 0.0),
        tuple(ev),
        tuple(actions),
        "6.2 loop 3, 4.2, 5.1, 2.3",
    )


def rule_warmup(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """Loop 2: TTFT P95 above the warm-up line while the GPU is not busy."""
    line = t.ttft.warmup_p95_seconds
    if p.ttft_p95 is None or p.ttft_p95 <= line:
        return None
    idle_line = t.gpu_utilization.idle_below
    if p.gpu_utilization is not None:
        idle = p.gpu_utilization < idle_line
    else:
        idle = p.queue_depth is not None and p.queue_depth < MIN_QUEUE
    if not idle:
        return None
    queued = p.queue_time_mean
    if queued is not None and queued >= QUEUE_SHARE * p.ttft_p95:
        return None  # the first tokens waited in the queue: a load problem, not a cold start
    ev = [Evidence("TTFT P95", p.ttft_p95, "s", ">", line, "ttft.warmup_p95_seconds")]
    if p.gpu_utilization is not None:
        ev.append(
            Evidence(
                "GPU utilization",
                p.gpu_utilization,
                "ratio",
                "<",
                idle_line,
                "gpu_utilization.idle_below",
            )
        )
    else:
        ev.append(Evidence("queue depth (mean)", p.queue_depth or 0.0, "requests", "<", MIN_QUEUE))
    if queued is not None:
        ev.append(Evidence("queue time (mean)", queued, "s", "<", QUEUE_SHARE * p.ttft_p95))
    if p.uptime_seconds is not None and p.uptime_seconds < t.cold_start.within:
        ev.append(
            Evidence(
                "worker uptime",
                p.uptime_seconds,
                "s",
                "<",
                t.cold_start.within,
                "cold_start.within",
            )
        )
    if p.prefix_hit_ratio is not None:
        ev.append(Evidence("prefix cache hit ratio", p.prefix_hit_ratio, "ratio"))
    actions = []
    gate = p.warmup
    if gate is None:
        actions.append(
            "Warm the worker up before it takes traffic: turn on the agent's warm-up gate "
            "(`warmup: {enabled: true}` in its configuration; /readyz stays 503 until the "
            "worker has answered its warm-up requests, see docs/warmup.md), or send one "
            "`max_tokens: 1` request once /health answers. Unwarmed, a first call took 4.8 s "
            "against 180 ms warm."
        )
    elif gate.deadline_exceeded:
        actions.append(
            "The warm-up gate opened on its deadline without warming this worker: see "
            f'inferwatch_warmup_failures_total{{worker="{p.worker}"}} and the agent\'s log.'
        )
    elif gate.cold_ttft is not None and gate.warm_ttft is not None:
        ev.append(Evidence("warm-up TTFT cold", gate.cold_ttft, "s"))
        ev.append(Evidence("warm-up TTFT warm", gate.warm_ttft, "s"))
        actions.append(
            "The warm-up gate warmed this worker, so the slow first tokens come from the "
            "prompts themselves: long system prompts computed on every request."
        )
    why = (
        "List the long system prompts under warmup.system_prompts so the cache holds them "
        "before the first user arrives (first tokens 30-60% sooner)."
    )
    prefix = _prefix_action(p, why)
    actions.append(prefix or f"Prefix caching is on. {why}")
    return Recommendation(
        "warmup",
        2,
        "First tokens are slow while the GPU idles: warm the worker up",
        (p.label,),
        p.model,
        PRIORITY["warmup"],
        p.ttft_p95 / line,
        tuple(ev),
        tuple(actions),
        "6.2 loop 2, 5.2, 2.3",
    )


def rule_long_tail(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """Loop 5 (5.3, 6.1): end-to-end P99 at least tail_ratio times P50."""
    if p.e2e_p50 is None or p.e2e_p99 is None or p.e2e_p50 <= 0:
        return None
    ratio = p.e2e_p99 / p.e2e_p50
    if ratio < t.latency.tail_ratio:
        return None
    ev = [
        Evidence("end-to-end P50", p.e2e_p50, "s"),
        Evidence("end-to-end P99", p.e2e_p99, "s"),
        Evidence("P99 / P50", ratio, "x", ">=", t.latency.tail_ratio, "latency.tail_ratio"),
    ]
    share = p.long_prompt_share
    if share is not None:
        ev.append(Evidence(f"prompts over {LONG_PROMPT_TOKENS:,} tokens", share, "ratio"))
    pool = (
        f"{fmt(share, 'ratio')} of this worker's prompts are over {LONG_PROMPT_TOKENS:,} "
        "tokens: route them"
        if share is not None and share > 0
        else f"route requests above a token budget (for example prompts over "
        f"{LONG_PROMPT_TOKENS:,} tokens)"
    )
    actions = [
        f"Give long-context traffic its own pool: {pool} to workers with their own "
        "--max-model-len and batching flags, and keep short chats on this pool.",
        "Route with least connections (nginx least_conn, HAProxy balance leastconn) so long "
        "requests gather on fewer workers instead of slowing every one of them.",
    ]
    if share is not None and share < 0.01:
        actions.insert(
            0,
            f"Almost no prompt is over {LONG_PROMPT_TOKENS:,} tokens, so the tail is not long "
            "contexts: look at the generation lengths (inferwatch_generation_length_tokens) "
            "and the queue time before splitting the pool.",
        )
    max_len = p.flag_number("max_model_len")
    if max_len:
        actions.append(
            f"This worker accepts up to {max_len:,.0f} tokens (--max-model-len {max_len:g}); "
            "the short pool can run a smaller --max-model-len and more sequences."
        )
    return Recommendation(
        "long_context_pool",
        5,
        "P99 is far above P50: split long-context requests into their own pool",
        (p.label,),
        p.model,
        PRIORITY["long_context_pool"],
        ratio / t.latency.tail_ratio,
        tuple(ev),
        tuple(actions),
        "6.2, 5.3, 6.1",
    )


def _load(p: WorkerPicture) -> float | None:
    if p.running is None and p.queue_depth is None:
        return None
    return (p.running or 0.0) + (p.queue_depth or 0.0)


def rule_spread(group: Sequence[WorkerPicture], t: Thresholds) -> Recommendation | None:
    """Loop 1: a model's GPUs average below idle_below, latency is fine, the load is uneven."""
    if len(group) < 2:
        return None
    util = _mean(p.gpu_utilization for p in group)
    if util is None or util >= t.gpu_utilization.idle_below:
        return None
    if not all(latency_ok(p, t) for p in group):
        return None
    ratio_line = t.load_imbalance.queue_ratio
    measure, unit = "requests", "req/s"
    loads = [p.request_rate for p in group]
    if any(v is None for v in loads):
        measure, unit = "in flight", "requests"
        loads = [_load(p) for p in group]
        if any(v is None for v in loads):
            return None
    known = [v or 0.0 for v in loads]
    busiest = max(range(len(group)), key=lambda i: known[i])
    others = [v for i, v in enumerate(known) if i != busiest]
    rest = sum(others) / len(others)
    top = known[busiest]
    if top <= 0 or (unit == "requests" and top < MIN_QUEUE):
        return None
    ratio = top / rest if rest > 0 else math.inf
    if ratio < ratio_line:
        return None
    ev = [
        Evidence(
            "GPU utilization (mean of the model's GPUs)",
            util,
            "ratio",
            "<",
            t.gpu_utilization.idle_below,
            "gpu_utilization.idle_below",
        ),
    ]
    for p, v in zip(group, known, strict=True):
        ev.append(Evidence(measure, v, unit, worker=p.label))
    if math.isfinite(ratio):
        ev.append(
            Evidence(
                "busiest / mean of the others",
                ratio,
                "x",
                ">=",
                ratio_line,
                "load_imbalance.queue_ratio",
            )
        )
    model = group[0].model
    return Recommendation(
        "spread",
        1,
        "GPUs idle while one worker takes most requests: fix the request spread",
        tuple(p.label for p in group),
        model,
        PRIORITY["spread"],
        min(ratio, 1e6) / ratio_line,
        tuple(ev),
        (
            "Route with least connections (nginx least_conn, HAProxy balance leastconn) "
            "instead of round-robin or random: a new request goes to the worker with the "
            "fewest open ones.",
            "Do not scale in yet: the busy worker would get busier. Check the spread first.",
            f"Or serve {model or 'the model'} from one vLLM instance across these GPUs "
            "(--data-parallel-size) so the engine balances its own ranks.",
        ),
        "6.2 loop 1, 5.3",
    )


def rule_consolidate(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """Outside the loops: a GPU in the waste band (6.1) with good latency."""
    util = p.gpu_utilization
    if util is None or util >= t.gpu_utilization.waste_below or not latency_ok(p, t):
        return None
    return Recommendation(
        "consolidate",
        None,
        "The GPU idles: share it or give it back",
        (p.label,),
        p.model,
        PRIORITY["consolidate"],
        (t.gpu_utilization.waste_below - util) / t.gpu_utilization.waste_below,
        (
            Evidence(
                "GPU utilization",
                util,
                "ratio",
                "<",
                t.gpu_utilization.waste_below,
                "gpu_utilization.waste_below",
            ),
        ),
        (
            "Put small models together: one GPU can run two or three workers, each with its "
            "own --gpu-memory-utilization share, or an A100/H100 can be split with MIG.",
            "Or scale in, keeping the warm-up gate on the replicas that start later.",
        ),
        "6.1, 2.1, 4.3",
    )


def advise(pictures: Sequence[WorkerPicture], t: Thresholds) -> list[Recommendation]:
    """Every recommendation for these workers, most urgent first."""
    recs: list[Recommendation] = []
    fired: dict[str, set[str]] = {p.key: set() for p in pictures}

    def add(rec: Recommendation | None, *ps: WorkerPicture) -> None:
        if rec is not None:
            recs.append(rec)
            for p in ps:
                fired[p.key].add(rec.id)

    for p in pictures:
        add(rule_scale_out(p, t), p)
        add(rule_vram(p, t), p)
        add(rule_warmup(p, t), p)
    for p in pictures:
        # a tail made by a queue or a cold start is that problem's, not the traffic mix's
        if not fired[p.key] & {"scale_out", "warmup"}:
            add(rule_long_tail(p, t), p)
    groups: dict[str, list[WorkerPicture]] = {}
    for p in pictures:
        groups.setdefault(p.model or p.key, []).append(p)
    for group in groups.values():
        add(rule_spread(group, t), *group)
    for p in pictures:
        if not fired[p.key]:
            add(rule_consolidate(p, t), p)
    recs.sort(key=lambda r: (r.priority, -r.score, r.workers))
    return recs


# --------------------------------------------------------------------------- output


def _finite(value: Any) -> Any:
    """``value`` with infinities and NaNs as None: JSON has no number for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def report_dict(
    pictures: Sequence[WorkerPicture],
    recs: Sequence[Recommendation],
    source: Mapping[str, Any],
    thresholds: str,
) -> dict[str, Any]:
    doc = {
        "source": dict(source),
        "thresholds": thresholds,
        "workers": [p.as_dict() for p in pictures],
        "recommendations": [r.as_dict(i + 1) for i, r in enumerate(recs)],
    }
    return dict(_finite(doc))


def _opt(value: float | None, unit: str) -> str:
    return "-" if value is None else fmt(value, unit)


def worker_rows(pictures: Sequence[WorkerPicture]) -> list[list[str]]:
    rows = []
    for p in pictures:
        cap = p.capacity()
        running = _opt(p.running_max, "")
        rows.append(
            [
                p.label,
                p.model or "-",
                _opt(p.gpu_utilization, "ratio"),
                _opt(p.vram_used_ratio, "ratio"),
                _opt(p.ttft_p95, "s"),
                f"{_opt(p.e2e_p50, 's')} / {_opt(p.e2e_p99, 's')}",
                _opt(p.queue_depth, ""),
                f"{running} / {cap:g}" if cap else running,
                _opt(p.kv_usage, "ratio"),
                " ".join(f"{k}={v}" for k, v in p.flags.items()) or "-",
            ]
        )
    return rows


WORKER_COLUMNS = [
    "worker",
    "model",
    "GPU util",
    "VRAM peak",
    "TTFT P95",
    "E2E P50 / P99",
    "queue",
    "running / max",
    "KV peak",
    "launch flags",
]


def render_text(
    pictures: Sequence[WorkerPicture], recs: Sequence[Recommendation], where: str
) -> str:
    lines = [f"inferwatch advise: {len(recs)} recommendation(s) from {where}", ""]
    if not recs:
        lines.append("No recommendation: every worker is within its thresholds.")
        lines.append("")
    for i, r in enumerate(recs, 1):
        loop = f"loop {r.loop}" if r.loop else "outside the loops"
        lines.append(f"{i}. {r.title}")
        lines.append(f"   workers: {', '.join(r.workers)}  ({loop}; guide {r.guide})")
        lines.append("   evidence:")
        lines += [f"     - {e.text()}" for e in r.evidence]
        lines.append("   do:")
        lines += [f"     - {a}" for a in r.actions]
        lines.append("")
    lines.append("Workers:")
    rows = [WORKER_COLUMNS, *worker_rows(pictures)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(WORKER_COLUMNS))]
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def render_rich(
    pictures: Sequence[WorkerPicture], recs: Sequence[Recommendation], where: str
) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]inferwatch advise[/bold]: {len(recs)} recommendation(s) from {escape(where)}"
    )
    if recs:
        table = Table(show_lines=True)
        for col in ("#", "recommendation", "evidence", "do"):
            table.add_column(col, overflow="fold")
        for i, r in enumerate(recs, 1):
            loop = f"loop {r.loop}" if r.loop else "outside the loops"
            table.add_row(
                str(i),
                f"[bold]{escape(r.title)}[/bold]\nworkers: {escape(', '.join(r.workers))}\n"
                f"[dim]{loop}; guide {r.guide}[/dim]",
                escape("\n".join(e.text() for e in r.evidence)),
                escape("\n".join(f"- {a}" for a in r.actions)),
            )
        console.print(table)
    else:
        console.print("No recommendation: every worker is within its thresholds.")
    workers = Table(title="Workers")
    for col in WORKER_COLUMNS:
        workers.add_column(col)
    for row in worker_rows(pictures):
        workers.add_row(*(escape(cell) for cell in row))
    console.print(workers)


def render_capacity(plan: CapacityPlan) -> str:
    lines = ["inferwatch advise capacity: the field guide's max-num-seqs estimate (2.3)", ""]
    lines += [f"  {step}" for step in plan.steps]
    lines += ["", f"Suggested: vllm serve ... {plan.flags()}", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- time


def parse_time(text: str, now: float, key: str) -> float:
    """Unix seconds from ``now``, ``now-1h``, ``-30m``, unix seconds or RFC 3339."""
    from inferwatch.pack.thresholds import parse_duration

    raw = text.strip()
    if raw == "now":
        return now
    for prefix in ("now-", "-"):
        if raw.startswith(prefix):
            seconds = parse_duration(raw[len(prefix) :])
            if seconds is None:
                break
            return now - seconds
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            SOURCE, key, "now, now-1h, -30m, unix seconds or RFC 3339 (2025-01-31T12:00:00Z)", text
        ) from None
    if stamp.tzinfo is None:
        raise ConfigError(SOURCE, key, "an RFC 3339 time with a zone (Z or +01:00)", text)
    return stamp.timestamp()


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agent-url",
        metavar="URL",
        help="read an agent's /metrics (e.g. http://127.0.0.1:10127)",
    )
    parser.add_argument(
        "--prometheus-url", metavar="URL", help="read Prometheus over --start .. --end instead"
    )
    parser.add_argument("--start", metavar="T", help="range start (default now-1h)")
    parser.add_argument("--end", metavar="T", help="range end (default now)")
    parser.add_argument(
        "--selector",
        metavar="MATCHERS",
        help="label matchers of the agents' series (default: pack.agent_selector of thresholds)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=3,
        metavar="N",
        help="agent mode: scrapes to average (default 3)",
    )
    parser.add_argument(
        "--every",
        metavar="DURATION",
        default="1s",
        help="agent mode: time between scrapes (default 1s)",
    )
    parser.add_argument("--worker", metavar="NAME", help="only recommendations for this worker")
    parser.add_argument("--json", action="store_true", help="JSON for tools")
    parser.add_argument(
        "--thresholds", metavar="FILE", help="thresholds.yaml overrides (default: packaged)"
    )
    sub = parser.add_subparsers(dest="advise_mode", metavar="MODE")
    cap = sub.add_parser(
        "capacity",
        help="the guide's max-num-seqs / max-num-batched-tokens arithmetic",
        description="Per-sequence KV size, the field guide's estimate "
        "(VRAM x 0.8 - weights) / KV per sequence, and the flags it suggests. Sizes are "
        "GiB unless suffixed (24, 24GiB, 80GB, 512MiB).",
    )
    cap.add_argument("--gpu-memory", metavar="SIZE", required=True, help="GPU memory (24 = 24 GiB)")
    cap.add_argument("--model-config", metavar="FILE", help="the model's config.json")
    cap.add_argument("--layers", type=int, metavar="N", help="num_hidden_layers")
    cap.add_argument("--kv-heads", type=int, metavar="N", help="num_key_value_heads")
    cap.add_argument("--head-dim", type=int, metavar="N", help="head_dim")
    cap.add_argument("--dtype", metavar="DTYPE", help="weights dtype (default: config.json's)")
    cap.add_argument(
        "--weights", metavar="SIZE", help="weights size (default: estimated from config.json)"
    )
    cap.add_argument("--context", type=int, metavar="TOKENS", help="expected tokens per sequence")
    cap.add_argument(
        "--kv-dtype",
        metavar="DTYPE",
        default="auto",
        help="KV cache dtype: auto (the weights' dtype), fp16, bf16, fp8 (default auto)",
    )
    cap.add_argument(
        "--kv-per-seq", metavar="SIZE", help="KV per sequence, instead of shape and context"
    )
    cap.add_argument(
        "--usable", type=float, default=0.8, help="share of VRAM for weights + KV (default 0.8)"
    )
    cap.add_argument("--json", action="store_true", help="JSON for tools")


def capacity_input(args: argparse.Namespace) -> Any:
    from inferwatch.capacity import (
        CapacityInput,
        ModelShape,
        dtype_bytes,
        kv_bytes_per_token,
        parse_size,
        read_model_config,
    )

    src = SOURCE
    vram = parse_size(args.gpu_memory, src, "--gpu-memory")
    if not 0 < args.usable <= 1:
        raise ConfigError(src, "--usable", "a share in (0, 1]", args.usable)
    shape: ModelShape | None = None
    if args.model_config:
        shape = read_model_config(args.model_config)
    explicit = {"--layers": args.layers, "--kv-heads": args.kv_heads, "--head-dim": args.head_dim}
    if any(v is not None for v in explicit.values()):
        for flag, value in explicit.items():
            if value is None and shape is None:
                raise ConfigError(src, flag, "a value (with --layers, --kv-heads, --head-dim)")
            if value is not None and value <= 0:
                raise ConfigError(src, flag, "a whole number greater than zero", value)
        base = shape or ModelShape(layers=1, kv_heads=1, head_dim=1, dtype_bytes=2.0)
        shape = replace(
            base,
            layers=args.layers or base.layers,
            kv_heads=args.kv_heads or base.kv_heads,
            head_dim=args.head_dim or base.head_dim,
        )
    if shape is not None and args.dtype:
        shape = replace(
            shape, dtype=args.dtype, dtype_bytes=dtype_bytes(args.dtype, src, "--dtype")
        )
    kv_dtype = None
    kv_element = None
    per_token = None
    if shape is not None:
        if args.kv_dtype == "auto":
            kv_dtype, kv_element = shape.dtype, shape.dtype_bytes
        else:
            kv_dtype, kv_element = args.kv_dtype, dtype_bytes(args.kv_dtype, src, "--kv-dtype")
        if shape.mla_dims is not None:
            per_token = shape.layers * shape.mla_dims * kv_element
        else:
            per_token = kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, kv_element)
    if args.context is not None and args.context <= 0:
        raise ConfigError(src, "--context", "tokens greater than zero", args.context)
    if args.kv_per_seq:
        if per_token is not None and args.context is not None:
            raise UsageError("give either --kv-per-seq, or a model shape with --context, not both")
        per_seq = parse_size(args.kv_per_seq, src, "--kv-per-seq")
    elif per_token is not None:
        if args.context is None:
            raise ConfigError(
                src, "--context", "the expected tokens per sequence (prompt + output)"
            )
        per_seq = per_token * args.context
    else:
        raise UsageError(
            "give --kv-per-seq, or --model-config (or --layers, --kv-heads, --head-dim) with "
            "--context"
        )
    if args.weights:
        weights = parse_size(args.weights, src, "--weights")
        weights_source = "given"
    else:
        params = shape.parameters() if shape is not None else None
        if params is None or shape is None:
            raise ConfigError(
                src,
                "--weights",
                "the weights size (estimated only from a dense model's config.json)",
            )
        weights = params * shape.dtype_bytes
        weights_source = f"~{params / 1e9:.2f}B parameters x {shape.dtype_bytes:g} B, estimated"
    return CapacityInput(
        vram_bytes=vram,
        weights_bytes=weights,
        weights_source=weights_source,
        kv_per_sequence=per_seq,
        context_tokens=args.context,
        kv_per_token=per_token,
        usable=args.usable,
        shape=shape,
        kv_dtype=kv_dtype,
        kv_element_bytes=kv_element,
    )


def main_capacity(args: argparse.Namespace) -> int:
    from inferwatch.capacity import plan_capacity

    plan = plan_capacity(capacity_input(args))
    if args.json:
        print(json.dumps(plan.as_dict(), indent=2))
    else:
        sys.stdout.write(render_capacity(plan))
    return 0


def main(args: argparse.Namespace) -> int:
    if getattr(args, "advise_mode", None) == "capacity":
        return main_capacity(args)
    from inferwatch.config import parse_duration
    from inferwatch.pack.thresholds import load_thresholds

    if bool(args.agent_url) == bool(args.prometheus_url):
        raise UsageError("give one of --agent-url URL or --prometheus-url URL (or `capacity`)")
    if args.samples < 1:
        raise ConfigError(SOURCE, "--samples", "a whole number >= 1", args.samples)
    every = parse_duration(args.every, SOURCE, "--every")
    thresholds = load_thresholds(args.thresholds)
    source: dict[str, Any]
    try:
        if args.agent_url:
            if args.start or args.end:
                raise UsageError("--start and --end need --prometheus-url")
            pictures = read_agent(args.agent_url, args.samples, every)
            source = {"kind": "agent", "url": args.agent_url, "samples": args.samples}
            where = f"{args.agent_url} ({args.samples} sample(s))"
        else:
            now = time.time()
            end = parse_time(args.end, now, "--end") if args.end else now
            start = parse_time(args.start, now, "--start") if args.start else end - 3600
            if start >= end:
                raise ConfigError(SOURCE, "--start", f"a time before --end ({end:.0f})", args.start)
            selector = "{" + args.selector + "}" if args.selector else thresholds.pack.selector()
            pictures = read_prometheus(args.prometheus_url, start, end, selector)
            source = {"kind": "prometheus", "url": args.prometheus_url, "start": start, "end": end}
            where = f"{args.prometheus_url} over {_age(end - start)}"
    except Unreachable as exc:
        print(f"inferwatch advise: error: {exc}", file=sys.stderr)
        return 3
    recs = advise(pictures, thresholds)
    if args.worker:
        if not any(args.worker in (p.worker, p.label) for p in pictures):
            known = ", ".join(p.label for p in pictures) or "none"
            raise ConfigError(SOURCE, "--worker", f"a worker in the data ({known})", args.worker)
        names = {p.label for p in pictures if args.worker in (p.worker, p.label)}
        recs = [r for r in recs if names & set(r.workers)]
        pictures = [p for p in pictures if p.label in names]
    if args.json:
        doc = report_dict(pictures, recs, source, thresholds.source)
        print(json.dumps(doc, indent=2, allow_nan=False))
    elif sys.stdout.isatty():
        render_rich(pictures, recs, where)
    else:
        sys.stdout.write(render_text(pictures, recs, where))
    return 0
