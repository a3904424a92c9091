"""pack/signals.py: each signal's evaluator and its PromQL give the same answer on the same
samples.

The agent's expositions of a small fleet (two workers, two GPUs: one reports NVML
utilization, the other, a MIG device, only GPM SM activity) are written every 15 s for
ten minutes with random values: counters with a reset, histograms, gauges. They are
parsed as advise parses an agent's ``/metrics`` (``advise.agent.parse_exposition``) and
handed to the evaluators; the same samples are backfilled into a real Prometheus
(``promtool tsdb create-blocks-from openmetrics``), which answers the rendered PromQL.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import asdict, replace
from typing import Any

import pytest
from tests.support.promblocks import PromOnBlocks, create_blocks

from inferwatch.advise.agent import parse_exposition
from inferwatch.engines import contract
from inferwatch.pack import reading as rd
from inferwatch.pack import signals as S
from inferwatch.pack.names import WORKER, WORKER_KEY
from inferwatch.pack.rules.recording import recording_rules
from inferwatch.pack.thresholds import load_thresholds

STEP = 15
END = 1_700_000_100  # a multiple of STEP: the last scrape
TIMES = [END - 600 + i * STEP for i in range(41)]
WINDOW = 300
BOUNDS = ("0.1", "0.5", "1.0", "2.5", "+Inf")
WORKERS = (
    {"worker": "a", "model": "m", "engine": "vllm"},
    {"worker": "b", "model": "m", "engine": "vllm"},
)
GPUS = ({"gpu": "0", "uuid": "GPU-0"}, {"gpu": "1", "uuid": "MIG-1"})
FULL_AT = 0.92
#: how the evaluators and the PromQL group: the labels the agent's exposition carries
BY_WORKER = "worker, model, engine"
BY_GPU = "gpu, uuid"
SELECTOR = '{job="inferwatch"}'


def _series() -> list[tuple[str, str, dict[str, str], list[float]]]:
    """(family, sample name, labels, one value per scrape), random but fixed."""
    rnd = random.Random(41)
    n = len(TIMES)
    out: list[tuple[str, str, dict[str, str], list[float]]] = []

    def gauge(values: list[float]) -> list[float]:
        return values

    def counter(start: float, most: float, reset_at: int | None = None) -> list[float]:
        values, v = [], start
        for i in range(n):
            v = rnd.uniform(0, most) if i == reset_at else v + rnd.uniform(0, most)
            values.append(round(v, 3))
        return values

    for i, w in enumerate(WORKERS):
        fam = contract
        out.append(
            (
                fam.QUEUE_DEPTH.name,
                fam.QUEUE_DEPTH.name,
                w,
                [float(rnd.randint(0, 30)) for _ in range(n)],
            )
        )
        running = [float(rnd.randint(4, 24)) for _ in range(n)]
        out.append((fam.REQUESTS_RUNNING.name, fam.REQUESTS_RUNNING.name, w, running))
        if i == 0:  # b's max_num_seqs is unknown: its capacity is the running batch
            # a's was lowered from 24 to 16 inside the window: its last, its peak differ
            limit = [24.0] * 25 + [16.0] * (n - 25)
            out.append((fam.MAX_NUM_SEQS.name, fam.MAX_NUM_SEQS.name, w, limit))
        # b's last scrape failed: its target was up before
        up = [1.0] * n if i == 0 else [1.0] * (n - 3) + [0.0, 1.0, 0.0]
        out.append((fam.TARGET_UP.name, fam.TARGET_UP.name, {"worker": w["worker"]}, up))
        info = {**w, "pid": str(100 + i), "version": "0.6.0"}
        out.append((fam.WORKER_INFO.name, fam.WORKER_INFO.name, info, [1.0] * n))
        # a runs on the first GPU, b on the MIG device
        on = {"worker": w["worker"], **GPUS[i]}
        out.append((fam.WORKER_GPU_INFO.name, fam.WORKER_GPU_INFO.name, on, [1.0] * n))
        kv = [round(rnd.uniform(0.5, 1.0), 3) for _ in range(n - 1)] + [0.95]
        out.append((fam.KV_CACHE_USAGE_RATIO.name, fam.KV_CACHE_USAGE_RATIO.name, w, kv))
        out.append(
            (
                fam.PREFIX_CACHE_HIT_RATIO.name,
                fam.PREFIX_CACHE_HIT_RATIO.name,
                w,
                [round(rnd.uniform(0, 1), 3) for _ in range(n)],
            )
        )
        started = (
            [1_699_990_000.0] * n if i == 0 else [1_699_990_000.0] * 30 + [END - 150.0] * (n - 30)
        )
        out.append(
            (fam.WORKER_START_TIME_SECONDS.name, fam.WORKER_START_TIME_SECONDS.name, w, started)
        )
        for reason in ("stop", "error"):
            finished = fam.REQUESTS_FINISHED
            out.append((finished.base, finished.name, {**w, "reason": reason}, counter(500, 5)))
        for family in (fam.REQUESTS_REJECTED, fam.PROMPT_TOKENS, fam.GENERATION_TOKENS):
            out.append((family.base, family.name, w, counter(1000, 50)))
        # b's engine restarted inside the window: its counter starts again near zero
        reset = 33 if i == 1 else None
        out.append((fam.PREEMPTIONS.base, fam.PREEMPTIONS.name, w, counter(100, 3, reset)))
        for family in S.HISTOGRAMS:
            cumulative = [0.0] * len(BOUNDS)
            rows: list[list[float]] = []
            for _ in range(n):
                added = 0.0
                for b in range(len(BOUNDS)):
                    added += rnd.randint(0, 4)
                    cumulative[b] += added
                rows.append(list(cumulative))
            for b, le in enumerate(BOUNDS):
                values = [row[b] for row in rows]
                out.append((family.name, family.name + "_bucket", {**w, "le": le}, values))
            out.append((family.name, family.name + "_count", w, [row[-1] for row in rows]))
        for family in (fam.WORKER_CPU_SECONDS, fam.WARMUPS):
            out.append((family.base, family.name, w, counter(50, 2)))
        for family in (fam.TARGET_SCRAPE_ERRORS, fam.WARMUP_FAILURES):
            for reason in ("connect", "timeout"):
                out.append((family.base, family.name, {**w, "reason": reason}, counter(3, 0.5)))
    for i, g in enumerate(GPUS):
        fam = contract
        if i == 0:
            util = [round(rnd.uniform(0, 1), 3) for _ in range(n)]
            out.append((fam.GPU_UTILIZATION_RATIO.name, fam.GPU_UTILIZATION_RATIO.name, g, util))
        sm = [round(rnd.uniform(0, 1), 3) for _ in range(n)]
        out.append((fam.GPU_SM_ACTIVE_RATIO.name, fam.GPU_SM_ACTIVE_RATIO.name, g, sm))
        memory = [round(rnd.uniform(0.2, 1), 3) for _ in range(n)]
        out.append((fam.GPU_MEMORY_USED_RATIO.name, fam.GPU_MEMORY_USED_RATIO.name, g, memory))
        used = [float(rnd.randint(10, 70) * 2**30) for _ in range(n)]
        out.append((fam.GPU_MEMORY_USED_BYTES.name, fam.GPU_MEMORY_USED_BYTES.name, g, used))
        info = {**g, "name": "NVIDIA H100 80GB HBM3", "mig_mode": "1" if i else "0"}
        out.append((fam.GPU_INFO.name, fam.GPU_INFO.name, info, [1.0] * n))
        process = fam.GPU_PROCESS_MEMORY_USED_BYTES
        worker = {**g, "pid": str(100 + i), "process": "python3", "worker": WORKERS[i]["worker"]}
        out.append((process.name, process.name, worker, [round(v * 0.9) for v in used]))
        if i == 0:  # a process of no worker, larger than the worker's: left out
            other = {**g, "pid": "7", "process": "Xorg"}
            out.append((process.name, process.name, other, [v + 2**30 for v in used]))
        energy = fam.GPU_ENERGY_JOULES
        out.append((energy.base, energy.name, g, counter(1e6, 4000)))
        xid = fam.GPU_XID_ERRORS
        out.append((xid.base, xid.name, {**g, "xid": "79"}, counter(2, 0.2)))
        ecc = fam.GPU_ECC_ERRORS
        for kind in ("corrected", "uncorrected"):
            out.append((ecc.base, ecc.name, {**g, "type": kind}, counter(0, 0.3)))
    # the agent's own collectors carry neither worker nor GPU labels: one group
    collect = contract.COLLECT_ERRORS
    for collector in ("nvml", "engine"):
        labels = {"collector": collector, "reason": "timeout"}
        out.append((collect.base, collect.name, labels, counter(1, 0.2)))
    return out


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _value(v: float) -> str:
    return repr(float(v))


def expositions() -> list[str]:
    """The agent's /metrics text at each scrape."""
    # the agent writes an info family as a gauge of value 1
    kinds = {f.name: f.kind.replace("info", "gauge") for f in contract.FAMILIES} | {
        f.base: f.kind.replace("info", "gauge") for f in contract.FAMILIES
    }
    series = _series()
    out = []
    for i in range(len(TIMES)):
        lines: list[str] = []
        seen: set[str] = set()
        for family, sample, labels, values in series:
            if family not in seen:
                seen.add(family)
                lines.append(f"# TYPE {family} {kinds[family]}")
            lines.append(f"{sample}{_labels(labels)} {_value(values[i])}")
        out.append("\n".join(lines) + "\n")
    return out


