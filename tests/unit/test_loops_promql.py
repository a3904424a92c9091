"""pack/loops.py's conditions are the PromQL's: the same pictures, through promtool and Python.

Each case is a small fleet held steady: the agent's raw series as promtool input
series, and the same numbers given to the condition of ``pack.loops``. promtool
evaluates the generated recording and alert rules (``pack.rules.generate``) well
past every ``for``, and the workers whose alert fires must be the workers for
which the Python condition holds. Cases sit on both sides of each line, so a
definition that drifts on either side fails here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from tests.support.e2e import rule_files
from tests.support.proc import promtool

from inferwatch.pack import loops as L
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.stats import histogram_quantile

T = load_thresholds()
STEP = 15  # seconds; the rule groups' interval (pack.scrape_interval)
EVAL = "40m"  # past every `for` of the loops' alerts, and past queue.rising_window
SAMPLES = 200  # 50 minutes of samples
BOUNDS = (0.1, 0.5, 1.0, 2.5)
BASE = {"job": "inferwatch", "instance": "agent:10127"}


@dataclass
class W:
    """One worker on its own GPU, every gauge constant (the queue may grow)."""

    name: str
    util: float = 0.5
    waiting: float = 0.0
    #: queue growth per sample (0: flat)
    waiting_step: float = 0.0
    running: float = 2.0
    max_num_seqs: float | None = 20
    kv: float | None = 0.5
    vram: float = 0.5
    #: TTFT observations per sample, by bucket upper bound (cumulative), +Inf last
    ttft: tuple[float, ...] = (10, 10, 10, 10, 10)
    model: str = "m"
    #: unix time the worker started (promtool's clock starts at 0); None: not exported
    start: float | None = None
    #: the warm-up gate's deadline gauge (0 warmed or warming, 1 opened cold); None: no gate
    gate_deadline: float | None = None
    #: inferwatch_target_up (0: the agent cannot read the worker)
    up: float = 1.0
    #: process starts before ``start``, 150 s apart (a crash loop when enough)
    restarts: int = 0

    def quantile(self, q: float) -> float:
        cum = tuple(zip((*BOUNDS, math.inf), self.ttft, strict=True))
        return histogram_quantile(q, cum)


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    text = ",".join(f'{k}="{v}"' for k, v in {**BASE, **labels}.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def _flat(value: float) -> str:
    return f"{value:g}+0x{SAMPLES}"


def _start_values(w: W) -> str:
    """The start-time gauge: ``w.start`` since the last start, earlier starts before it."""
    assert w.start is not None
    if not w.restarts:
        return _flat(w.start)
    last = int(w.start // STEP) + 1  # the first sample after the process started
    every = 150 // STEP
    values = []
    for i in range(SAMPLES + 1):
        before = math.ceil((last - i) / every) if i < last else 0  # restarts still ahead
        values.append(w.start - 150 * min(before, w.restarts))
    return " ".join(f"{v:g}" for v in values)


def input_series(workers: list[W]) -> list[dict[str, str]]:
    out = []
    for i, w in enumerate(workers):
        eng = {"worker": w.name, "model": w.model, "engine": "vllm"}
        gpu = {"gpu": str(i), "uuid": f"GPU-{i}"}
        out += [
            _series("inferwatch_gpu_utilization_ratio", gpu, _flat(w.util)),
            _series("inferwatch_gpu_memory_used_ratio", gpu, _flat(w.vram)),
            _series("inferwatch_worker_gpu_info", {"worker": w.name, **gpu}, _flat(1)),
            _series("inferwatch_requests_running", eng, _flat(w.running)),
            _series("inferwatch_queue_depth", eng, f"{w.waiting:g}+{w.waiting_step:g}x{SAMPLES}"),
        ]
        if w.max_num_seqs is not None:
            out.append(_series("inferwatch_max_num_seqs", eng, _flat(w.max_num_seqs)))
        if w.kv is not None:
            out.append(_series("inferwatch_kv_cache_usage_ratio", eng, _flat(w.kv)))
        out.append(_series("inferwatch_target_up", {"worker": w.name}, _flat(w.up)))
        if w.start is not None:
            out.append(_series("inferwatch_worker_start_time_seconds", eng, _start_values(w)))
        if w.gate_deadline is not None:
            gate = {"worker": w.name}  # the gate's series carry no model or engine
            out.append(_series("inferwatch_warmup_deadline_exceeded", gate, _flat(w.gate_deadline)))
        for le, per_sample in zip((*BOUNDS, math.inf), w.ttft, strict=True):
            bucket = {**eng, "le": "+Inf" if math.isinf(le) else f"{le:g}"}
            out.append(
                _series("inferwatch_ttft_seconds_bucket", bucket, f"0+{per_sample:g}x{SAMPLES}")
            )
    return out


def promtool_agrees(tmp_path: Path, workers: list[W], alert: str, expected: set[str]) -> str:
    """Run promtool on the generated rules: ``alert`` must fire at EVAL for exactly the
    workers in ``expected``. Returns promtool's output ("" when it agreed)."""
    doc = {
        "rule_files": rule_files(T, tmp_path),
        "evaluation_interval": f"{STEP}s",
        "tests": [
            {
                "interval": f"{STEP}s",
                "input_series": input_series(workers),
                "promql_expr_test": [
                    {
                        "expr": f'count by (worker) (ALERTS{{alertname="{alert}",'
                        'alertstate="firing"})',
                        "eval_time": EVAL,
                        "exp_samples": [
                            {"labels": f'{{worker="{name}"}}', "value": 1}
                            for name in sorted(expected)
                        ],
                    }
                ],
            }
        ],
    }
    test_file = tmp_path / "loops.test.yaml"
    test_file.write_text(yaml.safe_dump(doc))
    done = promtool("test", "rules", str(test_file))
    return "" if done.returncode == 0 else done.stdout + done.stderr


