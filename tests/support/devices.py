"""NVML device readings as an NVML pass builds them, for the attribution and Kubernetes tests.

``gpu(i)`` is a whole H200 with a stable UUID (``uuid_of(i)``) and PCI bus id,
``mig(i, instance, profile)`` one MIG instance of GPU ``i``, ``host(n)`` a host
of ``n`` GPUs; ``pids`` puts compute processes on a device.
"""

from __future__ import annotations

from collections.abc import Sequence

from inferwatch.agent.collectors.nvml import DeviceReading, ProcessReading
from inferwatch.sim.gpustate import GIB

H200 = "NVIDIA H200"


def uuid_of(i: int) -> str:
    return f"GPU-{i:x}{i:x}3f937-d72c-4106-c12f-20bd9faed9f{i:x}"


def gpu(
    i: int,
    *,
    pids: Sequence[int] = (),
    name: str = H200,
    bus: str | None = None,
    mig_mode: str = "disabled",
) -> DeviceReading:
    return DeviceReading(
        gpu=str(i),
        uuid=uuid_of(i),
        name=name,
        pci_bus_id=bus or f"00000000:{0x18 + 0x10 * i:02X}:00.0",
        driver_version="550.54.15",
        mig_mode=mig_mode,
        up=True,
        processes=tuple(ProcessReading(p, "python3", GIB, None) for p in pids),
    )


def mig(i: int, instance: int, profile: str, *, pids: Sequence[int] = ()) -> DeviceReading:
    return DeviceReading(
        gpu=str(i),
        uuid=f"MIG-{i}{instance}a1b2c3-5d6e-5f70-8a9b-0c1d2e3f4a5{instance}",
        name=f"{H200} MIG {profile}",
        pci_bus_id=gpu(i).pci_bus_id,
        driver_version="550.54.15",
        mig_mode="enabled",
        up=True,
        gpu_instance=str(instance),
        mig_profile=profile,
        processes=tuple(ProcessReading(p, "python3", GIB, None) for p in pids),
    )


def host(n: int, **kw: object) -> list[DeviceReading]:
    return [gpu(i, **kw) for i in range(n)]  # type: ignore[arg-type]
