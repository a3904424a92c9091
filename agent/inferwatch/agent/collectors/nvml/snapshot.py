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
from inferwatch.engines import contract


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

    def gauge(self, name: str) -> Metric:
        fam = self.gauges.get(name)
        if fam is None:
            fam = self.gauges[name] = GaugeMetricFamily(name, contract.BY_NAME[name].help)
        return fam

    def counter(self, name: str) -> Metric:
        fam = self.counters.get(name)
        if fam is None:
            row = contract.BY_NAME[name]
            # prometheus_client names a counter family without the _total suffix.
            fam = self.counters[name] = CounterMetricFamily(row.base, row.help)
        return fam

    def add_gauge(self, name: str, labels: dict[str, str], value: float) -> None:
        self.gauge(name).samples.append(Sample(name, labels, value))

    def add_counter(self, name: str, labels: dict[str, str], value: float) -> None:
        self.counter(name).samples.append(Sample(name, labels, value))

    def all(self) -> list[Metric]:
        return [*self.gauges.values(), *self.counters.values()]


def _device(out: _Families, dev: DeviceReading) -> None:
    """A device's own series: info, up, gauges, counters, clock events, ECC, PCIe."""
    base = dev.labels()
    out.add_gauge(contract.GPU_INFO.name, info_labels(dev), 1.0)
    out.add_gauge(contract.GPU_UP.name, base, 1.0 if dev.up else 0.0)
    for name, value in dev.gauges.items():
        out.add_gauge(name, base, value)
    for name, value in dev.counters.items():
        out.add_counter(name, base, value)
    for reason, value in dev.clock_events.items():
        labels = {**base, "reason": reason}
        out.add_gauge(contract.GPU_CLOCK_EVENT_ACTIVE.name, labels, value)
    for kind, value in dev.ecc.items():
        labels = {**base, "type": kind}
        out.add_counter(contract.GPU_ECC_ERRORS.name, labels, value)
    for direction, value in dev.pcie.items():
        name = contract.GPU_PCIE_THROUGHPUT_BYTES_PER_SECOND.name
        out.add_gauge(name, {**base, "direction": direction}, value)


def _processes(out: _Families, dev: DeviceReading, workers: Mapping[int, str]) -> None:
    """Per-process memory and SM share, with the worker a PID belongs to where known."""
    base = dev.labels()
    for proc in dev.processes:
        labels = {**base, "pid": str(proc.pid), "process": proc.name}
        worker = workers.get(proc.pid)
        if worker is not None:
            labels["worker"] = worker
        if proc.used_bytes is not None:
            name = contract.GPU_PROCESS_MEMORY_USED_BYTES.name
            out.add_gauge(name, labels, float(proc.used_bytes))
        if proc.sm_ratio is not None:
            name = contract.GPU_PROCESS_SM_UTILIZATION_RATIO.name
            out.add_gauge(name, labels, proc.sm_ratio)


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
        out.add_counter(contract.GPU_XID_ERRORS.name, labels, float(count))
        out.add_gauge(contract.GPU_XID_LAST_TIMESTAMP_SECONDS.name, labels, last)
    for worker, device in worker_gpus:
        labels = {**(worker_labels or {}).get(worker, {}), **device.labels(), "worker": worker}
        out.add_gauge(contract.WORKER_GPU_INFO.name, labels, 1.0)
    return out.all()