def assert_rules_fire_for(tmp_path: Path, workers: list[W], alert: str, expected: set[str]) -> None:
    """promtool must agree that ``alert`` fires for ``expected`` (and no other worker)."""
    out = promtool_agrees(tmp_path, workers, alert, expected)
    assert not out, f"the rules disagree with pack.loops ({sorted(expected)}):\n{out}"


def test_a_disagreement_fails(tmp_path: Path) -> None:
    """The check can fail: claim the 90/10/10/10 case fires for the quiet workers too."""
    workers = IMBALANCE["random routing"]
    out = promtool_agrees(tmp_path, workers, "InferenceLoadImbalance", {"a", "b"})
    assert "FAILED" in out
    assert not promtool_agrees(tmp_path, workers, "InferenceLoadImbalance", {"a"})


# --------------------------------------------------------------------------- the loops


def model_util(workers: list[W]) -> float:
    return sum(w.util for w in workers) / len(workers)


def model_ttft_p99(workers: list[W]) -> float:
    merged = [sum(col) for col in zip(*(w.ttft for w in workers), strict=True)]
    return histogram_quantile(0.99, tuple(zip((*BOUNDS, math.inf), merged, strict=True)))


def python_imbalance(workers: list[W]) -> set[str]:
    loads = [L.WorkerLoad(w.name, w.util, w.waiting + w.running) for w in workers]
    return set(L.imbalanced(loads, model_util(workers), model_ttft_p99(workers), T))


