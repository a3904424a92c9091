"""Pictures from Prometheus: instant queries at the end of a range, over the whole range."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from inferwatch.advise.agent import maximum, mean
from inferwatch.advise.model import (
    FLAG_LABELS,
    PENDING,
    AlertSeen,
    AlertView,
    Unreachable,
    WarmupState,
    WorkerPicture,
    name_pictures,
)
from inferwatch.engines.base import E2E, TPOT, TTFT
from inferwatch.pack import loops as L

#: picture fields read per (instance, worker) straight from one query each
WORKER_FIELDS = (
    "ttft_p50",
    "ttft_p95",
    "ttft_p99",
    "tpot_p50",
    "tpot_p99",
    "e2e_p50",
    "e2e_p99",
    "queue_depth",
    "queue_depth_max",
    "queue_slope",
    "running",
    "running_max",
    "max_num_seqs",
    "kv_usage",
    "prefix_hit_ratio",
    "preemption_rate",
    "request_rate",
)


def duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def prometheus_queries(selector: str, window: str) -> dict[str, str]:
    """The instant queries (evaluated at the end of the range) behind each picture field."""
    s = selector

    def hq(q: float, metric: str, by: str = "instance, worker") -> str:
        return (
            f"histogram_quantile({q}, sum by ({by}, le) (increase({metric}_bucket{s}[{window}])))"
        )

    def by(fn: str, inner: str, agg: str = "sum") -> str:
        return f"{agg} by (instance, worker) ({fn}({inner}{s}[{window}]))"

    return {
        "ttft_p50": hq(0.5, TTFT),
        "ttft_p95": hq(0.95, TTFT),
        "ttft_p99": hq(0.99, TTFT),
        "tpot_p50": hq(0.5, TPOT),
        "tpot_p99": hq(0.99, TPOT),
        "e2e_p50": hq(0.5, E2E),
        "e2e_p99": hq(0.99, E2E),
        "queue_depth": by("avg_over_time", "inferwatch_queue_depth"),
        "queue_depth_max": by("max_over_time", "inferwatch_queue_depth"),
        # the slope the rules read (deriv), over the whole range
        "queue_slope": by("deriv", "inferwatch_queue_depth", "max"),
        "running": by("avg_over_time", "inferwatch_requests_running"),
        "running_max": by("max_over_time", "inferwatch_requests_running"),
        "max_num_seqs": by("max_over_time", "inferwatch_max_num_seqs", "max"),
        "kv_usage": by("max_over_time", "inferwatch_kv_cache_usage_ratio", "max"),
        "prefix_hit_ratio": by("avg_over_time", "inferwatch_prefix_cache_hit_ratio", "avg"),
        "preemption_rate": by("rate", "inferwatch_preemptions_total"),
        "request_rate": by("rate", "inferwatch_requests_finished_total"),
        "start_time": by("max_over_time", "inferwatch_worker_start_time_seconds", "max"),
        # evidence of running out: restarts over the range, XID errors per GPU
        "restarts": by("changes", "inferwatch_worker_start_time_seconds", "max"),
        "xid": f"sum by (instance, gpu) (increase(inferwatch_gpu_xid_errors_total{s}[{window}]))",
        "target_up": by("max_over_time", "inferwatch_target_up", "max"),
        "ready": by("last_over_time", "inferwatch_worker_ready", "max"),
        "deadline": by("last_over_time", "inferwatch_warmup_deadline_exceeded", "max"),
        # the rest keep labels the join needs
        "prompt_buckets": f"sum by (instance, worker, le) "
        f"(increase(inferwatch_prompt_length_tokens_bucket{s}[{window}]))",
        "model_ttft_p99": hq(0.99, TTFT, "model"),
        "identity": f"group by (instance, worker, model, engine) "
        f"(last_over_time(inferwatch_requests_running{s}[{window}]))",
        "info": f"last_over_time(inferwatch_worker_info{s}[{window}])",
        "warmup_ttft": f"max by (instance, worker, phase) "
        f"(last_over_time(inferwatch_warmup_ttft_seconds{s}[{window}]))",
        "gpu_utilization": f"avg_over_time(inferwatch_gpu_utilization_ratio{s}[{window}])",
        "vram": f"max_over_time(inferwatch_gpu_memory_used_ratio{s}[{window}])",
        "gpu_workers": f"max by (instance, gpu, worker) "
        f"(max_over_time(inferwatch_gpu_process_memory_used_bytes{s}[{window}]))",
    }


def read_prometheus(
    url: str, start: float, end: float, selector: str, timeout: float = 60.0
) -> list[WorkerPicture]:
    """Each worker's picture over ``[start, end]`` from a Prometheus-compatible API."""
    from inferwatch.report.promapi import PrometheusClient, PrometheusUnreachable, QueryError

    client = PrometheusClient(url, timeout=timeout)
    queries = prometheus_queries(selector, duration(end - start))
    answers: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for name, query in queries.items():
            answers[name] = [(s.labels, s.value) for s in client.instant(query, end)]
    except PrometheusUnreachable as exc:
        raise Unreachable(str(exc)) from None
    except QueryError as exc:
        raise Unreachable(str(exc).splitlines()[0]) from None
    return pictures_from_answers(answers, end)


