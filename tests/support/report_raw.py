"""The weekly report's input, written by hand: a steady worker and its GPU as
``report.query`` would have read them, for tests that vary one figure at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inferwatch.report.model import Buckets, Daily, RawGpu, RawWorker


def steady_worker(
    name: str,
    n: int,
    histograms: Mapping[str, Sequence[Buckets | None] | None],
    per_day: float = 100.0,
    instance: str = "h:1",
    **figures: Any,
) -> RawWorker:
    """vLLM worker ``name`` of model m on ``instance`` over ``n``
    half-day steps: ``per_day`` requests, prompt and generated tokens a step, 256 slots,
    one request waiting at the most, never over capacity; ``figures`` add to or replace
    those (``RawWorker.of_series``' keywords)."""
    steady: dict[str, Any] = {
        "requests": (per_day,) * n,
        "prompt_tokens": (per_day,) * n,
        "generation_tokens": (per_day,) * n,
        "queue_max": (1.0,) * n,
        "over_capacity_seconds": (0.0,) * n,
    }
    return RawWorker.of_series(
        "m",
        name,
        "vllm",
        (instance,),
        histograms=histograms,
        capacity=256.0,
        **{**steady, **figures},
    )


def steady_gpu(
    n: int,
    band_daily: dict[str, Daily] | None = None,
    util: float = 0.45,
    p90: float = 0.5,
    vram: float = 0.5,
    **fields: Any,
) -> RawGpu:
    """GPU-0 of host h:1 holding w0 over ``n`` half-day steps: ``util`` mean utilization
    (``p90`` its week's P90), no time in any band unless ``band_daily`` says, ``vram`` of
    its memory at the peak; ``fields`` replace any other of ``RawGpu``'s."""
    gpu: dict[str, Any] = {
        "uuid": "GPU-0",
        "instance": "h:1",
        "gpu": "0",
        "name": "",
        "util_daily": {"mean": (util,) * n},
        "band_daily": band_daily
        or {"waste": (0.0,) * n, "healthy": (0.0,) * n, "scale_review": (0.0,) * n},
        "util_week": {"mean": (util, util), "p90": (p90, p90)},
        "sm_active_week": None,
        "vram_peak_ratio": (vram,) * n,
        "vram_peak_bytes": None,
        "workers": ("w0",),
    }
    return RawGpu(**{**gpu, **fields})
