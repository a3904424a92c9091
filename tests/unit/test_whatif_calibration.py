"""The twin's bands, calibrated on recorded sweeps (issue 40, item 3).

``bench/bench_whatif.py calibrate`` fits the twin on each run of a sweep and predicts
every other run (its slot count, under its own recorded load); a held-out run counts
as inside where its measured throughput (or TTFT P50, P95) lies in the predicted band.
docs/advise.md ("Calibration") publishes the shares, the bands' median widths and the
point errors; ``tests/data/whatif/calibration-cpu.csv`` is that table, pair by pair.
Here the calibration is recomputed from the traces: at least 90% of held-out runs
inside for each figure at the shipped ``BAND_Z``, the same pairs inside as the
committed table says, and fewer than 90% for some figure at the next narrower step
(the bands are no wider than the 90% needs, on this grid).

The GPU sweep (``tests/data/whatif/h100/``: CUDA llama-server on an H100, --parallel 4
to 64 at two loads; ``calibration-h100.csv``) is fitted from its clients' per-request
records (twin.fit_requests): every run fits, at least 90% of held-out runs inside for
each figure at the shipped band, fewer at the next narrower step.

The fresh GPU sweep (``tests/data/whatif/h100-mix/``: --parallel 4, 16, 64 at 4.74 and
11.86 requests/s, three prompt lengths mixed; ``calibration-h100-mix.csv``) is the
out-of-sample check of the band chosen on the old one: its table is held pair by pair
and its shares as published (TTFT P50 at 90% or more since the band widens below the
batches a fit saw, P95 under it: docs/advise.md). TTFT's sampling spread in the band
(``whatif.TTFT_SAMPLING``, tried, not shipped) is held to its published figures too.

The warmed sweep (``tests/data/whatif/h100-fresh/``: --parallel 4, 8, 16, 32, 64 at
3.79, 9.1 and 18.95 requests/s, each server warmed, each run's prompts its own;
``calibration-h100-fresh.csv``) is the out-of-sample check of the shipped band on
measurements free of the prompt cache: held pair by pair and at its published shares
(TTFT under the 90% goal), and its prompts are held to be each run's own.

The repeat recording (``tests/data/whatif/h100-repeat/``: the same command, grid and
server as the warmed sweep, recorded again; ``calibration-h100-repeat.csv``) is the
out-of-sample check of ``twin.OVERHEAD_AFTER_START``, chosen on the warmed sweep: held
pair by pair, at its published shares with the flag on and off, and the two
recordings' measured figures for the same setting held to their published spread.

The third recording (``tests/data/whatif/h100-third/``, a later lease, the same command,
grid and server; ``calibration-h100-third.csv``) was made after every setting had been
chosen: held pair by pair and at its published shares (TTFT P50 at the 90% goal, P95
under it; over it since a fitted line with no fixed cost is refused below its batches,
``whatif.REFUSE_BELOW_ZERO_FIXED_COST``, chosen after reading all five H100 recordings).

The fourth recording (``tests/data/whatif/h100-fourth/``, a later lease, the same command,
grid and server; ``calibration-h100-fourth.csv``) was made after the overhead was taken
net of the step in flight: its figures without the two later settings
(``twin.OVERHEAD_NET_OF_SHARED_PREFILL``, ``twin.OVERHEAD_PER_PROMPT``, chosen after
reading all four H100 recordings) are the out-of-sample check of the code as it stood;
every table above is held with the settings shipped, and each recording's figures before
them as published.

The H200 sweep (``tests/data/whatif/h200-fresh/``, the same command, grid and carried
server on an H200; ``calibration-h200-fresh.csv``) was recorded after every setting,
those two included, was chosen: out of sample for all of them, held pair by pair and at
its published shares (throughput and TTFT P50 over the 90% goal, P95 one pair under it).

The fifth recording (``tests/data/whatif/h100-fifth/``, the same command, grid and
carried server; the lent machine was an H100) was made after the H200 sweep, with
nothing changed since: a second check out of sample for every setting, held pair by pair
and at its published shares (TTFT P95 under the goal: 84.6%; 88.0% with the refusal
below the batches, in-sample).

The settled recording (``tests/data/whatif/h100-settled/``, the same command and grid
with ``--settle``: each load after one unrecorded request, so no load's first requests
wait for the idle-slot copies the warm-up burst left) was made after every setting,
the refusal below the batches included, was chosen: held pair by pair and at its
published shares, with and without that refusal.

The band's fast end takes the prompt cost's low end over its refits
(``twin.BAND_PROMPT_COST``, chosen after reading the recordings above), and under the
batch a fitted step rests on it also takes the step in proportion to the batch
(``twin.BAND_UNDER_REF``, chosen after reading the sixth). The sixth recording
(``tests/data/whatif/h100-sixth/``, settled, on an H100, its server built off the device)
is the first's out-of-sample check: held pair by pair and at its published shares with
each. The throughput band's resolution counts an answer's time from its admission
(``whatif.RESOLUTION_FROM_ADMISSION``, a double count of the queue removed). The seventh
recording (``tests/data/whatif/h100-seventh/``, settled, on an H100) was made after every
setting shipped: out of sample for all of them (TTFT P95 under the goal: 88.2%). Every
table is held with the settings shipped, and each recording's figures before them as
published.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace

import pytest
from tests.support.llamaserver import trace_prompt_tokens
from tests.support.proc import REPO

from inferwatch.advise import twin, whatif
from inferwatch.advise.trace import (
    band_range,
    calibrate,
    calibration_summary,
    fit_trace,
    load_phase,
    read_trace,
    requests_of,
)
from inferwatch.advise.twin import NotEnough, StepFit, band_fits, below_fits, quantile_interval
from inferwatch.advise.whatif import predict

DATA = REPO / "tests" / "data" / "whatif"
#: the CPU llama-server sweeps: --parallel 1, 2, 4 at 4, 5.5 and 8 requests/s
CPU_SWEEP = sorted(DATA.glob("parallel-*.jsonl.gz")) + sorted(
    p for d in ("rate-5.5", "rate-8") for p in (DATA / d).glob("parallel-*.jsonl.gz")
)
TABLE = DATA / "calibration-cpu.csv"


def recording(folder: str) -> tuple[list, object]:
    """A recorded sweep's runs and its committed calibration table."""
    return sorted((DATA / folder).glob("sweep-s*.jsonl.gz")), DATA / f"calibration-{folder}.csv"


#: the GPU sweep: --parallel 4, 8, 16, 32, 64 at 3.48 and 6.96 requests/s on an H100
GPU_SWEEP, GPU_TABLE = recording("h100")
#: the fresh GPU sweep: --parallel 4, 16, 64 at 4.74 and 11.86 requests/s, prompts of 40,
#: 160 and 320 words mixed, on an H100
MIX_SWEEP, MIX_TABLE = recording("h100-mix")
#: the sweep recorded with every server warmed and each run's prompts its own (the two
#: sweeps above repeated one load's prompts in the next, answered from llama-server's
#: prompt cache): --parallel 4, 8, 16, 32, 64 at 3.79, 9.1 and 18.95 requests/s, on an H100
FRESH_SWEEP, FRESH_TABLE = recording("h100-fresh")
#: the warmed sweep recorded again, the same command and grid on an H100
REPEAT_SWEEP, REPEAT_TABLE = recording("h100-repeat")
#: the warmed sweep recorded a third time (a later lease), the same command and grid
THIRD_SWEEP, THIRD_TABLE = recording("h100-third")
#: the fourth recording (a later lease), the same command and grid
FOURTH_SWEEP, FOURTH_TABLE = recording("h100-fourth")
#: the same command and grid on an H200, recorded after every setting was chosen
H200_SWEEP, H200_TABLE = recording("h200-fresh")
#: the same command and grid on an H100 again, recorded after the H200 sweep
FIFTH_SWEEP, FIFTH_TABLE = recording("h100-fifth")
#: the same command and grid on an H100, each load after one unrecorded request (--settle)
SETTLED_SWEEP, SETTLED_TABLE = recording("h100-settled")
#: the settled grid on an H100 again, its server built off the device
SIXTH_SWEEP, SIXTH_TABLE = recording("h100-sixth")
#: the settled grid on an H100 again, recorded after every setting shipped
SEVENTH_SWEEP, SEVENTH_TABLE = recording("h100-seventh")
FIGURES = ("throughput", "ttft_p50", "ttft_p95")
#: the least share of held-out runs inside their band
COVERAGE = 0.90


