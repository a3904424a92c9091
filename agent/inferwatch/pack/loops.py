"""The closed loops of the field guide, written once: what detects each, what it reads, what fixes it.

The PromQL of ``pack.rules`` is the reference definition of every loop; the
functions here are the same definitions over plain numbers (a worker's or a
model's "picture"), for the readers that do not run PromQL: ``inferwatch
advise`` and the weekly report. Each function takes numbers (None where the
data does not say) and returns a bool; a missing number makes a condition
false, as an absent series makes an alert silent.

The field guide's section 6.2 names three closed loops; this project shows them by
those names (``GUIDE_LOOPS``), never by a number, and names its further conditions
(the guide's other rules of thumb: 4.2, 5.3, 6.1 and the 6 FAQ) too:

============  ===============================  ====================================
id            shown as (``Loop.name``)          alerts
============  ===============================  ====================================
imbalance     Low utilization with normal      InferenceLoadImbalance
              latency
warmup        Slow first token on an idle GPU  InferenceTTFTHighGPUIdle
cold_start    Slow first token on an idle GPU  InferenceWorkerColdStart,
                                               InferenceWarmupDeadlineExceeded
memory        VRAM near the limit              InferenceVRAMPressureQueueRising
preemptions   VRAM near the limit              InferenceKVCachePreemptions
over_capacity Queue over capacity (further)    InferenceQueueOverCapacity
long_tail     Long tail (further)              InferenceLatencyLongTail
consolidate   GPU waste (further)              InferenceGPUUnderutilized
============  ===============================  ====================================

The guide's low-utilization loop forbids scaling in ("do not rush to scale in", 6.2): where a model is
imbalanced, the waste of its quiet GPUs is the imbalance's, so ``consolidate``
is suppressed for that model's workers (``Loop.suppressed_by``). Likewise a cold
start's slow first tokens are its own, not a long tail to route around: where
``cold_start`` holds for a worker, that worker's ``long_tail`` is silent
(InferenceLatencyLongTail's ``for`` outlasts a cold start, so on Prometheus it does
not fire either). ``suppress`` applies suppression to one set of loops (one
scenario, one worker); ``silenced`` to findings about workers of models.

The remedy facts (flags, numbers, guide citations) that advise, the report and
the runbooks print are the constants and ``Remedy`` texts at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from inferwatch.pack.thresholds import Thresholds
from inferwatch.stats import share_above

# --------------------------------------------------------------------------- the lines


@dataclass(frozen=True)
class Line:
    """One number of thresholds.yaml that a condition crosses, owned here: its dotted key
    (what the texts name), the side that is past it, and how it is read from the
    :class:`Thresholds` every reader is handed. The rules' PromQL, the runbooks, the
    dashboards, the report, advise and the demo ask the line, never a copy of it."""

    key: str
    #: "<": a value below the line is past it; ">": a value above it
    op: str
    read: Callable[[Thresholds], float]

    def of(self, t: Thresholds) -> float:
        """The line's number in ``t``."""
        return self.read(t)

    def past(self, value: float | None, t: Thresholds) -> bool:
        """Whether ``value`` is past the line (None: not known, never past)."""
        if value is None:
            return False
        line = self.read(t)
        return value < line if self.op == "<" else value > line


#: InferenceGPUUnderutilized (the consolidate loop): a GPU idling under this share
WASTE = Line("gpu_utilization.waste_below", "<", lambda t: t.gpu_utilization.waste_below)
#: InferenceGPUScaleReview: a GPU busy above this share
SCALE_REVIEW = Line(
    "gpu_utilization.scale_review_above", ">", lambda t: t.gpu_utilization.scale_review_above
)


class UtilizationLines(NamedTuple):
    """GPU utilization's lines low to high, as every reader draws its bands: waste under
    ``waste``, low up to ``healthy_low``, healthy up to ``healthy_high``, scale review
    past ``scale_review`` (``healthy_high`` and ``scale_review`` may be one number)."""

    waste: float
    healthy_low: float
    healthy_high: float
    scale_review: float


