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
- where the clients' own per-request records are at hand (a trace whose clients
  streamed), :func:`fit_requests` fits the same curve one row per request (a lightly
  loaded run fits too) and the overhead each client adds to its TTFT.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
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
    #: prompt tokens of each replayed arrival, in the arrivals' order (empty: the mean)
    prompts: tuple[float, ...] = ()


@dataclass(frozen=True)
class StepFit:
    """Step time = a + k x decoding sequences + p x prompt tokens (seconds)."""

    a: float
    k: float
    p: float
    #: "fitted" (from windows), "fitted (client records)", or "assumed k = p (...)"
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
    #: what a request's client sees on top of the engine's wait and first step (HTTP,
    #: tokenization, the first streamed chunk; :func:`client_overhead`): evenly spaced
    #: quantiles of that per-request cost, seconds (empty: not known, taken as 0)
    overhead: tuple[float, ...] = ()
    #: the overhead's part that goes with the request's own prompt: seconds a prompt token
    #: above or below ``prompt_ref`` (the mean prompt of the requests it was taken from)
    overhead_per_prompt: float = 0.0
    prompt_ref: float = 0.0
    #: the step time's relative range from the fit's own uncertainty (5th-95th
    #: percentile of resampled fits at ``b_ref``, as factors; None: the residual is used)
    speed_lo: float | None = None
    speed_hi: float | None = None
    #: the prompt cost's low end: the 5th percentile of ``p`` over the resampled fits
    #: (None: not resampled; the band keeps ``p``)
    p_lo: float | None = None

    def step(self, decoding: float, prompt: float = 0.0) -> float:
        return self.a + self.k * decoding + self.p * prompt

    @property
    def slope_fitted(self) -> bool:
        """The slope is fitted (from windows or client records), not assumed."""
        return self.k_source.startswith("fitted")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class NotEnough(Exception):
    """Too few observations to fit (the message names what is missing)."""


# --------------------------------------------------------------------------- the fit


def _solve(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float] | None:
    """Least squares by the normal equations; None if singular."""
    n = len(rows[0])
    m = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    v = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(n)]
    return _solve_square(m, v)


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
    a = k = p = 0.0
    generated = sum(i.generated for i in busy)
    spread = b_max / b_min >= SPREAD_FOR_SLOPE
    if spread:
        rows = [[i.generated / i.running, i.generated, i.prompt] for i in busy]
        a, k, p = nnls(rows, ys)
        source = "fitted"
    if a * steps + k * generated <= 1e-6 * busy_time:
        # the batch spread too little to fit a slope, or the fit put every second on
        # the prompts (windows with one prompt/answer ratio cannot tell prefill from
        # decode): the decode step comes from the engine's own time per output token
        b0 = sum(i.running * i.dt for i in busy) / busy_time
        if tpot and tpot * steps < busy_time and prompt > 0:
            s0 = tpot
            p = (busy_time - steps * s0) / prompt
        elif tpot:
            s0, p = busy_time / steps, 0.0
        else:
            s0, p = nnls([[i.generated / i.running, i.prompt] for i in busy], ys)
        if s0 * steps <= 1e-6 * busy_time:
            raise NotEnough("no decode step time in the samples: observe the worker longer")
        why = "the windows do not tell prefill from decode" if spread else None
        if compute_bound:
            k = 0.9 * s0 / b0
            source = f"assumed: a step grows with the batch (no GPU seen; {why or 'batch sizes span too little to fit it'})"
        else:
            k = min(p, 0.9 * s0 / b0)
            source = f"assumed k = p ({why or 'observed batch sizes span too little to fit it'})"
        a = s0 - k * b0
    # the same busy time as observed, whatever the split
    total = a * steps + k * generated + p * prompt
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


# --------------------------------------------------------------------------- from requests


@dataclass(frozen=True)
class Request:
    """One request as its client saw it (a trace's client record): sent at ``sent``, the
    first token ``ttft`` later, the last ``e2e`` after sending."""

    sent: float
    ttft: float
    e2e: float
    prompt: float
    generated: float


