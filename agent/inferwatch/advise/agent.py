"""Pictures from an agent's ``/metrics``: a few samples, gauges averaged, rates from deltas."""

from __future__ import annotations

import itertools
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence

from inferwatch.advise.model import (
    FLAG_LABELS,
    Unreachable,
    WarmupState,
    WorkerPicture,
    name_pictures,
)
from inferwatch.engines.base import TTFT
from inferwatch.pack import loops as L

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


PROMPT_BUCKETS = "inferwatch_prompt_length_tokens_bucket"


def buckets_by_bound(scrape: Scrape, name: str, **match: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts by bound, summed over the other labels."""
    out: dict[float, float] = {}
    for labels, value in _values(scrape, name, **match):
        try:
            bound = float(labels.get("le", ""))
        except ValueError:
            continue
        out[bound] = out.get(bound, 0.0) + value
    return out


def bucket_increase(
    first: Mapping[float, float], last: Mapping[float, float]
) -> list[tuple[float, float]] | None:
    """``last - first`` per bound; None when a bucket went down (a restart in between)."""
    out = []
    for bound, end in last.items():
        begin = first.get(bound, 0.0)
        if end < begin:
            return None
        out.append((bound, end - begin))
    return out


def mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def maximum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


TTFT_BUCKETS = f"{TTFT}_bucket"


def since_start(scrape: Scrape, worker: str, q: float = 0.95) -> tuple[float | None, float | None]:
    """(the q-quantile of TTFT, the first tokens counted) over the worker's life: the
    engine's cumulative buckets as the agent passes them through (None, None without)."""
    from inferwatch.stats import histogram_quantile

    by_bound = buckets_by_bound(scrape, TTFT_BUCKETS, worker=worker)
    count = by_bound.get(math.inf)
    if not count:
        return None, None
    value = histogram_quantile(q, sorted(by_bound.items()))
    return (None if math.isnan(value) else value), count


def pictures_from_scrapes(
    scrapes: Sequence[tuple[float, Scrape]],
    instance: str,
    min_rate_span: float,
    cold_within: float | None = None,
) -> list[WorkerPicture]:
    """Each worker's picture from one agent's expositions read at the given unix times.

    Gauges are averaged over the samples (utilization, queue, running) or their peak
    kept (VRAM, KV cache, queue and batch peaks); window quantiles and the queue slope
    come from the last sample (the agent computes them over its stats window). Rates
    come from counter deltas between the first and the last sample, and only when
    those are at least ``min_rate_span`` seconds apart: a counter's total over the
    worker's uptime says nothing about now, so a shorter span gives no rate at all.

    The one lifetime figure: for a worker started less than ``cold_within`` seconds
    ago (``cold_start.within``), its TTFT P95 since the start, from the engine's
    cumulative buckets. That life is the cold-start window itself, and it holds the
    slow first tokens InferenceWorkerColdStart fired on after they left the agent's
    stats window.
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
            return mean(_max(scrape, metric, gpu=g) for g in gpus)

        def gpu_max(scrape: Scrape, metric: str, gpus: list[str] = gpus) -> float | None:
            return maximum(_max(scrape, metric, gpu=g) for g in gpus)

        def quantile(metric: str, q: str, worker: str = worker) -> float | None:
            return _max(last, metric, worker=worker, quantile=q)

        def rate(metric: str, worker: str = worker) -> float | None:
            end = _sum(last, metric, worker=worker)
            begin = _sum(first, metric, worker=worker)
            if end is None or begin is None or span < min_rate_span or end < begin:
                return None
            return (end - begin) / span

        def long_prompts(worker: str = worker) -> float | None:
            """The share of long prompts among those of the sampled span (never the lifetime)."""
            if span < min_rate_span:
                return None
            added = bucket_increase(
                buckets_by_bound(first, PROMPT_BUCKETS, worker=worker),
                buckets_by_bound(last, PROMPT_BUCKETS, worker=worker),
            )
            return L.long_prompt_share(added) if added else None

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
        starts = [
            _max(s, "inferwatch_worker_start_time_seconds", worker=worker) for _, s in scrapes
        ]
        seen_starts = [v for v in starts if v is not None]
        restarts = (
            float(sum(1 for a, b in itertools.pairwise(seen_starts) if b != a))
            if seen_starts
            else None
        )
        uptime = last_t - start if start is not None else None
        young_p95 = young_count = None
        if cold_within is not None and uptime is not None and uptime < cold_within:
            young_p95, young_count = since_start(last, worker)
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
        ttft, tpot, e2e = (
            "inferwatch_ttft_quantile_seconds",
            "inferwatch_tpot_quantile_seconds",
            "inferwatch_e2e_latency_quantile_seconds",
        )
        pictures.append(
            WorkerPicture(
                worker=worker,
                instance=instance,
                model=model,
                engine=engine,
                gpus=tuple(gpus),
                gpu_utilization=mean(
                    gpu_mean(s, "inferwatch_gpu_utilization_ratio") for _, s in scrapes
                ),
                vram_used_ratio=maximum(
                    gpu_max(s, "inferwatch_gpu_memory_used_ratio") for _, s in scrapes
                ),
                ttft_p50=quantile(ttft, "0.5"),
                ttft_p95=quantile(ttft, "0.95"),
                ttft_p99=quantile(ttft, "0.99"),
                tpot_p50=quantile(tpot, "0.5"),
                tpot_p99=quantile(tpot, "0.99"),
                e2e_p50=quantile(e2e, "0.5"),
                e2e_p99=quantile(e2e, "0.99"),
                queue_depth=mean(queue),
                queue_depth_max=maximum(queue),
                queue_slope=_sum(last, "inferwatch_queue_depth_slope", worker=worker),
                running=mean(running),
                running_max=maximum(running),
                max_num_seqs=_max(last, "inferwatch_max_num_seqs", worker=worker),
                kv_usage=maximum(
                    _max(s, "inferwatch_kv_cache_usage_ratio", worker=worker) for _, s in scrapes
                ),
                prefix_hit_ratio=_max(last, "inferwatch_prefix_cache_hit_ratio", worker=worker),
                preemption_rate=rate("inferwatch_preemptions_total"),
                request_rate=rate("inferwatch_requests_finished_total"),
                long_prompt_share=long_prompts(),
                uptime_seconds=uptime,
                restarts=restarts,
                xid_errors=xid_increase(first, last, gpus) if gpus else None,
                ttft_p95_since_start=young_p95,
                ttft_count_since_start=young_count,
                flags=flags,
                warmup=warmup,
            )
        )
    return name_pictures(pictures)


XID = "inferwatch_gpu_xid_errors_total"


def xid_increase(first: Scrape, last: Scrape, gpus: Sequence[str]) -> float:
    """XID errors on these GPUs between two scrapes (a series new in the last one counts
    from zero: the agent exports a GPU's XID counter from its first event on)."""
    total = 0.0
    for g in gpus:
        begin = {tuple(sorted(lab.items())): v for lab, v in _values(first, XID, gpu=g)}
        for lab, v in _values(last, XID, gpu=g):
            before = begin.get(tuple(sorted(lab.items())), 0.0)
            total += v - before if v >= before else v
    return total


def workers_of(scrape: Scrape) -> list[str]:
    """The workers an agent's scrape names (its targets and its workers' info)."""
    seen: dict[str, None] = {}
    for name, labels, _ in scrape:
        if name in ("inferwatch_target_up", "inferwatch_worker_info") and "worker" in labels:
            seen.setdefault(labels["worker"], None)
    return list(seen)


def sample_times(samples: int, every: float, min_span: float) -> list[float]:
    """Offsets of the scrapes from the first: ``samples`` of them (at least two), ``every``
    apart, stretched so that the first and the last are ``min_span`` apart at least."""
    n = max(2, samples)
    step = max(every, min_span / (n - 1))
    return [i * step for i in range(n)]


def metrics_url(url: str) -> str:
    """An agent's ``/metrics`` URL from its base URL (or the metrics URL itself)."""
    base = url.rstrip("/")
    return base if base.endswith("/metrics") else base + "/metrics"


def fetch_exposition(target: str, timeout: float) -> Scrape:
    """One scrape of ``target``, parsed; :class:`Unreachable` when it cannot be read or
    is no exposition."""
    try:
        with urllib.request.urlopen(target, timeout=timeout) as resp:
            text = resp.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"cannot read {target}: {getattr(exc, 'reason', exc)}") from None
    try:
        return parse_exposition(text)
    except ValueError as exc:
        raise Unreachable(f"{target} is not a Prometheus exposition: {exc}") from None


def read_agent(
    url: str,
    samples: int,
    every: float,
    min_span: float,
    timeout: float = 10.0,
    cold_within: float | None = None,
    check: Callable[[Scrape], object] | None = None,
) -> list[WorkerPicture]:
    """Scrape an agent over at least ``min_span`` seconds (see :func:`sample_times`);
    ``cold_within``: see :func:`pictures_from_scrapes`; ``check`` reads the first scrape
    before the others are waited for (it raises to refuse at once)."""
    from urllib.parse import urlsplit

    base = url.rstrip("/")
    target = metrics_url(url)
    scrapes: list[tuple[float, Scrape]] = []
    for offset in sample_times(samples, every, min_span):
        if scrapes:
            # from the first sample's own time stamp, so the span is never short
            delay = scrapes[0][0] + offset - time.time()
            if delay > 0:
                time.sleep(delay)
        scrape = fetch_exposition(target, timeout)
        scrapes.append((time.time(), scrape))
        if check is not None and len(scrapes) == 1:
            check(scrape)
    parts = urlsplit(base)
    return pictures_from_scrapes(scrapes, parts.netloc or base, min_span, cold_within)
