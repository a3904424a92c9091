"""``inferwatch run``: the sidecar agent.

Each source (NVML, engines, processes) refreshes on its own timer; after every
refresh the exposition is rebuilt once and kept as bytes. A scrape of
``/metrics`` returns those bytes, so its cost does not depend on how many GPUs
or workers there are, and a slow worker or NVML call never delays a scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import platform
import re
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from inferwatch import __version__
from inferwatch.collectors.base import Source
from inferwatch.collectors.engine import EngineSource
from inferwatch.collectors.process import ProcessSource
from inferwatch.config import (
    DEFAULT_PORT,
    LOG_FORMATS,
    AgentConfig,
    GpuConfig,
    WorkerSpec,
    load_config,
)
from inferwatch.logformat import setup_logging

if TYPE_CHECKING:
    from inferwatch.collectors.kubernetes import KubernetesSource
    from inferwatch.collectors.podworkers import PodWorker

#: the source revision the agent was built from (the image sets it at build time)
REVISION = os.environ.get("INFERWATCH_REVISION", "unknown")[:64]

log = logging.getLogger("inferwatch")


def _gzip(body: bytes) -> bytes:
    import gzip

    return gzip.compress(body, compresslevel=5)


class _Bridge:
    """A prometheus_client collector that yields the sources' latest families."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterable[Metric]:
        yield from self.agent.self_families()
        for source in self.agent.sources:
            yield from Agent._families_of(source)


