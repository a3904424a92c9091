"""vLLM expositions for tests, in each format of shared/reference/vllm-metrics.md.

Written independently of the simulator so that the mapping is tested against
text built from the reference's facts, not against our own writer.

Formats:
- ``v1``: vLLM 0.33 single process: ``model_name`` + ``engine`` labels, ``_created``.
- ``dp``: data-parallel engines (``engine`` = "0".."n-1"), multiprocess mode
  (no ``_created``), the KV gauge repeated per API-server ``pid``.
- ``v0``: before 2025-10: ``model_name`` only, no ``_created``, old names.
- ``v011``: 0.10/0.11 era: engine label, ``gpu_cache_usage_perc``,
  ``gpu_prefix_cache_*``, ``time_per_output_token_seconds``.
- ``disabled``: ``--disable-log-stats``: only HTTP and process families.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
    640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
    20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
    7680.0,
)  # fmt: skip


def _fmt(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


@dataclass
class EngineValues:
    """One engine rank's state; histograms are lists of observations."""

    running: float = 0
    waiting: float = 0
    kv: float = 0.0
    prefix_queries: float = 0
    prefix_hits: float = 0
    preemptions: float = 0
    prompt_tokens: float = 0
    generation_tokens: float = 0
    finished: dict[str, float] = field(
        default_factory=lambda: {"stop": 0, "length": 0, "abort": 0, "error": 0}
    )
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    queue_time: list[float] = field(default_factory=list)


def _cumulative(bounds: Sequence[float], observations: Sequence[float]) -> list[int]:
    counts = [0] * (len(bounds) + 1)
    for o in observations:
        counts[bisect.bisect_left(bounds, o)] += 1
    out, total = [], 0
    for c in counts:
        total += c
        out.append(total)
    return out


class _Writer:
    def __init__(self, created: bool) -> None:
        self.lines: list[str] = []
        self.created = created

    def family(
        self,
        name: str,
        kind: str,
        help_: str,
        rows: Sequence[tuple[dict[str, str], float | tuple[Sequence[float], list[float]]]],
    ) -> None:
        exposed = name + "_total" if kind == "counter" else name
        self.lines.append(f"# HELP {exposed} {help_}")
        self.lines.append(f"# TYPE {exposed} {kind}")
        for labels, value in rows:
            lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
            if kind == "histogram":
                bounds, obs = value  # type: ignore[misc]
                cum = _cumulative(bounds, obs)
                for b, c in zip([*bounds, float("inf")], cum, strict=True):
                    self.lines.append(f'{name}_bucket{{{lab},le="{_fmt(b)}"}} {float(c)!r}')
                self.lines.append(f"{name}_count{{{lab}}} {float(cum[-1])!r}")
                self.lines.append(f"{name}_sum{{{lab}}} {float(sum(obs))!r}")
            else:
                self.lines.append(f"{exposed}{{{lab}}} {float(value)!r}")  # type: ignore[arg-type]
        if self.created and kind in ("counter", "histogram"):
            self.lines.append(f"# HELP {name}_created {help_}")
            self.lines.append(f"# TYPE {name}_created gauge")
            for labels, _ in rows:
                lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
                self.lines.append(f"{name}_created{{{lab}}} 1.7643e+09")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _http_and_process(w: _Writer) -> None:
    w.family(
        "http_requests",
        "counter",
        "Total number of requests by method, status and handler.",
        [({"handler": "/v1/completions", "method": "POST", "status": "2xx"}, 42)],
    )
    w.family(
        "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", [({}, 1.5e9)]
    )
    w.family(
        "python_gc_objects_collected",
        "counter",
        "Objects collected during gc",
        [({"generation": "0"}, 1234)],
    )


