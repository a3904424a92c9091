"""``inferwatch advise --what-if FLAG=VALUE``: the twin's answer for one engine flag.

From a worker's samples (an agent scraped over ``--span``, Prometheus over a range,
or a recorded trace) it fits the step-time curve (:mod:`inferwatch.advise.twin`),
replays the observed load at the current setting and at the asked one, and prints
throughput, TTFT P50/P95, queue, busy share (GPU utilization) and KV head-room for
both, with the range of batch sizes the fit rests on. ``suggest`` picks the lever
for an overloaded worker: replicas first where the queue is over what the worker can
batch (the page; ``pack.loops.queue_levers``, as ``inferwatch advise`` ranks it) with
the GPU busy, more slots first only with the GPU idle; otherwise more slots when the slots are the
bound and the GPU and the KV cache have room, replicas when the GPU is saturated,
never more slots when the KV cache is full, a larger prompt batch when prefill
dominates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from inferwatch.advise.twin import (
    BAND_Z,
    RUN_SPEED_FLOOR,
    Interval,
    Load,
    NotEnough,
    Outcome,
    Setting,
    StepFit,
    band_fits,
    below_fits,
    fit_steps,
    prompt_costs,
    simulate,
    speed_spread,
    under_ref_fits,
)
from inferwatch.engines import contract as c
from inferwatch.errors import ConfigError, UsageError
from inferwatch.pack import loops as L
from inferwatch.pack import reading as rd
from inferwatch.pack.reading import Scrape, mean, workers_of
from inferwatch.pack.thresholds import Thresholds

SOURCE = "command line"

#: the flags --what-if knows, with the names engines give them
FLAGS = {
    "max-num-seqs": "max-num-seqs",
    "max_num_seqs": "max-num-seqs",
    "parallel": "max-num-seqs",
    "slots": "max-num-seqs",
    "max-num-batched-tokens": "max-num-batched-tokens",
    "max_num_batched_tokens": "max-num-batched-tokens",
    "batch-size": "max-num-batched-tokens",
    "gpu-memory-utilization": "gpu-memory-utilization",
    "gpu_memory_utilization": "gpu-memory-utilization",
    "replicas": "replicas",
}
#: how far past the largest batch observed a slot count may go (x), and where it is refused
EXTRAPOLATE_BAND = 1.0
EXTRAPOLATE_MAX = 2.0
#: below the batches observed, refuse a fitted step line whose fixed cost came out at
#: zero (the bound of its fit): it is the band's proportional end itself, and nothing
#: bounds the step from the flat side. On the five warmed H100 recordings five such fits
#: (32 or 64 slots at 18.95 requests/s, batches 18-63 seen) answered 51 pairs below their
#: batches, and 13 of those missed on throughput, 12 on TTFT P50 and 20 on P95 (4-slot
#: runs put too fast among them); ``bench_whatif.py calibrate
#: --no-refuse-below-zero-fixed-cost`` answers them (docs/advise.md, "A fixed cost at
#: zero")
REFUSE_BELOW_ZERO_FIXED_COST = True
#: the throughput band's resolution (:func:`_resolution`) is one answer's time from its
#: admission to a slot to its last token; off: from its send, which counts its wait in the
#: queue as well, and the replay already gives that wait (the H200 sweep's overloaded
#: 4-slot runs got throughput bands x7 wide, median, for a 14% point error). On every recording the same throughput counts
#: inside but the sixth H100 one's (90 -> 89/90) at median widths x2.0 for x2.5;
#: ``bench_whatif.py calibrate --no-resolution-from-admission`` turns it off
#: (docs/advise.md, "The throughput band's resolution")
RESOLUTION_FROM_ADMISSION = True
#: what a range note says the band spans where it takes a proportional step
#: (:func:`twin.below_fits`, :func:`twin.under_ref_fits`)
_DOWN_TO_PROPORTIONAL = (
    "the band's step runs from the fitted line down to one in proportion to the batch"
)
#: a fit is flagged untrusted past these: the relative scatter of the window times about
#: the fitted step curve, and how far the twin's replay of the observation itself ("twin
#: now") may miss an observed figure (relative error) while the figure lies outside the
#: replay's band as well
RESIDUAL_BOUND = 0.5
REPLAY_BOUND = {"throughput": 0.25, "ttft_p50": 0.5, "ttft_p95": 0.5}
#: TTFT's sampling spread in the band: each replay's TTFT P50 and P95 widened to their
#: distribution-free confidence interval over the requests replayed (twin.quantile_interval
#: at the band's z), at every corner. Tried on the recorded sweeps and not shipped: it
#: widens every TTFT band and, with RUN_SPEED_FLOOR chosen again on the old H100 sweep,
#: held no more of the fresh one (docs/advise.md, "Calibration");
#: ``bench_whatif.py calibrate --sampling`` turns it on
TTFT_SAMPLING = False
#: prompt tokens per step when the launch flags do not say (llama.cpp's --batch-size)
DEFAULT_BATCH_TOKENS = 2048
#: simulation seeds averaged for Poisson arrivals
SEEDS = (1, 2, 3, 4, 5)


def parse_what_if(text: str) -> tuple[str, float]:
    """``FLAG=VALUE`` to (canonical flag, value); exit 2 on anything else."""
    name, sep, raw = text.partition("=")
    key = name.strip().lstrip("-").lower()
    if not sep or key not in FLAGS:
        known = (
            "max-num-seqs (or parallel), max-num-batched-tokens, gpu-memory-utilization, replicas"
        )
        raise ConfigError(SOURCE, "--what-if", f"FLAG=VALUE with FLAG one of {known}", text)
    flag = FLAGS[key]
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(SOURCE, "--what-if", f"a number for {flag}", raw) from None
    if flag == "gpu-memory-utilization":
        if not 0 < value <= 1:
            raise ConfigError(
                SOURCE,
                "--what-if",
                "gpu-memory-utilization in (0, 1] (the engine refuses more)",
                raw,
            )
    elif value < 1 or value != int(value):
        raise ConfigError(SOURCE, "--what-if", f"{flag} as a whole number of at least 1", raw)
    return flag, value


# --------------------------------------------------------------------------- observations


@dataclass
class Observed:
    """One worker over the observed span, as the twin needs it: its ``pack.reading``
    reading over the samples that hold the engine's data (its launch flags those with a
    value), and what the twin adds from the token and request counters."""

    reading: rd.WorkerReading
    span: float
    intervals: list[Interval]
    load: Load
    slots: int
    batch_tokens: int
    batch_tokens_stated: bool
    requests_from: str
    #: the engine's mean time per output token while it served (None: not exported)
    tpot: float | None = None

    @property
    def queue_mean(self) -> float:
        """The mean queue over the samples (0: the engine exports none)."""
        return self.reading.queue or 0.0

    @property
    def running_mean(self) -> float:
        return self.reading.running or 0.0

    @property
    def busy(self) -> float | None:
        """The share of the span the engine served (running at both ends of an interval)."""
        return sum(i.dt for i in self.intervals if i.busy) / self.span if self.span > 0 else None

    @property
    def cpu(self) -> bool:
        """No GPU seen for the worker (a CPU engine)."""
        return not self.reading.gpus

    def fit(self) -> StepFit:
        return fit_steps(self.intervals, tpot=self.tpot, compute_bound=self.cpu)

    def as_dict(self) -> dict[str, Any]:
        """The JSON's "observed": the twin's figures, the reading's under the twin's names."""
        r = self.reading
        return {
            "worker": r.worker,
            "engine": r.engine,
            "span": self.span,
            "load": asdict(self.load),
            "slots": self.slots,
            "batch_tokens": self.batch_tokens,
            "batch_tokens_stated": self.batch_tokens_stated,
            "flags": dict(r.flags),
            "requests_from": self.requests_from,
            "gpu_utilization": r.gpu_util,
            "kv_usage": r.kv_mean,
            "kv_usage_peak": r.kv,
            "queue_mean": self.queue_mean,
            "running_mean": self.running_mean,
            "running_when_queued": r.running_when_queued,
            "long_prompt_share": r.long_prompt_share,
            "vram_total_bytes": r.vram_total_bytes,
            "ttft_p50": r.ttft.get("0.5"),
            "ttft_p95": r.ttft.get("0.95"),
            "busy": self.busy,
            "tpot": self.tpot,
            "cpu": self.cpu,
        }


#: the series that name a worker to the twin (an engine's batch, or its info)
_NAMING = (c.WORKER_INFO, c.REQUESTS_RUNNING)
#: the counters the twin counts requests by, the first one found
_REQUEST_COUNTERS = (str(c.REQUESTS_FINISHED), f"{c.PROMPT_LENGTH_TOKENS}_count")
_NO_SLOTS = f"the slot count is unknown (no {c.MAX_NUM_SEQS}, no max_num_seqs flag)"
_NO_COUNT = (
    f"the engine counts no requests (no {c.REQUESTS_FINISHED}): "
    "give --output-tokens N, the mean answer length"
)


def workers_in(scrapes: Sequence[tuple[float, Scrape]]) -> list[str]:
    """The workers with an engine's batch or info in any of ``scrapes``, in order."""
    return list(dict.fromkeys(w for _, s in scrapes for w in workers_of(s, _NAMING)))