class _Listed:
    """Families already built, in the shape generate_latest() reads (a registry)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


#: A rebuild hands the event loop back to scrapes after about this much work (seconds).
_REBUILD_SLICE = 0.002

_LEGACY_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: metric and label names seen to need no escaping (the agent's own: a small, fixed set)
_PLAIN_NAMES: set[str] = set()
_PLAIN_LABELS: set[str] = set()


def _plain(name: str, known: set[str], pattern: re.Pattern[str]) -> bool:
    if name in known:
        return True
    if not pattern.fullmatch(name):
        return False
    if len(known) < 10_000:
        known.add(name)
    return True


def _family_text(family: Metric) -> str:
    """One family in the text format, the bytes generate_latest() writes for it.

    generate_latest() validates and escapes every label name of every sample, which
    made it most of a rebuild's cost. Families of the common shape (names that need
    no escaping, no timestamps, no OpenMetrics-only samples) are written here; any
    other family is handed to generate_latest() itself.
    """
    name, kind = family.name, family.type
    if kind == "counter":
        name += "_total"
    elif kind not in ("gauge", "histogram", "summary", "untyped"):
        return _generated(family)
    if not _plain(name, _PLAIN_NAMES, _LEGACY_NAME):
        return _generated(family)
    doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
    lines = [f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"]
    special = (family.name + "_created", family.name + "_gsum", family.name + "_gcount")
    for sample in family.samples:
        sname, labels = sample.name, sample.labels
        if (
            sample.timestamp is not None
            or sname in special
            or not _plain(sname, _PLAIN_NAMES, _LEGACY_NAME)
        ):
            return _generated(family)
        if labels:
            pairs = []
            for key in sorted(labels):
                if not _plain(key, _PLAIN_LABELS, _LEGACY_LABEL):
                    return _generated(family)
                value = labels[key]
                if "\\" in value or "\n" in value or '"' in value:
                    value = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
                pairs.append(f'{key}="{value}"')
            lines.append(f"{sname}{{{','.join(pairs)}}} {floatToGoString(sample.value)}\n")
        else:
            lines.append(f"{sname} {floatToGoString(sample.value)}\n")
    return "".join(lines)


def _generated(family: Metric) -> str:
    return generate_latest(_Listed((family,))).decode("utf-8")


def _render(families: Iterable[Metric]) -> bytes:
    return "".join(_family_text(family) for family in families).encode("utf-8")


def load_backend(gpu: GpuConfig) -> Any | None:
    """The NVML backend ``gpu.backend`` names: the pynvml module, a FakeNvml, or None.

    Chosen here, by the wiring, so that the NVML source never imports a simulator.
    """
    if gpu.backend == "nvml":
        import pynvml

        return pynvml
    if gpu.backend == "fake":
        from inferwatch.sim.fakegpu import FakeNvml

        return FakeNvml(count=gpu.fake_count, state_dir=gpu.fake_state_dir)
    if gpu.backend == "none":
        return None
    raise ValueError(f"unknown GPU backend {gpu.backend!r}: expected nvml, fake or none")


class Agent:
    """Runs the sources and holds the last built exposition.

    ``gpu_backend`` replaces the backend ``config.gpu.backend`` names (tests and
    tools hand in a FakeNvml they drive); ``environ`` is the agent's own
    environment (default ``os.environ``), read for its visible GPUs.
    """

    def __init__(
        self,
        config: AgentConfig,
        *,
        gpu_backend: Any | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self._gpu_backend = gpu_backend
        self._environ = os.environ if environ is None else environ
        self.sources: list[Source] = []
        self.ready_checks: list[Callable[[], bool]] = []
        self.process: ProcessSource | None = None
        self.engine: EngineSource | None = None
        #: the workers watched now: the configured ones, then those discovery found
        self.workers: tuple[WorkerSpec, ...] = config.workers
        self.kubernetes: KubernetesSource | None = None
        self.node: str | None = None
        self._build_sources()
        #: everything the exposition holds, in its order (rebuild() renders it in parts)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Bridge(self))
        self._runtime = CollectorRegistry(auto_describe=False)
        for collector in (
            ProcessCollector(registry=self._runtime),
            PlatformCollector(registry=self._runtime),
            GCCollector(registry=self._runtime),
        ):
            self.registry.register(collector)
        self.exposition: bytes = b""
        self._gzip_cache: tuple[bytes, bytes] | None = None
        self._gzip_pending: tuple[bytes, asyncio.Future[bytes]] | None = None
        #: source name -> (the family list it returned, that list rendered as text)
        self._parts: dict[str, tuple[list[Metric], bytes]] = {}
        self._rebuilding = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._tasks: dict[Source, asyncio.Task[None]] = {}
        self._refreshed: set[str] = set()

    def _build_sources(self) -> None:
        config = self.config
        engine = EngineSource(config, launch_max_num_seqs=self._launch_max_num_seqs)
        self.engine = engine
        process = ProcessSource(
            config.workers, interval=config.process_interval, engine_facts=engine.engine_facts
        )
        self.process = process
        if config.kubernetes is not None:
            from inferwatch.collectors.kubernetes import KubernetesSource, api_settings

            settings = api_settings(config.kubernetes, self._environ, config.source)
            self.node = settings.node
            self.kubernetes = KubernetesSource(
                config.kubernetes, settings, on_workers=self._discovered
            )
            self.sources.append(self.kubernetes)
        if config.workers or config.kubernetes is not None:
            self.sources += [engine, process]
        backend = self._gpu_backend
        if config.gpu.backend == "dcgm-exporter":
            self.sources.append(self._dcgm_source())
            backend = None
        elif backend is None and config.gpu.backend != "none":
            backend = load_backend(config.gpu)
        if backend is not None:
            from inferwatch.collectors.attribution import WorkerGpuInputs, gpu_env
            from inferwatch.collectors.nvml import NvmlSource

            kube = self.kubernetes

            def worker_gpu_inputs() -> list[WorkerGpuInputs]:
                envs = process.gpu_environments()
                allocated = (kube.discovered.allocations if kube is not None else None) or {}
                return [
                    WorkerGpuInputs(
                        w.name, envs.get(w.name), w.gpus, allocated.get(w.name), w.labels
                    )
                    for w in self.workers
                ]

            def pod_pid_workers() -> Mapping[int, str]:
                return (kube.discovered.pid_workers if kube is not None else None) or {}

            self.sources.append(
                NvmlSource(
                    backend,
                    interval=config.gpu.interval,
                    slow_interval=config.gpu.slow_interval,
                    activity_interval=config.gpu.activity_interval,
                    pid_workers=process.pid_workers,
                    worker_gpu_inputs=worker_gpu_inputs,
                    own_env=gpu_env(self._environ),
                    # the process source needs a pass or two to find each worker
                    attribution_grace=max(30.0, 3 * config.process_interval),
                    pod_pid_workers=pod_pid_workers,
                )
            )
        if config.warmup:
            from inferwatch.collectors.warmup import WarmupGate

            gate = WarmupGate.from_config(config, process=process, engine=engine)
            if gate is not None:
                self.sources.append(gate)
                self.ready_checks.append(gate.ready)

    def _dcgm_source(self) -> Source:
        """dcgm-exporter instead of NVML: no second poller where the cluster runs one."""
        from inferwatch.collectors.dcgm import DcgmSource, worker_pods

        gpu = self.config.gpu
        return DcgmSource(
            gpu.dcgm_exporter_url,
            interval=gpu.dcgm_interval,
            timeout=self.config.scrape.timeout,
            max_body_bytes=self.config.scrape.max_body_bytes,
            pods=worker_pods(gpu.dcgm_worker_pods, (w.name for w in self.config.workers)),
        )

    def _discovered(self, found: Sequence[PodWorker]) -> None:
        """Kubernetes discovery's workers joined to the configured ones (a configured
        name wins); the engine and process sources follow at once."""
        static = {w.name for w in self.config.workers}
        workers = (*self.config.workers, *(w.spec for w in found if w.spec.name not in static))
        if workers == self.workers:
            return
        added = {w.name for w in workers} - {w.name for w in self.workers}
        gone = {w.name for w in self.workers} - {w.name for w in workers}
        for name in sorted(added):
            log.info("kubernetes: watching worker %s", name)
        for name in sorted(gone):
            log.info("kubernetes: worker %s is gone", name)
        self.workers = workers
        if self.engine is not None:
            self.engine.set_workers(workers)
        if self.process is not None:
            self.process.set_workers(workers)

    def _launch_max_num_seqs(self, worker: str) -> int | None:
        info = self.process.launch_info(worker) if self.process is not None else None
        return info.max_num_seqs if info is not None else None

    # ------------------------------------------------------------------ self metrics
    def self_families(self) -> Iterable[Metric]:
        if self.node is None:
            info = GaugeMetricFamily(
                "inferwatch_agent_info", "The inferwatch agent's version.", labels=["version"]
            )
            info.add_metric([__version__], 1.0)
        else:
            info = GaugeMetricFamily(
                "inferwatch_agent_info",
                "The inferwatch agent's version.",
                labels=["version", "node"],
            )
            info.add_metric([__version__, self.node], 1.0)
        yield info
        build = GaugeMetricFamily(
            "inferwatch_build_info",
            "A metric with a constant '1' labelled by version, revision and the Python "
            "version the agent runs on (the exporters' build_info convention).",
            labels=["version", "revision", "pythonversion"],
        )
        build.add_metric([__version__, REVISION, platform.python_version()], 1.0)
        yield build
        duration = GaugeMetricFamily(
            "inferwatch_collect_duration_seconds",
            "Duration of each collector's last pass.",
            labels=["collector"],
        )
        errors = CounterMetricFamily(
            "inferwatch_collect_errors",
            "Errors met by each collector, by reason.",
            labels=["collector", "reason"],
        )
        fresh = GaugeMetricFamily(
            "inferwatch_last_collect_timestamp_seconds",
            "Unix time each collector last finished a pass.",
            labels=["collector"],
        )
        for source in self.sources:
            h = source.health
            if h.last_duration is not None:
                duration.add_metric([source.name], h.last_duration)
            if h.last_success is not None:
                fresh.add_metric([source.name], h.last_success)
            for reason, count in sorted(h.errors.items()):
                errors.add_metric([source.name, reason], count)
        yield duration
        yield errors
        yield fresh

    # ------------------------------------------------------------------ exposition
    # The exposition is the same text as generate_latest(self.registry), rendered in
    # parts: a source whose families() returns the very list it returned last time
    # (NVML between its passes, the engine between its scrapes) keeps its text, so a
    # GPU pass no longer re-renders every worker's histograms (docs/performance.md).
    def _build(self) -> Iterator[None]:
        """Render the exposition, yielding wherever a caller may hand the loop back.

        A source whose families() returns the very list it returned last time keeps
        its rendered text; after about _REBUILD_SLICE of work the generator yields.
        """
        mark = time.perf_counter()
        parts = [_render(self.self_families())]
        for source in self.sources:
            families = self._families_of(source)
            if time.perf_counter() - mark > _REBUILD_SLICE:
                yield
                mark = time.perf_counter()
            cached = self._parts.get(source.name)
            if cached is None or cached[0] is not families:
                text: list[str] = []
                for family in families:
                    text.append(_family_text(family))
                    if time.perf_counter() - mark > _REBUILD_SLICE:
                        yield
                        mark = time.perf_counter()
                cached = (families, "".join(text).encode("utf-8"))
                self._parts[source.name] = cached
            parts.append(cached[1])
        parts.append(generate_latest(self._runtime))
        self._publish(parts)

    def rebuild(self) -> None:
        """Render the exposition in one go (start-up, tools, tests)."""
        for _ in self._build():
            pass

    async def rebuild_async(self) -> None:
        """As rebuild(), yielding to the event loop between slices of rendering.

        A scrape that arrives while many workers' families are rendered waits for one
        slice (about _REBUILD_SLICE), not for the whole rebuild.
        """
        async with self._rebuilding:
            await asyncio.sleep(0)  # the refresh's last step and the rebuild: two turns
            for _ in self._build():
                await asyncio.sleep(0)

    @staticmethod
    def _families_of(source: Source) -> list[Metric]:
        """The source's families as a list: the very list when families() returns one."""
        got: list[Metric] = []
        try:
            families = source.families()
            if isinstance(families, list):
                return families
            for family in families:
                got.append(family)
        except Exception:  # a bug in one source must not empty the whole exposition
            source.health.error("internal", "building metric families failed")
            log.exception("source %s: families() failed", source.name)
        return got

    def _publish(self, parts: list[bytes]) -> None:
        self.exposition = b"".join(parts)
        self._gzip_cache = None

    async def gzipped_async(self) -> bytes:
        """The exposition gzip-compressed, once per build. The compression runs in a
        thread (zlib lets go of the GIL), so scrapes of the plain text and other work go
        on meanwhile; concurrent callers share one job."""
        body = self.exposition
        cache = self._gzip_cache
        if cache is not None and cache[0] is body:
            return cache[1]
        pending = self._gzip_pending
        if pending is None or pending[0] is not body:
            pending = (body, asyncio.ensure_future(asyncio.to_thread(_gzip, body)))
            self._gzip_pending = pending
        try:
            zipped = await asyncio.shield(pending[1])
        finally:
            if self._gzip_pending is pending and pending[1].done():
                self._gzip_pending = None
        if self.exposition is body:
            self._gzip_cache = (body, zipped)
        return zipped

    def ready(self) -> bool:
        """Every source has finished one pass, and every extra gate (warm-up) is open."""
        if any(s.name not in self._refreshed for s in self.sources):
            return False
        return all(check() for check in self.ready_checks)

    # ------------------------------------------------------------------ running
    async def _loop(self, source: Source) -> None:
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                await source.refresh()
            except Exception:  # refresh must not raise; if it does, keep the loop alive
                source.health.error("internal", "refresh raised")
                log.exception("source %s: refresh raised", source.name)
            self._refreshed.add(source.name)
            await self.rebuild_async()
            delay = max(0.0, source.interval - (time.monotonic() - started))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)

    async def start(self) -> None:
        for source in self.sources:
            await source.start()
        self.rebuild()
        for s in self.sources:
            self._tasks[s] = asyncio.create_task(self._loop(s), name=f"source-{s.name}")

    async def reload(self, config: AgentConfig) -> None:
        """Apply a reloaded configuration (SIGHUP) without dropping unchanged series.

        Workers whose settings did not change keep their state; the process source
        and the warm-up gate are built anew and refreshed once before they replace
        the old ones, so their series never go missing in between. Settings of the
        GPU source, the listen address and the web config need a restart.
        """
        engine = self.engine
        assert engine is not None
        process = ProcessSource(
            config.workers, interval=config.process_interval, engine_facts=engine.engine_facts
        )
        await process.start()
        await process.refresh()
        gate: Source | None = None
        if config.warmup:
            from inferwatch.collectors.warmup import WarmupGate

            new_gate = WarmupGate.from_config(config, process=process, engine=engine)
            if new_gate is not None:
                old_gate = next((s for s in self.sources if isinstance(s, WarmupGate)), None)
                if old_gate is not None:
                    # a worker that is warm stays warm (and in its Service) across a reload
                    for name, state in old_gate.workers.items():
                        if name in new_gate.workers and new_gate.workers[name].spec == state.spec:
                            new_gate.workers[name] = state
                await new_gate.start()
                gate = new_gate
        # everything that can fail is built: from here on the reload is applied whole
        engine.reconfigure(config)
        kept = [s for s in self.sources if s.name not in ("engine", "process", "warmup")]
        sources = ([engine, process] if config.workers else []) + kept
        if gate is not None:
            sources.append(gate)
            self.ready_checks = [gate.ready]  # type: ignore[attr-defined]
        else:
            self.ready_checks = []
        for source in kept:
            if hasattr(source, "pid_workers"):  # NVML: per-process series name workers
                source.pid_workers = process.pid_workers
        self.process = process
        self.config = replace(
            config,
            gpu=self.config.gpu,
            listen_host=self.config.listen_host,
            listen_port=self.config.listen_port,
            web_config_file=self.config.web_config_file,
        )
        gone = [s for s in self.sources if s not in sources]
        self.sources = sources
        for source in gone:
            task = self._tasks.pop(source, None)
            if task is not None:
                task.cancel()
            self._parts.pop(source.name, None)
            if source is not engine:
                with contextlib.suppress(Exception):
                    await source.stop()
        for source in sources:
            if source not in self._tasks:
                self._tasks[source] = asyncio.create_task(
                    self._loop(source), name=f"source-{source.name}"
                )
        self._parts.pop(engine.name, None)
        await self.rebuild_async()
        log.info("configuration reloaded: %d workers", len(config.workers))

    async def stop(self) -> None:
        self._stopping.set()
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for source in self.sources:
            with contextlib.suppress(Exception):
                await source.stop()


async def serve(
    config: AgentConfig,
    *,
    on_ready: Callable[[str], None] | None = None,
    reload_config: Callable[[], AgentConfig] | None = None,
) -> None:
    """Run the agent and its HTTP server until SIGTERM or SIGINT; SIGHUP reloads."""
    from inferwatch import logthrottle
    from inferwatch.errors import UsageError
    from inferwatch.exporter import Exporter

    loop = asyncio.get_running_loop()
    logthrottle.install(loop)
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
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await exporter.stop()
        await agent.stop()


# ---------------------------------------------------------------------- CLI
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
        from inferwatch.webconfig import load_web_config

        load_web_config(config.web_config_file)  # validate before anything starts
    if config.warmup:
        from inferwatch.collectors.warmup import parse_warmup

        parse_warmup(config)  # validate before anything starts
    if config.kubernetes is not None:
        from inferwatch.collectors.kubernetes import api_settings

        api_settings(config.kubernetes, os.environ, config.source)  # validate it too
    return config


def main(args: argparse.Namespace) -> int:
    config = _validated(args, logging_ready=False)
    asyncio.run(serve(config, reload_config=lambda: _validated(args)))
    return 0