@pytest.fixture(scope="module")
def shipped() -> dict:
    assert len(CPU_SWEEP) == 9
    return calibrate(CPU_SWEEP)


def test_at_least_90_percent_of_held_out_runs_fall_inside_their_band(shipped: dict) -> None:
    summary = shipped["summary"]
    for key in FIGURES:
        s = summary[key]
        assert s["pairs"] >= 60, (key, s)
        assert s["inside_share"] >= COVERAGE, (key, s)
        assert s["width_median"] > 1.0 and math.isfinite(s["error_median"])
    # every band low to high, the point inside it
    for r in shipped["rows"]:
        if "band" not in r:
            assert "refused" in r
            continue
        lo, hi = r["band"]
        for key in FIGURES:
            assert lo[key] <= r["predicted"][key] <= hi[key], (r["trace"], key)


def test_the_committed_table_is_what_the_code_gives(shipped: dict) -> None:
    assert_table(TABLE, shipped)


def held_recording(sweep: list, table: object, card: str) -> tuple[dict, dict]:
    """A 15-run recording on ``card`` calibrated and held to its committed table: the
    result and its summary."""
    assert len(sweep) == 15
    assert card in read_trace(sweep[0]).header["source"]
    result = calibrate(sweep)
    assert_table(table, result)
    return result, result["summary"]


def answered(summary: dict) -> tuple[int, int, tuple[int, ...]]:
    """Pairs answered, pairs refused, and pairs inside per figure."""
    return (
        summary["throughput"]["pairs"],
        summary["refused"],
        tuple(summary[k]["inside"] for k in FIGURES),
    )


def shipped_figures(summary: dict) -> tuple:
    """What a recording's section publishes: answered and inside (:func:`answered`), and
    the median widths and point errors per figure."""
    return (
        answered(summary),
        per_figure(summary, "width_median"),
        per_figure(summary, "error_median"),
    )


def per_figure(summary: dict, field: str) -> list[float]:
    """A summary's ``field`` (``width_median``, ``error_median``) per figure, to 2 places."""
    return [round(summary[k][field], 2) for k in FIGURES]


def inside_counts(sweep: list) -> tuple[int, ...]:
    """Held-out pairs inside their band (throughput, TTFT P50, P95) as the code gives now."""
    s = calibrate(sweep)["summary"]
    return tuple(s[k]["inside"] for k in FIGURES)


def flagged(result: dict) -> list[str]:
    """The runs (``s64-r3.79``) whose fit was refused or flagged UNTRUSTED."""
    return [
        f["trace"].rsplit("sweep-", 1)[1].removesuffix(".jsonl.gz")
        for f in result["fits"]
        if "refused" in f or not f["trusted"]
    ]


def misses(result: dict) -> list[tuple[dict, str, bool]]:
    """The answered pairs measured outside their band: (row, figure, under the band)."""
    out = []
    for r in result["rows"]:
        if "band" not in r:
            continue
        for key in FIGURES:
            lo, hi = band_range(r, key)
            if not lo <= r["measured"][key] <= hi:
                out.append((r, key, r["measured"][key] < lo))
    return out


def resolution_from_send(monkeypatch: pytest.MonkeyPatch) -> None:
    """The throughput band before its resolution was an answer's time from its admission:
    from its send, its wait in the queue counted in."""
    monkeypatch.setattr(whatif, "RESOLUTION_FROM_ADMISSION", False)


def before_under_ref(monkeypatch: pytest.MonkeyPatch) -> None:
    """The band before it took the proportional step under the batch a fit rests on (and
    so before the throughput band's resolution from admission)."""
    resolution_from_send(monkeypatch)
    monkeypatch.setattr(twin, "BAND_UNDER_REF", False)


def fitted_prompt_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The band before its fast end took the prompt cost's low end: the fitted ``p`` at
    both ends (and so before the proportional step under the batch a fit rests on)."""
    before_under_ref(monkeypatch)
    monkeypatch.setattr(twin, "BAND_PROMPT_COST", False)


def with_fitted_prompt_cost(monkeypatch: pytest.MonkeyPatch, sweep: list) -> dict:
    """A sweep's summary with the band before the prompt cost's low end
    (:func:`fitted_prompt_cost`, which stays on for the rest of the test)."""
    fitted_prompt_cost(monkeypatch)
    return calibrate(sweep)["summary"]


def answering_zero_fixed_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The code before a fitted line with no fixed cost was refused below its batches
    (and so before the prompt cost's low end)."""
    fitted_prompt_cost(monkeypatch)
    monkeypatch.setattr(whatif, "REFUSE_BELOW_ZERO_FIXED_COST", False)


def before_shared_prefill(monkeypatch: pytest.MonkeyPatch) -> None:
    """The overhead as it was fitted before the two settings of the fourth recording: its
    shared prefill left in, drawn at random whatever the request's own prompt (and the
    band before the prompt cost's low end)."""
    fitted_prompt_cost(monkeypatch)
    monkeypatch.setattr(twin, "OVERHEAD_NET_OF_SHARED_PREFILL", False)
    monkeypatch.setattr(twin, "OVERHEAD_PER_PROMPT", False)


def assert_table(table: object, result: dict) -> None:
    """The committed CSV (``bench_whatif.py calibrate --csv``) pair by pair."""
    with open(str(table)) as fh:
        committed = {(row["fit"], row["trace"]): row for row in csv.DictReader(fh)}
    rows = {(r["fit_trace"], r["trace"]): r for r in result["rows"]}
    assert committed.keys() == rows.keys()
    for pair, r in rows.items():
        c = committed[pair]
        assert (c["answer"] == "refused") == ("refused" in r), pair
        if "refused" in r:
            continue
        for key in FIGURES:
            lo, hi = band_range(r, key)
            m = r["measured"][key]
            assert int(c[f"{key}_inside"]) == int(lo <= m <= hi), (pair, key)
            assert float(c[f"{key}_predicted"]) == pytest.approx(r["predicted"][key], rel=1e-6)


def test_a_narrower_band_falls_short_of_90_percent() -> None:
    narrower = calibrate(CPU_SWEEP, band_z=twin.BAND_Z - 0.5)["summary"]
    assert min(narrower[k]["inside_share"] for k in FIGURES) < COVERAGE, narrower


@pytest.fixture(scope="module")
def gpu() -> dict:
    assert len(GPU_SWEEP) == 10
    return calibrate(GPU_SWEEP)


def test_the_gpu_sweep_gives_the_published_figures(gpu: dict) -> None:
    assert_table(GPU_TABLE, gpu)
    # every run fits from its clients' records, the light load's too (its agent samples
    # give under 5 busy windows), and each fit reproduces its own run
    assert flagged(gpu) == []
    s = gpu["summary"]
    assert (s["throughput"]["pairs"], s["refused"]) == (44, 46), s
    for key in FIGURES:
        assert s[key]["inside_share"] >= COVERAGE, (key, s[key])


def test_a_narrower_gpu_band_falls_short_of_90_percent() -> None:
    """One step narrower (``BAND_Z`` 2) the settled H100 recording holds TTFT P50 77/93
    and P95 76/93 (82.8% and 81.7%). (The H200 sweep holds 90% there since the band takes
    the prompt cost's low end and the step under the batch a fit rests on, P95 106/117,
    and the first H100 sweep's 44 pairs too, P95 43/44; the CPU sweep does not, P50
    55/63.)"""
    narrower = calibrate(SETTLED_SWEEP, band_z=twin.BAND_Z - 0.5)["summary"]
    assert tuple(narrower[k]["inside"] for k in FIGURES) == (91, 77, 76), narrower
    assert narrower["ttft_p95"]["inside_share"] < COVERAGE
    h200 = calibrate(H200_SWEEP, band_z=twin.BAND_Z - 0.5)["summary"]
    assert h200["ttft_p95"]["inside"] == 106, h200


