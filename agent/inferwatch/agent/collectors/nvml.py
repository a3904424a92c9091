"""The NVML source: every GPU series of the metric contract, read through ``pynvml``.

One code path serves the real library and the fake one (:mod:`inferwatch.sim.fakegpu`):
the source is handed a backend object with ``pynvml``'s function names and
catches ``pynvml.NVMLError`` by its code.

How a pass works. :meth:`NvmlSource.refresh` runs one blocking pass in a
worker thread and never lets two passes overlap; the pass reads every GPU,
builds an immutable :class:`NvmlSnapshot` and swaps it in. :meth:`families`
turns the latest snapshot into metric families without touching NVML.

Cost. Handles and what never changes (name, UUID, PCI bus id, GPM support) are
read once when a GPU is opened. Three cadences, measured on an H200 (see
docs/validation.md): every ``interval`` (1 s) the cheap readings, a few
microseconds each; every ``activity_interval`` (15 s) the activity windows, GPM
(a GPM sample costs ~0.2 ms) and per-process SM share
(``nvmlDeviceGetProcessUtilization`` costs ~2 ms with a process on the GPU),
each averaged over the window since the previous activity pass, which is also
what a Prometheus scraping every 15 s wants; every ``slow_interval`` (30 s) the
slow or slow-changing calls (energy ~3.5 ms, ECC, the enforced power limit, MIG
layout). Between their reads, the last values are exported.

Failures, by NVML's answer:

* NOT_SUPPORTED (or a function this ``pynvml`` lacks): the series is absent for
  that GPU and the call is never made again for it (counted once as
  ``not_supported``).
* GPU_IS_LOST: ``inferwatch_gpu_up 0`` for that GPU, its readings absent, and the
  GPU is re-opened with exponential backoff; the other GPUs carry on.
* No library, no driver: no GPU series at all; the reason is logged once, counted
  (``library_not_found``, ``driver_not_loaded``, ...) and initialisation is
  retried rarely.
* Anything else: that reading is absent for this pass and the reason counted.

XID errors arrive as NVML events, read by a daemon thread blocked in
``nvmlEventSetWait``; it keeps one counter and the time of the last event per
(GPU, XID), so an XID storm costs counts, never memory.

Which GPUs each worker runs on (``inferwatch_worker_gpu_info``) is decided by
:mod:`inferwatch.agent.collectors.attribution` over the device list of the last pass,
with what the callbacks given to the source say of the workers.

The backend (``pynvml`` itself or a stand-in with its function names) is chosen
by the caller: this module never imports a simulator.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil
import pynvml
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from inferwatch.agent.collectors.attribution import (
    Answer,
    AttributionLog,
    DeviceLike,
    WorkerGpuInputs,
    attribute,
)
from inferwatch.agent.collectors.base import Source

log = logging.getLogger(__name__)

#: Clock-event reasons exported, as (label value, NVML bit).
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("idle", 0x01),
    ("sw_power_cap", 0x04),
    ("hw_slowdown", 0x08),
    ("sw_thermal", 0x20),
    ("hw_thermal", 0x40),
    ("power_brake", 0x80),
    ("sync_boost", 0x10),
    ("app_clocks", 0x02),
)

#: GPM metrics, as (family, NVML GPM metric id); NVML reports percent.
GPM_METRICS: tuple[tuple[str, int], ...] = (
    ("inferwatch_gpu_sm_active_ratio", 2),  # NVML_GPM_METRIC_SM_UTIL
    ("inferwatch_gpu_sm_occupancy_ratio", 3),  # NVML_GPM_METRIC_SM_OCCUPANCY
    ("inferwatch_gpu_tensor_active_ratio", 5),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    ("inferwatch_gpu_dram_active_ratio", 10),  # NVML_GPM_METRIC_DRAM_BW_UTIL
)

GAUGE_HELP: dict[str, str] = {
    "inferwatch_gpu_utilization_ratio": (
        "Share of the last sample period in which any kernel ran on the GPU "
        "(NVML utilization.gpu / 100; coarse, see inferwatch_gpu_sm_active_ratio)."
    ),
    "inferwatch_gpu_memory_busy_ratio": (
        "Share of the last sample period in which device memory was read or written "
        "(NVML utilization.memory / 100)."
    ),
    "inferwatch_gpu_sm_active_ratio": (
        "Share of SMs busy between two collection passes (NVML GPM SM utilization; "
        "Hopper and newer)."
    ),
    "inferwatch_gpu_sm_occupancy_ratio": (
        "Resident warps over the theoretical maximum between two passes (NVML GPM SM occupancy)."
    ),
    "inferwatch_gpu_tensor_active_ratio": (
        "Share of time any tensor pipe was busy between two passes (NVML GPM)."
    ),
    "inferwatch_gpu_dram_active_ratio": (
        "DRAM bandwidth used over its maximum between two passes (NVML GPM)."
    ),
    "inferwatch_gpu_memory_used_bytes": (
        "Device memory allocated by processes, excluding the driver's reservation "
        "(NVML memory info v2 'used'; v1 'used' where v2 is unsupported)."
    ),
    "inferwatch_gpu_memory_reserved_bytes": "Device memory reserved by the driver (NVML v2).",
    "inferwatch_gpu_memory_total_bytes": "Total device memory (NVML).",
    "inferwatch_gpu_memory_used_ratio": (
        "(used + reserved) / total device memory: the VRAM level the thresholds speak of."
    ),
    "inferwatch_gpu_power_watts": "Power draw reported by NVML, in watts.",
    "inferwatch_gpu_power_limit_watts": "Enforced power limit (NVML), in watts.",
    "inferwatch_gpu_temperature_celsius": "GPU core temperature (NVML), in degrees Celsius.",
    "inferwatch_gpu_sm_clock_hertz": "Current SM clock (NVML), in hertz.",
    "inferwatch_gpu_memory_clock_hertz": "Current memory clock (NVML), in hertz.",
    "inferwatch_gpu_performance_state": "Performance state (P-state) 0-15 (NVML); 0 is the fastest.",
    "inferwatch_gpu_fan_speed_ratio": (
        "Intended fan speed as a share of its maximum (NVML fan speed / 100; can exceed 1)."
    ),
}
COUNTER_HELP: dict[str, str] = {
    "inferwatch_gpu_energy_joules_total": (
        "Energy used since the driver was loaded (NVML total energy consumption), in joules."
    ),
}
INFO_HELP = "Static description of a GPU or MIG device (NVML); always 1."
UP_HELP = "1 when the GPU answered NVML in the last pass, 0 when it is lost or failing."
CLOCK_EVENT_HELP = (
    "1 while NVML reports this reason for holding the clocks down (clock event reasons)."
)
XID_HELP = "XID errors reported by NVML events since the agent started, by XID code."
XID_LAST_HELP = (
    "Unix time of the last NVML XID event of this XID code on this GPU since the agent started."
)
WORKER_GPU_HELP = (
    "1 for each GPU or MIG device a worker runs on: from NVML's process list, else the "
    "worker's NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES, else the agent's own visible "
    "devices (one-worker sidecar), else workers[].gpus; absent when unknown."
)
ECC_HELP = "Volatile ECC error counts since the driver was loaded (NVML), by type."
PROCESS_MEMORY_HELP = "Device memory used by one process (NVML compute running processes)."
PROCESS_SM_HELP = "Share of SM time one process had since the previous pass (NVML)."
PCIE_HELP = (
    "PCIe traffic by direction (tx, rx), NVML's 20 ms byte-counter sample taken every "
    "activity interval, in bytes per second."
)
#: NVML reports PCIe throughput in KB/s of 1024 bytes
_PCIE_KB = 1024.0
_PSTATE_UNKNOWN = getattr(pynvml, "NVML_PSTATE_UNKNOWN", 32)

#: Distinct XID codes counted per GPU; more (a corrupted event stream) go to xid="other".
MAX_XID_CODES = 64
#: Longest wait between attempts to re-open a lost GPU, and to re-initialise NVML.
MAX_GPU_RETRY = 60.0
MAX_INIT_RETRY = 600.0
#: How long the event thread blocks in NVML before it checks whether to stop.
_EVENT_WAIT_MS = 200
_NO_INSTANCE = 0xFFFFFFFF

_NOT_SUPPORTED = {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
_GPU_GONE = {pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED}
_LIBRARY_GONE = {
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
}
_REASONS = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library_not_found",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver_not_loaded",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "driver_mismatch",
    pynvml.NVML_ERROR_UNINITIALIZED: "uninitialized",
    pynvml.NVML_ERROR_NO_PERMISSION: "no_permission",
    pynvml.NVML_ERROR_TIMEOUT: "timeout",
    pynvml.NVML_ERROR_GPU_IS_LOST: "gpu_lost",
    pynvml.NVML_ERROR_RESET_REQUIRED: "gpu_lost",
    pynvml.NVML_ERROR_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "not_supported",
    pynvml.NVML_ERROR_UNKNOWN: "unknown",
}


def error_reason(code: int) -> str:
    """The ``reason`` label of ``inferwatch_collect_errors_total`` for an NVML return code."""
    return _REASONS.get(code, "nvml_error")


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _ratio(percent: float) -> float:
    """NVML percent -> 0..1; GPM can overshoot 100 by rounding."""
    return min(max(percent / 100.0, 0.0), 1.0)


def mig_profile(device_name: str) -> str:
    """The MIG profile ("1g.18gb") from a MIG device's NVML name ("NVIDIA H200 MIG 1g.18gb")."""
    _, sep, tail = device_name.rpartition(" MIG ")
    return tail.strip() if sep and tail.strip() else "unknown"


