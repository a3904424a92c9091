"""The NVML source on the fake backend: every GPU series of the contract, with its value."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pynvml
import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from inferwatch.agent.collectors.nvml import NvmlSource, mig_profile
from inferwatch.agent.config import GpuConfig
from inferwatch.agent.wiring import load_backend
from inferwatch.sim.fakegpu import FakeNvml, default_uuid
from inferwatch.sim.gpustate import GIB, SimGpuProcess, SimGpuState, write_state

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]

#: METRICS.md, GPU table: the names the source must be able to export.
CONTRACT = {
    "inferwatch_gpu_info",
    "inferwatch_gpu_up",
    "inferwatch_gpu_utilization_ratio",
    "inferwatch_gpu_memory_busy_ratio",
    "inferwatch_gpu_sm_active_ratio",
    "inferwatch_gpu_sm_occupancy_ratio",
    "inferwatch_gpu_tensor_active_ratio",
    "inferwatch_gpu_dram_active_ratio",
    "inferwatch_gpu_memory_used_bytes",
    "inferwatch_gpu_memory_reserved_bytes",
    "inferwatch_gpu_memory_total_bytes",
    "inferwatch_gpu_memory_used_ratio",
    "inferwatch_gpu_power_watts",
    "inferwatch_gpu_power_limit_watts",
    "inferwatch_gpu_energy_joules_total",
    "inferwatch_gpu_temperature_celsius",
    "inferwatch_gpu_sm_clock_hertz",
    "inferwatch_gpu_memory_clock_hertz",
    "inferwatch_gpu_clock_event_active",
    "inferwatch_gpu_xid_errors_total",
    "inferwatch_gpu_xid_last_timestamp_seconds",
    "inferwatch_gpu_ecc_errors_total",
    "inferwatch_gpu_process_memory_used_bytes",
    "inferwatch_gpu_process_sm_utilization_ratio",
    # docs/metrics.md, Extensions (issue 23)
    "inferwatch_gpu_performance_state",
    "inferwatch_gpu_fan_speed_ratio",
    "inferwatch_gpu_pcie_throughput_bytes_per_second",
}


def series(src: NvmlSource) -> Series:
    out: Series = {}
    for fam in src.families():
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(data: Series, name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels``; None when absent."""
    hits = [
        v
        for (n, ls), v in data.items()
        if n == name and set(labels.items()) <= set(dict(ls).items())
    ]
    assert len(hits) <= 1, f"{name}{labels} matches {len(hits)} series"
    return hits[0] if hits else None


def labelsets(data: Series, name: str) -> list[dict[str, str]]:
    return [dict(ls) for (n, ls) in data if n == name]


def a_dead_pid() -> int:
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid += 1
    return pid


def busy_state(pid: int) -> SimGpuState:
    return SimGpuState(
        name="NVIDIA H200",
        uuid="GPU-11111111-2222-3333-4444-555555555555",
        pci_bus_id="00000000:1B:00.0",
        memory_total_bytes=140 * GIB,
        memory_reserved_bytes=GIB // 2,
        memory_used_bytes=70 * GIB,
        utilization_gpu=0.87,
        utilization_memory=0.42,
        sm_active=0.61,
        sm_occupancy=0.33,
        tensor_active=0.44,
        dram_active=0.52,
        power_watts=612.5,
        power_limit_watts=700.0,
        temperature_celsius=67.0,
        sm_clock_hz=1_980e6,
        memory_clock_hz=3_201e6,
        processes=[SimGpuProcess(pid=pid, used_bytes=60 * GIB, sm_utilization=0.75)],
    )


async def passes(src: NvmlSource, n: int) -> None:
    for _ in range(n):
        await src.refresh()


