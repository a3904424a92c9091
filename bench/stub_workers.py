"""Stub vLLM workers for benchmarks: one process serving a live vLLM exposition on many ports.

    python bench/stub_workers.py [--engines 1] [--tick 0.05] (--count N | PORT [PORT ...])

The exposition is the simulator's own vLLM 0.33 writer (``inferwatch.sim.expo.vllm``,
every family a real server has, about 46 KB for one engine), fed a few finished
requests every ``--tick`` seconds so that counters and histogram buckets keep
rising as they do on a busy worker (the agent's windows then have increases to
compute quantiles from). It is rendered and gzip-compressed once per tick and
served to every port, so one stub process stands in for many workers without
an engine model behind each. With ``--count N`` it binds N ports of its own
choosing and prints them (``stub ports: P1 P2 ...``). Stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import random
import signal
import socket
import sys
import time
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))

from inferwatch.sim.config import VLLM_VERSION, SimConfig
from inferwatch.sim.expo import create_writer
from inferwatch.sim.stats import (
    EngineSnapshot,
    FinishedRequest,
    HttpRecord,
    RequestStarted,
    StepStats,
)


class LiveExposition:
    """The writer, advanced by a few requests per tick; body and gzip body cached per tick."""

    def __init__(self, engines: int, tick: float, seed: int = 1) -> None:
        self.cfg = SimConfig(port=0, data_parallel=engines)
        self.writer = create_writer(self.cfg)
        self.engines = engines
        self.tick = tick
        self.rng = random.Random(seed)
        self.ticks = 0
        self.plain = b""
        self.gzipped = b""
        self.content_type = "text/plain"
        self._due = 0.0

    def _step(self, engine: int) -> StepStats:
        rng = self.rng
        finished = []
        for _ in range(rng.randint(1, 3)):
            gen = rng.randint(20, 400)
            prompt = rng.randint(50, 2000)
            queue = rng.expovariate(20.0)
            prefill = prompt * 0.0002
            decode = gen * rng.uniform(0.015, 0.045)
            finished.append(
                FinishedRequest(
                    finish_reason=rng.choice(("stop", "stop", "stop", "length")),
                    prompt_tokens=prompt,
                    generation_tokens=gen,
                    cached_tokens=rng.randint(0, prompt // 2),
                    max_tokens_param=512,
                    e2e=queue + prefill + decode,
                    queue_time=queue,
                    prefill_time=prefill,
                    decode_time=decode,
                    inference_time=prefill + decode,
                    mean_tpot=decode / max(gen - 1, 1),
                    preemptions=0,
                )
            )
        prompt_tokens = sum(f.prompt_tokens for f in finished)
        return StepStats(
            engine=engine,
            prompt_tokens=prompt_tokens,
            cached_prompt_tokens=sum(f.cached_tokens for f in finished),
            generation_tokens=sum(f.generation_tokens for f in finished),
            prefix_queries=prompt_tokens,
            prefix_hits=sum(f.cached_tokens for f in finished),
            ttfts=tuple(f.queue_time + f.prefill_time for f in finished),
            itls=tuple(rng.uniform(0.015, 0.045) for _ in range(8)),
            started=tuple(RequestStarted(max_tokens=512) for _ in finished),
            finished=tuple(finished),
        )

    def current(self) -> None:
        now = time.monotonic()
        if now < self._due and self.plain:
            return
        self._due = now + self.tick
        self.ticks += 1
        for engine in range(self.engines):
            self.writer.on_step(engine, self._step(engine))
        self.writer.on_http(HttpRecord("/v1/completions", "POST", 200, 1.2, 800, 2400))
        states = [
            EngineSnapshot(
                engine=e,
                running=self.rng.randint(4, 20),
                waiting=self.rng.randint(0, 6),
                waiting_by_reason={"capacity": 1},
                kv_usage=self.rng.uniform(0.3, 0.9),
                blocks_in_use=900,
                num_gpu_blocks=1702,
                max_num_seqs=20,
            )
            for e in range(self.engines)
        ]
        expo = self.writer.render(states)
        self.plain = expo.body
        self.gzipped = gzip.compress(expo.body, compresslevel=6)
        self.content_type = expo.content_type


async def serve(ports: list[int], count: int, engines: int, tick: float) -> None:
    live = LiveExposition(engines, tick)
    live.current()

    async def metrics(request: web.Request) -> web.Response:
        live.current()
        headers = {"Content-Type": live.content_type}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            headers["Content-Encoding"] = "gzip"
            return web.Response(body=live.gzipped, headers=headers)
        return web.Response(body=live.plain, headers=headers)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": VLLM_VERSION})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    bound = []
    for port in ports or [0] * count:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        bound.append(sock.getsockname()[1])
        await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"stub ports: {' '.join(map(str, bound))} ", flush=True)
    await stop.wait()
    await runner.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ports", type=int, nargs="*")
    parser.add_argument("--count", type=int, default=0, help="bind this many free ports")
    parser.add_argument("--engines", type=int, default=1, help="data-parallel engines")
    parser.add_argument("--tick", type=float, default=0.05, help="seconds between advances")
    args = parser.parse_args()
    if not args.ports and args.count < 1:
        parser.error("give ports, or --count N")
    asyncio.run(serve(args.ports, args.count, args.engines, args.tick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
