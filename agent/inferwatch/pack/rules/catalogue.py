"""The alert catalogue of ALERTS.md: one function per family of alerts, in the order of
the generated file, and the facts the runbooks and docs print about each alert."""

from __future__ import annotations

from dataclasses import replace

from inferwatch.engines import contract
from inferwatch.pack import loops as L
from inferwatch.pack import names as an
from inferwatch.pack import signals as S
from inferwatch.pack.fmt import dur, num, pct, secs
from inferwatch.pack.names import GPU, INSTANCE, MODEL, WORKER, WORKER_KEY, names
from inferwatch.pack.rules import slo
from inferwatch.pack.rules.alert import Alert
from inferwatch.pack.rules.common import THERMAL_REASONS, rising
from inferwatch.pack.thresholds import Thresholds

GPU_GROUP = "inferwatch-gpu.alerts"


WORKER_GROUP = "inferwatch-worker.alerts"


HEALTH_GROUP = "inferwatch-health.alerts"


_GPU_WHERE = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }}"


_WORKER_WHERE = "Worker {{ $labels.worker }} ({{ $labels.model }}, {{ $labels.engine }})"


#: what each group's alerts are about, unless an alert says otherwise
_GROUP_SCOPE = {
    "inferwatch-gpu.alerts": ("job", "instance", "gpu"),
    "inferwatch-worker.alerts": ("job", "instance", "worker"),
    "inferwatch-health.alerts": ("job", "instance", "worker"),
    # an error budget is a model's: its page opens the dashboards on that model
    slo.ALERT_GROUP: ("job", "model"),
}


#: the dashboard each group's alerts open, unless an alert names another
_GROUP_DASHBOARD = {
    GPU_GROUP: "gpu",
    WORKER_GROUP: "worker",
    HEALTH_GROUP: "overview",
    slo.ALERT_GROUP: "overview",
}


#: alerts whose labels differ from their group's
_SCOPE = {
    an.VRAM_PRESSURE_QUEUE_RISING: ("job", "instance", "gpu", "worker"),
    an.GPU_TELEMETRY_DOWN: ("job", "instance"),
    an.AGENT_DOWN: (),  # its absent() form has no labels to fill in
}


def alerts(t: Thresholds) -> list[Alert]:
    """The catalogue of ALERTS.md, in the order of the generated file."""
    return [
        replace(
            a,
            scope=_SCOPE.get(a.name, _GROUP_SCOPE[a.group]),
            dashboard=a.dashboard or _GROUP_DASHBOARD[a.group],
        )
        for a in _catalogue(t)
    ]


def _catalogue(t: Thresholds) -> list[Alert]:
    catalogue = [
        *_gpu_alerts(t),
        *_latency_alerts(t),
        *_worker_alerts(t),
        *_health_alerts(t),
    ]
    # SLO burn rates (pack.rules.slo); slos.p99_alerts can turn the P99 threshold family off
    catalogue += [Alert(**fields) for fields in slo.alert_fields(t)]
    return [a for a in catalogue if slo.p99_alerts_kept(t, a.name)]