def openmetrics(scrapes: list[S.Scrape]) -> str:
    """The same samples as Prometheus stores them (job and instance added), by series."""
    per: dict[str, list[str]] = {}
    for scrape in scrapes:
        for name, labels, value in scrape.samples:
            stored = {"job": "inferwatch", "instance": "agent:9400", **labels}
            per.setdefault(name, []).append(
                f"{name}{_labels(stored)} {_value(value)} {scrape.time}"
            )
    return "\n".join(line for lines in per.values() for line in lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def scrapes() -> list[S.Scrape]:
    return [
        S.Scrape(t, parse_exposition(text)) for t, text in zip(TIMES, expositions(), strict=True)
    ]


@pytest.fixture(scope="module")
def window(scrapes: list[S.Scrape]) -> list[S.Scrape]:
    """The scrapes a ``[5m]`` range at the last one holds (both ends included)."""
    return [s for s in scrapes if s.time >= END - WINDOW]


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, scrapes: list[S.Scrape]
) -> Iterator[PromOnBlocks]:
    tmp = tmp_path_factory.mktemp("signals")
    (tmp / "agent.om").write_text(openmetrics(scrapes))
    server = PromOnBlocks(tmp, create_blocks(tmp / "agent.om", tmp / "blocks"))
    try:
        yield server.loaded(contract.QUEUE_DEPTH.name, END)
    finally:
        server.stop()


