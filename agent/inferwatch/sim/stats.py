"""What the simulated engine tells an exposition writer: plain frozen records.

The engine knows nothing of metric names. After every step it hands a
:class:`StepStats` to its sink; at scrape time the writer asks for one
:class:`EngineSnapshot` per engine. A writer for another engine's format
(SGLang, TGI, ...) builds its own families from the same records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: vLLM's FinishReason values, in its order; every writer knows at least these.
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


@dataclass(frozen=True)
class FinishedRequest:
    """One request that left the engine, with vLLM's per-request timings (seconds)."""

    finish_reason: str
    prompt_tokens: int
    generation_tokens: int
    #: prompt tokens served from the prefix cache
    cached_tokens: int
    max_tokens_param: int | None
    e2e: float
    queue_time: float
    prefill_time: float
    decode_time: float
    inference_time: float
    #: mean time per output token after the first (0 when fewer than two tokens)
    mean_tpot: float
    preemptions: int
    n: int = 1

    @property
    def computed_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True)
class RequestStarted:
    """A request that produced its first token in this step."""

    max_tokens: int
    n: int = 1


@dataclass(frozen=True)
class StepStats:
    """What one engine step did (or, for ``step == False``, an abort outside a step)."""

    engine: int
    #: full prompt lengths of requests that produced their first token (vLLM counts here)
    prompt_tokens: int = 0
    #: the part of those prompts that came from the prefix cache
    cached_prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    #: prefix cache lookups of requests admitted this step, in tokens
    prefix_queries: int = 0
    prefix_hits: int = 0
    ttfts: tuple[float, ...] = ()
    #: one inter-token latency per request that got a second-or-later token
    itls: tuple[float, ...] = ()
    started: tuple[RequestStarted, ...] = ()
    finished: tuple[FinishedRequest, ...] = ()
    step: bool = True

    @property
    def iteration_tokens(self) -> int:
        return self.prompt_tokens + self.generation_tokens


@dataclass(frozen=True)
class EngineSnapshot:
    """The gauges of one engine at one instant."""

    engine: int
    running: int
    waiting: int
    #: waiting split by why: "capacity" (no room in the batch or KV) and "deferred"
    waiting_by_reason: dict[str, int] = field(default_factory=dict)
    kv_usage: float = 0.0
    blocks_in_use: int = 0
    num_gpu_blocks: int = 0
    max_num_seqs: int = 0


@dataclass(frozen=True)
class HttpRecord:
    """One finished HTTP request, for the FastAPI-instrumentator-like series."""

    handler: str
    method: str
    status: int
    seconds: float
    request_bytes: int = 0
    response_bytes: int = 0
