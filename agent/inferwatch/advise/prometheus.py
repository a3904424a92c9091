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
from inferwatch.engines import contract
from inferwatch.pack import loops as L
from inferwatch.pack import signals as S

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


#: the key of a picture: one agent's worker
WORKER = "instance, worker"


def duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def prometheus_queries(selector: str, window: str) -> dict[str, str]:
    """The instant queries (evaluated at the end of the range) behind each picture field:
    the derived ones rendered from ``pack.signals`` over the whole range."""
    s = selector

    def hq(q: float, family: contract.Family, by: str = WORKER) -> str:
        buckets = S.bucket_increase(family).render(selector=s, window=window, by=by)
        return S.quantile(q, buckets)

    def sig(signal: S.Signal, agg: str) -> str:
        return signal.render(selector=s, window=window, by=WORKER, agg=agg)

    def by(fn: str, family: contract.Family, agg: str) -> str:
        return f"{agg} by ({WORKER}) ({fn}({family}{s}[{window}]))"

    ttft, tpot, e2e = contract.TTFT_SECONDS, contract.TPOT_SECONDS, contract.E2E_LATENCY_SECONDS
    return {
        "ttft_p50": hq(0.5, ttft),
        "ttft_p95": hq(0.95, ttft),
        "ttft_p99": hq(0.99, ttft),
        "tpot_p50": hq(0.5, tpot),
        "tpot_p99": hq(0.99, tpot),
        "e2e_p50": hq(0.5, e2e),
        "e2e_p99": hq(0.99, e2e),
        "queue_depth": sig(S.QUEUE_MEAN, "sum"),
        "queue_depth_max": sig(S.QUEUE_PEAK, "sum"),
        # the slope the rules read (deriv), over the whole range
        "queue_slope": sig(S.QUEUE_SLOPE, "max"),
        "running": sig(S.RUNNING_MEAN, "sum"),
        "running_max": sig(S.RUNNING_PEAK, "sum"),
        "max_num_seqs": sig(S.MAX_NUM_SEQS, "max"),
        "kv_usage": sig(S.KV_USAGE_PEAK, "max"),
        "prefix_hit_ratio": sig(S.PREFIX_HIT_MEAN, "avg"),
        "preemption_rate": sig(S.PREEMPTION_RATE, "sum"),
        "request_rate": sig(S.REQUEST_RATE, "sum"),
        "start_time": by("max_over_time", contract.WORKER_START_TIME_SECONDS, "max"),
        # evidence of running out: restarts over the range, XID errors per GPU
        "restarts": sig(S.RESTARTS, "max"),
        "xid": S.XID_ERRORS.render(selector=s, window=window, by="instance, gpu"),
        "target_up": by("max_over_time", contract.TARGET_UP, "max"),
        "ready": by("last_over_time", contract.WORKER_READY, "max"),
        "deadline": by("last_over_time", contract.WARMUP_DEADLINE_EXCEEDED, "max"),
        # the rest keep labels the join needs
        "prompt_buckets": S.bucket_increase(contract.PROMPT_LENGTH_TOKENS).render(
            selector=s, window=window, by=WORKER
        ),
        "model_ttft_p99": hq(0.99, ttft, "model"),
        "identity": f"group by ({WORKER}, model, engine) "
        f"(last_over_time({contract.REQUESTS_RUNNING}{s}[{window}]))",
        "info": f"last_over_time({contract.WORKER_INFO}{s}[{window}])",
        "warmup_ttft": f"max by ({WORKER}, phase) "
        f"(last_over_time({contract.WARMUP_TTFT_SECONDS}{s}[{window}]))",
        "gpu_utilization": S.GPU_UTILIZATION_MEAN.render(selector=s, window=window),
        "vram": S.GPU_MEMORY_PEAK.render(selector=s, window=window),
        "gpu_workers": f"max by (instance, gpu, worker) "
        f"(max_over_time({contract.GPU_PROCESS_MEMORY_USED_BYTES}{s}[{window}]))",
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
