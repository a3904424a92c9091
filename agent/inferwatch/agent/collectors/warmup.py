"""The warm-up readiness gate (``warmup:`` in the agent's configuration).

An inference server that has just started answers its first requests slowly:
CUDA kernels compile, the KV cache is touched for the first time, a long system
prompt is not in the prefix cache yet. The field guide measured 4.8 s for an
unwarmed first call against 180 ms warm (section 5.2) and says to warm a worker
"after the service is up and before it joins the load balancer" (2.3, 6.2).

The gate does that from the sidecar. For every gated worker it

1. waits until the worker's ``/health`` answers 200;
2. asks ``/v1/models`` for the model name (unless one is configured);
3. sends the warm-up requests, streaming, and times each first token: by
   default one ``max_tokens: 1`` request per endpoint (completions and chat),
   then one chat request per configured system prompt so the prefix cache
   holds it; the first request's TTFT is the *cold* TTFT;
4. sends the first request again and times it: the *warm* TTFT (with
   ``warm_ttft_below`` set, again until it is below that);
5. marks the worker ready.

The agent's ``/readyz`` answers 200 only when every gated worker is ready, so a
readiness probe on it keeps the pod out of its Service until the worker is
warm. A worker that restarts (its process start time changes, its engine
counters go back, or its ``/health`` fails three times in a row) closes the
gate again and is warmed again. After ``deadline`` the gate opens for a worker
that is still not warm, so a pod is never held out forever;
``inferwatch_warmup_deadline_exceeded`` says so, and the warm-up keeps trying.

Waiting for ``/health`` is not a failure (a model takes a minute to load);
failed warm-up requests are, counted by reason.

The warm-up requests land in the engine's own latency histograms (or, for a worker
behind the agent's measuring proxy, which they are sent through, the proxy's), where
they would count against the TTFT SLO although no user waited for them. The gate
exports each one's time to first token in a histogram of its own
(``inferwatch_warmup_requests_ttft_seconds``), at every TTFT bucket boundary of the
engines the agent maps, from zero; the SLO rules subtract it per worker.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from inferwatch import validate
from inferwatch.agent.collectors.base import (
    ReasonError,
    Source,
    counter_family,
    gauge_family,
    histogram_family,
)
from inferwatch.agent.config import AgentConfig, WorkerSpec, local_url
from inferwatch.agent.httpio import Client, HttpError
from inferwatch.engines import ENGINES, contract, proxy
from inferwatch.engines.stream import data_payloads
from inferwatch.errors import ConfigError

if TYPE_CHECKING:
    from inferwatch.agent.collectors.engine import EngineSource
    from inferwatch.agent.collectors.process import ProcessSource

log = logging.getLogger(__name__)

ENDPOINTS = ("completions", "chat")
FAILURE_REASONS = ("connect", "timeout", "http_status", "bad_response", "no_model")
DEFAULT_PROMPT = "warm-up"
#: the histogram of every warm-up request's TTFT (docs/metrics.md; pack.names has it too)
WARMUP_REQUESTS_TTFT = contract.WARMUP_REQUESTS_TTFT_SECONDS.name
#: the user turn that follows a system prompt in its warm-up request
SYSTEM_PROMPT_USER_TURN = "ping"
#: consecutive failed /health probes of a warm worker that count as a restart
DOWN_AFTER = 3
#: longest pause between two warm-up attempts of a failing worker, seconds
MAX_BACKOFF = 30.0
#: longest wait for one /health answer, seconds
HEALTH_TIMEOUT = 5.0
#: the longest /v1/models answer read (a list of model names)
MODELS_MAX_BYTES = 4 << 20

KEYS = (
    "enabled",
    "workers",
    "model",
    "endpoints",
    "requests",
    "system_prompts",
    "timeout",
    "interval",
    "deadline",
    "warm_ttft_below",
)
REQUEST_KEYS = ("endpoint", "prompt", "max_tokens", "system_prompt")

#: every TTFT bucket boundary of the histograms the agent maps (each engine's own, as its
#: table states them in seconds, and the measuring proxy's): an SLO threshold is one of
#: its engine's boundaries, so the warm-up requests' histogram has a bucket at every
#: threshold the SLO rules can read
WARMUP_TTFT_BOUNDS: tuple[float, ...] = tuple(
    sorted(
        {
            *(float(b) for table in ENGINES.values() for b in table.ttft_buckets),
            *proxy.TTFT_BUCKETS,
        }
    )
)


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class WarmupRequest:
    """One warm-up request: an endpoint, a prompt, and (chat only) a system prompt."""

    endpoint: str
    prompt: str
    max_tokens: int = 1
    system_prompt: str | None = None

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    def body(self, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": True,
        }
        if self.endpoint == "chat":
            messages = []
            if self.system_prompt:
                messages.append({"role": "system", "content": self.system_prompt})
            messages.append({"role": "user", "content": self.prompt})
            body["messages"] = messages
        else:
            body["prompt"] = self.prompt
        return body


@dataclass(frozen=True)
class WarmupSettings:
    """The validated ``warmup:`` section."""

    enabled: bool = True
    #: names of the gated workers
    workers: tuple[str, ...] = ()
    model: str | None = None
    endpoints: tuple[str, ...] = ENDPOINTS
    #: default requests per endpoint (``requests: N``)
    pings: int = 1
    #: explicit requests (``requests: [...]``), replacing the default ones
    requests: tuple[WarmupRequest, ...] = ()
    system_prompts: tuple[str, ...] = ()
    timeout: float = 60.0
    interval: float = 1.0
    deadline: float = 600.0
    warm_ttft_below: float | None = None
    source: str = "defaults"


def plan_requests(settings: WarmupSettings) -> tuple[WarmupRequest, ...]:
    """The requests of one warm-up, in order; the first one is also the warm probe.

    Default: one ``max_tokens: 1`` request per endpoint (``pings`` times), then
    one request per system prompt: a chat request with that system prompt when
    chat is warmed (the prefix cache keys on the templated prompt, so the
    system prompt must come through the chat template as users' requests do),
    else a completion whose prompt is the system prompt.
    """
    base = settings.requests or tuple(
        WarmupRequest(endpoint, DEFAULT_PROMPT)
        for _ in range(settings.pings)
        for endpoint in settings.endpoints
    )
    chat = "chat" in settings.endpoints
    prompts = tuple(
        WarmupRequest("chat", SYSTEM_PROMPT_USER_TURN, 1, text)
        if chat
        else WarmupRequest("completions", text, 1)
        for text in settings.system_prompts
    )
    return base + prompts


def _list(value: Any, source: str, key: str, what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise ConfigError(source, key, f"a non-empty list of {what}", value)
    return value


_endpoint = validate.choice(*ENDPOINTS)


def _request(raw: Any, source: str, key: str) -> WarmupRequest:
    if not isinstance(raw, Mapping):
        raise ConfigError(source, key, "a mapping with endpoint, prompt, max_tokens", raw)
    for k in raw:
        if k not in REQUEST_KEYS:
            raise ConfigError(
                source, f"{key}.{k}", "one of the known keys " + ", ".join(REQUEST_KEYS)
            )
    endpoint = _endpoint(raw.get("endpoint", "completions"), source, f"{key}.endpoint")
    prompt = validate.string(raw.get("prompt", DEFAULT_PROMPT), source, f"{key}.prompt")
    max_tokens = validate.count(raw.get("max_tokens", 1), source, f"{key}.max_tokens")
    system = raw.get("system_prompt")
    if system is not None:
        system = validate.string(system, source, f"{key}.system_prompt")
        if endpoint != "chat":
            raise ConfigError(source, f"{key}.system_prompt", "endpoint: chat for a system prompt")
    return WarmupRequest(endpoint, prompt, max_tokens, system)


def _system_prompt(raw: Any, source: str, key: str) -> str:
    if isinstance(raw, str):
        return validate.string(raw, source, key)
    if isinstance(raw, Mapping) and set(raw) == {"file"}:
        path = validate.string(raw["file"], source, f"{key}.file")
        if not os.path.isabs(path) and os.path.isfile(source):
            # relative to the configuration file, like any path a config file names
            path = os.path.join(os.path.dirname(os.path.abspath(source)), path)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ConfigError(
                source, f"{key}.file", "a readable file", exc.strerror or str(exc)
            ) from None
        if not text.strip():
            raise ConfigError(source, f"{key}.file", "a file with the system prompt", "empty")
        return text
    raise ConfigError(source, key, "a system prompt: a string or {file: PATH}", raw)


def parse_warmup(config: AgentConfig) -> WarmupSettings:
    """Validate ``config.warmup``; a wrong value raises ConfigError naming ``warmup.<key>``.

    Called by the agent before anything starts, so a bad section ends
    ``inferwatch run`` with one line and exit code 2.
    """
    raw = config.warmup
    src = config.source
    if not isinstance(raw, Mapping):
        raise ConfigError(src, "warmup", "a mapping of warm-up settings", raw)
    for key in raw:
        if key not in KEYS:
            raise ConfigError(src, f"warmup.{key}", "one of the known keys " + ", ".join(KEYS))
    values: dict[str, Any] = {"source": src}
    if "enabled" in raw:
        values["enabled"] = validate.boolean(raw["enabled"], src, "warmup.enabled")
    names = [w.name for w in config.workers]
    if raw.get("workers") is None:
        values["workers"] = tuple(names)
    else:
        chosen = _list(raw["workers"], src, "warmup.workers", "worker names")
        for i, name in enumerate(chosen):
            if name not in names:
                known = ", ".join(names) or "none configured"
                raise ConfigError(
                    src, f"warmup.workers[{i}]", f"the name of a configured worker ({known})", name
                )
        values["workers"] = tuple(dict.fromkeys(chosen))
    if raw.get("model") is not None:
        values["model"] = validate.string(raw["model"], src, "warmup.model")
    if "endpoints" in raw:
        items = _list(raw["endpoints"], src, "warmup.endpoints", "endpoints (completions, chat)")
        values["endpoints"] = tuple(
            dict.fromkeys(_endpoint(e, src, f"warmup.endpoints[{i}]") for i, e in enumerate(items))
        )
    if "requests" in raw:
        req = raw["requests"]
        if isinstance(req, int) and not isinstance(req, bool):
            values["pings"] = validate.count(req, src, "warmup.requests")
        elif isinstance(req, list) and req:
            values["requests"] = tuple(
                _request(r, src, f"warmup.requests[{i}]") for i, r in enumerate(req)
            )
        else:
            raise ConfigError(
                src,
                "warmup.requests",
                "a number of requests per endpoint, or a list of {endpoint, prompt, max_tokens}",
                req,
            )
    if raw.get("system_prompts") is not None:
        items = raw["system_prompts"]
        if not isinstance(items, list):
            raise ConfigError(
                src, "warmup.system_prompts", "a list of strings or {file: PATH}", items
            )
        values["system_prompts"] = tuple(
            _system_prompt(p, src, f"warmup.system_prompts[{i}]") for i, p in enumerate(items)
        )
    for key in ("timeout", "interval", "deadline"):
        if key in raw:
            values[key] = validate.duration(raw[key], src, f"warmup.{key}")
    if raw.get("warm_ttft_below") is not None:
        values["warm_ttft_below"] = validate.duration(
            raw["warm_ttft_below"], src, "warmup.warm_ttft_below"
        )
    settings = WarmupSettings(**values)
    if settings.enabled and not settings.workers:
        raise ConfigError(src, "warmup.workers", "a worker to gate (the agent has no workers)")
    return settings


# --------------------------------------------------------------------------- restarts


@dataclass
class RestartWatch:
    """Notices that a worker restarted, from what the agent's other sources saw.

    A changed process start time is a restart; so are engine counters (prompt +
    generation tokens) that go back. One restart shows in both, seconds apart
    (the sources poll on their own timers), and must count once: after a
    restart seen one way, the next drop of the counters is that same restart,
    and a start time seen before a restart noticed without it is ignored (the
    process source may still report the old process for a few seconds).
    """

    start: float | None = None
    stale_start: float | None = None
    total: float | None = None
    drop_expected: bool = False

    def observe(self, start_time: float | None, total: float | None) -> str | None:
        """Feed the latest start time and counter total; the reason of a restart, or None."""
        reason = None
        if start_time is not None:
            if self.start is None:
                if start_time != self.stale_start:
                    self.start = start_time
            elif start_time != self.start:
                reason = "its process start time changed"
                self.start, self.stale_start = start_time, None
                self.drop_expected = self.total is not None
        if total is not None:
            if self.total is not None and total < self.total:
                if self.drop_expected:
                    self.drop_expected = False
                elif reason is None:
                    reason = "its engine counters went back"
                    self._forget_start()
            self.total = total
        return reason

    def forget(self) -> None:
        """A restart was noticed another way (``/health``): expect both signals to follow."""
        self._forget_start()
        self.drop_expected = self.total is not None

    def _forget_start(self) -> None:
        if self.start is not None:
            self.stale_start, self.start = self.start, None


# --------------------------------------------------------------------------- the gate


class _Failure(ReasonError):
    """A warm-up attempt failed."""


@dataclass
class _Worker:
    """One gated worker's state (owned by the gate's event loop)."""

    spec: WorkerSpec
    closed_at: float
    warm: bool = False
    deadline_passed: bool = False
    cold_ttft: float | None = None
    warm_ttft: float | None = None
    duration: float | None = None
    warmups: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    watch: RestartWatch = field(default_factory=RestartWatch)
    unhealthy: int = 0
    #: every warm-up request that got a first token, by bucket (WARMUP_TTFT_BOUNDS, +Inf)
    ttft_counts: list[int] = field(default_factory=lambda: [0] * (len(WARMUP_TTFT_BOUNDS) + 1))
    ttft_sum: float = 0.0
    task: asyncio.Task[None] | None = None


def _has_token(chunk: Any) -> bool:
    """Whether a streamed chunk carries the first token (or ends the choice)."""
    if not isinstance(chunk, Mapping):
        return False
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        delta = choice.get("delta")
        content = delta.get("content") if isinstance(delta, Mapping) else None
        if choice.get("text") or content or choice.get("finish_reason"):
            return True
    return False


class WarmupGate(Source):
    """Warms gated workers, holds ``/readyz`` until they are warm, exports the gate's metrics."""

    name = "warmup"

    def __init__(
        self,
        settings: WarmupSettings,
        workers: Sequence[WorkerSpec],
        *,
        start_time: Callable[[str], float | None] = lambda worker: None,
        progress: Callable[[str], float | None] = lambda worker: None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.interval = settings.interval
        self.plan = plan_requests(settings)
        now = time.monotonic()
        specs = {w.name: w for w in workers}
        self.workers = {n: _Worker(specs[n], closed_at=now) for n in settings.workers}
        self._start_time = start_time
        self._progress = progress
        self._session: Client | None = None

    @classmethod
    def from_config(
        cls,
        config: AgentConfig,
        *,
        process: ProcessSource | None = None,
        engine: EngineSource | None = None,
    ) -> WarmupGate | None:
        """The gate for ``config.warmup``, or None when it is empty or disabled."""
        if not config.warmup:
            return None
        settings = parse_warmup(config)
        if not settings.enabled:
            return None

        def progress(worker: str) -> float | None:
            return engine_progress(engine, worker) if engine is not None else None

        return cls(
            settings,
            config.workers,
            start_time=process.start_time if process is not None else (lambda worker: None),
            progress=progress,
        )

    # ------------------------------------------------------------------ readiness
    def ready(self) -> bool:
        """Every gated worker is warm, or past its deadline."""
        return all(w.warm or w.deadline_passed for w in self.workers.values())

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._session is None:
            self._session = Client(limit=16, idle_per_host=1)

    async def stop(self) -> None:
        tasks = [w.task for w in self.workers.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def refresh(self) -> None:
        started = time.perf_counter()
        await self.start()
        warm = [w for w in self.workers.values() if w.warm]
        answers = await asyncio.gather(*(self._healthy(w) for w in warm))
        for w, ok in zip(warm, answers, strict=True):
            w.unhealthy = 0 if ok else w.unhealthy + 1
        now = time.monotonic()
        for name, w in self.workers.items():
            try:
                reason = w.watch.observe(self._start_time(name), self._progress(name))
            except Exception:  # another source's bug must not stop the gate
                log.debug("worker %s: restart signals unreadable", name, exc_info=True)
                reason = None
            if reason is None and w.warm and w.unhealthy >= DOWN_AFTER:
                reason = f"its /health failed {w.unhealthy} times in a row"
                w.watch.forget()
            if reason is not None:
                self._close(w, reason, now)
            if not w.warm:
                self._check_deadline(w, now)
                if w.task is None or w.task.done():
                    w.task = asyncio.create_task(self._warm(w), name=f"warmup-{name}")
        self.health.finished_pass(started)

    def _close(self, w: _Worker, reason: str, now: float) -> None:
        log.info("worker %s: %s; the gate closes until it is warm again", w.spec.name, reason)
        w.warm = False
        w.deadline_passed = False
        w.closed_at = now
        w.unhealthy = 0
        if w.task is not None and not w.task.done():
            w.task.cancel()
        w.task = None

    def _check_deadline(self, w: _Worker, now: float) -> None:
        if w.deadline_passed or now - w.closed_at < self.settings.deadline:
            return
        w.deadline_passed = True
        log.warning(
            "worker %s: not warm after %gs; the gate opens anyway "
            f"({contract.WARMUP_DEADLINE_EXCEEDED}) and the warm-up keeps trying",
            w.spec.name,
            self.settings.deadline,
        )

    # ------------------------------------------------------------------ warming
    async def _warm(self, w: _Worker) -> None:
        attempt = 0
        while True:
            await self._wait_healthy(w)
            try:
                await self._round(w)
            except _Failure as exc:
                w.failures[exc.reason] += 1
                self.health.error(exc.reason, f"warm-up failed: {exc}", key=w.spec.name)
                attempt += 1
                await asyncio.sleep(min(MAX_BACKOFF, self.settings.interval * 2 ** min(attempt, 8)))
                continue
            self.health.ok(key=w.spec.name)
            return

    async def _wait_healthy(self, w: _Worker) -> None:
        said = False
        while not await self._healthy(w):
            if not said:
                log.info("worker %s: waiting for %s/health", w.spec.name, w.spec.url)
                said = True
            await asyncio.sleep(self.settings.interval)

    async def _healthy(self, w: _Worker) -> bool:
        assert self._session is not None
        timeout = min(HEALTH_TIMEOUT, self.settings.timeout)
        try:
            resp = await self._session.get(
                f"{w.spec.url}/health", timeout=timeout, max_body=1 << 20
            )
        except (HttpError, asyncio.TimeoutError, OSError):
            return False
        return resp.status == 200

    async def _round(self, w: _Worker) -> None:
        model = self.settings.model or await self._model(w)
        begun = time.monotonic()
        for i, request in enumerate(self.plan):
            ttft = await self._send(w, model, request)
            if i == 0:
                w.cold_ttft = ttft
        threshold = self.settings.warm_ttft_below
        probes = 0
        while True:
            ttft = await self._send(w, model, self.plan[0])
            probes += 1
            w.warm_ttft = ttft
            if threshold is None or ttft < threshold:
                break
            if probes == 1:
                log.info(
                    "worker %s: warm TTFT %.3fs is not below %gs yet; probing again",
                    w.spec.name,
                    ttft,
                    threshold,
                )
            await asyncio.sleep(self.settings.interval)
        w.duration = time.monotonic() - begun
        w.warm = True
        w.deadline_passed = False
        w.warmups += 1
        log.info(
            "worker %s: warm after %d requests in %.2fs (TTFT cold %.3fs, warm %.3fs); ready",
            w.spec.name,
            len(self.plan) + probes,
            w.duration,
            w.cold_ttft or 0.0,
            ttft,
        )

    async def _model(self, w: _Worker) -> str:
        assert self._session is not None
        url = f"{w.spec.url}/v1/models"
        timeout = self.settings.timeout
        try:
            resp = await self._session.get(url, timeout=timeout, max_body=MODELS_MAX_BYTES)
        except asyncio.TimeoutError:
            raise _Failure("timeout", f"{url} did not answer within {timeout:g}s") from None
        except HttpError as exc:
            raise _Failure("connect", f"{url}: {type(exc).__name__}: {exc}") from None
        if resp.status != 200:
            raise _Failure("http_status", f"{url} answered HTTP {resp.status}")
        try:
            doc = json.loads(resp.body)
        except ValueError:
            raise _Failure("no_model", f"{url} did not answer with JSON") from None
        try:
            model = doc["data"][0]["id"]
        except (KeyError, IndexError, TypeError):
            model = None
        if not isinstance(model, str) or not model:
            raise _Failure("no_model", f"{url} lists no model (set warmup.model)")
        return model

    async def _send(self, w: _Worker, model: str, request: WarmupRequest) -> float:
        """Send one streamed request; seconds to its first token."""
        assert self._session is not None
        url = _base_url(w.spec) + request.path
        timeout = self.settings.timeout
        sent = time.monotonic()
        first: float | None = None
        payload = json.dumps(request.body(model)).encode()
        try:
            async with self._session.stream(
                "POST",
                url,
                timeout=timeout,
                headers={"Content-Type": "application/json"},
                body=payload,
            ) as resp:
                if resp.status != 200:
                    text = (await resp.read(64 << 10)).decode("utf-8", "replace")[:200].strip()
                    raise _Failure("http_status", f"{url} answered HTTP {resp.status}: {text}")
                async for data in data_payloads(resp.lines()):
                    if first is None:
                        try:
                            chunk = json.loads(data)
                        except ValueError:
                            raise _Failure("bad_response", f"{url} streamed non-JSON") from None
                        if _has_token(chunk):
                            first = time.monotonic() - sent
        except asyncio.TimeoutError:
            raise _Failure("timeout", f"{url} did not finish within {timeout:g}s") from None
        except HttpError as exc:
            raise _Failure("connect", f"{url}: {type(exc).__name__}: {exc}") from None
        if first is None:
            raise _Failure("bad_response", f"{url} streamed no token")
        _observe(w, first)
        return first

    # ------------------------------------------------------------------ metrics
    def families(self) -> Iterable[Metric]:
        ready = gauge_family(contract.WORKER_READY, ["worker"])
        duration = gauge_family(contract.WARMUP_DURATION_SECONDS, ["worker"])
        ttft = gauge_family(contract.WARMUP_TTFT_SECONDS, ["worker", "phase"])
        failures = counter_family(contract.WARMUP_FAILURES, ["worker", "reason"])
        deadline = gauge_family(contract.WARMUP_DEADLINE_EXCEEDED, ["worker"])
        runs = counter_family(contract.WARMUPS, ["worker"])
        requests = histogram_family(contract.WARMUP_REQUESTS_TTFT_SECONDS, ["worker"])
        for name in sorted(self.workers):
            w = self.workers[name]
            ready.add_metric([name], 1.0 if w.warm else 0.0)
            deadline.add_metric([name], 1.0 if w.deadline_passed and not w.warm else 0.0)
            runs.add_metric([name], float(w.warmups))
            if w.duration is not None:
                duration.add_metric([name], w.duration)
            if w.cold_ttft is not None:
                ttft.add_metric([name, "cold"], w.cold_ttft)
            if w.warm_ttft is not None:
                ttft.add_metric([name, "warm"], w.warm_ttft)
            for reason in FAILURE_REASONS:
                failures.add_metric([name, reason], float(w.failures[reason]))
            cumulative = list(itertools.accumulate(w.ttft_counts))
            requests.add_metric(
                [name],
                [
                    (floatToGoString(b), float(c))
                    for b, c in zip((*WARMUP_TTFT_BOUNDS, math.inf), cumulative, strict=True)
                ],
                w.ttft_sum,
            )
        return [ready, duration, ttft, failures, deadline, runs, requests]


def _observe(w: _Worker, ttft: float) -> None:
    """Count one warm-up request's first token in the worker's warm-up histogram."""
    w.ttft_counts[bisect.bisect_left(WARMUP_TTFT_BOUNDS, ttft)] += 1
    w.ttft_sum += ttft


def _base_url(spec: WorkerSpec) -> str:
    """Where warm-up requests go: through the worker's measuring proxy when it has one
    (its latency histograms are the proxy's), else to the worker."""
    if spec.proxy is None:
        return spec.url
    return local_url(spec.proxy.listen_host, spec.proxy.listen_port)


def engine_progress(engine: EngineSource, worker: str) -> float | None:
    """Prompt + generation tokens the worker's engine has counted, or None when unknown.

    These counters only grow while the engine lives; less than before means a
    new engine process.
    """
    state = engine.workers.get(worker)
    mapped = state.mapped if state is not None else None
    if mapped is None:
        return None
    total = 0.0
    seen = False
    for target in (contract.PROMPT_TOKENS.base, contract.GENERATION_TOKENS.base):
        for value in mapped.counters.get(target, {}).values():
            total += value
            seen = True
    return total if seen else None