def utilization_lines(t: Thresholds) -> UtilizationLines:
    """The utilization bands' lines of ``t``."""
    low, high = t.gpu_utilization.healthy_band
    return UtilizationLines(WASTE.of(t), low, high, SCALE_REVIEW.of(t))


# --------------------------------------------------------------------------- the loops


#: the field guide's three closed loops (section 6.2), by the names every reader shows:
#: 利用率持续偏低且延迟正常, 首token延迟超标但GPU利用率不高, 显存使用率接近上限
LOW_UTILIZATION = "Low utilization with normal latency"
SLOW_FIRST_TOKEN = "Slow first token on an idle GPU"
VRAM_LIMIT = "VRAM near the limit"
GUIDE_LOOPS = (LOW_UTILIZATION, SLOW_FIRST_TOKEN, VRAM_LIMIT)
#: the project's further conditions (the guide's other rules of thumb), by name
QUEUE_OVER_CAPACITY = "Queue over capacity"
LONG_TAIL = "Long tail"
GPU_WASTE = "GPU waste"


@dataclass(frozen=True)
class Loop:
    id: str
    #: the name every reader shows: one of the guide's three loops (``GUIDE_LOOPS``) or
    #: one of the project's further conditions
    name: str
    title: str
    #: field guide sections, as thresholds.yaml cites them
    guide: tuple[str, ...]
    #: alerts of pack.rules that detect it
    alerts: tuple[str, ...]
    #: thresholds.yaml keys its condition reads
    thresholds: tuple[str, ...]
    #: loops that, where they hold for the same model, make this one silent
    suppressed_by: tuple[str, ...] = ()
    #: "model": a suppressing loop anywhere in the model silences it; "worker": only on
    #: the same worker
    suppress_scope: str = "model"


LOOPS: tuple[Loop, ...] = (
    Loop(
        "imbalance",
        LOW_UTILIZATION,
        "GPUs idle while one worker carries the load: fix the request spread",
        ("6.2", "5.3"),
        ("InferenceLoadImbalance",),
        (
            "load_imbalance.load_ratio",
            "load_imbalance.min_open_requests",
            "gpu_utilization.idle_below",
            "ttft.p99_slo_seconds",
        ),
    ),
    Loop(
        "warmup",
        SLOW_FIRST_TOKEN,
        "First tokens are slow while the GPU idles: the prompt path is cold",
        ("6.2", "5.1", "5.2"),
        ("InferenceTTFTHighGPUIdle",),
        ("ttft.warmup_p95_seconds", "gpu_utilization.idle_below", "cold_start.within"),
    ),
    Loop(
        "cold_start",
        SLOW_FIRST_TOKEN,
        "A freshly started worker serves slow first tokens: warm it up before it takes traffic",
        ("6.2", "5.2"),
        ("InferenceWorkerColdStart", "InferenceWarmupDeadlineExceeded"),
        ("ttft.warmup_p95_seconds", "cold_start.within"),
    ),
    Loop(
        "memory",
        VRAM_LIMIT,
        "The KV cache is nearly full while the queue grows: make room or add capacity",
        ("6.2", "4.2"),
        ("InferenceVRAMPressureQueueRising",),
        ("vram.scale_above", "queue.rising_window", "queue.rising_min_per_minute"),
    ),
    Loop(
        "preemptions",
        VRAM_LIMIT,
        "The engine keeps preempting requests: the KV pool is too small for the batch",
        ("4.2", "6.2"),
        ("InferenceKVCachePreemptions",),
        ("kv_cache.preemption_rate_above",),
    ),
    Loop(
        "over_capacity",
        QUEUE_OVER_CAPACITY,
        "More requests wait than the worker can batch: scale out or rate-limit",
        ("6 FAQ", "4.2"),
        ("InferenceQueueOverCapacity",),
        ("queue.over_capacity_samples", "vram.scale_above"),
    ),
    Loop(
        "long_tail",
        LONG_TAIL,
        "The slowest requests take many times the typical one: split long-context traffic",
        ("6.1", "5.3"),
        ("InferenceLatencyLongTail",),
        ("latency.tail_ratio",),
        # a cold start's few slow first tokens are a tail too, for minutes: warm-up fixes
        # them, a long-context pool does not (and the alert's `for` outlasts them)
        suppressed_by=("cold_start",),
        suppress_scope="worker",
    ),
    Loop(
        "consolidate",
        GPU_WASTE,
        "The GPU idles: share it or give it back",
        ("6.1", "4.3"),
        ("InferenceGPUUnderutilized",),
        (WASTE.key,),
        suppressed_by=("imbalance",),
    ),
)