def test_the_client_records_give_a_prompt_cost_and_the_first_token_at_no_wait(gpu: dict) -> None:
    """The agent's windows all have one prompt/answer ratio (three of five fits put the
    prompt at 0 us); one row per request gives a prompt cost in 9 of 10 fits. The
    clients saw 27-37 ms TTFT P50 at light load: a fit's first token at no wait (its
    overhead, plus one step with a mean prompt) lies in 15-50 ms. With one prompt length
    the split between overhead and prompt cost is not identified (docs/advise.md)."""
    fits = [f["fit"] for f in gpu["fits"]]
    assert all(f["k_source"] == "fitted (client records)" for f in fits), fits
    assert sum(1 for f in fits if f["p_us"] > 0) == 9, fits
    for f in fits:
        no_wait = f["overhead_ms"] + f["a_ms"] + f["k_ms"] + f["p_us"] * 372 / 1e3
        assert 15 <= no_wait <= 50, (no_wait, f)
    # the agent's samples alone: the light load's runs do not fit
    agent = calibrate(GPU_SWEEP[:2], fit_from="agent")["fits"]
    assert ["refused" in f for f in agent] == ["r3.48" in f["trace"] for f in agent], agent


def test_the_current_slot_count_is_answered_however_few_slots_the_load_used() -> None:
    # at 32 slots the load ran 7.8 sequences at most (the agent's windows): 32 is what
    # was observed, 64 is 8x
    tr = read_trace(DATA / "h100" / "sweep-s32-r6.96.jsonl.gz")
    obs, fit, sends = fit_trace(tr, fit_from="agent")
    assert fit.batch_max < 8
    own = predict(obs, "max-num-seqs", 32, fit, arrivals=sends)
    assert not own.range_note.startswith("extrapolated")
    assert own.new.throughput == own.current.throughput
    with pytest.raises(NotEnough, match=r"8\.2x the largest batch observed"):
        predict(obs, "max-num-seqs", 64, fit, arrivals=sends)


@pytest.fixture(scope="module")
def mix() -> dict:
    assert len(MIX_SWEEP) == 6
    return calibrate(MIX_SWEEP)


def test_the_fresh_gpu_sweep_gives_the_published_out_of_sample_figures(mix: dict) -> None:
    """BAND_Z and RUN_SPEED_FLOOR were chosen on the old sweep; on this one throughput
    keeps 16/16 inside, TTFT P50 16/16 and P95 14/16 (15/16 before the overhead was taken
    net of the shared prefill, 13/16 with the overhead from every request, before
    OVERHEAD_AFTER_START) (docs/advise.md, "The fresh sweep", "The prompts of the first
    step"). The 64-slot light run's fit replays its own P95 51% low and is flagged."""
    assert_table(MIX_TABLE, mix)
    assert flagged(mix) == ["s64-r4.74"], flagged(mix)
    s = mix["summary"]
    assert (s["throughput"]["pairs"], s["refused"]) == (16, 14), s
    inside = {k: s[k]["inside"] for k in FIGURES}
    assert inside == {"throughput": 16, "ttft_p50": 16, "ttft_p95": 14}, inside
    assert min(s[k]["inside_share"] for k in FIGURES[:2]) >= COVERAGE
    # what misses is light-load TTFT of another server (4.74 requests/s, 58 requests)
    missed = {(r["fit_trace"][15:-9], r["trace"][15:-9], k) for r, k, _ in misses(mix)}
    assert missed == {
        ("s64-r11.86", "s64-r4.74", "ttft_p95"),
        ("s64-r11.86", "s16-r4.74", "ttft_p95"),
    }, missed


def test_below_the_batches_a_fit_saw_the_band_runs_down_to_a_proportional_step(mix: dict) -> None:
    """The 16-slot 11.86 requests/s fit (batch 5.8-15.2) asked for 4 slots: both its
    answers are extrapolated below, and under 11.86 requests/s the measured TTFT (P50
    1.13 s, against 8.3 s predicted) is inside the band only through the proportional
    step: the slope's range alone keeps every step at batch 4 slower."""
    rows = {
        r["trace"][15:-9]: r for r in mix["rows"] if r["fit_trace"].endswith("s16-r11.86.jsonl.gz")
    }
    for run in ("s4-r11.86", "s4-r4.74"):
        assert rows[run]["extrapolated"], rows[run]
    busy = rows["s4-r11.86"]
    for key in FIGURES:
        lo, hi = sorted(b[key] for b in busy["band"])
        assert lo <= busy["measured"][key] <= hi, key
    assert busy["predicted"]["ttft_p50"] > 5 * busy["measured"]["ttft_p50"]
    _, fit, _ = fit_trace(read_trace(DATA / "h100-mix" / "sweep-s16-r11.86.jsonl.gz"))
    assert 5.5 < fit.batch_min < 6
    fast = min(f.step(4) for f in below_fits(fit, 4))
    assert fast < 0.85 * min(f.step(4) for f in band_fits(fit))  # 3.2 against 3.9 ms
    # the other fits of the sweep saw a batch of 4 or less: no further corner for them
    others = [f["fit"]["batch"][0] for f in mix["fits"] if "s16-r11.86" not in f["trace"]]
    assert max(others) <= 4.0, others


def test_the_proportional_corner_is_the_step_at_the_smallest_batch_scaled_down() -> None:
    fit = StepFit(a=5e-3, k=0.3e-3, p=10e-6, k_source="fitted", batch_min=6.0, batch_max=15.0,
                  intervals=100, residual=0.1, k_lo=0.2e-3, k_hi=0.4e-3, b_ref=10.0,
                  overhead=(0.01, 0.02))  # fmt: skip
    assert below_fits(fit, 6) == [] and below_fits(fit, 16) == []
    spread = twin.speed_spread(fit)
    fast, slow = below_fits(fit, 4)
    per_seq = (5e-3 + 0.3e-3 * 6) / 6
    assert fast.a == slow.a == 0.0
    assert fast.k == pytest.approx(per_seq * (1 - spread))
    assert slow.k == pytest.approx(per_seq * (1 + spread))
    assert fast.overhead == pytest.approx((0.01 * (1 - spread), 0.02 * (1 - spread)))
    # at the smallest batch seen it is the fit's own step (at the speed's ends)
    assert fast.step(6, 100) == pytest.approx(fit.step(6, 100) * (1 - spread))


def test_the_band_s_fast_end_takes_the_prompt_cost_s_low_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the fast end another request's prompt costs a shared step the refits' low end
    (20 us a token here, against the fitted 100); a request's own first token costs what
    it did at the fitted cost, the difference moved into its overhead. The slow end keeps
    the fitted cost."""
    fit = StepFit(a=1e-3, k=0.5e-3, p=100e-6, k_source="fitted", batch_min=1.0,
                  batch_max=4.0, intervals=40, residual=0.05, overhead=(0.010, 0.020),
                  overhead_per_prompt=-80e-6, prompt_ref=400.0, speed_lo=0.98,
                  speed_hi=1.02, p_lo=20e-6)  # fmt: skip
    assert twin.prompt_costs(fit) == (20e-6, 100e-6)
    fast, slow = twin._at_speeds(fit, fit.a, fit.k, twin.BAND_Z, twin.prompt_costs(fit))
    spread = twin.speed_spread(fit)

    def own_first_token(f: StepFit, prompt: float, q: int) -> float:
        """At an idle worker: its step with its own prompt, its overhead and the
        overhead's part for its prompt (what the replay adds to the step)."""
        return f.step(0, prompt) + f.overhead[q] + f.overhead_per_prompt * (prompt - f.prompt_ref)

    for prompt in (100.0, 400.0, 800.0):
        for q in (0, 1):
            base = own_first_token(fit, prompt, q)
            assert own_first_token(fast, prompt, q) == pytest.approx(base * (1 - spread))
            assert own_first_token(slow, prompt, q) == pytest.approx(base * (1 + spread))
    # an 800-token prompt in a step shared with two decoding sequences
    assert fast.step(2, 800) - fast.step(2, 0) == pytest.approx(20e-6 * 800 * (1 - spread))
    assert slow.step(2, 800) - slow.step(2, 0) == pytest.approx(100e-6 * 800 * (1 + spread))
    # without the overhead's prompt part fitted the cost cannot be given back: p at both
    assert twin.prompt_costs(replace(fit, prompt_ref=0.0)) == (100e-6, 100e-6)
    assert twin.prompt_costs(replace(fit, p_lo=None)) == (100e-6, 100e-6)
    monkeypatch.setattr(twin, "BAND_PROMPT_COST", False)
    assert twin.prompt_costs(fit) == (100e-6, 100e-6)


