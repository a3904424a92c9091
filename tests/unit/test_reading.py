"""pack.reading: one worker's reading from the agent's own exposition (issue 41 step 3).

The inputs are the agent's real output: tests/data/agent-capture-vllm.prom (an agent
watching a simulated vLLM worker on a fake A10) and copies of it with a few numbers
moved as a later scrape would move them; and a recorded trace of the agent over
llama.cpp (4 slots) on an H200. advise's pictures, the twin's observation and the demo's view
are built from the reading, so each is checked against it.
"""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest
from tests.support.proc import REPO

from inferwatch.advise.agent import pictures_from_scrapes
from inferwatch.advise.model import WorkerPicture
from inferwatch.advise.trace import load_phase, read_trace
from inferwatch.advise.whatif import observe
from inferwatch.demo.demo_cmd import parse_agent_metrics
from inferwatch.demo.layouts import DemoWorker, Layout
from inferwatch.engines import contract
from inferwatch.pack import reading as rd

CAPTURE = (REPO / "tests" / "data" / "agent-capture-vllm.prom").read_text()
TRACE = REPO / "tests" / "data" / "whatif" / "h200" / "sweep-s4.jsonl.gz"
W = "vllm-0"
ON = 'engine="vllm",model="sim-llama-2-7b-int8",worker="vllm-0"'
#: the capture's worker start time and the moment of its scrape in these tests
START = 1.79611986968e09
T0 = START + 300.0


def later(**moves: tuple[str, str]) -> str:
    """The capture with lines replaced: ``name=(old line tail, new line tail)``."""
    text = CAPTURE
    for old, new in moves.values():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


FINISHED = (
    f'inferwatch_requests_finished_total{{engine="vllm",model="sim-llama-2-7b-int8",'
    f'reason="length",worker="{W}"}} 21.0'
)


def test_one_scrape_reads_what_the_agent_wrote() -> None:
    r = rd.read_workers([(T0, rd.parse_exposition(CAPTURE))])[W]
    assert (r.up, r.model, r.engine, r.gpus) == (True, "sim-llama-2-7b-int8", "vllm", ("0",))
    assert r.gpu_util == 0.37 and r.vram == pytest.approx(0.4371792988386005)
    assert r.vram_total_bytes == 2.5769803776e10
    assert (r.queue, r.queue_max, r.running, r.running_max) == (0.0, 0.0, 1.0, 1.0)
    assert r.running_when_queued is None  # nothing waited
    assert (r.capacity, r.kv) == (8.0, pytest.approx(0.03701527614571093))
    assert r.slope == pytest.approx(0.03247305039586576)
    assert r.ttft == {"0.5": 4.21875, "0.95": 7.041666666666666, "0.99": 7.408333333333333}
    assert r.tpot["0.99"] == pytest.approx(0.08115178571428561) and r.e2e["0.5"] > 8
    assert r.uptime == pytest.approx(300.0)
    # one scrape: no span, so no rate and no increase; nothing restarted; no XID series,
    # so no XID count known (what Prometheus answers: nothing)
    assert (r.request_rate, r.preemption_rate) == (None, None)
    assert (r.restarts, r.xid_errors) == (0.0, None)
    # the flags stated; max_model_len="" is not stated; no warm-up gate
    assert r.flags == {
        "gpu_memory_utilization": "0.95",
        "max_num_seqs": "8",
        "prefix_caching": "true",
    }
    assert (r.ready, r.gate_deadline_exceeded) == (None, None)


def test_the_warm_up_gate_reads_its_ttft_by_phase() -> None:
    gate = (
        f'inferwatch_worker_ready{{worker="{W}"}} 1\n'
        f'inferwatch_warmup_deadline_exceeded{{worker="{W}"}} 0\n'
        f'inferwatch_warmup_ttft_seconds{{phase="cold",worker="{W}"}} 2.5\n'
        f'inferwatch_warmup_ttft_seconds{{phase="warm",worker="{W}"}} 0.25\n'
        'inferwatch_warmup_ttft_seconds{phase="cold",worker="other"} 9\n'
    )
    r = rd.read_workers([(T0, rd.parse_exposition(gate + CAPTURE))])[W]
    assert (r.ready, r.gate_deadline_exceeded) == (True, False)
    assert r.warmup_ttft == {"cold": 2.5, "warm": 0.25}
    warmup = WorkerPicture.of(r, "agent:9400").warmup
    assert warmup is not None and (warmup.cold_ttft, warmup.warm_ttft) == (2.5, 0.25)