def _gpu_alerts(t: Thresholds) -> list[Alert]:
    """The GPU group: utilization, memory pressure, lost GPUs, telemetry, XID, heat."""
    n = names(t)
    s = t.pack.selector
    g = t.gpu_utilization
    v = t.vram
    xids = "|".join(str(x) for x in t.gpu_health.xid_critical)
    xid_list = ", ".join(str(x) for x in t.gpu_health.xid_critical)
    thermal = s('reason=~"' + "|".join(THERMAL_REASONS) + '"')
    return [
        Alert(
            name=an.GPU_UNDERUTILIZED,
            group=GPU_GROUP,
            expr=S.past(n.gpu_util, L.WASTE, t),
            for_seconds=g.waste_for,
            severity="warning",
            summary="A GPU has been mostly idle for a long time: capacity is paid for but unused.",
            description=_utilization_held(t, "below", L.WASTE.of(t), g.waste_for) + ".",
        ),
        Alert(
            name=an.GPU_SCALE_REVIEW,
            group=GPU_GROUP,
            expr=S.past(n.gpu_util, L.SCALE_REVIEW, t),
            for_seconds=g.scale_review_for,
            severity="warning",
            summary="A GPU has run near saturation for a long time: review scaling out.",
            description=(
                _utilization_held(t, "above", L.SCALE_REVIEW.of(t), g.scale_review_for)
                + "; queues and tail latency grow from here."
            ),
        ),
        Alert(
            name=an.VRAM_PRESSURE_QUEUE_RISING,
            group=GPU_GROUP,
            expr=(
                f"{n.worker_gpu_pressure} > {num(v.scale_above)}\n"
                f"and on ({WORKER_KEY})\n"
                f"{rising(t)}"
            ),
            for_seconds=v.pressure_for,
            severity="critical",
            summary="GPU memory is nearly full while the request queue keeps growing.",
            description=(
                f"{_GPU_WHERE} is under memory pressure: "
                '{{ if eq $labels.pressure_from "kv_cache" }}the KV cache of worker '
                "{{ $labels.worker }} is {{ $value | humanizePercentage }} full"
                "{{ else }}{{ $value | humanizePercentage }} of its memory is in use"
                "{{ end }} "
                f"(above {pct(v.scale_above)}) and the queue of worker {{{{ $labels.worker }}}} "
                f"on it has been rising for {dur(v.pressure_for)}: scale out or rate-limit."
            ),
        ),
        Alert(
            name=an.GPU_LOST,
            group=GPU_GROUP,
            expr=f"max by ({GPU}) ({contract.GPU_UP}{s()}) == 0",
            for_seconds=t.availability.gpu_lost_for,
            severity="critical",
            summary="A GPU stopped answering its GPU source (NVML or dcgm-exporter).",
            description=(
                f"{_GPU_WHERE} has given no readings (NVML, or dcgm-exporter on that backend) "
                f"for {dur(t.availability.gpu_lost_for)}; "
                "the workers on it are likely failing."
            ),
        ),
        Alert(
            # An extension of ALERTS.md's catalogue (docs/alerts.md): with the NVML
            # library or driver gone (or dcgm-exporter unreachable on that backend)
            # there is no GPU series at all, so InferenceGPULost
            # (gpu_up == 0) cannot fire and every GPU alert goes quiet.
            name=an.GPU_TELEMETRY_DOWN,
            group=GPU_GROUP,
            expr=_telemetry_down_expr(t),
            for_seconds=t.availability.gpu_lost_for,
            severity="critical",
            summary=(
                "The agent cannot read its GPU source (NVML or dcgm-exporter) at all: every "
                "GPU alert of its host is blind."
            ),
            description=(
                "The agent on {{ $labels.instance }} has not finished a GPU pass for "
                f"over {dur(t.availability.gpu_lost_for)} (or never has): the driver, the "
                "NVML library or dcgm-exporter is gone or failing, and its GPUs are unwatched."
            ),
        ),
        Alert(
            name=an.GPU_XID_ERRORS,
            group=GPU_GROUP,
            expr=_xid_expr(t, f'xid=~"{xids}"'),
            for_seconds=0,
            severity="critical",
            summary="A GPU reported an XID error that needs a GPU reset or hardware service.",
            description=(
                f"{_GPU_WHERE} reported XID {{{{ $labels.xid }}}} "
                "{{ $value | humanizeDuration }} ago "
                f"(critical XIDs: {xid_list})."
            ),
        ),
        Alert(
            name=an.GPU_XID_ERRORS,
            group=GPU_GROUP,
            expr=_xid_expr(t, f'xid!~"{xids}"'),
            for_seconds=0,
            severity="warning",
            summary="A GPU reported an XID error.",
            description=(
                f"{_GPU_WHERE} reported XID {{{{ $labels.xid }}}} "
                "{{ $value | humanizeDuration }} ago; "
                "usually an application fault, check whether it repeats."
            ),
        ),
        Alert(
            name=an.GPU_THERMAL_THROTTLING,
            group=GPU_GROUP,
            expr=(f"max by ({GPU}, reason) ({contract.GPU_CLOCK_EVENT_ACTIVE}{thermal}) == 1"),
            for_seconds=t.gpu_health.thermal_for,
            severity="warning",
            summary="A GPU is slowing its clocks because of heat or the power brake.",
            description=(
                f"{_GPU_WHERE} has had the {{{{ $labels.reason }}}} clock event active for "
                f"{dur(t.gpu_health.thermal_for)}; it runs slower than it can."
            ),
        ),
    ]


