"""The simulated GPU coupled to the engine: the state files the fake NVML backend reads."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from inferwatch.errors import ConfigError
from inferwatch.sim import gpustate
from inferwatch.sim.config import GIB, GPU_MODELS, MigPlacement, SimConfig
from inferwatch.sim.gpu import GpuActivity, gpu_state, memory_used, next_temperature, utilization
from inferwatch.sim.stats import EngineSnapshot
from inferwatch.sim.worker import SimWorker

CFG = SimConfig()


def snap(running: int = 0, waiting: int = 0, blocks: int = 0) -> EngineSnapshot:
    return EngineSnapshot(
        engine=0,
        running=running,
        waiting=waiting,
        blocks_in_use=blocks,
        kv_usage=blocks / CFG.blocks,
        num_gpu_blocks=CFG.blocks,
        max_num_seqs=CFG.max_num_seqs,
    )


def vram_ratio(state: gpustate.SimGpuState) -> float:
    """What the agent calls inferwatch_gpu_memory_used_ratio."""
    return (state.memory_used_bytes + state.memory_reserved_bytes) / state.memory_total_bytes


def state_for(
    s: EngineSnapshot, busy: float, prefill: float = 0.0, cfg: SimConfig = CFG, **where: Any
) -> gpustate.SimGpuState:
    """``gpu_state`` of ``cfg`` in one step; ``where`` overrides GPU 0, pid 4242 at 50 degrees."""
    place = {"gpu_index": 0, "pid": 4242, "process_name": "python3", "temperature": 50.0}
    return gpu_state(cfg, s, GpuActivity(busy, prefill), **{**place, "now": 1.0, **where})


def test_utilization_follows_batch_occupancy_with_a_floor() -> None:
    assert utilization(snap(running=0), 0.0) == 0.0
    one = utilization(snap(running=1), 1.0)
    half = utilization(snap(running=10), 1.0)
    assert 0.3 <= one < half < utilization(snap(running=20), 1.0) == 1.0
    assert utilization(snap(running=20), 0.5) == 0.5  # busy half the time


def test_memory_is_the_reservation_from_start_whatever_the_kv_cache_holds() -> None:
    # vLLM takes gpu_memory_utilization x the card at start; the KV cache fills inside it
    reserved = int(0.95 * 24 * GIB)
    idle = state_for(snap(), 0.0)
    full = state_for(snap(running=20, waiting=50, blocks=int(0.95 * CFG.blocks)), 1.0)
    assert idle.memory_used_bytes == full.memory_used_bytes == memory_used(CFG) == reserved
    assert idle.processes[0].used_bytes == reserved
    assert abs(vram_ratio(idle) - (0.95 + 0.5 / 24)) < 1e-9  # plus the driver's 512 MiB
    # the KV pool is what the reservation leaves after weights and overhead
    assert CFG.kv_pool_bytes == reserved - int(9.5 * GIB)
    half = dataclasses.replace(CFG, gpu_memory_utilization=0.45, num_gpu_blocks=None)
    assert memory_used(half) == int(0.45 * 24 * GIB) and half.blocks < CFG.blocks


def test_tensor_parallel_splits_the_weights_and_multiplies_the_kv_pool() -> None:
    tp = dataclasses.replace(CFG, tensor_parallel=4, num_gpu_blocks=None)
    # each GPU reserves the same share; a rank holds a quarter of the weights
    assert memory_used(tp) == memory_used(CFG)
    assert tp.resident_per_gpu == 2 * GIB + int(1.5 * GIB)
    assert tp.kv_pool_bytes == 4 * (tp.reserved_per_gpu - tp.resident_per_gpu)
    assert tp.blocks > 4 * CFG.blocks  # less weight per GPU leaves more room for KV
    assert tp.compute_share == 4.0


def test_a_mig_slice_reserves_its_share_of_the_slice() -> None:
    h100 = dataclasses.replace(CFG, gpu=GPU_MODELS["h100"], num_gpu_blocks=None)
    on_slice = dataclasses.replace(h100, mig=MigPlacement(1, "3g.40gb"), gpu_memory_utilization=0.9)
    assert on_slice.device_bytes == 40 * GIB
    assert memory_used(on_slice) == int(0.9 * 40 * GIB)
    assert on_slice.compute_share == 3 / 7
    st = state_for(snap(running=5), 1.0, cfg=on_slice, gpu_index=2, host="/h")
    assert st.mig is not None and st.mig.gpu_instance == 1 and st.mig.profile == "3g.40gb"
    assert st.mig.memory_total_bytes == 40 * GIB and st.memory_total_bytes == 80 * GIB
    assert st.mig.uuid.startswith("MIG-") and st.uuid.startswith("GPU-")


@pytest.mark.parametrize(
    ("overrides", "flag"),
    [
        ({"mig": MigPlacement(0, "3g.40gb")}, "--gpu-model"),  # an A10 has no MIG
        ({"gpu": GPU_MODELS["h100"], "mig": MigPlacement(0, "9g.40gb")}, "--mig"),
        (
            {"gpu": GPU_MODELS["h100"], "mig": MigPlacement(0, "1g.10gb")},
            "--gpu-memory-utilization",
        ),
        (
            {"gpu": GPU_MODELS["h100"], "mig": MigPlacement(0, "3g.40gb"), "tensor_parallel": 2},
            "--mig",
        ),
        ({"tensor_parallel": 0}, "--tensor-parallel"),
    ],
)
def test_bad_layouts_are_refused_naming_the_flag(overrides: dict, flag: str) -> None:
    cfg = dataclasses.replace(CFG, **overrides)
    with pytest.raises(ConfigError) as err:
        cfg.validate()
    assert flag in str(err.value)


def test_state_fields_are_plausible() -> None:
    busy = state_for(snap(running=15, blocks=300), 1.0, prefill=0.5)
    idle = state_for(snap(), 0.0)
    assert busy.processes[0].pid == 4242
    assert busy.processes[0].used_bytes == busy.memory_used_bytes
    assert busy.power_watts > idle.power_watts and busy.power_watts <= busy.power_limit_watts
    assert busy.sm_active is not None and 0 < busy.sm_active <= busy.utilization_gpu
    assert busy.tensor_active is not None and busy.dram_active is not None
    assert busy.sm_clock_hz > idle.sm_clock_hz
    no_gpm = state_for(
        snap(running=3),
        1.0,
        cfg=dataclasses.replace(CFG, gpu=dataclasses.replace(CFG.gpu, gpm=False)),
    )
    assert no_gpm.sm_active is None and no_gpm.dram_active is None
    assert next_temperature(40.0, 1.0, 1000.0) > next_temperature(40.0, 1.0, 1.0) > 40.0


async def test_worker_writes_its_gpu_state_while_serving(tmp_path: Path) -> None:
    cfg = SimConfig(
        port=0,
        time_scale=0.02,
        cold_start_requests=0,
        gpu_state_dir=str(tmp_path),
        gpu_index=3,
        data_parallel=2,
        num_gpu_blocks=256,
    )
    async with SimWorker(cfg) as w:
        idle = gpustate.read_state(tmp_path, 3)
        assert idle is not None and idle.utilization_gpu == 0.0
        assert idle.memory_used_bytes == cfg.reserved_per_gpu
        assert [p.pid for p in idle.processes] == [os.getpid()]
        # one fragment per GPU, tagged with the worker's port
        assert gpustate.state_path(tmp_path, 3, w.port).exists()
        assert gpustate.read_state(tmp_path, 4) is not None  # engine 1's GPU

        body = {"prompt": " ".join(["word"] * 1500), "max_tokens": 2000}
        async with aiohttp.ClientSession() as s:
            pending = [
                asyncio.ensure_future(s.post(f"{w.url}/v1/completions", json=body))
                for _ in range(2)
            ]
            seen: list[gpustate.SimGpuState] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while loop.time() < deadline:
                st = gpustate.read_state(tmp_path, 3)
                if st is not None:
                    seen.append(st)
                    if st.utilization_gpu > 0 and w.cores[0].snapshot().blocks_in_use > 0:
                        break
                await asyncio.sleep(0.05)
            for p in pending:
                p.cancel()
        busy = seen[-1]
        assert busy.utilization_gpu > 0
        # the KV cache fills inside the reservation: NVML memory does not move
        assert busy.memory_used_bytes == idle.memory_used_bytes
        assert busy.processes[0].used_bytes == busy.memory_used_bytes
        assert busy.updated >= idle.updated
    # a stopped worker's processes free their GPUs
    assert gpustate.read_state(tmp_path, 3) is None
    assert gpustate.read_state(tmp_path, 4) is None