def test_rates_come_from_two_scrapes_at_least_the_span_apart() -> None:
    moved = later(
        gen=(
            f"inferwatch_generation_tokens_total{{{ON}}} 3633.0",
            f"inferwatch_generation_tokens_total{{{ON}}} 4833.0",
        ),
        fin=(FINISHED, FINISHED.replace(" 21.0", " 33.0")),
        pre=(
            f"inferwatch_preemptions_total{{{ON}}} 0.0",
            f"inferwatch_preemptions_total{{{ON}}} 3.0",
        ),
        queue=(f"inferwatch_queue_depth{{{ON}}} 0.0", f"inferwatch_queue_depth{{{ON}}} 6.0"),
    )
    pair = [(T0, rd.parse_exposition(CAPTURE)), (T0 + 60, rd.parse_exposition(moved))]
    r = rd.read_workers(pair, min_rate_span=60)[W]
    assert r.request_rate == pytest.approx(12 / 60) and r.preemption_rate == pytest.approx(3 / 60)
    assert (r.queue, r.queue_max, r.running_when_queued) == (3.0, 6.0, 1.0)
    assert r.uptime == pytest.approx(360.0)
    # a span shorter than min_rate_span gives no rate at all, never a lifetime average
    short = rd.read_workers(pair, min_rate_span=120)[W]
    assert (short.request_rate, short.preemption_rate, short.long_prompt_share) == (
        None,
        None,
        None,
    )
    # a counter that went down (the engine restarted between the scrapes) counts from
    # zero, as PromQL's rate does: 21 requests since the restart
    reset = rd.read_workers(list(reversed([(T0 + 60, pair[0][1]), (T0, pair[1][1])])), 60)[W]
    assert reset.request_rate == pytest.approx(21 / 60)


def xid(count: float) -> str:
    return (
        "# TYPE inferwatch_gpu_xid_errors_total counter\n"
        f'inferwatch_gpu_xid_errors_total{{gpu="0",uuid="u",xid="79"}} {count}\n'
    )


def test_a_restart_and_xid_errors_are_counted_as_promql_increase_does() -> None:
    restarted = later(
        start=(
            f"inferwatch_worker_start_time_seconds{{{ON}}} 1.79611986968e+09",
            f"inferwatch_worker_start_time_seconds{{{ON}}} 1.79612001968e+09",
        ),
    )
    first = rd.parse_exposition(CAPTURE)
    r = rd.read_workers(
        [(T0, first), (T0 + 60, first), (T0 + 200, rd.parse_exposition(restarted + xid(2)))]
    )[W]
    assert r.restarts == 1.0  # one change of the start time over three scrapes
    assert r.uptime == pytest.approx(T0 + 200 - 1.79612001968e09)
    # a series in the last scrape only has no increase (PromQL's increase needs two samples)
    assert r.xid_errors is None
    counted = rd.read_workers(
        [
            (T0, rd.parse_exposition(CAPTURE + xid(5))),
            (T0 + 60, rd.parse_exposition(CAPTURE + xid(7))),
        ]
    )[W]
    assert counted.xid_errors == 2.0
    reset = rd.read_workers(
        [
            (T0, rd.parse_exposition(CAPTURE + xid(5))),
            (T0 + 60, rd.parse_exposition(CAPTURE + xid(2))),
        ]
    )[W]
    assert reset.xid_errors == 2.0  # a counter that went down counts from zero


MIG = """# TYPE inferwatch_gpu_utilization_ratio gauge
inferwatch_gpu_utilization_ratio{gpu="0",uuid="a"} 0.5
inferwatch_gpu_utilization_ratio{gpu="0",uuid="a",gpu_instance="2"} NaN
# TYPE inferwatch_gpu_sm_active_ratio gauge
inferwatch_gpu_sm_active_ratio{gpu="0",gpu_instance="2",uuid="m"} 0.4
# TYPE inferwatch_gpu_memory_used_ratio gauge
inferwatch_gpu_memory_used_ratio{gpu="0",uuid="a"} 0.97
inferwatch_gpu_memory_used_ratio{gpu="0",gpu_instance="2",uuid="m"} 0.9
# TYPE inferwatch_target_up gauge
inferwatch_target_up{worker="whole"} 1
inferwatch_target_up{worker="slice"} 1
"""


