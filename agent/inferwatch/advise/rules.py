"""The loops of :mod:`inferwatch.pack.loops` applied to pictures: what to do, and why.

Each rule asks a condition of ``pack.loops`` (the definition the alerts use) and,
when it holds, writes the advice with the numbers that made it hold and the
worker's own launch flags ("prefix caching is off", "from 48 to 38"), and the
knob each action turns (``pack.ranking.Move``). ``advise`` ranks them with
``pack.ranking`` (a condition that pages first, then warnings, then configuration
notes) and reconciles any two that would undo each other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from inferwatch.advise.model import (
    FIRING,
    PENDING,
    SILENT,
    AlertSeen,
    AlertView,
    Evidence,
    Recommendation,
    WorkerPicture,
    clock,
)
from inferwatch.engines import contract as c
from inferwatch.pack import fmt
from inferwatch.pack import loops as L
from inferwatch.pack import ranking as R
from inferwatch.pack.ranking import Move
from inferwatch.pack.reading import mean
from inferwatch.pack.thresholds import Thresholds

#: the id of the VRAM loop's out-of-memory item ([2.3], [6.2]): its condition and remedy
#: are pack.loops' (``oom_risk``, ``oom_headroom``). With evidence of running out (a
#: restart, an XID error) it is a crash and ranks as critical; without, it is the
#: guide's configuration note (0.85 with prefix caching on), ranked last
OOM_RISK = "oom_risk"
OOM_CRASH_TITLE = "The worker ran out of memory on a full card: lower its pool"
OOM_NOTE_TITLE = (
    "Configuration note: with prefix caching on, the guide sets --gpu-memory-utilization "
    f"to {L.GPU_MEMORY_UTILIZATION_HEADROOM}"
)

#: Action = an action's text and the knob moves it makes
Action = tuple[str, tuple[tuple[str, str], ...]]


def act(text: str, *moves: tuple[str, str]) -> Action:
    return text, moves


#: a picture's figure shown as it is, with no threshold: its evidence name, unit and the
#: agent's series it comes from
SEEN = {
    "queue_slope": ("queue trend", "requests/s", c.QUEUE_DEPTH_SLOPE.name),
    "kv_usage": ("KV cache usage (peak)", "ratio", c.KV_CACHE_USAGE_RATIO.name),
    "gpu_utilization": ("GPU utilization", "ratio", c.GPU_UTILIZATION_RATIO.name),
    "vram_used_ratio": ("VRAM used (peak, NVML)", "ratio", c.GPU_MEMORY_USED_RATIO.name),
}


def seen(p: WorkerPicture, *figures: str) -> list[Evidence]:
    """The evidence of those of ``figures`` (keys of ``SEEN``) the picture knows."""
    out = []
    for figure in figures:
        value: float | None = getattr(p, figure)
        if value is not None:
            name, unit, series = SEEN[figure]
            out.append(Evidence(name, value, unit, series=series))
    return out


def _rec(
    loop_id: str,
    workers: Sequence[WorkerPicture],
    score: float,
    evidence: Sequence[Evidence],
    actions: Sequence[str | Action],
    implicit: Sequence[tuple[str, str]] = (),
) -> Recommendation:
    """A loop's item, ranked by its alerts' severity; ``implicit``: moves no action states
    (a KV cache that is full: do not lower the pool)."""
    loop = L.BY_ID[loop_id]
    severity = R.severity(loop.alerts)
    texts, moves = _split(actions)
    moves += tuple(Move(k, w) for k, w in implicit)
    return Recommendation(
        id=loop_id,
        loop=loop.name,
        title=loop.title,
        workers=tuple(p.label for p in workers),
        model=workers[0].model,
        score=score,
        evidence=tuple(evidence),
        actions=texts,
        guide=L.sections(loop_id),
        alerts=loop.alerts,
        tier=R.ALERT,
        severity=severity,
        urgency=R.urgency(R.ALERT, severity, loop.alerts),
        moves=moves,
    )


def _split(actions: Sequence[str | Action]) -> tuple[tuple[str, ...], tuple[Move, ...]]:
    texts: list[str] = []
    moves: list[Move] = []
    for a in actions:
        text, turns = (a, ()) if isinstance(a, str) else a
        texts.append(text)
        moves += [Move(k, w, text) for k, w in turns]
    return tuple(texts), tuple(moves)


SCALE_OUT = act(L.SCALE_OUT, (R.REPLICAS, R.UP))


def _prefix_action(p: WorkerPicture, why: str) -> Action | None:
    state = p.flags.get("prefix_caching", "unknown")
    on = (R.PREFIX_CACHING, R.UP)
    if state == "false":
        return act(f"Prefix caching is off: add --enable-prefix-caching. {why}", on)
    if state == "true":
        return None
    return act(
        "Make sure prefix caching is on (--enable-prefix-caching; the worker's launch flags "
        f"do not say). {why}",
        on,
    )


def _fp8_action(p: WorkerPicture) -> Action | None:
    """FP8 KV advice, or None when the worker's KV cache is FP8 already."""
    return None if L.is_fp8(p.flag("kv_cache_dtype")) else act(L.FP8_KV, (R.KV_CACHE_DTYPE, R.DOWN))