#: the least requests, with a first and a last token, a fit from requests needs
MIN_REQUESTS = 20
#: quantiles of the per-request overhead kept in a fit
OVERHEAD_QUANTILES = 20
#: the overhead only from requests sent once the fit's first request had its first
#: token: llama-server (default ``--cache-idle-slots``) copies every idle slot whose
#: prompt is not in its host cache yet at the next launch, so a load's first requests
#: wait for copies (about 15 ms a slot on the H100 sweep) that no client adds and
#: that another slot count or another start state would not repeat. Chosen on the
#: warmed H100 sweep (in-sample there: TTFT P50 86%, P95 89.7% inside) and held out on
#: its repeat recording (P50 81% -> 87%, P95 74% -> 89.7%): on (docs/advise.md, "The
#: repeat recording"); ``bench_whatif.py calibrate --no-overhead-after-start`` turns it
#: off. Only fits from client records (:func:`fit_requests`) read it
OVERHEAD_AFTER_START = True
#: the overhead net of the step in flight when a request was sent: the replay holds an
#: arrival until the step running at its arrival ends, so a measured TTFT's wait for
#: that step (half the step ``a + k x decoding`` on the mean, nothing on an idle
#: worker) is the replay's, not the client's. Taken into the overhead it was counted
#: twice, by the most where the fit's steps were longest: a busy fit then put a light
#: load's first tokens above what they measured. Not tuned (the half is an arrival's
#: mean place in a step); on the three warmed H100 recordings TTFT P50 went from
#: 101/117, 102/117, 99/114 to 104, 106 and 103 inside, P95 and throughput unchanged
#: (docs/advise.md, "The step in flight"). Only fits from client records read it
OVERHEAD_NET_OF_STEP_IN_FLIGHT = True
#: the overhead net of the other prompts prefilled in the request's first step (those
#: whose first token came within half that step of its own): the replay puts every
#: prompt that starts in a step into that step's time, so their cost is the replay's, not
#: the client's; left in, it was counted twice, most where prompts came closest together
#: (a busy fit), and a busy fit put a light load's first tokens above what they measured.
#: Not tuned (half a step either side: the first tokens of one step). Only fits from
#: client records read it (docs/advise.md, "The prompts of the first step")
OVERHEAD_NET_OF_SHARED_PREFILL = True
#: the overhead's part that goes with the request's own prompt, fitted (least squares
#: over the requests the overhead is taken from) and replayed per request instead of
#: drawn at random: the step fit's prompt cost ``p`` rests on decode spans and moves
#: from 0 to 113 us a token between runs of one server, while a first token's cost at a
#: free slot grows -19 to +35 us a token; drawn at random, the overhead of a short
#: prompt lands on a long one. Never below ``-p`` (a longer prompt never makes the first
#: token cheaper). Only fits from client records read it (same section)
OVERHEAD_PER_PROMPT = True
#: the band's fast end takes the prompt cost at the low end of its resampled fits
#: (``p_lo``), a request's own first token kept at what it cost. ``p`` rests on the
#: decode spans, and what a span's prompts seem to cost there is their prefill and
#: more: llama-server does work of its own at each launch, and a span that ran long for
#: any reason saw more arrivals in it. It is the least settled of the fit's three costs:
#: 0 to 142 us a token from run to run of one H100 server (the settled recording),
#: where a first token grew -2 to 44 us a token of its own prompt. Kept at ``p``, a fit
#: with a dear one made another setting's light load wait for prefills dearer than they
#: were there. The slow end keeps ``p``: the refits' high end there put two more TTFT
#: figures inside over the ten recorded sweeps and widened nine sweeps' TTFT bands.
#: Only fits from client records are resampled (docs/advise.md, "The prompt cost's low
#: end")
BAND_PROMPT_COST = True
#: below the batch a fitted step rests on (``b_ref``), within the batches seen, the band
#: also takes the step in proportion to the batch through the step at ``b_ref``
#: (:func:`under_ref_fits`): a fit of a 64-slot server at 9.1 requests/s (batches
#: 3.2-22.6, 5.62 ms + 0.192 ms a sequence) put 8- and 16-slot light runs' steps at
#: 6.4 ms where those runs' own fits said 3-4 ms, and missed 9 of their P95s below the
#: band. Chosen after reading the sixth H100 recording (docs/advise.md, "The sixth
#: recording")
BAND_UNDER_REF = True


