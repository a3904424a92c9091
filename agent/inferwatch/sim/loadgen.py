"""An open-loop load generator for OpenAI-compatible workers on loopback.

Arrivals are a Poisson process: request k is sent at its planned time whether
or not earlier ones have finished, as real users do (a closed loop would slow
down with the server and hide its queue). Every request streams, so the
client measures what a user sees: time to first token (TTFT), time per output
token after the first (TPOT) and end-to-end latency.

Bounds: at most ``max_requests`` requests and ``max_in_flight`` at once
(arrivals beyond that are counted as ``skipped``, not queued client-side);
arrivals stop after ``duration`` seconds; requests still running ``drain``
seconds later are cancelled (the worker sees a disconnect and aborts them).
Targets must be loopback addresses.

Python API::

    result = await run_load(["http://127.0.0.1:8000"], "steady", 30, time_scale=0.1)
    result.summary()["ttft"]["p99"]
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import math
import random
import string
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from inferwatch.engines.stream import data_payloads
from inferwatch.errors import ConfigError
from inferwatch.sim.scenarios import Scenario, get_scenario

SOURCE = "inferwatch loadgen"
#: tokens the chat template adds around the messages, kept free when clipping lengths
TEMPLATE_MARGIN = 16
QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it. Times in seconds; None where not reached."""

    target: str
    #: seconds after the start of the run
    sent_at: float
    #: "ok", "http_<status>", "error", "timeout" or "cancelled"
    status: str
    ttft: float | None
    tpot: float | None
    e2e: float | None
    output_tokens: int
    prompt_tokens: int | None  # as the server counted them (usage), when it said
    finish_reason: str | None
    planned_prompt_tokens: int
    planned_output_tokens: int
    long: bool = False
    error: str | None = None
    #: seconds after the start of the run when the client was done with it (any status)
    ended_at: float | None = None


@dataclass(frozen=True)
class LoadResult:
    scenario: str
    targets: tuple[str, ...]
    duration: float
    rate: float
    seed: int
    time_scale: float
    #: unix time of the start of the run (``sent_at`` and ``ended_at`` count from here)
    started_at: float
    elapsed: float
    records: tuple[RequestRecord, ...]
    skipped: int = 0

    def ok(self, target: str | None = None) -> list[RequestRecord]:
        return [
            r for r in self.records if r.status == "ok" and (target is None or r.target == target)
        ]

    def per_target(self) -> dict[str, int]:
        counts = dict.fromkeys(self.targets, 0)
        for r in self.records:
            counts[r.target] = counts.get(r.target, 0) + 1
        return counts

    def in_flight(self, at: float) -> int:
        """Requests sent and not yet done ``at`` seconds after the start (client's view)."""
        return sum(
            1 for r in self.records if r.sent_at <= at and (r.ended_at is None or at < r.ended_at)
        )

    def statuses(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def summary(self, target: str | None = None) -> dict[str, Any]:
        """Counts and P50/P95/P99 of TTFT, TPOT and e2e over successful requests."""
        ok = self.ok(target)
        out: dict[str, Any] = {
            "requests": sum(1 for r in self.records if target is None or r.target == target),
            "ok": len(ok),
        }
        for name in ("ttft", "tpot", "e2e"):
            values = [v for r in ok if (v := getattr(r, name)) is not None]
            out[name] = {f"p{round(q * 100)}": quantile(values, q) for q in QUANTILES}
            out[name]["mean"] = sum(values) / len(values) if values else None
            out[name]["count"] = len(values)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "targets": list(self.targets),
            "duration": self.duration,
            "rate": self.rate,
            "seed": self.seed,
            "time_scale": self.time_scale,
            "started_at": self.started_at,
            "elapsed": self.elapsed,
            "skipped": self.skipped,
            "statuses": self.statuses(),
            "per_target": self.per_target(),
            "summary": self.summary(),
            "summary_by_target": {t: self.summary(t) for t in self.targets},
            "records": [asdict(r) for r in self.records],
        }


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile with linear interpolation between order statistics (None if empty)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def check_target(url: str) -> str:
    """The URL without a trailing slash; ConfigError unless it is http(s) on loopback."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    if parsed.scheme not in ("http", "https") or not host:
        raise ConfigError(SOURCE, "--target", "an http://HOST:PORT URL", url)
    loopback = host == "localhost"
    with contextlib.suppress(ValueError):
        loopback = loopback or ipaddress.ip_address(host).is_loopback
    if not loopback:
        raise ConfigError(SOURCE, "--target", "a loopback address (127.0.0.0/8, ::1)", url)
    return url.rstrip("/")


@dataclass(frozen=True)
class _Plan:
    target: str
    at: float
    messages: list[dict[str, str]]
    prompt_tokens: int
    output_tokens: int
    long: bool
    shared: bool


@dataclass
class _TargetInfo:
    model: str | None = None
    max_model_len: int | None = None


@dataclass
class _Words:
    """Prompt text: 4-letter words, each exactly one token of the simulator's tokenizer."""

    rng: random.Random
    pool: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        letters = string.ascii_lowercase
        self.pool = ["".join(self.rng.choice(letters) for _ in range(4)) for _ in range(4096)]

    def text(self, n: int) -> str:
        return " ".join(self.rng.choices(self.pool, k=n))


