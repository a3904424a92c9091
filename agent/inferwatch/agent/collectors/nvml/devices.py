"""Opening devices: a GPU's handle and static facts, its GPM buffers, its MIG devices.

What never changes (name, UUID, PCI bus id, GPM support) is read once when a
GPU is opened; the MIG layout is read again on the slow cadence.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pynvml

from inferwatch.agent.collectors.nvml.calls import (
    SKIP,
    Device,
    NvmlCalls,
    text,
)
from inferwatch.engines import contract

#: GPM metrics, as (family, NVML GPM metric id); NVML reports percent.
GPM_METRICS: tuple[tuple[str, int], ...] = (
    (contract.GPU_SM_ACTIVE_RATIO.name, 2),  # NVML_GPM_METRIC_SM_UTIL
    (contract.GPU_SM_OCCUPANCY_RATIO.name, 3),  # NVML_GPM_METRIC_SM_OCCUPANCY
    (contract.GPU_TENSOR_ACTIVE_RATIO.name, 5),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    (contract.GPU_DRAM_ACTIVE_RATIO.name, 10),  # NVML_GPM_METRIC_DRAM_BW_UTIL
)


def mig_profile(device_name: str) -> str:
    """The MIG profile ("1g.18gb") from a MIG device's NVML name ("NVIDIA H200 MIG 1g.18gb")."""
    _, sep, tail = device_name.rpartition(" MIG ")
    return tail.strip() if sep and tail.strip() else "unknown"


class Devices:
    """Opens GPUs and their MIG devices through :class:`NvmlCalls`; frees what they hold."""

    def __init__(self, calls: NvmlCalls) -> None:
        self.calls = calls
        self.gpm_request_cls = getattr(pynvml, "c_nvmlGpmMetricsGet_t", None)

    def open(self, gpu: Device) -> None:
        """Get the handle and everything static about a GPU; raises ``Lost`` when it cannot."""
        calls = self.calls
        self.free_gpm(gpu)
        for mig in gpu.migs:
            self.free_gpm(mig)
        gpu.migs = []
        gpu.handle = calls.raw("nvmlDeviceGetHandleByIndex", gpu.index)
        gpu.uuid = text(calls.raw("nvmlDeviceGetUUID", gpu.handle))
        gpu.name = text(calls.optional("nvmlDeviceGetName", gpu.handle, default=""))
        pci = calls.optional("nvmlDeviceGetPciInfo", gpu.handle)
        gpu.pci_bus_id = text(getattr(pci, "busId", "")) if pci is not None else ""
        gpu.unsupported.clear()
        gpu.failing.clear()
        gpu.slow_due = 0.0
        gpu.activity_due = 0.0
        gpu.gpm_values = {}
        gpu.pcie = {}
        gpu.shares = None
        gpu.proc_ts = 0
        gpu.gpm = self.gpm_supported(gpu.handle)
        if gpu.gpm:
            self.alloc_gpm(gpu)

    # ------------------------------------------------------------------ GPM buffers

    def gpm_supported(self, handle: Any) -> bool:
        if self.gpm_request_cls is None:
            return False
        support = self.calls.optional("nvmlGpmQueryDeviceSupport", handle)
        return bool(getattr(support, "isSupportedDevice", 0))

    def alloc_gpm(self, dev: Device) -> None:
        try:
            dev.gpm_samples = [self.calls.nvml.nvmlGpmSampleAlloc() for _ in range(2)]
        except pynvml.NVMLError as err:
            self.calls.report_once(
                "not_supported", f"{dev.key}: GPM sample allocation failed: {err}"
            )
            dev.gpm = False
            return
        request = self.gpm_request_cls()  # type: ignore[misc]
        request.version = getattr(pynvml, "NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(GPM_METRICS)
        for n, (_, metric_id) in enumerate(GPM_METRICS):
            request.metrics[n].metricId = metric_id
        dev.gpm_request = request
        dev.gpm_prev = None
        dev.gpm_next = 0

    def free_gpm(self, dev: Device) -> None:
        for sample in dev.gpm_samples:
            with contextlib.suppress(pynvml.NVMLError):
                self.calls.nvml.nvmlGpmSampleFree(sample)
        dev.gpm_samples = []
        dev.gpm_prev = None
        dev.gpm_request = None

    def free(self, gpu: Device) -> None:
        """Everything a GPU and its MIG devices hold (GPM buffers)."""
        for dev in [gpu, *gpu.migs]:
            self.free_gpm(dev)

    # ------------------------------------------------------------------ MIG

    def discover_mig(self, gpu: Device) -> None:
        """The GPU's MIG mode and, when enabled, its MIG devices (kept by UUID across passes)."""
        mode = self.calls.call(gpu, "mig_mode", "nvmlDeviceGetMigMode", gpu.handle)
        if mode is SKIP:
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
                self.free_gpm(mig)
            gpu.migs = []
            return
        count = self.calls.call(gpu, "mig_count", "nvmlDeviceGetMaxMigDeviceCount", gpu.handle)
        if count is SKIP:
            return
        self._read_mig_slots(gpu, int(count))

    def _read_mig_slots(self, gpu: Device, count: int) -> None:
        calls = self.calls
        old = {m.uuid: m for m in gpu.migs}
        found: list[Device] = []
        for slot in range(count):
            handle = calls.optional("nvmlDeviceGetMigDeviceHandleByIndex", gpu.handle, slot)
            if handle is None:
                continue  # an empty slot answers NOT_FOUND
            uuid = text(calls.optional("nvmlDeviceGetUUID", handle, default=""))
            if not uuid:
                continue
            mig = old.pop(uuid, None) or self._open_mig(gpu, slot, handle, uuid)
            mig.handle = handle
            found.append(mig)
        for gone in old.values():
            self.free_gpm(gone)
        gpu.migs = found

    def _open_mig(self, gpu: Device, slot: int, handle: Any, uuid: str) -> Device:
        calls = self.calls
        mig = Device(gpu.index, f"{gpu.key}/mig{slot}")
        mig.parent = gpu
        mig.uuid = uuid
        mig.name = text(calls.optional("nvmlDeviceGetName", handle, default=""))
        mig.profile = mig_profile(mig.name)
        instance = calls.optional("nvmlDeviceGetGpuInstanceId", handle)
        mig.gpu_instance = int(instance) if instance is not None else None
        mig.pci_bus_id = gpu.pci_bus_id
        mig.mig_mode = "enabled"
        mig.gpm = gpu.gpm and mig.gpu_instance is not None
        if mig.gpm:
            self.alloc_gpm(mig)
        return mig