def _latency_alerts(t: Thresholds) -> list[Alert]:
    """The worker group's queue and latency alerts."""
    n = names(t)
    s = t.pack.selector
    w = t.pack.window
    g = t.gpu_utilization
    samples = t.queue.over_capacity_samples
    ttft_p95 = n.quantile("worker", "ttft", "p95")
    ttft_p99 = n.quantile("worker", "ttft", "p99")
    lb = t.load_imbalance
    return [
        Alert(
            name=an.QUEUE_OVER_CAPACITY,
            group=WORKER_GROUP,
            expr=(
                f"max by ({WORKER}) ({contract.QUEUE_DEPTH}{s()})\n"
                f"and on ({WORKER})\n"
                f"{n.queue_over_capacity} == 1"
            ),
            for_seconds=(samples - 1) * t.pack.scrape_interval,
            # The guide's leading indicator [6 FAQ]: act on the queue before the latency
            # alerts. It pages, and the Alertmanager example lets it hold back the same
            # worker's latency pages, not the other way round.
            severity="critical",
            summary="More requests are waiting than the worker can batch: it is overloaded.",
            description=(
                f"{_WORKER_WHERE} has had more requests waiting than it can batch (its "
                "max_num_seqs, or its running batch once the KV cache is full) for "
                f"{samples} consecutive samples ({t.pack.interval} apart); "
                "{{ $value | humanize }} are waiting now."
            ),
        ),
        Alert(
            name=an.TTFT_HIGH_GPU_IDLE,
            group=WORKER_GROUP,
            expr=(
                f"{ttft_p95} > {num(t.ttft.warmup_p95_seconds)}\n"
                f"and on ({WORKER_KEY}) {n.worker_util} < {num(g.idle_below)}\n"
                f"unless on ({WORKER_KEY})\n"
                f"{_young(t, t.cold_start.within)}"
            ),
            for_seconds=t.ttft.idle_gpu_for,
            severity="warning",
            summary="First tokens are slow although the GPU is not busy: warm-up is missing.",
            description=(
                f"{_WORKER_WHERE} has a TTFT P95 of {{{{ $value | humanizeDuration }}}} "
                f"(above {secs(t.ttft.warmup_p95_seconds)}) while its GPUs are below "
                f"{pct(g.idle_below)} utilization."
            ),
        ),
        Alert(
            name=an.TTFT_SLO_BREACH,
            group=WORKER_GROUP,
            # The first minutes after a start belong to InferenceWorkerColdStart: the
            # warm-up gate's own cold request lands in the engine's histogram too.
            expr=(
                f"{ttft_p99} > {num(t.ttft.p99_slo_seconds)}\n"
                f"unless on ({WORKER_KEY})\n"
                f"{_young(t, t.cold_start.within)}"
            ),
            for_seconds=t.ttft.slo_for,
            severity="critical",
            summary="Users wait too long for the first token.",
            description=_slo_breach(t, "TTFT", t.ttft.p99_slo_seconds, t.ttft.slo_for),
        ),
        Alert(
            name=an.TPOT_SLO_BREACH,
            group=WORKER_GROUP,
            expr=f"{n.quantile('worker', 'tpot', 'p99')} > {num(t.tpot.p99_slo_seconds)}",
            for_seconds=t.tpot.slo_for,
            severity="warning",
            summary="Tokens stream too slowly once generation has started.",
            description=_slo_breach(t, "TPOT", t.tpot.p99_slo_seconds, t.tpot.slo_for),
        ),
        Alert(
            name=an.LATENCY_LONG_TAIL,
            group=WORKER_GROUP,
            # TTFT and per-token latency, not end-to-end: end-to-end latency grows with
            # the answer's length, so a healthy mix of 10- to 2000-token answers has an
            # end-to-end P99 fifteen times its P50.
            expr="\nor\n".join(
                f"label_replace(\n"
                f"    {n.quantile('worker', short, 'p99')}\n"
                f"  /\n"
                f"    {n.quantile('worker', short, 'p50')}\n"
                f"  >= {num(t.latency.tail_ratio)},\n"
                f'  "latency", "{short}", "", ""\n'
                f")"
                for short in ("ttft", "tpot")
            ),
            for_seconds=t.latency.tail_for,
            severity="warning",
            summary="The slowest requests take many times longer than the typical one.",
            description=(
                f"{_WORKER_WHERE} has a {{{{ $labels.latency | toUpper }}}} P99 "
                '{{ printf "%.1f" $value }} times its P50 over the last '
                f"{w} (limit {num(t.latency.tail_ratio)}x); long requests are holding up "
                "short ones."
            ),
        ),
        Alert(
            name=an.LOAD_IMBALANCE,
            group=WORKER_GROUP,
            expr=_imbalance_expr(t),
            for_seconds=lb.imbalance_for,
            severity="warning",
            summary="One worker carries far more load than its peers while the model's GPUs idle.",
            description=(
                f"{_WORKER_WHERE} has "
                '{{ if eq $labels.load "gpu_utilization" }}its GPUs at '
                "{{ $value | humanizePercentage }}{{ else }}{{ $value | humanize }} open "
                "requests on average{{ end }}, over "
                f"{num(lb.load_ratio)}x the average of the other workers serving "
                f"{{{{ $labels.model }}}}, whose GPUs average below {pct(g.idle_below)} with "
                "latency within the SLO: the load balancer is not spreading requests."
            ),
            dashboard="overview",
        ),
    ]