def _plan_request(
    rng: random.Random,
    words: _Words,
    sc: Scenario,
    system_text: str,
    target: str,
    info: _TargetInfo,
    at: float,
) -> _Plan:
    long = sc.long_share > 0 and rng.random() < sc.long_share
    prompt_dist = sc.long_prompt if long and sc.long_prompt else sc.prompt
    output_dist = sc.long_output if long and sc.long_output else sc.output
    user_tokens = prompt_dist.sample(rng)
    output = output_dist.sample(rng)
    shared = bool(system_text) and rng.random() < sc.system_prompt_share
    prompt_tokens = user_tokens + (sc.system_prompt_tokens if shared else 0)
    if info.max_model_len:
        # Stay inside the worker's context: shorten the output first, then the prompt.
        room = info.max_model_len - TEMPLATE_MARGIN
        if prompt_tokens > room - 1:
            user_tokens = max(1, user_tokens - (prompt_tokens - (room - 1)))
            prompt_tokens = user_tokens + (sc.system_prompt_tokens if shared else 0)
        output = max(1, min(output, room - prompt_tokens))
    messages = [{"role": "user", "content": words.text(user_tokens)}]
    if shared:
        messages.insert(0, {"role": "system", "content": system_text})
    return _Plan(target, at, messages, prompt_tokens, output, long, shared)


async def _target_info(session: aiohttp.ClientSession, target: str) -> _TargetInfo:
    try:
        async with session.get(f"{target}/v1/models", timeout=aiohttp.ClientTimeout(5)) as resp:
            doc = await resp.json()
        first = doc["data"][0]
        max_len = first.get("max_model_len")
        return _TargetInfo(str(first["id"]), int(max_len) if max_len else None)
    except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, IndexError, ValueError, TypeError):
        return _TargetInfo()