def test_a_device_is_selected_exactly_and_a_mig_slice_reads_its_sm_activity() -> None:
    scrape = [(T0, rd.parse_exposition(MIG))]
    devices = {
        "whole": [{"gpu": "0", "gpu_instance": ""}],
        "slice": [{"gpu": "0", "gpu_instance": "2"}],
    }
    plain = rd.read_workers(scrape, devices=devices)
    assert (plain["whole"].gpu_util, plain["whole"].vram) == (0.5, 0.97)
    # a MIG slice has no utilization (its NaN is no value): its SM activity stands in, as
    # in the rules' utilization (pack.signals.gpu_utilization); its own VRAM level
    assert (plain["slice"].gpu_util, plain["slice"].vram) == (0.4, 0.9)
    # without devices: no worker holds memory and two share the agent, so none is guessed
    assert rd.read_workers(scrape)["slice"].gpus == ()


def test_flags_the_agent_could_not_read_are_kept_as_written_and_not_known() -> None:
    text = later(info=('max_num_seqs="8"', 'max_num_seqs="unknown"'))
    r = rd.read_workers([(T0, rd.parse_exposition(text))])[W]
    assert r.flags["max_num_seqs"] == "unknown" and "max_num_seqs" not in r.known_flags


def test_a_worker_without_its_batch_or_info_has_no_model() -> None:
    text = (
        "# TYPE inferwatch_worker_start_time_seconds gauge\n"
        'inferwatch_worker_start_time_seconds{worker="a",model="m",engine="vllm"} 1000\n'
        "# TYPE inferwatch_target_up gauge\n"
        'inferwatch_target_up{worker="a"} 1\n'
    )
    r = rd.read_workers([(1250.0, rd.parse_exposition(text))])["a"]
    # its identity comes from its batch and info, as from Prometheus: no model guessed
    assert (r.up, r.model, r.uptime, r.queue) == (True, None, 250.0, None)


def test_a_text_that_is_no_exposition_is_refused() -> None:
    with pytest.raises(ValueError):
        rd.parse_exposition('inferwatch_queue_depth{worker="a" 1\n')


def test_advise_and_the_demo_show_the_reading() -> None:
    pair = [(T0, rd.parse_exposition(CAPTURE)), (T0 + 60, rd.parse_exposition(CAPTURE))]
    r = rd.read_workers(pair, 60)[W]
    (p,) = pictures_from_scrapes(pair, "agent:9400", 60)
    assert p == replace(WorkerPicture.of(r, "agent:9400"), name=W)
    assert (p.gpu_utilization, p.kv_usage, p.ttft_p99, p.max_num_seqs) == (
        r.gpu_util,
        r.kv,
        r.ttft["0.99"],
        8.0,
    )
    assert p.request_rate == 0.0 and p.capacity() == 8.0
    layout = Layout((DemoWorker(W, (0,)), DemoWorker("absent", (1,))), 2)
    counters: dict[str, float] = {}
    view = parse_agent_metrics(CAPTURE, layout, now=T0, preemptions=counters)
    one = rd.read_workers([(T0, rd.parse_exposition(CAPTURE))])[W]
    assert asdict(view[W]) == asdict(one)
    assert not view["absent"].up and view["absent"].gpu_util is None  # named by the layout only
    assert counters == {W: 0.0}


def test_the_twin_observes_the_reading_of_the_samples_with_engine_data() -> None:
    trace = read_trace(TRACE)
    start, end = load_phase(trace)
    scrapes = trace.scrapes(start - 7.5, end + 1)
    obs = observe(scrapes, None, 128)
    w = obs.reading.worker
    engine = [
        (t, s) for t, s in scrapes if rd.total(s, contract.GENERATION_TOKENS, worker=w) is not None
    ]
    assert len(engine) < len(scrapes)  # the first sample has no engine series: skipped
    r = rd.read_workers(engine, workers=[w])[w]
    # the twin carries the reading itself, its launch flags those with a value
    assert asdict(obs.reading) == asdict(replace(r, flags=r.known_flags))
    assert obs.slots == r.capacity == 4 and obs.reading.engine == "llamacpp"
    # llama.cpp exports no KV cache and no TTFT quantiles here, and no request counter
    assert (obs.reading.kv, obs.reading.ttft) == (None, {})
    assert obs.queue_mean > 30 and obs.reading.gpu_util == pytest.approx(0.61125)
    assert obs.as_dict()["gpu_utilization"] == obs.reading.gpu_util
    assert obs.requests_from == "generated tokens / --output-tokens 128"