def _worker_alerts(t: Thresholds) -> list[Alert]:
    """The worker group's warm-up, KV-cache and error alerts."""
    n = names(t)
    s = t.pack.selector
    w = t.pack.window
    ttft_p95 = n.quantile("worker", "ttft", "p95")
    return [
        Alert(
            name=an.WORKER_COLD_START,
            group=WORKER_GROUP,
            expr=(
                f"{ttft_p95} > {num(t.ttft.warmup_p95_seconds)}\n"
                f"and on ({WORKER_KEY})\n"
                f"{_young(t, t.cold_start.within)}\n"
                # Slow first tokens on an overloaded worker are queueing, not a cold
                # path: InferenceQueueOverCapacity speaks for that case.
                f"unless on ({WORKER_KEY})\n"
                f"max by ({WORKER_KEY}) ({n.queue_over_capacity}) == 1\n"
                # A gated worker takes traffic only once the agent's warm-up gate has
                # warmed it (gauge 0); its slow samples are the gate's own cold request.
                # Where the gate opened on its deadline (1) or is off (absent), users
                # got the cold path.
                f"unless on ({WORKER_KEY})\n"
                f"max by ({WORKER_KEY}) ({contract.WARMUP_DEADLINE_EXCEEDED}{s()}) == 0"
            ),
            for_seconds=t.cold_start.cold_start_for,
            severity="warning",
            summary="A freshly started worker serves slow first tokens: it was not warmed up.",
            description=(
                f"{_WORKER_WHERE} started less than {dur(t.cold_start.within)} ago and its TTFT "
                "P95 is {{ $value | humanizeDuration }} (above "
                f"{secs(t.ttft.warmup_p95_seconds)})."
            ),
        ),
        Alert(
            # An extension of ALERTS.md's catalogue (docs/alerts.md). The gauge exists
            # only where the agent's warm-up gate is on: with the gate off it is absent
            # and the alert stays silent.
            name=an.WARMUP_DEADLINE_EXCEEDED,
            group=WORKER_GROUP,
            expr=(f"max by ({WORKER_KEY}) ({contract.WARMUP_DEADLINE_EXCEEDED}{s()}) == 1"),
            for_seconds=t.cold_start.warmup_deadline_for,
            severity="warning",
            summary="The warm-up gate let a worker into service without warming it up.",
            description=(
                "The agent on {{ $labels.instance }} opened the warm-up gate of worker "
                "{{ $labels.worker }} because warmup.deadline passed before a warm-up "
                "succeeded; the worker has been taking traffic cold for at least "
                f"{dur(t.cold_start.warmup_deadline_for)}."
            ),
        ),
        Alert(
            name=an.KV_CACHE_PREEMPTIONS,
            group=WORKER_GROUP,
            expr=f"{n.rate('preemptions')} > {num(t.kv_cache.preemption_rate_above)}",
            for_seconds=t.kv_cache.preemptions_for,
            severity="warning",
            summary="The engine keeps evicting requests because the KV cache is full.",
            description=(
                f'{_WORKER_WHERE} has preempted {{{{ printf "%.3g" $value }}}} requests per second '
                f"(over {w}) for {dur(t.kv_cache.preemptions_for)}."
            ),
        ),
        Alert(
            name=an.REQUEST_ERRORS,
            group=WORKER_GROUP,
            expr=f"{n.error_ratio} > {num(t.errors.ratio_above)}",
            for_seconds=t.errors.errors_for,
            severity="warning",
            summary="Too many requests end in an error or are rejected.",
            description=(
                f"{_WORKER_WHERE} failed or rejected {{{{ $value | humanizePercentage }}}} of "
                f"its requests over the last {w} (limit {pct(t.errors.ratio_above)})."
            ),
        ),
    ]