BY_ID: Mapping[str, Loop] = {loop.id: loop for loop in LOOPS}
#: alert name -> loop id
BY_ALERT: Mapping[str, str] = {alert: loop.id for loop in LOOPS for alert in loop.alerts}


def in_guide(loop_id: str) -> bool:
    """Whether the loop is one of the guide's three (else a further condition)."""
    return BY_ID[loop_id].name in GUIDE_LOOPS


def shown(loop_id: str) -> str:
    """How a loop is named where it is shown: ``closed loop "VRAM near the limit"`` (one of
    the guide's three), ``further condition "Queue over capacity"``."""
    name = BY_ID[loop_id].name
    return f'{"closed loop" if in_guide(loop_id) else "further condition"} "{name}"'


def sections(loop_id: str) -> str:
    """The guide sections a loop rests on: ``6.2, 5.1, 5.2``."""
    return ", ".join(BY_ID[loop_id].guide)


def suppress(ids: Iterable[str]) -> frozenset[str]:
    """``ids`` without the loops that another loop in ``ids`` suppresses."""
    found = set(ids)
    return frozenset(i for i in found if not set(BY_ID[i].suppressed_by) & found)


def silenced(
    loop_id: str,
    model: str,
    workers: Iterable[str],
    holding: Iterable[tuple[str, str, Iterable[str]]],
) -> bool:
    """Whether a finding of ``loop_id`` about ``workers`` of ``model`` is suppressed by one
    of the loops ``holding`` (``(loop id, model, workers)`` each), in the loop's scope."""
    loop = BY_ID[loop_id]
    mine = set(workers)
    return any(
        other in loop.suppressed_by
        and other_model == model
        and (loop.suppress_scope == "model" or bool(mine & set(other_workers)))
        for other, other_model, other_workers in holding
    )


def loops_of_alerts(alerts: Iterable[str]) -> frozenset[str]:
    """The loops a set of firing alert names stands for (others ignored), suppression applied."""
    return suppress(BY_ALERT[a] for a in alerts if a in BY_ALERT)


# --------------------------------------------------------------------------- conditions


def young(uptime_seconds: float | None, t: Thresholds) -> bool:
    """Within ``cold_start.within`` of the worker's start (the rules' ``_young``)."""
    return uptime_seconds is not None and uptime_seconds < t.cold_start.within


def worker_down(
    up: bool, uptime_seconds: float | None, restarts_in_window: int | None, t: Thresholds
) -> bool:
    """InferenceWorkerDown's condition: the agent cannot read the worker, unless its process
    started under ``availability.startup_grace`` ago (it is loading its model) and has not
    restarted ``crash_loop_restarts`` times within ``crash_loop_window`` (a crash loop is
    down however young each start is). ``restarts_in_window`` None: not known, no loop."""
    if up:
        return False
    loading = uptime_seconds is not None and uptime_seconds < t.availability.startup_grace
    looping = (restarts_in_window or 0) >= t.availability.crash_loop_restarts
    return not loading or looping


def pressure(kv_usage: float | None, vram_used_ratio: float | None) -> float | None:
    """Memory pressure: KV-cache usage where the engine exports it, else NVML's used ratio.

    The recording rule ``worker_gpu:inferwatch_memory_pressure:ratio``.
    """
    return kv_usage if kv_usage is not None else vram_used_ratio


def queue_rising(slope_per_second: float | None, t: Thresholds) -> bool:
    """The least-squares slope of the queue over ``queue.rising_window`` above the line."""
    return slope_per_second is not None and slope_per_second > t.queue.rising_min_per_minute / 60