def batch_full(p: WorkerPicture, t: Thresholds) -> bool:
    """The running batch reached ``advice.full_batch_share`` of max_num_seqs."""
    cap = p.capacity()
    return (
        bool(cap)
        and p.running_max is not None
        and p.running_max >= (t.advice.full_batch_share * (cap or 0))
    )


def _fewer_seqs(p: WorkerPicture, t: Thresholds) -> Action | None:
    """Lower --max-num-seqs, but only where the batch reaches it (else it changes nothing)."""
    cap = p.capacity()
    if not cap or not batch_full(p, t):
        return None
    text = L.fewer_seqs(cap, max(1, math.floor(cap * t.advice.max_num_seqs_cut)))
    return act(text, (R.MAX_NUM_SEQS, R.DOWN))


def _over(p: WorkerPicture, t: Thresholds) -> bool:
    return L.over_capacity(p.queue_depth, p.capacity(), p.running, p.kv_usage, t)


# --------------------------------------------------------------------------- per worker


def rule_over_capacity(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """InferenceQueueOverCapacity [6 FAQ]: more waiting than the worker can batch. Its
    actions follow ``pack.loops.queue_levers``, as ``--what-if suggest``'s lever and the
    runbook's "Do this now" do: scale out first with the GPU busy; more slots first only
    where the GPU idles under its line."""
    levers = L.queue_levers(
        p.queue_depth, p.capacity(), p.running, p.kv_usage, p.gpu_utilization, t
    )
    if not levers:
        return None
    cap = L.batch_capacity(p.capacity(), p.running, p.kv_usage, t)
    queue = p.queue_depth or 0.0
    kv_bound = cap is not None and cap != p.capacity()
    ev = [
        Evidence(
            "queue depth (mean)",
            queue,
            "requests",
            ">",
            cap,
            "running batch, KV cache full" if kv_bound else "max_num_seqs",
            series=c.QUEUE_DEPTH.name,
        )
    ]
    ev += seen(p, "queue_slope", "kv_usage", "gpu_utilization")
    actions: list[str | Action] = [SCALE_OUT, L.RATE_LIMIT]
    if kv_bound:
        actions.append(
            act(
                "Do not raise --max-num-seqs: the KV cache is full, more sequences would only "
                "be preempted.",
                (R.MAX_NUM_SEQS, R.NO_UP),
            )
        )
    elif levers[0] == L.SLOTS_LEVER and p.gpu_utilization is not None:
        # the GPU idles under its line: the batch is what is too small for the card
        actions.insert(
            0,
            act(
                f"Raise --max-num-seqs{f' from {p.capacity():g}' if p.capacity() else ''}: the "
                f"GPU is at {fmt.percent(p.gpu_utilization)}, under "
                f"{fmt.percent(t.gpu_utilization.idle_below)} (gpu_utilization.idle_below), so "
                "the batch is too small for it. Check the memory budget with `inferwatch "
                "advise capacity` (`--what-if suggest` predicts the new count).",
                (R.MAX_NUM_SEQS, R.UP),
            ),
        )
    return _rec("over_capacity", [p], queue / max(1.0, cap or 1.0), ev, actions)


def rule_memory(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """InferenceVRAMPressureQueueRising [4.2], VRAM near the limit: memory pressure with a rising queue."""
    if not L.memory(p.kv_usage, p.vram_used_ratio, p.queue_slope, t):
        return None
    from_kv = p.kv_usage is not None
    value = L.pressure(p.kv_usage, p.vram_used_ratio) or 0.0
    ev = [
        Evidence(
            "KV cache usage (peak)" if from_kv else "VRAM used (peak)",
            value,
            "ratio",
            ">",
            t.vram.scale_above,
            "vram.scale_above",
            series=c.KV_CACHE_USAGE_RATIO.name if from_kv else c.GPU_MEMORY_USED_RATIO.name,
        ),
        Evidence(
            "queue trend",
            (p.queue_slope or 0.0) * 60,
            "requests/min",
            ">",
            t.queue.rising_min_per_minute,
            "queue.rising_min_per_minute",
            series=c.QUEUE_DEPTH_SLOPE.name,
        ),
    ]
    # [4.2]: past the line with the queue rising, scale out or rate-limit first; then
    # [6.2]'s one set for VRAM: prefix caching, an FP8 KV cache, fewer sequences
    actions: list[str | Action] = [SCALE_OUT, L.RATE_LIMIT]
    prefix = _prefix_action(p, L.PREFIX_CACHING)
    if prefix:
        actions.append(prefix)
    fp8 = _fp8_action(p)
    if fp8:
        actions.append(fp8)
    fewer = _fewer_seqs(p, t)
    if fewer:
        actions.append(fewer)
    implicit: list[tuple[str, str]] = []
    if not from_kv:
        # NVML's ratio: the card itself is nearly full, an out-of-memory risk
        gmu = p.flag_number("gpu_memory_utilization")
        if gmu is None or gmu > L.GPU_MEMORY_UTILIZATION_HEADROOM:
            actions.append(act(L.headroom(gmu), (R.GPU_MEMORY_UTILIZATION, R.DOWN)))
    else:
        # the KV pool is what is full: a lower --gpu-memory-utilization would shrink it
        implicit.append((R.GPU_MEMORY_UTILIZATION, R.NO_DOWN))
    return _rec("memory", [p], value / t.vram.scale_above, ev, actions, implicit)


def prefix_caching(p: WorkerPicture) -> bool | None:
    """The worker's prefix caching flag: True, False, or None where its flags do not say."""
    return {"true": True, "false": False}.get(p.flags.get("prefix_caching", ""))


def ran_out(p: WorkerPicture) -> list[Evidence]:
    """Measured evidence of running out over the span: restarts of the worker, XID errors
    on its GPUs (empty: none seen, or the source does not say)."""
    return [
        Evidence(name, count, "", ">", 0.0, series=series)
        for name, count, series in (
            ("worker restarts in the span", p.restarts, c.WORKER_START_TIME_SECONDS.name),
            ("XID errors on its GPUs in the span", p.xid_errors, c.GPU_XID_ERRORS.name),
        )
        if count
    ]


def rule_oom_risk(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """[2.3], [6.2] VRAM near the limit: the card's used ratio at ``OOM_RISK_USED_RATIO``
    or above with prefix caching on (the guide's case: 0.95, real use passes 0.9).

    Urgency as measured: with a restart or an XID error in the span, the worker is
    running out (critical, ranked with the pages: lower the pool now); without, a full
    card is vLLM's pre-allocated KV pool doing what it was told, and the guide's 0.85
    is a configuration note, ranked after every condition. Nothing here raises the flag.
    """
    measured = ran_out(p)
    at_risk = L.oom_risk(p.vram_used_ratio, prefix_caching(p))
    full = p.vram_used_ratio is not None and p.vram_used_ratio >= L.OOM_RISK_USED_RATIO
    if not (at_risk or (measured and full)):
        return None
    used = p.vram_used_ratio or 0.0
    gmu = p.flag_number("gpu_memory_utilization")
    ev = [
        Evidence(
            "VRAM used (peak, NVML)" + (" with prefix caching on" if at_risk else ""),
            used, "ratio", ">=", L.OOM_RISK_USED_RATIO, "pack.loops.OOM_RISK_USED_RATIO",
            series=c.GPU_MEMORY_USED_RATIO.name,
        ),
    ]  # fmt: skip
    if gmu is not None:
        ev.append(Evidence("--gpu-memory-utilization", gmu, "", series=c.WORKER_INFO.name))
    if p.kv_usage is not None:
        ev.append(
            Evidence(
                "KV cache usage (peak): what the VRAM rules read", p.kv_usage, "ratio",
                series=c.KV_CACHE_USAGE_RATIO.name,
            )
        )  # fmt: skip
    ev += measured
    lower = (R.GPU_MEMORY_UTILIZATION, R.DOWN)
    actions: list[str | Action]
    if gmu is not None and gmu <= L.GPU_MEMORY_UTILIZATION_HEADROOM:
        actions = [
            f"--gpu-memory-utilization is {gmu:g} already, yet NVML shows {used:.0%} of the "
            "card in use: another process holds memory on it (nvidia-smi lists them); give "
            "this worker a card, or a share, of its own."
        ]
    elif measured:
        actions = [act(L.oom_headroom(gmu, p.vram_used_ratio), lower)]
    else:
        actions = [act(L.headroom_note(gmu), lower)]
    actions.append(
        "If the smaller pool then preempts or queues, store the KV cache in FP8 or add "
        "capacity (scale out); do not raise the flag back on this card."
    )
    texts, moves = _split(actions)
    if measured:
        tier, severity = R.ALERT, "critical"
        urgency = "critical: close to a crash, measured: " + "; ".join(e.text() for e in measured)
        title = OOM_CRASH_TITLE
    else:
        tier, severity = R.NOTE, None
        urgency = (
            "configuration note: no sign of running out in the span (no restart, no XID "
            "error); a card full of vLLM's pre-allocated KV pool is by design"
        )
        title = OOM_NOTE_TITLE
    return Recommendation(
        id=OOM_RISK,
        loop=L.VRAM_LIMIT,
        title=title,
        workers=(p.label,),
        model=p.model,
        score=used / L.OOM_RISK_USED_RATIO,
        evidence=tuple(ev),
        actions=texts,
        guide="6.2, 2.3",
        tier=tier,
        severity=severity,
        urgency=urgency,
        moves=moves,
    )


def _kv_pool_action(p: WorkerPicture) -> Action:
    """Raise --gpu-memory-utilization only on a card with room (pack.loops.card_has_room)."""
    gmu = p.flag_number("gpu_memory_utilization")
    if L.card_has_room(p.vram_used_ratio):
        return act(
            L.raise_kv_pool(gmu, p.vram_used_ratio),
            (R.GPU_MEMORY_UTILIZATION, R.UP),
            (R.GPU_MEMORY_UTILIZATION, R.NO_DOWN),
        )
    seen = (
        f"NVML shows {p.vram_used_ratio:.0%} of the card in use"
        if p.vram_used_ratio is not None
        else "NVML does not say how full the card is"
    )
    return act(
        f"Do not raise --gpu-memory-utilization{f' from {gmu:g}' if gmu is not None else ''}: "
        f"{seen} (room means below {L.OOM_RISK_USED_RATIO:.0%}), and a larger pool on a full "
        "card ends in an out-of-memory crash. Make the pool go further instead (below), or "
        "scale out; never lower the flag for preemptions either, that shrinks the pool.",
        (R.GPU_MEMORY_UTILIZATION, R.NO_UP),
        (R.GPU_MEMORY_UTILIZATION, R.NO_DOWN),
    )


def rule_preemptions(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """InferenceKVCachePreemptions [4.2]: the KV pool is too small for the batch."""
    if not L.preempting(p.preemption_rate, t):
        return None
    rate = p.preemption_rate or 0.0
    ev = [
        Evidence(
            "preemptions",
            rate,
            "/s",
            ">",
            t.kv_cache.preemption_rate_above,
            "kv_cache.preemption_rate_above",
            series=c.PREEMPTIONS.name,
        )
    ]
    ev += seen(p, "kv_usage", "vram_used_ratio")
    actions: list[str | Action] = [_kv_pool_action(p)]
    fewer = _fewer_seqs(p, t)
    if fewer:
        actions.append(fewer)
    fp8 = _fp8_action(p)
    if fp8:
        actions.append(fp8)
    actions.append(SCALE_OUT)
    score = rate / t.kv_cache.preemption_rate_above if t.kv_cache.preemption_rate_above else rate
    return _rec("preemptions", [p], score, ev, actions)


def _uptime_evidence(p: WorkerPicture, t: Thresholds, relation: str) -> Evidence | None:
    if p.uptime_seconds is None:
        return None
    return Evidence(
        "worker uptime", p.uptime_seconds, "s", relation, t.cold_start.within,
        "cold_start.within", series=c.WORKER_START_TIME_SECONDS.name,
    )  # fmt: skip


def cold_ttft_p95(p: WorkerPicture, t: Thresholds) -> tuple[float | None, bool]:
    """(the TTFT P95 the cold-start condition reads, whether it is the since-start one).

    Within cold_start.within of the start, the larger of the window's figure and the
    figure since the start: the alert fires minutes after the slow first tokens, when
    the agent's stats window no longer holds them but the worker's life still does."""
    life = p.ttft_p95_since_start if L.young(p.uptime_seconds, t) else None
    if life is not None and (p.ttft_p95 is None or life > p.ttft_p95):
        return life, True
    return p.ttft_p95, False


def rule_cold_start(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """InferenceWorkerColdStart (and InferenceWarmupDeadlineExceeded) [5.2]: a young worker
    serves slow first tokens."""
    gate = p.warmup
    deadline = gate is not None and gate.deadline_exceeded
    gate_deadline = None if gate is None else gate.deadline_exceeded
    p95, whole_life = cold_ttft_p95(p, t)
    if not (L.cold_start(p95, p.uptime_seconds, _over(p, t), t, gate_deadline) or deadline):
        return None
    line = t.ttft.warmup_p95_seconds
    ev = []
    if p95 is not None:
        name = "TTFT P95"
        if whole_life:
            name += f" since the start ({p.ttft_count_since_start or 0:.0f} first tokens)"
        ev.append(
            Evidence(
                name, p95, "s", ">", line, "ttft.warmup_p95_seconds",
                series=c.TTFT_SECONDS.name,
            )
        )  # fmt: skip
    up = _uptime_evidence(p, t, "<")
    if up:
        ev.append(up)
    actions: list[str | Action] = []
    if gate is None:
        actions.append(L.WARMUP_GATE)
    elif deadline:
        actions.append(
            "The warm-up gate opened on its deadline without warming this worker: see "
            f'{c.WARMUP_FAILURES}{{worker="{p.worker}"}} and the agent\'s log.'
        )
    prefix = _prefix_action(p, L.CACHED_SYSTEM_PROMPT)
    actions.append(prefix or f"Prefix caching is on. {L.CACHED_SYSTEM_PROMPT}")
    return _rec("cold_start", [p], (p95 or line) / line, ev, actions)


def rule_warmup(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """InferenceTTFTHighGPUIdle, slow first token on an idle GPU: slow first tokens on an idle GPU, long after the start.

    A worker up for days was warmed by its traffic long ago: what is cold is the prompt
    path, so the advice is prefix caching and the prefill budget, not a warm-up request.
    """
    if not L.warmup(p.ttft_p95, p.gpu_utilization, p.uptime_seconds, t):
        return None
    line = t.ttft.warmup_p95_seconds
    ev = [
        Evidence(
            "TTFT P95", p.ttft_p95 or 0.0, "s", ">", line, "ttft.warmup_p95_seconds",
            series=c.TTFT_SECONDS.name,
        ),
        Evidence(
            "GPU utilization", p.gpu_utilization or 0.0, "ratio", "<",
            t.gpu_utilization.idle_below, "gpu_utilization.idle_below",
            series=c.GPU_UTILIZATION_RATIO.name,
        ),
    ]  # fmt: skip
    up = _uptime_evidence(p, t, ">=")
    if up:
        ev.append(up)
    if p.prefix_hit_ratio is not None:
        ev.append(Evidence("prefix cache hit ratio", p.prefix_hit_ratio, "ratio"))
    actions: list[str | Action] = []
    prefix = _prefix_action(p, L.CACHED_SYSTEM_PROMPT)
    actions.append(prefix or f"Prefix caching is on. {L.CACHED_SYSTEM_PROMPT}")
    low, high = L.BATCHED_TOKENS_RANGE
    actions.append(
        "Look for new long prompts: they are computed before the first token. "
        f"--max-num-batched-tokens {low}-{high} balances prefill against decoding, and prompts "
        f"over {L.LONG_PROMPT_TOKENS:,} tokens belong in a long-context pool."
    )
    return _rec("warmup", [p], (p.ttft_p95 or line) / line, ev, actions)


def rule_long_tail(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """InferenceLatencyLongTail [6.1]: TTFT or TPOT P99 at least tail_ratio x its P50."""
    found = [
        (name, p50, p99, L.tail_ratio(p50, p99))
        for name, p50, p99 in (("TTFT", p.ttft_p50, p.ttft_p99), ("TPOT", p.tpot_p50, p.tpot_p99))
        if L.long_tail(p50, p99, t)
    ]
    if not found:
        return None
    ev = []
    for name, p50, p99, ratio in found:
        ev += [
            Evidence(f"{name} P50", p50 or 0.0, "s"),
            Evidence(f"{name} P99", p99 or 0.0, "s"),
            Evidence(
                f"{name} P99 / P50", ratio or 0.0, "x", ">=", t.latency.tail_ratio,
                "latency.tail_ratio",
                series=c.TTFT_SECONDS.name if name == "TTFT" else c.TPOT_SECONDS.name,
            ),
        ]  # fmt: skip
    share = p.long_prompt_share
    if share is not None:
        ev.append(
            Evidence(
                L.LONG_PROMPT_EVIDENCE, share, "ratio",
                ">=" if share >= t.latency.long_prompt_share else "<",
                t.latency.long_prompt_share, "latency.long_prompt_share",
            )
        )  # fmt: skip
    actions = [L.long_context_pool(share, t), L.LEAST_CONNECTIONS]
    max_len = p.flag_number("max_model_len")
    if max_len and (share is None or share >= t.latency.long_prompt_share):
        actions.append(
            f"This worker accepts up to {max_len:,.0f} tokens (--max-model-len {max_len:g}); "
            "the short pool can run a smaller --max-model-len and more sequences."
        )
    worst = max(r or 0.0 for *_, r in found)
    return _rec("long_tail", [p], worst / t.latency.tail_ratio, ev, actions)


# --------------------------------------------------------------------------- per model


def model_utilization(group: Sequence[WorkerPicture]) -> float | None:
    """Mean utilization of the model's own GPUs (each GPU once), else of its workers'."""
    per_gpu: dict[tuple[str, str], float] = {}
    for p in group:
        if p.gpu_utilization is not None:
            for g in p.gpus:
                per_gpu.setdefault((p.instance, g), p.gpu_utilization)
    if per_gpu and all(len(p.gpus) == 1 for p in group if p.gpu_utilization is not None):
        return mean(per_gpu.values())
    return mean(p.gpu_utilization for p in group)


def model_ttft_p99(group: Sequence[WorkerPicture]) -> float | None:
    """The model's TTFT P99 where the source has it; else its workers' largest (a mix's P99
    is never above its largest part's)."""
    known = [p.model_ttft_p99 for p in group if p.model_ttft_p99 is not None]
    if known:
        return known[0]
    values = [p.ttft_p99 for p in group if p.ttft_p99 is not None]
    return max(values) if values else None


def imbalance_of(group: Sequence[WorkerPicture], t: Thresholds) -> dict[str, str]:
    """``pack.loops.imbalanced`` for one model's pictures (keys: shown names)."""
    return L.imbalanced(
        [L.WorkerLoad(p.label, p.gpu_utilization, p.open_requests) for p in group],
        model_utilization(group),
        model_ttft_p99(group),
        t,
    )


def rule_imbalance(group: Sequence[WorkerPicture], t: Thresholds) -> Recommendation | None:
    """InferenceLoadImbalance, low utilization with normal latency: one worker far above its peers while the GPUs idle."""
    busy = imbalance_of(group, t)
    if not busy:
        return None
    util = model_utilization(group) or 0.0
    ev = [
        Evidence(
            "GPU utilization (mean of the model's GPUs)",
            util,
            "ratio",
            "<",
            t.gpu_utilization.idle_below,
            "gpu_utilization.idle_below",
            series=c.GPU_UTILIZATION_RATIO.name,
        )
    ]
    for p in group:
        if p.gpu_utilization is not None:
            ev.append(Evidence("GPU utilization", p.gpu_utilization, "ratio", worker=p.label))
        if p.open_requests is not None:
            ev.append(Evidence("open requests", p.open_requests, "requests", worker=p.label))
    score = 0.0
    for name, load in busy.items():
        values = {
            p.label: (p.gpu_utilization if load == "gpu_utilization" else p.open_requests)
            for p in group
        }
        top = values[name] or 0.0
        others = [v for k, v in values.items() if k != name and v is not None]
        rest = sum(others) / len(others) if others else 0.0
        ratio = top / rest if rest > 0 else math.inf
        score = max(score, min(ratio, 1e6))
        ev.append(
            Evidence(
                f"{load.replace('_', ' ')}: busiest / mean of the others",
                ratio,
                "x",
                ">",
                t.load_imbalance.load_ratio,
                "load_imbalance.load_ratio",
                worker=name,
            )
        )
    ordered = sorted(group, key=lambda p: (p.label not in busy, p.label))
    return _rec(
        "imbalance",
        ordered,
        score / t.load_imbalance.load_ratio,
        ev,
        [L.LEAST_CONNECTIONS, act(L.NO_SCALE_IN, (R.REPLICAS, R.NO_DOWN)), L.DATA_PARALLEL],
    )


def rule_consolidate(p: WorkerPicture, t: Thresholds) -> Recommendation | None:
    """InferenceGPUUnderutilized [6.1], outside the loops: a GPU in the waste band."""
    if not L.waste(p.gpu_utilization, t):
        return None
    util = p.gpu_utilization or 0.0
    line = L.WASTE.of(t)
    ev = [
        Evidence(
            "GPU utilization", util, "ratio", L.WASTE.op, line, L.WASTE.key,
            series=c.GPU_UTILIZATION_RATIO.name,
        )
    ]  # fmt: skip
    actions: list[str | Action] = [L.SHARE_GPU]
    if L.young(p.uptime_seconds, t):
        # a worker within its cold-start window has not met its traffic yet: scaling it in
        # now is what the InferenceWorkerColdStart runbook warns against
        up = _uptime_evidence(p, t, "<")
        if up:
            ev.append(up)
        actions.append(
            act(
                "Do not scale in yet: the worker started "
                f"{fmt.quantity(p.uptime_seconds or 0.0, 's')} ago, within its cold-start window "
                f"(cold_start.within {fmt.quantity(t.cold_start.within, 's')}). Look at its "
                "utilization again once it has served its traffic warm.",
                (R.REPLICAS, R.NO_DOWN),
            )
        )
    else:
        actions.append(
            act(
                "Or scale in, keeping the warm-up gate on the replicas that start later.",
                (R.REPLICAS, R.DOWN),
            )
        )
    return _rec("consolidate", [p], (line - util) / line, ev, actions)


WORKER_RULES = (
    rule_oom_risk,
    rule_over_capacity,
    rule_memory,
    rule_preemptions,
    rule_cold_start,
    rule_warmup,
    rule_long_tail,
)


# --------------------------------------------------------------------------- the alerts


def alert_waits(t: Thresholds) -> dict[str, float]:
    """Each loop's alert (``pack.loops``) with its ``for`` in seconds under ``t``."""
    from inferwatch.pack.rules import alerts

    return {a.name: a.for_seconds for a in alerts(t) if a.name in L.BY_ALERT}


def about(seen: AlertSeen, p: WorkerPicture) -> bool:
    """Whether an alert's labels point at this worker: its worker (on its instance), one of
    its GPUs, or, for an alert of a whole model, its model."""
    labels = seen.labels
    if "instance" in labels and labels["instance"] != p.instance:
        return False
    if "worker" in labels:
        return labels["worker"] == p.worker
    if "gpu" in labels:
        return labels["gpu"] in p.gpus
    return "model" in labels and labels["model"] == p.model


def _alert_evidence(seen: Sequence[AlertSeen], at: float) -> list[Evidence]:
    out = []
    for s in seen:
        since = s.since
        when = f" since {clock(since)}" if since is not None else ""
        out.append(
            Evidence(
                f"{s.alert} {s.state}{when}, for", max(0.0, at - since) if since else 0.0,
                "age", series=f'ALERTS{{alertstate="{s.state}"}}',
            )
        )  # fmt: skip
    return out


def _earliest(seen: Sequence[AlertSeen]) -> float | None:
    known = [s.since for s in seen if s.since is not None]
    return min(known) if known else None


def _most_urgent(seen: Sequence[AlertSeen], fallback: str | None) -> str | None:
    known = [s.severity for s in seen if s.severity is not None and s.severity in R.SEVERITIES]
    return min(known, key=R.SEVERITIES.index) if known else fallback


def with_alerts(
    recs: Sequence[Recommendation], pictures: Sequence[WorkerPicture], view: AlertView
) -> list[Recommendation]:
    """Each loop's item ranked by what Prometheus says of its alerts at the end of the range
    read: firing, it pages (``ALERT``, at the firing alert's severity, with the alert and
    since when in its evidence); pending, it is not paging yet (``LOOP``); evaluated and
    neither, its condition held over the range but pages nobody now (``LOOP``). An alert
    Prometheus does not evaluate leaves the item as its condition ranks it (agent mode's
    "condition holds now"). A firing alert of a loop with no item (its condition does not
    hold over the whole range) gets one that says so, with the span to read instead."""
    by_label = {p.label: p for p in pictures}
    out = []
    for rec in recs:
        if rec.id not in L.BY_ID or not set(rec.alerts) & view.evaluated:
            out.append(rec)
            continue
        mine = [by_label[w] for w in rec.workers if w in by_label]
        seen = [s for s in view.active if s.alert in rec.alerts and any(about(s, p) for p in mine)]
        firing = [s for s in seen if s.state == FIRING]
        pending = [s for s in seen if s.state == PENDING]
        names = ", ".join(dict.fromkeys(s.alert for s in firing or pending)) or ", ".join(
            a for a in rec.alerts if a in view.evaluated
        )
        if firing:
            severity = _most_urgent(firing, rec.severity)
            since = _earliest(firing)
            pages = "pages" if severity == "critical" else "warns"
            when = f" since {clock(since)}" if since is not None else ""
            rec = dataclasses.replace(
                rec,
                tier=R.ALERT,
                severity=severity,
                urgency=f"{severity}: {names} fires{when} ({pages}; Prometheus' ALERTS)",
                evidence=(*_alert_evidence(firing, view.at), *rec.evidence),
                alert_state=FIRING,
                alert_since=since,
            )
        elif pending:
            since = _earliest(pending)
            when = f" since {clock(since)}" if since is not None else ""
            rec = dataclasses.replace(
                rec,
                tier=R.LOOP,
                urgency=f"active, not paging yet: {names} pending{when} (its 'for' not yet passed)",
                evidence=(*_alert_evidence(pending, view.at), *rec.evidence),
                alert_state=PENDING,
                alert_since=since,
            )
        else:
            rec = dataclasses.replace(
                rec,
                tier=R.LOOP,
                urgency=f"held over the range read, but {names} is not firing at its end "
                f"({clock(view.at)}): it pages nobody now",
                alert_state=SILENT,
            )
        out.append(rec)
    return out + _firing_without_item(out, pictures, view)


def _firing_without_item(
    recs: Sequence[Recommendation], pictures: Sequence[WorkerPicture], view: AlertView
) -> list[Recommendation]:
    """An item for each firing loop alert whose condition advise did not find over the
    range (a range much longer than the episode averages it away)."""
    covered = {(r.id, w) for r in recs for w in r.workers}
    holding = [(r.id, r.model, r.workers) for r in recs]
    out: list[Recommendation] = []
    for p in pictures:
        for loop_id in dict.fromkeys(L.BY_ALERT[s.alert] for s in view.active):
            firing = [
                s
                for s in view.active
                if s.state == FIRING and L.BY_ALERT[s.alert] == loop_id and about(s, p)
            ]
            if not firing or (loop_id, p.label) in covered:
                continue
            if L.silenced(loop_id, p.model, (p.label,), holding):
                continue
            loop = L.BY_ID[loop_id]
            severity = _most_urgent(firing, R.severity(loop.alerts))
            since = _earliest(firing)
            names = ", ".join(dict.fromkeys(s.alert for s in firing))
            start = f"--start {since:.0f} " if since is not None else ""
            when = f" since {clock(since)}" if since is not None else ""
            out.append(
                Recommendation(
                    id=loop_id,
                    loop=loop.name,
                    title=loop.title,
                    workers=(p.label,),
                    model=p.model,
                    score=0.0,
                    evidence=tuple(_alert_evidence(firing, view.at)),
                    actions=(
                        f"{names} fires, but over the whole range read its condition does not "
                        "hold: read the span it fires in for the remedy (inferwatch advise "
                        f"--prometheus-url ... {start}--worker {p.label}), and its runbook.",
                    ),
                    guide=L.sections(loop_id),
                    alerts=loop.alerts,
                    tier=R.ALERT,
                    severity=severity,
                    urgency=f"{severity}: {names} fires{when} (Prometheus' ALERTS)",
                    alert_state=FIRING,
                    alert_since=since,
                )
            )
            covered.add((loop_id, p.label))
    return out


def advise(
    pictures: Sequence[WorkerPicture], t: Thresholds, alerts: AlertView | None = None
) -> list[Recommendation]:
    """Every recommendation for these workers, most urgent first; with ``alerts`` (read from
    Prometheus), each loop's item ranked by its alerts' state there (``with_alerts``)."""
    recs: list[Recommendation] = []
    for p in pictures:
        for rule in WORKER_RULES:
            rec = rule(p, t)
            if rec is not None:
                recs.append(rec)
    groups: dict[str, list[WorkerPicture]] = {}
    for p in pictures:
        groups.setdefault(p.model or p.key, []).append(p)
    for group in groups.values():
        spread = rule_imbalance(group, t)
        if spread is not None:
            recs.append(spread)
        suppressed = {
            p.label
            for p in group
            if spread is not None and set(L.BY_ID["consolidate"].suppressed_by) & {spread.id}
        }
        for p in group:
            if p.label not in suppressed:
                rec = rule_consolidate(p, t)
                if rec is not None:
                    recs.append(rec)
    # what another loop suppresses (pack.loops: Loop.suppressed_by, in its scope)
    holding = [(r.id, r.model, r.workers) for r in recs]
    recs = [
        r for r in recs if r.id not in L.BY_ID or not L.silenced(r.id, r.model, r.workers, holding)
    ]
    if alerts is not None:
        recs = with_alerts(recs, pictures, alerts)
    recs.sort(key=lambda r: r.workers)
    # one answer: ranked (pack.ranking), no two items undoing each other; the guide's 0.85
    # note, where a full KV pool forbids lowering it now, becomes that item's last step
    return R.reconcile(recs, {R.GPU_MEMORY_UTILIZATION: L.HEADROOM_AFTER_FP8})