async def test_every_gpu_series_has_the_state_s_value(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    pid = os.getpid()
    fake.set_state(0, busy_state(pid))
    fake.set_clock_events(
        0, pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    )
    fake.set_ecc(0, corrected=7, uncorrected=2)
    src = make_source(fake, interval=0.01, slow_interval=0.0)
    await passes(src, 2)
    pushed = time.time()
    fake.push_xid(0, 79)
    await passes(src, 1)  # the event thread counts it; wait for it through the snapshot
    for _ in range(200):
        if value(series(src), "inferwatch_gpu_xid_errors_total", xid="79"):
            break
        await src.refresh()
    data = series(src)
    gpu = {"gpu": "0", "uuid": "GPU-11111111-2222-3333-4444-555555555555"}

    assert labelsets(data, "inferwatch_gpu_info") == [
        {
            **gpu,
            "name": "NVIDIA H200",
            "pci_bus_id": "00000000:1B:00.0",
            "driver_version": "fake",
            "mig_mode": "disabled",
        }
    ]
    expected = {
        "inferwatch_gpu_up": 1.0,
        "inferwatch_gpu_utilization_ratio": 0.87,
        "inferwatch_gpu_memory_busy_ratio": 0.42,
        "inferwatch_gpu_sm_active_ratio": 0.61,
        "inferwatch_gpu_sm_occupancy_ratio": 0.33,
        "inferwatch_gpu_tensor_active_ratio": 0.44,
        "inferwatch_gpu_dram_active_ratio": 0.52,
        "inferwatch_gpu_memory_used_bytes": 70 * GIB,
        "inferwatch_gpu_memory_reserved_bytes": GIB // 2,
        "inferwatch_gpu_memory_total_bytes": 140 * GIB,
        "inferwatch_gpu_memory_used_ratio": (70.5 * GIB) / (140 * GIB),
        "inferwatch_gpu_power_watts": 612.5,
        "inferwatch_gpu_power_limit_watts": 700.0,
        "inferwatch_gpu_temperature_celsius": 67.0,
        "inferwatch_gpu_sm_clock_hertz": 1_980e6,
        "inferwatch_gpu_memory_clock_hertz": 3_201e6,
    }
    for name, want in expected.items():
        assert value(data, name, **gpu) == pytest.approx(want), name
    assert value(data, "inferwatch_gpu_energy_joules_total", **gpu) is not None
    events = {
        ls["reason"]: v
        for ls, v in ((dict(k[1]), v) for k, v in data.items())
        if "reason" in ls and ls.get("gpu") == "0"
    }
    assert events == {
        "idle": 0.0,
        "sw_power_cap": 1.0,
        "hw_slowdown": 0.0,
        "sw_thermal": 0.0,
        "hw_thermal": 1.0,
        "power_brake": 0.0,
        "sync_boost": 0.0,
        "app_clocks": 0.0,
    }
    assert value(data, "inferwatch_gpu_ecc_errors_total", type="corrected", **gpu) == 7
    assert value(data, "inferwatch_gpu_ecc_errors_total", type="uncorrected", **gpu) == 2
    assert value(data, "inferwatch_gpu_xid_errors_total", xid="79", **gpu) == 1
    last_xid = value(data, "inferwatch_gpu_xid_last_timestamp_seconds", xid="79", **gpu)
    assert last_xid is not None and pushed <= last_xid <= time.time()
    proc = {**gpu, "pid": str(pid), "process": psutil.Process(pid).name()}
    assert value(data, "inferwatch_gpu_process_memory_used_bytes", **proc) == 60 * GIB
    assert value(data, "inferwatch_gpu_process_sm_utilization_ratio", **proc) == pytest.approx(0.75)
    assert {name for name, _ in data} == CONTRACT


async def test_exposition_is_valid_text_and_names_follow_the_contract(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(2)
    fake.set_state(0, busy_state(os.getpid()))
    src = make_source(fake, interval=0.01)
    await passes(src, 2)

    class Adapter:
        def collect(self):  # type: ignore[no-untyped-def]
            return src.families()

    registry = CollectorRegistry()
    registry.register(Adapter())
    text = generate_latest(registry).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert "inferwatch_gpu_energy_joules" in parsed  # the parser drops _total from counters
    assert parsed["inferwatch_gpu_energy_joules"].type == "counter"
    exported = {s.name for f in parsed.values() for s in f.samples}
    assert exported <= CONTRACT, exported - CONTRACT
    # GPU 1 is an idle A10: GPM absent, everything else there.
    assert exported >= CONTRACT - {
        "inferwatch_gpu_xid_errors_total",
        "inferwatch_gpu_xid_last_timestamp_seconds",
    }


async def test_gpm_is_absent_on_the_first_pass_and_present_after(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    fake.set_state(0, busy_state(os.getpid()))
    src = make_source(fake, interval=0.01)
    await src.refresh()
    first = series(src)
    assert value(first, "inferwatch_gpu_sm_active_ratio") is None
    assert value(first, "inferwatch_gpu_utilization_ratio") == pytest.approx(0.87)
    await src.refresh()
    second = series(src)
    assert value(second, "inferwatch_gpu_sm_active_ratio") == pytest.approx(0.61)
    assert value(second, "inferwatch_gpu_dram_active_ratio") == pytest.approx(0.52)


async def test_activity_readings_run_on_their_own_interval(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    fake.set_state(0, busy_state(os.getpid()))
    src = make_source(fake, interval=0.01, activity_interval=1.5)
    await passes(src, 5)  # milliseconds: all inside the first activity window
    # One activity pass so far: one GPM sample (no window yet), one SM-share read.
    assert fake.calls["nvmlGpmSampleGet"] == 1
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 1
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 5
    data = series(src)
    assert value(data, "inferwatch_gpu_sm_active_ratio") is None
    # The share read in the activity pass is exported on the passes between.
    assert value(data, "inferwatch_gpu_process_sm_utilization_ratio") == pytest.approx(0.75)

    deadline = time.monotonic() + 30
    while value(series(src), "inferwatch_gpu_sm_active_ratio") is None:
        assert time.monotonic() < deadline, "no second activity pass"
        await asyncio.sleep(0.05)
        await src.refresh()
    assert value(series(src), "inferwatch_gpu_sm_active_ratio") == pytest.approx(0.61)
    assert fake.calls["nvmlGpmSampleGet"] == 2
    assert fake.calls["nvmlDeviceGetUtilizationRates"] > 5


async def test_gpm_is_absent_where_unsupported_and_not_sampled(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)  # SimGpuState defaults: an A10 without GPM
    src = make_source(fake, interval=0.01)
    await passes(src, 3)
    data = series(src)
    for name in (
        "inferwatch_gpu_sm_active_ratio",
        "inferwatch_gpu_sm_occupancy_ratio",
        "inferwatch_gpu_tensor_active_ratio",
        "inferwatch_gpu_dram_active_ratio",
    ):
        assert value(data, name) is None
    assert fake.calls["nvmlGpmSampleGet"] == 0
    assert value(data, "inferwatch_gpu_up") == 1.0


async def test_gpm_metric_missing_on_the_device_is_absent_alone(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    state = busy_state(os.getpid())
    state.tensor_active = None
    fake.set_state(0, state)
    src = make_source(fake, interval=0.01)
    await passes(src, 2)
    data = series(src)
    assert value(data, "inferwatch_gpu_tensor_active_ratio") is None
    assert value(data, "inferwatch_gpu_sm_active_ratio") == pytest.approx(0.61)


async def test_worker_label_comes_from_pid_workers_at_families_time(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    mine, other = os.getpid(), a_dead_pid()
    fake.set_state(
        0,
        SimGpuState(
            processes=[
                SimGpuProcess(pid=mine, used_bytes=3 * GIB, sm_utilization=0.5),
                SimGpuProcess(pid=other, used_bytes=GIB, sm_utilization=0.1),
            ]
        ),
    )
    workers: dict[int, str] = {mine: "vllm-0"}
    src = make_source(fake, interval=0.01, pid_workers=lambda: workers)
    await src.refresh()
    data = series(src)
    rows = {ls["pid"]: ls for ls in labelsets(data, "inferwatch_gpu_process_memory_used_bytes")}
    assert rows[str(mine)]["worker"] == "vllm-0"
    assert rows[str(mine)]["process"] == psutil.Process(mine).name()
    assert "worker" not in rows[str(other)]
    assert rows[str(other)]["process"] == "unknown"
    assert value(data, "inferwatch_gpu_process_memory_used_bytes", pid=str(other)) == GIB
    assert value(
        data, "inferwatch_gpu_process_sm_utilization_ratio", pid=str(mine)
    ) == pytest.approx(0.5)

    # The join is read when families are built, without another NVML pass.
    workers[other] = "vllm-1"
    rows = {
        ls["pid"]: ls for ls in labelsets(series(src), "inferwatch_gpu_process_memory_used_bytes")
    }
    assert rows[str(other)]["worker"] == "vllm-1"


async def test_a_process_that_leaves_takes_its_series_with_it(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    fake.set_state(0, SimGpuState(processes=[SimGpuProcess(pid=os.getpid(), used_bytes=GIB)]))
    src = make_source(fake, interval=0.01)
    await src.refresh()
    assert labelsets(series(src), "inferwatch_gpu_process_memory_used_bytes")
    fake.set_state(0, SimGpuState())
    await src.refresh()
    data = series(src)
    assert labelsets(data, "inferwatch_gpu_process_memory_used_bytes") == []
    assert labelsets(data, "inferwatch_gpu_process_sm_utilization_ratio") == []


async def test_state_files_written_by_a_simulator_are_read(
    tmp_path: Path, make_source: Callable[..., NvmlSource]
) -> None:
    write_state(
        tmp_path,
        0,
        SimGpuState(memory_used_bytes=5 * GIB, utilization_gpu=0.25, power_watts=90.0),
    )
    fake = FakeNvml(2, state_dir=tmp_path)
    src = make_source(fake, interval=0.01)
    await src.refresh()
    data = series(src)
    assert value(data, "inferwatch_gpu_utilization_ratio", gpu="0") == pytest.approx(0.25)
    assert value(data, "inferwatch_gpu_memory_used_bytes", gpu="0") == 5 * GIB
    assert value(data, "inferwatch_gpu_power_watts", gpu="0") == 90.0
    # No file: an idle GPU with the defaults and a stable fake UUID.
    assert value(data, "inferwatch_gpu_utilization_ratio", gpu="1") == 0.0
    assert value(data, "inferwatch_gpu_memory_used_bytes", gpu="1") == 0.0
    assert labelsets(data, "inferwatch_gpu_up")[1]["uuid"] == default_uuid(1)
    assert default_uuid(1).startswith("GPU-fake-1")

    write_state(tmp_path, 0, SimGpuState(memory_used_bytes=9 * GIB, utilization_gpu=0.75))
    await src.refresh()
    data = series(src)
    assert value(data, "inferwatch_gpu_utilization_ratio", gpu="0") == pytest.approx(0.75)
    assert value(data, "inferwatch_gpu_memory_used_bytes", gpu="0") == 9 * GIB


async def test_mig_instances_are_their_own_series(make_source: Callable[..., NvmlSource]) -> None:
    fake = FakeNvml(1)
    fake.set_state(0, busy_state(os.getpid()))
    pid = os.getpid()
    fake.add_mig(
        0,
        gpu_instance=3,
        profile="3g.71gb",
        state=SimGpuState(
            memory_total_bytes=71 * GIB,
            memory_reserved_bytes=0,
            memory_used_bytes=30 * GIB,
            sm_active=0.4,
            processes=[SimGpuProcess(pid=pid, used_bytes=30 * GIB)],
        ),
    )
    fake.add_mig(
        0,
        gpu_instance=5,
        profile="1g.18gb",
        state=SimGpuState(memory_total_bytes=18 * GIB, memory_reserved_bytes=0),
    )
    src = make_source(fake, interval=0.01)
    await passes(src, 2)
    data = series(src)
    infos = {ls["uuid"]: ls for ls in labelsets(data, "inferwatch_gpu_info")}
    parent = infos["GPU-11111111-2222-3333-4444-555555555555"]
    assert parent["mig_mode"] == "enabled"
    assert "gpu_instance" not in parent
    migs = [ls for ls in infos.values() if ls["uuid"].startswith("MIG-")]
    assert sorted((m["gpu_instance"], m["mig_profile"], m["gpu"]) for m in migs) == [
        ("3", "3g.71gb", "0"),
        ("5", "1g.18gb", "0"),
    ]
    big = next(m["uuid"] for m in migs if m["gpu_instance"] == "3")
    mig = {"uuid": big, "gpu_instance": "3", "mig_profile": "3g.71gb"}
    assert value(data, "inferwatch_gpu_memory_used_bytes", **mig) == 30 * GIB
    assert value(data, "inferwatch_gpu_memory_total_bytes", **mig) == 71 * GIB
    assert value(data, "inferwatch_gpu_memory_used_ratio", **mig) == pytest.approx(30 / 71)
    assert value(data, "inferwatch_gpu_sm_active_ratio", **mig) == pytest.approx(0.4)
    assert value(data, "inferwatch_gpu_up", **mig) == 1.0
    # Processes are listed under their MIG device, not twice.
    procs = labelsets(data, "inferwatch_gpu_process_memory_used_bytes")
    assert [(p["uuid"], p["pid"], p["gpu_instance"]) for p in procs] == [(big, str(pid), "3")]
    # A GPU in MIG mode has no whole-GPU utilization.
    assert value(data, "inferwatch_gpu_utilization_ratio", gpu="0") is None
    assert value(data, "inferwatch_gpu_power_watts", gpu="0") == pytest.approx(612.5)


def test_mig_profile_is_read_from_the_device_name() -> None:
    assert mig_profile("NVIDIA H200 MIG 1g.18gb") == "1g.18gb"
    assert mig_profile("NVIDIA A100-SXM4-80GB MIG 7g.80gb") == "7g.80gb"
    assert mig_profile("NVIDIA H200") == "unknown"


async def test_memory_falls_back_to_v1_where_v2_is_unsupported(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    fake.set_state(
        0,
        SimGpuState(
            memory_total_bytes=24 * GIB, memory_reserved_bytes=GIB, memory_used_bytes=11 * GIB
        ),
    )
    fake.fail(0, "nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_NOT_SUPPORTED)
    src = make_source(fake, interval=0.01)
    await passes(src, 2)
    data = series(src)
    # Version 1's "used" includes the driver's reservation; there is no reserved figure.
    assert value(data, "inferwatch_gpu_memory_used_bytes") == 12 * GIB
    assert value(data, "inferwatch_gpu_memory_reserved_bytes") is None
    assert value(data, "inferwatch_gpu_memory_used_ratio") == pytest.approx(0.5)


async def test_slow_calls_run_on_the_slow_interval_only(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(2)
    src = make_source(fake, interval=0.01, slow_interval=3600.0)
    await passes(src, 4)
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 8
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 2
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 4
    assert fake.calls["nvmlDeviceGetEnforcedPowerLimit"] == 2
    # Static facts are read once, when the GPU is opened.
    assert fake.calls["nvmlDeviceGetUUID"] == 2
    assert fake.calls["nvmlDeviceGetName"] == 2
    # The cached slow readings are still exported on every pass.
    assert value(series(src), "inferwatch_gpu_power_limit_watts", gpu="1") == 150.0


async def test_energy_counter_grows_with_power_over_time(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    fake.set_state(0, SimGpuState(power_watts=500.0))
    src = make_source(fake, interval=0.01, slow_interval=0.0)
    await src.refresh()
    first = value(series(src), "inferwatch_gpu_energy_joules_total")
    assert first is not None
    for _ in range(500):
        await src.refresh()
        later = value(series(src), "inferwatch_gpu_energy_joules_total")
        assert later is not None and later >= first
        if later > first:
            break
    assert later > first


async def test_stop_frees_what_the_source_took(make_source: Callable[..., NvmlSource]) -> None:
    fake = FakeNvml(2)
    fake.set_state(0, busy_state(os.getpid()))
    src = make_source(fake, interval=0.01)
    await passes(src, 2)
    threads = [t for t in threading.enumerate() if t.name == "inferwatch-nvml-xid"]
    assert len(threads) == 1 and threads[0].is_alive()
    await src.stop()
    assert not threads[0].is_alive()
    assert fake.calls["nvmlGpmSampleAlloc"] == fake.calls["nvmlGpmSampleFree"] == 2
    assert fake.calls["nvmlShutdown"] == 1
    assert fake.calls["nvmlEventSetFree"] == 1


def test_load_backend(tmp_path: Path) -> None:
    fake = load_backend(GpuConfig(backend="fake", fake_count=3, fake_state_dir=str(tmp_path)))
    assert isinstance(fake, FakeNvml)
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 3
    assert fake.state_dir == str(tmp_path)
    assert load_backend(GpuConfig(backend="nvml")) is pynvml
    assert load_backend(GpuConfig(backend="none")) is None
    with pytest.raises(ValueError, match="nvml, fake or none"):
        load_backend(GpuConfig(backend="cuda"))


def test_the_nvml_source_imports_no_simulator() -> None:
    """The wiring picks the backend: collectors/nvml/ stays free of sim/ (issue 15)."""
    import ast

    import inferwatch.agent.collectors.nvml as nvml_module

    package = "inferwatch.agent.collectors.nvml"
    files = sorted(Path(nvml_module.__file__).parent.glob("*.py"))
    assert len(files) > 1, "collectors/nvml/ is a package of several modules"
    imported: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                # resolve relative imports against the package (level 1 = the package itself)
                base = package.rsplit(".", node.level - 1)[0] if node.level else ""
                module = ".".join(part for part in (base, node.module or "") if part)
                imported |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    assert "inferwatch.agent.collectors.nvml.calls" in imported  # the walk sees relative imports
    assert not {name for name in imported if name and name.startswith("inferwatch.sim")}


def test_fake_raises_real_pynvml_errors_and_constants() -> None:
    fake = FakeNvml(1)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.fail(0, "nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, times=1)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetPowerUsage(handle)
    assert fake.nvmlDeviceGetPowerUsage(handle) == 60_000
    assert fake.NVML_CLOCK_SM == pynvml.NVML_CLOCK_SM
    with pytest.raises(AttributeError):
        fake.nvmlDeviceGetBAR1MemoryInfo  # noqa: B018 - a function the fake leaves out


async def test_xid_timestamp_is_the_last_event_s_time(
    make_source: Callable[..., NvmlSource],
) -> None:
    """The gauge moves to each new event of a code: alerts key on 'within the window'."""
    fake = FakeNvml(1)
    src = make_source(fake, interval=0.01)
    await src.refresh()

    async def xid_count(n: int) -> Series:
        deadline = time.monotonic() + 20
        while True:
            await src.refresh()
            data = series(src)
            if value(data, "inferwatch_gpu_xid_errors_total", xid="48") == n:
                return data
            assert time.monotonic() < deadline, f"XID count never reached {n}"
            await asyncio.sleep(0.01)

    fake.push_xid(0, 48)
    first = value(await xid_count(1), "inferwatch_gpu_xid_last_timestamp_seconds", xid="48")
    assert first is not None
    second_pushed = time.time()
    assert second_pushed > first
    fake.push_xid(0, 48)
    data = await xid_count(2)
    second = value(data, "inferwatch_gpu_xid_last_timestamp_seconds", xid="48")
    assert second is not None and second >= second_pushed > first
    # another code keeps its own time; the first code's is untouched by it
    fake.push_xid(0, 79)
    deadline = time.monotonic() + 20
    while value(series(src), "inferwatch_gpu_xid_last_timestamp_seconds", xid="79") is None:
        assert time.monotonic() < deadline
        await src.refresh()
        await asyncio.sleep(0.01)
    assert value(series(src), "inferwatch_gpu_xid_last_timestamp_seconds", xid="48") == second