def memory(
    kv_usage: float | None,
    vram_used_ratio: float | None,
    slope_per_second: float | None,
    t: Thresholds,
) -> bool:
    """InferenceVRAMPressureQueueRising: pressure above ``vram.scale_above``, queue rising."""
    p = pressure(kv_usage, vram_used_ratio)
    return p is not None and p > t.vram.scale_above and queue_rising(slope_per_second, t)


def batch_capacity(
    max_num_seqs: float | None, running: float | None, kv_usage: float | None, t: Thresholds
) -> float | None:
    """What the worker can batch now: max_num_seqs, or the running batch once the KV cache
    is at or above ``vram.scale_above``, whichever is smaller (``worker:..._capacity:min``)."""
    bounds = []
    if max_num_seqs:
        bounds.append(max_num_seqs)
    if running is not None and kv_usage is not None and kv_usage >= t.vram.scale_above:
        bounds.append(running)
    return min(bounds) if bounds else None


def over_capacity(
    waiting: float | None,
    max_num_seqs: float | None,
    running: float | None,
    kv_usage: float | None,
    t: Thresholds,
) -> bool:
    """InferenceQueueOverCapacity's condition at one sample (the rule also needs it held for
    ``queue.over_capacity_samples`` samples)."""
    cap = batch_capacity(max_num_seqs, running, kv_usage, t)
    return waiting is not None and cap is not None and waiting > cap


#: the levers of a queue over capacity, as ``queue_levers`` names them (and ``advise
#: --what-if suggest``'s ``lever``)
REPLICAS_LEVER = "replicas"
SLOTS_LEVER = "slots"


def slots_have_room(gpu_utilization: float | None, kv_usage: float | None, t: Thresholds) -> bool:
    """Whether the batch, not the GPU, is what is too small: the GPU under
    ``gpu_utilization.idle_below`` (the guide's "persistently low", 40 %) and the KV cache
    below ``vram.scale_above`` (a full one would preempt more sequences). At or past the
    line the GPU is busy: more sequences lengthen each step ([6 FAQ]: at 80 % add no
    concurrency), the queue wants replicas. A GPU not seen is no room (a CPU engine at
    its slots is compute-bound). The InferenceQueueOverCapacity runbook's "Do this now"
    reads the same line."""
    idle = gpu_utilization is not None and gpu_utilization < t.gpu_utilization.idle_below
    kv_full = kv_usage is not None and kv_usage >= t.vram.scale_above
    return idle and not kv_full


def queue_levers(
    waiting: float | None,
    max_num_seqs: float | None,
    running: float | None,
    kv_usage: float | None,
    gpu_utilization: float | None,
    t: Thresholds,
) -> tuple[str, ...]:
    """The levers of a queue, first to act on first; () while it is within capacity.

    Over capacity (InferenceQueueOverCapacity's condition, a page) with the GPU busy, the
    one lever is ``REPLICAS_LEVER``: the 6 FAQ answers a queue past the limit with
    scale-out or a rate limit. Only where the slots have room (``slots_have_room``: the
    GPU idle under its line) is the batch too small for the card: ``SLOTS_LEVER`` first,
    replicas second. ``inferwatch advise`` orders its actions, ``--what-if suggest`` its
    lever and the runbook its "Do this now" by this one answer."""
    if not over_capacity(waiting, max_num_seqs, running, kv_usage, t):
        return ()
    if slots_have_room(gpu_utilization, kv_usage, t):
        return (SLOTS_LEVER, REPLICAS_LEVER)
    return (REPLICAS_LEVER,)


def preempting(rate_per_second: float | None, t: Thresholds) -> bool:
    """InferenceKVCachePreemptions: preemptions per second above the line."""
    return rate_per_second is not None and rate_per_second > t.kv_cache.preemption_rate_above


def tail_ratio(p50: float | None, p99: float | None) -> float | None:
    return p99 / p50 if p50 and p99 is not None and p50 > 0 else None


