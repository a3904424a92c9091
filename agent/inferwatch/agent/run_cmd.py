"""``inferwatch run``: the sidecar agent's command: flags, validation, the agent and its server.

Wires :class:`inferwatch.agent.wiring.Agent` (the sources on their timers) to
:class:`inferwatch.agent.exporter.Exporter` (the HTTP server) and to the process's
signals: SIGTERM and SIGINT stop, SIGHUP reloads the configuration. Neither of
the two imports the other; this module is the only place both meet.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from inferwatch import __version__
from inferwatch.agent.config import DEFAULT_PORT, LOG_FORMATS, AgentConfig, load_config
from inferwatch.agent.exporter import Exporter
from inferwatch.agent.logformat import setup_logging
from inferwatch.agent.wiring import Agent

log = logging.getLogger("inferwatch")

#: seconds a thread holding the GIL keeps it while the event loop waits for it (Python's
#: default is 5 ms). The parse, NVML and process threads run Python; with the default,
#: each socket call of a burst of scrapes could wait up to 5 ms to get the GIL back
#: (issue 32: 20 concurrent scrapers' P99).
SWITCH_INTERVAL = 0.0005
#: glibc's mallopt parameter M_ARENA_MAX
_M_ARENA_MAX = -8
#: seconds after the start at which the heap is first trimmed (every source has run),
#: then the period of later trims
TRIM_FIRST, TRIM_EVERY = 20.0, 600.0


def _libc() -> ctypes.CDLL | None:
    """glibc, or None (musl, macOS: the calls below are glibc's)."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt  # noqa: B018 - present on glibc only
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(libc: ctypes.CDLL | None, arenas: int = 2) -> None:
    """At most ``arenas`` malloc arenas (issue 32). glibc gives each thread that
    allocates an arena of its own, up to 8 per core, and an arena keeps what it once
    held: on a many-core node the NVML, process, parse, gzip and bcrypt threads could
    each keep one. They allocate little and briefly; they share two instead."""
    if libc is not None:
        libc.mallopt(_M_ARENA_MAX, arenas)


def trim_heap(libc: ctypes.CDLL | None) -> None:
    """Hand the C heap's free pages back to the kernel (glibc ``malloc_trim``): what
    the imports, the first passes and the first scrapes freed stays in the process
    otherwise, counted in its RSS (issue 32: about 3 MB). It takes well under a
    millisecond; no forced garbage collection (that would hold the loop for tens of
    milliseconds)."""
    if libc is not None:
        libc.malloc_trim(0)


async def serve(
    config: AgentConfig,
    *,
    on_ready: Callable[[str], None] | None = None,
    reload_config: Callable[[], AgentConfig] | None = None,
) -> None:
    """Run the agent and its HTTP server until SIGTERM or SIGINT; SIGHUP reloads."""
    from inferwatch.agent import logthrottle
    from inferwatch.errors import UsageError

    loop = asyncio.get_running_loop()
    logthrottle.install(loop)
    libc = _libc()
    limit_arenas(libc)
    sys.setswitchinterval(SWITCH_INTERVAL)
    agent = Agent(config)
    exporter = Exporter(agent, config)
    stop = asyncio.Event()
    reloading: list[asyncio.Task[None]] = []

    async def reload() -> None:
        try:
            new = reload_config() if reload_config is not None else config
            await agent.reload(new)
        except UsageError as exc:
            log.error("SIGHUP: configuration not reloaded, the old one stays: %s", exc)
        except Exception as exc:  # a reload must never end the agent
            log.error("SIGHUP: reload failed, the old configuration stays: %s", exc)

    def on_hup() -> None:
        if not any(not t.done() for t in reloading):
            reloading[:] = [asyncio.ensure_future(reload())]

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, on_hup)
    await agent.start()
    try:
        url = await exporter.start()
    except UsageError:
        await agent.stop()
        raise
    log.info(
        "inferwatch %s serving %s/metrics (%d workers%s, gpu backend %s)",
        __version__,
        url,
        len(config.workers),
        f", discovering the pods of node {agent.node}" if agent.node else "",
        config.gpu.backend,
    )
    if on_ready:
        on_ready(url)

    async def trim_now_and_then() -> None:
        await asyncio.sleep(TRIM_FIRST)
        while True:
            trim_heap(libc)
            await asyncio.sleep(TRIM_EVERY)

    trimming = asyncio.ensure_future(trim_now_and_then())
    try:
        await stop.wait()
    finally:
        trimming.cancel()
        log.info("shutting down")
        await exporter.stop()
        await agent.stop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="FILE", help="YAML configuration file (also INFERWATCH_CONFIG)"
    )
    parser.add_argument(
        "--listen",
        "--web.listen-address",
        dest="listen",
        metavar="HOST:PORT",
        help=f"address to serve /metrics on (default 0.0.0.0:{DEFAULT_PORT})",
    )
    parser.add_argument(
        "--worker",
        action="append",
        metavar="[NAME=]URL",
        dest="workers",
        help="inference server base URL to watch; repeatable; the name defaults to host:port",
    )
    parser.add_argument(
        "--gpu-backend",
        choices=("nvml", "fake", "none", "dcgm-exporter"),
        help="where GPU metrics come from (default nvml)",
    )
    parser.add_argument(
        "--dcgm-exporter-url",
        metavar="URL",
        help="dcgm-exporter's metrics URL, backend dcgm-exporter "
        "(default http://127.0.0.1:9400/metrics; also INFERWATCH_DCGM_EXPORTER_URL)",
    )
    parser.add_argument("--fake-gpus", metavar="N", help="number of fake GPUs (backend fake)")
    parser.add_argument(
        "--fake-gpu-state",
        metavar="DIR",
        help="directory of GPU state files written by `inferwatch simulate`",
    )
    parser.add_argument(
        "--collect-interval",
        metavar="DURATION",
        help="engine and process polling interval (default 2s)",
    )
    parser.add_argument(
        "--stats-window",
        metavar="DURATION",
        help="window of quantiles, queue slope and hit ratio (default 60s)",
    )
    parser.add_argument(
        "--web-config-file",
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="TLS and basic-auth settings, exporter-toolkit format",
    )
    parser.add_argument(
        "--log-level",
        "--log.level",
        dest="log_level",
        choices=("debug", "info", "warning", "error"),
    )
    parser.add_argument(
        "--log.format",
        dest="log_format",
        choices=LOG_FORMATS,
        help="log line format (default text; logfmt and json as other exporters write)",
    )


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    flags = {
        "listen": args.listen,
        "workers": args.workers,
        "gpu.backend": args.gpu_backend,
        "gpu.fake_count": args.fake_gpus,
        "gpu.fake_state_dir": args.fake_gpu_state,
        "gpu.dcgm_exporter_url": args.dcgm_exporter_url,
        "collect_interval": args.collect_interval,
        "stats_window": args.stats_window,
        "web_config_file": args.web_config_file,
        "log_level": args.log_level,
        "log_format": getattr(args, "log_format", None),
    }
    return load_config(args.config, flags=flags)


