"""The demo's live alert view: which alert conditions hold, and which are pending or firing.

``conditions(readings, t)`` applies the conditions of ``pack.loops`` (the rules'
definitions over plain numbers) to what the demo reads of each worker from the
agent's ``/metrics``; it writes no condition of its own. ``AlertStates`` then
gives each one the life of a Prometheus alert: **pending** from the first view
it holds in, **firing** once it has held for the alert's ``for`` (the same
``pack.rules.alerts`` value the generated rule file carries), and gone as soon
as it stops holding.

The agent's numbers are not Prometheus' recording rules: quantiles and the
queue slope are over the agent's ``stats_window`` rather than ``rate_window`` and
``queue.rising_window``, and the model's TTFT P99 is the highest of its workers'
(the merged P99 is never above it). The conditions and their cold-start window
(``loops.young``, from ``inferwatch_worker_start_time_seconds``) are the rules'.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from inferwatch.pack import fmt
from inferwatch.pack import loops as L
from inferwatch.pack import names as an
from inferwatch.pack.reading import WorkerReading
from inferwatch.pack.thresholds import Thresholds

PENDING = "pending"
FIRING = "firing"


#: what the view shows for one worker: its ``pack.reading`` reading of the agent's last
#: scrape (``demo_cmd.parse_agent_metrics``), the preemption rate set between views
Reading = WorkerReading


@dataclass(frozen=True)
class Condition:
    """An alert condition that holds now for one worker."""

    alert: str
    worker: str
    why: str


def _worker_conditions(w: str, r: Reading, t: Thresholds) -> list[Condition]:
    out: list[Condition] = []

    def add(alert: str, why: str) -> None:
        out.append(Condition(alert, w, why))

    u = r.gpu_util
    if L.waste(u, t):
        add(an.GPU_UNDERUTILIZED, f"GPU {fmt.percent(u or 0)} < {fmt.percent(L.WASTE.of(t))}")
    if L.scale_review(u, t):
        add(
            an.GPU_SCALE_REVIEW,
            f"GPU {fmt.percent(u or 0)} > {fmt.percent(L.SCALE_REVIEW.of(t))}",
        )
    if L.memory(r.kv, r.vram, r.slope, t):
        p = L.pressure(r.kv, r.vram) or 0.0
        source = "KV cache" if r.kv is not None else "VRAM"
        add(
            an.VRAM_PRESSURE_QUEUE_RISING,
            f"{source} {fmt.percent(p)} > {fmt.percent(t.vram.scale_above)}, queue rising "
            f"{(r.slope or 0) * 60:+.1f}/min",
        )
    over = L.over_capacity(r.queue, r.capacity, r.running, r.kv, t)
    if over:
        cap = L.batch_capacity(r.capacity, r.running, r.kv, t) or 0.0
        add(an.QUEUE_OVER_CAPACITY, f"queue {r.queue or 0:.0f} > batch capacity {cap:.0f}")
    if L.preempting(r.preemption_rate, t):
        add(an.KV_CACHE_PREEMPTIONS, f"{r.preemption_rate or 0:.2f} preemptions/s")
    p95, p99 = r.ttft.get("0.95"), r.ttft.get("0.99")
    if L.ttft_slo_breach(p99, r.uptime, t):
        add(an.TTFT_SLO_BREACH, f"TTFT P99 {p99 or 0:.2f}s > {t.ttft.p99_slo_seconds:g}s")
    if L.warmup(p95, u, r.uptime, t):
        add(an.TTFT_HIGH_GPU_IDLE, f"TTFT P95 {p95 or 0:.2f}s, GPU at {fmt.percent(u or 0)}")
    if L.cold_start(p95, r.uptime, over, t, r.gate_deadline_exceeded):
        add(
            an.WORKER_COLD_START,
            f"TTFT P95 {p95 or 0:.2f}s, started {r.uptime or 0:.0f}s ago",
        )
    tp99 = r.tpot.get("0.99")
    if L.tpot_slo_breach(tp99, t):
        add(
            an.TPOT_SLO_BREACH,
            f"TPOT P99 {(tp99 or 0) * 1000:.0f}ms > {t.tpot.p99_slo_seconds * 1000:.0f}ms",
        )
    tails = [
        f"{name} P99 {p99_:.2f}s = {L.tail_ratio(p50_, p99_) or 0:.1f} x P50"
        for name, quantiles in (("TTFT", r.ttft), ("TPOT", r.tpot))
        for p50_, p99_ in [(quantiles.get("0.5"), quantiles.get("0.99"))]
        if p99_ is not None and L.long_tail(p50_, p99_, t)
    ]
    if tails:
        add(an.LATENCY_LONG_TAIL, "; ".join(tails))
    return out


def _imbalance(readings: Mapping[str, Reading], t: Thresholds) -> list[Condition]:
    """Low utilization with normal latency, per model, over the workers that report one."""
    by_model: dict[str, list[str]] = {}
    for w, r in readings.items():
        if r.up and r.model:
            by_model.setdefault(r.model, []).append(w)
    out = []
    for workers in by_model.values():
        utils = [u for w in workers if (u := readings[w].gpu_util) is not None]
        p99s = [p for w in workers if (p := readings[w].ttft.get("0.99")) is not None]
        loads = [
            L.WorkerLoad(
                w,
                readings[w].gpu_util,
                None
                if readings[w].queue is None or readings[w].running is None
                else (readings[w].queue or 0) + (readings[w].running or 0),
            )
            for w in workers
        ]
        busy = L.imbalanced(
            loads,
            sum(utils) / len(utils) if utils else None,
            max(p99s) if p99s else None,
            t,
        )
        for w, load in busy.items():
            what = "GPU utilization" if load == "gpu_utilization" else "open requests"
            out.append(
                Condition(
                    an.LOAD_IMBALANCE,
                    w,
                    f"{what} over {t.load_imbalance.load_ratio:g}x the model's other workers",
                )
            )
    return out


def conditions(readings: Mapping[str, Reading], t: Thresholds) -> list[Condition]:
    """The alert conditions that hold right now, per worker (alerts also need their ``for``)."""
    out: list[Condition] = []
    for w, r in readings.items():
        if not r.up:
            # the demo stops when one of its workers dies, so it never sees a crash loop
            if L.worker_down(r.up, r.uptime, None, t):
                why = "the agent cannot read the worker's metrics"
                out.append(Condition(an.WORKER_DOWN, w, why))
            continue
        out.extend(_worker_conditions(w, r, t))
    out.extend(_imbalance(readings, t))
    return out


def loops_of(conds: Iterable[Condition]) -> frozenset[str]:
    """The ``pack.loops`` ids the conditions stand for, suppression applied."""
    return L.loops_of_alerts(c.alert for c in conds)


def alert_for(t: Thresholds) -> dict[str, float]:
    """Each alert's ``for`` in seconds, as the generated rule file has it."""
    from inferwatch.pack.rules import alerts

    out: dict[str, float] = {}
    for a in alerts(t):
        # one name may have several rules (XID: critical and warning): the shortest wait
        out[a.name] = min(out.get(a.name, a.for_seconds), a.for_seconds)
    return out