def long_tail(p50: float | None, p99: float | None, t: Thresholds) -> bool:
    """InferenceLatencyLongTail, for one of TTFT and TPOT (never end-to-end): P99 >= ratio x P50."""
    ratio = tail_ratio(p50, p99)
    return ratio is not None and ratio >= t.latency.tail_ratio


def long_prompt_share(buckets: Sequence[tuple[float, float]]) -> float | None:
    """[5.3]: the share of prompts over LONG_PROMPT_TOKENS, from the buckets of
    ``inferwatch_prompt_length_tokens`` counted over a span (None: no prompt in it)."""
    return share_above(LONG_PROMPT_TOKENS, buckets)


def long_context_pool(share: float | None, t: Thresholds) -> str:
    """The long tail's first remedy: a long-context pool, unless the prompts say otherwise."""
    if share is None:
        return LONG_CONTEXT_POOL
    if share >= t.latency.long_prompt_share:
        return (
            f"Give long-context traffic its own pool: {share:.0%} of the prompts are over "
            f"{LONG_PROMPT_TOKENS:,} tokens. Route them to workers with their own "
            "--max-model-len and batching flags, and keep short chats on this pool."
        )
    return (
        f"Almost no prompt is over {LONG_PROMPT_TOKENS:,} tokens: the tail is elsewhere. A "
        "long-context pool would not help; look at the generation lengths (long answers hold "
        "batch slots) and the queue time first."
    )


def cold_start(
    ttft_p95: float | None,
    uptime_seconds: float | None,
    over: bool,
    t: Thresholds,
    gate_deadline_exceeded: bool | None = None,
) -> bool:
    """InferenceWorkerColdStart: TTFT P95 above the warm-up line within ``cold_start.within``
    of a start, unless the worker is over capacity (then the slow tokens are queueing) or
    the agent's warm-up gate holds or has warmed it (``gate_deadline_exceeded`` False: the
    gate's gauge at 0; None: no gate). A gated worker takes traffic only once warm, so
    its slow first tokens are the gate's own cold request in the engine's histogram."""
    slow = ttft_p95 is not None and ttft_p95 > t.ttft.warmup_p95_seconds
    gated = gate_deadline_exceeded is False
    return slow and young(uptime_seconds, t) and not over and not gated


def warmup(
    ttft_p95: float | None,
    worker_gpu_utilization: float | None,
    uptime_seconds: float | None,
    t: Thresholds,
) -> bool:
    """InferenceTTFTHighGPUIdle: TTFT P95 above the warm-up line while the worker's own GPUs
    are below ``idle_below``, outside the cold-start window (that is ``cold_start``)."""
    slow = ttft_p95 is not None and ttft_p95 > t.ttft.warmup_p95_seconds
    idle = worker_gpu_utilization is not None and worker_gpu_utilization < (
        t.gpu_utilization.idle_below
    )
    return slow and idle and not young(uptime_seconds, t)


def ttft_slo_breach(ttft_p99: float | None, uptime_seconds: float | None, t: Thresholds) -> bool:
    """InferenceTTFTSLOBreach: TTFT P99 above the SLO, outside the cold-start window."""
    return (
        ttft_p99 is not None and ttft_p99 > t.ttft.p99_slo_seconds and not young(uptime_seconds, t)
    )


def tpot_slo_breach(tpot_p99: float | None, t: Thresholds) -> bool:
    """InferenceTPOTSLOBreach: TPOT P99 above the SLO."""
    return tpot_p99 is not None and tpot_p99 > t.tpot.p99_slo_seconds


def scale_review(gpu_utilization: float | None, t: Thresholds) -> bool:
    """InferenceGPUScaleReview: a GPU past ``SCALE_REVIEW``."""
    return SCALE_REVIEW.past(gpu_utilization, t)


def waste(gpu_utilization: float | None, t: Thresholds) -> bool:
    """InferenceGPUUnderutilized: a GPU past ``WASTE`` (below it)."""
    return WASTE.past(gpu_utilization, t)


@dataclass(frozen=True)
class WorkerLoad:
    """One worker of a model, as the low-utilization loop compares them."""

    worker: str
    #: mean utilization of the worker's own GPUs
    gpu_utilization: float | None
    #: waiting plus running requests, averaged
    open_requests: float | None