def choose_worker(scrape: Scrape, worker: str | None) -> str:
    """The worker a what-if is about, from one scrape: ``worker`` if the data has it, the
    only one if there is one; else the one-line refusal (exit 2)."""
    names = workers_in([(0.0, scrape)])
    if worker is None:
        if len(names) != 1:
            raise UsageError(
                f"give --worker: the samples have {len(names)} workers ({', '.join(names) or 'none'})"
            )
        return names[0]
    if worker not in names:
        raise ConfigError(
            SOURCE, "--worker", f"a worker in the data ({', '.join(names) or 'none'})", worker
        )
    return worker


def precheck(
    scrape: Scrape,
    worker: str | None,
    what_if: tuple[str, float] | None,
    output_tokens: float | None = None,
) -> str:
    """What one scrape already says about a what-if before the span is watched: the worker
    (``choose_worker``; returned) and the questions no span answers, refused with
    ``NotEnough``: slots unknown, requests not counted, a slot count past
    ``EXTRAPOLATE_MAX`` x the worker's slots, a flag its engine or its info lacks."""
    name = choose_worker(scrape, worker)
    r = rd.read_workers([(0.0, scrape)], workers=[name])[name]
    slots = r.capacity if r.capacity is not None else _num(r.flags.get("max_num_seqs"))
    if rd.total(scrape, c.GENERATION_TOKENS, worker=name) is not None:  # the engine's data
        if not slots:
            raise NotEnough(f"{name}: {_NO_SLOTS}")
        if not output_tokens and all(
            rd.total(scrape, n, worker=name) is None for n in _REQUEST_COUNTERS
        ):
            raise NotEnough(f"{name}: {_NO_COUNT}")
    flag, value = what_if or ("", 0.0)
    if flag == "max-num-seqs" and slots and value > EXTRAPOLATE_MAX * slots:
        raise NotEnough(
            f"{name}: {flag}={value:g} is {value / slots:.1f}x its {slots:g} slots, and no "
            f"batch observed can be larger than those; the twin goes to {EXTRAPOLATE_MAX:g}x "
            f"the largest batch observed (max-num-seqs={math.floor(slots * EXTRAPOLATE_MAX)} "
            "at most): change in steps"
        )
    if flag == "gpu-memory-utilization" and r.engine == "llamacpp":
        raise ConfigError(
            SOURCE, "--what-if", "a flag llama.cpp has (it has no gpu-memory-utilization)", flag
        )
    stated = _num(r.flags.get("gpu_memory_utilization")) is not None
    info = rd.values(scrape, c.WORKER_INFO, worker=name)
    if flag == "gpu-memory-utilization" and not stated and info:
        raise NotEnough(f"{name}: the launch flags do not state gpu_memory_utilization")
    return name