def _validated(args: argparse.Namespace, *, logging_ready: bool = True) -> AgentConfig:
    config = config_from_args(args)
    if not logging_ready:  # warnings of the checks below go out in the chosen format
        setup_logging(config.log_level, config.log_format)
    if config.web_config_file:
        from inferwatch.agent.webconfig import load_web_config

        load_web_config(config.web_config_file)  # validate before anything starts
    if config.warmup:
        from inferwatch.agent.collectors.warmup import parse_warmup

        parse_warmup(config)  # validate before anything starts
    if config.kubernetes is not None:
        from inferwatch.agent.collectors.kubernetes import api_settings

        api_settings(config.kubernetes, os.environ, config.source)  # validate it too
    return config


def main(args: argparse.Namespace) -> int:
    config = _validated(args, logging_ready=False)
    run_event_loop(serve(config, reload_config=lambda: _validated(args)))
    return 0


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """asyncio's loop, or uvloop's where it is installed (``pip install inferwatch[fast]``;
    ``INFERWATCH_UVLOOP=0`` keeps asyncio's): the measuring proxy's bytes then move in
    C (docs/proxy.md, "Costs")."""
    if os.environ.get("INFERWATCH_UVLOOP", "1") != "0":
        try:
            import uvloop  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            pass
        else:
            uvloop.run(main)
            return
    asyncio.run(main)