def _far_above(values: Sequence[float], i: int, ratio: float) -> bool:
    """``values[i] > ratio x mean(the others)`` in the rules' form, without a division:
    ``x * (count + ratio - 1) > ratio * sum`` (with one value never true)."""
    return values[i] * (len(values) + ratio - 1) > ratio * sum(values)


def imbalanced(
    workers: Sequence[WorkerLoad],
    model_gpu_utilization: float | None,
    model_ttft_p99: float | None,
    t: Thresholds,
) -> dict[str, str]:
    """InferenceLoadImbalance: ``{busy worker: "gpu_utilization" | "open_requests"}``.

    A worker is far above its peers when its GPUs' utilization (above ``idle_below``) or
    its open requests (at least ``min_open_requests``) exceed ``load_ratio`` x the mean of
    the model's other workers that report the same load, while the model's own GPUs
    average below ``idle_below`` (``model_gpu_utilization``: the average over
    ``load_imbalance.idle_window``, as the rule reads it, not one 5m value that
    wobbles across the line) and its TTFT P99 is within the SLO.
    """
    lb = t.load_imbalance
    idle = t.gpu_utilization.idle_below
    if model_gpu_utilization is None or model_gpu_utilization >= idle:
        return {}
    if model_ttft_p99 is None or model_ttft_p99 > t.ttft.p99_slo_seconds:
        return {}
    out: dict[str, str] = {}
    for load, floor_ok in (
        ("gpu_utilization", lambda x: x > idle),
        ("open_requests", lambda x: x >= lb.min_open_requests),
    ):
        known = [(w.worker, getattr(w, load)) for w in workers if getattr(w, load) is not None]
        values = [v for _, v in known]
        for i, (name, value) in enumerate(known):
            if name not in out and floor_ok(value) and _far_above(values, i, lb.load_ratio):
                out[name] = load
    return out


# --------------------------------------------------------------------------- remedy facts

#: [6.2] VRAM near the limit and [2.3]: headroom for PyTorch's temporary allocations and the CUDA
#: context outside the engine's pre-allocated pool (vLLM's default is 0.9)
GPU_MEMORY_UTILIZATION_HEADROOM = 0.85
#: [2.3]: with prefix caching on, the real use "easily passes 0.9" and the process is
#: OOM-killed: a card whose NVML used ratio is at or above this has no room left, so
#: --gpu-memory-utilization must not be raised there (and with prefix caching on, or
#: restarts that died of out-of-memory, it is an OOM risk: lower it to the headroom value)
OOM_RISK_USED_RATIO = 0.90
#: words of a restart's reason (a pod's last termination, a log line) that mean the
#: process died of out-of-memory; matched case-insensitively
OOM_REASON_WORDS = ("out of memory", "outofmemory", "oomkilled", "cuda oom", "oom")
#: [6.2] VRAM near the limit: FP8 K/V "close to half" the KV memory, accuracy loss usually under 0.5 %
FP8_KV_ACCURACY_LOSS = 0.005
#: [6.2] VRAM near the limit: automatic prefix caching saves 30 % or more of the KV memory
PREFIX_CACHE_KV_SAVING = 0.30
#: [6.2] slow first token: a cached system prompt makes first tokens 30-60 % sooner
PREFIX_CACHE_TTFT_GAIN = (0.30, 0.60)
#: [5.2]: an unwarmed first call took 4.8 s, 180 ms warm
COLD_FIRST_CALL_SECONDS = 4.8
WARM_CALL_SECONDS = 0.18
#: [5.3]: a long-context pool takes requests above roughly this many prompt tokens
LONG_PROMPT_TOKENS = 2000
#: the evidence line of the long-prompt share (advise and the weekly report)
LONG_PROMPT_EVIDENCE = f"prompts over {LONG_PROMPT_TOKENS:,} tokens:"
#: [2.3]: --max-num-batched-tokens that balance prefill against decoding
BATCHED_TOKENS_RANGE = (4096, 8192)
#: KV cache dtypes that are FP8 already (vLLM's cache_dtype values)
FP8_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")