def observe(
    scrapes: Sequence[tuple[float, Scrape]],
    worker: str | None = None,
    output_tokens: float | None = None,
) -> Observed:
    """What the twin needs from a worker's samples (agent expositions in time order): its
    ``pack.reading`` reading over the samples that hold the engine's data, and the
    twin's own intervals and load from the token and request counters."""
    if len(scrapes) < 2:
        raise NotEnough(f"{len(scrapes)} sample(s): at least two, over a minute or more, needed")
    worker = choose_worker([sample for _, s in scrapes for sample in s], worker)
    # samples without the engine's data (an agent that had not scraped the engine yet, or
    # lost it for a while) say nothing about the engine: skip them, do not refuse
    needed = (c.GENERATION_TOKENS, c.REQUESTS_RUNNING)
    scrapes = [
        (t, s) for t, s in scrapes if all(rd.total(s, f, worker=worker) is not None for f in needed)
    ]
    if len(scrapes) < 2:
        raise NotEnough(
            f"{worker}: {len(scrapes)} sample(s) with {c.GENERATION_TOKENS} and "
            f"{c.REQUESTS_RUNNING}: the engine must export token counters and its batch"
        )
    t = [at for at, _ in scrapes]
    gen, prompt, running, queue = (
        [v or 0.0 for v in rd.series(scrapes, f, worker)]
        for f in (c.GENERATION_TOKENS, c.PROMPT_TOKENS, c.REQUESTS_RUNNING, c.QUEUE_DEPTH)
    )
    intervals = [
        Interval(
            dt=t[i] - t[i - 1],
            running=(running[i - 1] + running[i]) / 2,
            generated=gen[i] - gen[i - 1],
            prompt=max(prompt[i] - prompt[i - 1], 0.0),
            busy=running[i - 1] > 0 and running[i] > 0,
        )
        for i in range(1, len(t))
        if gen[i] >= gen[i - 1]  # else a restart in between
    ]
    span, generated = t[-1] - t[0], gen[-1] - gen[0]
    counted = (
        (n, rd.increase(scrapes[0][1], scrapes[-1][1], n, worker)) for n in _REQUEST_COUNTERS
    )
    requests_from, requests = next(((n, v) for n, v in counted if v), ("", 0.0))
    if not requests_from:
        if not output_tokens:
            raise NotEnough(f"{worker}: {_NO_COUNT}")
        requests = generated / output_tokens
        requests_from = f"generated tokens / --output-tokens {output_tokens:g}"
    if requests <= 0 or generated <= 0:
        raise NotEnough(f"{worker}: no request finished in the {span:.0f} s observed")
    r = rd.read_workers(scrapes, workers=[worker])[worker]
    slots = r.capacity if r.capacity is not None else _num(r.flags.get("max_num_seqs"))
    if not slots:
        raise NotEnough(f"{worker}: {_NO_SLOTS}")
    out_mean = output_tokens or generated / requests
    pieces = _arrival_pieces(scrapes, worker, gen, queue, running, requests_from, out_mean)
    total = sum((t1 - t0) * n for t0, t1, n in pieces)
    arrivals = max(requests + (queue[-1] + running[-1]) - (queue[0] + running[0]), requests)
    bt = _num(r.flags.get("max_num_batched_tokens"))
    load = Load(
        span=span,
        arrival_rate=arrivals / span if span > 0 else 0.0,
        prompt_tokens=(prompt[-1] - prompt[0]) / requests,
        output_tokens=out_mean,
        queue_start=queue[0],
        running_start=running[0],
        # the pieces scaled to the arrivals counted over the whole span
        pieces=tuple((t0, t1, n * arrivals / total) for t0, t1, n in pieces) if total > 0 else (),
    )
    return Observed(
        replace(r, flags=r.known_flags),
        span,
        intervals,
        load,
        slots=int(slots),
        batch_tokens=int(bt) if bt else DEFAULT_BATCH_TOKENS,
        batch_tokens_stated=bool(bt),
        requests_from=requests_from,
        tpot=_tpot(scrapes, worker),
    )


def _arrival_pieces(
    scrapes: Sequence[tuple[float, Scrape]],
    worker: str,
    gen: Sequence[float | None],
    queue: Sequence[float | None],
    running: Sequence[float | None],
    requests_from: str,
    out_mean: float,
) -> list[tuple[float, float, float]]:
    """Arrivals per sample interval: requests finished plus the growth of what is open."""
    if requests_from in _REQUEST_COUNTERS:
        done = rd.series(scrapes, requests_from, worker)
    else:
        done = [None if g is None else g / out_mean for g in gen]
    t0 = scrapes[0][0]
    out = []
    for i in range(1, len(scrapes)):
        d0, d1 = done[i - 1], done[i]
        dt = scrapes[i][0] - scrapes[i - 1][0]
        if d0 is None or d1 is None or d1 < d0 or dt <= 0:
            return []  # a gap or a restart: fall back to the mean rate
        grew = ((queue[i] or 0.0) + (running[i] or 0.0)) - (
            (queue[i - 1] or 0.0) + (running[i - 1] or 0.0)
        )
        out.append((scrapes[i - 1][0] - t0, scrapes[i][0] - t0, max(0.0, d1 - d0 + grew) / dt))
    return out


