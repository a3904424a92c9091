"""Issue 23 item 3 on the NVML backend: P-state, fan and PCIe throughput, where NVML has them.

FakeNvml answers as NVML does (``nvmlDeviceGetPerformanceState`` 0-15 or 32
for unknown, ``nvmlDeviceGetFanSpeed`` in percent and NOT_SUPPORTED on
passively cooled boards such as the H200 SXM, ``nvmlDeviceGetPcieThroughput`` in
KB/s over a 20 ms sample); the same families as the dcgm-exporter backend.
"""

from __future__ import annotations

from collections.abc import Callable

from inferwatch.agent.collectors.nvml import NvmlSource
from inferwatch.sim.fakegpu import FakeNvml
from inferwatch.sim.gpustate import SimGpuState


def _series(src: NvmlSource) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value for f in src.families() for s in f.samples
    }


def _only(data: dict, name: str, **labels: str) -> float | None:  # type: ignore[type-arg]
    hits = [v for (n, ls), v in data.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) <= 1
    return hits[0] if hits else None


async def test_pstate_fan_and_pcie_have_the_boards_values(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(2)
    fake.set_state(
        0,
        SimGpuState(
            performance_state=2,
            fan_speed=0.45,
            pcie_tx_bytes_per_second=1024 * 300_000,
            pcie_rx_bytes_per_second=1024 * 12_000,
        ),
    )
    fake.set_state(
        1,
        SimGpuState(
            performance_state=None,
            fan_speed=None,
            pcie_tx_bytes_per_second=None,
            pcie_rx_bytes_per_second=None,
        ),
    )
    src = make_source(fake, interval=0.01)
    await src.refresh()
    data = _series(src)
    assert _only(data, "inferwatch_gpu_performance_state", gpu="0") == 2
    assert _only(data, "inferwatch_gpu_fan_speed_ratio", gpu="0") == 0.45
    tx = _only(data, "inferwatch_gpu_pcie_throughput_bytes_per_second", gpu="0", direction="tx")
    rx = _only(data, "inferwatch_gpu_pcie_throughput_bytes_per_second", gpu="0", direction="rx")
    assert (tx, rx) == (1024 * 300_000, 1024 * 12_000)
    # GPU 1 does not offer them: absent, never 0, and asked only once
    for name in (
        "inferwatch_gpu_performance_state",
        "inferwatch_gpu_fan_speed_ratio",
        "inferwatch_gpu_pcie_throughput_bytes_per_second",
    ):
        assert _only(data, name, gpu="1") is None
    before = fake.calls["nvmlDeviceGetFanSpeed"]
    await src.refresh()
    assert fake.calls["nvmlDeviceGetFanSpeed"] == before + 1  # GPU 0 only


async def test_pcie_is_sampled_with_the_activity_readings(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(1)
    fake.set_state(0, SimGpuState(pcie_tx_bytes_per_second=1024.0, pcie_rx_bytes_per_second=0.0))
    src = make_source(fake, interval=0.01, activity_interval=3600.0)
    for _ in range(3):
        await src.refresh()
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 2  # tx and rx, first pass only
    assert (
        _only(_series(src), "inferwatch_gpu_pcie_throughput_bytes_per_second", direction="tx")
        == 1024.0
    )