def _answer(result: list[dict[str, Any]], by: str) -> dict[tuple[str, ...], float]:
    keys = S.labels_of(by)
    out = {}
    for item in result:
        value = float(item["value"][1])
        if not math.isnan(value):
            out[tuple(item["metric"].get(k, "") for k in keys)] = value
    return out


def _by(signal: S.Signal) -> str:
    return BY_WORKER if "worker" in signal.family.labels else BY_GPU


def _same(got: dict[tuple[str, ...], float], want: dict[tuple[str, ...], float], what: str) -> None:
    assert want, f"{what}: the evaluator found nothing"
    assert set(got) == set(want), f"{what}: groups {sorted(got)} != {sorted(want)}"
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), f"{what} {key}"


# ----------------------------------------------------------------- PromQL == evaluator


@pytest.mark.slow
@pytest.mark.parametrize("signal", S.SIGNALS, ids=lambda s: s.name)
def test_each_signal_answers_like_its_promql(
    signal: S.Signal, prometheus: PromOnBlocks, window: list[S.Scrape]
) -> None:
    by = _by(signal)
    key = S.labels_of(by) + (("le",) if signal.bucketed else ())
    # a signal grouped with ``group`` (always 1) is compared by its values too
    for agg in (signal.agg, "max") if signal.agg == "group" else (signal.agg,):
        query = signal.render(selector=SELECTOR, window="5m", by=by, agg=agg)
        _same(
            _answer(prometheus.query(query, END), ", ".join(key)),
            signal.evaluate(window, by, agg),
            query,
        )


@pytest.mark.parametrize("signal", S.SIGNALS, ids=lambda s: s.name)
def test_each_signal_has_data_in_the_fleet(signal: S.Signal, window: list[S.Scrape]) -> None:
    """A signal with no series in the window would compare nothing with its PromQL."""
    points = signal.series(window)
    assert points, f"{signal.name}: no {signal.sample} series in the synthetic fleet"
    assert all(len(p) == len(window) for p in points.values()), signal.name