def _tpot(scrapes: Sequence[tuple[float, Scrape]], worker: str) -> float | None:
    """The engine's time per output token, averaged over the samples taken while it served."""
    values = []
    for _, s in scrapes:
        if not rd.total(s, c.REQUESTS_RUNNING, worker=worker):
            continue
        found = rd.values(s, c.TPOT_MEAN_SECONDS, worker=worker) or rd.values(
            s, c.TPOT_QUANTILE_SECONDS, worker=worker, quantile="0.5"
        )
        if found and found[0][1] > 0:
            values.append(found[0][1])
    return mean(values)


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


# --------------------------------------------------------------------------- predictions


@dataclass
class Figures:
    """One setting's predicted figures."""

    setting: dict[str, Any]
    throughput: float
    ttft_p50: float
    ttft_p95: float
    queue: float
    busy: float
    gpu_utilization: float | None
    kv_usage: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(self).items()
        }


def envelope(runs: Sequence[Figures]) -> tuple[Figures, Figures]:
    """Each figure's lowest and highest over ``runs`` (figures without a value skipped)."""
    lo: dict[str, Any] = {"setting": runs[0].setting}
    hi: dict[str, Any] = {"setting": runs[0].setting}
    for f in fields(Figures):
        if f.name == "setting":
            continue
        vals = [
            v
            for r in runs
            if (v := getattr(r, f.name)) is not None
            and not (isinstance(v, float) and math.isnan(v))
        ]
        lo[f.name] = min(vals) if vals else (None if f.name in _OPTIONAL else math.nan)
        hi[f.name] = max(vals) if vals else (None if f.name in _OPTIONAL else math.nan)
    return Figures(**lo), Figures(**hi)


_OPTIONAL = ("gpu_utilization", "kv_usage")


@dataclass
class Trust:
    """Whether the fit reproduces what it was fitted on, against the stated bounds."""

    trusted: bool
    problems: list[str]
    residual_bound: float = RESIDUAL_BOUND
    replay_bound: dict[str, float] = field(default_factory=lambda: dict(REPLAY_BOUND))
    #: the observed figure, the twin's replay of it and the replay's band, per figure
    replay: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_fit(
    fit: StepFit,
    replay: Figures,
    replay_band: tuple[Figures, Figures],
    observed: dict[str, float | None],
) -> Trust:
    """Flag a fit whose residual, or whose replay of its own observation, is off by more
    than the bounds (``RESIDUAL_BOUND``, ``REPLAY_BOUND``)."""
    problems = []
    if fit.residual > RESIDUAL_BOUND:
        problems.append(
            f"the window times scatter {fit.residual:.0%} about the fitted step curve "
            f"(bound {RESIDUAL_BOUND:.0%}): the engine's speed changed while observed, or the "
            "step curve does not describe it"
        )
    seen: dict[str, dict[str, float]] = {}
    for key, bound in REPLAY_BOUND.items():
        obs_v = observed.get(key)
        twin = getattr(replay, key)
        if obs_v is None or not obs_v > 0 or twin is None or math.isnan(twin):
            continue
        lo, hi = sorted(getattr(b, key) for b in replay_band)
        err = (twin - obs_v) / obs_v
        seen[key] = {"observed": obs_v, "twin": twin, "low": lo, "high": hi, "error": err}
        if abs(err) > bound and not lo <= obs_v <= hi:
            problems.append(
                f"the twin's replay of the observation gives {key} {twin:.4g} against "
                f"{obs_v:.4g} observed ({err:+.0%}, bound {bound:.0%}; band "
                f"{lo:.4g}-{hi:.4g})"
            )
    return Trust(not problems, problems, replay=seen)


@dataclass
class Prediction:
    worker: str
    flag: str
    value: float
    fit: StepFit
    observed: Observed
    current: Figures
    new: Figures
    #: each figure's low and high end from the fit's uncertainty (twin.band_fits)
    band: tuple[Figures, Figures] | None = None
    range_note: str = ""
    notes: list[str] = field(default_factory=list)
    #: the same for the replay of the current setting
    current_band: tuple[Figures, Figures] | None = None
    trust: Trust | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "flag": self.flag,
            "value": self.value,
            "fit": self.fit.as_dict(),
            "observed": self.observed.as_dict(),
            "current": self.current.as_dict(),
            "current_band": [b.as_dict() for b in self.current_band] if self.current_band else None,
            "predicted": self.new.as_dict(),
            "band": [b.as_dict() for b in self.band] if self.band else None,
            "range": self.range_note,
            "trusted": self.trust.trusted if self.trust else None,
            "trust": self.trust.as_dict() if self.trust else None,
            "notes": list(self.notes),
        }


def kv_pool_tokens(obs: Observed) -> float | None:
    """The KV pool in tokens, from the observed usage and tokens held per running sequence."""
    if not obs.reading.kv_mean or obs.reading.kv_mean <= 0 or obs.running_mean <= 0:
        return None
    # a running sequence holds its prompt and, on average, half its answer
    held = obs.running_mean * (obs.load.prompt_tokens + obs.load.output_tokens / 2)
    return held / obs.reading.kv_mean