def _gram(
    rows: Sequence[Sequence[float]], ys: Sequence[float], weights: Sequence[float] | None = None
) -> tuple[list[list[float]], list[float], float]:
    """X'WX, X'Wy and y'Wy of weighted rows."""
    n = len(rows[0])
    w = weights or [1.0] * len(rows)
    g = [[0.0] * n for _ in range(n)]
    v = [0.0] * n
    yy = 0.0
    for r, y, wt in zip(rows, ys, w, strict=True):
        if not wt:
            continue
        for i in range(n):
            ri = r[i] * wt
            v[i] += ri * y
            for j in range(i, n):
                g[i][j] += ri * r[j]
        yy += wt * y * y
    for i in range(n):
        for j in range(i):
            g[i][j] = g[j][i]
    return g, v, yy


def _nnls_gram(g: list[list[float]], v: list[float], yy: float) -> list[float]:
    """Non-negative least squares from the normal equations: the best all-positive subset."""
    n = len(v)
    best: tuple[float, list[float]] | None = None
    for size in range(n, 0, -1):
        for cols in itertools.combinations(range(n), size):
            sub_rows = [[g[i][j] for j in cols] for i in cols]
            sol = _solve_square(sub_rows, [v[i] for i in cols])
            if sol is None or any(x < 0 for x in sol):
                continue
            coef = [0.0] * n
            for c, x in zip(cols, sol, strict=True):
                coef[c] = x
            err = (
                yy
                - 2 * sum(c * x for c, x in zip(coef, v, strict=True))
                + sum(coef[i] * g[i][j] * coef[j] for i in range(n) for j in range(n))
            )
            if best is None or err < best[0] - 1e-15 * max(yy, 1e-30):
                best = (err, coef)
    return best[1] if best else [0.0] * n


def _solve_square(m: list[list[float]], v: list[float]) -> list[float] | None:
    """m x = v by Gaussian elimination; None if singular."""
    n = len(v)
    m = [row[:] for row in m]
    v = v[:]
    scale = max(abs(m[i][i]) for i in range(n)) or 1.0
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
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