async def _send(
    session: aiohttp.ClientSession, plan: _Plan, info: _TargetInfo, t0: float
) -> RequestRecord:
    loop = asyncio.get_running_loop()
    body: dict[str, Any] = {
        "messages": plan.messages,
        "max_tokens": plan.output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if info.model:
        body["model"] = info.model
    sent = loop.time()
    first = last = None
    tokens = 0
    usage_prompt: int | None = None
    finish: str | None = None

    def record(status: str, error: str | None = None) -> RequestRecord:
        done = loop.time()
        return RequestRecord(
            target=plan.target,
            sent_at=sent - t0,
            status=status,
            ttft=(first - sent) if first is not None else None,
            tpot=((last - first) / (tokens - 1))
            if first is not None and last is not None and tokens > 1
            else None,
            e2e=(done - sent) if status == "ok" else None,
            output_tokens=tokens,
            prompt_tokens=usage_prompt,
            finish_reason=finish,
            planned_prompt_tokens=plan.prompt_tokens,
            planned_output_tokens=plan.output_tokens,
            long=plan.long,
            error=error,
            ended_at=done - t0,
        )

    try:
        async with session.post(f"{plan.target}/v1/chat/completions", json=body) as resp:
            if resp.status != 200:
                text = (await resp.text())[:200]
                return record(f"http_{resp.status}", text)
            async for data in data_payloads(resp.content):
                chunk = json.loads(data)
                usage = chunk.get("usage")
                if usage:
                    usage_prompt = usage.get("prompt_tokens")
                for choice in chunk.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content is None:
                        content = choice.get("text")
                    if content:
                        now = loop.time()
                        if first is None:
                            first = now
                        last = now
                        tokens += 1
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
        return record("ok")
    except asyncio.CancelledError:
        return record("cancelled")
    except asyncio.TimeoutError:
        return record("timeout")
    except (aiohttp.ClientError, json.JSONDecodeError, ValueError) as exc:
        return record("error", f"{type(exc).__name__}: {exc}"[:200])


async def run_load(
    targets: Sequence[str],
    scenario: str | Scenario,
    duration: float | None = None,
    *,
    rate: float | None = None,
    seed: int = 0,
    time_scale: float = 1.0,
    drain: float = 30.0,
    max_requests: int = 20_000,
    max_in_flight: int = 512,
    request_timeout: float = 600.0,
) -> LoadResult:
    """Run one scenario against ``targets`` and return every request's record.

    ``rate`` overrides the scenario's rate (requests per second at time scale 1);
    the effective arrival rate is ``rate / time_scale``.
    """
    sc = scenario if isinstance(scenario, Scenario) else get_scenario(scenario)
    urls = [check_target(t) for t in targets]
    if not urls:
        raise ConfigError(SOURCE, "--target", "at least one target URL")
    if len(urls) < sc.min_targets:
        raise ConfigError(
            SOURCE, "--target", f"{sc.min_targets} targets for scenario {sc.name}", len(urls)
        )
    duration = sc.duration if duration is None else duration
    if not (0 < duration <= 86_400):
        raise ConfigError(SOURCE, "--duration", "seconds in (0, 86400]", duration)
    base_rate = sc.rate if rate is None else rate
    if not (math.isfinite(base_rate) and base_rate >= 0):
        raise ConfigError(SOURCE, "--rate", "requests per second >= 0", base_rate)
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ConfigError(SOURCE, "--time-scale", "a number > 0", time_scale)
    arrival_rate = base_rate / time_scale

    rng = random.Random(seed)
    words = _Words(random.Random(seed + 1))
    system_text = words.text(sc.system_prompt_tokens) if sc.system_prompt_tokens else ""
    loop = asyncio.get_running_loop()
    connector = aiohttp.TCPConnector(limit=max_in_flight)
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    records: list[RequestRecord] = []
    tasks: set[asyncio.Task[RequestRecord]] = set()
    skipped = 0

    def finished(task: asyncio.Task[RequestRecord]) -> None:
        tasks.discard(task)
        if not task.cancelled():  # cancelled before it ran: it was never sent
            records.append(task.result())

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        infos = {u: await _target_info(session, u) for u in urls}
        t0 = loop.time()
        started_at = time.time()
        end = t0 + duration
        at = t0
        planned = 0
        while arrival_rate > 0 and planned < max_requests:
            at += rng.expovariate(arrival_rate)
            if at > end:
                break
            target = _pick_target(rng, urls, sc.hot_share)
            plan = _plan_request(rng, words, sc, system_text, target, infos[target], at - t0)
            planned += 1
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(tasks) >= max_in_flight:
                skipped += 1
                continue
            task = loop.create_task(_send(session, plan, infos[target], t0))
            tasks.add(task)
            task.add_done_callback(finished)
        if loop.time() < end and (arrival_rate == 0 or planned >= max_requests):
            await asyncio.sleep(end - loop.time())
        try:
            if tasks:
                await asyncio.wait(set(tasks), timeout=max(0.0, drain))
        finally:
            for task in list(tasks):
                task.cancel()
            # Each cancelled request returns its own "cancelled" record.
            while tasks:
                await asyncio.wait(set(tasks))
    records.sort(key=lambda r: r.sent_at)
    return LoadResult(
        scenario=sc.name,
        targets=tuple(urls),
        duration=duration,
        rate=base_rate,
        seed=seed,
        time_scale=time_scale,
        started_at=started_at,
        elapsed=loop.time() - t0,
        records=tuple(records),
        skipped=skipped,
    )


def _pick_target(rng: random.Random, urls: Sequence[str], hot_share: float | None) -> str:
    if len(urls) == 1:
        return urls[0]
    if hot_share is None:
        return rng.choice(urls)
    if rng.random() < hot_share:
        return urls[0]
    return rng.choice(urls[1:])