def current_setting(obs: Observed) -> Setting:
    return Setting(slots=obs.slots, batch_tokens=obs.batch_tokens, kv_tokens=kv_pool_tokens(obs))


def run_twin(
    fit: StepFit,
    obs: Observed,
    setting: Setting,
    arrivals: Sequence[float] | None = None,
    interval_z: float | None = None,
) -> Outcome:
    """The twin's outcome: one replay of given arrivals, or the mean over Poisson seeds
    (``interval_z``: with TTFT's sampling intervals, :func:`twin.simulate`)."""
    if arrivals is not None:
        return simulate(fit, obs.load, setting, arrivals=arrivals, interval_z=interval_z)
    runs = [simulate(fit, obs.load, setting, seed=s, interval_z=interval_z) for s in SEEDS]

    def avg(name: str) -> float:
        vals = [getattr(r, name) for r in runs if not math.isnan(getattr(r, name))]
        return sum(vals) / len(vals) if vals else math.nan

    def avg_interval(name: str) -> tuple[float, float] | None:
        ends = [e for r in runs if (e := getattr(r, name)) is not None and not math.isnan(e[0])]
        if not ends:
            return None
        return sum(e[0] for e in ends) / len(ends), sum(e[1] for e in ends) / len(ends)

    peaks = [r.kv_peak for r in runs if r.kv_peak is not None]
    return Outcome(
        throughput=avg("throughput"),
        ttft_p50=avg("ttft_p50"),
        ttft_p95=avg("ttft_p95"),
        queue_mean=avg("queue_mean"),
        busy=avg("busy"),
        kv_peak=max(peaks) if peaks else None,
        requests=sum(r.requests for r in runs) // len(runs),
        running_mean=avg("running_mean"),
        notes=runs[0].notes,
        ttft_p50_interval=avg_interval("ttft_p50_interval"),
        ttft_p95_interval=avg_interval("ttft_p95_interval"),
    )


def sampled(fig: Figures, out: Outcome) -> list[Figures]:
    """``fig``, and ``fig`` at each end of its TTFT quantiles' sampling intervals (where
    the replay gave them): a TTFT P50 or P95 over n requests is a sample's, and a band
    holds what another n requests may measure."""
    ends = [fig]
    if out.ttft_p50_interval is not None and out.ttft_p95_interval is not None:
        for i in (0, 1):
            ends.append(
                replace(fig, ttft_p50=out.ttft_p50_interval[i], ttft_p95=out.ttft_p95_interval[i])
            )
    return ends


def figures(out: Outcome, setting: Setting, obs: Observed, base_busy: float | None) -> Figures:
    util = None
    if obs.reading.gpu_util is not None and base_busy:
        util = min(1.0, obs.reading.gpu_util * out.busy / base_busy)
    return Figures(
        setting={
            "slots": setting.slots,
            "batch_tokens": setting.batch_tokens,
            "replicas": setting.replicas,
            "kv_pool_tokens": setting.kv_tokens,
        },
        throughput=out.throughput,
        ttft_p50=out.ttft_p50,
        ttft_p95=out.ttft_p95,
        queue=out.queue_mean,
        busy=out.busy,
        gpu_utilization=util,
        kv_usage=out.kv_peak,
    )


def new_setting(
    obs: Observed, flag: str, value: float, weights_bytes: float | None = None
) -> tuple[Setting, list[str]]:
    base = current_setting(obs)
    notes: list[str] = []
    if flag == "max-num-seqs":
        return replace(base, slots=int(value)), notes
    if flag == "max-num-batched-tokens":
        if value < obs.load.prompt_tokens and value < base.slots:
            notes.append("fewer tokens per step than slots: decoding sequences are held back")
        return replace(base, batch_tokens=int(value)), notes
    if flag == "replicas":
        return replace(base, replicas=int(value)), notes
    # gpu-memory-utilization
    if obs.reading.engine == "llamacpp":
        raise ConfigError(
            SOURCE, "--what-if", "a flag llama.cpp has (it has no gpu-memory-utilization)", flag
        )
    old = _num(obs.reading.flags.get("gpu_memory_utilization"))
    if old is None:
        raise NotEnough(
            f"{obs.reading.worker}: the launch flags do not state gpu_memory_utilization"
        )
    if base.kv_tokens is None:
        raise NotEnough(
            f"{obs.reading.worker}: no {c.KV_CACHE_USAGE_RATIO}: the KV pool is unknown"
        )
    if weights_bytes and obs.reading.vram_total_bytes:
        pool_old = old * obs.reading.vram_total_bytes - weights_bytes
        pool_new = value * obs.reading.vram_total_bytes - weights_bytes
        if pool_new <= 0:
            raise ConfigError(
                SOURCE, "--what-if", "a share that leaves room for the weights", value
            )
        scale = pool_new / pool_old
    else:
        scale = value / old
        notes.append(
            "the KV pool scaled by the share alone (give --weights for the exact pool; "
            "this understates the change)"
        )
    return replace(base, kv_tokens=base.kv_tokens * scale), notes


def observed_figures(obs: Observed) -> dict[str, float | None]:
    """The figures of the observation the twin's replay is held to."""
    return {
        "throughput": sum(i.generated for i in obs.intervals) / obs.span if obs.span else None,
        "ttft_p50": obs.reading.ttft.get("0.5"),
        "ttft_p95": obs.reading.ttft.get("0.95"),
    }