def _health_alerts(t: Thresholds) -> list[Alert]:
    """The health group: a worker or the agent down, a worker without GPUs."""
    s = t.pack.selector
    return [
        Alert(
            name=an.WORKER_DOWN,
            group=HEALTH_GROUP,
            # A young process whose /metrics does not answer yet is loading its model,
            # not down; a crash loop is down however young each start is.
            expr=(
                f"max by ({WORKER_KEY}) ({contract.TARGET_UP}{s()}) == 0\n"
                f"unless on ({WORKER_KEY})\n"
                f"(\n"
                f"    {_young(t, t.availability.startup_grace)}\n"
                f"  unless on ({WORKER_KEY})\n"
                f"    max by ({WORKER_KEY}) (\n"
                f"      {S.RESTARTS.render(selector=s(), window=dur(t.availability.crash_loop_window))}\n"
                f"    ) >= {t.availability.crash_loop_restarts}\n"
                f")"
            ),
            for_seconds=t.availability.worker_down_for,
            severity="critical",
            summary="An inference worker cannot be scraped or reports no engine data.",
            description=(
                "The agent on {{ $labels.instance }} has not read engine metrics from worker "
                f"{{{{ $labels.worker }}}} for {dur(t.availability.worker_down_for)}."
            ),
        ),
        Alert(
            # An extension of ALERTS.md's catalogue (docs/alerts.md, docs/attribution.md):
            # a worker with no inferwatch_worker_gpu_info drops out of every GPU-joint
            # rule (memory pressure, TTFT with idle GPUs, imbalance, GPU state, cost by
            # state) without a sound. Only on agents that read GPUs at all.
            name=an.WORKER_UNATTRIBUTED,
            group=HEALTH_GROUP,
            expr=(
                f"max by ({WORKER_KEY}) ({contract.TARGET_UP}{s()}) == 1\n"
                f"unless on ({WORKER_KEY})\n"
                f"max by ({WORKER_KEY}) ({contract.WORKER_GPU_INFO}{s()})\n"
                f"and on ({INSTANCE})\n"
                f"max by ({INSTANCE}) ({contract.GPU_UP}{s()})"
            ),
            for_seconds=t.availability.unattributed_for,
            severity="warning",
            summary=("The agent cannot place a worker on a GPU: every GPU alert is blind to it."),
            description=(
                "The agent on {{ $labels.instance }} reads worker {{ $labels.worker }} but "
                "cannot tell which of its GPUs the worker runs on, for "
                f"{dur(t.availability.unattributed_for)}: memory pressure, TTFT with idle "
                "GPUs, load imbalance, GPU state and cost by state leave it out. Enable an "
                "attribution source (docs/attribution.md): host PIDs for NVML's process list "
                "(systemd, hostPID: true, pid: host), the worker's environment in a sidecar "
                "(CAP_SYS_PTRACE or the worker's user), Kubernetes discovery with the "
                "pod-resources socket, or set workers[].gpus."
            ),
        ),
        Alert(
            name=an.AGENT_DOWN,
            group=HEALTH_GROUP,
            # one rule, two cases: a known agent fails, or no agent target exists at all
            expr=f"up{s()} == 0\nor\nabsent(up{s()})",
            for_seconds=t.availability.agent_down_for,
            severity="critical",
            summary="Prometheus cannot scrape an inferwatch agent: its GPUs and workers are unwatched.",
            description=(
                "{{ if $labels.instance }}Prometheus has failed to scrape the inferwatch agent "
                "{{ $labels.instance }} (job {{ $labels.job }}) for "
                f"{dur(t.availability.agent_down_for)}."
                "{{ else }}Prometheus has had no target matching "
                f"{t.pack.agent_selector} for {dur(t.availability.agent_down_for)}: no agent "
                "is being scraped at all.{{ end }}"
            ),
        ),
    ]


