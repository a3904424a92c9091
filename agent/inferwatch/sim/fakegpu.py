"""A fake NVML library: N simulated GPUs behind the same function names as ``pynvml``.

:class:`FakeNvml` stands in for the ``pynvml`` module wherever the agent would
use it (``--gpu-backend fake``, the demo, the tests). Functions take and return
what ``pynvml``'s do, closely enough for the NVML source to run one code path on
both; failures are raised as the real ``pynvml.NVMLError`` subclasses, so the
collector's error handling is exercised exactly as on a real GPU.

GPU ``i`` reports a :class:`~inferwatch.sim.gpustate.SimGpuState`: the one set
with :meth:`FakeNvml.set_state`, else the merge of the fragments simulated
workers write (``gpustate.write_state(state_dir, i, ..., tag)``, see
:func:`~inferwatch.sim.gpustate.merge`), else an idle GPU. Fragments that name a
MIG slice put the GPU in MIG mode with one MIG device per GPU instance, as
:meth:`add_mig` does in code (code-added MIG devices win). On top of that,
tests inject faults: :meth:`fail` (one function raises a given NVML error),
:meth:`lose` (GPU_IS_LOST on every call until :meth:`restore`), :meth:`slow` and
:meth:`hold` (a call that takes long, or until the test releases it),
:meth:`remove_library` (``nvmlInit`` finds no library), :meth:`push_xid` and
MIG instances (:meth:`add_mig`).

Names ``pynvml`` defines that are not functions (constants, ``NVMLError``
classes, ctypes structures) are looked up in ``pynvml`` itself, so code written
against the module sees the same values here. A ``pynvml`` *function* the fake
does not implement raises AttributeError, as it would in an older ``pynvml``.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import inspect
import os
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import psutil
import pynvml

from inferwatch.sim.gpustate import (
    SimGpuState,
    fragment_paths,
    merge,
    mig_devices,
    read_fragment,
    state_path,
)

#: What nvmlDeviceGetMigDeviceHandleByIndex can return at most per GPU (an A100/H100 has 7).
MAX_MIG_DEVICES = 7
#: The GPM metrics the fake knows, by metric id, as the SimGpuState field they report.
GPM_FIELDS = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_active",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active",
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_active",
}
_NO_INSTANCE = 0xFFFFFFFF
#: A simulator rewrites its fragments ten times a second; one silent this long whose
#: processes are all gone was left by a killed simulator, and the GPU no longer holds it.
ABANDONED_AFTER_SECONDS = 3.0


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False  # exists, but not ours to inspect


def abandoned(state: SimGpuState, now: float) -> bool:
    """Whether a fragment is a dead simulator's: silent for a while, and its processes gone.

    The driver frees a process's memory when it exits; a simulator killed with
    SIGKILL cannot withdraw its fragment, so the backend drops it instead. A
    silent fragment whose processes live (a stopped simulator) still holds its
    memory, as a hung engine does. Processes this host cannot see (the
    simulator in another PID namespace) count as gone, but only once the
    fragment is silent, which a running simulator never is.
    """
    if now - state.updated <= ABANDONED_AFTER_SECONDS:
        return False
    return all(_gone(p.pid) for p in state.processes)


def default_uuid(index: int) -> str:
    """The stable UUID of fake GPU ``index`` when its state names none."""
    return f"GPU-fake-{index}-0000-4000-8000-{index:012x}"


def default_mig_uuid(index: int, gpu_instance: int) -> str:
    """The UUID of a fake MIG device when its state names none."""
    return f"MIG-fake-{index}-{gpu_instance}-4000-8000-{index:06x}{gpu_instance:06x}"


def default_pci_bus_id(index: int) -> str:
    return f"00000000:{0x10 + index:02X}:00.0"


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass(frozen=True)
class FakeHandle:
    """A device handle: a whole GPU (``mig`` None) or one of its MIG devices."""

    index: int
    mig: int | None = None


@dataclass
class _Mig:
    gpu_instance: int
    profile: str
    state: SimGpuState


@dataclass
class _Gpu:
    index: int
    state: SimGpuState | None = None  # set in code; wins over the state file
    file_state: SimGpuState | None = None
    file_stamp: tuple[tuple[str, int, int], ...] | None = None
    #: the last good parse of each fragment file, by name
    fragments: dict[str, tuple[tuple[int, int], SimGpuState]] = field(default_factory=dict)
    file_migs: list[_Mig] = field(default_factory=list)
    #: unix time at which the fragments must be read again though none changed
    recheck_at: float = 0.0
    lost: bool = False
    faults: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    delays: dict[str, float] = field(default_factory=dict)
    holds: dict[str, threading.Event] = field(default_factory=dict)
    migs: list[_Mig] = field(default_factory=list)
    clock_events: int | None = None
    ecc: tuple[int, int] = (0, 0)
    energy_mj: float = 0.0
    energy_at: float | None = None


class _EventSet:
    """Pending XID events as runs of (gpu, xid, count): a storm costs one entry, not one each."""

    def __init__(self) -> None:
        self.gpus: set[int] = set()
        self.pending: collections.deque[list[int]] = collections.deque()
        self.cond = threading.Condition()
        self.freed = False


class FakeNvml:
    """``count`` simulated GPUs that answer NVML calls; see the module docstring."""

    def __init__(
        self,
        count: int = 1,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        library: bool = True,
    ) -> None:
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        self.state_dir = state_dir
        #: Calls per function name, for tests that check what the collector asked and how often.
        self.calls: collections.Counter[str] = collections.Counter()
        self._lock = threading.RLock()
        self._gpus = [_Gpu(i) for i in range(count)]
        self._handles: dict[tuple[int, int | None], FakeHandle] = {}
        self._library = library
        self._init_count = 0
        self._event_sets: list[_EventSet] = []
        self._gpm_samples: dict[int, tuple[Any, dict[str, float | None] | None]] = {}
        self.driver_version = "fake"

    # ------------------------------------------------------------------ test controls

    def set_state(self, index: int, state: SimGpuState) -> None:
        """Report ``state`` for GPU ``index`` from now on (takes precedence over its file)."""
        with self._lock:
            self._gpus[index].state = state

    def state(self, index: int) -> SimGpuState:
        """The state GPU ``index`` reports now (code, else file, else idle defaults)."""
        return self._state(self._gpus[index])

    def fail(self, index: int, function: str, code: int, *, times: int | None = None) -> None:
        """Make ``function`` raise ``NVMLError(code)`` for GPU ``index``, ``times`` calls or always.

        ``function`` is a pynvml name; ``"nvmlDeviceGetMemoryInfo_v2"`` names the
        version-2 form of ``nvmlDeviceGetMemoryInfo`` alone.
        """
        with self._lock:
            self._gpus[index].faults[function] = (code, times)

    def lose(self, index: int) -> None:
        """GPU ``index`` falls off the bus: every call about it raises GPU_IS_LOST."""
        with self._lock:
            self._gpus[index].lost = True

    def restore(self, index: int) -> None:
        with self._lock:
            self._gpus[index].lost = False

    def slow(self, index: int, function: str, seconds: float) -> None:
        """Make ``function`` take ``seconds`` for GPU ``index`` (0 removes the delay)."""
        with self._lock:
            if seconds > 0:
                self._gpus[index].delays[function] = seconds
            else:
                self._gpus[index].delays.pop(function, None)

    def hold(self, index: int, function: str) -> threading.Event:
        """Make ``function`` block for GPU ``index`` until the returned event is set.

        A deterministic slow call: the test decides when it ends.
        """
        release = threading.Event()
        with self._lock:
            self._gpus[index].holds[function] = release
        return release

    def remove_library(self) -> None:
        """From now on ``nvmlInit`` fails as if libnvidia-ml.so.1 were not installed."""
        with self._lock:
            self._library = False
            self._init_count = 0

    def restore_library(self) -> None:
        with self._lock:
            self._library = True

    def set_clock_events(self, index: int, mask: int | None) -> None:
        """Report this clock-event bit mask (None: idle when utilization is 0, else none)."""
        with self._lock:
            self._gpus[index].clock_events = mask

    def set_ecc(self, index: int, corrected: int, uncorrected: int) -> None:
        """Set the volatile ECC error counts of GPU ``index``."""
        with self._lock:
            self._gpus[index].ecc = (corrected, uncorrected)

    def add_mig(self, index: int, gpu_instance: int, profile: str, state: SimGpuState) -> None:
        """Add a MIG device (GPU instance ``gpu_instance``, profile like ``1g.18gb``) to a GPU.

        The instance reports memory, processes and GPM from ``state``; a GPU with
        MIG devices reports MIG mode enabled.
        """
        with self._lock:
            gpu = self._gpus[index]
            if len(gpu.migs) >= MAX_MIG_DEVICES:
                raise ValueError(f"GPU {index} already has {MAX_MIG_DEVICES} MIG devices")
            if not state.uuid:
                state = dataclasses.replace(state, uuid=default_mig_uuid(index, gpu_instance))
            gpu.migs.append(_Mig(gpu_instance, profile, state))

    def push_xid(self, index: int, xid: int, count: int = 1) -> None:
        """Deliver ``count`` XID events for GPU ``index`` to every event set registered for it."""
        with self._lock:
            sets = [s for s in self._event_sets if index in s.gpus and not s.freed]
        for es in sets:
            with es.cond:
                last = es.pending[-1] if es.pending else None
                if last is not None and last[0] == index and last[1] == xid:
                    last[2] += count
                else:
                    es.pending.append([index, xid, count])
                es.cond.notify_all()

    def pending_events(self) -> int:
        """Events pushed but not yet read by any event set."""
        total = 0
        for es in list(self._event_sets):
            with es.cond:
                total += sum(run[2] for run in es.pending)
        return total

    # ------------------------------------------------------------------ plumbing

    def __getattr__(self, name: str) -> Any:
        value = getattr(pynvml, name)
        if inspect.isfunction(value) and name.startswith("nvml"):
            # A real function we do not fake: behave like a pynvml that lacks it.
            raise AttributeError(f"FakeNvml does not implement {name}")
        return value

    def _state(self, gpu: _Gpu) -> SimGpuState:
        if gpu.state is not None:
            state = gpu.state
        elif self.state_dir is not None:
            state = self._file_state(gpu) or SimGpuState()
        else:
            state = SimGpuState()
        return state

    def _file_state(self, gpu: _Gpu) -> SimGpuState | None:
        # Re-merge only when a fragment came, went or was replaced, or one may have
        # been abandoned: the agent asks ~10 times per GPU per pass.
        assert self.state_dir is not None
        stamps: list[tuple[str, int, int]] = []
        for path in fragment_paths(self.state_dir, gpu.index):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            stamps.append((path.name, st.st_mtime_ns, st.st_ino))
        stamp = tuple(stamps)
        now = time.time()
        if stamp == gpu.file_stamp and now < gpu.recheck_at:
            return gpu.file_state
        gpu.file_stamp = stamp
        gpu.recheck_at = float("inf")
        states: list[SimGpuState] = []
        kept: dict[str, tuple[tuple[int, int], SimGpuState]] = {}
        untagged = state_path(self.state_dir, gpu.index).name
        for name, mtime, ino in stamps:
            known = gpu.fragments.get(name)
            if known is not None and known[0] == (mtime, ino):
                kept[name] = known
            else:
                try:
                    kept[name] = ((mtime, ino), read_fragment(os.path.join(self.state_dir, name)))
                except FileNotFoundError:
                    continue
                except (ValueError, TypeError, KeyError):
                    # A writer that is not ours left something unreadable: keep its last
                    # good state, if any.
                    if known is None:
                        continue
                    kept[name] = known
            state = kept[name][1]
            if name != untagged:
                if abandoned(state, now):
                    continue
                # look again when this writer has been silent for too long
                due = state.updated + ABANDONED_AFTER_SECONDS
                gpu.recheck_at = min(gpu.recheck_at, due if due > now else now + 1.0)
            states.append(state)
        gpu.fragments = kept
        if not states:
            gpu.file_state, gpu.file_migs = None, []
            return None
        gpu.file_state = merge(states)
        gpu.file_migs = [
            _Mig(
                m.gpu_instance,
                m.profile,
                m.state
                if m.state.uuid
                else dataclasses.replace(m.state, uuid=default_mig_uuid(gpu.index, m.gpu_instance)),
            )
            for m in mig_devices(states)
        ]
        return gpu.file_state

    def _migs(self, gpu: _Gpu) -> list[_Mig]:
        """The GPU's MIG devices: those added in code, else those its fragments describe."""
        if gpu.migs or gpu.state is not None or self.state_dir is None:
            return gpu.migs
        self._file_state(gpu)
        return gpu.file_migs

    def _enter(
        self, function: str, handle: Any = None, *, fault_key: str | None = None
    ) -> _Gpu | None:
        """Count the call, then raise what the GPU's situation says; returns the GPU, if any."""
        self.calls[function] += 1
        if self._init_count <= 0:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        if handle is None:
            return None
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self._gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self._gpus[handle.index]
        key = fault_key or function
        delay = gpu.delays.get(key)
        if delay:
            time.sleep(delay)
        hold = gpu.holds.get(key)
        if hold is not None:
            hold.wait()
            gpu.holds.pop(key, None)
        if gpu.lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        fault = gpu.faults.get(key)
        if fault is not None:
            code, times = fault
            if times is not None:
                if times <= 1:
                    del gpu.faults[key]
                else:
                    gpu.faults[key] = (code, times - 1)
            raise _error(code)
        return gpu

    def _handle(self, index: int, mig: int | None = None) -> FakeHandle:
        key = (index, mig)
        handle = self._handles.get(key)
        if handle is None:
            handle = self._handles.setdefault(key, FakeHandle(index, mig))
        return handle

    def _target(self, gpu: _Gpu, handle: FakeHandle) -> tuple[SimGpuState, _Mig | None]:
        if handle.mig is None:
            return self._state(gpu), None
        migs = self._migs(gpu)
        if handle.mig >= len(migs):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        mig = migs[handle.mig]
        return mig.state, mig

    def _enter_device(
        self, function: str, handle: FakeHandle, *, fault_key: str | None = None
    ) -> tuple[_Gpu, SimGpuState, _Mig | None]:
        """:meth:`_enter` for a call on a device handle: its GPU, the state the handle
        reads (the whole GPU's or its MIG slice's) and the slice, if any."""
        gpu = self._enter(function, handle, fault_key=fault_key)
        assert gpu is not None
        state, mig = self._target(gpu, handle)
        return gpu, state, mig

    def _whole_gpu(self, function: str, handle: FakeHandle) -> SimGpuState:
        """For calls that a MIG device handle does not answer (as on real hardware)."""
        gpu = self._enter(function, handle)
        assert gpu is not None
        if handle.mig is not None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._state(gpu)

    # ------------------------------------------------------------------ library and system

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if not self._library:
            raise _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self._init_count += 1

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.nvmlInit()

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self._init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return "fake"

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if not 0 <= index < len(self._gpus):
            self._enter("nvmlDeviceGetHandleByIndex")
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        handle = self._handle(index)
        self._enter("nvmlDeviceGetHandleByIndex", handle)
        return handle

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByUUID")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self._gpus:
            if (self._state(gpu).uuid or default_uuid(gpu.index)) == text:
                if gpu.lost:
                    raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
                return self._handle(gpu.index)
            for n, mig in enumerate(self._migs(gpu)):
                if mig.state.uuid == text:
                    return self._handle(gpu.index, n)
        raise _error(pynvml.NVML_ERROR_NOT_FOUND)

    # ------------------------------------------------------------------ static information

    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetIndex", handle)
        return handle.index

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        gpu, state, mig = self._enter_device("nvmlDeviceGetName", handle)
        if mig is not None:
            return f"{self._state(gpu).name} MIG {mig.profile}"
        return state.name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        gpu, state, mig = self._enter_device("nvmlDeviceGetUUID", handle)
        if mig is not None:
            return mig.state.uuid
        return state.uuid or default_uuid(gpu.index)

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> SimpleNamespace:
        gpu = self._enter("nvmlDeviceGetPciInfo", handle)
        assert gpu is not None
        state = self._state(gpu)
        return SimpleNamespace(busId=state.pci_bus_id or default_pci_bus_id(gpu.index))

    def nvmlDeviceGetArchitecture(self, handle: FakeHandle) -> int:
        state = self._whole_gpu("nvmlDeviceGetArchitecture", handle)
        gpm = any(getattr(state, f) is not None for f in GPM_FIELDS.values())
        return int(pynvml.NVML_DEVICE_ARCH_HOPPER if gpm else pynvml.NVML_DEVICE_ARCH_AMPERE)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        state = self._whole_gpu("nvmlDeviceGetEnforcedPowerLimit", handle)
        return round(state.power_limit_watts * 1000)

    # ------------------------------------------------------------------ fast readings

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> Any:
        key = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        _, state, _ = self._enter_device("nvmlDeviceGetMemoryInfo", handle, fault_key=key)
        total, reserved, used = (
            state.memory_total_bytes,
            state.memory_reserved_bytes,
            state.memory_used_bytes,
        )
        if version:
            free = max(total - reserved - used, 0)
            return SimpleNamespace(
                version=version, total=total, reserved=reserved, free=free, used=used
            )
        # Version 1 counts the driver's reservation as used.
        return SimpleNamespace(
            total=total, free=max(total - reserved - used, 0), used=used + reserved
        )

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> SimpleNamespace:
        state = self._whole_gpu("nvmlDeviceGetUtilizationRates", handle)
        if self._migs(self._gpus[handle.index]):
            # A GPU in MIG mode does not report whole-GPU utilization.
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(
            gpu=round(state.utilization_gpu * 100), memory=round(state.utilization_memory * 100)
        )

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        state = self._whole_gpu("nvmlDeviceGetPowerUsage", handle)
        return round(state.power_watts * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        state = self._whole_gpu("nvmlDeviceGetTotalEnergyConsumption", handle)
        gpu = self._gpus[handle.index]
        now = time.monotonic()
        with self._lock:
            if gpu.energy_at is not None:
                gpu.energy_mj += state.power_watts * (now - gpu.energy_at) * 1000
            gpu.energy_at = now
            return int(gpu.energy_mj)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        state = self._whole_gpu("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return round(state.temperature_celsius)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        state = self._whole_gpu("nvmlDeviceGetClockInfo", handle)
        if clock_type == pynvml.NVML_CLOCK_SM:
            return round(state.sm_clock_hz / 1e6)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return round(state.memory_clock_hz / 1e6)
        raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPerformanceState(self, handle: FakeHandle) -> int:
        state = self._whole_gpu("nvmlDeviceGetPerformanceState", handle)
        if state.performance_state is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return state.performance_state

    def nvmlDeviceGetFanSpeed(self, handle: FakeHandle) -> int:
        state = self._whole_gpu("nvmlDeviceGetFanSpeed", handle)
        if state.fan_speed is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round(state.fan_speed * 100)

    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:
        """KB/s (1024 bytes), as NVML's 20 ms byte-counter sample reports it."""
        state = self._whole_gpu("nvmlDeviceGetPcieThroughput", handle)
        rate = (
            state.pcie_tx_bytes_per_second
            if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES
            else state.pcie_rx_bytes_per_second
        )
        if rate is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round(rate / 1024)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        state = self._whole_gpu("nvmlDeviceGetCurrentClocksEventReasons", handle)
        mask = self._gpus[handle.index].clock_events
        if mask is None:
            mask = pynvml.nvmlClocksEventReasonGpuIdle if state.utilization_gpu == 0 else 0
        return mask

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter: int) -> int:
        self._whole_gpu("nvmlDeviceGetTotalEccErrors", handle)
        corrected, uncorrected = self._gpus[handle.index].ecc
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return corrected
        return uncorrected

    # ------------------------------------------------------------------ processes

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[SimpleNamespace]:
        _, state, mig = self._enter_device("nvmlDeviceGetComputeRunningProcesses", handle)
        gi = mig.gpu_instance if mig is not None else _NO_INSTANCE
        return [
            SimpleNamespace(
                pid=p.pid, usedGpuMemory=p.used_bytes, gpuInstanceId=gi, computeInstanceId=gi
            )
            for p in state.processes
        ]

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, last_seen: int) -> list[Any]:
        state = self._whole_gpu("nvmlDeviceGetProcessUtilization", handle)
        now_us = time.time_ns() // 1000
        samples = [
            SimpleNamespace(
                pid=p.pid,
                timeStamp=now_us,
                smUtil=round(p.sm_utilization * 100),
                memUtil=0,
                encUtil=0,
                decUtil=0,
            )
            for p in state.processes
        ]
        if not samples or now_us <= last_seen:
            # NVML's answer when no sample is newer than last_seen.
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    # ------------------------------------------------------------------ MIG

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        self._whole_gpu("nvmlDeviceGetMigMode", handle)
        mode = 1 if self._migs(self._gpus[handle.index]) else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        self._whole_gpu("nvmlDeviceGetMaxMigDeviceCount", handle)
        return MAX_MIG_DEVICES if self._migs(self._gpus[handle.index]) else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeHandle:
        self._whole_gpu("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not 0 <= index < len(self._migs(self._gpus[handle.index])):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return self._handle(handle.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceIsMigDeviceHandle", handle)
        return int(handle.mig is not None)

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeHandle) -> int:
        _, _, mig = self._enter_device("nvmlDeviceGetGpuInstanceId", handle)
        if mig is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.gpu_instance

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: FakeHandle) -> FakeHandle:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
        return self._handle(handle.index)

    # ------------------------------------------------------------------ GPM

    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> SimpleNamespace:
        state = self._whole_gpu("nvmlGpmQueryDeviceSupport", handle)
        supported = any(getattr(state, f) is not None for f in GPM_FIELDS.values())
        return SimpleNamespace(version=1, isSupportedDevice=int(supported))

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        # A real pynvml sample pointer, so that it fits c_nvmlGpmMetricsGet_t.sample1/2.
        buf = ctypes.create_string_buffer(16)
        sample = ctypes.cast(buf, pynvml.c_nvmlGpmSample_t)
        with self._lock:
            self._gpm_samples[_address(sample)] = (buf, None)
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        with self._lock:
            if self._gpm_samples.pop(_address(sample), None) is None:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlGpmSampleGet(self, handle: FakeHandle, sample: Any) -> Any:
        state = self._whole_gpu("nvmlGpmSampleGet", handle)
        return self._record_sample(state, sample)

    def nvmlGpmMigSampleGet(self, handle: FakeHandle, gpu_instance: int, sample: Any) -> Any:
        self._whole_gpu("nvmlGpmMigSampleGet", handle)
        for mig in self._migs(self._gpus[handle.index]):
            if mig.gpu_instance == gpu_instance:
                return self._record_sample(mig.state, sample)
        raise _error(pynvml.NVML_ERROR_NOT_FOUND)

    def _record_sample(self, state: SimGpuState, sample: Any) -> Any:
        values = {f: getattr(state, f) for f in GPM_FIELDS.values()}
        if all(v is None for v in values.values()):
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            key = _address(sample)
            if key not in self._gpm_samples:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            self._gpm_samples[key] = (self._gpm_samples[key][0], values)
        return sample

    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        with self._lock:
            first = self._gpm_samples.get(_address(metrics_get.sample1), (None, None))[1]
            second = self._gpm_samples.get(_address(metrics_get.sample2), (None, None))[1]
        if first is None or second is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for n in range(metrics_get.numMetrics):
            metric = metrics_get.metrics[n]
            name = GPM_FIELDS.get(metric.metricId)
            value = second.get(name) if name else None
            if value is None:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                metric.value = 0.0
            else:
                metric.nvmlReturn = pynvml.NVML_SUCCESS
                metric.value = float(value) * 100.0
        return metrics_get

    # ------------------------------------------------------------------ events

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        es = _EventSet()
        with self._lock:
            self._event_sets.append(es)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeHandle) -> int:
        self._whole_gpu("nvmlDeviceGetSupportedEventTypes", handle)
        return int(pynvml.nvmlEventTypeXidCriticalError)

    def nvmlDeviceRegisterEvents(
        self, handle: FakeHandle, types: int, event_set: _EventSet
    ) -> None:
        self._whole_gpu("nvmlDeviceRegisterEvents", handle)
        if types & ~pynvml.nvmlEventTypeXidCriticalError:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        event_set.gpus.add(handle.index)

    def nvmlEventSetWait(self, event_set: _EventSet, timeout_ms: int) -> SimpleNamespace:
        return self.nvmlEventSetWait_v2(event_set, timeout_ms)

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> SimpleNamespace:
        self._enter("nvmlEventSetWait")
        with event_set.cond:
            if not event_set.pending and timeout_ms > 0:
                event_set.cond.wait(timeout_ms / 1000)
            if event_set.freed:
                raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if not event_set.pending:
                raise _error(pynvml.NVML_ERROR_TIMEOUT)
            run = event_set.pending[0]
            run[2] -= 1
            if run[2] <= 0:
                event_set.pending.popleft()
        index, xid = run[0], run[1]
        return SimpleNamespace(
            device=self._handle(index),
            eventType=pynvml.nvmlEventTypeXidCriticalError,
            eventData=xid,
            gpuInstanceId=_NO_INSTANCE,
            computeInstanceId=_NO_INSTANCE,
        )

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        self._enter("nvmlEventSetFree")
        with event_set.cond:
            event_set.freed = True
            event_set.pending.clear()
            event_set.cond.notify_all()
        with self._lock:
            if event_set in self._event_sets:
                self._event_sets.remove(event_set)


def _address(pointer: Any) -> int:
    return int(ctypes.cast(pointer, ctypes.c_void_p).value or 0)