IMBALANCE = {
    # [6.2] loop 1: random routing, 90/10/10/10, equal open requests
    "random routing": [W("a", 0.9), W("b", 0.1), W("c", 0.1), W("d", 0.1)],
    # open requests 8 against 1, equal GPUs
    "open requests": [W("a", 0.3, running=8), W("b", 0.3, running=1)],
    # just under the ratio: 2.9x the others' mean
    "under the ratio": [W("a", 0.3, running=2.9), W("b", 0.3, running=1.0)],
    # the busy worker's GPU under idle_below: no GPU branch
    "all idle": [W("a", 0.35), W("b", 0.05), W("c", 0.05)],
    # the model's GPUs at 45 %: not idle
    "model busy": [W("a", 0.9), W("b", 0.3), W("c", 0.3), W("d", 0.3)],
    # latency out of the SLO: every first token over 2.5 s
    "slow": [W("a", 0.9, ttft=(0, 0, 0, 0, 10)), W("b", 0.1), W("c", 0.1), W("d", 0.1)],
    "one worker": [W("a", 0.9, running=9)],
}


@pytest.mark.parametrize("case", list(IMBALANCE))
def test_imbalance_is_the_rules_definition(tmp_path: Path, case: str) -> None:
    workers = IMBALANCE[case]
    expected = python_imbalance(workers)
    assert_rules_fire_for(tmp_path, workers, "InferenceLoadImbalance", expected)


def test_the_imbalance_cases_cover_both_sides() -> None:
    fired = {case: bool(python_imbalance(ws)) for case, ws in IMBALANCE.items()}
    assert fired == {
        "random routing": True,
        "open requests": True,
        "under the ratio": False,
        "all idle": False,
        "model busy": False,
        "slow": False,
        "one worker": False,
    }


RISING = 0.5  # requests per sample: 2 a minute, above queue.rising_min_per_minute

MEMORY = {
    "KV full, queue rising": W("a", kv=0.95, vram=0.96, waiting_step=RISING),
    "KV full, queue flat": W("a", kv=0.95, vram=0.96),
    "pool reserved, KV empty": W("a", kv=0.3, vram=0.96, waiting_step=RISING),
    "no KV gauge, card full": W("a", kv=None, vram=0.96, waiting_step=RISING),
    "at the line": W("a", kv=0.92, vram=0.96, waiting_step=RISING),
}


@pytest.mark.parametrize("case", list(MEMORY))
def test_memory_pressure_is_the_rules_definition(tmp_path: Path, case: str) -> None:
    w = MEMORY[case]
    slope = w.waiting_step / STEP
    expected = {w.name} if L.memory(w.kv, w.vram, slope, T) else set()
    assert_rules_fire_for(tmp_path, [w], "InferenceVRAMPressureQueueRising", expected)
    assert case not in ("KV full, queue rising", "no KV gauge, card full") or expected


CAPACITY = {
    "over max_num_seqs": W("a", waiting=25, running=20, max_num_seqs=20),
    "under max_num_seqs": W("a", waiting=15, running=20, max_num_seqs=20),
    "KV bound": W("a", waiting=12, running=10, kv=0.95, max_num_seqs=20),
    "KV fine": W("a", waiting=12, running=10, kv=0.5, max_num_seqs=20),
    "no max_num_seqs, KV bound": W("a", waiting=12, running=10, kv=0.95, max_num_seqs=None),
}


@pytest.mark.parametrize("case", list(CAPACITY))
def test_over_capacity_is_the_rules_definition(tmp_path: Path, case: str) -> None:
    w = CAPACITY[case]
    expected = {w.name} if L.over_capacity(w.waiting, w.max_num_seqs, w.running, w.kv, T) else set()
    assert_rules_fire_for(tmp_path, [w], "InferenceQueueOverCapacity", expected)
    assert bool(expected) == (
        case in ("over max_num_seqs", "KV bound", "no max_num_seqs, KV bound")
    )


TAIL = {
    # half the first tokens under 0.1 s, 1 % over 1 s: P99 / P50 well over 5
    "long": W("a", ttft=(50, 90, 98, 100, 100)),
    # a tight distribution: P99 / P50 about 2
    "tight": W("a", ttft=(50, 100, 100, 100, 100)),
}


