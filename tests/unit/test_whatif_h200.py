"""The what-if twin against the real CUDA ``llama-server`` on an H200 (issue 31, item 4).

The traces under ``tests/data/traces/`` were recorded on the lent H200 by
``bench/device/llamacpp_trace.py``: a 0.7 B F16 model at ``--parallel`` 4, 8, 16, 32
and 64 under one open-loop Poisson load (10.21 requests/s for 25 s, 128 tokens an
answer), and a long run at ``--parallel 8`` (idle, 4 closed-loop streams, 48 streams,
idle). The tolerances here are the errors measured in docs/advise.md ("H200"), not
the issue's targets where those are not met: throughput from the long run within
25% at every answered slot count, the 4-slot run replayed from its own fit within
the targets, and TTFT across slot counts held to its direction only (near
saturation a 3% capacity error moves TTFT by an order of magnitude; the docs say
where and why).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.support.proc import REPO

from inferwatch.advise.trace import (
    TARGET,
    fit_trace,
    load_phase,
    measured,
    predict_runs,
    read_trace,
)
from inferwatch.advise.whatif import observe
from inferwatch.engines import contract
from inferwatch.pack.reading import total

DATA = REPO / "tests" / "data" / "traces"
LONG = DATA / "h200-llamacpp.jsonl.gz"
SWEEP = [
    REPO / "tests" / "data" / "whatif" / "h200" / f"sweep-s{n}.jsonl.gz" for n in (4, 8, 16, 32, 64)
]
#: the client figures docs/validation.md ("Slot sweep") reports: tokens/s, TTFT P50, P95
RECORDED = {
    4: (944, 5.191, 9.817),
    8: (1276, 0.921, 1.351),
    16: (1276, 0.055, 0.520),
    32: (1251, 0.046, 0.152),
    64: (1261, 0.054, 0.160),
}
#: |predicted - measured| / measured of the throughput, fitted on the long run
THROUGHPUT_TOLERANCE = 0.25


def by_slots(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["slots"]: r for r in rows}


def test_the_reader_skips_a_sample_taken_before_the_engine_was_scraped() -> None:
    trace = read_trace(SWEEP[0])
    start, end = load_phase(trace)
    scrapes = trace.scrapes(start - 7.5, end + 1)
    # the agent's first exposition has no engine series yet
    assert total(scrapes[0][1], contract.GENERATION_TOKENS, worker="llama") is None
    obs = observe(scrapes, None, 128)
    assert obs.slots == 4 and obs.span > 30
    assert obs.queue_mean > 10 and obs.reading.running_when_queued == 4
    fit_trace(trace)  # six busy windows: fitted, not refused


def test_client_records_of_the_h200_traces_are_sent_times_after_reading() -> None:
    """The recorder wrote each client line when the answer ended ("client_time":
    "answered"); read back, the sends span the 25 s of load at every slot count and
    the client figures are the ones docs/validation.md reports."""
    sends = []
    for path in SWEEP:
        trace = read_trace(path)
        assert trace.header["client_time"] == "answered"
        start, end = load_phase(trace)
        clients = [(t, r) for t, r in trace.client if start - 1 <= t <= end]
        t = sorted(t - start for t, _ in clients)
        assert len(t) == 259 and t[-1] < 25.0
        sends.append(t)
        m = measured(clients)
        thr, p50, p95 = RECORDED[trace.slots()]
        assert abs(m.throughput - thr) / thr < 0.01
        # (docs/validation.md's P95 interpolates differently: within 1%)
        assert abs(m.ttft_p50 - p50) / p50 < 0.01 and abs(m.ttft_p95 - p95) / p95 < 0.01
    # the same open-loop load (one seed) at every slot count
    for other in sends[1:]:
        assert max(abs(a - b) for a, b in zip(sends[0], other, strict=True)) < 0.05


def test_fitted_on_the_long_run_the_sweep_is_within_the_documented_tolerance() -> None:
    rows = by_slots(predict_runs(LONG, SWEEP))
    f = rows[4]["fit"]
    # batch sizes 2.5-8 observed: the slope is fitted, not assumed
    assert f["k_source"] == "fitted" and f["batch"][1] == 8.0 and f["k_ms"] > 0
    answered = [rows[n] for n in (4, 8, 16)]
    assert all("error" in r for r in answered)
    assert rows[16]["extrapolated"] and not rows[8]["extrapolated"]
    # 4x and 8x the largest batch observed: refused, with the furthest it answers
    for n in (32, 64):
        assert "refused" in rows[n] and "max-num-seqs=16" in rows[n]["refused"]
    for r in answered:
        assert abs(r["error"]["throughput"]) <= THROUGHPUT_TOLERANCE, r
    # within the observed batch sizes (8 slots) and just past it (16): the 15%
    assert abs(rows[8]["error"]["throughput"]) <= TARGET["throughput"]
    assert abs(rows[16]["error"]["throughput"]) <= TARGET["throughput"]
    # the direction of TTFT: more slots, shorter first-token latency, as measured
    p50 = [rows[n]["predicted"]["ttft_p50"] for n in (4, 8, 16)]
    assert p50[0] > p50[1] > p50[2]
    assert rows[4]["predicted"]["ttft_p50"] > 1.0  # the 4-slot run queued for seconds
    # the measured 16-slot TTFT P50 lies inside the extrapolation band
    lo, hi = rows[16]["band"]
    assert lo["ttft_p50"] <= rows[16]["measured"]["ttft_p50"] <= hi["ttft_p50"]


def test_the_4_slot_run_replayed_from_its_own_fit_meets_the_targets() -> None:
    rows = by_slots(predict_runs(SWEEP[0], SWEEP))
    own = rows[4]
    for k, limit in TARGET.items():
        assert abs(own["error"][k]) <= limit, (k, own["error"][k])
    # 8 slots: 2x the batch observed, answered with a band; throughput within 15%
    assert rows[8]["extrapolated"] and abs(rows[8]["error"]["throughput"]) <= 0.15
    lo, hi = rows[8]["band"]
    assert lo["ttft_p50"] <= rows[8]["measured"]["ttft_p50"] <= hi["ttft_p50"]
    assert all("refused" in rows[n] for n in (16, 32, 64))


def test_suggest_on_the_slot_limited_h200_run_scales_out_and_shows_the_slots() -> None:
    """Issue 31's case: queue dozens deep, every slot busy, the GPU ~60% busy and VRAM
    nearly empty. The queue is over the slots, InferenceQueueOverCapacity's condition,
    with the GPU past the 40 % line: scale out, as ``inferwatch advise`` and the runbook
    say (issue 40); what more slots would do follows for comparison (to what, with the
    predicted TTFT and its band)."""
    args = ["--trace", str(SWEEP[0]), "--what-if", "suggest", "--output-tokens", "128", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "inferwatch.cli", "advise", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)["suggestion"]
    assert first["paging"] and (first["lever"], first["flag"]) == ("replicas", "replicas")
    assert "InferenceQueueOverCapacity" in first["reason"] and first["value"] >= 2
    s = first["then"]
    assert s["lever"] == "slots" and s["flag"] == "max-num-seqs" and not s["advised"]
    assert 4 < s["value"] <= 8  # the twin goes to 2x the batch observed
    pred = s["prediction"]
    # the twin's replay of the 4-slot run: its queue and TTFT as the clients saw them
    assert pred["current"]["queue"] > 15
    assert 0.7 * RECORDED[4][1] <= pred["current"]["ttft_p50"] <= 1.3 * RECORDED[4][1]
    # at the suggested slot count the queue drains and TTFT falls by far
    assert pred["predicted"]["queue"] < 1.0
    assert pred["predicted"]["ttft_p50"] < pred["current"]["ttft_p50"] / 10
    assert pred["band"] is not None  # 2x past the batch observed: with its band


def test_bench_predict_prints_the_table() -> None:
    """``bench/bench_whatif.py predict``: the fit, one row per slot count, the errors."""
    bench = REPO / "bench" / "bench_whatif.py"
    done = subprocess.run(
        [sys.executable, str(bench), "predict", "--fit", str(LONG), *map(str, SWEEP)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"fit on {LONG}") and "slope fitted" in lines[0]
    rows = [ln.split("|") for ln in lines if ln.split("|")[0].split()[-1:] in (["4"], ["8"])]
    assert len(rows) == 2 and all("%" in r[1] for r in rows)  # 4 and 8 slots answered
    assert sum("refused" in ln for ln in lines) == 2  # 32 and 64
    assert any(ln.startswith("throughput: |error| median") for ln in lines)
