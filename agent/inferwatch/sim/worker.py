"""The simulated worker's HTTP side: an OpenAI-compatible server over simulated engines.

Routes (as vLLM's API server has them): ``POST /v1/completions``,
``POST /v1/chat/completions`` (streaming by server-sent events or not),
``GET /v1/models``, ``GET /health``, ``GET /ping``, ``GET /version`` and the
writer's metrics path (``/metrics`` for vLLM).

Output length, per request (the simulator has no model to emit an EOS):

- ``ignore_eos: true`` or an explicit ``max_tokens``: exactly ``max_tokens``
  tokens, finish reason ``length``;
- ``sim_output_tokens: N`` (a simulator extension): N tokens and finish
  reason ``stop``, or ``length`` when ``max_tokens`` comes first;
- neither (a chat request without ``max_tokens``): a length drawn from a
  log-normal distribution (median 128 tokens) seeded by ``--seed`` and the
  request's arrival order, finish reason ``stop``.

A completion without ``max_tokens`` gets 16, as in vLLM and OpenAI's API.
A client that disconnects aborts its request (finish reason ``abort``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import logging
import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from inferwatch.sim.config import SimConfig
from inferwatch.sim.engine import (
    EngineCore,
    EngineLoop,
    SimRequest,
    TokenOutput,
    cancel_and_wait,
)
from inferwatch.sim.expo import MetricsWriter, create_writer
from inferwatch.sim.gpu import GpuStatePublisher
from inferwatch.sim.ranks import RankProcesses
from inferwatch.sim.stats import HttpRecord
from inferwatch.sim.tokenizer import chat_prompt, tokenize

log = logging.getLogger(__name__)

#: vLLM's and OpenAI's default for /v1/completions
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
NATURAL_LENGTH_MEDIAN = 128
NATURAL_LENGTH_SIGMA = 0.8
STATS_LOG_INTERVAL = 10.0
#: seconds a stopping worker gives open connections to finish
SHUTDOWN_TIMEOUT = 2.0


class BadRequest(Exception):
    def __init__(
        self,
        message: str,
        status: int = 400,
        kind: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param


def _error(exc: BadRequest) -> web.Response:
    body = {
        "error": {"message": str(exc), "type": exc.kind, "param": exc.param, "code": exc.status}
    }
    return web.json_response(body, status=exc.status)


def _int_field(body: dict[str, Any], key: str, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"{key} must be an integer >= {minimum}, got {value!r}", param=key)
    return value


class SimWorker:
    """One simulated worker: ``data_parallel`` engines behind one HTTP server.

    Use ``async with SimWorker(cfg) as worker: ... worker.url ...`` or
    :func:`serve`. ``cfg.port`` 0 picks a free port.
    """

    def __init__(self, cfg: SimConfig, writer: MetricsWriter | None = None) -> None:
        cfg.validate()
        self.cfg = cfg
        self.writer = writer if writer is not None else create_writer(cfg)
        self.cores = [EngineCore(cfg, i, self.writer.on_step) for i in range(cfg.data_parallel)]
        self.loops = [EngineLoop(core) for core in self.cores]
        self.started_at = time.time()
        self._counter = 0
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._gpu: GpuStatePublisher | None = None
        #: one child process per tensor-parallel rank of every engine (none with TP 1)
        self.ranks = RankProcesses(
            cfg.data_parallel * cfg.tensor_parallel if cfg.tensor_parallel > 1 else 0
        )
        self.port = cfg.port

    @property
    def url(self) -> str:
        return f"http://{self.cfg.host}:{self.port}"

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application(middlewares=[self._http_metrics], client_max_size=64 * 1024**2)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/ping", self._health)
        app.router.add_get("/version", self._version)
        app.router.add_get(self.writer.metrics_path, self._metrics)
        self.ranks.start()
        for loop in self.loops:
            loop.start()
        if not self.cfg.disable_log_stats:
            self._tasks.append(asyncio.get_running_loop().create_task(self._log_stats()))
        # handler_cancellation: a client that goes away cancels its handler, which aborts
        # the request in the engine, as vLLM does.
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.cfg.host, self.cfg.port)
        await site.start()
        addresses = self._runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        if self.cfg.gpu_state_dir:
            # the bound port, not 0, goes into the GPU's UUID: one UUID per worker
            cfg = dataclasses.replace(self.cfg, port=self.port)
            self._gpu = GpuStatePublisher(cfg, self.loops, self.cfg.gpu_state_dir, self.ranks.pids)
            self._gpu.start()

    async def stop(self) -> None:
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks.clear()
        # Finish every request first, so open streams end instead of holding the shutdown.
        for loop in self.loops:
            loop.abort_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for loop in self.loops:
            await loop.stop()
        if self._gpu is not None:
            await self._gpu.stop()  # the worker's processes free their GPUs
            self._gpu = None
        await asyncio.to_thread(self.ranks.stop)

    async def __aenter__(self) -> SimWorker:
        try:
            await self.start()
        except BaseException:
            await self.stop()  # no rank process or engine task outlives a failed start
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- plain routes -----------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.cfg.version})

    async def _models(self, request: web.Request) -> web.Response:
        model = {
            "id": self.cfg.model,
            "object": "model",
            "created": int(self.started_at),
            "owned_by": "vllm",
            "root": self.cfg.model,
            "parent": None,
            "max_model_len": self.cfg.max_model_len,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def _metrics(self, request: web.Request) -> web.Response:
        expo = self.writer.render(
            [core.snapshot() for core in self.cores], request.headers.get("Accept", "")
        )
        body = expo.body
        headers = {"Content-Type": expo.content_type}
        if self.writer.supports_gzip and "gzip" in request.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    @web.middleware
    async def _http_metrics(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        response: web.StreamResponse | None = None
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = 0  # the client went away: no response, nothing to count
            raise
        finally:
            if status:
                resource = request.match_info.route.resource
                handler_name = resource.canonical if resource is not None else "none"
                out_bytes = 0
                if isinstance(response, web.Response) and response.body_length:
                    out_bytes = response.body_length
                self.writer.on_http(
                    HttpRecord(
                        handler=handler_name,
                        method=request.method,
                        status=status,
                        seconds=time.perf_counter() - started,
                        request_bytes=request.content_length or 0,
                        response_bytes=out_bytes,
                    )
                )

    # -- generation ---------------------------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        arrival = asyncio.get_running_loop().time()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(BadRequest("request body is not valid JSON"))
        try:
            req, stream, include_usage = self._parse(body, chat=chat, arrival=arrival)
        except BadRequest as exc:
            return _error(exc)
        limit = self.cfg.max_queued_requests
        if limit is not None and sum(len(c.waiting) for c in self.cores) >= limit:
            self.writer.on_rejection("max_num_queued_reqs")
            return _error(
                BadRequest(
                    f"too many queued requests (--max-queued-requests {limit}); retry later",
                    status=503,
                    kind="ServiceUnavailableError",
                )
            )
        queue: asyncio.Queue[TokenOutput] = asyncio.Queue()
        req.sink = queue.put_nowait
        loop = min(self.loops, key=lambda lp: lp.core.load_score())
        loop.submit(req)
        created = int(time.time())
        rid = ("chatcmpl-" if chat else "cmpl-") + req.request_id
        try:
            if stream:
                return await self._stream(request, req, queue, rid, created, chat, include_usage)
            return await self._collect(req, queue, rid, created, chat)
        except asyncio.CancelledError:
            loop.abort(req.request_id)
            raise
        except ConnectionResetError:
            # The client hung up mid-stream: abort, as vLLM does, and end quietly.
            loop.abort(req.request_id)
            raise asyncio.CancelledError from None

    def _parse(self, body: Any, *, chat: bool, arrival: float) -> tuple[SimRequest, bool, bool]:
        cfg = self.cfg
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        model = body.get("model", cfg.model)
        if model != cfg.model:
            raise BadRequest(
                f"The model `{model}` does not exist.",
                status=404,
                kind="NotFoundError",
                param="model",
            )
        n = _int_field(body, "n", 1) or 1
        if n != 1:
            raise BadRequest("the simulator serves n=1 only", param="n")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise BadRequest("messages must be a list of objects", param="messages")
            prompt_ids = tokenize(chat_prompt(messages))
            max_tokens = _int_field(body, "max_completion_tokens", 1)
            if max_tokens is None:
                max_tokens = _int_field(body, "max_tokens", 1)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if isinstance(prompt, str):
                prompt_ids = tokenize(prompt)
            elif (
                isinstance(prompt, list)
                and prompt
                and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
            ):
                prompt_ids = list(prompt)
            else:
                raise BadRequest(
                    "prompt must be a string or a list of token ids (one prompt per request)",
                    param="prompt",
                )
            max_tokens = _int_field(body, "max_tokens", 1)
            if max_tokens is None:
                max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
        if not prompt_ids:
            raise BadRequest("the prompt is empty", param="prompt")
        prompt_len = len(prompt_ids)
        room = cfg.max_model_len - prompt_len
        if room < 1 or (max_tokens is not None and max_tokens > room):
            asked = prompt_len + (max_tokens or 1)
            raise BadRequest(
                f"this model's context is {cfg.max_model_len} tokens; the request asks for "
                f"{asked} ({prompt_len} of prompt, {max_tokens or 1} of output)",
                param="max_tokens",
            )
        limit = max_tokens if max_tokens is not None else room
        self._counter += 1
        seed = hash((cfg.seed, self._counter))
        sim_tokens = _int_field(body, "sim_output_tokens", 1)
        if body.get("ignore_eos") is True or (sim_tokens is None and max_tokens is not None):
            target, reason = limit, "length"
        elif sim_tokens is not None:
            target = min(sim_tokens, limit)
            reason = "stop" if sim_tokens < limit else "length"
        else:
            rng = random.Random(seed)
            natural = round(
                rng.lognormvariate(math.log(NATURAL_LENGTH_MEDIAN), NATURAL_LENGTH_SIGMA)
            )
            target = max(1, min(natural, limit))
            reason = "stop" if natural < limit else "length"
        stream = bool(body.get("stream", False))
        options = body.get("stream_options")
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        req = SimRequest(
            request_id=uuid.uuid4().hex,
            prompt_ids=prompt_ids,
            max_tokens=limit,
            target_tokens=target,
            final_reason=reason,
            arrival=arrival,
            max_tokens_param=max_tokens,
            seed=seed,
        )
        return req, stream, include_usage

    def _usage(self, req: SimRequest) -> dict[str, int]:
        return {
            "prompt_tokens": req.prompt_len,
            "total_tokens": req.prompt_len + req.generated,
            "completion_tokens": req.generated,
        }

    async def _collect(
        self,
        req: SimRequest,
        queue: asyncio.Queue[TokenOutput],
        rid: str,
        created: int,
        chat: bool,
    ) -> web.Response:
        parts: list[str] = []
        while True:
            out = await queue.get()
            parts.append(out.text)
            if out.finish_reason is not None:
                break
        text = "".join(parts)
        choice: dict[str, Any] = {
            "index": 0,
            "logprobs": None,
            "finish_reason": out.finish_reason,
            "stop_reason": None,
        }
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
        else:
            choice["text"] = text
        return web.json_response(
            {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": self.cfg.model,
                "choices": [choice],
                "usage": self._usage(req),
            }
        )

    async def _stream(
        self,
        request: web.Request,
        req: SimRequest,
        queue: asyncio.Queue[TokenOutput],
        rid: str,
        created: int,
        chat: bool,
        include_usage: bool,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        await response.prepare(request)
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choices: list[dict[str, Any]], usage: Any = None, last: bool = False) -> bytes:
            doc: dict[str, Any] = {
                "id": rid,
                "object": kind,
                "created": created,
                "model": self.cfg.model,
                "choices": choices,
            }
            if include_usage:
                doc["usage"] = usage if last else None
            return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"

        if chat:
            first = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            await response.write(chunk([first]))
        while True:
            out = await queue.get()
            choice: dict[str, Any] = {
                "index": 0,
                "logprobs": None,
                "finish_reason": out.finish_reason,
            }
            if chat:
                choice["delta"] = {"content": out.text}
            else:
                choice["text"] = out.text
                choice["stop_reason"] = None
            await response.write(chunk([choice]))
            if out.finish_reason is not None:
                break
        if include_usage:
            await response.write(chunk([], self._usage(req), last=True))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _log_stats(self) -> None:
        """vLLM logs a throughput line per engine every few seconds; so does the simulator."""
        last = [(c.prefill_tokens_total, c.decode_tokens_total) for c in self.cores]
        while True:
            await asyncio.sleep(STATS_LOG_INTERVAL)
            for i, core in enumerate(self.cores):
                p, d = core.prefill_tokens_total, core.decode_tokens_total
                snap = core.snapshot()
                if (p, d) != last[i] or snap.running or snap.waiting:
                    log.info(
                        "Engine %03d: prompt throughput %.1f tokens/s, generation throughput "
                        "%.1f tokens/s, running %d reqs, waiting %d reqs, KV cache usage %.1f%%",
                        i,
                        (p - last[i][0]) / STATS_LOG_INTERVAL,
                        (d - last[i][1]) / STATS_LOG_INTERVAL,
                        snap.running,
                        snap.waiting,
                        100 * snap.kv_usage,
                    )
                last[i] = (p, d)


async def serve(cfg: SimConfig, stop: asyncio.Event | None = None) -> None:
    """Run a worker until ``stop`` is set (or SIGINT/SIGTERM when it is None)."""
    import signal

    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    async with SimWorker(cfg) as worker:
        print(
            f"inferwatch simulate: {cfg.engine} {cfg.version} ({cfg.format}) serving "
            f"{cfg.model} on {worker.url} (engines={cfg.data_parallel}, "
            f"tensor_parallel={cfg.tensor_parallel}, "
            f"max_num_seqs={cfg.max_num_seqs}, num_gpu_blocks={cfg.blocks}, "
            f"time_scale={cfg.time_scale})",
            flush=True,
        )
        await stop.wait()
