"""What the proxy measures: token events found in an answer as it passes, each
request's timings, tokens and finish reason, into per-model histograms and counters."""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field

from inferwatch.agent.proxy.limits import (
    MAX_EVENT_BYTES,
    MAX_JSON_BYTES,
    MAX_MODEL_CHARS,
    MAX_MODELS,
)
from inferwatch.engines import contract
from inferwatch.engines.base import TPOT, TTFT
from inferwatch.engines.mapping import Histogram
from inferwatch.engines.proxy import E2E_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS

#: a finish reason outside these is counted as "other" (a label value from the answer)
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})

UPSTREAM_ERRORS = ("connect", "timeout", "reset")
REJECT_REASONS = ("too_large",)
#: why a request went again on a fresh connection: closed (a kept-alive connection the
#: worker had closed, no byte of an answer back), refused (a connect refused)
RETRY_REASONS = ("closed", "refused")


class Buckets:
    """A histogram being filled: per-bucket counts (the last one is +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def add(self, other: Buckets) -> None:
        for i, c in enumerate(other.counts):
            self.counts[i] += c
        self.sum += other.sum

    def snapshot(self) -> Histogram:
        cumulative: list[float] = []
        total = 0
        for c in self.counts:
            total += c
            cumulative.append(float(total))
        return Histogram((*self.bounds, float("inf")), tuple(cumulative), self.sum)


@dataclass
class ModelStats:
    """One (worker, model)'s measurements since the agent started (cumulative)."""

    ttft: Buckets = field(default_factory=lambda: Buckets(TTFT_BUCKETS))
    tpot: Buckets = field(default_factory=lambda: Buckets(TPOT_BUCKETS))
    e2e: Buckets = field(default_factory=lambda: Buckets(E2E_BUCKETS))
    prompt_tokens: int = 0
    generation_tokens: int = 0
    #: status class ("2xx", ...) -> requests
    requests: dict[str, int] = field(default_factory=dict)
    aborts: int = 0
    #: finish reason (stop, length, abort, error, ...) -> requests; the contract's
    #: requests_finished for engines without one (llama.cpp)
    finished: dict[str, int] = field(default_factory=dict)

    def histogram(self, target: str) -> Buckets:
        if target == TTFT:
            return self.ttft
        if target == TPOT:
            return self.tpot
        return self.e2e

    def counter(self, target: str) -> int:
        return (
            self.prompt_tokens if target == contract.PROMPT_TOKENS.base else self.generation_tokens
        )


class ProxyStats:
    """Everything one worker's proxy measured; read by :class:`ProxySource`."""

    def __init__(self) -> None:
        self.models: dict[str, ModelStats] = {}
        self.dropped = 0
        self.upstream_errors = dict.fromkeys(UPSTREAM_ERRORS, 0)
        self.rejected = dict.fromkeys(REJECT_REASONS, 0)
        self.retries = dict.fromkeys(RETRY_REASONS, 0)
        self.in_flight = 0

    def series(self, model: str) -> ModelStats | None:
        """The model's stats, None (the sample dropped and counted) beyond the cap."""
        stats = self.models.get(model)
        if stats is None:
            if len(self.models) >= MAX_MODELS or len(model) > MAX_MODEL_CHARS:
                self.dropped += 1
                return None
            stats = self.models[model] = ModelStats()
        return stats


def _has_text(choice: object) -> bool:
    """Whether one choice of an OpenAI chunk carries generated output."""
    if not isinstance(choice, dict):
        return False
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")
        )
    return False


def _plain_token(payload: bytes) -> bool:
    """An OpenAI chunk still generating: its finish reason null, no usage and no empty
    text in it (a token whose text is not yet whole UTF-8 comes empty: parsed instead).
    Byte searches only: the bulk of a stream is never parsed as JSON."""
    if b'"finish_reason":null' not in payload and b'"finish_reason": null' not in payload:
        return False
    # an empty string anywhere (``"text":""``, ``"content": ""``): parsed, to be sure
    return b'"usage"' not in payload and b'":""' not in payload and b'": ""' not in payload