@pytest.mark.slow
@pytest.mark.parametrize("q", (0.5, 0.95, 0.99))
@pytest.mark.parametrize("family", S.LATENCY, ids=lambda f: f.name)
def test_latency_quantiles_answer_like_histogram_quantile(
    q: float, family: contract.Family, prometheus: PromOnBlocks, window: list[S.Scrape]
) -> None:
    buckets = S.bucket_rate(family)
    query = S.quantile(q, buckets.render(selector=SELECTOR, window="5m", by=BY_WORKER))
    want = S.evaluate_quantile(q, buckets, window, BY_WORKER)
    _same(_answer(prometheus.query(query, END), BY_WORKER), want, query)
    # the report's and advise's buckets (increase) give the same quantile
    assert S.evaluate_quantile(q, S.bucket_increase(family), window, BY_WORKER) == pytest.approx(
        want
    )


@pytest.mark.slow
def test_utilization_falls_back_to_sm_activity(
    prometheus: PromOnBlocks, window: list[S.Scrape]
) -> None:
    query = S.gpu_utilization(selector=SELECTOR, window="5m", by=BY_GPU)
    want = S.evaluate_gpu_utilization(window, BY_GPU)
    _same(_answer(prometheus.query(query, END), BY_GPU), want, query)
    assert set(want) == {("0", "GPU-0"), ("1", "MIG-1")}
    assert want[("1", "MIG-1")] == S.GPU_SM_ACTIVE_MEAN.evaluate(window, BY_GPU)[("1", "MIG-1")]


#: the fields a reading from scrapes takes from the agent alone, not from the query table
SCRAPE_ONLY = ("ttft", "tpot", "e2e", "slope", "running_when_queued", "ttft_p95_since_start")


@pytest.mark.slow
def test_a_reading_from_scrapes_is_the_reading_prometheus_gives_of_them(
    prometheus: PromOnBlocks, window: list[S.Scrape]
) -> None:
    """pack.reading's one query table: the fleet (two workers, a MIG device, a counter
    reset, a batch limit lowered in the window) read from its scrapes and from a real
    Prometheus holding them gives the same reading in every field of the table."""
    queries = rd.prometheus_queries(SELECTOR, f"{WINDOW}s")
    answers = {
        name: [(item["metric"], float(item["value"][1])) for item in prometheus.query(q, END)]
        for name, q in queries.items()
    }
    from_prometheus = {k[1]: r for k, r in rd.readings_from_answers(answers, END).items()}
    from_scrapes = rd.read_workers([(s.time, list(s.samples)) for s in window])
    assert list(from_scrapes) == list(from_prometheus) == ["a", "b"]
    for w, r in from_scrapes.items():
        got, want = asdict(r), asdict(from_prometheus[w])
        for name in SCRAPE_ONLY:
            del got[name], want[name]
        for name, value in want.items():
            same = pytest.approx(value) if isinstance(value, float) else value
            assert got[name] == same, (w, name)
        assert r.request_rate and r.gpu_util and r.xid_errors is not None  # not Nones alike


@pytest.mark.slow
def test_batch_capacity_answers_like_its_promql(
    prometheus: PromOnBlocks, window: list[S.Scrape]
) -> None:
    query = S.BATCH_CAPACITY.render(
        selector=SELECTOR, by=BY_WORKER, key="worker", full_at=str(FULL_AT)
    )
    want = S.BATCH_CAPACITY.evaluate(window, BY_WORKER, "worker", FULL_AT)
    _same(_answer(prometheus.query(query, END), BY_WORKER), want, query)
    last = {k: v for k, v in S.RUNNING.evaluate(window, BY_WORKER).items()}
    # a: max_num_seqs 16, or its running batch once the KV cache is full (0.95 here)
    assert want[("a", "m", "vllm")] == min(16.0, last[("a", "m", "vllm")])
    # b: no max_num_seqs, a full KV cache: the running batch
    assert want[("b", "m", "vllm")] == last[("b", "m", "vllm")]


@pytest.mark.slow
def test_over_capacity_answers_queue_deeper_than_capacity(
    prometheus: PromOnBlocks, window: list[S.Scrape]
) -> None:
    query = S.over_capacity(selector=SELECTOR, key="worker", full_at=str(FULL_AT))
    capacity = S.BATCH_CAPACITY.evaluate(window, "worker", "worker", FULL_AT)
    at = S.labels_of(BY_WORKER).index("worker")
    queues = S.QUEUE.evaluate(window, BY_WORKER)
    want = {k: float(q > capacity[(k[at],)]) for k, q in queues.items() if (k[at],) in capacity}
    _same(_answer(prometheus.query(query, END), BY_WORKER), want, query)
    # no queue equals its capacity here: a comparison turned round would answer otherwise
    assert all(q != capacity[(k[at],)] for k, q in queues.items()), (queues, capacity)