def _utilization_held(t: Thresholds, side: str, line: float, for_seconds: float) -> str:
    """A GPU utilization alert's description, up to its last sentence's end."""
    return (
        f"{_GPU_WHERE} has stayed {side} {pct(line)} utilization for {dur(for_seconds)} "
        f"(average over the last {t.pack.window}: {{{{ $value | humanizePercentage }}}})"
    )


def _slo_breach(t: Thresholds, latency: str, slo: float, for_seconds: float) -> str:
    """A P99 latency SLO alert's description (TTFT, TPOT)."""
    return (
        f"{_WORKER_WHERE} has a {latency} P99 of {{{{ $value | humanizeDuration }}}} over the "
        f"last {t.pack.window}, above the {secs(slo)} SLO for {dur(for_seconds)}."
    )


def _xid_expr(t: Thresholds, matcher: str) -> str:
    """A new XID: the agent's timestamp of the last event of that XID is recent.

    Counter arithmetic across gaps misleads both ways: ``x unless x offset 5m`` is
    true again after one failed scrape (the sample 5 minutes back is a staleness
    marker), and a counter back at 1 after an agent restart looks old. The value is
    the event's age in seconds; the alert resolves once the event is older than the
    window.
    """
    sel = t.pack.selector(matcher)
    return (
        f"min by ({GPU}, xid) (time() - {contract.GPU_XID_LAST_TIMESTAMP_SECONDS}{sel})\n"
        f"< {num(t.pack.rate_window)}"
    )


def _young(t: Thresholds, seconds: float) -> str:
    """Workers whose process started less than ``seconds`` ago (labels job, instance, worker)."""
    return S.young(selector=t.pack.selector(), key=WORKER_KEY, within=num(seconds))


def _imbalance_expr(t: Thresholds) -> str:
    """Low utilization with normal latency [6.2]: a worker far above its model's other workers, in GPU utilization or
    in open requests, while the model's own GPUs average below idle_below over the
    alert's ``for`` (persistently low, [6.2]) and its latency is fine.

    ``x * (count + r - 1) > r * sum`` is ``x > r * (mean of the others)`` without a
    division; with one worker it is ``x * r > r * x``, never true.
    """
    n = names(t)
    lb = t.load_imbalance
    r = num(lb.load_ratio)
    r1 = num(lb.load_ratio - 1)
    branches = []
    for load, series, floor in (
        ("gpu_utilization", n.worker_util, f"> {num(t.gpu_utilization.idle_below)}"),
        ("open_requests", n.open_avg, f">= {num(lb.min_open_requests)}"),
    ):
        branches.append(
            f"label_replace(\n"
            f"    {series} {floor}\n"
            f"  and\n"
            f"    {series}\n"
            f"  * on ({MODEL}) group_left ()\n"
            f"    (count by ({MODEL}) ({series}) + {r1})\n"
            f"  > on ({MODEL}) group_left ()\n"
            f"    {r} * sum by ({MODEL}) ({series}),\n"
            f'  "load", "{load}", "", ""\n'
            f")"
        )
    return (
        "(\n"
        + "\nor\n".join(branches)
        + "\n)\n"
        # the model's average over load_imbalance.idle_window (1h), not its 5m value
        # nor one as short as the `for`: a split whose average wobbles around
        # idle_below (0.39 +- 0.06 over 20 minutes) is persistently low, and a shorter
        # average crossing the line resets the `for` once a period
        + f"and on ({MODEL})\n"
        + f"avg_over_time({n.model_util}[{dur(lb.idle_window)}]) "
        + f"< {num(t.gpu_utilization.idle_below)}\n"
        + f"and on ({MODEL}) {n.quantile('model', 'ttft', 'p99')} "
        + f"<= {num(t.ttft.p99_slo_seconds)}"
    )


def _telemetry_down_expr(t: Thresholds) -> str:
    """No finished GPU pass (NVML or dcgm-exporter) for gpu_lost_for, or errors and never one."""
    nvml = t.pack.selector('collector=~"nvml|dcgm"')  # either GPU backend's collector
    last = f"{contract.LAST_COLLECT_TIMESTAMP_SECONDS}{nvml}"
    errors = f"{contract.COLLECT_ERRORS}{nvml}"
    return (
        f"time() - max by ({INSTANCE}) ({last}) > {num(t.availability.gpu_lost_for)}\n"
        f"or\n"
        f"(max by ({INSTANCE}) ({errors}) unless on ({INSTANCE}) {last})"
    )