def test_a_fit_s_prompt_cost_has_a_low_end_from_its_refits() -> None:
    """The H200 sweep's 32-slot light fit put a prompt token at 153 us on its decode
    spans (its first tokens grow about 0 us a token of their own prompt); its refits'
    5th percentile is 107 us, and the range note says what the band spans."""
    obs, fit, _ = fit_trace(read_trace(DATA / "h200-fresh" / "sweep-s32-r3.79.jsonl.gz"))
    assert fit.p_lo is not None
    assert (round(fit.p_lo * 1e6), round(fit.p * 1e6)) == (107, 153)
    note = predict(obs, "max-num-seqs", 16, fit).range_note
    assert "prompt cost 106.9 (5% of refits) to 152.7 us a token" in note, note
    # a fit whose refits all put the prompt at no cost has nothing to take lower
    _, light, _ = fit_trace(read_trace(DATA / "h200-fresh" / "sweep-s16-r9.1.jsonl.gz"))
    assert light.p == light.p_lo == 0.0
    assert "prompt cost" not in predict(obs, "max-num-seqs", 16, light).range_note


def test_a_quantiles_sampling_interval_is_at_the_binomial_ranks() -> None:
    values = [float(i) for i in range(1, 101)]  # the i-th smallest is i
    # the textbook 95% interval of a median of 100: the 40th and 61st smallest
    assert quantile_interval(values, 0.5, 1.96) == (40.0, 61.0)

    def ranks(n: int, q: float, z: float) -> tuple[int, int]:
        tail = 0.5 * math.erfc(z / math.sqrt(2))
        cdf = [sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(j + 1))
               for j in range(n + 1)]  # fmt: skip
        lo = max([j for j in range(1, n + 1) if cdf[j - 1] <= tail], default=1)
        hi = min([j for j in range(1, n + 1) if 1 - cdf[j - 1] <= tail], default=n)
        return lo, hi

    for n, q, z in ((58, 0.5, 2.5), (58, 0.95, 2.5), (132, 0.95, 2.5), (20, 0.95, 1.0)):
        got = quantile_interval([float(i) for i in range(1, n + 1)], q, z)
        assert got == tuple(float(r) for r in ranks(n, q, z)), (n, q, z)
    # a P95 of 58 requests: no rank leaves under 0.6% above, so the slowest is the end
    assert quantile_interval(values[:58], 0.95, 2.5)[1] == 58.0
    assert all(math.isnan(x) for x in quantile_interval([], 0.5))  # nothing sampled


