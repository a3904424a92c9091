"""A capacity twin of one worker: a step-time curve fitted from its own samples, and a
discrete-event simulation of continuous batching that replays the observed load at
other engine settings (``inferwatch advise --what-if``).

The model (docs/advise.md, "What-if"):

- one engine iteration ("step") decodes one token for each running sequence and
  evaluates up to ``batch_tokens`` prompt tokens of sequences still in prefill; it
  takes ``a + k x decoding + p x prompt tokens`` seconds. ``a`` is the fixed cost of
  a step (reading the weights once), ``k`` what each more sequence adds, ``p`` what
  one prompt token costs.
- the three are fitted by non-negative least squares from the worker's busy
  intervals: over an interval, ``dt = a x steps + k x generated + p x prompt`` with
  ``steps = generated / running``. Where the observed batch sizes span too little
  to separate ``a`` from ``k`` (a worker at its slot limit the whole time), ``k`` is
  taken equal to ``p`` (one more token in a step costs what a prompt token costs) and
  said so: an assumption, not a fit.
- requests arrive as a Poisson stream at the observed rate (piece by piece where the
  samples show the rate changing) (finished plus the growth
  of queue and batch over the span), each with the observed mean prompt and answer
  lengths; ``slots`` of them run at once (fewer where the KV pool runs out), the
  rest wait first-come first-served. TTFT is the wait plus the prefill step(s) that
  give the first token.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Interval:
    """What one worker did between two samples."""

    dt: float
    #: mean of the running gauge at both ends
    running: float
    #: tokens generated / prompt tokens evaluated in the interval
    generated: float
    prompt: float
    #: both ends had a request running
    busy: bool


@dataclass(frozen=True)
class Load:
    """The offered load over the observed span."""

    span: float
    #: requests per second arriving (finished + growth of what is open)
    arrival_rate: float
    prompt_tokens: float
    output_tokens: float
    #: open requests at the start of the span (waiting, running)
    queue_start: float = 0.0
    running_start: float = 0.0
    #: the arrival rate piece by piece, (start, end, requests/s) from the span's start:
    #: a load that rose and fell within the span is replayed as it came, not averaged
    pieces: tuple[tuple[float, float, float], ...] = ()


@dataclass(frozen=True)
class StepFit:
    """Step time = a + k x decoding sequences + p x prompt tokens (seconds)."""

    a: float
    k: float
    p: float
    #: "fitted" or "assumed k = p (batch sizes observed span too little)"
    k_source: str
    #: batch sizes (mean running per interval) the fit rests on
    batch_min: float
    batch_max: float
    intervals: int
    #: relative root-mean-square residual of the interval times
    residual: float
    #: the slope's range: a fitted one's 5th-95th percentile over the fits of resampled
    #: windows, an assumed one's from a flat step to one in proportion to the batch
    k_lo: float | None = None
    k_hi: float | None = None
    #: the batch (time-weighted mean over the busy windows) whose step time the slope's
    #: range keeps: a steeper slope is a cheaper fixed cost there
    b_ref: float = 0.0

    def step(self, decoding: float, prompt: float = 0.0) -> float:
        return self.a + self.k * decoding + self.p * prompt

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class NotEnough(Exception):
    """Too few observations to fit (the message names what is missing)."""


# --------------------------------------------------------------------------- the fit


def _solve(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float] | None:
    """Least squares by the normal equations (Gaussian elimination); None if singular."""
    n = len(rows[0])
    m = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    v = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(n)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        scale = max(abs(m[i][i]) for i in range(n)) or 1.0
        if abs(m[piv][col]) <= 1e-12 * scale:
            return None
        m[col], m[piv] = m[piv], m[col]
        v[col], v[piv] = v[piv], v[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n):
                    m[r][c] -= f * m[col][c]
                v[r] -= f * v[col]
    return [v[i] / m[i][i] for i in range(n)]


def nnls(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float]:
    """Non-negative least squares for a handful of columns: the best all-positive subset."""
    n = len(rows[0])
    best: tuple[float, list[float]] | None = None
    for size in range(n, 0, -1):
        for cols in itertools.combinations(range(n), size):
            sol = _solve([[r[c] for c in cols] for r in rows], ys)
            if sol is None or any(x < 0 for x in sol):
                continue
            coef = [0.0] * n
            for c, x in zip(cols, sol, strict=True):
                coef[c] = x
            err = sum(
                (y - sum(c * x for c, x in zip(coef, r, strict=True))) ** 2
                for r, y in zip(rows, ys, strict=True)
            )
            if best is None or err < best[0] - 1e-15:
                best = (err, coef)
    return best[1] if best else [0.0] * n


#: the least busy intervals, and the least batch-size spread (max / min), for a fit
MIN_INTERVALS = 5
SPREAD_FOR_SLOPE = 1.5


def windows(intervals: Sequence[Interval], seconds: float) -> list[Interval]:
    """Consecutive busy intervals merged into windows of ``seconds`` at least.

    Some engines count tokens when a request ends (llama.cpp adds a request's answer
    at once), so one scrape interval sees 0 or a whole answer; a window of several
    seconds averages that out. The running gauge is weighted by time.
    """
    out: list[Interval] = []
    group: list[Interval] = []

    def close() -> None:
        if group:
            dt = sum(i.dt for i in group)
            out.append(
                Interval(
                    dt=dt,
                    running=sum(i.running * i.dt for i in group) / dt,
                    generated=sum(i.generated for i in group),
                    prompt=sum(i.prompt for i in group),
                    busy=True,
                )
            )
            group.clear()

    for i in intervals:
        if not i.busy or i.running < 0.5:
            close()  # a window never spans idle time
            continue
        group.append(i)
        if sum(g.dt for g in group) >= seconds:
            close()
    if group and sum(g.dt for g in group) >= seconds / 2:
        close()
    return out


#: seconds of samples merged into one row of the fit
FIT_WINDOW = 5.0


def fit_steps(
    intervals: Sequence[Interval],
    window: float = FIT_WINDOW,
    tpot: float | None = None,
    compute_bound: bool = False,
) -> StepFit:
    """Fit the step-time curve from busy windows (see the module's docstring).

    ``tpot``: the engine's own mean time per output token over the span (a decode step
    as a running sequence sees it), which separates decode from prefill where the
    windows cannot (a saturated worker's windows all have the same prompt/answer
    ratio). ``compute_bound``: no GPU is seen (a CPU engine), so where the slope
    cannot be fitted a step is taken to grow in proportion to the batch.
    Whatever the split, the fit is scaled so it gives the busy time observed.
    """
    busy = [i for i in windows(intervals, window) if i.generated > 0]
    if len(busy) < MIN_INTERVALS:
        raise NotEnough(
            f"{len(busy)} busy window(s) of {window:g} s with tokens generated, "
            f"{MIN_INTERVALS} needed: observe the worker longer, while it serves"
        )
    ys = [i.dt for i in busy]
    b_min = min(i.running for i in busy)
    b_max = max(i.running for i in busy)
    busy_time = sum(ys)
    steps = sum(i.generated / i.running for i in busy)
    prompt = sum(i.prompt for i in busy)
    if b_max / b_min >= SPREAD_FOR_SLOPE:
        rows = [[i.generated / i.running, i.generated, i.prompt] for i in busy]
        a, k, p = nnls(rows, ys)
        source = "fitted"
        if a <= 0 and k <= 0:
            raise NotEnough("the step times do not fit a + k x batch: observe a steadier load")
    else:
        b0 = sum(i.running * i.dt for i in busy) / busy_time
        if tpot and tpot * steps < busy_time and prompt > 0:
            s0 = tpot
            p = (busy_time - steps * s0) / prompt
        elif tpot:
            s0, p = busy_time / steps, 0.0
        else:
            s0, p = nnls([[i.generated / i.running, i.prompt] for i in busy], ys)
        if s0 <= 0:
            raise NotEnough("no decode step time in the samples: observe the worker longer")
        if compute_bound:
            k = 0.9 * s0 / b0
            source = "assumed: a step grows with the batch (no GPU seen; batch sizes span too little to fit it)"
        else:
            k = min(p, 0.9 * s0 / b0)
            source = "assumed k = p (observed batch sizes span too little to fit it)"
        a = s0 - k * b0
    # the same busy time as observed, whatever the split
    total = a * steps + k * sum(i.generated for i in busy) + p * prompt
    if total > 0:
        scale = busy_time / total
        a, k, p = a * scale, k * scale, p * scale
    pred = [a * i.generated / i.running + k * i.generated + p * i.prompt for i in busy]
    resid = math.sqrt(sum((y - q) ** 2 for y, q in zip(ys, pred, strict=True)) / len(ys))
    b_ref = sum(i.running * i.dt for i in busy) / busy_time
    if source == "fitted":
        k_lo, k_hi = _slope_spread(busy, k)
    else:  # assumed: from a flat step to one in proportion to the batch
        k_lo, k_hi = 0.0, max(k, 0.95 * (a + k * b_ref) / b_ref)
    return StepFit(
        a, k, p, source, b_min, b_max, len(busy), resid / (busy_time / len(ys)),
        k_lo=k_lo, k_hi=k_hi, b_ref=b_ref,
    )  # fmt: skip


#: resampled fits for a fitted slope's range, and the share of them left out at each end
BOOTSTRAP = 200
BOOTSTRAP_TAIL = 0.05


def _slope_spread(busy: Sequence[Interval], k: float) -> tuple[float, float]:
    """The slope's 5th-95th percentile over fits of the windows drawn with replacement
    (a seeded draw: the same samples give the same range). ``k`` stays inside."""
    rng = random.Random(0)
    rows = [[i.generated / i.running, i.generated, i.prompt] for i in busy]
    ys = [i.dt for i in busy]
    ks = []
    for _ in range(BOOTSTRAP):
        pick = [rng.randrange(len(rows)) for _ in rows]
        a_, k_, p_ = nnls([rows[j] for j in pick], [ys[j] for j in pick])
        total = sum(a_ * rows[j][0] + k_ * rows[j][1] + p_ * rows[j][2] for j in pick)
        if total > 0:  # scaled to the draw's busy time, as the fit is
            ks.append(k_ * sum(ys[j] for j in pick) / total)
    if not ks:
        return k, k
    return min(k, quantile(ks, BOOTSTRAP_TAIL)), max(k, quantile(ks, 1 - BOOTSTRAP_TAIL))


#: the band's speed: the step times scaled by 1 -/+ BAND_Z x the fit's residual (the
#: spread of the windows' step times about the fit: a later stretch of serving runs as
#: much faster or slower as the windows did), the residual taken as SPEED_FLOOR at least.
#: BAND_Z is the least of 1.5, 2, 2.5, 3 that puts 90% of the held-out runs of the
#: recorded sweeps inside their band for throughput and TTFT P50 and P95 (docs/advise.md,
#: "Calibration"; tests/unit/test_whatif_calibration.py)
BAND_Z = 2.5
SPEED_FLOOR = 0.10


def band_fits(fit: StepFit, z: float = BAND_Z) -> list[StepFit]:
    """The fits at the corners of the fit's uncertainty: each end of the slope's range
    (the step time at ``b_ref`` kept) at each end of the speed's range."""
    spread = z * max(fit.residual, SPEED_FLOOR)
    k_lo = fit.k if fit.k_lo is None else fit.k_lo
    k_hi = fit.k if fit.k_hi is None else fit.k_hi
    out = []
    for k in sorted({k_lo, k_hi}):
        a = max(0.0, fit.a + (fit.k - k) * fit.b_ref)
        for scale in (max(0.05, 1 - spread), 1 + spread):
            out.append(replace(fit, a=a * scale, k=k * scale, p=fit.p * scale))
    return out


