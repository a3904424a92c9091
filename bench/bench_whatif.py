"""The what-if twin against a real engine: predicted vs measured across slot counts.

``record``: runs the real ``llama-server`` (CPU build under ``.llama-server/``) at
each ``--parallel`` value under the same open-loop Poisson load and writes one trace
per slot count (docs/advise.md, "Traces"). ``table``: for every trace, fits the twin
on its agent samples and predicts every other trace's slot count under the same
load (the fit run's own send times), then prints predicted vs measured throughput
and client-side TTFT P50 / P95 with the error in percent. The same code reads the
H200 sweep's traces (CUDA llama-server, ``--parallel`` 4..64).

    PYTHONPATH=agent:. python bench/bench_whatif.py record --slots 1 2 4 --out bench/data/whatif-cpu
    PYTHONPATH=agent python bench/bench_whatif.py table bench/data/whatif-cpu/*.jsonl.gz
    PYTHONPATH=agent python bench/bench_whatif.py predict --fit tests/data/traces/h200-llamacpp.jsonl.gz \
        tests/data/whatif/h200/sweep-s*.jsonl.gz

``diagnose``: per run, the clients' time per output token by the batch it decoded beside
(bins of the time-weighted batch: do servers with more slots step slower at one batch?)
and the TTFT of the requests that found a free slot against their prompt length (least
squares: the intercept is the overhead plus a step, the slope a prompt token's cost).

    PYTHONPATH=agent python bench/bench_whatif.py diagnose tests/data/whatif/h100-mix/*.jsonl.gz

``predict``: fits on one whole trace (every phase, e.g. the long H200 run with a steady
and an overload phase) and predicts each other trace's slot count under that trace's
own recorded load (its clients' send times, prompt and answer lengths).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from inferwatch.advise.trace import TARGET, compare, predict_runs


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'fit':>4} {'slots':>5} | {'thr pred':>9} {'meas':>8} {'err':>6} | "
        f"{'P50 pred':>8} {'meas':>7} {'err':>6} | {'P95 pred':>8} {'meas':>7} {'err':>6}"
    )
    for r in rows:
        m = r["measured"]
        head = f"{r['fit_slots']:>4} {r['slots']:>5} | "
        if "refused" in r:
            print(head + f"refused: {r['refused']}")
            continue
        p, e = r["predicted"], r["error"]

        def cell(k: str, unit: float, w: int, p: Any = p, m: Any = m, e: Any = e) -> str:
            return f"{p[k] * unit:>{w}.2f} {m[k] * unit:>7.2f} {e.get(k, math.nan) * 100:>+5.0f}%"

        mark = " (extrapolated)" if r.get("extrapolated") else ""
        if r.get("band"):
            lo, hi = r["band"]
            mark += (
                f" band: thr {lo['throughput']:.0f}..{hi['throughput']:.0f}, "
                f"P50 {lo['ttft_p50']:.2f}..{hi['ttft_p50']:.2f} s"
            )
        print(
            head
            + f"{cell('throughput', 1, 9)} | {cell('ttft_p50', 1, 8)} | {cell('ttft_p95', 1, 8)}{mark}"
        )
    # another run than the fit's (a run replayed from its own fit is not judged)
    judged = [
        r
        for r in rows
        if "error" in r
        and (r["trace"] != r["fit_trace"] if "fit_trace" in r else r["fit_slots"] != r["slots"])
    ]
    for k, limit in TARGET.items():
        errs = [abs(r["error"][k]) for r in judged if k in r["error"]]
        if errs:
            inside = sum(1 for x in errs if x <= limit)
            print(
                f"{k}: |error| median {sorted(errs)[len(errs) // 2] * 100:.0f}%, "
                f"max {max(errs) * 100:.0f}%, {inside}/{len(errs)} within {limit:.0%}"
            )


CAL_FIGURES = ("throughput", "ttft_p50", "ttft_p95")


#: the settings `calibrate` can turn off: flag -> (module of inferwatch.advise, what it does)
SETTINGS = {
    "overhead_after_start": ("twin", "a fit's client overhead only from requests sent after "
                             "its first first token (off: from every request)"),
    "overhead_net_of_shared_prefill": ("twin", "a fit's client overhead net of the other "
                                       "prompts of a request's first step"),
    "overhead_per_prompt": ("twin", "the overhead's part that goes with a request's own "
                            "prompt, fitted and replayed per request"),
    "band_prompt_cost": ("twin", "the band's fast end at the prompt cost's low end over "
                         "its refits (off: the fitted cost at both ends)"),
    "band_under_ref": ("twin", "below the batch a fitted step rests on, the band also "
                       "takes the step in proportion to the batch through it"),
    "resolution_from_admission": ("whatif", "the throughput band's resolution is one "
                                  "answer's time from its admission to a slot (off: from "
                                  "its send)"),
    "refuse_below_zero_fixed_cost": ("whatif", "refuse a fitted line whose fixed cost is "
                                     "zero below the batches it saw (off: answer them)"),
}  # fmt: skip


def run_calibrate(args: argparse.Namespace) -> int:
    from inferwatch.advise import twin, whatif
    from inferwatch.advise.trace import band_range, calibrate

    # the band's settings tried (module constants, read at each prediction)
    if args.floor is not None:
        twin.RUN_SPEED_FLOOR = args.floor
    whatif.TTFT_SAMPLING = args.sampling
    modules = {"twin": twin, "whatif": whatif}
    for flag, (module, _) in SETTINGS.items():
        if getattr(args, flag) is not None:
            setattr(modules[module], flag.upper(), getattr(args, flag))
    result = calibrate(args.traces, args.z, args.fit_from)
    for f in result["fits"]:
        head = f"fit {f['trace']} (slots {f['slots']}, rate {f['rate']}): "
        if "refused" in f:
            print(head + f"refused: {f['refused']}")
            continue
        fit = f["fit"]
        k_lo, k_hi = fit["k_range_ms"] or (fit["k_ms"], fit["k_ms"])
        print(
            head + f"step {fit['a_ms']:.2f} ms + {fit['k_ms']:.3f} ({k_lo:.3f}-{k_hi:.3f}) ms x seq"
            f" + {fit['p_us']:.1f} us x prompt, batch {fit['batch'][0]:.1f}-{fit['batch'][1]:.1f},"
            f" residual {fit['residual']:.0%}"
            + (
                ""
                if fit["overhead_ms"] is None
                else f", client overhead {fit['overhead_ms']:.1f} ms"
                f" {fit['overhead_us_per_prompt']:+.1f} us x own prompt"
            )
            + ("" if f["trusted"] else "  UNTRUSTED")
        )
        for problem in f["problems"]:
            print(f"    {problem}")
    lines = []
    for r in result["rows"]:
        base = [r["fit_trace"], r["trace"], r["slots"], r.get("rate")]
        if "refused" in r:
            lines.append([*base, "refused", r["refused"]])
            continue
        cells: list[Any] = []
        for k in CAL_FIGURES:
            lo, hi = band_range(r, k)
            m = r["measured"][k]
            cells += [m, r["predicted"][k], lo, hi, int(lo <= m <= hi)]
        lines.append([*base, "answered", "", *cells])
    summary = result["summary"]
    print(f"held-out pairs: {len(result['rows'])}, refused {summary['refused']}")
    for k in CAL_FIGURES:
        s = summary[k]
        print(
            f"{k}: {s['inside']}/{s['pairs']} inside the band ({s['inside_share']:.0%}), "
            f"median width x{s['width_median']:.2f} (high/low), |point error| median "
            f"{s['error_median']:.0%}, max {s['error_max']:.0%}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    if args.csv:
        import csv

        with open(args.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            cols = ["fit", "trace", "slots", "rate", "answer", "refused"]
            for k in CAL_FIGURES:
                cols += [f"{k}_{c}" for c in ("measured", "predicted", "low", "high", "inside")]
            w.writerow(cols)
            w.writerows(lines)
    return 0


#: batch bins (time-weighted sequences decoding beside a request) of ``diagnose``
BATCH_BINS = ((1.0, 2.0), (2.0, 3.0), (3.0, 4.5), (4.5, 8.0), (8.0, 12.0), (12.0, 20.0))


def run_diagnose(args: argparse.Namespace) -> int:
    from inferwatch.advise.trace import load_phase, read_trace, requests_of
    from inferwatch.advise.twin import quantile

    print("time per output token (ms, median; n requests) by the batch decoded beside it")
    print(f"{'run':<28}" + "".join(f"{f'{lo:g}-{hi:g}':>14}" for lo, hi in BATCH_BINS))
    lines = []
    for path in args.traces:
        tr = read_trace(path)
        start, end = load_phase(tr)
        rs = [
            r
            for r in requests_of((t, rec) for t, rec in tr.client if start - 1 <= t <= end)
            if r.ttft > 0 and r.e2e > r.ttft and r.generated >= 2
        ]
        first = [r.sent + r.ttft for r in rs]
        last = [r.sent + r.e2e for r in rs]
        tpot: dict[tuple[float, float], list[float]] = {b: [] for b in BATCH_BINS}
        free: list[tuple[float, float]] = []  # (prompt tokens, TTFT) at a free slot
        for i, r in enumerate(rs):
            span = last[i] - first[i]
            batch = (
                sum(
                    max(0.0, min(last[i], last[j]) - max(first[i], first[j]))
                    for j in range(len(rs))
                )
                / span
            )
            for lo, hi in BATCH_BINS:
                if lo <= batch < hi:
                    tpot[(lo, hi)].append(span / (r.generated - 1))
            open_ = sum(1 for j in range(len(rs)) if j != i and rs[j].sent <= r.sent < last[j])
            if open_ < tr.slots():
                free.append((r.prompt, r.ttft))
        name = f"{Path(path).parent.name}/{Path(path).name.removesuffix('.jsonl.gz')}"
        cells = "".join(
            f"{f'{quantile(v, 0.5) * 1e3:.2f} ({len(v)})' if v else '-':>14}" for v in tpot.values()
        )
        print(f"{name:<28}{cells}")
        if len(free) >= 3:
            mx = sum(x for x, _ in free) / len(free)
            my = sum(y for _, y in free) / len(free)
            sxx = sum((x - mx) ** 2 for x, _ in free)
            slope = sum((x - mx) * (y - my) for x, y in free) / sxx if sxx else math.nan
            lines.append(
                f"{name:<28}{len(free):>5}  {(my - slope * mx) * 1e3:7.1f} ms + "
                f"{slope * 1e6:6.1f} us x prompt token  (prompts {min(x for x, _ in free):.0f}-"
                f"{max(x for x, _ in free):.0f} tokens)"
            )
        else:
            lines.append(f"{name:<28}{len(free):>5}  too few requests at a free slot")
    print("\nTTFT at a free slot against the prompt length (least squares)")
    print(f"{'run':<28}{'n':>5}  TTFT")
    print("\n".join(lines))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record CPU llama-server traces")
    rec.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    rec.add_argument("--rate", type=float, default=1.0, help="requests per second")
    rec.add_argument("--seconds", type=float, default=40.0, help="seconds of sends")
    rec.add_argument("--n-predict", type=int, default=128)
    rec.add_argument("--prompt-words", type=int, default=160)
    rec.add_argument("--stream", action="store_true", help="time the first token at the client")
    rec.add_argument("--out", default="bench/data/whatif-cpu")
    tab = sub.add_parser("table", help="predicted vs measured from traces")
    tab.add_argument("traces", nargs="+")
    tab.add_argument("--json", metavar="FILE")
    pre = sub.add_parser(
        "predict", help="fit on one whole trace, predict other traces under their own load"
    )
    pre.add_argument("--fit", required=True, help="the trace to fit on (every phase)")
    pre.add_argument("traces", nargs="+", help="traces to predict (their load phase)")
    pre.add_argument("--json", metavar="FILE")
    cal = sub.add_parser(
        "calibrate",
        help="fit on each run, predict every other: share of measured figures in the band",
    )
    cal.add_argument("traces", nargs="+")
    cal.add_argument(
        "--fit-from", choices=("clients", "agent"), default="clients",
        help="fit on the per-request client records (default) or the agent samples",
    )  # fmt: skip
    cal.add_argument("--json", metavar="FILE", help="fits, held-out pairs and summary")
    cal.add_argument("--csv", metavar="FILE", help="one line per held-out pair")
    cal.add_argument(
        "--z", type=float, default=None, help="the band's speed range in residuals (BAND_Z)"
    )
    cal.add_argument(
        "--floor", type=float, default=None,
        help="the speed's least standard deviation for a client-records fit (RUN_SPEED_FLOOR)",
    )  # fmt: skip
    cal.add_argument(
        "--sampling", action="store_true",
        help="put TTFT's sampling spread (the quantile's confidence interval) in the band",
    )  # fmt: skip
    for flag, (module, about) in SETTINGS.items():
        cal.add_argument(
            "--" + flag.replace("_", "-"), action=argparse.BooleanOptionalAction, default=None,
            help=f"{about} ({module}.{flag.upper()}, on; --no-... turns it off)",
        )  # fmt: skip
    dia = sub.add_parser(
        "diagnose", help="per run: time per token by batch, TTFT at a free slot by prompt length"
    )
    dia.add_argument("traces", nargs="+")
    args = ap.parse_args()
    if args.cmd == "diagnose":
        return run_diagnose(args)
    if args.cmd == "calibrate":
        return run_calibrate(args)
    if args.cmd == "record":
        from tests.support.tracerun import OpenLoad, record

        load = OpenLoad(
            args.rate, args.seconds, args.prompt_words, args.n_predict, stream=args.stream
        )
        for slots in args.slots:
            with tempfile.TemporaryDirectory() as tmp:
                path = record(Path(args.out) / f"parallel-{slots}.jsonl.gz", Path(tmp), slots, load)
            print(f"wrote {path}")
        return 0
    if args.cmd == "predict":
        rows = predict_runs(args.fit, args.traces)
        f = next((r["fit"] for r in rows if isinstance(r.get("fit"), dict)), None)
        if f:
            print(
                f"fit on {args.fit}: step = {f['a_ms']:.2f} ms + {f['k_ms']:.3f} ms x sequences"
                f" + {f['p_us']:.1f} us x prompt tokens; batch sizes {f['batch'][0]:.1f}-"
                f"{f['batch'][1]:.1f}; slope {f['k_source']}; residual {f['residual']:.0%}"
            )
    else:
        rows = compare(args.traces)
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