class Measure:
    """One measured request: fed the answer's chunks as they pass."""

    __slots__ = (
        "_broken",
        "_json",
        "_looked",
        "_pending",
        "_series",
        "events",
        "finish_reason",
        "first",
        "last",
        "model",
        "started",
        "stats",
        "stream",
        "usage_generation",
        "usage_prompt",
    )  # fmt: skip

    def __init__(self, stats: ProxyStats, started: float) -> None:
        self.stats = stats
        self.started = started
        self.stream = False
        self.model: str | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.events = 0
        self.usage_prompt: int | None = None
        self.usage_generation: int | None = None
        self.finish_reason: str | None = None
        self._pending = b""
        self._broken = False
        self._json: bytearray | None = None
        self._series: ModelStats | None = None
        self._looked = False

    def answer(self, content_type: str, content_encoding: str) -> None:
        """The answer's head: a server-sent event stream is parsed as it passes, a JSON
        body for its usage at the end; a compressed body is not read (end to end only)."""
        if content_encoding not in ("", "identity"):
            self._broken = True
            return
        ctype = content_type.split(";", 1)[0].strip().lower()
        if ctype == "text/event-stream":
            self.stream = True
        elif ctype == "application/json":
            self._json = bytearray()
        else:
            self._broken = True

    def feed(self, chunk: bytes, now: float) -> None:
        if self._broken:
            return
        if not self.stream:
            buf = self._json
            if buf is not None:
                if len(buf) + len(chunk) > MAX_JSON_BYTES:
                    self._json = None
                else:
                    buf += chunk
            return
        if (
            not self._pending
            and chunk.startswith(b"data:")
            and chunk.find(b"\n", 5) == len(chunk) - 2
            and chunk.endswith(b"\n\n")
        ):  # the common case: one whole event
            self._event(chunk[5:-2].strip(), now)
            return
        data = self._pending + chunk if self._pending else chunk
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if data.startswith(b"data:", start):
                self._event(data[start + 5 : end].strip(), now)
            start = end + 1
        rest = data[start:]
        if len(rest) > MAX_EVENT_BYTES:
            self._broken = True
            rest = b""
        self._pending = rest

    def _event(self, payload: bytes, now: float) -> None:
        if not payload or payload == b"[DONE]":
            return
        if self.first is not None and _plain_token(payload):
            # after the first token, a chunk still generating (no finish reason, no usage)
            # is a token event: no JSON parse for the bulk of a stream
            self.events += 1
            series = self._series_now()
            if series is not None and self.last is not None:
                series.tpot.observe(now - self.last)
            self.last = now
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        self._facts(obj)
        choices = obj.get("choices")
        if isinstance(choices, list) and any(_has_text(c) for c in choices):
            self.events += 1
            series = self._series_now()
            if self.first is None:
                self.first = now
                if series is not None:
                    series.ttft.observe(now - self.started)
            elif series is not None and self.last is not None:
                series.tpot.observe(now - self.last)
            self.last = now

    def _facts(self, obj: dict[str, object]) -> None:
        if self.model is None and isinstance(obj.get("model"), str):
            self.model = str(obj["model"])
        choices = obj.get("choices")
        if self.finish_reason is None and isinstance(choices, list):
            for choice in choices:
                reason = choice.get("finish_reason") if isinstance(choice, dict) else None
                if isinstance(reason, str) and reason:
                    self.finish_reason = reason if reason in FINISH_REASONS else "other"
                    break
        usage = obj.get("usage")
        if isinstance(usage, dict):
            prompt = usage.get("prompt_tokens")
            generated = usage.get("completion_tokens")
            if isinstance(prompt, int) and prompt >= 0:
                self.usage_prompt = prompt
            if isinstance(generated, int) and generated >= 0:
                self.usage_generation = generated

    def _series_now(self) -> ModelStats | None:
        """The request's series, looked up once (a dropped request counts once)."""
        if not self._looked:
            self._series = self.stats.series(self.model or "")
            self._looked = True
        return self._series

    def finish(self, status: int, now: float, *, aborted: bool) -> None:
        """Record the request's end: the client read the answer to its end, or went away."""
        if self._json is not None and not aborted:
            try:
                obj = json.loads(bytes(self._json))
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                self._facts(obj)
        self._json = None
        series = self._series_now()
        if series is None:
            return
        key = f"{status // 100}xx"
        series.requests[key] = series.requests.get(key, 0) + 1
        if aborted:
            series.aborts += 1
        else:
            series.e2e.observe(now - self.started)
        # finished as the engines count them: a 4xx was refused before it started
        if aborted:
            reason: str | None = "abort"
        elif status >= 500:
            reason = "error"
        elif status < 400:
            reason = self.finish_reason or "stop"
        else:
            reason = None
        if reason is not None:
            series.finished[reason] = series.finished.get(reason, 0) + 1
        if self.usage_prompt is not None:
            series.prompt_tokens += self.usage_prompt
        generated = self.usage_generation if self.usage_generation is not None else self.events
        series.generation_tokens += generated
