"""The simulator's load scenarios run in virtual time, and what each must raise.

``run(name)`` drives :class:`inferwatch.sim.engine.EngineCore` (the scheduler,
KV cache and step costs behind ``inferwatch simulate``) through a scenario of
:mod:`inferwatch.sim.scenarios` without sleeping: arrivals are the scenario's
Poisson process and length distributions, each engine step takes its modelled
cost, and the GPU's utilization is :func:`inferwatch.sim.gpu.utilization` of
the busy share, as the simulator publishes it. The result holds what the agent
would read: per-second samples of the gauges and every request's latencies.

``expected_loops(scenario)`` is the set of ``pack.loops`` ids the alerts of
``pack.rules`` raise on that scenario (``SCENARIO_ALERTS``, with the loops'
suppression applied): the advise and the report legs of tests/unit/test_loops_agree.py
hold their findings to it; a live-Prometheus leg can hold the rules to it too.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

from inferwatch.advise.agent import Scrape
from inferwatch.advise.model import WarmupState, WorkerPicture
from inferwatch.demo.conditions import Reading
from inferwatch.pack.loops import loops_of_alerts
from inferwatch.pack.thresholds import Thresholds
from inferwatch.report.model import Hourly, Period, RawData, RawGpu, RawWorker
from inferwatch.sim.config import SimConfig
from inferwatch.sim.engine import EngineCore, SimRequest
from inferwatch.sim.expo.vllm import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from inferwatch.sim.gpu import utilization
from inferwatch.sim.scenarios import SCENARIOS, Scenario
from inferwatch.stats import histogram_quantile

#: the alerts whose conditions hold on each scenario (the `for` of each aside; sustained,
#: the loops the firing ones stand for are ``expected_loops``: tests/unit/test_loops_agree.py)
SCENARIO_ALERTS: dict[str, frozenset[str]] = {
    # a trickle: the GPU idles in the waste band, nothing else
    "idle": frozenset({"InferenceGPUUnderutilized"}),
    # absorbed traffic: no alert
    "steady": frozenset(),
    # the queue passes capacity, the KV cache fills with the queue rising, preemptions;
    # preempted requests stall between tokens, so the TPOT P99 is ten times its P50
    "overload": frozenset(
        {
            "InferenceQueueOverCapacity",
            "InferenceVRAMPressureQueueRising",
            "InferenceKVCachePreemptions",
            "InferenceLatencyLongTail",
        }
    ),
    # 5 % of requests are very long: the TTFT P99 of the short ones' P50 many times over
    "long-tail": frozenset({"InferenceLatencyLongTail"}),
    # a young worker's first requests pay the warm-up (their TTFT is a long tail over
    # the warm ones', which the cold start suppresses: pack.loops); its GPU idles otherwise
    "cold-start": frozenset(
        {"InferenceWorkerColdStart", "InferenceLatencyLongTail", "InferenceGPUUnderutilized"}
    ),
    # 90 % of requests to one worker: loop 1; the quiet GPU's waste is the imbalance's
    "imbalance": frozenset({"InferenceLoadImbalance", "InferenceGPUUnderutilized"}),
}


def expected_loops(scenario: str) -> frozenset[str]:
    """The ``pack.loops`` ids the rules' alerts stand for on ``scenario``."""
    return loops_of_alerts(SCENARIO_ALERTS[scenario])


#: simulator settings per scenario, as tests/live/test_advise.py launches them
MAX_NUM_SEQS = 20
CONFIG: dict[str, dict[str, object]] = {
    "cold-start": {"enable_prefix_caching": False, "cold_start_requests": 3},
    # a larger batch, as on a bigger card: the busy worker stays under 100 %
    "imbalance": {"max_num_seqs": 32},
}
SAMPLE = 1.0  # seconds between samples, as an agent collecting every second


@dataclass
class Sample:
    t: float
    utilization: float
    kv_usage: float
    vram_used_ratio: float
    waiting: int
    running: int
    #: the engine's counters at the sample: tokens generated and prompted, requests done
    generated: int = 0
    prompted: int = 0
    finished: int = 0