# ----------------------------------------------------------------- rules render from it


def test_the_rules_and_the_report_write_the_loops_conditions_once() -> None:
    """The waste line, the young-worker window and open requests: the alerts, the
    autoscaling rules and the report render each from one declaration, so a changed
    threshold moves them all."""
    from inferwatch.pack import loops as L
    from inferwatch.pack.names import GPU_UNDERUTILIZED, WORKER_COLD_START, names
    from inferwatch.pack.rules import autoscale
    from inferwatch.pack.rules.catalogue import alerts

    base = load_thresholds()
    t = replace(
        base,
        gpu_utilization=replace(base.gpu_utilization, waste_below=0.17),
        cold_start=replace(base.cold_start, within=421.0),
    )
    n, s = names(t), t.pack.selector()
    expr = {a.name: a.expr for a in alerts(t)}
    assert expr[GPU_UNDERUTILIZED] == S.past(n.gpu_util, L.WASTE, t) == f"{n.gpu_util} < 0.17"
    young = S.young(selector=s, key=WORKER_KEY, within="421")
    assert young in expr[WORKER_COLD_START]
    scaling = "\n".join(r["expr"] for r in autoscale.recording_rules(t))
    assert S.past(n.model_util, L.WASTE, t, as_bool=True) in scaling
    assert f"{n.model_util} < bool 0.17" in scaling
    assert young in scaling
    assert S.open_requests(S.OPEN_NOW, selector=s, by=WORKER) in scaling
    # the report's waste band and its share of InferenceGPUUnderutilized's condition
    bands = S.utilization_band_shares(t, window="1d", step=60)
    assert "< bool 0.17)[1d:60s]" in bands["waste"]
    assert "< bool 0.17)[1d:60s]" in S.gpu_waste_share(t, window="1d", step=60, by="uuid")


def test_the_recording_rules_are_the_signals_rendered() -> None:
    t = load_thresholds()
    s, w = t.pack.selector(), t.pack.window
    exprs = {r["record"]: r["expr"] for r in recording_rules(t)}
    from inferwatch.pack.names import names

    n = names(t)
    assert exprs[n.queue_avg] == S.QUEUE_MEAN.render(selector=s, window=w, by=WORKER)
    assert exprs[n.queue_deriv] == S.QUEUE_SLOPE.render(
        selector=s, window=n.rising_window, by=WORKER
    )
    assert exprs[n.rate("preemptions")] == S.PREEMPTION_RATE.render(selector=s, window=w, by=WORKER)
    assert exprs[n.batch_capacity] == S.BATCH_CAPACITY.render(
        selector=s, by=WORKER, key=WORKER_KEY, full_at=f"{t.vram.scale_above:g}"
    )


# ----------------------------------------------------------------- templates and evaluators


def test_holes_are_filled_and_matchers_added() -> None:
    assert S.ERROR_RATE.promql == f"rate({contract.REQUESTS_FINISHED}$selector[$window])"
    assert S.ERROR_RATE.render(selector='{job="x"}', window="1d", by="worker") == (
        f'sum by (worker) (rate({contract.REQUESTS_FINISHED}{{job="x",reason="error"}}[1d]))'
    )
    assert (
        S.ERRORS.render(window="1h")
        == f'increase({contract.REQUESTS_FINISHED}{{reason="error"}}[1h])'
    )
    ttft = S.bucket_increase(contract.TTFT_SECONDS)
    assert ttft.render(window="5m", by="model") == (
        f"sum by (model, le) (increase({contract.TTFT_SECONDS}_bucket[5m]))"
    )
    # the caller places le where its rule has it; the evaluator groups the same way
    assert ttft.render(window="5m", by="le, model") == (
        f"sum by (le, model) (increase({contract.TTFT_SECONDS}_bucket[5m]))"
    )
    assert ttft.group("le, model") == ("le", "model")
    assert ttft.group("model") == ("model", "le")
    assert (
        S.QUEUE.render(selector='{job="x"}', by="worker")
        == f'max by (worker) ({contract.QUEUE_DEPTH}{{job="x"}})'
    )