def fit_requests(requests: Sequence[Request], slots: int, compute_bound: bool = False) -> StepFit:
    """The step curve and the per-request overhead from the clients' own records.

    Each request's decode (first token to last) took ``generated - 1`` steps; the
    requests decoding beside it (time-weighted over its decode) give the batch, the
    prompts of requests whose first token came meanwhile the prefill done in its steps:
    ``decode time = a x steps + k x steps x batch + p x prompt tokens``, one row per
    request, so a lightly loaded run (a batch from 1 up) fits as well as a busy one,
    and a run mixing prompt lengths tells ``p`` from ``a``. A request that came to a free
    slot waited for nothing: what its client adds to the TTFT is its overhead
    (:func:`client_overhead`).
    """
    rs = [r for r in requests if r.ttft > 0 and r.e2e > r.ttft and r.generated >= 2]
    if len(rs) < MIN_REQUESTS:
        raise NotEnough(
            f"{len(rs)} request(s) with a first and a last token, {MIN_REQUESTS} needed: "
            "observe the worker longer, while it serves"
        )
    first = [r.sent + r.ttft for r in rs]
    last = [r.sent + r.e2e for r in rs]
    rows, ys, batch = [], [], []
    for i, r in enumerate(rs):
        span = last[i] - first[i]
        overlap = sum(
            max(0.0, min(last[i], last[j]) - max(first[i], first[j])) for j in range(len(rs))
        )
        b = overlap / span
        prompt = sum(
            rs[j].prompt for j in range(len(rs)) if j != i and first[i] < first[j] < last[i]
        )
        steps = r.generated - 1
        rows.append([steps, steps * b, prompt])
        ys.append(span)
        batch.append(b)
    b_min, b_max = min(batch), max(batch)
    total_steps = sum(row[0] for row in rows)
    b_ref = sum(row[1] for row in rows) / total_steps
    g, v, yy = _gram(rows, ys)
    if b_max / b_min >= SPREAD_FOR_SLOPE:
        a, k, p = _nnls_gram(g, v, yy)
        source = "fitted (client records)"
    else:
        s0, p = _nnls_gram(*_gram([[row[0], row[2]] for row in rows], ys))
        if s0 <= 0:
            raise NotEnough("no decode step time in the records: observe the worker longer")
        k = 0.9 * s0 / b_ref if compute_bound else min(p, 0.9 * s0 / b_ref)
        a = s0 - k * b_ref
        source = "assumed k = p (observed batch sizes span too little to fit it; client records)"
    if a <= 0 and k <= 0:
        raise NotEnough("the decode times do not fit a + k x batch: observe a steadier load")
    pred = [a * row[0] + k * row[1] + p * row[2] for row in rows]
    resid = math.sqrt(sum((y - q) ** 2 for y, q in zip(ys, pred, strict=True)) / len(ys))
    # resampled fits (seeded): the slope's range and the step time's at b_ref
    rng = random.Random(0)
    ks, ps, speeds = [], [], []
    base = a + k * b_ref
    for _ in range(BOOTSTRAP):
        w = [0.0] * len(rows)
        for _ in rows:
            w[rng.randrange(len(rows))] += 1.0
        if source.startswith("fitted"):
            a_, k_, p_ = _nnls_gram(*_gram(rows, ys, w))
        else:
            s_, p_ = _nnls_gram(*_gram([[row[0], row[2]] for row in rows], ys, w))
            a_, k_ = s_ - k * b_ref, k
        ks.append(k_)
        ps.append(p_)
        speeds.append((a_ + k_ * b_ref) / base if base > 0 else 1.0)
    if source.startswith("fitted"):
        k_lo = min(k, quantile(ks, BOOTSTRAP_TAIL))
        k_hi = max(k, quantile(ks, 1 - BOOTSTRAP_TAIL))
    else:
        k_lo, k_hi = 0.0, max(k, 0.95 * base / b_ref)
    overhead, per_prompt, prompt_ref = client_overhead(rs, slots, a, k, p)
    return StepFit(
        a, k, p, source, b_min, b_max, len(rs), resid / (sum(ys) / len(ys)),
        k_lo=k_lo, k_hi=k_hi, b_ref=b_ref, overhead=overhead,
        overhead_per_prompt=per_prompt, prompt_ref=prompt_ref,
        speed_lo=min(1.0, quantile(speeds, BOOTSTRAP_TAIL)),
        speed_hi=max(1.0, quantile(speeds, 1 - BOOTSTRAP_TAIL)),
        p_lo=min(p, quantile(ps, BOOTSTRAP_TAIL)),
    )  # fmt: skip


