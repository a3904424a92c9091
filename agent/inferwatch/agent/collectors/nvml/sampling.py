"""One device's readings in one pass, on three cadences.

Every pass the cheap readings (memory, utilisation, power, temperature, clocks,
P-state, fan, clock events, processes); every activity pass the windows (GPM,
PCIe, per-process SM share); every slow pass the slow calls (power limit,
energy, ECC, MIG layout). Between their reads, the last values are exported.
"""

from __future__ import annotations

from typing import Any

import pynvml

from inferwatch.agent.collectors.nvml.calls import SKIP, Device, NvmlCalls, ratio
from inferwatch.agent.collectors.nvml.devices import GPM_METRICS, Devices
from inferwatch.agent.collectors.nvml.processes import Processes
from inferwatch.agent.collectors.nvml.snapshot import DeviceReading, ProcessReading
from inferwatch.engines import contract

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

#: NVML reports PCIe throughput in KB/s of 1024 bytes
_PCIE_KB = 1024.0
_PSTATE_UNKNOWN = getattr(pynvml, "NVML_PSTATE_UNKNOWN", 32)


class Sampler:
    """Reads one GPU (and its MIG devices) into :class:`DeviceReading` records."""

    def __init__(self, calls: NvmlCalls, devices: Devices) -> None:
        self.calls = calls
        self.devices = devices
        self.processes = Processes(calls)
        #: The driver version, read when NVML is initialised (a label of every device).
        self.driver = ""

    def read(self, gpu: Device, seen: set[int], *, activity: bool) -> list[DeviceReading]:
        """An open GPU and its MIG devices (with the windows when ``activity``); raises
        ``Lost`` when the GPU is gone. The PIDs listed are added to ``seen``."""
        readings = [self._read_whole(gpu, seen, activity)]
        readings.extend(self._read_mig(mig, seen, activity) for mig in gpu.migs)
        return readings

    def down(self, gpu: Device) -> DeviceReading:
        """A GPU that does not answer: its labels and ``up`` 0."""
        return self._reading(gpu, up=False)

    def _reading(self, dev: Device, *, up: bool, **readings: Any) -> DeviceReading:
        """A device's labels (index, UUID, name, PCI bus id, driver, MIG mode) and
        ``readings`` (the other fields of :class:`DeviceReading`)."""
        return DeviceReading(
            gpu=str(dev.index),
            uuid=dev.uuid,
            name=dev.name,
            pci_bus_id=dev.pci_bus_id,
            driver_version=self.driver,
            mig_mode=dev.mig_mode,
            up=up,
            **readings,
        )

    # ------------------------------------------------------------------ slow cadence

    def read_slow(self, gpu: Device) -> None:
        """Power limit, energy, ECC and the MIG layout, kept for the passes until the next."""
        h = gpu.handle
        gauges: dict[str, float] = {}
        counters: dict[str, float] = {}
        limit = self.calls.call(gpu, "power_limit", "nvmlDeviceGetEnforcedPowerLimit", h)
        if limit is not SKIP:
            gauges[contract.GPU_POWER_LIMIT_WATTS.name] = limit / 1000.0
        energy = self.calls.call(gpu, "energy", "nvmlDeviceGetTotalEnergyConsumption", h)
        if energy is not SKIP:
            counters[contract.GPU_ENERGY_JOULES.name] = energy / 1000.0
        gpu.slow_gauges, gpu.slow_counters, gpu.ecc = gauges, counters, self._ecc(gpu)
        self.devices.discover_mig(gpu)

    def _ecc(self, gpu: Device) -> dict[str, float]:
        volatile = pynvml.NVML_VOLATILE_ECC
        return self._by_label(
            gpu,
            "ecc",
            "nvmlDeviceGetTotalEccErrors",
            (
                ("corrected", (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, volatile)),
                ("uncorrected", (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, volatile)),
            ),
        )

    def _by_label(
        self,
        gpu: Device,
        key: str,
        function: str,
        variants: tuple[tuple[str, tuple[Any, ...]], ...],
        scale: float = 1.0,
    ) -> dict[str, float]:
        """One call of ``function`` per (label, arguments after the handle); what each
        answered, times ``scale``, by label (a call that is skipped: no entry)."""
        out: dict[str, float] = {}
        for label, args in variants:
            value = self.calls.call(gpu, f"{key}_{label}", function, gpu.handle, *args)
            if value is not SKIP:
                out[label] = float(value) * scale
        return out

    # ------------------------------------------------------------------ every pass

    def _memory(self, dev: Device, gauges: dict[str, float]) -> None:
        h = dev.handle
        mem = SKIP
        v2 = getattr(pynvml, "nvmlMemory_v2", None)
        if v2 is not None:
            mem = self.calls.call(dev, "memory_v2", "nvmlDeviceGetMemoryInfo", h, v2)
        if mem is not SKIP:
            used, reserved, total = int(mem.used), int(mem.reserved), int(mem.total)
            gauges[contract.GPU_MEMORY_RESERVED_BYTES.name] = float(reserved)
        elif v2 is None or "memory_v2" in dev.unsupported:
            mem = self.calls.call(dev, "memory_v1", "nvmlDeviceGetMemoryInfo", h)
            if mem is SKIP:
                return
            # Version 1 counts the driver's reservation as used.
            used, reserved, total = int(mem.used), 0, int(mem.total)
        else:
            return
        gauges[contract.GPU_MEMORY_USED_BYTES.name] = float(used)
        gauges[contract.GPU_MEMORY_TOTAL_BYTES.name] = float(total)
        if total > 0:
            gauges[contract.GPU_MEMORY_USED_RATIO.name] = (used + reserved) / total

    def _instant(self, gpu: Device, gauges: dict[str, float]) -> None:
        """The cheap gauges of a whole GPU: utilisation, power, temperature, clocks, fan."""
        call, h = self.calls.call, gpu.handle
        util = call(gpu, "utilization", "nvmlDeviceGetUtilizationRates", h)
        if util is not SKIP:
            gauges[contract.GPU_UTILIZATION_RATIO.name] = util.gpu / 100.0
            gauges[contract.GPU_MEMORY_BUSY_RATIO.name] = util.memory / 100.0
        power = call(gpu, "power", "nvmlDeviceGetPowerUsage", h)
        if power is not SKIP:
            gauges[contract.GPU_POWER_WATTS.name] = power / 1000.0
        temp = call(gpu, "temperature", "nvmlDeviceGetTemperature", h, pynvml.NVML_TEMPERATURE_GPU)
        if temp is not SKIP:
            gauges[contract.GPU_TEMPERATURE_CELSIUS.name] = float(temp)
        sm = call(gpu, "sm_clock", "nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM)
        if sm is not SKIP:
            gauges[contract.GPU_SM_CLOCK_HERTZ.name] = sm * 1e6
        mem = call(gpu, "mem_clock", "nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_MEM)
        if mem is not SKIP:
            gauges[contract.GPU_MEMORY_CLOCK_HERTZ.name] = mem * 1e6
        pstate = call(gpu, "pstate", "nvmlDeviceGetPerformanceState", h)
        if pstate is not SKIP and 0 <= int(pstate) < _PSTATE_UNKNOWN:
            gauges[contract.GPU_PERFORMANCE_STATE.name] = float(pstate)
        fan = call(gpu, "fan", "nvmlDeviceGetFanSpeed", h)
        if fan is not SKIP:
            gauges[contract.GPU_FAN_SPEED_RATIO.name] = fan / 100.0

    def _read_whole(self, gpu: Device, seen: set[int], activity: bool) -> DeviceReading:
        gauges: dict[str, float] = dict(gpu.slow_gauges)
        self._memory(gpu, gauges)
        self._instant(gpu, gauges)
        if activity:
            # Each call samples a byte counter for 20 ms: read with the activity readings.
            gpu.pcie = self._pcie(gpu)
        clock_events = self._clock_events(gpu)
        if gpu.gpm:
            if activity:
                gpu.gpm_values = self._gpm(gpu, "nvmlGpmSampleGet", gpu.handle)
            gauges.update(gpu.gpm_values)
        processes: tuple[ProcessReading, ...] = ()
        if gpu.mig_mode != "enabled":
            # In MIG mode each process is listed under its MIG device instead.
            processes = self.processes.read(gpu, seen, shares=activity)
        return self._reading(
            gpu,
            up=True,
            gauges=gauges,
            counters=dict(gpu.slow_counters),
            clock_events=clock_events,
            ecc=dict(gpu.ecc),
            processes=processes,
            pcie=dict(gpu.pcie),
        )

    def _read_mig(self, mig: Device, seen: set[int], activity: bool) -> DeviceReading:
        gauges: dict[str, float] = {}
        self._memory(mig, gauges)
        parent = mig.parent
        if mig.gpm and parent is not None:
            if activity:
                mig.gpm_values = self._gpm(
                    mig, "nvmlGpmMigSampleGet", parent.handle, mig.gpu_instance
                )
            gauges.update(mig.gpm_values)
        # a MIG device's mig_mode is "enabled" from its discovery on
        return self._reading(
            mig,
            up=True,
            gpu_instance=str(mig.gpu_instance) if mig.gpu_instance is not None else "unknown",
            mig_profile=mig.profile,
            gauges=gauges,
            processes=self.processes.read(mig, seen, shares=None),
        )

    def _clock_events(self, gpu: Device) -> dict[str, float]:
        call = self.calls.call
        mask = call(gpu, "clock_events", "nvmlDeviceGetCurrentClocksEventReasons", gpu.handle)
        if mask is SKIP and "clock_events" in gpu.unsupported:
            # Drivers before the rename only have the throttle-reasons name.
            mask = call(
                gpu, "throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", gpu.handle
            )
        if mask is SKIP:
            return {}
        mask = int(mask)
        return {reason: float(bool(mask & bit)) for reason, bit in CLOCK_EVENT_REASONS}

    # ------------------------------------------------------------------ activity cadence

    def _pcie(self, gpu: Device) -> dict[str, float]:
        return self._by_label(
            gpu,
            "pcie",
            "nvmlDeviceGetPcieThroughput",
            (("tx", (pynvml.NVML_PCIE_UTIL_TX_BYTES,)), ("rx", (pynvml.NVML_PCIE_UTIL_RX_BYTES,))),
            scale=_PCIE_KB,
        )

    def _gpm(self, dev: Device, function: str, *args: Any) -> dict[str, float]:
        current = dev.gpm_samples[dev.gpm_next]
        got = self.calls.call(dev, "gpm_sample", function, *args, current)
        if got is SKIP:
            dev.gpm_prev = None
            return {}
        out: dict[str, float] = {}
        previous = dev.gpm_prev
        if previous is not None:
            request = dev.gpm_request
            request.sample1 = previous
            request.sample2 = current
            result = self.calls.call(dev, "gpm_metrics", "nvmlGpmMetricsGet", request)
            if result is not SKIP:
                for n, (family, _) in enumerate(GPM_METRICS):
                    metric = request.metrics[n]
                    if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                        out[family] = ratio(metric.value)
        dev.gpm_prev = current
        dev.gpm_next ^= 1
        return out