def _resolution(
    band: tuple[Figures, Figures], out: Outcome, arrivals: Sequence[float] | None
) -> tuple[Figures, Figures]:
    """A replayed load's throughput band widened by one answer's time over the window:
    the span ends with one request's last token, so the figure is no finer than that
    (the answer's time from its admission, :data:`RESOLUTION_FROM_ADMISSION`)."""
    answer = out.service_mean if RESOLUTION_FROM_ADMISSION else out.e2e_mean
    if arrivals is None or not out.window or not answer:
        return band
    d = answer / out.window
    lo, hi = band
    return replace(lo, throughput=lo.throughput * (1 - d)), replace(
        hi, throughput=hi.throughput * (1 + d)
    )


def predict(
    obs: Observed,
    flag: str,
    value: float,
    fit: StepFit | None = None,
    arrivals: Sequence[float] | None = None,
    weights_bytes: float | None = None,
    bands: bool = True,
    check: bool | None = None,
    band_z: float = BAND_Z,
) -> Prediction:
    """The twin's figures at the current setting and at ``flag=value``.

    ``bands``: each figure's range over the fit's uncertainty (:func:`twin.band_fits`,
    ``band_z`` residuals of speed each way).
    ``check``: hold the replay of the current setting to the observation
    (:func:`check_fit`); by default where the load replayed is the observation's own
    (no ``arrivals`` given).
    """
    fit = fit or obs.fit()
    setting, notes = new_setting(obs, flag, value, weights_bytes)
    base = current_setting(obs)
    # the largest batch the new setting can run, against the largest observed; the
    # current setting is no extrapolation, however few of its slots the load used
    reach = setting.slots
    if (
        flag == "max-num-seqs"
        and setting != base
        and reach > fit.batch_max * EXTRAPOLATE_BAND + 0.5
    ):
        ratio = reach / fit.batch_max
        if ratio > EXTRAPOLATE_MAX:
            raise NotEnough(
                f"{obs.reading.worker}: {flag}={value:g} is {ratio:.1f}x the largest batch observed "
                f"({fit.batch_max:.1f}); the twin goes to {EXTRAPOLATE_MAX:g}x "
                f"(max-num-seqs={math.floor(fit.batch_max * EXTRAPOLATE_MAX)}): change in steps"
            )
        range_note = (
            f"extrapolated: batch sizes {fit.batch_min:.1f}-{fit.batch_max:.1f} observed, "
            f"{setting.slots} asked ({ratio:.1f}x)"
        )
    elif flag == "max-num-seqs" and setting != base and below_fits(fit, reach):
        if REFUSE_BELOW_ZERO_FIXED_COST and fit.a <= 0 and fit.slope_fitted:
            raise NotEnough(
                f"{obs.reading.worker}: {flag}={value:g} is below the batches observed "
                f"({fit.batch_min:.1f}-{fit.batch_max:.1f}), and over those the step's fixed "
                "cost came out at zero, the least it can be: the fit cannot tell what a step "
                f"costs below {fit.batch_min:.1f} sequences. Observe the worker at a lighter "
                "load, or ask within the batches observed"
            )
        range_note = (
            f"extrapolated below: batch sizes {fit.batch_min:.1f}-{fit.batch_max:.1f} "
            f"observed, {setting.slots} asked (below {fit.batch_min:.1f} {_DOWN_TO_PROPORTIONAL})"
        )
    else:
        range_note = (
            f"within the observations: batch sizes {fit.batch_min:.1f}-{fit.batch_max:.1f} "
            f"over {fit.intervals} busy intervals"
        )
        if flag == "max-num-seqs" and under_ref_fits(fit, reach):
            range_note += (
                f" (below {fit.b_ref:.1f}, the batch the step rests on, {_DOWN_TO_PROPORTIONAL})"
            )
    z = band_z if bands and TTFT_SAMPLING else None
    now = run_twin(fit, obs, base, arrivals, z)
    new = run_twin(fit, obs, setting, arrivals, z) if setting != base else now
    current = figures(now, base, obs, now.busy)
    predicted = figures(new, setting, obs, now.busy)
    band = current_band = None
    if bands:
        now_runs, new_runs = sampled(current, now), sampled(predicted, new)
        for f in band_fits(fit, band_z):
            b = run_twin(f, obs, base, arrivals, z)
            n = run_twin(f, obs, setting, arrivals, z) if setting != base else b
            now_runs += sampled(figures(b, base, obs, b.busy), b)
            new_runs += sampled(figures(n, setting, obs, b.busy), n)
        # below the batches the fit saw, or the batch its step rests on: the new
        # setting's band only
        further = (
            below_fits(fit, reach, band_z) + under_ref_fits(fit, reach, band_z)
            if flag == "max-num-seqs"
            else []
        )
        for f in further:
            b = run_twin(f, obs, base, arrivals)
            n = run_twin(f, obs, setting, arrivals, z)
            new_runs += sampled(figures(n, setting, obs, b.busy), n)
        current_band = _resolution(envelope(now_runs), now, arrivals)
        band = _resolution(envelope(new_runs), new, arrivals)
        k_lo = fit.k if fit.k_lo is None else fit.k_lo
        k_hi = fit.k if fit.k_hi is None else fit.k_hi
        range_note += (
            f"; band: slope {k_lo * 1e3:.3f}-{k_hi * 1e3:.3f} ms per sequence "
            + ("(5-95% of refits)" if fit.slope_fitted else "(flat to proportional)")
            + (
                f", prompt cost {prompt[0] * 1e6:.1f} (5% of refits) to {prompt[1] * 1e6:.1f}"
                " us a token"
                if (prompt := prompt_costs(fit))[0] < prompt[1]
                else ""
            )
            + f", speed -/+{speed_spread(fit, band_z):.0%}"
            + (
                f" ({band_z:g} x the resampled fits' spread, {RUN_SPEED_FLOOR:.0%} at least)"
                if fit.speed_lo is not None
                else " (the fit's residual)"
                if band_z == 1
                else f" ({band_z:g} x the fit's residual)"
            )
        )
    trust = None
    if (arrivals is None if check is None else check) and current_band is not None:
        trust = check_fit(fit, current, current_band, observed_figures(obs))
    notes = [*notes, *new.notes]
    if not fit.slope_fitted:
        notes.append(f"step slope: {fit.k_source}")
    if not obs.batch_tokens_stated:
        notes.append(
            f"prompt tokens per step: {DEFAULT_BATCH_TOKENS} (the launch flags do not say)"
        )
    return Prediction(
        worker=obs.reading.worker,
        flag=flag,
        value=value,
        fit=fit,
        observed=obs,
        current=current,
        new=predicted,
        band=band,
        range_note=range_note,
        notes=notes,
        current_band=current_band,
        trust=trust,
    )