def render(
    fmt: str,
    engines: Sequence[EngineValues],
    model: str = "m",
    idle_pids: Sequence[str] = ("301", "302"),
    busy_pid: str = "273",
) -> str:
    """The exposition of ``engines`` (one per data-parallel rank) in format ``fmt``."""
    w = _Writer(created=fmt in ("v1", "v011"))
    if fmt == "disabled":
        _http_and_process(w)
        return w.text()
    v0 = fmt == "v0"

    def lab(i: int) -> dict[str, str]:
        return {"model_name": model} if v0 else {"engine": str(i), "model_name": model}

    ranks = list(enumerate(engines))
    w.family(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        [(lab(i), e.running) for i, e in ranks],
    )
    w.family(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        [(lab(i), e.waiting) for i, e in ranks],
    )
    if fmt in ("v1", "dp"):
        kv_rows: list[tuple[dict[str, str], float]] = []
        for i, e in ranks:
            if fmt == "dp":
                kv_rows.append(({**lab(i), "pid": busy_pid}, e.kv))
                kv_rows += [({**lab(i), "pid": p}, 0.0) for p in idle_pids]
            else:
                kv_rows.append((lab(i), e.kv))
        w.family(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            kv_rows,
        )
        prefix = "vllm:prefix_cache"
        itl_name = "vllm:inter_token_latency_seconds"
    else:
        w.family(
            "vllm:gpu_cache_usage_perc",
            "gauge",
            "GPU KV-cache usage.",
            [(lab(i), e.kv) for i, e in ranks],
        )
        prefix = "vllm:gpu_prefix_cache"
        itl_name = "vllm:time_per_output_token_seconds"
    w.family(
        f"{prefix}_queries",
        "counter",
        "Prefix cache queries, in tokens.",
        [(lab(i), e.prefix_queries) for i, e in ranks],
    )
    w.family(
        f"{prefix}_hits",
        "counter",
        "Prefix cache hits, in tokens.",
        [(lab(i), e.prefix_hits) for i, e in ranks],
    )
    w.family(
        "vllm:num_preemptions",
        "counter",
        "Cumulative number of preemptions.",
        [(lab(i), e.preemptions) for i, e in ranks],
    )
    w.family(
        "vllm:prompt_tokens",
        "counter",
        "Number of prefill tokens processed.",
        [(lab(i), e.prompt_tokens) for i, e in ranks],
    )
    w.family(
        "vllm:generation_tokens",
        "counter",
        "Number of generation tokens processed.",
        [(lab(i), e.generation_tokens) for i, e in ranks],
    )
    w.family(
        "vllm:request_success",
        "counter",
        "Count of successfully processed requests.",
        [({**lab(i), "finished_reason": r}, n) for i, e in ranks for r, n in e.finished.items()],
    )
    if not v0:
        w.family(
            "vllm:admission_rejections",
            "counter",
            "Requests rejected at admission.",
            [({"model_name": model, "reason": "max_num_queued_reqs"}, 0)],
        )
    w.family(
        "vllm:time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token.",
        [(lab(i), (TTFT_BUCKETS, e.ttft)) for i, e in ranks],
    )
    w.family(
        itl_name,
        "histogram",
        "Histogram of inter-token latency.",
        [(lab(i), (ITL_BUCKETS, e.itl)) for i, e in ranks],
    )
    w.family(
        "vllm:e2e_request_latency_seconds",
        "histogram",
        "Histogram of e2e request latency.",
        [(lab(i), (E2E_BUCKETS, e.e2e)) for i, e in ranks],
    )
    w.family(
        "vllm:request_queue_time_seconds",
        "histogram",
        "Time spent waiting in the queue.",
        [(lab(i), (E2E_BUCKETS, e.queue_time)) for i, e in ranks],
    )
    w.family(
        "vllm:iteration_tokens_total",
        "histogram",
        "Tokens per engine step.",
        [(lab(i), ((1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048), [16, 32])) for i, _ in ranks],
    )
    if not v0:
        w.family(
            "vllm:cache_config_info",
            "gauge",
            "Information of the LLMEngine CacheConfig",
            [
                (
                    {
                        "block_size": "16",
                        "cache_dtype": "auto",
                        "enable_prefix_caching": "True",
                        "engine": "0",
                        "gpu_memory_utilization": "0.9",
                        "num_gpu_blocks": "2048",
                    },
                    1,
                )
            ],
        )
    if fmt in ("v1", "v011"):
        _http_and_process(w)
    return w.text()
