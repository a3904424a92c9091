"""``advise --what-if``: the twin's fit, its answers per flag, the lever per case, shadow mode.

The samples are agent expositions written from a known step-time law (a fixed cost
per step, a cost per sequence, a cost per prompt token) and a known load, so the
fit has a truth to recover; the real engine's check is tests/live/test_whatif_live.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.proc import REPO

from inferwatch.advise.agent import Scrape, parse_exposition
from inferwatch.advise.shadow import load_state, metrics_text, render, step
from inferwatch.advise.twin import Load, NotEnough, Setting, StepFit, fit_steps, simulate
from inferwatch.advise.whatif import observe, parse_what_if, predict, suggest
from inferwatch.errors import ConfigError

A, K, P = 0.020, 0.002, 0.0001  # 20 ms a step, 2 ms a sequence, 0.1 ms a prompt token


def exposition(
    worker: str,
    gen: float,
    prompt: float,
    running: float,
    queue: float,
    slots: int,
    gpu: float | None = None,
    kv: float | None = None,
    finished: float | None = None,
    flags: dict[str, str] | None = None,
    engine: str = "vllm",
) -> str:
    labels = f'worker="{worker}",model="m",engine="{engine}"'
    info = ",".join(f'{k}="{v}"' for k, v in (flags or {"max_num_seqs": str(slots)}).items())
    lines = [
        f'inferwatch_worker_info{{worker="{worker}",engine="{engine}",{info}}} 1',
        f"inferwatch_generation_tokens_total{{{labels}}} {gen}",
        f"inferwatch_prompt_tokens_total{{{labels}}} {prompt}",
        f"inferwatch_requests_running{{{labels}}} {running}",
        f"inferwatch_queue_depth{{{labels}}} {queue}",
        f"inferwatch_max_num_seqs{{{labels}}} {slots}",
    ]
    if finished is not None:
        lines.append(f"inferwatch_requests_finished_total{{{labels}}} {finished}")
    if kv is not None:
        lines.append(f"inferwatch_kv_cache_usage_ratio{{{labels}}} {kv}")
    if gpu is not None:
        lines.append('inferwatch_gpu_up{gpu="0"} 1')
        lines.append(f'inferwatch_gpu_utilization_ratio{{gpu="0"}} {gpu}')
    return "\n".join(lines) + "\n"


def samples(
    batches: list[float],
    queue: float,
    slots: int,
    prompt_tokens: float = 200,
    output_tokens: float = 100,
    gpu: float | None = None,
    kv: float | None = None,
    flags: dict[str, str] | None = None,
    dt: float = 2.0,
) -> list[tuple[float, Scrape]]:
    """One scrape per batch size: the tokens the known step law gives in ``dt`` seconds."""
    gen = prompt = finished = 0.0
    out = [
        (0.0, parse_exposition(exposition("w", 0, 0, batches[0], queue, slots, gpu, kv, 0, flags)))
    ]
    t = 0.0
    for b in batches:
        # per step: b decode tokens, and prompt tokens in the ratio prompt/output
        per_step_prompt = b * prompt_tokens / output_tokens
        steps = dt / (A + K * b + P * per_step_prompt)
        gen += steps * b
        prompt += steps * per_step_prompt
        finished = gen / output_tokens
        t += dt
        out.append(
            (
                t,
                parse_exposition(
                    exposition("w", gen, prompt, b, queue, slots, gpu, kv, finished, flags)
                ),
            )
        )
    return out


RAMP = [2, 2, 2, 4, 4, 4, 6, 6, 6] + [8] * 12 + [6, 6, 6, 4, 4, 4]


def test_the_fit_recovers_the_step_law_from_a_ramp() -> None:
    obs = observe(samples(RAMP, queue=0, slots=8))
    fit = fit_steps(obs.intervals)
    assert fit.k_source == "fitted"
    # the gauge is read at the ends of an interval: a level change blurs one interval
    assert fit.a == pytest.approx(A, rel=0.1)
    assert fit.k + fit.p * 2 == pytest.approx(K + P * 2, rel=0.1)  # prompt ~ batch here
    assert (fit.batch_min, fit.batch_max) == (2.0, 8.0)
    assert fit.residual < 0.1


def test_a_flat_batch_states_its_assumption() -> None:
    gpu = observe(samples([8] * 20, queue=12, slots=8, gpu=0.5))
    fit = gpu.fit()
    assert fit.k_source.startswith("assumed k = p")
    # whatever the split, a step at the batch observed takes what it took
    assert fit.step(8, 0) + fit.p * 16 == pytest.approx(A + K * 8 + P * 16, rel=0.05)
    cpu = observe(samples([8] * 20, queue=12, slots=8))
    assert cpu.cpu and cpu.fit().k_source.startswith("assumed: a step grows with the batch")
    assert cpu.fit().k * 8 > 0.8 * cpu.fit().step(8, 0)


@pytest.mark.parametrize(
    ("text", "flag", "value"),
    [
        ("max-num-seqs=16", "max-num-seqs", 16),
        ("--parallel=4", "max-num-seqs", 4),
        ("max_num_batched_tokens=8192", "max-num-batched-tokens", 8192),
        ("gpu-memory-utilization=0.9", "gpu-memory-utilization", 0.9),
        ("replicas=2", "replicas", 2),
    ],
)
def test_the_four_flags_parse(text: str, flag: str, value: float) -> None:
    assert parse_what_if(text) == (flag, value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("tensor-parallel=2", "FLAG one of"),
        ("max-num-seqs", "FLAG one of"),
        ("max-num-seqs=0", "whole number of at least 1"),
        ("parallel=2.5", "whole number"),
        ("gpu-memory-utilization=1.2", "(0, 1]"),
        ("replicas=two", "a number"),
    ],
)
def test_a_value_the_engine_would_refuse_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_what_if(text)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_too_few_observations_name_what_is_missing() -> None:
    with pytest.raises(NotEnough, match="busy window"):
        fit_steps(observe(samples([4, 4], queue=0, slots=8)).intervals)
    no_requests = [
        (t, [s for s in scrape if s[0] != "inferwatch_requests_finished_total"])
        for t, scrape in samples(RAMP, queue=0, slots=8)
    ]
    with pytest.raises(NotEnough, match="--output-tokens"):
        observe(no_requests)
    assert observe(no_requests, output_tokens=100).load.output_tokens == 100


def test_far_extrapolation_is_refused_and_near_one_has_a_band() -> None:
    obs = observe(samples([8] * 20, queue=12, slots=8))
    with pytest.raises(NotEnough, match="2x"):
        predict(obs, "max-num-seqs", 64)
    near = predict(obs, "max-num-seqs", 12)
    assert near.band is not None and near.range_note.startswith("extrapolated")
    inside = predict(observe(samples(RAMP, queue=0, slots=8)), "max-num-seqs", 4)
    assert inside.range_note.startswith("within")
    # every answer has a band from the fit's uncertainty, low end first, the point inside
    for pred in (near, inside):
        assert pred.band is not None and pred.current_band is not None
        for (lo, hi), point in ((pred.band, pred.new), (pred.current_band, pred.current)):
            for key in ("throughput", "ttft_p50", "ttft_p95", "queue", "busy"):
                assert getattr(lo, key) <= getattr(point, key) <= getattr(hi, key), key
    # an extrapolated slot count is less sure than one within the batch sizes observed
    assert near.band[1].ttft_p95 / near.band[0].ttft_p95 > 1.2


def test_slot_limited_raise_the_slots_first_only_on_an_idle_gpu() -> None:
    """The H200 case of issue 31: a deep queue, every slot busy, KV with room. The queue
    (24) is over the 8 slots, InferenceQueueOverCapacity's condition (issue 40): with the
    GPU idle under gpu_utilization.idle_below (40 %) the batch is too small for the card,
    the slots first and replicas second, as advise and the runbook say."""
    obs = observe(samples([8] * 30, queue=24, slots=8, gpu=0.35, kv=0.2))
    s = suggest(obs)
    assert s.paging and s.lever == "slots" and s.flag == "max-num-seqs"
    assert "InferenceQueueOverCapacity" in s.reason and "too small for the card" in s.reason
    assert s.value is not None and 8 < s.value <= 16
    assert s.prediction is not None
    assert s.prediction.new.ttft_p95 < s.prediction.current.ttft_p95
    assert s.prediction.new.throughput > s.prediction.current.throughput
    assert s.then is not None and s.then.lever == "replicas" and s.then.advised


def test_a_paging_queue_on_a_busy_gpu_wants_replicas_and_shows_the_slots() -> None:
    """Issue 40's case: every slot busy, dozens waiting, the GPU busy (60 %, past the 40 %
    line) and the KV cache with room: replicas, as advise's "scale out"; what more slots
    would do follows, not advised, with its prediction."""
    obs = observe(samples([8] * 30, queue=24, slots=8, gpu=0.6, kv=0.2))
    s = suggest(obs)
    assert s.paging and s.lever == "replicas" and s.value is not None and s.value >= 2
    assert "scale out" in s.reason and "not the remedy" in s.reason
    assert s.then is not None and s.then.lever == "slots" and not s.then.advised
    assert s.then.prediction is not None and s.then.value is not None and s.then.value > 8
    # the GPU saturated: the same lever
    busy = suggest(observe(samples([8] * 30, queue=24, slots=8, gpu=0.9, kv=0.2)))
    assert busy.lever == "replicas" and "saturated" in busy.reason


def test_slot_limited_under_the_page_raise_the_slots() -> None:
    """Requests wait with every slot busy, fewer than the slots: no page, the slots lever."""
    obs = observe(samples([8] * 30, queue=4, slots=8, gpu=0.35, kv=0.2))
    s = suggest(obs)
    assert not s.paging and s.lever == "slots" and s.flag == "max-num-seqs"
    assert "not the GPU" in s.reason and "before adding a replica" in s.reason


def test_gpu_saturated_wants_replicas() -> None:
    obs = observe(samples([8] * 30, queue=24, slots=8, gpu=0.97, kv=0.3))
    s = suggest(obs)
    assert s.lever == "replicas" and s.value is not None and s.value >= 2
    assert s.prediction is not None and s.prediction.new.queue < s.prediction.current.queue


def test_a_busy_engine_without_a_gpu_wants_replicas_not_slots() -> None:
    obs = observe(samples([8] * 30, queue=24, slots=8))
    assert obs.cpu and obs.busy is not None and obs.busy > 0.9
    s = suggest(obs)
    assert s.lever == "replicas" and "compute-bound" in s.reason


def test_a_full_kv_cache_is_never_answered_with_more_slots() -> None:
    obs = observe(samples([8] * 30, queue=24, slots=8, gpu=0.4, kv=0.97))
    s = suggest(obs)
    assert s.lever == "replicas" and "KV cache is full" in s.reason


def test_long_prompts_want_a_larger_prompt_batch() -> None:
    flags = {"max_num_seqs": "8", "max_num_batched_tokens": "512"}
    obs = observe(
        samples(RAMP, queue=0, slots=8, prompt_tokens=6000, output_tokens=50, flags=flags)
    )
    s = suggest(obs)
    assert s.lever == "batch_tokens" and s.flag == "max-num-batched-tokens"
    assert s.prediction is not None
    assert s.prediction.new.ttft_p50 < s.prediction.current.ttft_p50


def test_gpu_memory_utilization_grows_the_kv_pool() -> None:
    flags = {"max_num_seqs": "8", "gpu_memory_utilization": "0.5"}
    obs = observe(samples([8] * 30, queue=24, slots=8, gpu=0.4, kv=0.9, flags=flags))
    pred = predict(obs, "gpu-memory-utilization", 0.9)
    assert pred.new.setting["kv_pool_tokens"] == pytest.approx(
        pred.current.setting["kv_pool_tokens"] * 0.9 / 0.5
    )
    assert any("--weights" in n for n in pred.notes)
    llama = observe(samples(RAMP, queue=0, slots=8, flags={"max_num_seqs": "8"}))
    llama.reading.engine = "llamacpp"
    with pytest.raises(ConfigError, match=r"llama\.cpp"):
        predict(llama, "gpu-memory-utilization", 0.9)


def test_replicas_split_the_load() -> None:
    obs = observe(samples([8] * 30, queue=24, slots=8, gpu=0.97))
    one = predict(obs, "replicas", 1)
    two = predict(obs, "replicas", 2)
    assert two.new.queue < one.new.queue and two.new.ttft_p95 < one.new.ttft_p95


def test_a_burst_is_replayed_as_it_came_not_averaged() -> None:
    """The same requests sent in the first 20 s of 60 queue far more than spread over 60."""
    fit = StepFit(0.02, 0.002, 0.0001, "fitted", 1, 8, 10, 0.0)
    flat = Load(span=60, arrival_rate=2.0, prompt_tokens=100, output_tokens=50)
    burst = Load(
        span=60,
        arrival_rate=2.0,
        prompt_tokens=100,
        output_tokens=50,
        pieces=((0.0, 20.0, 6.0), (20.0, 60.0, 0.0)),
    )
    a = simulate(fit, flat, Setting(slots=4), seed=3)
    b = simulate(fit, burst, Setting(slots=4), seed=3)
    assert abs(a.requests - b.requests) < 0.3 * a.requests  # about the same requests
    assert b.queue_mean > 3 * max(a.queue_mean, 0.1) and b.ttft_p50 > 3 * a.ttft_p50


def test_the_simulation_obeys_littles_law() -> None:
    fit = StepFit(0.02, 0.002, 0.0001, "fitted", 1, 8, 10, 0.0)
    load = Load(span=600, arrival_rate=2.0, prompt_tokens=100, output_tokens=50)
    out = simulate(fit, load, Setting(slots=8))
    # under capacity every arrival is served: throughput = arrivals x answer length
    assert out.throughput == pytest.approx(2.0 * 50, rel=0.1)
    assert out.queue_mean < 1
    over = simulate(fit, load, Setting(slots=2))
    assert over.queue_mean > 10 and over.ttft_p95 > 10 * out.ttft_p95


def test_shadow_records_prediction_and_outcome_of_a_flag_change(tmp_path: Path) -> None:
    state = load_state(str(tmp_path / "state.json"))
    before = observe(samples(RAMP, queue=0, slots=8, flags={"max_num_seqs": "8"}))
    assert step(state, before, fit_steps(before.intervals), [], now=1000.0) is None
    after_samples = samples([4] * 16 + [3, 2], queue=2, slots=4, flags={"max_num_seqs": "4"})
    after = observe(after_samples)
    rec = step(state, after, fit_steps(after.intervals), after_samples[-1][1], now=2000.0)
    assert rec is not None and (rec["flag"], rec["from"], rec["to"]) == ("max_num_seqs", "8", "4")
    assert rec["fitted_at"] == 1000.0
    assert rec["predicted"]["throughput"] > 0 and rec["measured"]["throughput"] > 0
    assert math.isfinite(rec["error"]["throughput"])
    text = render(state)
    assert "max_num_seqs 8 -> 4" in text
    prom = metrics_text(state)
    assert (
        'inferwatch_whatif_predicted{worker="w",flag="max_num_seqs",from="8",to="4",'
        'figure="throughput"}' in prom
    )
    parse_exposition(prom)  # valid exposition


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferwatch.cli", "advise", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_exit_2_for_an_unknown_flag_and_a_bad_trace(tmp_path: Path) -> None:
    bad = _cli("--trace", str(tmp_path / "none.jsonl.gz"), "--what-if", "tensor-parallel=2")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "FLAG one of" in bad.stderr
    (tmp_path / "t.gz").write_bytes(b"not gzip")
    worse = _cli("--trace", str(tmp_path / "t.gz"), "--what-if", "parallel=2")
    assert worse.returncode == 2 and "t.gz" in worse.stderr
    assert len(worse.stderr.strip().splitlines()) == 1


def test_cli_reads_a_trace_and_answers_in_json(tmp_path: Path) -> None:
    import gzip

    from inferwatch.advise.trace import write_header, write_record

    path = tmp_path / "trace.jsonl.gz"
    text = [exposition("w", 0, 0, 2, 0, 8, finished=0)]
    gen = prompt = 0.0
    for b in RAMP:
        steps = 2.0 / (A + K * b + P * 2 * b)
        gen += steps * b
        prompt += steps * 2 * b
        text.append(exposition("w", gen, prompt, b, 0, 8, finished=gen / 100))
    with gzip.open(path, "wt") as out:
        write_header(
            out,
            {
                "scrape_interval_s": 2,
                "source": "test",
                "phases": [{"name": "load", "start": 0, "end": 2 * len(RAMP)}],
                "workers": {"w": {"engine": "vllm", "slots": 8}},
            },
        )
        for i, t in enumerate(text):
            write_record(out, 2.0 * i, "agent", t)
    done = _cli("--trace", str(path), "--what-if", "max-num-seqs=4", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)["what_if"]
    assert doc["flag"] == "max-num-seqs" and doc["value"] == 4
    assert doc["predicted"]["throughput"] > 0 and doc["range"].startswith("within")
    plain = _cli("--trace", str(path), "--what-if", "parallel=4")
    assert "What if max-num-seqs=4" in plain.stdout and "TTFT P95" in plain.stdout


def test_prometheus_gives_the_answer_the_samples_give(tmp_path: Path) -> None:
    """The same samples backfilled into a real Prometheus: --prometheus-url answers alike."""
    from tests.support.promblocks import PromOnBlocks, create_blocks

    t0 = 1_795_000_000.0  # 2026-11-18
    data = samples(RAMP * 2, queue=0, slots=8, dt=15.0)
    families: dict[str, list[str]] = {}
    for t, scrape in data:
        for name, labels, value in scrape:
            lab = {**labels, "job": "inferwatch", "instance": "gpu-a:10127"}
            sel = ",".join(f'{k}="{v}"' for k, v in sorted(lab.items()))
            families.setdefault(name, []).append(f"{name}{{{sel}}} {value} {t0 + t:.3f}")
    om = tmp_path / "data.om"
    om.write_text("\n".join(line for lines in families.values() for line in lines) + "\n# EOF\n")
    prom = PromOnBlocks(tmp_path, create_blocks(om, tmp_path / "data", timeout=120))
    try:
        end = t0 + data[-1][0]
        done = _cli(
            "--prometheus-url", prom.url, "--start", f"{t0:.0f}",
            "--end", f"{end:.0f}", "--what-if", "max-num-seqs=4", "--json",
        )  # fmt: skip
    finally:
        prom.stop()
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)["what_if"]
    direct = predict(observe(data), "max-num-seqs", 4)
    assert got["fit"]["batch_max"] == pytest.approx(direct.fit.batch_max)
    assert got["fit"]["a"] == pytest.approx(direct.fit.a, rel=0.02)
    assert got["predicted"]["throughput"] == pytest.approx(direct.new.throughput, rel=0.02)
    assert got["predicted"]["ttft_p95"] == pytest.approx(direct.new.ttft_p95, rel=0.05)


def test_cli_shadow_over_two_recorded_runs(tmp_path: Path) -> None:
    """The real llama-server at 1 then 2 slots: the second pass judges the first's fit."""
    data = REPO / "tests" / "data" / "whatif"
    state, prom = tmp_path / "state.json", tmp_path / "whatif.prom"
    common = ["--output-tokens", "128", "--shadow", str(state), "--shadow-metrics", str(prom)]
    first = _cli("--trace", str(data / "parallel-1.jsonl.gz"), *common)
    assert first.returncode == 0, first.stderr
    assert "no flag change seen yet" in first.stdout
    second = _cli("--trace", str(data / "parallel-2.jsonl.gz"), *common)
    assert second.returncode == 0, second.stderr
    assert "llama: max_num_seqs 1 -> 2" in second.stdout
    change = json.loads(state.read_text())["changes"][0]
    assert change["predicted"]["throughput"] > 0 and change["measured"]["throughput"] > 0
    gauges = parse_exposition(prom.read_text())
    assert any(n == "inferwatch_whatif_error_ratio" for n, _, _ in gauges)