LEAST_CONNECTIONS = (
    "Route with least connections (nginx least_conn, HAProxy balance leastconn) instead of "
    "round-robin or random: a new request goes to the worker with the fewest open ones."
)
NO_SCALE_IN = (
    "Do not scale in: the busy worker would get busier. Fix the spread first, then look at "
    "the utilization again."
)
DATA_PARALLEL = (
    "Or serve the model from one vLLM instance across these GPUs (--data-parallel-size) so "
    "the engine balances its own ranks."
)
LONG_CONTEXT_POOL = (
    "Give long-context traffic its own pool: route requests above a token budget (for example "
    f"prompts over {LONG_PROMPT_TOKENS:,} tokens) to workers with their own --max-model-len and "
    "batching flags, and keep short chats on this pool."
)
SCALE_OUT = (
    "Scale out: add a replica behind the load balancer. The queue is the leading indicator: "
    "act on it before the latency alerts fire."
)
RATE_LIMIT = (
    "Or rate-limit at the gateway until capacity catches up, so the queue stops growing and "
    "client time-outs do not turn into retry storms."
)
FP8_KV = (
    "Store the KV cache in FP8: --kv-cache-dtype fp8 about halves it (accuracy loss usually "
    f"under {FP8_KV_ACCURACY_LOSS:.1%})."
)
PREFIX_CACHING = (
    "Requests that share a system prompt then share its KV blocks "
    f"({PREFIX_CACHE_KV_SAVING:.0%} or more saved)."
)
WARMUP_GATE = (
    "Warm the worker up before it takes traffic: turn on the agent's warm-up gate "
    "(`warmup: {enabled: true}`; /readyz stays 503 until the worker has answered its warm-up "
    "requests, see docs/warmup.md), or send one `max_tokens: 1` request once /health answers. "
    f"Unwarmed, a first call took {COLD_FIRST_CALL_SECONDS:g} s against "
    f"{WARM_CALL_SECONDS * 1000:.0f} ms warm."
)
CACHED_SYSTEM_PROMPT = (
    "List the long system prompts under warmup.system_prompts so the cache holds them before "
    f"the first user arrives (first tokens {PREFIX_CACHE_TTFT_GAIN[0]:.0%}-"
    f"{PREFIX_CACHE_TTFT_GAIN[1]:.0%} sooner)."
)
SHARE_GPU = (
    "Put small models together: one GPU can run two or three workers, each with its own "
    "--gpu-memory-utilization share, or an A100/H100 can be split with MIG."
)


def is_fp8(kv_cache_dtype: str | None) -> bool:
    """The worker's KV cache is FP8 already (vLLM's ``cache_dtype``)."""
    return bool(kv_cache_dtype) and str(kv_cache_dtype).lower().startswith("fp8")


def guide(loop_id: str) -> str:
    """``"6.2 Low utilization with normal latency, 5.3"``: the citation advise, the report and
    the runbooks print (the guide's loops by their name, never a number)."""
    loop = BY_ID[loop_id]
    if in_guide(loop_id):
        rest = [s for s in loop.guide if s != "6.2"]
        return ", ".join([f"6.2 {loop.name}", *rest])
    return ", ".join(loop.guide)


def card_has_room(vram_used_ratio: float | None) -> bool:
    """Whether NVML shows room on the card to raise --gpu-memory-utilization (below
    ``OOM_RISK_USED_RATIO``); unknown is no room: never advise raising it blind."""
    return vram_used_ratio is not None and vram_used_ratio < OOM_RISK_USED_RATIO


def oom_reason(reason: str | None) -> bool:
    """A restart's reason that says the process died of out-of-memory."""
    text = (reason or "").lower()
    return any(word in text for word in OOM_REASON_WORDS)