def client_overhead(
    requests: Sequence[Request], slots: int, a: float, k: float, p: float
) -> tuple[tuple[float, ...], float, float]:
    """What each client adds to its TTFT, from the requests that came to a free slot, as
    (quantiles, seconds per prompt token of its own, the prompt the quantiles are at).

    A request's overhead is its TTFT less its first step (``a + k x decoding + p x its
    prompt``, and ``p x`` the other prompts whose first tokens came within half that step:
    the replay puts them in that step too) and less half the step in flight when it was
    sent (the replay's wait for it). Its part that goes with the request's own prompt is
    fitted (least squares, never below ``-p``) and taken out of the quantiles. Requests
    sent before the first one's first token are left out. The ``OVERHEAD_*`` settings
    above turn each part off.
    """
    rs = list(requests)
    first = [r.sent + r.ttft for r in rs]
    last = [r.sent + r.e2e for r in rs]
    start = first[min(range(len(rs)), key=lambda i: rs[i].sent)] if rs else 0.0
    extra, prompts = [], []
    for i, r in enumerate(rs):
        if OVERHEAD_AFTER_START and r.sent < start:
            continue
        open_ = sum(1 for j in range(len(rs)) if j != i and rs[j].sent <= r.sent < last[j])
        if open_ >= slots:
            continue
        decoding = sum(1 for j in range(len(rs)) if j != i and first[j] <= r.sent < last[j])
        step = a + k * decoding  # the step running at its send, decoding without it
        in_flight = 0.5 * step if OVERHEAD_NET_OF_STEP_IN_FLIGHT and decoding else 0.0
        own_step = step + p * r.prompt
        shared = p * sum(
            rs[j].prompt for j in range(len(rs))
            if j != i and abs(first[j] - first[i]) < 0.5 * own_step
        ) if OVERHEAD_NET_OF_SHARED_PREFILL else 0.0  # fmt: skip
        extra.append(r.ttft - own_step - shared - in_flight)
        prompts.append(r.prompt)
    per_prompt = prompt_ref = 0.0
    if OVERHEAD_PER_PROMPT and len(set(prompts)) > 1:
        prompt_ref = sum(prompts) / len(prompts)
        per_prompt = max(-p, statistics.linear_regression(prompts, extra).slope)
        extra = [e - per_prompt * (x - prompt_ref) for x, e in zip(prompts, extra, strict=True)]
    quantiles = tuple(
        quantile(extra, (q + 0.5) / OVERHEAD_QUANTILES) for q in range(OVERHEAD_QUANTILES)
    ) if extra else ()  # fmt: skip
    return quantiles, per_prompt, prompt_ref


#: the band's speed: the step times scaled by 1 -/+ BAND_Z x the fit's residual (the
#: spread of the windows' step times about the fit: a later stretch of serving runs as
#: much faster or slower as the windows did), the residual taken as SPEED_FLOOR at least.
#: BAND_Z is the least of 1.5, 2, 2.5, 3 that puts 90% of the held-out runs of the
#: recorded sweeps inside their band for throughput and TTFT P50 and P95 (docs/advise.md,
#: "Calibration"; tests/unit/test_whatif_calibration.py)
BAND_Z = 2.5
SPEED_FLOOR = 0.10
#: a fit from client records (:func:`fit_requests`): the speed's standard deviation is
#: its resampled fits' (5th-95th percentile / 3.29), taken as RUN_SPEED_FLOOR at least
#: (another run, another server process: its speed moves more than one fit's samples say)
RUN_SPEED_FLOOR = 0.14


def speed_spread(fit: StepFit, z: float = BAND_Z) -> float:
    """How far the band's ends scale the step time (and the overhead), each way."""
    if fit.speed_lo is not None and fit.speed_hi is not None:
        return z * max((fit.speed_hi - fit.speed_lo) / 3.29, RUN_SPEED_FLOOR)
    return z * max(fit.residual, SPEED_FLOOR)


def band_fits(fit: StepFit, z: float = BAND_Z) -> list[StepFit]:
    """The fits at the corners of the fit's uncertainty: each end of the slope's range
    (the step time at ``b_ref`` kept) at each end of the speed's range, the prompt cost
    at the fast end its low end (:func:`prompt_costs`)."""
    k_lo = fit.k if fit.k_lo is None else fit.k_lo
    k_hi = fit.k if fit.k_hi is None else fit.k_hi
    prompt = prompt_costs(fit)
    return [
        f
        for k in sorted({k_lo, k_hi})
        for f in _at_speeds(fit, max(0.0, fit.a + (fit.k - k) * fit.b_ref), k, z, prompt)
    ]


