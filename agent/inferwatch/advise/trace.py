"""Traces of a serving run, for the what-if twin's validation (docs/advise.md).

The format, its reader and its writers are :mod:`inferwatch.traces`; here a trace
read gives the agent's expositions parsed (:meth:`Trace.scrapes`), and the
twin is fitted on traces and held to what their clients measured.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from inferwatch import traces
from inferwatch.advise.agent import Scrape, parse_exposition
from inferwatch.advise.twin import BAND_Z, MIN_REQUESTS, NotEnough, Request, fit_requests, quantile
from inferwatch.advise.whatif import check_fit, observe, predict
from inferwatch.errors import ConfigError

#: the writers, for the recorders (tests/support/tracerun.py)
write_header = traces.write_header
write_record = traces.write_record


class Trace(traces.Trace):
    """A trace whose agent expositions advise reads as :class:`Scrape` samples."""

    def scrapes(
        self, start: float | None = None, end: float | None = None
    ) -> list[tuple[float, Scrape]]:
        """The agent's expositions between ``start`` and ``end``, parsed."""
        return [(t, parse_exposition(text)) for t, text in self.agent_between(start, end)]


def read_trace(path: str | Path) -> Trace:
    return traces.read_into(path, Trace)


@dataclass(frozen=True)
class Measured:
    """What the clients saw over a phase."""

    requests: int
    failed: int
    throughput: float  # generated tokens / s, from the first send to the last answer
    ttft_p50: float
    ttft_p95: float
    prompt_tokens: float
    gen_tokens: float
    duration: float


def measured(records: Iterable[tuple[float, Mapping[str, Any]]]) -> Measured:
    every = list(records)
    ok = [(t, r) for t, r in every if r.get("ok")]
    failed = len(every) - len(ok)
    if not ok:
        return Measured(0, failed, 0.0, float("nan"), float("nan"), 0.0, 0.0, 0.0)
    first = min(t for t, _ in ok)
    last = max(t + float(r["e2e_s"]) for t, r in ok)
    gen = sum(float(r["gen_tokens"]) for _, r in ok)
    ttfts = [float(r["ttft_s"]) for _, r in ok]
    return Measured(
        requests=len(ok),
        failed=failed,
        throughput=gen / max(last - first, 1e-9),
        ttft_p50=quantile(ttfts, 0.5),
        ttft_p95=quantile(ttfts, 0.95),
        prompt_tokens=sum(float(r["prompt_tokens"]) for _, r in ok) / len(ok),
        gen_tokens=gen / len(ok),
        duration=last - first,
    )


# --------------------------------------------------------------------------- validation

#: the issue's targets: throughput and TTFT P50 within 15 %, P95 within 25 %
TARGET = {"throughput": 0.15, "ttft_p50": 0.15, "ttft_p95": 0.25}


def load_phase(trace: Trace) -> tuple[float, float]:
    """The phase named "load", else the trace's first phase."""
    names = [p.get("name") for p in trace.header.get("phases") or []]
    return trace.phase("load" if "load" in names else None)


def _clients(trace: Trace, start: float, end: float) -> list[tuple[float, dict[str, Any]]]:
    """The client records sent between ``start`` (less a second) and ``end``."""
    return [(t, r) for t, r in trace.client if start - 1 <= t <= end]


def _sent(clients: Iterable[tuple[float, Mapping[str, Any]]]) -> list[tuple[float, Any]]:
    """The client records whose send time is known, in send order: the replay's arrivals.

    A request the recorder gave up on at the end of its drain (``"cancelled": true``) is
    written when it gave up, with no answer time to count back from, so its ``t`` is not
    a send. Those are the last requests sent to a server answering in order, and none was
    answered: leaving them out changes no answered request's wait in the replay, and the
    measured figures are the answered requests' too. Replayed at the give-up time instead,
    they arrived at an idle server and pulled a saturated run's replayed TTFT down.
    """
    return sorted(((t, r) for t, r in clients if not r.get("cancelled")), key=lambda c: c[0])


def _observe(trace: Trace, start: float, end: float) -> tuple[Any, list[tuple[float, Scrape]]]:
    """The observation of ``start``..``end``: the agent's samples over it and its drain,
    plus one before; answer lengths from the clients that succeeded."""
    ok = [r for _, r in _clients(trace, start, end) if r.get("ok")]
    out_tokens = sum(float(r["gen_tokens"]) for r in ok) / len(ok) if ok else None
    scrapes = trace.scrapes(start - trace.header.get("scrape_interval_s", 1.0) * 1.5, end + 1)
    return observe(scrapes, None, out_tokens), scrapes


def requests_of(clients: Iterable[tuple[float, Mapping[str, Any]]]) -> list[Request]:
    """The client records that answered, as the twin's :class:`Request` (send time first)."""
    out = []
    for t, r in clients:
        vals = [r.get(k) for k in ("ttft_s", "e2e_s", "prompt_tokens", "gen_tokens")]
        if r.get("ok") and all(isinstance(v, (int, float)) for v in vals):
            ttft, e2e, prompt, gen = (float(v) for v in vals)  # type: ignore[arg-type]
            out.append(Request(t, ttft, e2e, prompt, gen))
    return out