def oom_risk(
    vram_used_ratio: float | None,
    prefix_caching: bool | None,
    restart_reasons: Iterable[str] = (),
) -> bool:
    """[2.3], [6.2] VRAM near the limit: the out-of-memory risk. The card's used ratio is at or above
    ``OOM_RISK_USED_RATIO`` with prefix caching on (its extra memory pushes the real use
    past the pool), or a restart died of out-of-memory. The remedy is ``oom_headroom``."""
    full = vram_used_ratio is not None and vram_used_ratio >= OOM_RISK_USED_RATIO
    return (full and bool(prefix_caching)) or any(oom_reason(r) for r in restart_reasons)


def _from_now(current: float | None) -> str:
    """``from <current> `` for a remedy's sentence, empty when the value is unknown."""
    return f"from {current:g} " if current is not None else ""


def _card_use(vram_used_ratio: float | None) -> str:
    """`` (NVML shows N% of the card in use)``, empty when unknown."""
    if vram_used_ratio is None:
        return ""
    return f" (NVML shows {vram_used_ratio:.0%} of the card in use)"


def oom_headroom(current: float | None = None, vram_used_ratio: float | None = None) -> str:
    """The OOM-risk remedy: lower the flag to the headroom value, never raise it."""
    return (
        f"Out-of-memory risk{_card_use(vram_used_ratio)}: lower --gpu-memory-utilization "
        f"{_from_now(current)}to "
        f"{GPU_MEMORY_UTILIZATION_HEADROOM} and keep the head-room for PyTorch's temporary "
        "allocations and the CUDA context; with prefix caching on, the real use passes the "
        f"pool (past {OOM_RISK_USED_RATIO:.0%}) and the process is OOM-killed. Do not raise "
        "the flag on a card that has no room."
    )


def raise_kv_pool(current: float | None = None, vram_used_ratio: float | None = None) -> str:
    """The preemption remedy: a larger KV pool; a smaller --gpu-memory-utilization would
    take blocks away and preempt more."""
    return (
        f"Give the KV pool more memory: raise --gpu-memory-utilization {_from_now(current)}only "
        f"where the card has room (NVML below {OOM_RISK_USED_RATIO:.0%})"
        f"{_card_use(vram_used_ratio)}; never lower it for "
        "preemptions, that shrinks the pool."
    )


def headroom(current: float | None = None) -> str:
    """The out-of-memory remedy of the VRAM loop when NVML's ratio (not the KV cache) is full."""
    was = f"from {current:g} " if current is not None else ""
    return (
        f"Leave headroom: --gpu-memory-utilization {was}to {GPU_MEMORY_UTILIZATION_HEADROOM} "
        "so PyTorch's temporary allocations and the CUDA context fit outside the engine's pool."
    )


def fewer_seqs(current: float | None = None, lower: int | None = None) -> str:
    """Fewer sequences: only worth saying where the running batch reaches --max-num-seqs."""
    change = f" (from {current:g} to {lower})" if current is not None and lower else ""
    return (
        f"Lower --max-num-seqs{change} where the batch reaches it: fewer sequences need fewer "
        "KV blocks; keep prefix caching on, it saves more than it costs."
    )


def headroom_note(current: float | None = None) -> str:
    """The guide's configuration note for prefix caching ([6.2] VRAM near the limit):
    0.85, with no sign of running out. Not urgent: a card full of vLLM's pre-allocated
    pool is by design."""
    return (
        f"At the next planned restart, set --gpu-memory-utilization {_from_now(current)}to "
        f"{GPU_MEMORY_UTILIZATION_HEADROOM}: with prefix caching on, the guide leaves this "
        "head-room for PyTorch's temporary allocations and the CUDA context outside the "
        "engine's pool. Not urgent: nothing shows the worker running out."
    )


#: the same note where the KV pool is short (preemptions, a full KV cache): the guide's one
#: set for VRAM pressure is prefix caching, an FP8 KV cache, then 0.85 for head-room
HEADROOM_AFTER_FP8 = (
    f"The guide's --gpu-memory-utilization {GPU_MEMORY_UTILIZATION_HEADROOM} (head-room with "
    "prefix caching on) is the last step of its set, after prefix caching and an FP8 KV "
    "cache: lowering it now, while the KV pool is short, would shrink the pool."
)