def test_ttft_sampling_in_the_band_as_published(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tried, not shipped: with each replay's TTFT widened to its quantile's sampling
    interval, 12% is the least floor that keeps the old sweep at 90% for every figure
    (10%: P95 39/44); on the fresh sweep that gives 16/16, 15/16, 12/16, no more inside
    than the shipped band and wider TTFT bands (docs/advise.md). With OVERHEAD_AFTER_START
    (on) the floor is still 12% and the fresh sweep 16/16, 15/16, 14/16."""
    # figures from before the overhead was taken net of the step in flight
    before_shared_prefill(monkeypatch)
    monkeypatch.setattr(twin, "OVERHEAD_NET_OF_STEP_IN_FLIGHT", False)
    monkeypatch.setattr(whatif, "TTFT_SAMPLING", True)
    monkeypatch.setattr(twin, "RUN_SPEED_FLOOR", 0.10)
    lower = calibrate(GPU_SWEEP)["summary"]
    assert lower["ttft_p95"]["inside"] == 39, lower
    monkeypatch.setattr(twin, "RUN_SPEED_FLOOR", 0.12)
    old = calibrate(GPU_SWEEP)["summary"]
    assert {k: old[k]["inside"] for k in FIGURES} == {
        "throughput": 44, "ttft_p50": 42, "ttft_p95": 41}, old  # fmt: skip
    fresh = calibrate(MIX_SWEEP)
    s = fresh["summary"]
    assert {k: s[k]["inside"] for k in FIGURES} == {
        "throughput": 16, "ttft_p50": 15, "ttft_p95": 14}, s  # fmt: skip
    assert s["ttft_p50"]["width_median"] == pytest.approx(11.92, abs=0.01)
    # the floor kept at 14% with it: one P50 and one P95 more, bands wider still
    monkeypatch.setattr(twin, "RUN_SPEED_FLOOR", 0.14)
    kept = calibrate(MIX_SWEEP)["summary"]
    assert {k: kept[k]["inside"] for k in FIGURES} == {
        "throughput": 16, "ttft_p50": 16, "ttft_p95": 15}, kept  # fmt: skip
    assert kept["ttft_p50"]["width_median"] == pytest.approx(17.14, abs=0.01)
    # every band still holds its point, low to high
    for r in fresh["rows"]:
        if "band" in r:
            lo, hi = r["band"]
            for key in FIGURES:
                assert lo[key] <= r["predicted"][key] <= hi[key], (r["trace"], key)


def test_the_prompt_mix_gives_a_positive_overhead_and_a_prompt_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With 93-, 372- and 745-token prompts mixed, every fit's client overhead is positive
    (the one-length sweep's ran -7.5 to +26 ms) and 4 of 6 fits find a prompt cost; the
    first token at no wait with a mean prompt lies in 15-50 ms as in the old sweep. The
    4-slot run at 11.86 requests/s ran at its slot limit (batch 3.4-4.0): its slope is
    assumed, and its overhead rests on the 6 requests that found a free slot. (As
    published, before OVERHEAD_PER_PROMPT took the prompt's part out of the overhead.)"""
    before_shared_prefill(monkeypatch)
    by_run = {f["trace"]: f["fit"] for f in calibrate(MIX_SWEEP)["fits"]}
    assumed = [t for t, f in by_run.items() if f["k_source"] != "fitted (client records)"]
    assert assumed == ["h100-mix/sweep-s4-r11.86.jsonl.gz"], assumed
    fits = list(by_run.values())
    assert all(f["overhead_ms"] > 0 for f in fits), fits
    assert sum(1 for f in fits if f["p_us"] > 0) == 4, fits
    for f in fits:
        no_wait = f["overhead_ms"] + f["a_ms"] + f["k_ms"] + f["p_us"] * 400 / 1e3
        assert 15 <= no_wait <= 50, (no_wait, f)


def _prompt_bound_windows() -> list[twin.Interval]:
    """Busy 5 s windows whose time is the prompts' alone (0.5 ms a prompt token) while the
    batch spans 1-2: the three-term fit puts every second on the prompts."""
    prompts = (800, 1200, 1000, 900, 1100, 1000)
    running = (1.0, 2.0, 1.5, 1.2, 1.8, 1.1)
    return [
        twin.Interval(dt=0.005 * pr, running=r, generated=300, prompt=pr, busy=True)
        for pr, r in zip(prompts, running, strict=True)
    ]


def test_a_fit_that_puts_every_second_on_the_prompts_takes_the_engine_s_decode_step() -> None:
    windows = _prompt_bound_windows()
    # the fit alone cannot tell prefill from decode here: it leaves the decode terms
    # (a x steps + k x tokens) no time at all
    a, k, _ = twin.nnls([[w.generated / w.running, w.generated, w.prompt] for w in windows],
                        [w.dt for w in windows])  # fmt: skip
    steps = sum(w.generated / w.running for w in windows)
    assert a * steps + k * sum(w.generated for w in windows) < 1e-9
    # with the engine's own time per output token the decode step is known: a fit, not a
    # refusal, that still gives the busy time observed
    fit = twin.fit_steps(windows, window=1.0, tpot=0.002, compute_bound=True)
    assert "do not tell prefill from decode" in fit.k_source
    assert fit.a + fit.k > 0 and fit.p > 0
    total = fit.a * steps + fit.k * sum(w.generated for w in windows)
    total += fit.p * sum(w.prompt for w in windows)
    assert total == pytest.approx(sum(w.dt for w in windows))
    # without it there is no decode step to take: refused, saying so
    with pytest.raises(NotEnough, match="no decode step time"):
        twin.fit_steps(windows, window=1.0, compute_bound=True)


@pytest.fixture(scope="module")
def fresh() -> dict:
    assert len(FRESH_SWEEP) == 15
    return calibrate(FRESH_SWEEP)


def test_the_warmed_sweep_gives_the_published_out_of_sample_figures(fresh: dict) -> None:
    """The band was not chosen on this sweep; OVERHEAD_AFTER_START was (in-sample here):
    throughput keeps all 117 answered pairs inside, TTFT P50 113 and P95 108 (96.6% and
    92.3%; 104 and 105 before the overhead was taken net of the shared prefill, 101 and
    105 with it not net of the step in flight either, 87 and 85 with it from every
    request as well); every miss is at the light load, 3.79 requests/s (docs/advise.md,
    "The warmed sweep", "The prompts of the first step")."""
    assert_table(FRESH_TABLE, fresh)
    s = fresh["summary"]
    assert (s["throughput"]["pairs"], s["refused"]) == (117, 93), s
    inside = {k: s[k]["inside"] for k in FIGURES}
    assert inside == {"throughput": 117, "ttft_p50": 113, "ttft_p95": 108}, inside
    assert min(s[k]["inside_share"] for k in FIGURES) >= COVERAGE
    # the light runs whose own P95 is their first requests' wait for the idle-slot copies
    assert flagged(fresh) == ["s32-r3.79", "s64-r3.79"], flagged(fresh)
    missed_loads = {r["rate"] for r, _, _ in misses(fresh)}
    assert missed_loads == {3.79}, missed_loads


def test_each_run_of_the_warmed_sweep_sends_prompts_of_its_own() -> None:
    """The older sweeps drew the prompts from the arrivals' random stream, so each load on
    a server repeated the last one's prompts and llama-server took them from its prompt
    cache: a whole run's worth of cached tokens. The warmed sweep draws each run's prompts
    from a stream of its own: under 2% cached in every run."""
    for path in FRESH_SWEEP:
        processed, cached = trace_prompt_tokens(path)
        assert cached < 0.02 * processed, (path.name, processed, cached)
    for slots in (4, 16, 64):
        first, _ = trace_prompt_tokens(DATA / "h100-mix" / f"sweep-s{slots}-r4.74.jsonl.gz")
        _, cached = trace_prompt_tokens(DATA / "h100-mix" / f"sweep-s{slots}-r11.86.jsonl.gz")
        assert cached > 0.99 * first, (slots, first, cached)


def test_the_overhead_from_every_request_as_published(monkeypatch: pytest.MonkeyPatch) -> None:
    """OVERHEAD_AFTER_START (on) takes a fit's client overhead only from requests sent
    after its first request's first token (before it, llama-server copies the idle slots
    into its prompt cache: 64 of them at the 64-slot server's first load). The 64-slot
    light run's largest overhead quantile is under 0.1 s with it, 0.80 s without; without
    it the warmed sweep holds TTFT P50 87/117 and P95 85/117 and the older sweeps one or
    two fewer inside (docs/advise.md, "What the first token at a free slot pays for")."""
    light = read_trace(DATA / "h100-fresh" / "sweep-s64-r3.79.jsonl.gz")
    assert twin.OVERHEAD_AFTER_START
    assert max(fit_trace(light)[1].overhead) < 0.1
    monkeypatch.setattr(twin, "OVERHEAD_AFTER_START", False)
    assert max(fit_trace(light)[1].overhead) > 0.7
    # figures from before the overhead was taken net of the step in flight
    before_shared_prefill(monkeypatch)
    monkeypatch.setattr(twin, "OVERHEAD_NET_OF_STEP_IN_FLIGHT", False)
    fresh = calibrate(FRESH_SWEEP)
    s = fresh["summary"]
    assert {k: s[k]["inside"] for k in FIGURES} == {
        "throughput": 117, "ttft_p50": 87, "ttft_p95": 85}, s  # fmt: skip
    assert s["ttft_p50"]["width_median"] == pytest.approx(9.99, abs=0.01)
    assert s["ttft_p95"]["width_median"] == pytest.approx(9.09, abs=0.01)
    assert flagged(fresh) == ["s16-r3.79", "s32-r3.79"], flagged(fresh)
    for sweep, inside in (
        (GPU_SWEEP, {"throughput": 44, "ttft_p50": 41, "ttft_p95": 40}),
        (MIX_SWEEP, {"throughput": 16, "ttft_p50": 15, "ttft_p95": 13}),
    ):
        got = calibrate(sweep)["summary"]
        assert {k: got[k]["inside"] for k in FIGURES} == inside, got


@pytest.fixture(scope="module")
def repeat() -> dict:
    assert len(REPEAT_SWEEP) == 15
    return calibrate(REPEAT_SWEEP)


def test_the_repeat_recording_holds_the_overhead_after_start_out_of_sample(
    repeat: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OVERHEAD_AFTER_START was chosen on the warmed sweep; on its repeat recording (not
    seen then) 105 of 210 held-out pairs are answered: throughput 105, TTFT P50 102 and
    P95 97 inside (92.4%), at median widths x1.84, x11.25 and x13.12 (TTFT x10.87 and x13.12
    before the band took the step under the batch a fit rests on, x8.78 and x12.16
    before its fast end took the prompt cost's low end). Before the 64-slot 18.95
    requests/s fit (no fixed cost) was refused below its batches: 117 answered, 113, 112 and 105 inside (95.7% and 89.7%);
    106 and 105 before the overhead was taken net of the shared prefill, 102 and 105 with
    it not net of the step in flight either, 95 and 87 without OVERHEAD_AFTER_START as
    well; throughput 113/117 in each (docs/advise.md, "The repeat recording", "The step in
    flight", "The prompts of the first step", "A fixed cost at zero")."""
    assert_table(REPEAT_TABLE, repeat)
    s = repeat["summary"]
    assert answered(s) == (105, 105, (105, 102, 97)), s
    assert min(s[k]["inside_share"] for k in FIGURES) >= COVERAGE
    assert per_figure(s, "width_median") == [1.84, 11.25, 13.12], s
    assert flagged(repeat) == ["s64-r3.79"], flagged(repeat)
    fitted = with_fitted_prompt_cost(monkeypatch, REPEAT_SWEEP)
    assert (answered(fitted), per_figure(fitted, "width_median")) == (
        (105, 105, (105, 102, 97)),
        [2.33, 8.78, 12.16],
    ), fitted
    answering_zero_fixed_cost(monkeypatch)
    before = calibrate(REPEAT_SWEEP)["summary"]
    assert answered(before) == (117, 93, (113, 112, 105)), before
    # P50 at the goal, P95 one pair short of it
    assert before["ttft_p50"]["inside_share"] >= COVERAGE > before["ttft_p95"]["inside_share"]
    before_shared_prefill(monkeypatch)
    assert inside_counts(REPEAT_SWEEP) == (113, 106, 105)
    monkeypatch.setattr(twin, "OVERHEAD_NET_OF_STEP_IN_FLIGHT", False)
    assert inside_counts(REPEAT_SWEEP) == (113, 102, 105)
    monkeypatch.setattr(twin, "OVERHEAD_AFTER_START", False)
    assert inside_counts(REPEAT_SWEEP) == (113, 95, 87)


def test_the_two_recordings_of_one_setting_differ_by_their_published_spread(
    fresh: dict, repeat: dict
) -> None:
    """The same (slots, load) measured twice on the same kind of card, server and command:
    throughput within a median of 1%, TTFT P50 16% and P95 23% apart (the repeat faster in
    28 of 30 TTFT figures). No band can hold 90% of one recording's figures from the
    other's without spanning that run-to-run spread."""

    def measured(result: dict, cut: int) -> dict:
        return {r["trace"][cut:-9]: r["measured"] for r in result["rows"] if "measured" in r}

    a, b = measured(fresh, 17), measured(repeat, 18)
    assert a.keys() == b.keys() and len(a) == 15
    diffs = {k: sorted(abs(b[run][k] / a[run][k] - 1) for run in a) for k in FIGURES}
    medians = {k: round(v[7], 2) for k, v in diffs.items()}
    assert medians == {"throughput": 0.01, "ttft_p50": 0.16, "ttft_p95": 0.23}, medians
    faster = sum(1 for run in a for k in FIGURES[1:] if b[run][k] < a[run][k])
    assert faster == 28, faster  # the two others: the saturated 4-slot run, +0.1-0.2%


def test_the_third_recording_is_out_of_sample_for_every_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recorded after BAND_Z, RUN_SPEED_FLOOR and OVERHEAD_AFTER_START were chosen: of 210
    held-out pairs 114 refused and 96 answered, throughput 93, TTFT P50 95 and P95 91
    (94.8%) inside, at median widths x1.66, x12.13 and x16.29 (93, 94 and 90 before the
    band took the step under the batch a fit rests on); before the band's fast end took
    the prompt cost's low end 93, 94 and 89 (92.7%) at x1.89, x7.51 and x12.01. Before
    its two fits with no fixed cost were refused below their batches: 114 answered, 107
    (93.9%), 108 (94.7%) and 101 (88.6%) inside, at median widths x1.74, x7.51 and x12.03; 107, 103 and 98
    before the overhead was taken net of the shared prefill, 107, 99 and 98 with it not
    net of the step in flight either (docs/advise.md, "The third recording", "A fixed
    cost at zero")."""
    third, s = held_recording(THIRD_SWEEP, THIRD_TABLE, "NVIDIA H100")
    assert answered(s) == (96, 114, (93, 95, 91)), s
    assert min(s[k]["inside_share"] for k in FIGURES) >= COVERAGE
    assert per_figure(s, "width_median") == [1.66, 12.13, 16.29], s
    assert flagged(third) == ["s64-r3.79"], flagged(third)
    fitted = with_fitted_prompt_cost(monkeypatch, THIRD_SWEEP)
    assert (answered(fitted), per_figure(fitted, "width_median")) == (
        (96, 114, (93, 94, 89)),
        [1.89, 7.51, 12.01],
    ), fitted
    answering_zero_fixed_cost(monkeypatch)
    before = calibrate(THIRD_SWEEP)["summary"]
    assert answered(before) == (114, 96, (107, 108, 101)), before
    assert before["ttft_p95"]["inside_share"] < COVERAGE
    assert per_figure(before, "width_median") == [1.74, 7.51, 12.03]
    before_shared_prefill(monkeypatch)
    assert inside_counts(THIRD_SWEEP) == (107, 103, 98)
    monkeypatch.setattr(twin, "OVERHEAD_NET_OF_STEP_IN_FLIGHT", False)
    assert inside_counts(THIRD_SWEEP) == (107, 99, 98)


def test_the_fourth_recording_checks_the_step_in_flight_out_of_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recorded after OVERHEAD_NET_OF_STEP_IN_FLIGHT shipped, before the overhead was taken
    net of the shared prefill: with the code as it stood (out of sample) throughput 113,
    TTFT P50 101 (86.3%) and P95 106 (90.6%) of 117 inside; with the settings chosen after
    reading it (in-sample) 113, 109 (93.2%) and 104 (88.9%), the P50's median point error
    69% -> 46%; with its 64-slot 18.95 requests/s fit (no fixed cost) refused below its
    batches, 105 answered: 105, 100 and 97 (92.4%) inside, at median widths x1.95, x11.90
    and x16.25 (99 P50s inside before the band took the step under the batch a fit rests
    on; x10.07 and x12.22 for TTFT before its fast end took the prompt cost's low end)
    (docs/advise.md, "The fourth recording", "A fixed cost at zero", "The prompt cost's
    low end")."""
    fourth, s = held_recording(FOURTH_SWEEP, FOURTH_TABLE, "NVIDIA H100")
    assert answered(s) == (105, 105, (105, 100, 97)), s
    assert per_figure(s, "width_median") == [1.95, 11.9, 16.25], s
    assert flagged(fourth) == ["s64-r3.79"], flagged(fourth)
    fitted = with_fitted_prompt_cost(monkeypatch, FOURTH_SWEEP)
    assert (answered(fitted), per_figure(fitted, "width_median")) == (
        (105, 105, (105, 99, 97)),
        [2.29, 10.07, 12.22],
    ), fitted
    answering_zero_fixed_cost(monkeypatch)
    out = calibrate(FOURTH_SWEEP)["summary"]
    assert answered(out) == (117, 93, (113, 109, 104)), out
    assert per_figure(out, "width_median") == [2.2, 10.07, 13.29], out
    assert round(out["ttft_p50"]["error_median"], 2) == 0.46
    before_shared_prefill(monkeypatch)
    before = calibrate(FOURTH_SWEEP)["summary"]
    assert tuple(before[k]["inside"] for k in FIGURES) == (113, 101, 106), before
    assert round(before["ttft_p50"]["error_median"], 2) == 0.69


def test_the_overhead_is_net_of_the_first_step_s_other_prompts() -> None:
    """Two requests sent together to an idle worker share their first step: each TTFT is
    that step (1 ms + 40 us for each of both prompts) plus 10 ms its client adds. Net of
    the other prompt the overhead is the 10 ms; left in, the other prompt's 4-32 ms."""
    a, p = 1e-3, 40e-6
    reqs = []
    for n, (x, y) in enumerate([(100, 800), (800, 100), (400, 400)] * 10):
        ttft = a + p * (x + y) + 0.010
        reqs += [
            twin.Request(n, ttft, ttft + 0.05, x, 20),
            twin.Request(n, ttft, ttft + 0.05, y, 20),
        ]
    quantiles, per_prompt, _ = twin.client_overhead(reqs, 4, a, 0.5e-3, p)
    assert quantiles == pytest.approx((0.010,) * twin.OVERHEAD_QUANTILES)
    assert per_prompt == pytest.approx(0.0, abs=1e-9)


def test_the_overhead_follows_the_request_s_own_prompt_into_the_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first token that costs 20 ms whatever the prompt, where the step fit says 40 us a
    prompt token: the overhead's part per prompt token cancels it (-40 us), and the replay
    gives 20 ms for a short and a long prompt alike. Drawn at random instead, an 800-token
    prompt gets the overhead of a 100-token one about half the time: 48 ms."""
    a, k, p = 1e-3, 0.5e-3, 40e-6
    reqs = [twin.Request(n, 0.020, 0.070, (100, 800)[n % 2], 20) for n in range(40)]
    quantiles, per_prompt, ref = twin.client_overhead(reqs, 4, a, k, p)
    # the first request, sent before any first token, is left out: 20 long and 19 short
    assert (per_prompt, ref) == (pytest.approx(-p), pytest.approx((20 * 800 + 19 * 100) / 39))
    fit = StepFit(a=a, k=k, p=p, k_source="fitted", batch_min=1.0, batch_max=2.0,
                  intervals=40, residual=0.05, overhead=quantiles, overhead_per_prompt=per_prompt,
                  prompt_ref=ref)  # fmt: skip

    def first_token(fit: StepFit, prompt: float) -> tuple[float, float]:
        sends = [2.0 * n for n in range(21)]  # one at a time: no wait, no step in flight
        load = twin.Load(span=40.0, arrival_rate=0.5, prompt_tokens=prompt, output_tokens=20,
                         prompts=(prompt,) * len(sends))  # fmt: skip
        out = twin.simulate(fit, load, twin.Setting(slots=4), arrivals=sends)
        return out.ttft_p50, out.ttft_p95

    for prompt in (100.0, 800.0):
        assert first_token(fit, prompt) == pytest.approx((0.020, 0.020)), prompt
    monkeypatch.setattr(twin, "OVERHEAD_PER_PROMPT", False)
    drawn, _, _ = twin.client_overhead(reqs, 4, a, k, p)
    random_draw = replace(fit, overhead=drawn, overhead_per_prompt=0.0)
    assert first_token(random_draw, 800.0)[1] == pytest.approx(0.048)


def test_the_throughput_band_s_resolution_is_an_answer_s_time_from_its_admission(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A measured throughput ends with one answer's last token, so the band is widened by
    one answer's time over the window. That time runs from the answer's admission to a
    slot: 40 requests sent at once to 4 slots wait up to nine answers in the queue, which
    the replay itself gives, so counting from the send (as before) widened the band by
    that wait again. On the recordings: the H200 sweep's throughput band x2.46 -> x2.04 at
    117/117 inside, the sixth H100 recording's x2.19 -> x1.90 at 90 -> 89/90, the same
    counts on every other recording (docs/advise.md, "The throughput band's
    resolution")."""
    fit = StepFit(a=10e-3, k=0.0, p=0.0, k_source="fitted", batch_min=1.0, batch_max=4.0,
                  intervals=40, residual=0.05)  # fmt: skip
    load = twin.Load(span=1.0, arrival_rate=40.0, prompt_tokens=10, output_tokens=20)
    out = twin.simulate(fit, load, twin.Setting(slots=4), arrivals=[0.0] * 40)
    # a 10 ms step, 20 tokens an answer (its first with its prompt), ten answers of 4
    assert out.window == pytest.approx(10 * 20 * 10e-3)
    assert out.service_mean == pytest.approx(20 * 10e-3)
    assert out.e2e_mean == pytest.approx(sum(20 * 10e-3 * (n + 1) for n in range(10)) / 10)

    def widened() -> tuple[float, float]:
        one = whatif.Figures({}, 1.0, 0.0, 0.0, 0.0, 0.0, None, None)
        lo, hi = whatif._resolution((one, one), out, [0.0] * 40)
        return lo.throughput, hi.throughput

    assert widened() == pytest.approx((0.9, 1.1))  # one answer's 0.2 s over 2 s
    resolution_from_send(monkeypatch)
    assert widened() == pytest.approx((0.45, 1.55))  # 1.1 s, its wait counted in
    for sweep, before in ((H200_SWEEP, (117, 2.46)), (SIXTH_SWEEP, (90, 2.19))):
        s = calibrate(sweep)["summary"]["throughput"]
        assert (s["inside"], round(s["width_median"], 2)) == before


def test_requests_given_up_on_are_not_replayed_at_the_time_they_were_given_up() -> None:
    """The recorder gives up on what is still open when its drain ends and writes those
    requests then, with no send time (77 of 233 in the fourth recording's 4-slot run at
    18.95 requests/s). The replay's arrivals leave them out; replayed at the give-up time
    they came to an idle server and pulled the run's replayed TTFT down."""
    tr = read_trace(DATA / "h100-fourth" / "sweep-s4-r18.95.jsonl.gz")
    start, end = load_phase(tr)
    given_up = [t for t, r in tr.client if r.get("cancelled")]
    assert len(given_up) == 77 and min(given_up) > end - 0.1
    _, _, sends = fit_trace(tr)
    answered = [t for t, r in tr.client if r.get("ok")]
    assert len(sends) == len(answered) == 156
    # the arrivals span the answered sends (7 s of the 12 s load), not the 20 s to the
    # give-up
    assert sends[-1] - sends[0] == pytest.approx(max(answered) - min(answered))
    assert max(answered) - start < 7.5


def test_the_h200_sweep_is_out_of_sample_for_every_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Recorded on an H200 after every setting but the prompt cost's low end was chosen:
    of 210 held-out pairs 93 are refused and 117 answered; throughput 117 (100%), TTFT
    P50 114 (97.4%) and P95 108 (92.3%) inside, at median widths x2.04, x16.44 and x16.24
    (x2.46 for throughput before its resolution was an answer's time from admission; x2.45, x15.53 and x15.37 before the band took the step under the batch a fit rests
    on, the same pairs inside) and median point errors 7%, 56% and 76%. Out of sample, before the band's fast end
    took the prompt cost's low end (chosen after reading it): 117, 113 (96.6%) and 105
    (89.7%, one pair short of 90%) at x2.45, x10.35 and x11.70. The two light fits whose
    replay misses their own P95 by over 50% are flagged; the 95 pairs of the trusted fits
    hold 95, 93 and 87 (91.6%) either way: the three more P95s inside are the flagged
    32-slot light fit's, whose prompt cost (153 us a token) its refits put at 107 at the
    low end.
    Before the prompts of the first
    step: 117, 104 and 103 (docs/advise.md, "The H200 sweep", "The prompt cost's low
    end")."""
    h200, s = held_recording(H200_SWEEP, H200_TABLE, "NVIDIA H200")
    assert answered(s) == (117, 93, (117, 114, 108)), s
    assert min(s[k]["inside_share"] for k in FIGURES) >= COVERAGE
    assert per_figure(s, "width_median") == [2.04, 16.44, 16.24]
    assert per_figure(s, "error_median") == [0.07, 0.56, 0.76]
    assert flagged(h200) == ["s32-r3.79", "s64-r3.79"], flagged(h200)

    def trusted(result: dict) -> tuple[int, ...]:
        t = calibration_summary([r for r in result["rows"] if r["fit_trusted"]])
        return (t["throughput"]["pairs"], *(t[k]["inside"] for k in FIGURES))

    assert trusted(h200) == (95, 95, 93, 87)
    fitted_prompt_cost(monkeypatch)
    out = calibrate(H200_SWEEP)
    assert answered(out["summary"]) == (117, 93, (117, 113, 105)), out["summary"]
    assert out["summary"]["ttft_p95"]["inside_share"] < COVERAGE
    assert per_figure(out["summary"], "width_median") == [2.45, 10.35, 11.7]
    assert trusted(out) == (95, 95, 93, 87)
    before_shared_prefill(monkeypatch)
    assert inside_counts(H200_SWEEP) == (117, 104, 103)


def test_the_fifth_recording_is_out_of_sample_for_every_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recorded on an H100 after the H200 sweep, nothing changed between, so out of
    sample: of 210 held-out pairs 93 refused and 117 answered; throughput 115 (98.3%),
    TTFT P50 108 (92.3%) and P95 99 (84.6%) inside, at median widths x2.35, x13.21 and
    x14.32 and median point errors 7%, 46% and 62%. With its 32-slot 18.95 requests/s
    fit (no fixed cost) refused below its batches, chosen after reading it (in-sample):
    108 answered, 107, 103 and 95 (88.0%) inside at x2.44, x13.04 and x12.84; with the
    band's fast end at the prompt cost's low end as well, 107, 104 and 95 at x2.44, x14.28
    and x17.29; with the step under the batch a fit rests on as well (shipped), 107, 106
    and 97 (89.8%) at x2.44, x15.85 and x17.29 (throughput x1.97 since its resolution is an
    answer's time from admission). The 64-slot light run's fit is flagged as on every warmed recording
    (docs/advise.md, "The fifth recording", "A fixed cost at zero", "The prompt cost's
    low end")."""
    fifth, s = held_recording(FIFTH_SWEEP, FIFTH_TABLE, "NVIDIA H100")
    assert answered(s) == (108, 102, (107, 106, 97)), s
    assert (
        min(s[k]["inside_share"] for k in FIGURES[:2]) >= COVERAGE > s["ttft_p95"]["inside_share"]
    )
    assert per_figure(s, "width_median") == [1.97, 15.85, 17.29]
    assert flagged(fifth) == ["s64-r3.79"], flagged(fifth)
    fitted = with_fitted_prompt_cost(monkeypatch, FIFTH_SWEEP)
    assert (answered(fitted), per_figure(fitted, "width_median")) == (
        (108, 102, (107, 103, 95)),
        [2.44, 13.04, 12.84],
    ), fitted
    answering_zero_fixed_cost(monkeypatch)
    out = calibrate(FIFTH_SWEEP)["summary"]
    assert answered(out) == (117, 93, (115, 108, 99)), out
    assert per_figure(out, "width_median") == [2.35, 13.21, 14.32]
    assert per_figure(out, "error_median") == [0.07, 0.46, 0.62]


def test_a_line_with_no_fixed_cost_is_refused_below_its_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fifth recording's 32-slot 18.95 requests/s fit saw batches 18.5-31.6 and its
    fixed cost came out at zero: asked for 4 slots it refuses and says why; within its
    batches it answers; with the refusal off it answers 4 slots, extrapolated below (the
    4-slot runs it missed that way are in docs/advise.md, "A fixed cost at zero")."""
    obs, fit, _ = fit_trace(read_trace(DATA / "h100-fifth" / "sweep-s32-r18.95.jsonl.gz"))
    assert fit.a == 0 and fit.slope_fitted and fit.batch_min > 18
    with pytest.raises(NotEnough, match=r"fixed cost came out at zero.*below 18\.5 sequences"):
        predict(obs, "max-num-seqs", 4, fit)
    assert predict(obs, "max-num-seqs", 24, fit).range_note.startswith("within the observations")
    monkeypatch.setattr(whatif, "REFUSE_BELOW_ZERO_FIXED_COST", False)
    assert predict(obs, "max-num-seqs", 4, fit).range_note.startswith("extrapolated below")


def test_the_settled_recording_is_out_of_sample_for_every_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recorded on an H100 with --settle after every setting was chosen: each load's
    first requests no longer wait for the warm-up's copies (the unrecorded request before
    the 64-slot first load took 0.94 s; the load's first five at most 0.10 s), and no fit
    is flagged. Of 210 held-out pairs 117 are refused and 93 answered: throughput 92,
    TTFT P50 88 (94.6%) and P95 85 (91.4%) inside, at median widths x2.06, x8.31 and
    x10.73 (84 P95s at x7.82 and x10.73 before the band took the step under the batch a
    fit rests on) and median point errors 9%, 63% and 75%. Before the band's fast end took the
    prompt cost's low end (chosen after reading it): 92, 84 (90.3%) and 82 (88.2%) at
    x2.67, x7.34 and x10.72. Without the refusal below the batches as well (its
    out-of-sample check): 114 answered, 109, 102 (89.5%) and 97 (85.1%) (docs/advise.md,
    "The settled recording", "The prompt cost's low end")."""
    settled, s = held_recording(SETTLED_SWEEP, SETTLED_TABLE, "NVIDIA H100")
    assert all(read_trace(p).header["load"]["settled"] for p in SETTLED_SWEEP)
    runs = json.loads((DATA / "h100-settled" / "sweep.json").read_text())
    first_64 = next(r for r in runs if r.get("slots") == 64 and r.get("rate") == 3.79)
    assert first_64["settle_ttft_s"] > 0.9
    tr = read_trace(DATA / "h100-settled" / "sweep-s64-r3.79.jsonl.gz")
    start, end = load_phase(tr)
    load = requests_of((t, r) for t, r in tr.client if start - 1 <= t <= end)
    first = sorted(load, key=lambda r: r.sent)[:5]
    assert max(r.ttft for r in first) < 0.11, first
    assert flagged(settled) == [], flagged(settled)
    assert shipped_figures(s) == ((93, 117, (92, 88, 85)), [2.06, 8.31, 10.73], [0.09, 0.63, 0.75])
    assert min(s[k]["inside_share"] for k in FIGURES) >= COVERAGE
    fitted = with_fitted_prompt_cost(monkeypatch, SETTLED_SWEEP)
    assert (answered(fitted), per_figure(fitted, "width_median")) == (
        (93, 117, (92, 84, 82)),
        [2.67, 7.34, 10.72],
    ), fitted
    assert fitted["ttft_p50"]["inside_share"] >= COVERAGE > fitted["ttft_p95"]["inside_share"]
    answering_zero_fixed_cost(monkeypatch)
    assert answered(calibrate(SETTLED_SWEEP)["summary"]) == (114, 96, (109, 102, 97))


def test_the_sixth_recording_is_out_of_sample_for_the_prompt_cost_s_low_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recorded on an H100 with --settle after the prompt cost's low end shipped, with a
    server built off the device (bench/device/build_cuda_server.sh): out of sample for
    every setting then, 120 of 210 held-out pairs refused and 90 answered, throughput 90,
    TTFT P50 82 (91.1%) and P95 79 (87.8%) inside; 80 and 78 before the prompt cost's low
    end. 9 of its 11 P95 misses came from one fit (64 slots at 9.1 requests/s, 5.62 ms +
    0.192 ms a sequence over batches 3.2-22.6) predicting lighter runs' steps dearer than
    they were; with the step under the batch that fit rests on taken into the band,
    chosen after reading it (in-sample): 90, 85 (94.4%) and 82 (91.1%) at median widths
    x2.19, x12.06 and x15.35; 89 throughputs at x1.90 since the throughput band's resolution
    is an answer's time from admission (docs/advise.md, "The sixth recording")."""
    sixth, s = held_recording(SIXTH_SWEEP, SIXTH_TABLE, "NVIDIA H100")
    assert "built off the device" in read_trace(SIXTH_SWEEP[0]).header["source"]
    assert all(read_trace(p).header["load"]["settled"] for p in SIXTH_SWEEP)
    assert flagged(sixth) == [], flagged(sixth)
    assert shipped_figures(s) == ((90, 120, (89, 85, 82)), [1.9, 12.06, 15.35], [0.06, 0.59, 0.78])
    assert min(s[k]["inside_share"] for k in FIGURES) >= COVERAGE
    before_under_ref(monkeypatch)
    out = calibrate(SIXTH_SWEEP)["summary"]
    assert answered(out) == (90, 120, (90, 82, 79)), out
    assert out["ttft_p95"]["inside_share"] < COVERAGE
    fitted_prompt_cost(monkeypatch)
    assert inside_counts(SIXTH_SWEEP) == (90, 80, 78)


def test_under_the_batch_a_fit_rests_on_the_band_runs_down_to_a_proportional_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sixth recording's 64-slot 9.1 requests/s fit rests on batch 16.4 (its steps'
    time-weighted mean) and saw 3.2-22.6: asked for 8 slots, within its batches but under
    16.4, the band also takes the step in proportion to the batch through the step at
    16.4, and the range note says so; at or above 16.4, and below 3.2 (where the band
    below the batches holds), nothing is added."""
    obs, fit, _ = fit_trace(read_trace(DATA / "h100-sixth" / "sweep-s64-r9.1.jsonl.gz"))
    assert (round(fit.batch_min, 1), round(fit.b_ref, 1)) == (3.2, 16.4)
    fast, slow = twin.under_ref_fits(fit, 8)
    spread = twin.speed_spread(fit)
    per_seq = fit.step(fit.b_ref) / fit.b_ref
    assert fast.a == slow.a == 0.0
    assert fast.k == pytest.approx(per_seq * (1 - spread))
    assert slow.k == pytest.approx(per_seq * (1 + spread))
    # an 8-sequence step: 4.3 ms at the proportional corner, 7.2 ms on the fitted line
    assert round(per_seq * 8 * 1e3, 1) == 4.3 and round(fit.step(8) * 1e3, 1) == 7.2
    assert twin.under_ref_fits(fit, 17) == [] and twin.under_ref_fits(fit, 2) == []
    note = predict(obs, "max-num-seqs", 8, fit).range_note
    assert "below 16.4, the batch the step rests on" in note, note
    assert "the batch the step rests on" not in predict(obs, "max-num-seqs", 20, fit).range_note
    monkeypatch.setattr(twin, "BAND_UNDER_REF", False)
    assert twin.under_ref_fits(fit, 8) == []


def test_the_seventh_recording_is_out_of_sample_for_every_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recorded on an H100 with --settle after every setting shipped (the step under the
    batch a fit rests on and the throughput band's resolution from admission included),
    its server built off the device: 117 of 210 held-out pairs refused, 93 answered;
    throughput 92 (98.9%), TTFT P50 91 (97.8%) and P95 82 (88.2%) inside, at median widths
    x1.86, x10.32 and x15.36 and median point errors 5%, 46% and 50%. Six of the 11 P95
    misses are light runs measured under the bands of the 16- and 64-slot fits at 9.1
    requests/s. Before the prompt cost's low end: 81 P95s inside (docs/advise.md, "The
    seventh recording")."""
    seventh, s = held_recording(SEVENTH_SWEEP, SEVENTH_TABLE, "NVIDIA H100")
    assert "built off the device" in read_trace(SEVENTH_SWEEP[0]).header["source"]
    assert all(read_trace(p).header["load"]["settled"] for p in SEVENTH_SWEEP)
    assert flagged(seventh) == [], flagged(seventh)
    assert shipped_figures(s) == ((93, 117, (92, 91, 82)), [1.86, 10.32, 15.36], [0.05, 0.46, 0.5])
    # throughput and P50 at the goal, P95 under it out of sample
    assert s["ttft_p50"]["inside_share"] >= COVERAGE > s["ttft_p95"]["inside_share"]
    p95 = [(r["fit_trace"].rsplit("sweep-", 1)[1], under) for r, k, under in misses(seventh)
           if k == "ttft_p95"]  # fmt: skip
    under_medium = [
        f for f, under in p95 if under and f in ("s16-r9.1.jsonl.gz", "s64-r9.1.jsonl.gz")
    ]
    assert (len(p95), len(under_medium)) == (11, 6), p95
    assert answered(with_fitted_prompt_cost(monkeypatch, SEVENTH_SWEEP)) == (93, 117, (92, 91, 81))