@dataclass
class WorkerRun:
    worker: str
    model: str
    cfg: SimConfig
    samples: list[Sample] = field(default_factory=list)
    #: (arrival, value) per request
    ttft: list[tuple[float, float]] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    #: when each ITL, end-to-end latency and preemption was observed
    itl_at: list[float] = field(default_factory=list)
    e2e_at: list[float] = field(default_factory=list)
    preempted_at: list[float] = field(default_factory=list)
    #: the GPUs it runs on, as the agent names them (empty: one of its own, its name)
    gpus: tuple[str, ...] = ()
    #: warmed by the agent's warm-up gate before its traffic (the demo's layouts)
    gated: bool = False
    preemptions: int = 0
    finished: int = 0
    generated: int = 0
    prompted: int = 0
    duration: float = 0.0


def _requests(
    sc: Scenario, rng: random.Random, targets: int
) -> list[tuple[float, int, SimRequest]]:
    out = []
    t = 0.0
    system = list(range(1, sc.system_prompt_tokens + 1))
    i = 0
    while True:
        t += rng.expovariate(sc.rate)
        if t >= sc.duration:
            return out
        long = sc.long_share > 0 and rng.random() < sc.long_share
        prompt_d = sc.long_prompt if long and sc.long_prompt else sc.prompt
        output_d = sc.long_output if long and sc.long_output else sc.output
        body = [rng.randrange(10_000, 50_000) for _ in range(prompt_d.sample(rng))]
        shared = system if system and rng.random() < sc.system_prompt_share else []
        n_out = output_d.sample(rng)
        if sc.hot_share is not None and targets > 1:
            target = 0 if rng.random() < sc.hot_share else rng.randrange(1, targets)
        else:
            target = rng.randrange(targets)
        req = SimRequest(
            request_id=f"r{i}",
            prompt_ids=shared + body,
            max_tokens=n_out,
            target_tokens=n_out,
            final_reason="length",
            arrival=t,
            seed=i,
        )
        out.append((t, target, req))
        i += 1


def _engine_run(run: WorkerRun, arrivals: list[SimRequest], end: float) -> None:
    cfg = run.cfg
    core = EngineCore(cfg)
    pending = sorted(arrivals, key=lambda r: r.arrival)
    busy: list[tuple[float, float]] = []  # (start, end) of compute
    now = 0.0
    next_sample = SAMPLE
    k = 0

    def sample_until(t: float) -> None:
        nonlocal next_sample
        while next_sample <= t and next_sample <= end:
            lo = next_sample - SAMPLE
            share = sum(max(0.0, min(b, next_sample) - max(a, lo)) for a, b in busy) / SAMPLE
            snap = core.snapshot()
            # the engine reserves its share of the card at start (as vLLM does): flat
            used = cfg.reserved_per_gpu
            run.samples.append(
                Sample(
                    next_sample,
                    utilization(snap, share),
                    snap.kv_usage,
                    used / cfg.device_bytes,
                    snap.waiting,
                    snap.running,
                    run.generated,
                    run.prompted,
                    run.finished,
                )
            )
            next_sample += SAMPLE

    while now < end:
        while k < len(pending) and pending[k].arrival <= now:
            core.add_request(pending[k])
            k += 1
        plan = core.schedule(now)
        if plan is None:
            nxt = pending[k].arrival if k < len(pending) else end
            sample_until(min(nxt, end))
            now = max(now, nxt)
            continue
        busy.append((now, now + plan.busy_seconds))
        now += plan.seconds
        stats = core.complete(plan, now)
        run.generated += stats.generation_tokens
        run.prompted += stats.prompt_tokens
        run.preemptions += stats.preemptions
        run.preempted_at.extend([now] * stats.preemptions)
        run.itl.extend(stats.itls)
        run.itl_at.extend([now] * len(stats.itls))
        for f in stats.finished:
            run.finished += 1
            run.e2e.append(f.e2e)
            run.e2e_at.append(now)
        sample_until(now)
        busy = [b for b in busy if b[1] > now - 2 * SAMPLE]
    for req in pending:
        if req.first_token_at is not None:
            run.ttft.append((req.arrival, req.first_token_at - req.arrival))
    run.duration = end


