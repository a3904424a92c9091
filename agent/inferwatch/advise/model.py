"""What advise reasons about: one picture per worker, and the recommendations it makes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from inferwatch.engines.launchflags import WORKER_INFO_FLAGS
from inferwatch.pack import fmt
from inferwatch.pack.ranking import ALERT, Move
from inferwatch.pack.reading import WorkerReading

#: launch flags of inferwatch_worker_info that advise reads (docs/metrics.md)
FLAG_LABELS = WORKER_INFO_FLAGS


class Unreachable(Exception):
    """The agent or Prometheus did not answer (exit code 3)."""


def reading_figures(r: WorkerReading) -> dict[str, Any]:
    """The figures a picture takes from a worker's reading as they are: GPU utilization,
    VRAM level, the latency quantiles, queue, batch and KV cache (the peaks are the
    caller's: a single scrape has none)."""
    return {
        "gpu_utilization": r.gpu_util,
        "vram_used_ratio": r.vram,
        "ttft_p50": r.ttft.get("0.5"),
        "ttft_p95": r.ttft.get("0.95"),
        "ttft_p99": r.ttft.get("0.99"),
        "tpot_p50": r.tpot.get("0.5"),
        "tpot_p99": r.tpot.get("0.99"),
        "e2e_p50": r.e2e.get("0.5"),
        "e2e_p99": r.e2e.get("0.99"),
        "queue_depth": r.queue,
        "queue_slope": r.slope,
        "running": r.running,
        "max_num_seqs": r.capacity,
        "kv_usage": r.kv,
    }


@dataclass(frozen=True)
class WarmupState:
    """What the agent's warm-up gate says about a worker."""

    ready: bool
    deadline_exceeded: bool = False
    cold_ttft: float | None = None
    warm_ttft: float | None = None


@dataclass(frozen=True)
class WorkerPicture:
    """One worker over the observed span; None where the data does not say.

    Gauges are means over the span (utilization, queue, running) or peaks (VRAM, KV
    cache, queue and batch peaks); quantiles and the queue slope are the source's
    window figures; rates come from counter deltas over the span, never from a
    counter's lifetime total.
    """

    worker: str
    instance: str
    model: str = ""
    engine: str = ""
    gpus: tuple[str, ...] = ()
    #: mean utilization of the worker's own GPUs
    gpu_utilization: float | None = None
    vram_used_ratio: float | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    ttft_p99: float | None = None
    tpot_p50: float | None = None
    tpot_p99: float | None = None
    e2e_p50: float | None = None
    e2e_p99: float | None = None
    queue_depth: float | None = None
    queue_depth_max: float | None = None
    #: requests per second; > 0 is a growing queue
    queue_slope: float | None = None
    running: float | None = None
    running_max: float | None = None
    max_num_seqs: float | None = None
    kv_usage: float | None = None
    prefix_hit_ratio: float | None = None
    preemption_rate: float | None = None
    request_rate: float | None = None
    #: [5.3] share of the span's prompts over pack.loops.LONG_PROMPT_TOKENS, where the
    #: engine exports inferwatch_prompt_length_tokens
    long_prompt_share: float | None = None
    uptime_seconds: float | None = None
    #: TTFT P95 over the worker's whole life, from the engine's cumulative buckets, for a
    #: worker started within cold_start.within (agent mode): a cold start's slow first
    #: tokens leave the agent's stats window minutes before InferenceWorkerColdStart
    #: (its `for` and its rate window) stops seeing them
    ttft_p95_since_start: float | None = None
    #: first tokens counted since the worker's start (with ``ttft_p95_since_start``)
    ttft_count_since_start: float | None = None
    #: TTFT P99 of the worker's model over all its workers, where the source has it
    model_ttft_p99: float | None = None
    #: evidence of running out over the span: restarts of the worker process (a change of
    #: inferwatch_worker_start_time_seconds) and XID errors on its GPUs (None: not known)
    restarts: float | None = None
    xid_errors: float | None = None
    #: launch flags from inferwatch_worker_info that the worker stated
    flags: Mapping[str, str] = field(default_factory=dict)
    warmup: WarmupState | None = None
    #: shown name: the worker, with its instance when another instance has the same name
    name: str = ""

    @classmethod
    def of(cls, r: WorkerReading, instance: str) -> WorkerPicture:
        """A worker's reading (``pack.reading``) as advise's picture."""
        warmup = None
        if r.ready is not None:
            warmup = WarmupState(
                ready=r.ready,
                deadline_exceeded=bool(r.gate_deadline_exceeded),
                cold_ttft=r.warmup_ttft.get("cold"),
                warm_ttft=r.warmup_ttft.get("warm"),
            )
        return cls(
            worker=r.worker,
            instance=instance,
            model=r.model or "",
            engine=r.engine,
            gpus=r.gpus,
            **reading_figures(r),
            queue_depth_max=r.queue_max,
            running_max=r.running_max,
            prefix_hit_ratio=r.prefix_hit_ratio,
            preemption_rate=r.preemption_rate,
            request_rate=r.request_rate,
            long_prompt_share=r.long_prompt_share,
            uptime_seconds=r.uptime,
            restarts=r.restarts,
            xid_errors=r.xid_errors,
            ttft_p95_since_start=r.ttft_p95_since_start,
            ttft_count_since_start=r.ttft_count_since_start,
            model_ttft_p99=r.model_ttft_p99,
            flags=dict(r.flags),
            warmup=warmup,
        )

    @property
    def key(self) -> str:
        return f"{self.instance}/{self.worker}"

    @property
    def label(self) -> str:
        return self.name or self.worker

    @property
    def open_requests(self) -> float | None:
        """Waiting plus running requests (the low-utilization loop's load)."""
        if self.running is None and self.queue_depth is None:
            return None
        return (self.running or 0.0) + (self.queue_depth or 0.0)

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


def name_pictures(pictures: Sequence[WorkerPicture]) -> list[WorkerPicture]:
    """Give each picture its shown name: ``worker``, or ``worker@instance`` when ambiguous."""
    counts: dict[str, int] = {}
    for p in pictures:
        counts[p.worker] = counts.get(p.worker, 0) + 1
    return [
        replace(p, name=p.worker if counts[p.worker] == 1 else f"{p.worker}@{p.instance}")
        for p in pictures
    ]


def finite(value: Any) -> Any:
    """``value`` with infinities and NaNs as None, in its dicts, lists and tuples too: JSON
    has no number for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def clock(unix: float) -> str:
    """A moment for people, in UTC: 2025-01-31 12:03:10 UTC."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


#: an alert's states in Prometheus' ALERTS series; SILENT: Prometheus evaluates the alert
#: and it is neither (advise's own word)
FIRING, PENDING, SILENT = "firing", "pending", "silent"


@dataclass(frozen=True)
class AlertSeen:
    """One alert of the pack as Prometheus holds it at the end of the range read: its
    ``ALERTS`` series (state, labels) and ``ALERTS_FOR_STATE`` (when it became active)."""

    alert: str
    #: FIRING or PENDING
    state: str
    labels: Mapping[str, str]
    #: when its condition began to hold (unix seconds; None: not known)
    active_at: float | None = None
    #: the alert's ``for`` in seconds (pack.rules; None: not known)
    wait: float | None = None

    @property
    def severity(self) -> str | None:
        return self.labels.get("severity")

    @property
    def since(self) -> float | None:
        """When it began to fire (firing: active plus its ``for``) or to wait (pending)."""
        if self.active_at is None:
            return None
        if self.state == FIRING:
            return self.active_at + (self.wait or 0.0)
        return self.active_at


@dataclass(frozen=True)
class AlertView:
    """What Prometheus says of the pack's alerts at ``at``: those active (pending or
    firing) and the names of those it evaluates (from its rules API, and any seen
    active). With no name evaluated the conditions stand on their own, as in agent mode."""

    at: float
    active: tuple[AlertSeen, ...] = ()
    evaluated: frozenset[str] = frozenset()


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
    #: the agent's series the value comes from
    series: str | None = None

    def text(self) -> str:
        who = f"{self.worker}: " if self.worker else ""
        out = f"{who}{self.name} {fmt.quantity(self.value, self.unit)}"
        if self.threshold is not None:
            out += f" {self.relation} {fmt.quantity(self.threshold, self.unit)}"
            if self.key:
                out += f" ({self.key})"
        if self.series:
            out += f" [{self.series}]"
        return out

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["text"] = self.text()
        return out


@dataclass(frozen=True)
class Recommendation:
    """One piece of advice: what loop it belongs to, for whom, the numbers behind it and
    what to do."""

    #: the loop's id in pack.loops
    id: str
    #: the loop's name (pack.loops ``Loop.name``: one of the guide's three loops, or a
    #: further condition)
    loop: str
    title: str
    workers: tuple[str, ...]
    model: str
    #: how far past its threshold (for ranking within a tier and severity)
    score: float
    evidence: tuple[Evidence, ...]
    actions: tuple[str, ...]
    guide: str
    #: the alerts of pack.rules that detect the same condition
    alerts: tuple[str, ...] = ()
    #: pack.ranking: ALERT (a condition that pages or warns), LOOP, NOTE
    tier: str = ALERT
    #: the alerts' severity (critical, warning), None for a note
    severity: str | None = None
    #: what backs it, as measured, in words
    urgency: str = ""
    #: the knobs its actions turn (pack.ranking: no two items may undo each other)
    moves: tuple[Move, ...] = ()
    #: its alerts' state in Prometheus at the end of the range read (FIRING, PENDING,
    #: SILENT); None: not read (agent mode, or a Prometheus that evaluates none of them)
    alert_state: str | None = None
    #: since when (unix seconds): firing since, or pending since
    alert_since: float | None = None

    def as_dict(self, rank: int) -> dict[str, Any]:
        return {
            "rank": rank,
            "id": self.id,
            "loop": self.loop,
            "tier": self.tier,
            "severity": self.severity,
            "urgency": self.urgency,
            "moves": [m.as_dict() for m in self.moves],
            "alert_state": self.alert_state,
            "alert_since": self.alert_since,
            "title": self.title,
            "workers": list(self.workers),
            "model": self.model,
            "alerts": list(self.alerts),
            "evidence": [e.as_dict() for e in self.evidence],
            "actions": list(self.actions),
            "guide": self.guide,
        }
