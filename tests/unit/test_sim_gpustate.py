"""GPU-state arithmetic: merging fragments of one GPU, MIG slices, what the fake NVML reads."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pynvml
import pytest

from inferwatch.sim import gpustate
from inferwatch.sim.fakegpu import FakeNvml
from inferwatch.sim.gpustate import (
    FULL_LOAD_TEMPERATURE,
    GIB,
    IDLE_TEMPERATURE,
    SimGpuProcess,
    SimGpuState,
    SimMigSlice,
    merge,
    mig_devices,
)

H100 = 80 * GIB


def worker(
    pid: int,
    used: float,
    util: float,
    *,
    temp: float = 50.0,
    mig: SimMigSlice | None = None,
    updated: float | None = None,
) -> SimGpuState:
    """A fragment as a simulator writes it (idle 55 W, limit 150 W), just written."""
    return SimGpuState(
        uuid="GPU-x",
        memory_used_bytes=int(used * GIB),
        utilization_gpu=util,
        utilization_memory=util / 2,
        sm_active=0.9 * util,
        power_watts=gpustate.power_for(55.0, 150.0, util),
        power_idle_watts=55.0,
        temperature_celsius=temp,
        processes=[SimGpuProcess(pid=pid, used_bytes=int(used * GIB), sm_utilization=util)],
        mig=mig,
        updated=time.time() if updated is None else updated,
    )


def test_two_workers_on_one_card_add_up() -> None:
    a = worker(1, 10.8, 0.3, temp=45.0, updated=1.0)
    b = worker(2, 10.8, 0.4, temp=50.0, updated=2.0)
    m = merge([a, b])
    assert m.memory_used_bytes == a.memory_used_bytes + b.memory_used_bytes
    assert m.utilization_gpu == pytest.approx(0.7)
    assert m.utilization_memory == pytest.approx(0.35)
    assert m.sm_active == pytest.approx(0.63)
    # power and temperature follow the combined utilization
    assert m.power_watts == pytest.approx(gpustate.power_for(55.0, 150.0, 0.7))
    assert m.temperature_celsius == pytest.approx(IDLE_TEMPERATURE + 10 + 15)
    assert [p.pid for p in m.processes] == [1, 2]
    assert m.updated == 2.0 and m.mig is None


def test_merge_caps_at_what_one_card_can_do() -> None:
    m = merge([worker(1, 15, 0.8, temp=75.0), worker(2, 15, 0.7, temp=75.0)])
    assert m.utilization_gpu == 1.0
    assert m.sm_active == 1.0
    assert m.power_watts == pytest.approx(gpustate.power_for(55.0, 150.0, 1.0))
    assert m.temperature_celsius == FULL_LOAD_TEMPERATURE
    # memory cannot exceed the card less the driver's reservation
    assert m.memory_used_bytes == 24 * GIB - 512 * 1024**2


def test_one_whole_gpu_fragment_is_reported_as_written() -> None:
    odd = dataclasses.replace(worker(1, 5, 0.2), temperature_celsius=91.0, power_watts=400.0)
    assert merge([odd]) == odd
    with pytest.raises(ValueError):
        merge([])


def test_gpm_absent_stays_absent() -> None:
    no_gpm = dataclasses.replace(worker(1, 5, 0.5), sm_active=None)
    assert merge([no_gpm, dataclasses.replace(no_gpm, processes=[])]).sm_active is None


def slice_(gi: int, profile: str, uuid: str = "") -> SimMigSlice:
    return SimMigSlice(gi, profile, gpustate.parse_profile(profile)[1] * GIB, uuid)


def test_mig_fragments_make_one_device_per_gpu_instance() -> None:
    a = dataclasses.replace(
        worker(1, 36, 1.0), memory_total_bytes=H100, mig=slice_(1, "3g.40gb", "MIG-a")
    )
    b = dataclasses.replace(
        worker(2, 18, 0.5), memory_total_bytes=H100, mig=slice_(2, "3g.40gb", "MIG-b")
    )
    b2 = dataclasses.replace(
        worker(3, 10, 0.25), memory_total_bytes=H100, mig=slice_(2, "3g.40gb", "MIG-b")
    )
    devices = mig_devices([b, a, b2])
    assert [(d.gpu_instance, d.profile) for d in devices] == [(1, "3g.40gb"), (2, "3g.40gb")]
    one, two = devices[0].state, devices[1].state
    assert one.uuid == "MIG-a" and one.memory_total_bytes == 40 * GIB
    assert one.memory_reserved_bytes == 0 and one.memory_used_bytes == 36 * GIB
    # two workers on one slice: merged like two on one card, within the slice
    assert two.memory_used_bytes == 28 * GIB
    assert two.utilization_gpu == pytest.approx(0.75)
    assert [p.pid for p in two.processes] == [2, 3]
    # the whole GPU counts each slice with its share of the compute
    parent = merge([a, b, b2])
    assert parent.memory_total_bytes == H100
    assert parent.memory_used_bytes == 64 * GIB
    assert parent.utilization_gpu == pytest.approx(3 / 7 * (1.0 + 0.5 + 0.25))
    assert mig_devices([worker(1, 1, 0.1)]) == []


@pytest.mark.parametrize("bad", ["3g", "8g.40gb", "0g.10gb", "3g.40GB", "g.40gb"])
def test_profile_names_are_checked(bad: str) -> None:
    with pytest.raises(ValueError):
        gpustate.parse_profile(bad)
    assert gpustate.parse_profile("1g.10gb") == (1, 10)


def test_uuids_are_per_gpu_and_per_host() -> None:
    assert gpustate.gpu_uuid("/a", 0) == gpustate.gpu_uuid("/a", 0)
    assert len({gpustate.gpu_uuid("/a", 0), gpustate.gpu_uuid("/a", 1)}) == 2
    assert gpustate.gpu_uuid("/a", 0) != gpustate.gpu_uuid("/b", 0)
    assert gpustate.mig_uuid("/a", 0, 1).startswith("MIG-")
    assert gpustate.mig_uuid("/a", 0, 1) != gpustate.mig_uuid("/a", 0, 2)


def test_files_old_and_new_are_merged_and_withdrawn(tmp_path: Path) -> None:
    gpustate.write_state(tmp_path, 0, worker(1, 4, 0.2))  # the format before fragments
    gpustate.write_state(tmp_path, 0, worker(2, 5, 0.3), tag=8001)
    gpustate.write_state(tmp_path, 1, worker(3, 6, 0.4), tag=8001)
    gpustate.write_state(tmp_path, 10, worker(4, 7, 0.5), tag=8002)  # not GPU 1's
    (tmp_path / "gpu-0.8003.json.tmp").write_text("{")  # a writer's temporary file
    assert [p.name for p in gpustate.fragment_paths(tmp_path, 0)] == [
        "gpu-0.json",
        "gpu-0.8001.json",
    ]
    st = gpustate.read_state(tmp_path, 0)
    assert st is not None and st.memory_used_bytes == 9 * GIB
    assert [p.pid for p in st.processes] == [1, 2]
    one = gpustate.read_state(tmp_path, 1)
    assert one is not None and [p.pid for p in one.processes] == [3]
    gpustate.remove_state(tmp_path, 0, 8001)
    gpustate.remove_state(tmp_path, 0, 8001)  # twice is fine
    st = gpustate.read_state(tmp_path, 0)
    assert st is not None and [p.pid for p in st.processes] == [1]
    assert not gpustate.has_state(tmp_path, 2) and gpustate.read_state(tmp_path, 2) is None
    assert gpustate.fragment_paths(tmp_path / "absent", 0) == []


def started(nvml: FakeNvml) -> FakeNvml:
    nvml.nvmlInit()
    return nvml


def test_fake_nvml_follows_fragments_as_they_come_and_go(tmp_path: Path) -> None:
    nvml = started(FakeNvml(1, state_dir=tmp_path))
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetComputeRunningProcesses(h) == []
    gpustate.write_state(tmp_path, 0, worker(1, 10, 0.3), tag="a")
    gpustate.write_state(tmp_path, 0, worker(2, 10, 0.4), tag="b")
    mem = nvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2)
    assert mem.used == 20 * GIB
    assert nvml.nvmlDeviceGetUtilizationRates(h).gpu == 70
    assert {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)} == {1, 2}
    gpustate.remove_state(tmp_path, 0, "b")
    assert nvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2).used == 10 * GIB
    # an unreadable fragment keeps its last good state
    gpustate.state_path(tmp_path, 0, "a").write_text("{not json")
    assert nvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2).used == 10 * GIB
    # ... and one that never was readable counts for nothing
    gpustate.state_path(tmp_path, 0, "c").write_text("[]")
    assert nvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2).used == 10 * GIB


def test_fake_nvml_reports_a_gpu_in_mig_mode_from_slice_fragments(tmp_path: Path) -> None:
    for tag, gi, used, util in (("a", 1, 36, 1.0), ("b", 2, 20, 0.5)):
        st = dataclasses.replace(
            worker(gi, used, util, temp=60.0),
            name="NVIDIA H100 80GB HBM3",
            memory_total_bytes=H100,
            mig=slice_(gi, "3g.40gb", f"MIG-{tag}"),
        )
        gpustate.write_state(tmp_path, 0, st, tag=tag)
    nvml = started(FakeNvml(1, state_dir=tmp_path))
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetMigMode(gpu) == [1, 1]
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(gpu) == 7
    # NVML does not report utilization rates on a GPU in MIG mode
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetUtilizationRates(gpu)
    assert nvml.nvmlDeviceGetMemoryInfo(gpu, pynvml.nvmlMemory_v2).used == 56 * GIB
    assert nvml.nvmlDeviceGetPowerUsage(gpu) > 55_000  # the slices' work heats the card
    migs = [nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i) for i in range(2)]
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 2)
    assert [nvml.nvmlDeviceGetGpuInstanceId(m) for m in migs] == [1, 2]
    assert [nvml.nvmlDeviceGetUUID(m) for m in migs] == ["MIG-a", "MIG-b"]
    assert nvml.nvmlDeviceGetName(migs[0]) == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    first = nvml.nvmlDeviceGetMemoryInfo(migs[0], pynvml.nvmlMemory_v2)
    assert (first.total, first.used) == (40 * GIB, 36 * GIB)
    procs = nvml.nvmlDeviceGetComputeRunningProcesses(migs[1])
    assert [(p.pid, p.gpuInstanceId) for p in procs] == [(2, 2)]
    # per-device calls that a MIG device does not answer, as on real hardware
    for call in (nvml.nvmlDeviceGetUtilizationRates, nvml.nvmlDeviceGetPowerUsage):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call(migs[0])
    assert nvml.nvmlDeviceGetHandleByUUID("MIG-b") == migs[1]
    # the slices go away: the GPU leaves MIG mode in the fake's eyes
    for tag in ("a", "b"):
        gpustate.remove_state(tmp_path, 0, tag)
    assert nvml.nvmlDeviceGetMigMode(gpu) == [0, 0]


def exited_pid() -> int:
    """The pid of a process that has come and gone (reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_simulators_fragment_is_dropped_once_silent(tmp_path: Path) -> None:
    now = time.time()
    dead = exited_pid()
    # silent for 10 s and its process gone: a SIGKILLed simulator's; the GPU freed it
    gpustate.write_state(tmp_path, 0, worker(dead, 8, 0.5, updated=now - 10), tag="killed")
    # silent but its process alive: a stopped (hung) engine still holds its memory
    gpustate.write_state(tmp_path, 0, worker(os.getpid(), 4, 0.0, updated=now - 10), tag="hung")
    # just written with a dead pid: not judged yet
    gpustate.write_state(tmp_path, 1, worker(dead, 2, 0.1), tag="fresh")
    # the format before fragments is never dropped
    gpustate.write_state(tmp_path, 1, worker(dead, 1, 0.1, updated=0.0))
    nvml = started(FakeNvml(2, state_dir=tmp_path))
    h0, h1 = nvml.nvmlDeviceGetHandleByIndex(0), nvml.nvmlDeviceGetHandleByIndex(1)
    assert [p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(h0)] == [os.getpid()]
    assert nvml.nvmlDeviceGetMemoryInfo(h0, pynvml.nvmlMemory_v2).used == 4 * GIB
    assert nvml.nvmlDeviceGetMemoryInfo(h1, pynvml.nvmlMemory_v2).used == 3 * GIB