def prompt_costs(fit: StepFit) -> tuple[float, float]:
    """The prompt cost at the band's fast and slow ends (:data:`BAND_PROMPT_COST`): the
    resampled fits' low end at the fast one where the overhead's part that goes with a
    request's own prompt was fitted (without it the cost taken off the steps could not be
    given back to the request's own first token), else ``p``; ``p`` at the slow one."""
    if BAND_PROMPT_COST and fit.p_lo is not None and fit.prompt_ref > 0:
        return fit.p_lo, fit.p
    return fit.p, fit.p


def below_fits(fit: StepFit, slots: float, z: float = BAND_Z) -> list[StepFit]:
    """The band's further corners for a slot count below the smallest batch the fit saw.

    There the replay steps only at batches the fit never saw, and the fixed cost ``a`` is
    the intercept of a line drawn through larger batches: a step bent below them (a
    curve flat from some batch on, as a GPU's often is) fits those batches as well.
    What the fit does say is the step at its smallest batch; a step costs no less per
    sequence at a smaller batch (batching never makes a sequence's share dearer), so
    below it the step lies between flat and in proportion to the batch. The fitted line
    (its fixed cost ``a``) runs flatter than proportional, the slope's range flatter
    still; the proportional end (the step at the smallest batch, scaled down with the
    batch) is added here, at each end of the speed's range. A fitted line whose fixed
    cost came out at zero is the proportional end itself and leaves the flat side
    unbounded: :func:`whatif.predict` refuses those below the batches seen.
    None where ``slots`` is within or above the batches seen.
    """
    if not 0 < slots < fit.batch_min:
        return []
    return _proportional_through(fit, fit.batch_min, z)


def under_ref_fits(fit: StepFit, slots: float, z: float = BAND_Z) -> list[StepFit]:
    """The band's further corners for a slot count within the batches the fit saw but
    below ``b_ref``, the batch its step time rests on (:data:`BAND_UNDER_REF`).

    The fitted line is least squares over batches weighted toward ``b_ref``; below it a
    step can cost less than the line says (the busy windows' larger batches carried
    longer contexts, and a server with many slots does more at each launch), and the
    same bound as below the batches holds: a sequence's share of a step is no dearer at a
    smaller batch. So the step in proportion to the batch through the step at ``b_ref``
    is added, at each end of the speed's range. None outside that range."""
    if not (BAND_UNDER_REF and fit.batch_min <= slots < fit.b_ref):
        return []
    return _proportional_through(fit, fit.b_ref, z)


def _proportional_through(fit: StepFit, batch: float, z: float) -> list[StepFit]:
    """The step in proportion to the batch through the fitted step at ``batch`` (no fixed
    cost), at each end of the speed's range: the cheapest a smaller batch's step can be,
    a sequence's share being no dearer at a smaller batch."""
    return _at_speeds(fit, 0.0, fit.step(batch) / batch, z)


def _at_speeds(
    fit: StepFit, a: float, k: float, z: float, prompt: tuple[float, float] | None = None
) -> list[StepFit]:
    """The step ``a + k x batch + p x prompt`` at each end of the speed's range, ``p`` the
    fit's or ``prompt``'s (the fast end's, the slow end's). A prompt cost other than the
    fit's moves the difference from the step to the overhead (at the overhead's prompt
    and per token of the request's own), so a request's own first token costs what it
    did; what changes is what the others' prompts cost the steps they share."""
    spread = speed_spread(fit, z)
    ends = zip((max(0.05, 1 - spread), 1 + spread), prompt or (fit.p, fit.p), strict=True)
    return [
        replace(
            fit, a=a * scale, k=k * scale, p=p * scale,
            overhead=tuple((o + (fit.p - p) * fit.prompt_ref) * scale for o in fit.overhead),
            overhead_per_prompt=(fit.overhead_per_prompt + fit.p - p) * scale,
        )
        for scale, p in ends
    ]  # fmt: skip