def run(name: str, seed: int = 1, duration: float | None = None) -> list[WorkerRun]:
    """Every worker of the scenario over its load's ``duration`` (default the scenario's):
    a longer one is the same load sustained, as ``inferwatch loadgen --duration`` runs it
    (a cold start still happens once, at the workers' start)."""
    sc = SCENARIOS[name]
    if duration is not None:
        sc = replace(sc, duration=duration)
    extra = dict(CONFIG.get(name, {}))
    extra.setdefault("cold_start_requests", 0)
    extra.setdefault("max_num_seqs", MAX_NUM_SEQS)
    cfg = replace(SimConfig(), model=f"model-{name}", **extra)  # type: ignore[arg-type]
    rng = random.Random(seed)
    targets = max(1, sc.min_targets)
    planned = _requests(sc, rng, targets)
    runs = []
    for i in range(targets):
        worker = name if targets == 1 else f"{name}-{'ab'[i]}"
        r = WorkerRun(worker, cfg.model, cfg)
        _engine_run(r, [req for _, tgt, req in planned if tgt == i], sc.duration)
        runs.append(r)
    return runs


def run_layout(name: str, seed: int = 1) -> list[WorkerRun]:
    """Every worker of a demo layout (``inferwatch.demo.layouts``: tp, colocate, host8,
    mig) in virtual time, as ``inferwatch demo --scenario NAME`` starts them: each
    worker's simulator flags as the demo passes them (warmed: the demo's warm-up gate
    takes the cold start), each load group's scenario at its ``--rate`` spread at
    random over its workers, as ``inferwatch loadgen`` spreads it. Workers that share a
    card (colocated) read the card as the fake GPU merges them: utilization summed and
    capped at 1, memory summed; a MIG slice is a device of its own."""
    import argparse

    from inferwatch.demo.layouts import layout_for
    from inferwatch.sim.simulate_cmd import add_arguments, config_from_args

    layout = layout_for(name)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfgs = {}
    for w in layout.workers:
        flags = ["--port", "0", "--model", w.served_model, "--max-num-seqs", str(w.max_num_seqs)]
        args = parser.parse_args([*flags, "--cold-start-requests", "0", *w.sim_args])
        cfgs[w.name] = config_from_args(args)
    rng = random.Random(seed)
    runs: dict[str, WorkerRun] = {}
    for group in layout.loads:
        sc = SCENARIOS[group.scenario]
        if "--rate" in group.extra:
            sc = replace(sc, rate=float(group.extra[group.extra.index("--rate") + 1]))
        planned = _requests(sc, rng, len(group.workers))
        for i, worker in enumerate(group.workers):
            r = WorkerRun(worker, cfgs[worker].model, cfgs[worker], gated=True)
            _engine_run(r, [req for _, tgt, req in planned if tgt == i], sc.duration)
            runs[worker] = r
    by_device: dict[str, list[WorkerRun]] = {}
    for w in layout.workers:
        r = runs[w.name]
        if w.gpu_instance is not None:
            r.gpus = (f"{w.gpus[0]}/{w.gpu_instance}",)
        else:
            r.gpus = tuple(str(g) for g in w.gpus)
        for g in r.gpus:
            by_device.setdefault(g, []).append(r)
    for sharing in by_device.values():
        if len(sharing) < 2:
            continue
        for k in range(min(len(r.samples) for r in sharing)):
            util = min(1.0, sum(r.samples[k].utilization for r in sharing))
            used = min(1.0, sum(r.samples[k].vram_used_ratio for r in sharing))
            for r in sharing:
                r.samples[k] = replace(r.samples[k], utilization=util, vram_used_ratio=used)
    return [runs[w.name] for w in layout.workers]


def runs_of(name: str, seed: int = 1) -> list[WorkerRun]:
    """A demo scenario's workers in virtual time: a load scenario, or a layout."""
    from inferwatch.demo.layouts import LAYOUT_SCENARIOS

    return run_layout(name, seed) if name in LAYOUT_SCENARIOS else run(name, seed)