def _handle_key(handle: Any) -> Any:
    """A hashable identity for a device handle (ctypes pointers compare by object, not address)."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


# ---------------------------------------------------------------------- snapshot


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    name: str
    used_bytes: int | None
    sm_ratio: float | None


@dataclass(frozen=True)
class DeviceReading:
    """One GPU or MIG device in one pass. Absent readings are simply not in the mappings."""

    gpu: str
    uuid: str
    name: str
    pci_bus_id: str
    driver_version: str
    mig_mode: str
    up: bool
    gpu_instance: str | None = None
    mig_profile: str | None = None
    gauges: Mapping[str, float] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)
    clock_events: Mapping[str, float] = field(default_factory=dict)
    ecc: Mapping[str, float] = field(default_factory=dict)
    processes: tuple[ProcessReading, ...] = ()
    #: direction ("tx", "rx") -> bytes per second
    pcie: Mapping[str, float] = field(default_factory=dict)

    @property
    def pids(self) -> tuple[int, ...]:
        """The PIDs in this device's compute-process list."""
        return tuple(p.pid for p in self.processes)

    def labels(self) -> dict[str, str]:
        labels = {"gpu": self.gpu, "uuid": self.uuid}
        if self.gpu_instance is not None:
            labels["gpu_instance"] = self.gpu_instance
            labels["mig_profile"] = self.mig_profile or "unknown"
        return labels


