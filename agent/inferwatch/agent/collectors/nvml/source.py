"""``NvmlSource``: the passes (initialisation, every GPU read, teardown) and the Source API.

The pass thread reads every GPU through the parts of this package (the calls,
the devices, the sampler, the XID events) and swaps in an immutable snapshot;
:meth:`NvmlSource.families` turns the latest snapshot and the attribution into
metric families on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pynvml
from prometheus_client.metrics_core import Metric

from inferwatch.agent.collectors.attribution import (
    Answer,
    AttributionLog,
    WorkerGpuInputs,
    attribute,
)
from inferwatch.agent.collectors.base import Source
from inferwatch.agent.collectors.nvml.calls import (
    GPU_GONE,
    LIBRARY_GONE,
    MAX_GPU_RETRY,
    MAX_INIT_RETRY,
    REASONS,
    Device,
    LibraryGone,
    Lost,
    NvmlCalls,
    error_reason,
    text,
)
from inferwatch.agent.collectors.nvml.devices import Devices
from inferwatch.agent.collectors.nvml.events import XidEvents
from inferwatch.agent.collectors.nvml.sampling import Sampler
from inferwatch.agent.collectors.nvml.snapshot import DeviceReading, NvmlSnapshot, build_families

log = logging.getLogger("inferwatch.agent.collectors.nvml")

_FamiliesCache = tuple[
    NvmlSnapshot,
    tuple[Mapping[int, str], Mapping[int, str]],
    list[WorkerGpuInputs],
    list[Metric],
]


class NvmlSource(Source):
    """GPU metrics from NVML (or the fake backend); see the package docstring."""

    name = "nvml"

    def __init__(
        self,
        nvml: Any,
        *,
        interval: float = 1.0,
        slow_interval: float = 30.0,
        pid_workers: Callable[[], Mapping[int, str]] = dict,
        activity_interval: float = 15.0,
        worker_gpu_inputs: Callable[[], Sequence[WorkerGpuInputs]] = tuple,
        own_env: Mapping[str, str] | None = None,
        attribution_grace: float = 60.0,
        pod_pid_workers: Callable[[], Mapping[int, str]] = dict,
    ) -> None:
        super().__init__()
        self.nvml = nvml
        self.interval = interval
        self.slow_interval = slow_interval
        #: Window of the GPM ratios and per-process SM shares (0: every pass).
        self.activity_interval = activity_interval
        self.pid_workers = pid_workers
        #: Host PID -> worker through cgroups (Kubernetes discovery), attribution's 2nd source.
        self.pod_pid_workers = pod_pid_workers
        #: What the process source and the configuration know of each worker (attribution).
        self.worker_gpu_inputs = worker_gpu_inputs
        #: The agent's own GPU variables (attribution.GPU_ENV_VARS), read once by the caller.
        self.own_env: Mapping[str, str] = dict(own_env or {})
        self.attribution_log = AttributionLog(grace=attribution_grace)
        #: How long refresh() waits for a pass before it returns and serves older readings.
        self.pass_timeout = max(10 * interval, 5.0)
        #: First wait before re-opening a lost GPU (doubles up to MAX_GPU_RETRY).
        self.gpu_retry = interval
        #: First wait before retrying a failed NVML initialisation (doubles up to MAX_INIT_RETRY).
        self.init_retry = max(slow_interval, interval)

        self._snapshot = NvmlSnapshot()
        self._families_cache: _FamiliesCache | None = None
        self._answers: dict[str, Answer] = {}
        self._attribution_failed = False
        self._lock = threading.Lock()  # one pass (or teardown) at a time
        self._inflight: asyncio.Future[bool] | None = None

        self._calls = NvmlCalls(nvml)
        self._devices = Devices(self._calls)
        self._sampler = Sampler(self._calls, self._devices)
        self._xid = XidEvents(self._calls)
        self._ready = False
        self._init_due = 0.0
        self._init_backoff = 0.0
        self._gpus: list[Device] = []

    # ------------------------------------------------------------------ Source API

    @property
    def snapshot(self) -> NvmlSnapshot:
        """The readings of the last finished pass."""
        return self._snapshot

    async def refresh(self) -> None:
        inflight = self._inflight
        if inflight is not None and not inflight.done():
            self._apply_reports()
            self.health.error(
                "pass_overrun",
                "the previous NVML pass is still running (a slow NVML call?); "
                "skipping passes until it ends",
                key="pass",
            )
            return
        started = time.perf_counter()
        task: asyncio.Future[bool] = asyncio.ensure_future(asyncio.to_thread(self.collect_once))
        self._inflight = task
        done, _ = await asyncio.wait({task}, timeout=self.pass_timeout)
        self._apply_reports()
        if not done:
            self.health.error(
                "timeout",
                f"an NVML pass has run for more than {self.pass_timeout:g}s; "
                "serving the previous readings until it ends",
                key="pass",
            )
            return
        self.health.ok(key="pass")
        if task.result():
            self.health.finished_pass(started)

    def families(self) -> Iterable[Metric]:
        snap = self._snapshot
        workers, pod_workers, inputs = self._worker_facts()
        cached = self._families_cache
        if (
            cached is not None
            and cached[0] is snap
            and cached[1] == (workers, pod_workers)
            and cached[2] == inputs
        ):
            # The agent rebuilds its exposition after every source's refresh; the GPU
            # part changes only with a new snapshot, a new PID join or new worker facts.
            return cached[3]
        self._attribute(snap, workers, pod_workers, inputs)
        worker_gpus = [
            (worker, dev) for worker, answer in self._answers.items() for dev in answer.devices
        ]
        extra = {i.name: dict(i.labels) for i in inputs if i.labels}
        families = build_families(snap, {**pod_workers, **workers}, worker_gpus, extra)
        self._families_cache = (snap, (dict(workers), dict(pod_workers)), inputs, families)
        return families

    def _worker_facts(
        self,
    ) -> tuple[Mapping[int, str], Mapping[int, str], list[WorkerGpuInputs]]:
        """What the callbacks say of the workers; a failing one costs only its part."""
        try:
            workers = self.pid_workers()
        except Exception:  # a broken PID join must not cost the GPU series
            log.exception("nvml: pid_workers() failed; per-process series lack the worker label")
            workers = {}
        try:
            pod_workers = self.pod_pid_workers()
        except Exception:
            log.exception("nvml: pod_pid_workers() failed")
            pod_workers = {}
        try:
            inputs = list(self.worker_gpu_inputs())
        except Exception:  # nor a broken worker lookup (logged once, not every rebuild)
            if not self._attribution_failed:
                log.exception("nvml: worker_gpu_inputs() failed; no worker-to-GPU series")
            self._attribution_failed = True
            inputs = []
        return workers, pod_workers, inputs

    def _attribute(
        self,
        snap: NvmlSnapshot,
        workers: Mapping[int, str],
        pod_workers: Mapping[int, str],
        inputs: list[WorkerGpuInputs],
    ) -> None:
        try:
            # Before the first pass nothing can be resolved: attributing then would only
            # log notes about devices not read yet.
            self._answers = (
                attribute(
                    inputs,
                    snap.devices,
                    pid_workers=workers,
                    own_env=self.own_env,
                    previous=self._answers,
                    pod_pid_workers=pod_workers,
                )
                if snap.devices
                else {}
            )
            self.attribution_log.update(self._answers)
        except Exception:  # a bug in attribution must not cost the GPU series either
            if not self._attribution_failed:
                log.exception("nvml: attribution failed; no worker-to-GPU series")
            self._attribution_failed = True
            self._answers = {}

    @property
    def attribution(self) -> Mapping[str, Answer]:
        """Each worker's devices and the source that said so, as last exported."""
        return self._answers

    async def stop(self) -> None:
        inflight = self._inflight
        if inflight is not None and not inflight.done():
            await asyncio.wait({inflight}, timeout=self.pass_timeout)
        await asyncio.to_thread(self._shutdown)
        self._apply_reports()

    def _apply_reports(self) -> None:
        reports = self._calls.reports
        while reports:
            kind, reason, message, key = reports.popleft()
            if kind == "error":
                self.health.error(reason, message, key=key)
            elif kind == "ok":
                self.health.ok(key=key)
            else:
                self.health.errors[reason] = self.health.errors.get(reason, 0) + 1
                log.info("nvml: %s", message)

    # ------------------------------------------------------------------ the pass (thread)

    def collect_once(self) -> bool:
        """One blocking pass in the caller's thread; True when NVML was read. Never raises.

        refresh() runs this in a worker thread; benchmarks and tools call it directly.
        Health reports it makes are applied by the next refresh() (or stop()).
        """
        with self._lock:
            try:
                return self._pass()
            except Exception as exc:  # refresh() must never raise
                log.exception("nvml: unexpected error in a collection pass")
                self._calls.report("internal", f"unexpected error in a pass: {exc!r}", "")
                return False

    def _pass(self) -> bool:
        now = time.monotonic()
        if not self._ready and (now < self._init_due or not self._initialize(now)):
            return False
        readings: list[DeviceReading] = []
        seen: set[int] = set()
        try:
            for gpu in self._gpus:
                readings.extend(self._read_gpu(gpu, now, seen))
        except LibraryGone as gone:
            self._teardown()
            self._schedule_init(now)
            self._calls.report(
                error_reason(gone.code),
                f"NVML stopped answering ({gone}); no GPU series until it is re-initialised",
                "",
            )
            self._snapshot = NvmlSnapshot()
            return False
        self._sampler.processes.forget_except(seen)
        self._snapshot = NvmlSnapshot(tuple(readings), self._xid.rows(self._gpus))
        return True

    def _read_gpu(self, gpu: Device, now: float, seen: set[int]) -> list[DeviceReading]:
        if gpu.lost and not self._reopen(gpu, now):
            return [self._sampler.down(gpu)]
        try:
            if now >= gpu.slow_due:
                self._sampler.read_slow(gpu)
                gpu.slow_due = now + self.slow_interval
            activity = now >= gpu.activity_due
            if activity:
                gpu.activity_due = now + self.activity_interval
            return self._sampler.read(gpu, seen, activity=activity)
        except Lost as lost:
            self._mark_lost(gpu, now, lost)
            return [self._sampler.down(gpu)]

    def _reopen(self, gpu: Device, now: float) -> bool:
        """A lost GPU opened again once its backoff has passed; False while it is still lost."""
        if now < gpu.retry_at:
            return False
        try:
            self._devices.open(gpu)
        except Lost as lost:
            self._mark_lost(gpu, now, lost)
            return False
        gpu.lost = False
        gpu.backoff = 0.0
        self._calls.report_ok(gpu.key)
        if not self._xid.registered(gpu):
            self._xid.register(gpu)
        return True

    def _mark_lost(self, gpu: Device, now: float, lost: Lost) -> None:
        first = not gpu.lost
        gpu.lost = True
        gpu.gpm_prev = None
        gpu.backoff = self.gpu_retry if first else min(gpu.backoff * 2, MAX_GPU_RETRY)
        gpu.retry_at = now + gpu.backoff
        reason = "gpu_lost" if lost.code in GPU_GONE else error_reason(lost.code)
        self._calls.report(reason, f"GPU unusable ({lost}); retrying with backoff", gpu.key)

    # ------------------------------------------------------------------ init and teardown

    def _schedule_init(self, now: float) -> None:
        self._init_backoff = min(
            self._init_backoff * 2 if self._init_backoff else self.init_retry, MAX_INIT_RETRY
        )
        self._init_due = now + self._init_backoff

    def _initialize(self, now: float) -> bool:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except pynvml.NVMLError as err:
            self._init_failed(now, err.value, str(err))
            return False
        except OSError as err:
            self._init_failed(now, pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, str(err))
            return False
        try:
            self._sampler.driver = text(nvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            self._sampler.driver = ""
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as err:
            self._safe_shutdown()
            self._init_failed(now, err.value, f"cannot count GPUs: {err}")
            return False
        if not self._open_all(now, count):
            return False
        self._xid.start(self._gpus)
        self._ready = True
        self._init_backoff = 0.0
        self._calls.report_ok("")
        log.info("nvml: %d GPU(s), driver %s", count, self._sampler.driver or "unknown")
        return True

    def _open_all(self, now: float, count: int) -> bool:
        """Open every GPU (a lost one is marked, and retried later); False when NVML is gone."""
        self._gpus = [Device(i, f"gpu{i}") for i in range(count)]
        for gpu in self._gpus:
            try:
                self._devices.open(gpu)
            except Lost as lost:
                self._mark_lost(gpu, now, lost)
            except LibraryGone as gone:
                self._teardown()
                self._init_failed(now, gone.code, str(gone))
                return False
        return True

    def _init_failed(self, now: float, code: int, message: str) -> None:
        self._schedule_init(now)
        reason = error_reason(code) if code in LIBRARY_GONE or code in REASONS else "init_failed"
        hint = ""
        if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            hint = " (is the NVIDIA driver installed and libnvidia-ml.so.1 visible to the agent?)"
        self._calls.report(
            reason,
            f"NVML unavailable: {message}{hint}; running without GPU series, "
            f"next attempt in {self._init_backoff:g}s",
            "",
        )

    def _safe_shutdown(self) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            self.nvml.nvmlShutdown()

    def _shutdown(self) -> None:
        with self._lock:
            if self._ready:
                self._teardown()

    def _teardown(self) -> None:
        self._xid.stop()
        for gpu in self._gpus:
            self._devices.free(gpu)
        self._gpus = []
        self._ready = False
        self._safe_shutdown()