def quantile_interval(values: Sequence[float], q: float, z: float = BAND_Z) -> tuple[float, float]:
    """The distribution-free confidence interval of the ``q``-quantile of what ``values``
    are a sample of: the order statistics at the ranks where Binomial(n, q) leaves at
    most the normal tail beyond ``z`` on each side (the k-th smallest of n lies below
    the quantile with the chance that k or more of n draws do). A quantile measured over
    n requests moves that much from one set of n to another; where no rank leaves so
    little (few values, an extreme q) the smallest or largest value is the end.
    """
    s = sorted(values)
    n = len(s)
    if not n:
        return math.nan, math.nan
    tail = 0.5 * math.erfc(z / math.sqrt(2))
    if q <= 0 or q >= 1:
        return s[0], s[-1]
    # Binomial(n, q) cumulative distribution, from the log probabilities
    log_q, log_r = math.log(q), math.log1p(-q)
    cdf, below = [], 0.0
    for j in range(n + 1):
        below += math.exp(
            math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
            + j * log_q + (n - j) * log_r
        )  # fmt: skip
        cdf.append(below)
    # the lowest end: the largest rank l with P(B <= l - 1) <= tail (1-based ranks)
    lo = max((j for j in range(1, n + 1) if cdf[j - 1] <= tail), default=1)
    # the highest end: the smallest rank u with P(B >= u) = 1 - P(B <= u - 1) <= tail
    hi = min((j for j in range(1, n + 1) if 1 - cdf[j - 1] <= tail), default=n)
    return s[lo - 1], s[hi - 1]


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
    #: the span throughput is counted over; the mean answer time from its send, and from
    #: its admission to a slot, to its last token
    window: float = 0.0
    e2e_mean: float = 0.0
    service_mean: float = 0.0
    #: TTFT P50 and P95's sampling intervals over the requests replayed
    #: (:func:`quantile_interval` at ``simulate``'s ``interval_z``; None: not asked)
    ttft_p50_interval: tuple[float, float] | None = None
    ttft_p95_interval: tuple[float, float] | None = None

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
    interval_z: float | None = None,
) -> Outcome:
    """Replay ``load`` (or the given arrival times) on one replica of ``setting``;
    ``interval_z``: give TTFT P50 and P95's sampling intervals at that z as well."""
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
    # each arrival's own prompt where the replayed load gives them
    prompts = (
        [max(1.0, float(x)) for x in load.prompts]
        if arrivals is not None and len(load.prompts) == len(times)
        else [float(prompt)] * len(times)
    )
    over = random.Random(seed + 1000)
    overhead = list(fit.overhead)
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
    # active: [arrival, prompt left, output left, admitted at, its prompt]
    active: list[list[float]] = []
    ttfts: list[float] = []
    e2es: list[float] = []
    services: list[float] = []
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
            n, arrived = waiting.popleft()
            active.append([arrived, prompts[n], float(output), t, prompts[n]])
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
            own = fit.overhead_per_prompt * (s[4] - fit.prompt_ref)
            extra = overhead[over.randrange(len(overhead))] + own if overhead else 0.0
            ttfts.append(t - s[0] + extra)
            s[2] -= 1
            generated += 1
        done = [s for s in active if s[2] <= 0]
        if done:
            e2es.extend(t - s[0] for s in done)
            services.extend(t - s[3] for s in done)
            last_done = t
            active = [s for s in active if s[2] > 0]
    end = max(last_done, load.span) or 1.0
    intervals = {} if interval_z is None else {
        q: quantile_interval(ttfts, q, interval_z) for q in (0.5, 0.95)
    }  # fmt: skip
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
        window=window or 1.0,
        e2e_mean=sum(e2es) / len(e2es) if e2es else 0.0,
        service_mean=sum(services) / len(services) if services else 0.0,
        ttft_p50_interval=intervals[0.5] if intervals else None,
        ttft_p95_interval=intervals[0.95] if intervals else None,
    )