#: what a trace's fit rests on: "clients" (the per-request client records, where the
#: load phase has MIN_REQUESTS of them; else the agent's samples) or "agent" (its samples)
FIT_FROM = "clients"


def fit_trace(trace: Trace, fit_from: str = FIT_FROM) -> tuple[Any, Any, list[float]]:
    """The observation and fit of a trace's load phase, and its send times (from 0)."""
    start, end = load_phase(trace)
    obs, scrapes = _observe(trace, start, end)
    # the clients' own first-token times (streamed), else the agent's samples
    streamed = (trace.header.get("load") or {}).get("stream", True) is not False
    reqs = requests_of(_clients(trace, start, end)) if fit_from == "clients" and streamed else []
    if len(reqs) >= MIN_REQUESTS:
        fit = fit_requests(reqs, trace.slots(), compute_bound=obs.cpu)
    else:
        fit = obs.fit()
    sends = [t - scrapes[0][0] for t, _ in _sent(_clients(trace, start, end))]
    return obs, fit, sends


def compare(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Fit on every trace, predict every trace's slot count: one row per pair."""
    traces = sorted((read_trace(p) for p in paths), key=lambda t: t.slots())
    rows = []
    fits = {}
    for tr in traces:
        try:
            fits[tr.slots()] = fit_trace(tr)
        except NotEnough as exc:
            print(f"{tr.path}: not fitted: {exc}", file=sys.stderr)
    for tr in traces:
        meas = measured(_clients(tr, *load_phase(tr)))
        for slots, (obs, fit, sends) in fits.items():
            row: dict[str, Any] = {
                "fit_slots": slots,
                "slots": tr.slots(),
                "measured": _measured_row(meas),
            }
            _predict_into(row, obs, fit, sends)
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- one fit, other runs


def whole_span(trace: Trace) -> tuple[float, float]:
    """From the first phase's start to the last phase's end."""
    phases = trace.header.get("phases") or []
    if not phases:
        raise ConfigError(trace.path, "phases", "a phase")
    return min(float(p["start"]) for p in phases), max(float(p["end"]) for p in phases)


def fit_whole(trace: Trace) -> tuple[Any, Any]:
    """The observation and fit of a whole trace (every phase: idle, steady, overload)."""
    obs, _ = _observe(trace, *whole_span(trace))
    return obs, obs.fit()


def predict_runs(fit_path: str | Path, paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Fit the twin on one whole trace; predict every other trace's slot count under
    that trace's own recorded load (its clients' send times, prompt and answer lengths)."""
    source = read_trace(fit_path)
    obs, fit = fit_whole(source)
    rows = []
    for tr in sorted((read_trace(p) for p in paths), key=lambda t: t.slots()):
        row = {"fit_trace": source.path, "fit_slots": source.slots(), **_held_out(obs, fit, tr)}
        rows.append(row)
    return rows


def _held_out(obs: Any, fit: Any, tr: Trace, band_z: float | None = None) -> dict[str, Any]:
    """The fit's answer for ``tr``'s slot count under ``tr``'s own recorded load."""
    clients = _clients(tr, *load_phase(tr))
    meas = measured(clients)
    row: dict[str, Any] = {"trace": tr.path, "slots": tr.slots(), "measured": _measured_row(meas)}
    ordered = _sent(clients)
    sends = [t for t, _ in ordered]
    if not sends or meas.requests == 0:
        row["refused"] = "no client records in the load phase"
        return row
    arrivals = [t - sends[0] for t in sends]
    there = replace(
        obs,
        load=replace(
            obs.load,
            prompt_tokens=meas.prompt_tokens,
            output_tokens=meas.gen_tokens,
            span=arrivals[-1] or obs.load.span,
            arrival_rate=len(arrivals) / (arrivals[-1] or 1.0),
            prompts=tuple(
                float(r["prompt_tokens"])
                if isinstance(r.get("prompt_tokens"), (int, float))
                else meas.prompt_tokens
                for _, r in ordered
            ),
        ),
    )
    _predict_into(row, there, fit, arrivals, band_z)
    return row


# --------------------------------------------------------------------------- calibration


def offered(trace: Trace) -> float | None:
    """The offered load a sweep run states (requests a second), else None."""
    load = trace.header.get("load") or {}
    rate = load.get("rate_per_s")
    return float(rate) if rate is not None else None


def calibrate(
    paths: Iterable[str | Path], band_z: float | None = None, fit_from: str = FIT_FROM
) -> dict[str, Any]:
    """Fit the twin on each run's load phase and predict every other run (its slot count,
    under its own recorded load); how often the measured figures fall in the band.

    Returns ``{"fits": [...], "rows": [...], "summary": {figure: {...}}}``: per fit its
    step curve and whether it reproduces its own run (:func:`whatif.check_fit`, the
    clients' TTFT taken as observed, as the measuring proxy would give it); per held-out
    pair the measured, predicted and band figures; per figure the pairs judged, the
    share inside the band, the median width (high / low) and the median |point error|.
    """
    traces = [read_trace(p) for p in paths]
    fits: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for src in traces:
        about = {"trace": _name(src), "slots": src.slots(), "rate": offered(src)}
        try:
            obs, fit, sends = fit_trace(src, fit_from)
        except NotEnough as exc:
            fits.append({**about, "refused": str(exc)})
            continue
        meas = measured(_clients(src, *load_phase(src)))
        own = predict(obs, "max-num-seqs", src.slots(), fit, arrivals=sends)
        assert own.current_band is not None
        trust = check_fit(
            fit,
            own.current,
            own.current_band,
            {"throughput": meas.throughput, "ttft_p50": meas.ttft_p50, "ttft_p95": meas.ttft_p95},
        )
        fits.append({**about, "fit": _fit_row(fit), "trusted": trust.trusted,
                     "problems": trust.problems})  # fmt: skip
        for tr in traces:
            if tr is src:
                continue
            row = _held_out(obs, fit, tr, band_z)
            row.update(
                fit_trace=about["trace"], fit_slots=src.slots(), fit_rate=about["rate"],
                fit_trusted=trust.trusted, trace=_name(tr), rate=offered(tr),
            )  # fmt: skip
            rows.append(row)
    return {"fits": fits, "rows": rows, "summary": calibration_summary(rows)}


def _name(trace: Trace) -> str:
    """A trace's folder and file name (sweeps name their runs alike in several folders)."""
    path = Path(trace.path)
    return f"{path.parent.name}/{path.name}"


def band_range(row: Mapping[str, Any], key: str) -> tuple[float, float]:
    """An answered held-out pair's band for figure ``key``, low to high."""
    lo, hi = sorted((row["band"][0][key], row["band"][1][key]))
    return lo, hi


def calibration_summary(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Per figure: held-out pairs judged, the share inside the band, the band's median
    width (high / low), the median and largest |point error|; and the pairs refused."""
    rows = list(rows)
    out: dict[str, Any] = {}
    for key in TARGET:
        inside, widths, errs = [], [], []
        for r in rows:
            if "band" not in r or key not in r.get("error", {}):
                continue
            lo, hi = band_range(r, key)
            m = r["measured"][key]
            inside.append(lo <= m <= hi)
            widths.append(hi / lo if lo > 0 else math.inf)
            errs.append(abs(r["error"][key]))
        out[key] = {
            "pairs": len(inside),
            "inside": sum(inside),
            "inside_share": sum(inside) / len(inside) if inside else math.nan,
            "width_median": quantile(widths, 0.5),
            "error_median": quantile(errs, 0.5),
            "error_max": max(errs) if errs else math.nan,
        }
    out["refused"] = sum(1 for r in rows if "refused" in r)
    return out


def _predict_into(
    row: dict[str, Any], obs: Any, fit: Any, arrivals: list[float], band_z: float | None = None
) -> None:
    """The twin's answer for the row's slot count under ``arrivals``, or why it refused."""
    try:
        pred = predict(
            obs, "max-num-seqs", row["slots"], fit, arrivals=arrivals,
            band_z=BAND_Z if band_z is None else band_z,
        )  # fmt: skip
    except NotEnough as exc:
        row["refused"] = str(exc).split(": ", 1)[-1]
        return
    _fill(row, pred, fit)


def _figures(of: Any, *names: str) -> dict[str, Any]:
    """The figures a row compares (``TARGET``'s), then ``names``, read off ``of``."""
    return {k: getattr(of, k) for k in (*TARGET, *names)}


def _measured_row(meas: Measured) -> dict[str, Any]:
    return _figures(meas, "requests", "failed")


def _fill(row: dict[str, Any], pred: Any, fit: Any) -> None:
    """A prediction's figures, its error against the measured ones, the range, the fit."""
    row["predicted"] = _figures(pred.new)
    row["error"] = {
        k: (row["predicted"][k] - row["measured"][k]) / row["measured"][k]
        for k in TARGET
        if row["measured"][k] and not math.isnan(row["measured"][k])
    }
    row["extrapolated"] = pred.range_note.startswith("extrapolated")
    if pred.band is not None:
        row["band"] = [_figures(b) for b in pred.band]
    row["fit"] = _fit_row(fit)


def _fit_row(fit: Any) -> dict[str, Any]:
    return {
        "a_ms": fit.a * 1e3,
        "k_ms": fit.k * 1e3,
        "k_range_ms": [fit.k_lo * 1e3, fit.k_hi * 1e3] if fit.k_lo is not None else None,
        "p_us": fit.p * 1e6,
        "p_low_us": fit.p_lo * 1e6 if fit.p_lo is not None else None,
        "k_source": fit.k_source,
        "batch": [fit.batch_min, fit.batch_max],
        "residual": fit.residual,
        "overhead_ms": quantile(fit.overhead, 0.5) * 1e3 if fit.overhead else None,
        "overhead_us_per_prompt": fit.overhead_per_prompt * 1e6,
    }
