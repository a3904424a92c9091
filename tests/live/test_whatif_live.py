"""The what-if twin against the real ``llama-server`` (CPU, tiny model): predicted vs measured.

``test_the_recorded_sweep_is_within_tolerance`` reads the traces committed under
``tests/data/whatif/`` (recorded by ``bench/bench_whatif.py record --rate 4`` on the
project's shared 2-core machine, docs/advise.md "Validation against a real engine")
and holds the twin to the tolerances measured there: throughput of every answered
slot count, and a run's own TTFT replayed from its own fit. TTFT across slot counts
is NOT held to a tolerance: on the shared machine it missed by 15-940% (the
engine's speed changes between and within runs; see the docs), and a test that
passed at any error would assert nothing. The live test records a fresh, shorter
pair (``--parallel`` 1 and 2) under one open-loop load past what 2 slots carry on the
machine at the time, and holds the throughput of each predicted from the other.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.support.llamaserver import require_server
from tests.support.proc import REPO

from inferwatch.advise.trace import compare

DATA = REPO / "tests" / "data" / "whatif"

#: |predicted - measured| / measured for a slot count predicted from another run
#: (docs/advise.md, "Validation against a real engine")
TOLERANCE = {"throughput": 0.30}
#: a run replayed from its own fit
SELF_TOLERANCE = {"throughput": 0.10, "ttft_p50": 0.60, "ttft_p95": 0.60}
LIVE_TOLERANCE = {"throughput": 0.80}


def judged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["fit_slots"] != r["slots"] and "error" in r]


def outside(rows: list[dict[str, Any]], tolerance: dict[str, float]) -> list[str]:
    return [
        f"fit {r['fit_slots']} -> {r['slots']}: {k} {r['error'][k]:+.0%}"
        for r in rows
        for k, limit in tolerance.items()
        if k in r["error"] and abs(r["error"][k]) > limit
    ]


def test_the_recorded_sweep_is_within_tolerance() -> None:
    paths = sorted(DATA.glob("parallel-*.jsonl.gz"))  # the rate-4 sweep
    assert len(paths) >= 3, f"the CPU sweep's traces are missing under {DATA}"
    rows = compare(paths)
    pairs = judged(rows)
    # every pair within the observed batch sizes is answered; far ones are refused
    assert len(pairs) >= 3
    assert all("refused" not in r for r in rows if r["slots"] <= r["fit_slots"])
    assert not outside(pairs, TOLERANCE), outside(pairs, TOLERANCE)
    own = [r for r in rows if r["fit_slots"] == r["slots"]]
    assert len(own) == len(paths)
    assert not outside(own, SELF_TOLERANCE), outside(own, SELF_TOLERANCE)
    # more slots never predicted slower under this overload
    by_fit: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if "predicted" in r:
            by_fit.setdefault(r["fit_slots"], []).append(r)
    for group in by_fit.values():
        group.sort(key=lambda r: r["slots"])
        p95 = [r["predicted"]["ttft_p95"] for r in group]
        assert p95 == sorted(p95, reverse=True), group


@pytest.mark.slow
def test_a_fresh_pair_of_runs_predicts_each_other(tmp_path: Path) -> None:
    require_server()
    from tests.support.tracerun import OpenLoad, carried_rate, record

    from inferwatch.advise.trace import read_trace

    # past what 2 slots carry on this machine now, so both runs stay busy through their
    # load (a fixed rate left a fast, idle machine's server idle between requests: too
    # few busy windows to fit; a busy one's saturated)
    shape = OpenLoad(rate=0.0, seconds=LIVE_SECONDS)  # the requests; the rate comes next
    rate = OVERLOAD * carried_rate(tmp_path / "capacity", 2, shape)
    assert rate > 0, "the server completed no request in the capacity probe"
    load = replace(shape, rate=rate)
    paths = [
        record(tmp_path / f"parallel-{n}.jsonl.gz", tmp_path / f"p{n}", n, load) for n in (1, 2)
    ]
    for p in paths:
        trace = read_trace(p)
        assert trace.agent and trace.engine
        assert all(r["ok"] for _, r in trace.client), "a request failed"
    rows = compare(paths)
    pairs = judged(rows)
    assert [(r["fit_slots"], r["slots"]) for r in pairs] == [(2, 1), (1, 2)]
    assert not outside(pairs, LIVE_TOLERANCE), outside(pairs, LIVE_TOLERANCE)
    for r in pairs:
        assert 0 < r["predicted"]["ttft_p50"] <= r["predicted"]["ttft_p95"]


#: the live pair's load (shorter than the committed sweep's): sends for this long at
#: OVERLOAD x the requests a second 2 slots carried in a closed loop just before
OVERLOAD = 1.2
LIVE_SECONDS = 35.0
