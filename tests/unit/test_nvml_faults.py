"""The NVML source under faults (issue 9): each NVML failure reported once, survived, recovered."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import time
import tracemalloc
from collections.abc import Callable

import pynvml
import pytest

from inferwatch.agent.collectors.nvml import MAX_XID_CODES, NvmlSource
from inferwatch.sim.fakegpu import FakeNvml
from inferwatch.sim.gpustate import GIB, SimGpuProcess, SimGpuState

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]
LOGGER = "inferwatch.agent.collectors.base"


def series(src: NvmlSource) -> Series:
    return {
        (s.name, frozenset(s.labels.items())): s.value for f in src.families() for s in f.samples
    }


def of_gpu(data: Series, gpu: str) -> dict[str, float]:
    """name -> value for GPU ``gpu`` (whole-GPU series without extra labels)."""
    out = {}
    for (name, labels), v in data.items():
        ls = dict(labels)
        if ls.get("gpu") == gpu and set(ls) == {"gpu", "uuid"}:
            out[name] = v
    return out


def warnings(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(1 for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage())


async def refresh_until(src: NvmlSource, cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Run passes until ``cond`` holds, failing at the deadline (never a bare sleep)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        await src.refresh()
        await asyncio.sleep(0.005)


def loaded(pid: int) -> SimGpuState:
    return SimGpuState(
        memory_used_bytes=8 * GIB,
        utilization_gpu=0.5,
        sm_active=0.5,
        processes=[SimGpuProcess(pid=pid, used_bytes=8 * GIB, sm_utilization=0.5)],
    )


async def test_not_supported_leaves_that_series_absent_and_is_not_retried(
    make_source: Callable[..., NvmlSource], caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml(2)
    fake.fail(0, "nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED)
    src = make_source(fake, interval=0.01)
    for _ in range(3):
        await src.refresh()
    data = series(src)
    assert "inferwatch_gpu_power_watts" not in of_gpu(data, "0")
    assert of_gpu(data, "1")["inferwatch_gpu_power_watts"] == 60.0
    assert of_gpu(data, "0")["inferwatch_gpu_up"] == 1.0
    assert of_gpu(data, "0")["inferwatch_gpu_temperature_celsius"] == 40.0
    # GPU 0 was asked once, GPU 1 on every pass.
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1 + 3
    assert src.health.errors == {"not_supported": 1}
    assert warnings(caplog, "not supported") == 0  # expected on many GPUs: info, not warning


async def test_a_failing_call_is_counted_each_time_logged_once_and_recovers(
    make_source: Callable[..., NvmlSource], caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml(1)
    caplog.set_level(logging.INFO)
    fake.fail(0, "nvmlDeviceGetTemperature", pynvml.NVML_ERROR_UNKNOWN, times=3)
    src = make_source(fake, interval=0.01)
    for _ in range(3):
        await src.refresh()
        assert "inferwatch_gpu_temperature_celsius" not in of_gpu(series(src), "0")
    assert src.health.errors == {"unknown": 3}
    assert warnings(caplog, "gpu0:temperature: NVML error 999 (Unknown Error)") == 1
    await src.refresh()
    assert of_gpu(series(src), "0")["inferwatch_gpu_temperature_celsius"] == 40.0
    assert "nvml gpu0:temperature: recovered" in caplog.messages


async def test_a_lost_gpu_is_down_alone_then_comes_back(
    make_source: Callable[..., NvmlSource], caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml(2)
    pid = os.getpid()
    fake.set_state(0, loaded(pid))
    fake.set_state(1, loaded(pid))
    src = make_source(fake, interval=0.01)
    await src.refresh()
    await src.refresh()
    assert of_gpu(series(src), "0")["inferwatch_gpu_sm_active_ratio"] == 0.5

    fake.lose(0)
    for _ in range(5):
        await src.refresh()
    data = series(src)
    gpu0 = {name for (name, labels), _ in data.items() if dict(labels).get("gpu") == "0"}
    # Down, described, and nothing else measured for it.
    assert gpu0 == {"inferwatch_gpu_up", "inferwatch_gpu_info"}
    assert of_gpu(data, "0")["inferwatch_gpu_up"] == 0.0
    assert of_gpu(data, "1")["inferwatch_gpu_up"] == 1.0
    assert of_gpu(data, "1")["inferwatch_gpu_utilization_ratio"] == 0.5
    assert src.health.errors.get("gpu_lost", 0) >= 1
    assert warnings(caplog, "GPU unusable") == 1
    assert src.health.failing("gpu0") == "gpu_lost"

    fake.restore(0)
    await refresh_until(src, lambda: of_gpu(series(src), "0").get("inferwatch_gpu_up") == 1.0)
    await refresh_until(src, lambda: "inferwatch_gpu_sm_active_ratio" in of_gpu(series(src), "0"))
    data = series(src)
    assert of_gpu(data, "0")["inferwatch_gpu_memory_used_bytes"] == 8 * GIB
    assert src.health.failing("gpu0") is None
    assert warnings(caplog, "GPU unusable") == 1


async def test_a_lost_gpu_is_retried_with_backoff_not_every_pass(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    src = make_source(fake, interval=0.01)
    src.gpu_retry = 3600.0
    await src.refresh()
    fake.lose(0)
    await src.refresh()

    def nvml_calls() -> int:  # the XID thread's waits run on their own clock
        return sum(v for k, v in fake.calls.items() if k != "nvmlEventSetWait")

    before = nvml_calls()
    for _ in range(10):
        await src.refresh()
    # A lost GPU costs no NVML call at all until its retry is due.
    assert nvml_calls() == before
    assert of_gpu(series(src), "0")["inferwatch_gpu_up"] == 0.0


async def test_gpu_lost_at_start_is_down_and_opened_later(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(2)
    fake.lose(1)
    src = make_source(fake, interval=0.01)
    await src.refresh()
    data = series(src)
    assert of_gpu(data, "0")["inferwatch_gpu_up"] == 1.0
    assert of_gpu(data, "1") == {"inferwatch_gpu_up": 0.0}
    fake.restore(1)
    await refresh_until(src, lambda: of_gpu(series(src), "1").get("inferwatch_gpu_up") == 1.0)
    assert "inferwatch_gpu_power_watts" in of_gpu(series(src), "1")


async def test_no_library_means_no_gpu_series_one_log_line_and_rare_retries(
    make_source: Callable[..., NvmlSource], caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml(1, library=False)
    src = make_source(fake, interval=0.01)
    src.init_retry = 1.0
    for _ in range(5):
        await src.refresh()
    assert list(src.families()) == []
    assert src.health.errors == {"library_not_found": 1}
    assert fake.calls["nvmlInit"] == 1  # the next attempt is a second away, not every pass
    assert warnings(caplog, "NVML unavailable") == 1
    assert "libnvidia-ml.so.1" in caplog.text
    assert src.health.last_success is None

    fake.restore_library()
    await refresh_until(src, lambda: bool(list(src.families())))
    assert of_gpu(series(src), "0")["inferwatch_gpu_up"] == 1.0
    assert src.health.failing() is None
    assert src.health.last_success is not None


async def test_the_real_pynvml_without_a_driver_reports_library_not_found(
    make_source: Callable[..., NvmlSource],
) -> None:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("an NVIDIA driver is installed here; this test needs a machine without one")
    src = make_source(pynvml, interval=0.01)
    await src.refresh()
    assert list(src.families()) == []
    assert src.health.errors == {"library_not_found": 1}


async def test_driver_gone_mid_run_drops_all_gpu_series_then_reinitialises(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(2)
    src = make_source(fake, interval=0.01, slow_interval=0.01)
    await src.refresh()
    assert len([k for k in series(src) if k[0] == "inferwatch_gpu_up"]) == 2
    fake.fail(1, "nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_DRIVER_NOT_LOADED, times=1)
    await src.refresh()
    assert list(src.families()) == []
    assert src.health.errors["driver_not_loaded"] == 1
    await refresh_until(src, lambda: len(series(src)) > 0)
    assert of_gpu(series(src), "1")["inferwatch_gpu_up"] == 1.0
    assert fake.calls["nvmlInit"] == 2


async def test_a_slow_call_neither_blocks_the_loop_nor_stacks_passes(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    src = make_source(fake, interval=0.01)
    await src.refresh()
    release = fake.hold(0, "nvmlDeviceGetPowerUsage")
    first = asyncio.create_task(src.refresh())
    deadline = time.monotonic() + 10
    while fake.calls["nvmlDeviceGetPowerUsage"] < 2:  # the pass is inside the held call
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)
    # The loop is free (we are running), and a second pass is refused, not queued.
    for _ in range(3):
        await src.refresh()
    assert not first.done()
    assert src.health.errors == {"pass_overrun": 3}
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 2
    release.set()
    await first
    await src.refresh()
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 3
    assert src.health.failing("pass") is None


async def test_a_pass_past_its_timeout_serves_the_previous_readings(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    fake.set_state(0, SimGpuState(utilization_gpu=0.25))
    src = make_source(fake, interval=0.01)
    src.pass_timeout = 0.05
    await src.refresh()
    release = fake.hold(0, "nvmlDeviceGetPowerUsage")
    fake.set_state(0, SimGpuState(utilization_gpu=0.75))
    await src.refresh()  # returns at the timeout while the pass is held
    assert src.health.errors == {"timeout": 1}
    assert of_gpu(series(src), "0")["inferwatch_gpu_utilization_ratio"] == 0.25
    release.set()
    await refresh_until(
        src, lambda: of_gpu(series(src), "0")["inferwatch_gpu_utilization_ratio"] == 0.75
    )
    await src.refresh()  # the first pass that starts after the slow one clears the fault
    assert src.health.failing("pass") is None


async def test_refresh_never_raises_on_a_broken_backend(
    make_source: Callable[..., NvmlSource],
) -> None:
    src = make_source(object(), interval=0.01)
    await src.refresh()
    assert src.health.errors == {"internal": 1}
    assert list(src.families()) == []


async def test_an_xid_storm_is_counted_exactly_in_bounded_memory(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(2)
    src = make_source(fake, interval=0.01)
    await src.refresh()  # opens the GPUs and registers them for XID events
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        fake.push_xid(0, 79, 60_000)
        fake.push_xid(0, 13, 30_000)
        for n in range(10_000):  # garbage codes: bounded by MAX_XID_CODES, the rest "other"
            fake.push_xid(1, 100_000 + n)
        deadline = time.monotonic() + 120
        while fake.pending_events():
            assert time.monotonic() < deadline, "the event thread did not drain the storm"
            await asyncio.sleep(0.05)
        await src.refresh()
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    data = series(src)
    xids = {
        (dict(ls)["gpu"], dict(ls)["xid"]): v
        for (name, ls), v in data.items()
        if name == "inferwatch_gpu_xid_errors_total"
    }
    assert xids[("0", "79")] == 60_000
    assert xids[("0", "13")] == 30_000
    gpu1 = {xid: v for (gpu, xid), v in xids.items() if gpu == "1"}
    assert len(gpu1) == MAX_XID_CODES + 1
    assert sum(gpu1.values()) == 10_000
    assert gpu1["other"] == 10_000 - MAX_XID_CODES
    # Counters, not lists: what stays allocated is independent of the number of events.
    assert after - before < 256 * 1024, f"{after - before} bytes kept after 100,000 events"