def _scrape(t: float, *samples: tuple[str, dict[str, str], float]) -> S.Scrape:
    return S.Scrape(t, list(samples))


def test_a_counter_that_restarts_counts_from_zero() -> None:
    name = contract.PREEMPTIONS.name
    w = {"worker": "a"}
    scrapes = [_scrape(0, (name, w, 100)), _scrape(10, (name, w, 110)), _scrape(20, (name, w, 4))]
    assert S.PREEMPTIONS.evaluate(scrapes, "worker") == {("a",): 14.0}
    assert S.PREEMPTION_RATE.evaluate(scrapes, "worker") == {("a",): 0.7}
    # one scrape says nothing of a rate
    assert S.PREEMPTION_RATE.evaluate(scrapes[:1], "worker") == {}


def test_an_instant_signal_reads_the_last_scrape_only() -> None:
    name = contract.QUEUE_DEPTH.name
    scrapes = [
        _scrape(0, (name, {"worker": "gone"}, 3), (name, {"worker": "a"}, 1)),
        _scrape(15, (name, {"worker": "a"}, 5)),
    ]
    assert S.QUEUE.evaluate(scrapes, "worker") == {("a",): 5.0}
    assert S.QUEUE_MEAN.evaluate(scrapes, "worker") == {("gone",): 3.0, ("a",): 3.0}
    assert S.QUEUE_SLOPE.evaluate(scrapes, "worker") == {("a",): pytest.approx(4 / 15)}


def test_a_quantile_needs_observations_in_the_window() -> None:
    name = contract.TTFT_SECONDS.name + "_bucket"
    same = [(name, {"worker": "a", "le": le}, 3.0) for le in ("0.5", "+Inf")]
    scrapes = [_scrape(0, *same), _scrape(15, *same)]
    assert S.evaluate_quantile(0.99, S.bucket_rate(contract.TTFT_SECONDS), scrapes, "worker") == {}
    # le first in the group gives the same quantile as le last
    moving = [
        _scrape(0, *same),
        _scrape(15, *((n, ls, v + (2 if ls["le"] == "0.5" else 3)) for n, ls, v in same)),
    ]
    buckets = S.bucket_rate(contract.TTFT_SECONDS)
    last = S.evaluate_quantile(0.5, buckets, moving, "worker")
    assert last == {("a",): pytest.approx(0.5 * 1.5 / 2)}
    assert S.evaluate_quantile(0.5, buckets, moving, "le, worker") == last


def test_window_extremes_and_last_value() -> None:
    name = contract.WORKER_START_TIME_SECONDS.name
    w = {"worker": "a"}
    scrapes = [_scrape(t, (name, w, v)) for t, v in ((0, 5.0), (15, 2.0), (30, 7.0), (45, 3.0))]
    assert S.WORKER_START_EARLIEST.evaluate(scrapes, "worker") == {("a",): 2.0}
    name = contract.MAX_NUM_SEQS.name
    scrapes = [_scrape(t, (name, w, v)) for t, v in ((0, 5.0), (15, 9.0), (30, 4.0))]
    assert S.BATCH_LIMIT_LAST.evaluate(scrapes, "worker") == {("a",): 4.0}
    assert S.MAX_NUM_SEQS.evaluate(scrapes, "worker") == {("a",): 9.0}


def test_a_process_of_no_worker_is_left_out() -> None:
    name = contract.GPU_PROCESS_MEMORY_USED_BYTES.name
    gpu = {"uuid": "GPU-0"}
    scrapes = [
        _scrape(0, (name, {**gpu, "worker": "a"}, 4.0), (name, {**gpu, "pid": "7"}, 9.0)),
        _scrape(15, (name, {**gpu, "worker": "a"}, 5.0), (name, {**gpu, "pid": "7"}, 9.0)),
    ]
    assert S.GPU_PROCESS_MEMORY_LAST.evaluate(scrapes, "uuid") == {("GPU-0",): 5.0}
    assert S.GPU_PROCESS_MEMORY_LAST.evaluate(scrapes, "uuid, worker", "group") == {
        ("GPU-0", "a"): 1.0
    }


def test_a_signal_without_an_evaluator_is_refused() -> None:
    with pytest.raises(ValueError, match="no evaluator for quantile_over_time"):
        S.Signal("x", "quantile_over_time", contract.QUEUE_DEPTH)