def test_a_fit_that_misses_its_own_observation_is_flagged_in_text_and_json() -> None:
    """Issue 40: the twin's replay of the very observation it was fitted on gave TTFT
    P50 52.9 s against 6.35 s observed and printed no warning."""
    from inferwatch.advise.model import finite
    from inferwatch.advise.whatif_cli import render_prediction

    good = samples([8] * 20, queue=12, slots=8, gpu=0.5)
    pred = predict(observe(good), "max-num-seqs", 12)
    assert pred.trust is not None and pred.trust.trusted, pred.trust
    assert "UNTRUSTED" not in render_prediction(pred)
    # the engine's (or the proxy's) TTFT quantiles: far from what the replay gives
    twin_p50 = pred.current.ttft_p50
    off = [(t, list(s)) for t, s in good]
    off[-1][1].append(
        ("inferwatch_ttft_quantile_seconds", {"worker": "w", "quantile": "0.5"}, twin_p50 * 8)
    )
    bad = predict(observe(off), "max-num-seqs", 12)
    assert bad.trust is not None and not bad.trust.trusted
    assert any("ttft_p50" in p for p in bad.trust.problems)
    text = render_prediction(bad)
    assert "UNTRUSTED FIT" in text and "ttft_p50" in text
    doc = json.loads(json.dumps(finite(bad.as_dict()), allow_nan=False))
    assert doc["trusted"] is False and doc["trust"]["problems"]
    assert doc["trust"]["replay"]["ttft_p50"]["observed"] == pytest.approx(twin_p50 * 8)


def test_a_fit_whose_windows_scatter_past_the_bound_is_flagged() -> None:
    """Window times that the step curve does not describe (the engine's speed changed
    while it was watched): a residual past RESIDUAL_BOUND is flagged."""
    from inferwatch.advise.whatif import RESIDUAL_BOUND

    base = samples(RAMP, queue=0, slots=8)
    # every other stretch of three intervals (one 6 s window) took four times as long
    # for the same tokens
    shifted, extra = [], 0.0
    for i, (t, s) in enumerate(base):
        if i and ((i - 1) // 3) % 2 == 1:
            extra += 6.0
        shifted.append((t + extra, s))
    obs = observe(shifted)
    pred = predict(obs, "max-num-seqs", 8)
    assert pred.fit.residual > RESIDUAL_BOUND
    assert pred.trust is not None and not pred.trust.trusted
    assert any("scatter" in p for p in pred.trust.problems)