def alert_queries(names: Sequence[str]) -> dict[str, str]:
    """The instant queries (at the end of the range) of the pack's alerts: their states and
    labels, and when each became active (``ALERTS_FOR_STATE``'s value, an alert with a
    ``for``)."""
    matcher = f'alertname=~"{"|".join(sorted(names))}"'
    return {"alerts": f"ALERTS{{{matcher}}}", "active_at": f"ALERTS_FOR_STATE{{{matcher}}}"}


def read_alerts(
    url: str, end: float, waits: Mapping[str, float], timeout: float = 60.0
) -> AlertView:
    """The alerts named in ``waits`` (name -> its ``for``) as Prometheus holds them at
    ``end``, and which of them it evaluates: its rules API, else the ones seen active (a
    store that only receives ``ALERTS``, or one without the API, says nothing of the rest)."""
    from inferwatch.report.promapi import PrometheusClient, PrometheusUnreachable, QueryError

    client = PrometheusClient(url, timeout=timeout)
    answers: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for name, query in alert_queries(list(waits)).items():
            answers[name] = [(s.labels, s.value) for s in client.instant(query, end)]
        try:
            loaded = set(client.alerting_rules())
        except QueryError:
            loaded = set()
    except PrometheusUnreachable as exc:
        raise Unreachable(str(exc)) from None
    except QueryError as exc:
        raise Unreachable(str(exc).splitlines()[0]) from None
    return alerts_from_answers(answers, end, waits, loaded)


def _alert_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "alertstate")))


def alerts_from_answers(
    answers: Mapping[str, Sequence[tuple[Mapping[str, str], float]]],
    end: float,
    waits: Mapping[str, float],
    loaded: Iterable[str] = (),
) -> AlertView:
    """Join the answers of :func:`alert_queries` into the view at ``end``."""
    active_at = {_alert_key(lb): v for lb, v in answers.get("active_at", ())}
    seen = []
    for labels, _ in answers.get("alerts", ()):
        name = labels.get("alertname", "")
        if name not in waits:
            continue
        state = labels.get("alertstate", PENDING)
        plain = {k: v for k, v in labels.items() if k not in ("__name__", "alertstate")}
        seen.append(AlertSeen(name, state, plain, active_at.get(_alert_key(labels)), waits[name]))
    evaluated = (set(loaded) | {s.alert for s in seen}) & set(waits)
    return AlertView(end, tuple(seen), frozenset(evaluated))


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

    def labels_of(name: str, key: tuple[str, str]) -> Mapping[str, str]:
        return next(
            (
                lb
                for lb, _ in answers.get(name, ())
                if (lb.get("instance", ""), lb.get("worker")) == key
            ),
            {},
        )

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
    xid = {(lb.get("instance", ""), lb.get("gpu", "")): v for lb, v in answers.get("xid", ())}
    model_p99 = {
        lb.get("model", ""): v for lb, v in answers.get("model_ttft_p99", ()) if not math.isnan(v)
    }
    prompt_buckets: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for labels, value in answers.get("prompt_buckets", ()):
        try:
            bound = float(labels.get("le", ""))
        except ValueError:
            continue
        if "worker" in labels and not math.isnan(value):
            key = (labels.get("instance", ""), labels["worker"])
            prompt_buckets.setdefault(key, []).append((bound, value))
    fields_ = {name: per_worker(name) for name in WORKER_FIELDS}
    start_time = per_worker("start_time")
    restarts = per_worker("restarts")
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
        identity = labels_of("identity", key)
        info = labels_of("info", key)
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
        model = identity.get("model", "") or info.get("model", "")
        picture = WorkerPicture(
            worker=worker,
            instance=instance,
            model=model,
            engine=identity.get("engine", "") or info.get("engine", ""),
            gpus=tuple(sorted(gpus)),
            gpu_utilization=mean(util.get((instance, g)) for g in gpus),
            vram_used_ratio=maximum(vram.get((instance, g)) for g in gpus),
            uptime_seconds=end - start_time[key] if key in start_time else None,
            restarts=restarts.get(key),
            xid_errors=(sum(xid.get((instance, g), 0.0) for g in gpus) if gpus and xid else None),
            model_ttft_p99=model_p99.get(model),
            long_prompt_share=(
                L.long_prompt_share(prompt_buckets[key]) if key in prompt_buckets else None
            ),
            flags={k: info[k] for k in FLAG_LABELS if info.get(k)},
            warmup=warmup,
        )
        pictures.append(replace(picture, **values))
    return name_pictures(pictures)