def buckets(values: list[float], bounds: tuple[float, ...]) -> tuple[tuple[float, float], ...]:
    """The observations as a classic histogram: (upper bound, cumulative count), +Inf last."""
    return tuple((b, float(sum(1 for v in values if v <= b))) for b in (*bounds, math.inf))


def quantile(values: list[float], q: float, name: str) -> float | None:
    """The q-quantile as ``histogram_quantile`` computes it from the engine's buckets."""
    if not values:
        return None
    value = histogram_quantile(q, buckets(values, BUCKETS[name]))
    return None if math.isnan(value) else value


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope (per second), as PromQL's deriv()."""
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (v - mv) for t, v in points) / den if den else None


BUCKETS = {"ttft": TTFT_BUCKETS, "tpot": ITL_BUCKETS, "e2e": REQUEST_LATENCY_BUCKETS}


def picture(r: WorkerRun, model_ttft: list[float] | None = None) -> WorkerPicture:
    """What ``advise`` reads of one worker over the whole run (its agent's view)."""
    n = len(r.samples)
    ttft = [v for _, v in r.ttft]
    return WorkerPicture(
        worker=r.worker,
        instance="127.0.0.1:10127",
        model=r.model,
        engine="vllm",
        gpus=r.gpus or (r.worker,),
        gpu_utilization=sum(s.utilization for s in r.samples) / n,
        vram_used_ratio=max(s.vram_used_ratio for s in r.samples),
        ttft_p50=quantile(ttft, 0.5, "ttft"),
        ttft_p95=quantile(ttft, 0.95, "ttft"),
        ttft_p99=quantile(ttft, 0.99, "ttft"),
        tpot_p50=quantile(r.itl, 0.5, "tpot"),
        tpot_p99=quantile(r.itl, 0.99, "tpot"),
        e2e_p50=quantile(r.e2e, 0.5, "e2e"),
        e2e_p99=quantile(r.e2e, 0.99, "e2e"),
        queue_depth=sum(s.waiting for s in r.samples) / n,
        queue_depth_max=max(s.waiting for s in r.samples),
        queue_slope=slope([(s.t, s.waiting) for s in r.samples]),
        running=sum(s.running for s in r.samples) / n,
        running_max=max(s.running for s in r.samples),
        max_num_seqs=r.cfg.max_num_seqs,
        kv_usage=max(s.kv_usage for s in r.samples),
        preemption_rate=r.preemptions / r.duration,
        request_rate=r.finished / r.duration,
        uptime_seconds=r.duration,
        warmup=WarmupState(ready=True) if r.gated else None,
        model_ttft_p99=quantile(model_ttft, 0.99, "ttft") if model_ttft else None,
        flags={
            "max_num_seqs": str(r.cfg.max_num_seqs),
            "gpu_memory_utilization": f"{r.cfg.gpu_memory_utilization:g}",
            "prefix_caching": "true" if r.cfg.enable_prefix_caching else "false",
            "kv_cache_dtype": r.cfg.cache_dtype,
        },
    )


def pictures(runs: list[WorkerRun]) -> list[WorkerPicture]:
    merged = [v for r in runs for _, v in r.ttft]
    return [picture(r, merged) for r in runs]