# --------------------------------------------------------------------------- simulation


@dataclass(frozen=True)
class Setting:
    """The engine settings simulated."""

    slots: int
    #: prompt tokens per step (llama.cpp --batch-size, vLLM --max-num-batched-tokens)
    batch_tokens: int = 2048
    #: KV pool in tokens (None: unbounded)
    kv_tokens: float | None = None
    replicas: int = 1


@dataclass
class Outcome:
    """What a simulated (or measured) run gives."""

    throughput: float  # generated tokens per second, completed, over the run
    ttft_p50: float
    ttft_p95: float
    queue_mean: float
    busy: float  # share of the time a step is running
    kv_peak: float | None  # peak KV tokens in use / pool (None: no pool known)
    requests: int
    running_mean: float = 0.0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (as numpy's default)."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def simulate(
    fit: StepFit,
    load: Load,
    setting: Setting,
    arrivals: Sequence[float] | None = None,
    seed: int = 1,
) -> Outcome:
    """Replay ``load`` (or the given arrival times) on one replica of ``setting``."""
    rng = random.Random(seed)
    if arrivals is None:
        times: list[float] = []
        for t0, t1, r in load.pieces or ((0.0, load.span, load.arrival_rate),):
            t, r = t0, r / setting.replicas
            while r > 0:
                t += rng.expovariate(r)
                if t > t1:
                    break
                times.append(t)
        start_open = round((load.queue_start + load.running_start) / setting.replicas)
        times = [0.0] * start_open + times
    else:
        times = list(arrivals)
    prompt = max(1, round(load.prompt_tokens))
    output = max(1, round(load.output_tokens))
    per_seq = prompt + output
    kv_slots = setting.slots
    notes = []
    if setting.kv_tokens is not None:
        fit_kv = int(setting.kv_tokens // per_seq)
        if fit_kv < setting.slots:
            kv_slots = max(1, fit_kv)
            notes.append(
                f"the KV pool holds {fit_kv} sequence(s) of {per_seq} tokens: "
                f"{kv_slots} run at once, not {setting.slots}"
            )
    pending = deque(enumerate(times))
    waiting: deque[tuple[int, float]] = deque()
    # active: [arrival, prompt left, output left, first token seen]
    active: list[list[float]] = []
    ttfts: list[float] = []
    t = 0.0
    generated = 0.0
    busy = 0.0
    queue_area = 0.0
    running_area = 0.0
    last_done = 0.0
    kv_peak = 0.0
    while pending or waiting or active:
        while pending and pending[0][1] <= t:
            waiting.append(pending.popleft())
        if not active and not waiting:
            t = pending[0][1]
            continue
        while waiting and len(active) < kv_slots:
            _, arrived = waiting.popleft()
            active.append([arrived, float(prompt), float(output), 0.0])
        budget = float(setting.batch_tokens)
        decoding = [s for s in active if s[1] <= 0]
        budget -= len(decoding)
        prefill = 0.0
        finishing_prompt = []
        for s in active:
            if s[1] > 0 and budget > 0:
                take = min(s[1], budget)
                s[1] -= take
                budget -= take
                prefill += take
                if s[1] <= 0:
                    finishing_prompt.append(s)
        dt = fit.step(len(decoding), prefill)
        if setting.kv_tokens:
            in_use = sum(prompt - max(s[1], 0) + (output - s[2]) for s in active)
            kv_peak = max(kv_peak, in_use / setting.kv_tokens)
        queue_area += len(waiting) * dt
        running_area += len(active) * dt
        t += dt
        busy += dt
        for s in decoding:
            s[2] -= 1
            generated += 1
        for s in finishing_prompt:
            ttfts.append(t - s[0])
            s[2] -= 1
            generated += 1
        done = [s for s in active if s[2] <= 0]
        if done:
            last_done = t
            active = [s for s in active if s[2] > 0]
    end = max(last_done, load.span) or 1.0
    # replayed sends: from the first send to the last answer, as a client measures it
    window = (last_done - times[0]) if arrivals is not None and times else end
    return Outcome(
        throughput=generated * setting.replicas / (window or 1.0),
        ttft_p50=quantile(ttfts, 0.5),
        ttft_p95=quantile(ttfts, 0.95),
        queue_mean=queue_area / end * setting.replicas,
        busy=busy / end,
        kv_peak=kv_peak if setting.kv_tokens else None,
        requests=len(ttfts) * setting.replicas,
        running_mean=running_area / end * setting.replicas,
        notes=notes,
    )