# --------------------------------------------------------------------------- the lever


@dataclass
class Suggestion:
    lever: str  # "slots", "replicas", "batch_tokens", "none", "kv"
    reason: str
    flag: str | None = None
    value: float | None = None
    prediction: Prediction | None = None
    #: the queue is over what the worker can batch: InferenceQueueOverCapacity's
    #: condition, the page (pack.loops.queue_levers), so the lever is replicas
    paging: bool = False
    #: the lever after this one, with its prediction
    then: Suggestion | None = None
    #: False: shown for comparison, not advised (more slots on a busy GPU)
    advised: bool = True

    def as_dict(self) -> dict[str, Any]:
        """Its fields, the prediction's as that one's own ``as_dict``."""
        return {
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "prediction": self.prediction.as_dict() if self.prediction else None,
            "then": self.then.as_dict() if self.then else None,
        }


#: GPU utilization from which more slots cannot help (the guide's "do not push past 80%")
GPU_SATURATED = 0.85
#: share of the busy time spent on prompt tokens from which prefill is the lever
PREFILL_SHARE = 0.5


def suggest(
    obs: Observed,
    fit: StepFit | None = None,
    gpu_saturated: float = GPU_SATURATED,
    kv_full: float = 0.92,
    long_prompt_share: float = 0.02,
    t: Thresholds | None = None,
) -> Suggestion:
    """The lever for this worker: which flag to change, to what, and what to expect.

    Where the queue is over what the worker can batch (``pack.loops.queue_levers``:
    InferenceQueueOverCapacity's condition, read as ``inferwatch advise`` reads it), the
    levers come in advise's order: replicas with the GPU busy (what more slots would do
    follows in ``then``, not advised, with the twin's figures and band), the slots first
    only with the GPU idle under its line."""
    from inferwatch.pack.thresholds import load_thresholds

    t = t or load_thresholds()
    fit = fit or obs.fit()
    # every slot busy while requests waited (an idle sample at the edge of the span
    # does not hide a deep queue)
    batch = (
        obs.reading.running_when_queued
        if obs.reading.running_when_queued is not None
        else obs.running_mean
    )
    slots_busy = batch >= 0.9 * obs.slots
    over = obs.queue_mean >= 1.0 and slots_busy
    busy_time = sum(i.dt for i in obs.intervals if i.busy) or 1.0
    prefill_share = sum(fit.p * i.prompt for i in obs.intervals if i.busy) / busy_time
    long_prompts = (
        obs.reading.long_prompt_share or 0.0
    ) >= long_prompt_share or prefill_share >= PREFILL_SHARE
    gpu_sat = obs.reading.gpu_util is not None and obs.reading.gpu_util >= gpu_saturated
    kv_is_full = obs.reading.kv is not None and obs.reading.kv >= kv_full
    levers = L.queue_levers(
        obs.queue_mean, obs.slots, obs.running_mean, obs.reading.kv, obs.reading.gpu_util, t
    )
    if levers:
        return _paging(obs, fit, levers, batch, slots_busy, kv_is_full, gpu_sat, t)
    if not over:
        if long_prompts and obs.batch_tokens < 8192:
            target = min(8192, max(4096, obs.batch_tokens * 2))
            pred = predict(obs, "max-num-batched-tokens", target, fit)
            return Suggestion(
                "batch_tokens",
                f"prompts take {prefill_share:.0%} of the busy time: a larger prompt batch "
                "(chunked prefill) shortens TTFT",
                "max-num-batched-tokens",
                target,
                pred,
            )
        return Suggestion("none", "the queue is within the slots: no flag change needed")
    if kv_is_full:
        need = _replicas_for(obs, fit)
        return Suggestion(
            "replicas",
            f"the KV cache is full (peak {obs.reading.kv:.0%}): more slots would preempt; "
            "add replicas (or FP8 KV, a larger gpu-memory-utilization)",
            "replicas",
            need,
            predict(obs, "replicas", need, fit),
        )
    if obs.cpu and (obs.busy or 0.0) >= 0.9:
        need = _replicas_for(obs, fit)
        return Suggestion(
            "replicas",
            f"no GPU seen and the engine busy {obs.busy:.0%} of the time: a CPU engine at its "
            "slot limit is compute-bound (more slots made the measured llama.cpp slower, "
            "docs/advise.md); add replicas",
            "replicas",
            need,
            predict(obs, "replicas", need, fit),
        )
    if gpu_sat:
        need = _replicas_for(obs, fit)
        return Suggestion(
            "replicas",
            f"the GPU is saturated ({obs.reading.gpu_util:.0%}): more slots only lengthen each step; "
            "add replicas",
            "replicas",
            need,
            predict(obs, "replicas", need, fit),
        )
    if long_prompts and obs.batch_tokens < 4096:
        target = 4096
        return Suggestion(
            "batch_tokens",
            f"prompts take {prefill_share:.0%} of the busy time: raise the prompt batch first",
            "max-num-batched-tokens",
            target,
            predict(obs, "max-num-batched-tokens", target, fit),
        )
    # the slots are the bound: the fewest more slots (within the observed reach) that
    # bring the queue under one request, else the furthest the twin goes
    best = _more_slots(obs, fit)
    return Suggestion(
        "slots",
        f"queue {obs.queue_mean:.1f} with every slot busy ({batch:.1f} of {obs.slots}), "
        + (f"GPU {obs.reading.gpu_util:.0%}" if obs.reading.gpu_util is not None else "no GPU seen")
        + (f", KV {obs.reading.kv:.0%}" if obs.reading.kv is not None else "")
        + (
            ": the slots are the bound, not the GPU; raise them before adding a replica"
            if obs.reading.gpu_util is not None
            else ": the slots are the bound; with no GPU seen the twin takes a step to grow "
            "with the batch, so more slots gain little throughput (see the band)"
        ),
        "max-num-seqs",
        best.value,
        best,
    )