@dataclass(frozen=True)
class AlertState:
    condition: Condition
    state: str
    #: seconds the condition has held
    held: float
    #: the alert's ``for``
    wait: float


class AlertStates:
    """Pending and firing, the way Prometheus moves an alert: a condition is pending from
    the first view it holds in and firing once it has held for the alert's ``for``; a
    view without it ends it (the next time it holds starts a fresh wait)."""

    def __init__(self, for_seconds: Mapping[str, float]) -> None:
        self.for_seconds = dict(for_seconds)
        self._since: dict[tuple[str, str], float] = {}

    def update(self, conds: Iterable[Condition], now: float) -> list[AlertState]:
        """The states after a view taken at ``now`` (seconds, any monotonic clock)."""
        held = {(c.alert, c.worker): c for c in conds}
        self._since = {k: self._since.get(k, now) for k in held}
        out = []
        for key, c in held.items():
            wait = self.for_seconds.get(c.alert, 0.0)
            since = now - self._since[key]
            out.append(AlertState(c, FIRING if since >= wait else PENDING, since, wait))
        return out


class CounterRate:
    """A counter's per-second rate over the views of the last ``window`` seconds: between
    two views a second apart, a counter that grows in bursts flickers between 0 and a
    burst. A counter that goes down (a restart) starts afresh."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._seen: deque[tuple[float, float]] = deque()

    def update(self, at: float, total: float) -> float | None:
        seen = self._seen
        if seen and total < seen[-1][1]:
            seen.clear()
        seen.append((at, total))
        # keep the newest view at least `window` old as the start of the span
        while len(seen) > 2 and at - seen[1][0] >= self.window:
            seen.popleft()
        first_at, first = seen[0]
        return (total - first) / (at - first_at) if at > first_at else None
