"""Engine expositions written from the verified facts, independently of the simulator's writers.

``gauge``, ``counter`` and ``histogram`` write one family each in Prometheus
text format 0.0.4 as the engine's own client library does; ``sglang_text`` is
SGLang's DP 2 x TP 2 exposition (every TP rank repeats its scheduler gauges).
Used by tests/unit/test_engines_mapping.py (every engine onto the contract) and
tests/unit/test_hardening.py (a worker whose text changes engine).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

LabelSet = dict[str, str]


# --------------------------------------------------------------------------- text helpers
def _labels(labels: LabelSet, extra: str = "") -> str:
    parts = [f'{k}="{v}"' for k, v in labels.items()]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(v: float) -> str:
    return repr(float(v))


def gauge(name: str, series: Iterable[tuple[LabelSet, float]]) -> str:
    lines = [f"# HELP {name} g", f"# TYPE {name} gauge"]
    lines += [f"{name}{_labels(lab)} {_num(v)}" for lab, v in series]
    return "\n".join(lines) + "\n"


def counter(name: str, series: Iterable[tuple[LabelSet, float]], *, suffix: str = "_total") -> str:
    """``suffix=""`` writes a counter as the Rust crate and prometheus-cpp do (no _total)."""
    # prometheus_client's 0.0.4 text names the family with its _total, as the samples
    lines = [f"# HELP {name}{suffix} c", f"# TYPE {name}{suffix} counter"]
    lines += [f"{name}{suffix}{_labels(lab)} {_num(v)}" for lab, v in series]
    return "\n".join(lines) + "\n"


def histogram(
    name: str,
    bounds: Sequence[float],
    series: Iterable[tuple[LabelSet, Sequence[float]]],
    *,
    le: str = "{:g}",
) -> str:
    lines = [f"# HELP {name} h", f"# TYPE {name} histogram"]
    for lab, observations in series:
        for b in bounds:
            n = sum(1 for o in observations if o <= b)
            bound = 'le="' + le.format(b) + '"'
            lines.append(f"{name}_bucket{_labels(lab, bound)} {_num(n)}")
        inf = _labels(lab, 'le="+Inf"')
        lines.append(f"{name}_bucket{inf} {_num(len(observations))}")
        lines.append(f"{name}_sum{_labels(lab)} {_num(sum(observations))}")
        lines.append(f"{name}_count{_labels(lab)} {_num(len(observations))}")
    return "\n".join(lines) + "\n"


# SGLang's bucket bounds (python/sglang/srt/metrics/collector.py)
SGL_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGL_ITL = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
    0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
SGL_E2E = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200,
    1800, 2400,
)  # fmt: skip
SGL_QUEUE = (0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60)


def sglang_text(*, itl_name: str = "sglang:inter_token_latency_seconds") -> str:
    """DP 2 x TP 2 with --enable-metrics-for-all-schedulers: every TP rank repeats its gauge."""

    def sched(dp: int, tp: int) -> LabelSet:
        return {
            "model_name": "m",
            "engine_type": "unified",
            "tp_rank": str(tp),
            "pp_rank": "0",
            "moe_ep_rank": "0",
            "dp_rank": str(dp),
        }

    ranks = [(dp, tp) for dp in (0, 1) for tp in (0, 1)]
    queue = {0: 3.0, 1: 4.0}
    running = {0: 8.0, 1: 6.0}
    usage = {0: 0.2, 1: 0.6}
    retracted = {0: 2.0, 1: 1.0}
    tok = {"model_name": "m", "engine_type": "unified"}
    return "".join(
        [
            gauge("sglang:num_queue_reqs", [(sched(d, t), queue[d]) for d, t in ranks]),
            gauge("sglang:num_running_reqs", [(sched(d, t), running[d]) for d, t in ranks]),
            gauge("sglang:token_usage", [(sched(d, t), usage[d]) for d, t in ranks]),
            gauge("sglang:cache_hit_rate", [(sched(d, t), 0.5) for d, t in ranks]),
            counter(
                "sglang:num_retracted_requests", [(sched(d, t), retracted[d]) for d, t in ranks]
            ),
            histogram(
                "sglang:queue_time_seconds", SGL_QUEUE, [(sched(d, t), [0.3]) for d, t in ranks]
            ),
            counter("sglang:prompt_tokens", [(tok, 1000)]),
            counter("sglang:generation_tokens", [(tok, 200)]),
            # declared, no series: prometheus_client shows a labelled counter's
            # family before its first increment (no cache hit yet)
            counter("sglang:cached_tokens", []),
            counter("sglang:num_requests", [(tok, 10)]),
            counter("sglang:num_aborted_requests", [(tok, 1)]),
            histogram("sglang:time_to_first_token_seconds", SGL_TTFT, [(tok, [0.15, 0.5, 3.0])]),
            histogram(itl_name, SGL_ITL, [(tok, [0.012] * 9 + [0.05])]),
            histogram("sglang:e2e_request_latency_seconds", SGL_E2E, [(tok, [1.5, 7.0])]),
        ]
    )
