"""The agent's wiring: which sources run (NVML or DCGM, engines, processes, discovery,
warm-up), each on its own timer, and a rebuild of the exposition after every refresh.

The exposition itself (text, caching, gzip) is :mod:`inferwatch.agent.exposition`; the
HTTP server is :mod:`inferwatch.agent.exporter`; the ``inferwatch run`` command that
joins them is :mod:`inferwatch.agent.run_cmd`. A scrape of ``/metrics`` returns the
last built bytes, so its cost does not depend on how many GPUs or workers there
are, and a slow worker or NVML call never delays a scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import Metric

from inferwatch import __version__
from inferwatch.agent.collectors.attribution import WorkerGpuInputs, gpu_env
from inferwatch.agent.collectors.base import Source, counter_family, gauge_family
from inferwatch.agent.collectors.engine import EngineSource
from inferwatch.agent.collectors.process import ProcessSource
from inferwatch.agent.config import AgentConfig, GpuConfig, WorkerSpec
from inferwatch.agent.exposition import Exposition
from inferwatch.engines import contract

if TYPE_CHECKING:
    from inferwatch.agent.collectors.kubernetes import KubernetesSource
    from inferwatch.agent.collectors.podworkers import PodWorker
    from inferwatch.agent.proxy import ProxySource

#: the source revision the agent was built from (the image sets it at build time)
REVISION = os.environ.get("INFERWATCH_REVISION", "unknown")[:64]

log = logging.getLogger("inferwatch")


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
        #: the measuring proxies of the workers that have one (``workers[].proxy``)
        self.proxy: ProxySource | None = None
        #: the workers watched now: the configured ones, then those discovery found
        self.workers: tuple[WorkerSpec, ...] = config.workers
        self.kubernetes: KubernetesSource | None = None
        self.node: str | None = None
        self._build_sources()
        #: the bytes /metrics serves, rebuilt after every refresh
        self.output = Exposition(self.self_families, lambda: self.sources)
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
            from inferwatch.agent.collectors.kubernetes import KubernetesSource, api_settings

            settings = api_settings(config.kubernetes, self._environ, config.source)
            self.node = settings.node
            self.kubernetes = KubernetesSource(
                config.kubernetes, settings, on_workers=self._discovered
            )
            self.sources.append(self.kubernetes)
        if config.workers or config.kubernetes is not None:
            self.sources += [engine, process]
        if any(w.proxy is not None for w in config.workers):
            from inferwatch.agent.proxy import ProxySource

            self.proxy = ProxySource(config.workers, config.collect_interval, engine.proxy_view)
            engine.proxy_fill = self.proxy.contract_fill
            self.sources.append(self.proxy)
        kube = self.kubernetes

        def worker_gpu_inputs() -> list[WorkerGpuInputs]:
            """What the process source, the kubelet and the configuration know of each
            worker: the inputs of GPU attribution, for either GPU backend."""
            envs = process.gpu_environments()
            allocated = (kube.discovered.allocations if kube is not None else None) or {}
            return [
                WorkerGpuInputs(w.name, envs.get(w.name), w.gpus, allocated.get(w.name), w.labels)
                for w in self.workers
            ]

        backend = self._gpu_backend
        if config.gpu.backend == "dcgm-exporter":
            self.sources.append(self._dcgm_source(worker_gpu_inputs))
            backend = None
        elif backend is None and config.gpu.backend != "none":
            backend = load_backend(config.gpu)
        if backend is not None:
            from inferwatch.agent.collectors.nvml import NvmlSource

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
            from inferwatch.agent.collectors.warmup import WarmupGate

            gate = WarmupGate.from_config(config, process=process, engine=engine)
            if gate is not None:
                self.sources.append(gate)
                self.ready_checks.append(gate.ready)

    def _dcgm_source(self, worker_gpu_inputs: Callable[[], Iterable[WorkerGpuInputs]]) -> Source:
        """dcgm-exporter instead of NVML: no second poller where the cluster runs one."""
        from inferwatch.agent.collectors.dcgm import DcgmSource, worker_pods

        gpu = self.config.gpu
        return DcgmSource(
            gpu.dcgm_exporter_url,
            interval=gpu.dcgm_interval,
            timeout=self.config.scrape.timeout,
            max_body_bytes=self.config.scrape.max_body_bytes,
            pods=worker_pods(gpu.dcgm_worker_pods, (w.name for w in self.config.workers)),
            worker_gpu_inputs=worker_gpu_inputs,
            own_env=gpu_env(self._environ),
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
            info = gauge_family(contract.AGENT_INFO, ["version"])
            info.add_metric([__version__], 1.0)
        else:
            info = gauge_family(contract.AGENT_INFO, ["version", "node"])
            info.add_metric([__version__, self.node], 1.0)
        yield info
        build = gauge_family(contract.BUILD_INFO, ["version", "revision", "pythonversion"])
        build.add_metric([__version__, REVISION, platform.python_version()], 1.0)
        yield build
        duration = gauge_family(contract.COLLECT_DURATION_SECONDS, ["collector"])
        errors = counter_family(contract.COLLECT_ERRORS, ["collector", "reason"])
        fresh = gauge_family(contract.LAST_COLLECT_TIMESTAMP_SECONDS, ["collector"])
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
            await self.output.rebuild_async()
            delay = max(0.0, source.interval - (time.monotonic() - started))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)

    async def start(self) -> None:
        started: list[Source] = []
        try:
            for source in self.sources:
                await source.start()
                started.append(source)
        except BaseException:  # a proxy that cannot listen: undo what started
            for source in started:
                with contextlib.suppress(Exception):
                    await source.stop()
            raise
        self.output.rebuild()
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
            from inferwatch.agent.collectors.warmup import WarmupGate

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
        # the proxies stay as they are: their settings need a restart (docs/proxy.md)
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
            self.output.forget(source.name)
            if source is not engine:
                with contextlib.suppress(Exception):
                    await source.stop()
        for source in sources:
            if source not in self._tasks:
                self._tasks[source] = asyncio.create_task(
                    self._loop(source), name=f"source-{source.name}"
                )
        self.output.forget(engine.name)
        await self.output.rebuild_async()
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