@dataclass(frozen=True)
class NvmlSnapshot:
    devices: tuple[DeviceReading, ...] = ()
    #: (gpu, uuid, xid, count, unix time of the last event), since the agent started
    xid: tuple[tuple[str, str, str, int, float], ...] = ()


# ---------------------------------------------------------------------- internal state


class _Lost(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _LibraryGone(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


_SKIP: Any = object()


class _Device:
    """Mutable per-device state, touched only by the pass thread (and the lock holder)."""

    def __init__(self, index: int, key: str) -> None:
        self.index = index
        self.key = key
        self.handle: Any = None
        self.uuid = ""
        self.name = ""
        self.pci_bus_id = ""
        self.mig_mode = "unknown"
        self.unsupported: set[str] = set()
        self.failing: set[str] = set()
        self.lost = False
        self.retry_at = 0.0
        self.backoff = 0.0
        self.gpm = False
        self.gpm_samples: list[Any] = []
        self.gpm_prev: Any = None
        self.gpm_next = 0
        self.gpm_request: Any = None
        self.proc_ts = 0
        self.slow_due = 0.0
        self.activity_due = 0.0
        self.gpm_values: dict[str, float] = {}
        self.pcie: dict[str, float] = {}
        self.shares: dict[int, float] | None = None
        self.slow_gauges: dict[str, float] = {}
        self.slow_counters: dict[str, float] = {}
        self.ecc: dict[str, float] = {}
        # MIG: on a parent, its MIG devices; on a MIG device, its parent and instance.
        self.migs: list[_Device] = []
        self.parent: _Device | None = None
        self.gpu_instance: int | None = None
        self.profile = ""


class NvmlSource(Source):
    """GPU metrics from NVML (or the fake backend); see the module docstring."""

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
        self._families_cache: (
            tuple[
                NvmlSnapshot,
                tuple[Mapping[int, str], Mapping[int, str]],
                list[WorkerGpuInputs],
                list[Metric],
            ]
            | None
        ) = None
        self._answers: dict[str, Answer] = {}
        self._attribution_failed = False
        self._lock = threading.Lock()  # one pass (or teardown) at a time
        self._inflight: asyncio.Future[bool] | None = None
        # Health reports made off the event loop, applied by refresh() on it: SourceHealth
        # is read by the agent on the loop and is not thread-safe.
        self._reports: collections.deque[tuple[str, str, str, str]] = collections.deque()

        self._ready = False
        self._init_due = 0.0
        self._init_backoff = 0.0
        self._driver = ""
        self._gpus: list[_Device] = []
        self._names: dict[int, str] = {}

        self._xid_lock = threading.Lock()
        self._xid: dict[int, dict[str, int]] = {}
        self._xid_last: dict[int, dict[str, float]] = {}
        self._event_set: Any = None
        self._event_thread: threading.Thread | None = None
        self._event_stop = threading.Event()
        self._event_devices: dict[Any, int] = {}

        self._gpm_request_cls = getattr(pynvml, "c_nvmlGpmMetricsGet_t", None)

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
        worker_gpus = [
            (worker, dev) for worker, answer in self._answers.items() for dev in answer.devices
        ]
        extra = {i.name: dict(i.labels) for i in inputs if i.labels}
        families = build_families(snap, {**pod_workers, **workers}, worker_gpus, extra)
        self._families_cache = (snap, (dict(workers), dict(pod_workers)), inputs, families)
        return families

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

    # ------------------------------------------------------------------ reports

    def _report(self, reason: str, message: str, key: str) -> None:
        self._reports.append(("error", reason, message, key))

    def _report_ok(self, key: str) -> None:
        self._reports.append(("ok", "", "", key))

    def _report_once(self, reason: str, message: str) -> None:
        """Count an expected condition (an unsupported call) without a warning."""
        self._reports.append(("note", reason, message, ""))

    def _apply_reports(self) -> None:
        while self._reports:
            kind, reason, message, key = self._reports.popleft()
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
                self._report("internal", f"unexpected error in a pass: {exc!r}", "")
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
        except _LibraryGone as gone:
            self._teardown()
            self._schedule_init(now)
            self._report(
                error_reason(gone.code),
                f"NVML stopped answering ({gone}); no GPU series until it is re-initialised",
                "",
            )
            self._snapshot = NvmlSnapshot()
            return False
        for pid in [p for p in self._names if p not in seen]:
            del self._names[pid]
        self._snapshot = NvmlSnapshot(tuple(readings), self._xid_rows())
        return True

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
            self._driver = _text(nvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            self._driver = ""
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as err:
            self._safe_shutdown()
            self._init_failed(now, err.value, f"cannot count GPUs: {err}")
            return False
        self._gpus = [_Device(i, f"gpu{i}") for i in range(count)]
        for gpu in self._gpus:
            try:
                self._open(gpu)
            except _Lost as lost:
                self._mark_lost(gpu, now, lost)
            except _LibraryGone as gone:
                self._teardown()
                self._init_failed(now, gone.code, str(gone))
                return False
        self._start_events()
        self._ready = True
        self._init_backoff = 0.0
        self._report_ok("")
        log.info("nvml: %d GPU(s), driver %s", count, self._driver or "unknown")
        return True

    def _init_failed(self, now: float, code: int, message: str) -> None:
        self._schedule_init(now)
        reason = error_reason(code) if code in _LIBRARY_GONE or code in _REASONS else "init_failed"
        hint = ""
        if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            hint = " (is the NVIDIA driver installed and libnvidia-ml.so.1 visible to the agent?)"
        self._report(
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
        self._stop_events()
        for gpu in self._gpus:
            for dev in [gpu, *gpu.migs]:
                self._free_gpm(dev)
        self._gpus = []
        self._ready = False
        self._safe_shutdown()

    # ------------------------------------------------------------------ opening devices

    def _raw(self, function: str, *args: Any) -> Any:
        """Call NVML where failure means the device cannot be used (opening it)."""
        fn = getattr(self.nvml, function)
        try:
            return fn(*args)
        except pynvml.NVMLError as err:
            if err.value in _LIBRARY_GONE:
                raise _LibraryGone(err.value, f"{function}: {err}") from err
            raise _Lost(err.value, f"{function}: {err}") from err

    def _optional(self, function: str, *args: Any, default: Any = None) -> Any:
        """Call NVML for something nice to have (a label); ``default`` when it fails."""
        fn = getattr(self.nvml, function, None)
        if fn is None:
            return default
        try:
            return fn(*args)
        except pynvml.NVMLError as err:
            if err.value in _LIBRARY_GONE:
                raise _LibraryGone(err.value, f"{function}: {err}") from err
            if err.value in _GPU_GONE:
                raise _Lost(err.value, f"{function}: {err}") from err
            return default

    def _open(self, gpu: _Device) -> None:
        """Get the handle and everything static about a GPU; raises _Lost when it cannot."""
        self._free_gpm(gpu)
        for mig in gpu.migs:
            self._free_gpm(mig)
        gpu.migs = []
        gpu.handle = self._raw("nvmlDeviceGetHandleByIndex", gpu.index)
        gpu.uuid = _text(self._raw("nvmlDeviceGetUUID", gpu.handle))
        gpu.name = _text(self._optional("nvmlDeviceGetName", gpu.handle, default=""))
        pci = self._optional("nvmlDeviceGetPciInfo", gpu.handle)
        gpu.pci_bus_id = _text(getattr(pci, "busId", "")) if pci is not None else ""
        gpu.unsupported.clear()
        gpu.failing.clear()
        gpu.slow_due = 0.0
        gpu.activity_due = 0.0
        gpu.gpm_values = {}
        gpu.pcie = {}
        gpu.shares = None
        gpu.proc_ts = 0
        gpu.gpm = self._gpm_supported(gpu.handle)
        if gpu.gpm:
            self._alloc_gpm(gpu)

    def _gpm_supported(self, handle: Any) -> bool:
        if self._gpm_request_cls is None:
            return False
        support = self._optional("nvmlGpmQueryDeviceSupport", handle)
        return bool(getattr(support, "isSupportedDevice", 0))

    def _alloc_gpm(self, dev: _Device) -> None:
        try:
            dev.gpm_samples = [self.nvml.nvmlGpmSampleAlloc() for _ in range(2)]
        except pynvml.NVMLError as err:
            self._report_once("not_supported", f"{dev.key}: GPM sample allocation failed: {err}")
            dev.gpm = False
            return
        request = self._gpm_request_cls()  # type: ignore[misc]
        request.version = getattr(pynvml, "NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(GPM_METRICS)
        for n, (_, metric_id) in enumerate(GPM_METRICS):
            request.metrics[n].metricId = metric_id
        dev.gpm_request = request
        dev.gpm_prev = None
        dev.gpm_next = 0

    def _free_gpm(self, dev: _Device) -> None:
        for sample in dev.gpm_samples:
            with contextlib.suppress(pynvml.NVMLError):
                self.nvml.nvmlGpmSampleFree(sample)
        dev.gpm_samples = []
        dev.gpm_prev = None
        dev.gpm_request = None

    def _mark_lost(self, gpu: _Device, now: float, lost: _Lost) -> None:
        first = not gpu.lost
        gpu.lost = True
        gpu.gpm_prev = None
        gpu.backoff = self.gpu_retry if first else min(gpu.backoff * 2, MAX_GPU_RETRY)
        gpu.retry_at = now + gpu.backoff
        reason = "gpu_lost" if lost.code in _GPU_GONE else error_reason(lost.code)
        self._report(reason, f"GPU unusable ({lost}); retrying with backoff", gpu.key)

    # ------------------------------------------------------------------ calls with memory

    def _call(self, dev: _Device, key: str, function: str, *args: Any) -> Any:
        """One reading; _SKIP when it is unsupported or failed (the reason is recorded)."""
        if key in dev.unsupported:
            return _SKIP
        fn = getattr(self.nvml, function, None)
        if fn is None:
            self._unsupported(dev, key, f"this pynvml has no {function}")
            return _SKIP
        try:
            result = fn(*args)
        except pynvml.NVMLError as err:
            return self._failed(dev, key, err)
        if dev.failing and key in dev.failing:
            dev.failing.discard(key)
            self._report_ok(f"{dev.key}:{key}")
        return result

    def _failed(self, dev: _Device, key: str, err: pynvml.NVMLError) -> Any:
        code = err.value
        if code in _NOT_SUPPORTED:
            self._unsupported(dev, key, str(err))
            return _SKIP
        if code in _GPU_GONE:
            raise _Lost(code, f"{key}: {err}")
        if code in _LIBRARY_GONE:
            raise _LibraryGone(code, f"{key}: {err}")
        dev.failing.add(key)
        self._report(
            error_reason(code),
            f"NVML error {code} ({err}); this reading is absent until it succeeds",
            f"{dev.key}:{key}",
        )
        return _SKIP

    def _unsupported(self, dev: _Device, key: str, why: str) -> None:
        dev.unsupported.add(key)
        self._report_once(
            "not_supported", f"{dev.key}: {key} not supported ({why}); its series stay absent"
        )

    # ------------------------------------------------------------------ reading

    def _read_gpu(self, gpu: _Device, now: float, seen: set[int]) -> list[DeviceReading]:
        if gpu.lost:
            if now < gpu.retry_at:
                return [self._down(gpu)]
            try:
                self._open(gpu)
            except _Lost as lost:
                self._mark_lost(gpu, now, lost)
                return [self._down(gpu)]
            gpu.lost = False
            gpu.backoff = 0.0
            self._report_ok(gpu.key)
            if _handle_key(gpu.handle) not in self._event_devices:
                self._register_events(gpu)
        try:
            if now >= gpu.slow_due:
                self._read_slow(gpu)
                gpu.slow_due = now + self.slow_interval
            activity = now >= gpu.activity_due
            if activity:
                gpu.activity_due = now + self.activity_interval
            readings = [self._read_whole(gpu, seen, activity)]
            readings.extend(self._read_mig(mig, seen, activity) for mig in gpu.migs)
        except _Lost as lost:
            self._mark_lost(gpu, now, lost)
            return [self._down(gpu)]
        return readings

    def _down(self, gpu: _Device) -> DeviceReading:
        return DeviceReading(
            gpu=str(gpu.index),
            uuid=gpu.uuid,
            name=gpu.name,
            pci_bus_id=gpu.pci_bus_id,
            driver_version=self._driver,
            mig_mode=gpu.mig_mode,
            up=False,
        )

    def _read_slow(self, gpu: _Device) -> None:
        h = gpu.handle
        gauges: dict[str, float] = {}
        counters: dict[str, float] = {}
        limit = self._call(gpu, "power_limit", "nvmlDeviceGetEnforcedPowerLimit", h)
        if limit is not _SKIP:
            gauges["inferwatch_gpu_power_limit_watts"] = limit / 1000.0
        energy = self._call(gpu, "energy", "nvmlDeviceGetTotalEnergyConsumption", h)
        if energy is not _SKIP:
            counters["inferwatch_gpu_energy_joules_total"] = energy / 1000.0
        ecc: dict[str, float] = {}
        for label, error_type in (
            ("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            count = self._call(
                gpu,
                f"ecc_{label}",
                "nvmlDeviceGetTotalEccErrors",
                h,
                error_type,
                pynvml.NVML_VOLATILE_ECC,
            )
            if count is not _SKIP:
                ecc[label] = float(count)
        gpu.slow_gauges, gpu.slow_counters, gpu.ecc = gauges, counters, ecc
        self._discover_mig(gpu)

    def _discover_mig(self, gpu: _Device) -> None:
        mode = self._call(gpu, "mig_mode", "nvmlDeviceGetMigMode", gpu.handle)
        if mode is _SKIP:
            gpu.mig_mode = "unsupported" if "mig_mode" in gpu.unsupported else "unknown"
            return
        enabled = bool(mode[0])
        new_mode = "enabled" if enabled else "disabled"
        if gpu.mig_mode in ("enabled", "disabled") and new_mode != gpu.mig_mode:
            # What the whole GPU answers changes with MIG mode: probe everything again.
            gpu.unsupported.clear()
        gpu.mig_mode = new_mode
        if not enabled:
            for mig in gpu.migs:
                self._free_gpm(mig)
            gpu.migs = []
            return
        count = self._call(gpu, "mig_count", "nvmlDeviceGetMaxMigDeviceCount", gpu.handle)
        if count is _SKIP:
            return
        old = {m.uuid: m for m in gpu.migs}
        found: list[_Device] = []
        for slot in range(int(count)):
            handle = self._optional("nvmlDeviceGetMigDeviceHandleByIndex", gpu.handle, slot)
            if handle is None:
                continue  # an empty slot answers NOT_FOUND
            uuid = _text(self._optional("nvmlDeviceGetUUID", handle, default=""))
            if not uuid:
                continue
            known = old.pop(uuid, None)
            if known is not None:
                mig = known
            else:
                mig = _Device(gpu.index, f"{gpu.key}/mig{slot}")
                mig.parent = gpu
                mig.uuid = uuid
                mig.name = _text(self._optional("nvmlDeviceGetName", handle, default=""))
                mig.profile = mig_profile(mig.name)
                instance = self._optional("nvmlDeviceGetGpuInstanceId", handle)
                mig.gpu_instance = int(instance) if instance is not None else None
                mig.pci_bus_id = gpu.pci_bus_id
                mig.mig_mode = "enabled"
                mig.gpm = gpu.gpm and mig.gpu_instance is not None
                if mig.gpm:
                    self._alloc_gpm(mig)
            mig.handle = handle
            found.append(mig)
        for gone in old.values():
            self._free_gpm(gone)
        gpu.migs = found

    def _memory(self, dev: _Device, gauges: dict[str, float]) -> None:
        h = dev.handle
        mem = _SKIP
        v2 = getattr(pynvml, "nvmlMemory_v2", None)
        if v2 is not None:
            mem = self._call(dev, "memory_v2", "nvmlDeviceGetMemoryInfo", h, v2)
        if mem is not _SKIP:
            used, reserved, total = int(mem.used), int(mem.reserved), int(mem.total)
            gauges["inferwatch_gpu_memory_reserved_bytes"] = float(reserved)
        elif v2 is None or "memory_v2" in dev.unsupported:
            mem = self._call(dev, "memory_v1", "nvmlDeviceGetMemoryInfo", h)
            if mem is _SKIP:
                return
            # Version 1 counts the driver's reservation as used.
            used, reserved, total = int(mem.used), 0, int(mem.total)
        else:
            return
        gauges["inferwatch_gpu_memory_used_bytes"] = float(used)
        gauges["inferwatch_gpu_memory_total_bytes"] = float(total)
        if total > 0:
            gauges["inferwatch_gpu_memory_used_ratio"] = (used + reserved) / total

    def _read_whole(self, gpu: _Device, seen: set[int], activity: bool) -> DeviceReading:
        h = gpu.handle
        gauges: dict[str, float] = dict(gpu.slow_gauges)
        self._memory(gpu, gauges)
        util = self._call(gpu, "utilization", "nvmlDeviceGetUtilizationRates", h)
        if util is not _SKIP:
            gauges["inferwatch_gpu_utilization_ratio"] = util.gpu / 100.0
            gauges["inferwatch_gpu_memory_busy_ratio"] = util.memory / 100.0
        power = self._call(gpu, "power", "nvmlDeviceGetPowerUsage", h)
        if power is not _SKIP:
            gauges["inferwatch_gpu_power_watts"] = power / 1000.0
        temp = self._call(
            gpu, "temperature", "nvmlDeviceGetTemperature", h, pynvml.NVML_TEMPERATURE_GPU
        )
        if temp is not _SKIP:
            gauges["inferwatch_gpu_temperature_celsius"] = float(temp)
        sm = self._call(gpu, "sm_clock", "nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM)
        if sm is not _SKIP:
            gauges["inferwatch_gpu_sm_clock_hertz"] = sm * 1e6
        mem = self._call(gpu, "mem_clock", "nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_MEM)
        if mem is not _SKIP:
            gauges["inferwatch_gpu_memory_clock_hertz"] = mem * 1e6
        pstate = self._call(gpu, "pstate", "nvmlDeviceGetPerformanceState", h)
        if pstate is not _SKIP and 0 <= int(pstate) < _PSTATE_UNKNOWN:
            gauges["inferwatch_gpu_performance_state"] = float(pstate)
        fan = self._call(gpu, "fan", "nvmlDeviceGetFanSpeed", h)
        if fan is not _SKIP:
            gauges["inferwatch_gpu_fan_speed_ratio"] = fan / 100.0
        if activity:
            # Each call samples a byte counter for 20 ms: read with the activity readings.
            gpu.pcie = self._pcie(gpu)
        clock_events = self._clock_events(gpu)
        if gpu.gpm:
            if activity:
                gpu.gpm_values = self._gpm(gpu, "nvmlGpmSampleGet", h)
            gauges.update(gpu.gpm_values)
        processes: tuple[ProcessReading, ...] = ()
        if gpu.mig_mode != "enabled":
            # In MIG mode each process is listed under its MIG device instead.
            processes = self._processes(gpu, seen, shares=activity)
        return DeviceReading(
            gpu=str(gpu.index),
            uuid=gpu.uuid,
            name=gpu.name,
            pci_bus_id=gpu.pci_bus_id,
            driver_version=self._driver,
            mig_mode=gpu.mig_mode,
            up=True,
            gauges=gauges,
            counters=dict(gpu.slow_counters),
            clock_events=clock_events,
            ecc=dict(gpu.ecc),
            processes=processes,
            pcie=dict(gpu.pcie),
        )

    def _read_mig(self, mig: _Device, seen: set[int], activity: bool) -> DeviceReading:
        gauges: dict[str, float] = {}
        self._memory(mig, gauges)
        parent = mig.parent
        if mig.gpm and parent is not None:
            if activity:
                mig.gpm_values = self._gpm(
                    mig, "nvmlGpmMigSampleGet", parent.handle, mig.gpu_instance
                )
            gauges.update(mig.gpm_values)
        return DeviceReading(
            gpu=str(mig.index),
            uuid=mig.uuid,
            name=mig.name,
            pci_bus_id=mig.pci_bus_id,
            driver_version=self._driver,
            mig_mode="enabled",
            up=True,
            gpu_instance=str(mig.gpu_instance) if mig.gpu_instance is not None else "unknown",
            mig_profile=mig.profile,
            gauges=gauges,
            processes=self._processes(mig, seen, shares=None),
        )

    def _pcie(self, gpu: _Device) -> dict[str, float]:
        out: dict[str, float] = {}
        for direction, counter in (
            ("tx", pynvml.NVML_PCIE_UTIL_TX_BYTES),
            ("rx", pynvml.NVML_PCIE_UTIL_RX_BYTES),
        ):
            kb = self._call(
                gpu, f"pcie_{direction}", "nvmlDeviceGetPcieThroughput", gpu.handle, counter
            )
            if kb is not _SKIP:
                out[direction] = kb * _PCIE_KB
        return out

    def _clock_events(self, gpu: _Device) -> dict[str, float]:
        mask = self._call(gpu, "clock_events", "nvmlDeviceGetCurrentClocksEventReasons", gpu.handle)
        if mask is _SKIP and "clock_events" in gpu.unsupported:
            # Drivers before the rename only have the throttle-reasons name.
            mask = self._call(
                gpu, "throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", gpu.handle
            )
        if mask is _SKIP:
            return {}
        mask = int(mask)
        return {reason: float(bool(mask & bit)) for reason, bit in CLOCK_EVENT_REASONS}

    def _gpm(self, dev: _Device, function: str, *args: Any) -> dict[str, float]:
        current = dev.gpm_samples[dev.gpm_next]
        got = self._call(dev, "gpm_sample", function, *args, current)
        if got is _SKIP:
            dev.gpm_prev = None
            return {}
        out: dict[str, float] = {}
        previous = dev.gpm_prev
        if previous is not None:
            request = dev.gpm_request
            request.sample1 = previous
            request.sample2 = current
            result = self._call(dev, "gpm_metrics", "nvmlGpmMetricsGet", request)
            if result is not _SKIP:
                for n, (family, _) in enumerate(GPM_METRICS):
                    metric = request.metrics[n]
                    if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                        out[family] = _ratio(metric.value)
        dev.gpm_prev = current
        dev.gpm_next ^= 1
        return out

    def _processes(
        self, dev: _Device, seen: set[int], *, shares: bool | None
    ) -> tuple[ProcessReading, ...]:
        """Per-process memory; SM shares read when ``shares`` (None: never, as on MIG)."""
        procs = self._call(dev, "processes", "nvmlDeviceGetComputeRunningProcesses", dev.handle)
        if procs is _SKIP or not procs:
            return ()
        memory: dict[int, int | None] = {}
        for proc in procs:
            pid = int(proc.pid)
            used = proc.usedGpuMemory
            if used is None:
                memory.setdefault(pid, None)
            else:
                memory[pid] = (memory.get(pid) or 0) + int(used)
        if shares:
            read = self._process_shares(dev)
            # A listed process without a sample ran no kernel in the window.
            dev.shares = None if read is None else {pid: read.get(pid, 0.0) for pid in memory}
        known = dev.shares if shares is not None else None
        out = []
        for pid, used in memory.items():
            seen.add(pid)
            share = None if known is None else known.get(pid)
            out.append(ProcessReading(pid, self._process_name(pid), used, share))
        return tuple(out)

    def _process_shares(self, dev: _Device) -> dict[int, float] | None:
        """Per-pid SM share since the previous pass; None when NVML cannot say."""
        key = "process_utilization"
        if key in dev.unsupported:
            return None
        fn = getattr(self.nvml, "nvmlDeviceGetProcessUtilization", None)
        if fn is None:
            self._unsupported(dev, key, "this pynvml has no nvmlDeviceGetProcessUtilization")
            return None
        try:
            samples = fn(dev.handle, dev.proc_ts)
        except pynvml.NVMLError as err:
            if err.value in (pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_SUCCESS):
                # No sample newer than the last one (pynvml raises on an empty success too).
                return {}
            self._failed(dev, key, err)
            return None
        sums: dict[int, list[float]] = {}
        newest = dev.proc_ts
        for sample in samples:
            acc = sums.setdefault(int(sample.pid), [0.0, 0.0])
            acc[0] += sample.smUtil
            acc[1] += 1
            newest = max(newest, int(sample.timeStamp))
        dev.proc_ts = newest
        if key in dev.failing:
            dev.failing.discard(key)
            self._report_ok(f"{dev.key}:{key}")
        return {pid: _ratio(total / n) for pid, (total, n) in sums.items()}

    def _process_name(self, pid: int) -> str:
        name = self._names.get(pid)
        if name is None:
            try:
                name = psutil.Process(pid).name()
            except (psutil.Error, OSError):
                # Another PID namespace (a container without hostPID) or already gone.
                name = "unknown"
            self._names[pid] = name
        return name

    # ------------------------------------------------------------------ XID events

    def _start_events(self) -> None:
        try:
            self._event_set = self.nvml.nvmlEventSetCreate()
        except (pynvml.NVMLError, AttributeError) as err:
            self._report_once("not_supported", f"NVML events unavailable ({err}): no XID counts")
            self._event_set = None
            return
        self._event_devices = {}
        for gpu in self._gpus:
            if not gpu.lost:
                self._register_events(gpu)
        self._event_stop = threading.Event()
        self._event_thread = threading.Thread(
            target=self._event_loop,
            args=(self._event_set, self._event_stop),
            name="inferwatch-nvml-xid",
            daemon=True,
        )
        self._event_thread.start()

    def _register_events(self, gpu: _Device) -> None:
        if self._event_set is None:
            return
        xid_bit = pynvml.nvmlEventTypeXidCriticalError
        try:
            supported = int(self.nvml.nvmlDeviceGetSupportedEventTypes(gpu.handle))
            if supported & xid_bit:
                self.nvml.nvmlDeviceRegisterEvents(gpu.handle, xid_bit, self._event_set)
            else:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        except (pynvml.NVMLError, AttributeError) as err:
            self._report_once(
                "not_supported", f"{gpu.key}: XID events not available ({err}); no XID counts"
            )
            return
        # A new dict, swapped in whole: the event thread reads it without a lock.
        devices = dict(self._event_devices)
        devices[_handle_key(gpu.handle)] = gpu.index
        self._event_devices = devices
        with self._xid_lock:
            self._xid.setdefault(gpu.index, {})
            self._xid_last.setdefault(gpu.index, {})

    def _event_loop(self, event_set: Any, stop: threading.Event) -> None:
        wait = getattr(self.nvml, "nvmlEventSetWait_v2", None) or self.nvml.nvmlEventSetWait
        xid_bit = pynvml.nvmlEventTypeXidCriticalError
        failures = 0
        while not stop.is_set():
            try:
                data = wait(event_set, _EVENT_WAIT_MS)
            except pynvml.NVMLError as err:
                if err.value == pynvml.NVML_ERROR_TIMEOUT:
                    continue
                if stop.is_set():
                    break
                failures += 1
                self._report("xid_events", f"waiting for NVML events failed: {err}", "xid")
                stop.wait(min(2.0**failures, MAX_GPU_RETRY))
                continue
            if failures:
                failures = 0
                self._report_ok("xid")
            if not int(data.eventType) & xid_bit:
                continue
            index = self._event_devices.get(_handle_key(data.device))
            if index is not None:
                self._count_xid(index, int(data.eventData))

    def _count_xid(self, index: int, xid: int) -> None:
        # NVML's event data carries no time: the time it is read is a few ms after it.
        now = time.time()
        with self._xid_lock:
            counts = self._xid.setdefault(index, {})
            code = str(xid)
            if code not in counts and len(counts) >= MAX_XID_CODES:
                code = "other"
            counts[code] = counts.get(code, 0) + 1
            self._xid_last.setdefault(index, {})[code] = now

    def _xid_rows(self) -> tuple[tuple[str, str, str, int, float], ...]:
        uuids = {gpu.index: gpu.uuid for gpu in self._gpus}
        with self._xid_lock:
            return tuple(
                (str(index), uuids.get(index, ""), code, count, self._xid_last[index][code])
                for index, counts in sorted(self._xid.items())
                for code, count in sorted(counts.items())
            )

    def _stop_events(self) -> None:
        self._event_stop.set()
        thread = self._event_thread
        if thread is not None:
            thread.join(timeout=2 * _EVENT_WAIT_MS / 1000 + 1)
        self._event_thread = None
        if self._event_set is not None:
            with contextlib.suppress(pynvml.NVMLError):
                self.nvml.nvmlEventSetFree(self._event_set)
        self._event_set = None
        self._event_devices = {}


# ---------------------------------------------------------------------- families


def build_families(
    snap: NvmlSnapshot,
    workers: Mapping[int, str],
    worker_gpus: Iterable[tuple[str, DeviceLike]] = (),
    worker_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Metric]:
    """Metric families for a snapshot; ``workers`` maps a PID to its worker's name,
    ``worker_gpus`` lists (worker, device) pairs of attribution."""
    gauges: dict[str, Metric] = {}
    counters: dict[str, Metric] = {}

    def gauge(name: str, help_text: str) -> Metric:
        fam = gauges.get(name)
        if fam is None:
            fam = gauges[name] = GaugeMetricFamily(name, help_text)
        return fam

    def counter(name: str, help_text: str) -> Metric:
        fam = counters.get(name)
        if fam is None:
            # prometheus_client names a counter family without the _total suffix.
            fam = counters[name] = CounterMetricFamily(name.removesuffix("_total"), help_text)
        return fam

    for dev in snap.devices:
        base = dev.labels()
        info = {
            **base,
            "name": dev.name,
            "pci_bus_id": dev.pci_bus_id,
            "driver_version": dev.driver_version,
            "mig_mode": dev.mig_mode,
        }
        gauge("inferwatch_gpu_info", INFO_HELP).samples.append(
            Sample("inferwatch_gpu_info", info, 1.0)
        )
        gauge("inferwatch_gpu_up", UP_HELP).samples.append(
            Sample("inferwatch_gpu_up", base, 1.0 if dev.up else 0.0)
        )
        for name, value in dev.gauges.items():
            gauge(name, GAUGE_HELP[name]).samples.append(Sample(name, base, value))
        for name, value in dev.counters.items():
            counter(name, COUNTER_HELP[name]).samples.append(Sample(name, base, value))
        if dev.clock_events:
            fam = gauge("inferwatch_gpu_clock_event_active", CLOCK_EVENT_HELP)
            for reason, value in dev.clock_events.items():
                fam.samples.append(
                    Sample("inferwatch_gpu_clock_event_active", {**base, "reason": reason}, value)
                )
        if dev.ecc:
            fam = counter("inferwatch_gpu_ecc_errors_total", ECC_HELP)
            for kind, value in dev.ecc.items():
                fam.samples.append(
                    Sample("inferwatch_gpu_ecc_errors_total", {**base, "type": kind}, value)
                )
        for direction, value in dev.pcie.items():
            name = "inferwatch_gpu_pcie_throughput_bytes_per_second"
            gauge(name, PCIE_HELP).samples.append(
                Sample(name, {**base, "direction": direction}, value)
            )
        for proc in dev.processes:
            labels = {**base, "pid": str(proc.pid), "process": proc.name}
            worker = workers.get(proc.pid)
            if worker is not None:
                labels["worker"] = worker
            if proc.used_bytes is not None:
                name = "inferwatch_gpu_process_memory_used_bytes"
                gauge(name, PROCESS_MEMORY_HELP).samples.append(
                    Sample(name, labels, float(proc.used_bytes))
                )
            if proc.sm_ratio is not None:
                name = "inferwatch_gpu_process_sm_utilization_ratio"
                gauge(name, PROCESS_SM_HELP).samples.append(Sample(name, labels, proc.sm_ratio))
    for gpu, uuid, xid, count, last in snap.xid:
        labels = {"gpu": gpu, "uuid": uuid, "xid": xid}
        counter("inferwatch_gpu_xid_errors_total", XID_HELP).samples.append(
            Sample("inferwatch_gpu_xid_errors_total", labels, float(count))
        )
        gauge("inferwatch_gpu_xid_last_timestamp_seconds", XID_LAST_HELP).samples.append(
            Sample("inferwatch_gpu_xid_last_timestamp_seconds", labels, last)
        )
    for worker, device in worker_gpus:
        gauge("inferwatch_worker_gpu_info", WORKER_GPU_HELP).samples.append(
            Sample(
                "inferwatch_worker_gpu_info",
                {**(worker_labels or {}).get(worker, {}), **device.labels(), "worker": worker},
                1.0,
            )
        )
    return [*gauges.values(), *counters.values()]