def scrapes(r: WorkerRun) -> list[tuple[float, Scrape]]:
    """What the agent's ``/metrics`` says of the worker at each sample, parsed (``advise
    --what-if``'s samples): its counters, batch, queue, KV cache, launch flags and GPU."""
    info = {
        "worker": r.worker,
        "engine": "vllm",
        "max_num_seqs": str(r.cfg.max_num_seqs),
        "gpu_memory_utilization": f"{r.cfg.gpu_memory_utilization:g}",
        "prefix_caching": "true" if r.cfg.enable_prefix_caching else "false",
        "kv_cache_dtype": r.cfg.cache_dtype,
    }
    on = {"worker": r.worker, "model": r.model, "engine": "vllm"}
    out = []
    for s in r.samples:
        scrape: Scrape = []
        for g in r.gpus or (r.worker,):
            gpu = {"gpu": g}
            scrape += [
                ("inferwatch_gpu_up", gpu, 1.0),
                ("inferwatch_gpu_utilization_ratio", gpu, s.utilization),
                ("inferwatch_gpu_memory_used_ratio", gpu, s.vram_used_ratio),
                (
                    "inferwatch_gpu_process_memory_used_bytes",
                    {**gpu, "worker": r.worker},
                    s.vram_used_ratio * r.cfg.device_bytes,
                ),
            ]
        scrape += [
            ("inferwatch_worker_info", info, 1.0),
            ("inferwatch_generation_tokens_total", on, float(s.generated)),
            ("inferwatch_prompt_tokens_total", on, float(s.prompted)),
            ("inferwatch_requests_finished_total", on, float(s.finished)),
            ("inferwatch_requests_running", on, float(s.running)),
            ("inferwatch_queue_depth", on, float(s.waiting)),
            ("inferwatch_max_num_seqs", on, float(r.cfg.max_num_seqs)),
            ("inferwatch_kv_cache_usage_ratio", on, s.kv_usage),
        ]
        out.append((s.t, scrape))
    return out


# --------------------------------------------------------------------------- the demo's view


def demo_readings(runs: list[WorkerRun]) -> dict[str, Reading]:
    """What the demo's view would show of each worker, over the whole run: the agent's
    stats-window figures with the window as long as the run (quantiles, the queue's
    slope), the levels the conditions look for (the highest queue, running batch and KV
    usage, the mean utilization, as ``picture``), uptime the run's length."""
    out = {}
    for r in runs:
        ttft = [v for _, v in r.ttft]
        q = {"ttft": ttft, "tpot": r.itl, "e2e": r.e2e}
        quantiles = {
            key: {
                str(level): value
                for level in (0.5, 0.95, 0.99)
                if (value := quantile(values, level, key)) is not None
            }
            for key, values in q.items()
        }
        n = len(r.samples)
        out[r.worker] = Reading(
            up=True,
            model=r.model,
            gpu_util=sum(s.utilization for s in r.samples) / n,
            vram=max(s.vram_used_ratio for s in r.samples),
            queue=max(s.waiting for s in r.samples),
            running=max(s.running for s in r.samples),
            capacity=r.cfg.max_num_seqs,
            slope=slope([(s.t, s.waiting) for s in r.samples]),
            kv=max(s.kv_usage for s in r.samples),
            uptime=r.duration,
            preemption_rate=r.preemptions / r.duration,
            gate_deadline_exceeded=False if r.gated else None,
            ttft=quantiles["ttft"],
            tpot=quantiles["tpot"],
            e2e=quantiles["e2e"],
        )
    return out


# --------------------------------------------------------------------------- the report's view