def _more_slots(obs: Observed, fit: StepFit) -> Prediction:
    """The fewest more slots (within the twin's reach) whose replay keeps the queue under
    one request, else the furthest the twin goes."""
    top = max(obs.slots + 1, math.floor(fit.batch_max * EXTRAPOLATE_MAX))
    best: Prediction | None = None
    for slots in _candidates(obs.slots, top):
        best = predict(obs, "max-num-seqs", slots, fit, bands=False)
        if best.new.queue < 1.0:
            break
    assert best is not None
    # the band only for the answer: the search needs the point figures
    return predict(obs, "max-num-seqs", best.value, fit)


def _paging(
    obs: Observed,
    fit: StepFit,
    levers: Sequence[str],
    batch: float,
    slots_busy: bool,
    kv_is_full: bool,
    gpu_sat: bool,
    t: Thresholds,
) -> Suggestion:
    """The queue pages: ``levers`` (``pack.loops.queue_levers``) in their order. With the
    GPU busy the lever is replicas, and what more slots would do is shown after it, as
    information (``advised`` False); with the GPU idle under its line, the slots first,
    replicas second."""
    cap = L.batch_capacity(obs.slots, obs.running_mean, obs.reading.kv, t) or obs.slots
    gpu = f"GPU {obs.reading.gpu_util:.0%}" if obs.reading.gpu_util is not None else "no GPU seen"
    line = f"{t.gpu_utilization.idle_below:.0%}"
    page = (
        f"queue {obs.queue_mean:.1f} over what the worker can batch ({cap:.3g}): "
        "InferenceQueueOverCapacity's condition, which pages"
    )
    need = _replicas_for(obs, fit)

    def replicas(reason: str) -> Suggestion:
        return Suggestion(
            "replicas", reason, "replicas", need, predict(obs, "replicas", need, fit), paging=True
        )

    if levers[0] == L.SLOTS_LEVER:
        more = _more_slots(obs, fit)
        return Suggestion(
            "slots",
            f"{page}; every slot busy ({batch:.1f} of {obs.slots}) with the {gpu}, under "
            f"{line} (gpu_utilization.idle_below): the batch is too small for the card; "
            "raise the slots first, as `inferwatch advise` and the runbook say",
            "max-num-seqs",
            more.value,
            more,
            paging=True,
            then=replicas("if the queue outlasts the restart, or the new slot count does not fit"),
        )
    if kv_is_full:
        why = f"the KV cache is full (peak {obs.reading.kv:.0%}): more slots would preempt"
    elif obs.cpu and (obs.busy or 0.0) >= 0.9:
        why = (
            f"no GPU seen and the engine busy {obs.busy:.0%} of the time: a CPU engine at its "
            "slot limit is compute-bound (more slots made the measured llama.cpp slower, "
            "docs/advise.md)"
        )
    elif gpu_sat:
        why = f"the GPU is saturated ({gpu}): more slots only lengthen each step"
    else:
        why = f"the {gpu} is busy (at or past {line}): the slots are not the remedy"
    first = replicas(
        f"{page}; scale out (or rate-limit at the gateway) first, as `inferwatch advise` and "
        f"the runbook say (6 FAQ); {why}"
    )
    if slots_busy and not kv_is_full and not (obs.cpu and (obs.busy or 0.0) >= 0.9):
        try:
            more = _more_slots(obs, fit)
        except NotEnough as exc:
            first.then = Suggestion(
                "slots", f"what more slots would do: not answered ({exc})", advised=False
            )
        else:
            first.then = Suggestion(
                "slots",
                f"what more slots would do, for comparison (not advised: the {gpu} is at or "
                f"past {line}, under which the runbook raises them; a launch flag also waits "
                "for a restart)",
                "max-num-seqs",
                more.value,
                more,
                advised=False,
            )
    return first


def _candidates(current: int, top: int) -> list[int]:
    out: list[int] = []
    step = max(1, current // 4)
    v = current + step
    while v < top:
        out.append(v)
        v += step
    out.append(top)
    return out


def _replicas_for(obs: Observed, fit: StepFit) -> int:
    """Replicas whose slots at the fitted step time serve the offered tokens."""
    per_replica = obs.slots / fit.step(obs.slots) if fit.step(obs.slots) > 0 else 0.0
    demand = obs.load.arrival_rate * obs.load.output_tokens
    if per_replica <= 0:
        return 2
    return max(2, math.ceil(demand / (per_replica * 0.8)))
