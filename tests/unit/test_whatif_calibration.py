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
and its shares as published, under 90% for both TTFT figures (docs/advise.md).
"""

from __future__ import annotations

import csv
import math

import pytest
from tests.support.proc import REPO

from inferwatch.advise import twin
from inferwatch.advise.trace import calibrate, fit_trace, read_trace
from inferwatch.advise.twin import NotEnough
from inferwatch.advise.whatif import predict

DATA = REPO / "tests" / "data" / "whatif"
#: the CPU llama-server sweeps: --parallel 1, 2, 4 at 4, 5.5 and 8 requests/s
CPU_SWEEP = sorted(DATA.glob("parallel-*.jsonl.gz")) + sorted(
    p for d in ("rate-5.5", "rate-8") for p in (DATA / d).glob("parallel-*.jsonl.gz")
)
TABLE = DATA / "calibration-cpu.csv"
#: the GPU sweep: --parallel 4, 8, 16, 32, 64 at 3.48 and 6.96 requests/s on an H100
GPU_SWEEP = sorted((DATA / "h100").glob("sweep-s*.jsonl.gz"))
GPU_TABLE = DATA / "calibration-h100.csv"
#: the fresh GPU sweep: --parallel 4, 16, 64 at 4.74 and 11.86 requests/s, prompts of 40,
#: 160 and 320 words mixed, on an H100
MIX_SWEEP = sorted((DATA / "h100-mix").glob("sweep-s*.jsonl.gz"))
MIX_TABLE = DATA / "calibration-h100-mix.csv"
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
            lo, hi = sorted((r["band"][0][key], r["band"][1][key]))
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
    assert [f["trace"] for f in gpu["fits"] if "refused" in f or not f["trusted"]] == []
    s = gpu["summary"]
    assert (s["throughput"]["pairs"], s["refused"]) == (44, 46), s
    for key in FIGURES:
        assert s[key]["inside_share"] >= COVERAGE, (key, s[key])


def test_a_narrower_gpu_band_falls_short_of_90_percent() -> None:
    narrower = calibrate(GPU_SWEEP, band_z=twin.BAND_Z - 0.5)["summary"]
    assert min(narrower[k]["inside_share"] for k in FIGURES) < COVERAGE, narrower


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
    keeps 16/16 inside, TTFT P50 14/16 and P95 11/16: the 90% is missed out of sample
    for both TTFT figures (docs/advise.md, "The fresh sweep")."""
    assert_table(MIX_TABLE, mix)
    assert [f["trace"] for f in mix["fits"] if "refused" in f or not f["trusted"]] == []
    s = mix["summary"]
    assert (s["throughput"]["pairs"], s["refused"]) == (16, 14), s
    inside = {k: s[k]["inside"] for k in FIGURES}
    assert inside == {"throughput": 16, "ttft_p50": 14, "ttft_p95": 11}, inside
    assert s["ttft_p50"]["inside_share"] < COVERAGE and s["ttft_p95"]["inside_share"] < COVERAGE
    # the misses: the 16-slot 11.86 requests/s fit (batch 5.8-15.2) predicting 4 slots
    # under 11.86 too slow (both TTFT figures), and light-load TTFT of other servers
    misses = {
        (r["fit_trace"], r["trace"], k)
        for r in mix["rows"]
        if "band" in r
        for k in FIGURES
        if not min(b[k] for b in r["band"]) <= r["measured"][k] <= max(b[k] for b in r["band"])
    }
    assert ("h100-mix/sweep-s16-r11.86.jsonl.gz", "h100-mix/sweep-s4-r11.86.jsonl.gz",
            "ttft_p50") in misses  # fmt: skip
    assert not any(k == "throughput" for *_, k in misses), misses


def test_the_prompt_mix_gives_a_positive_overhead_and_a_prompt_cost(mix: dict) -> None:
    """With 93-, 372- and 745-token prompts mixed, every fit's client overhead is positive
    (the one-length sweep's ran -7.5 to +26 ms) and 4 of 6 fits find a prompt cost; the
    first token at no wait with a mean prompt lies in 15-50 ms as in the old sweep. The
    4-slot run at 11.86 requests/s ran at its slot limit (batch 3.4-4.0): its slope is
    assumed, and its overhead rests on the 6 requests that found a free slot."""
    by_run = {f["trace"]: f["fit"] for f in mix["fits"]}
    assumed = [t for t, f in by_run.items() if f["k_source"] != "fitted (client records)"]
    assert assumed == ["h100-mix/sweep-s4-r11.86.jsonl.gz"], assumed
    fits = list(by_run.values())
    assert all(f["overhead_ms"] > 0 for f in fits), fits
    assert sum(1 for f in fits if f["p_us"] > 0) == 4, fits
    for f in fits:
        no_wait = f["overhead_ms"] + f["a_ms"] + f["k_ms"] + f["p_us"] * 400 / 1e3
        assert 15 <= no_wait <= 50, (no_wait, f)
