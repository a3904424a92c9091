"""What one NVML pass read (:class:`NvmlSnapshot`), and its metric families.

A snapshot is immutable: the pass thread builds one and swaps it in; turning it
into families (:func:`build_families`) never touches NVML.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from inferwatch.agent.collectors.attribution import GpuDevice

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


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    name: str
    used_bytes: int | None
    sm_ratio: float | None


@dataclass(frozen=True)
class DeviceReading(GpuDevice):
    """One GPU or MIG device in one pass. Absent readings are simply not in the mappings."""

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


@dataclass(frozen=True)
class NvmlSnapshot:
    devices: tuple[DeviceReading, ...] = ()
    #: (gpu, uuid, xid, count, unix time of the last event), since the agent started
    xid: tuple[tuple[str, str, str, int, float], ...] = ()


def info_labels(dev: GpuDevice) -> dict[str, str]:
    """The labels of ``inferwatch_gpu_info``: the device's own, then its description."""
    return {
        **dev.labels(),
        "name": dev.name,
        "pci_bus_id": dev.pci_bus_id,
        "driver_version": dev.driver_version,
        "mig_mode": dev.mig_mode,
    }


# ---------------------------------------------------------------------- families


class _Families:
    """Families by name, created on first use, in first-use order (gauges, then counters)."""

    def __init__(self) -> None:
        self.gauges: dict[str, Metric] = {}
        self.counters: dict[str, Metric] = {}

    def gauge(self, name: str, help_text: str) -> Metric:
        fam = self.gauges.get(name)
        if fam is None:
            fam = self.gauges[name] = GaugeMetricFamily(name, help_text)
        return fam

    def counter(self, name: str, help_text: str) -> Metric:
        fam = self.counters.get(name)
        if fam is None:
            # prometheus_client names a counter family without the _total suffix.
            fam = self.counters[name] = CounterMetricFamily(name.removesuffix("_total"), help_text)
        return fam

    def add_gauge(self, name: str, help_text: str, labels: dict[str, str], value: float) -> None:
        self.gauge(name, help_text).samples.append(Sample(name, labels, value))

    def add_counter(self, name: str, help_text: str, labels: dict[str, str], value: float) -> None:
        self.counter(name, help_text).samples.append(Sample(name, labels, value))

    def all(self) -> list[Metric]:
        return [*self.gauges.values(), *self.counters.values()]


def _device(out: _Families, dev: DeviceReading) -> None:
    """A device's own series: info, up, gauges, counters, clock events, ECC, PCIe."""
    base = dev.labels()
    out.add_gauge("inferwatch_gpu_info", INFO_HELP, info_labels(dev), 1.0)
    out.add_gauge("inferwatch_gpu_up", UP_HELP, base, 1.0 if dev.up else 0.0)
    for name, value in dev.gauges.items():
        out.add_gauge(name, GAUGE_HELP[name], base, value)
    for name, value in dev.counters.items():
        out.add_counter(name, COUNTER_HELP[name], base, value)
    for reason, value in dev.clock_events.items():
        labels = {**base, "reason": reason}
        out.add_gauge("inferwatch_gpu_clock_event_active", CLOCK_EVENT_HELP, labels, value)
    for kind, value in dev.ecc.items():
        labels = {**base, "type": kind}
        out.add_counter("inferwatch_gpu_ecc_errors_total", ECC_HELP, labels, value)
    for direction, value in dev.pcie.items():
        name = "inferwatch_gpu_pcie_throughput_bytes_per_second"
        out.add_gauge(name, PCIE_HELP, {**base, "direction": direction}, value)


def _processes(out: _Families, dev: DeviceReading, workers: Mapping[int, str]) -> None:
    """Per-process memory and SM share, with the worker a PID belongs to where known."""
    base = dev.labels()
    for proc in dev.processes:
        labels = {**base, "pid": str(proc.pid), "process": proc.name}
        worker = workers.get(proc.pid)
        if worker is not None:
            labels["worker"] = worker
        if proc.used_bytes is not None:
            name = "inferwatch_gpu_process_memory_used_bytes"
            out.add_gauge(name, PROCESS_MEMORY_HELP, labels, float(proc.used_bytes))
        if proc.sm_ratio is not None:
            name = "inferwatch_gpu_process_sm_utilization_ratio"
            out.add_gauge(name, PROCESS_SM_HELP, labels, proc.sm_ratio)


def build_families(
    snap: NvmlSnapshot,
    workers: Mapping[int, str],
    worker_gpus: Iterable[tuple[str, GpuDevice]] = (),
    worker_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Metric]:
    """Metric families for a snapshot; ``workers`` maps a PID to its worker's name,
    ``worker_gpus`` lists (worker, device) pairs of attribution."""
    out = _Families()
    for dev in snap.devices:
        _device(out, dev)
        _processes(out, dev, workers)
    for gpu, uuid, xid, count, last in snap.xid:
        labels = {"gpu": gpu, "uuid": uuid, "xid": xid}
        out.add_counter("inferwatch_gpu_xid_errors_total", XID_HELP, labels, float(count))
        out.add_gauge("inferwatch_gpu_xid_last_timestamp_seconds", XID_LAST_HELP, labels, last)
    for worker, device in worker_gpus:
        labels = {**(worker_labels or {}).get(worker, {}), **device.labels(), "worker": worker}
        out.add_gauge("inferwatch_worker_gpu_info", WORKER_GPU_HELP, labels, 1.0)
    return out.all()
