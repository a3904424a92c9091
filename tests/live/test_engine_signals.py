"""Issue 23 item 3: the signals users look for, mapped where the engine exposes them.

Texts below are written here from the facts of ``shared/reference/vllm-metrics.md``
(vLLM 0.33.0 ``vllm/v1/metrics/loggers.py``: per-request prefill and decode time
histograms on the end-to-end buckets, prompt and generation length histograms
on 1-2-5 buckets up to max_model_len, ``vllm:lora_requests_info`` with labels
``max_lora``, ``waiting_lora_adapters``, ``running_lora_adapters`` set to the time
of each update, older label sets left in place) and of the TGI table's docstring.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.agentrun import AgentRun
from tests.support.proc import REPO
from tests.support.stubworker import StubWorker

from inferwatch.engines import ENGINES
from inferwatch.engines.mapping import LORA_ACTIVE, LORA_MAX, map_exposition
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import create_writer, formats
from inferwatch.sim.stats import EngineSnapshot, FinishedRequest, StepStats

E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1,
    1.5,
    2,
    2.5,
    5,
    10,
    15,
    20,
    30,
    40,
    50,
    60,
    120,
    240,
    480,
    960,
    1920,
    7680,
)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)


def _hist(
    name: str, bounds: tuple[float, ...], values: list[float], engine: str = "0"
) -> list[str]:
    lab = f'engine="{engine}",model_name="m"'
    out = [f"# HELP {name} x", f"# TYPE {name} histogram"]
    for b in (*bounds, math.inf):
        le = "+Inf" if math.isinf(b) else f"{float(b)}"
        out.append(f'{name}_bucket{{{lab},le="{le}"}} {float(sum(v <= b for v in values))}')
    out.append(f"{name}_count{{{lab}}} {float(len(values))}")
    out.append(f"{name}_sum{{{lab}}} {float(sum(values))}")
    out.append(f"{name}_created{{{lab}}} 1.7e9")
    return out


def vllm_text(lora: bool = True) -> str:
    lines = [
        "# HELP vllm:num_requests_running x",
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0',
        *_hist("vllm:request_prefill_time_seconds", E2E_BUCKETS, [0.2, 0.4, 1.2]),
        *_hist("vllm:request_decode_time_seconds", E2E_BUCKETS, [4.0, 9.0, 12.0]),
        *_hist("vllm:request_prompt_tokens", TOKEN_BUCKETS, [150, 900, 30000]),
        *_hist("vllm:request_generation_tokens", TOKEN_BUCKETS, [40, 300, 800]),
    ]
    if lora:
        lines += [
            "# HELP vllm:lora_requests_info Running stats on lora requests.",
            "# TYPE vllm:lora_requests_info gauge",
            # an older label set, left by prometheus_client when the labels changed
            'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql",waiting_lora_adapters=""} 1.764e9',
            'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters="summarize"} 1.7641e9',
        ]
    return "\n".join(lines) + "\n"


def test_vllm_prefill_decode_and_length_distributions() -> None:
    mapped = map_exposition(vllm_text(), ENGINES["vllm"])
    key = (("model", "m"),)
    prefill = mapped.histograms["inferwatch_prefill_time_seconds"][key]
    assert prefill.bounds == (*map(float, E2E_BUCKETS), math.inf)
    assert prefill.count == 3 and prefill.sum == pytest.approx(1.8)
    assert mapped.histograms["inferwatch_decode_time_seconds"][key].sum == pytest.approx(25.0)
    prompt = mapped.histograms["inferwatch_prompt_length_tokens"][key]
    assert prompt.bounds[:3] == (1.0, 2.0, 5.0) and prompt.count == 3
    # 2 of 3 prompts fit in 1000 tokens: the long-context share the guide's [5.3] needs
    assert prompt.counts[prompt.bounds.index(1000.0)] == 2
    assert mapped.histograms["inferwatch_generation_length_tokens"][key].sum == 1140


def test_vllm_lora_adapters_from_the_current_label_set() -> None:
    mapped = map_exposition(vllm_text(), ENGINES["vllm"])
    active = mapped.gauges[LORA_ACTIVE]
    assert active == {
        (("adapter", "sql"), ("model", "m"), ("state", "running")): 1.0,
        (("adapter", "chat"), ("model", "m"), ("state", "running")): 1.0,
        (("adapter", "summarize"), ("model", "m"), ("state", "waiting")): 1.0,
    }
    assert mapped.gauges[LORA_MAX] == {(("model", "m"),): 4.0}
    assert LORA_ACTIVE not in map_exposition(vllm_text(lora=False), ENGINES["vllm"]).gauges


def test_tgi_length_distributions_from_its_token_histograms() -> None:
    bounds = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
    lines = ["# TYPE tgi_queue_size gauge", "tgi_queue_size 1"]
    for name, values in (
        ("tgi_request_input_length", [12, 700]),
        ("tgi_request_generated_tokens", [30]),
    ):
        lines.append(f"# TYPE {name} histogram")
        for b in (*bounds, math.inf):
            le = "+Inf" if math.isinf(b) else f"{b}"
            lines.append(f'{name}_bucket{{le="{le}"}} {sum(v <= b for v in values)}')
        lines += [f"{name}_sum {sum(values)}", f"{name}_count {len(values)}"]
    mapped = map_exposition("\n".join(lines) + "\n", ENGINES["tgi"])
    none = (("model", ""),)
    assert mapped.histograms["inferwatch_prompt_length_tokens"][none].count == 2
    assert mapped.histograms["inferwatch_generation_length_tokens"][none].sum == 30
    assert mapped.counters["inferwatch_prompt_tokens"] == {none: 712.0}


def test_the_agent_exports_them_and_docs_list_them(tmp_path: Path) -> None:
    stub = StubWorker(vllm_text)
    agent = AgentRun(
        tmp_path, "--worker", f"w={stub.url}", "--gpu-backend", "none", "--collect-interval", "0.2s"
    )
    try:
        text = agent.until(lambda t: LORA_ACTIVE in t, 30, "agent exporting the new worker signals")
    finally:
        agent.stop()
        stub.stop()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    base = (("engine", "vllm"), ("model", "m"), ("worker", "w"))
    assert samples[("inferwatch_prompt_length_tokens_count", base)] == 3
    assert samples[("inferwatch_decode_time_seconds_sum", base)] == 25
    lora = (
        ("adapter", "summarize"),
        ("engine", "vllm"),
        ("model", "m"),
        ("state", "waiting"),
        ("worker", "w"),
    )
    assert samples[(LORA_ACTIVE, lora)] == 1
    doc = (REPO / "docs" / "metrics.md").read_text()
    for name in (
        "inferwatch_prefill_time_seconds",
        "inferwatch_decode_time_seconds",
        "inferwatch_prompt_length_tokens",
        "inferwatch_generation_length_tokens",
        LORA_ACTIVE,
        LORA_MAX,
    ):
        assert f"`{name}`" in doc, name


# --------------------------------------------------------------------------- every engine
#: issue 23's worker families and the docs/engines.md row that states them
ROWS = {
    "inferwatch_prefill_time_seconds": "`inferwatch_prefill_time_seconds`, `inferwatch_decode_time_seconds`",
    "inferwatch_decode_time_seconds": "`inferwatch_prefill_time_seconds`, `inferwatch_decode_time_seconds`",
    "inferwatch_prompt_length_tokens": "`inferwatch_prompt_length_tokens`, `inferwatch_generation_length_tokens`",
    "inferwatch_generation_length_tokens": "`inferwatch_prompt_length_tokens`, `inferwatch_generation_length_tokens`",
    "inferwatch_queue_time_seconds": "`inferwatch_queue_time_seconds`",
}  # fmt: skip
#: the columns of docs/engines.md's table, by engine
COLUMNS = ("vllm", "sglang", "tgi", "llamacpp", "triton", "trtllm", "lmdeploy", "nim")
#: engine -> the issue-23 histograms its own /metrics has (verified upstream: the
#: sources cited in each engines/<engine>.py), and the writer's default format
HAS = {
    "vllm": set(ROWS),
    "sglang": {
        "inferwatch_prompt_length_tokens",
        "inferwatch_generation_length_tokens",
        "inferwatch_queue_time_seconds",
    },
    "tgi": {
        "inferwatch_prompt_length_tokens",
        "inferwatch_generation_length_tokens",
        "inferwatch_queue_time_seconds",
    },
    "llamacpp": set(),
    "triton": set(),
    "trtllm": {
        "inferwatch_prefill_time_seconds",
        "inferwatch_decode_time_seconds",
        "inferwatch_queue_time_seconds",
    },
    "lmdeploy": set(ROWS),
    "nim": {"inferwatch_prompt_length_tokens", "inferwatch_generation_length_tokens"},
}
ONE_REQUEST = FinishedRequest(
    finish_reason="stop",
    prompt_tokens=2500,
    generation_tokens=40,
    cached_tokens=0,
    max_tokens_param=64,
    e2e=3.0,
    queue_time=0.5,
    prefill_time=0.7,
    decode_time=1.8,
    inference_time=2.5,
    mean_tpot=0.045,
    preemptions=0,
)
#: the value each family observed for ONE_REQUEST
OBSERVED = {
    "inferwatch_prefill_time_seconds": 0.7,
    "inferwatch_decode_time_seconds": 1.8,
    "inferwatch_prompt_length_tokens": 2500,
    "inferwatch_generation_length_tokens": 40,
    "inferwatch_queue_time_seconds": 0.5,
}


def _doc_cells(row: str) -> dict[str, str]:
    doc = (REPO / "docs" / "engines.md").read_text()
    (line,) = [ln for ln in doc.splitlines() if ln.startswith(f"| {row} |")]
    cells = [c.strip() for c in line.strip("|").split("|")][1:]
    return dict(zip(COLUMNS, cells, strict=True))


@pytest.mark.parametrize("engine", COLUMNS)
def test_each_engine_maps_the_signals_it_has_from_the_simulators_real_names(engine: str) -> None:
    """The simulator's writer serves the engine's own names and buckets; the engine table
    maps exactly the families the engine has, one observation per finished request."""
    writer = create_writer(SimConfig(engine=engine, format=formats(engine)[0]))
    writer.on_step(0, StepStats(engine=0, finished=(ONE_REQUEST,)))
    snapshot = EngineSnapshot(engine=0, running=1, waiting=0, num_gpu_blocks=10, max_num_seqs=8)
    text = writer.render([snapshot]).body.decode()
    mapped = map_exposition(text, ENGINES[engine])
    got = {name for name in OBSERVED if mapped.histograms.get(name)}
    assert got == HAS[engine]
    for name in got:
        (hist,) = mapped.histograms[name].values()
        assert hist.count == 1, (engine, name)
        assert hist.sum == pytest.approx(OBSERVED[name]), (engine, name)
    # docs/engines.md says the same: "-" exactly where the engine lacks the family
    for name, row in ROWS.items():
        cell = _doc_cells(row)[engine]
        assert (cell != "-") == (name in HAS[engine]), (engine, row, cell)


def test_sglang_lora_pool_gives_the_adapter_limit_not_adapter_names() -> None:
    """SchedulerMetricsCollector with --enable-lora (collector.py @ 00ae9c15): pool slot
    gauges per scheduler rank, no adapter names."""
    lines = ["# HELP sglang:lora_pool_slots_total x", "# TYPE sglang:lora_pool_slots_total gauge"]
    for tp in ("0", "1"):  # --enable-metrics-for-all-schedulers: one copy per TP rank
        lab = f'engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="{tp}"'
        lines.append(f"sglang:lora_pool_slots_total{{{lab}}} 8.0")
    lines += ["# HELP sglang:lora_pool_slots_used x", "# TYPE sglang:lora_pool_slots_used gauge"]
    lines.append(
        'sglang:lora_pool_slots_used{engine_type="unified",model_name="m",tp_rank="0"} 3.0'
    )
    mapped = map_exposition("\n".join(lines) + "\n", ENGINES["sglang"])
    assert mapped.gauges[LORA_MAX] == {(("model", "m"),): 8.0}  # the copies are not added
    assert LORA_ACTIVE not in mapped.gauges
    # without --enable-lora the family is absent, and so is the limit
    assert LORA_MAX not in map_exposition("", ENGINES["sglang"]).gauges