#: end of the report's one-day period (a Monday, 00:00 UTC); the run is its last minute
REPORT_END = 1795392000.0
#: PromQL subquery step of the report's queries (report/query.py SUBQUERY_STEP)
STEP = 60.0


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def raw_data(runs: list[WorkerRun], t: Thresholds) -> RawData:
    """What ``report.query.collect`` would read for the run: a one-day period whose current
    day holds the run (the day before is empty), figures computed the way its queries do."""
    from inferwatch.pack import loops as L

    period = Period(REPORT_END, 1)

    def day(value: float | None) -> tuple[float | None, ...]:
        return (None, value)

    workers = []
    gpus = []
    for r in runs:
        cap = r.cfg.max_num_seqs
        over_at = {
            round(s.t)
            for s in r.samples
            if L.over_capacity(s.waiting, cap, s.running, s.kv_usage, t)
        }
        first_tokens = [(a + v, v) for a, v in r.ttft]
        # young throughout: the whole run lies within cold_start.within of the start (t=0)
        young = [v for at, v in first_tokens if L.young(at, t)]
        # deriv over queue.rising_window, evaluated every subquery step
        steps = [k * STEP for k in range(1, int(r.duration // STEP) + 1)] or [r.duration]
        slopes = [
            slope([(s.t, s.waiting) for s in r.samples if at - t.queue.rising_window < s.t <= at])
            for at in steps
        ]
        known_slopes = [v for v in slopes if v is not None]
        utils = [s.utilization for s in r.samples]
        # the rules' rate_window average at each sample, below the waste line
        window = t.pack.rate_window
        waste = [
            (_mean([u.utilization for u in r.samples if s.t - window < u.t <= s.t]) or 0.0)
            < t.gpu_utilization.waste_below
            for s in r.samples
        ]
        workers.append(
            RawWorker.of_series(
                r.model,
                r.worker,
                "vllm",
                (f"{r.worker}:10127",),
                histograms={
                    "ttft": (None, buckets([v for _, v in r.ttft], BUCKETS["ttft"])),
                    "tpot": (None, buckets(r.itl, BUCKETS["tpot"])),
                    "e2e": (None, buckets(r.e2e, BUCKETS["e2e"])),
                    "cold_ttft": (None, buckets(young, BUCKETS["ttft"])),
                },
                capacity=float(cap),
                requests=day(float(r.finished)),
                queue_max=day(float(max(s.waiting for s in r.samples))),
                over_capacity_seconds=day(float(len(over_at)) * SAMPLE),
                open_requests=day(_mean([s.waiting + s.running for s in r.samples])),
                slope_max=day(max(known_slopes) if known_slopes else None),
                preemptions=day(float(r.preemptions)),
            )
        )
        mean_util = _mean(utils)
        gpus.append(
            RawGpu(
                uuid=f"GPU-{r.worker}",
                instance=f"{r.worker}:10127",
                gpu="0",
                name="simulated",
                util_daily={"mean": day(mean_util)},
                band_daily={
                    "waste": day(_mean([float(u < t.gpu_utilization.waste_below) for u in utils])),
                    "healthy": day(None),
                    "scale_review": day(None),
                },
                util_week={"mean": (None, mean_util)},
                sm_active_week=None,
                vram_peak_ratio=day(max(s.vram_used_ratio for s in r.samples)),
                vram_peak_bytes=None,
                workers=(r.worker,),
                pressure_peak=day(max(s.kv_usage for s in r.samples)),
                pressure_from="kv_cache",
                waste_alert_daily=day(_mean([float(w) for w in waste])),
            )
        )
    hourly = Hourly((), (), "", (), ())
    return RawData(period, tuple(workers), tuple(gpus), (), hourly, ())


# --------------------------------------------------------------------------- as stored series


def _om_value(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


#: one stored series: its name and labels, and (seconds since the run's start, value) points
Series = tuple[str, dict[str, str], list[tuple[float, float]]]


def _cumulative(
    observed: list[tuple[float, float]], times: list[float], bounds: tuple[float, ...]
) -> list[list[float]]:
    """Per time, a histogram's cumulative bucket counts (+Inf last) of the observations
    (time, value) made by then."""
    edges = (*bounds, math.inf)
    counts = [0.0] * len(edges)
    out = []
    ordered = sorted(observed)
    i = 0
    for at in times:
        while i < len(ordered) and ordered[i][0] <= at:
            value = ordered[i][1]
            for b, le in enumerate(edges):
                if value <= le:
                    counts[b] += 1
            i += 1
        out.append(list(counts))
    return out


def _events(at_times: list[float], times: list[float]) -> list[float]:
    """Per time, how many of the events happened by then (a counter)."""
    ordered = sorted(at_times)
    out = []
    i = 0
    for at in times:
        while i < len(ordered) and ordered[i] <= at:
            i += 1
        out.append(float(i))
    return out


def stored_series(runs: list[WorkerRun], every: float = SAMPLE) -> list[Series]:
    """The run as an agent scraped every ``every`` seconds (a multiple of ``SAMPLE``) would
    have stored it: the agent's ``inferwatch_*`` names and labels, time 0 the workers'
    start. Counters start at zero at time 0; gauges begin with the first sample."""
    out: list[Series] = []
    step = max(1, round(every / SAMPLE))
    for i, r in enumerate(runs):
        instance = f"{r.worker}:10127"
        base = {"job": "inferwatch", "instance": instance}
        eng = {**base, "worker": r.worker, "model": r.model, "engine": "vllm"}
        gpu = {**base, "gpu": "0", "uuid": f"GPU-{i}-{r.worker}"}
        picked = r.samples[step - 1 :: step]
        times = [0.0] + [s.t for s in picked]
        out.append(
            (
                "inferwatch_requests_finished_total",
                {**eng, "reason": "length"},
                list(zip(times, _events(r.e2e_at, times), strict=True)),
            )
        )
        out.append(
            (
                "inferwatch_preemptions_total",
                eng,
                list(zip(times, _events(r.preempted_at, times), strict=True)),
            )
        )
        for name, observed, key in (
            ("ttft", [(a + v, v) for a, v in r.ttft], "ttft"),
            ("tpot", list(zip(r.itl_at, r.itl, strict=True)), "tpot"),
            ("e2e_latency", list(zip(r.e2e_at, r.e2e, strict=True)), "e2e"),
        ):
            per_time = _cumulative(observed, times, BUCKETS[key])
            for b, le in enumerate((*BUCKETS[key], math.inf)):
                out.append(
                    (
                        f"inferwatch_{name}_seconds_bucket",
                        {**eng, "le": "+Inf" if math.isinf(le) else repr(le)},
                        [(at, counts[b]) for at, counts in zip(times, per_time, strict=True)],
                    )
                )
        gauges: list[tuple[str, dict[str, str], list[float]]] = [
            ("inferwatch_queue_depth", eng, [s.waiting for s in picked]),
            ("inferwatch_requests_running", eng, [s.running for s in picked]),
            ("inferwatch_kv_cache_usage_ratio", eng, [s.kv_usage for s in picked]),
            ("inferwatch_max_num_seqs", eng, [r.cfg.max_num_seqs] * len(picked)),
            ("inferwatch_worker_start_time_seconds", eng, [0.0] * len(picked)),
            ("inferwatch_gpu_utilization_ratio", gpu, [s.utilization for s in picked]),
            ("inferwatch_gpu_memory_used_ratio", gpu, [s.vram_used_ratio for s in picked]),
            (
                "inferwatch_worker_gpu_info",
                {**base, "worker": r.worker, "gpu": "0", "uuid": gpu["uuid"]},
                [1.0] * len(picked),
            ),
            (
                "inferwatch_gpu_process_memory_used_bytes",
                {**gpu, "worker": r.worker, "pid": str(1000 + i), "process": "vllm"},
                [s.vram_used_ratio * r.cfg.gpu.total_bytes for s in picked],
            ),
        ]
        for name, labels, values in gauges:
            out.append((name, labels, [(s.t, v) for s, v in zip(picked, values, strict=True)]))
    return out


def _selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def openmetrics(runs: list[WorkerRun], end: float = REPORT_END) -> str:
    """The run as an agent scraped every second would have stored it, ending at ``end``:
    OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics``. Counters start
    at zero one second before the first gauge sample, so a day's ``increase`` is the run's.
    The worker start time is the run's start."""
    start = end - max(r.duration for r in runs)
    # family -> its series' lines: a family's lines together, each series in time order
    families: dict[str, list[str]] = {}
    for name, labels, points in stored_series(runs):
        series = _selector(name, labels)
        offset = start if name == "inferwatch_worker_start_time_seconds" else 0.0
        families.setdefault(name, []).extend(
            f"{series} {_om_value(v + offset)} {start + at:.3f}" for at, v in points
        )
    lines = [line for fam in families.values() for line in fam]
    return "\n".join(lines) + "\n# EOF\n"


def promtool_series(runs: list[WorkerRun], interval: float) -> list[dict[str, str]]:
    """The run as ``input_series`` of a ``promtool test rules`` file scraped every
    ``interval`` seconds: the value at index k is the one stored at k x interval, the
    workers started at promtool's time 0, a gauge missing (``_``) before its first sample."""
    out = []
    for name, labels, points in stored_series(runs, interval):
        by_index = {round(at / interval): v for at, v in points}
        last = max(by_index)
        values = " ".join(_om_value(by_index[k]) if k in by_index else "_" for k in range(last + 1))
        out.append({"series": _selector(name, labels), "values": values})
    return out