@pytest.mark.parametrize("case", list(TAIL))
def test_long_tail_is_the_rules_definition(tmp_path: Path, case: str) -> None:
    w = TAIL[case]
    expected = {w.name} if L.long_tail(w.quantile(0.5), w.quantile(0.99), T) else set()
    assert_rules_fire_for(tmp_path, [w], "InferenceLatencyLongTail", expected)
    assert bool(expected) == (case == "long")


EVAL_SECONDS = 2400.0  # EVAL
SLOW = (0, 0, 0, 10, 10)  # every first token between 1 and 2.5 s: P95 about 2.4 s
#: started 7 minutes before EVAL (young), or long before promtool's clock began
YOUNG, OLD = EVAL_SECONDS - 420, -3 * 86400.0

LOOP2 = {
    "old, idle, slow": W("a", 0.1, ttft=SLOW, start=OLD),
    "old, busy, slow": W("a", 0.6, ttft=SLOW, start=OLD),
    "young, idle, slow": W("a", 0.1, ttft=SLOW, start=YOUNG),
    "young, slow, over capacity": W(
        "a", 0.1, ttft=SLOW, start=YOUNG, waiting=30, running=20, max_num_seqs=20
    ),
    "young, fast": W("a", 0.1, start=YOUNG),
    # the gate held traffic until warm: the slow samples are its own cold request
    "young, slow, warmed by the gate": W("a", 0.1, ttft=SLOW, start=YOUNG, gate_deadline=0),
    # the gate gave up on its deadline: users met the cold path
    "young, slow, gate opened cold": W("a", 0.1, ttft=SLOW, start=YOUNG, gate_deadline=1),
}


@pytest.mark.parametrize("case", list(LOOP2))
def test_loop_2_is_the_rules_definition(tmp_path: Path, case: str) -> None:
    w = LOOP2[case]
    uptime = EVAL_SECONDS - w.start if w.start is not None else None
    p95 = w.quantile(0.95)
    over = L.over_capacity(w.waiting, w.max_num_seqs, w.running, w.kv, T)
    warm = {w.name} if L.warmup(p95, w.util, uptime, T) else set()
    gate = None if w.gate_deadline is None else w.gate_deadline == 1
    cold = {w.name} if L.cold_start(p95, uptime, over, T, gate) else set()
    assert_rules_fire_for(tmp_path, [w], "InferenceTTFTHighGPUIdle", warm)
    assert_rules_fire_for(tmp_path, [w], "InferenceWorkerColdStart", cold)
    assert (bool(warm), bool(cold)) == {
        "old, idle, slow": (True, False),
        "old, busy, slow": (False, False),
        "young, idle, slow": (False, True),
        "young, slow, over capacity": (False, False),
        "young, fast": (False, False),
        "young, slow, warmed by the gate": (False, False),
        "young, slow, gate opened cold": (False, True),
    }[case]


DOWN = {
    "up": W("a", start=YOUNG),
    "unreachable, long running": W("a", up=0, start=OLD),
    "unreachable, loading (young)": W("a", up=0, start=YOUNG),
    "unreachable, young but in a crash loop": W("a", up=0, start=YOUNG, restarts=3),
    "unreachable, no start time": W("a", up=0),
}


@pytest.mark.parametrize("case", list(DOWN))
def test_worker_down_is_the_rules_definition(tmp_path: Path, case: str) -> None:
    w = DOWN[case]
    uptime = EVAL_SECONDS - w.start if w.start is not None else None
    restarts = w.restarts if w.start is not None else None
    down = {w.name} if L.worker_down(w.up == 1, uptime, restarts, T) else set()
    assert_rules_fire_for(tmp_path, [w], "InferenceWorkerDown", down)
    assert (
        bool(down)
        == {
            "up": False,
            "unreachable, long running": True,
            "unreachable, loading (young)": False,
            "unreachable, young but in a crash loop": True,
            "unreachable, no start time": True,
        }[case]
    )
