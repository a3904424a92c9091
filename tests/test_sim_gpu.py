"""The simulated GPU coupled to the engine: the state files the fake NVML backend reads."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import aiohttp

from inferwatch.sim import gpustate
from inferwatch.sim.config import GIB, SimConfig
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


def state_for(s: EngineSnapshot, busy: float, prefill: float = 0.0) -> gpustate.SimGpuState:
    return gpu_state(
        CFG,
        s,
        GpuActivity(busy, prefill),
        gpu_index=0,
        pid=4242,
        process_name="python3",
        temperature=50.0,
        now=1.0,
    )


def test_utilization_follows_batch_occupancy_with_a_floor() -> None:
    assert utilization(snap(running=0), 0.0) == 0.0
    one = utilization(snap(running=1), 1.0)
    half = utilization(snap(running=10), 1.0)
    assert 0.3 <= one < half < utilization(snap(running=20), 1.0) == 1.0
    assert utilization(snap(running=20), 0.5) == 0.5  # busy half the time


def test_default_sizing_puts_overload_above_92_percent_and_idle_far_below() -> None:
    # a 7B INT8 model on a 24 GB card: weights + overhead alone are about 42 %
    idle = state_for(snap(), 0.0)
    assert 0.40 < vram_ratio(idle) < 0.45
    assert idle.memory_used_bytes == CFG.resident_bytes == int(9.5 * GIB)
    # a KV cache that is 95 % full (what overload with preemptions looks like)
    full = state_for(snap(running=20, waiting=50, blocks=int(0.95 * CFG.blocks)), 1.0)
    assert vram_ratio(full) > 0.92
    # steady traffic (a fifth of the cache) stays in the healthy band
    steady = state_for(snap(running=8, blocks=CFG.blocks // 5), 1.0)
    assert 0.5 < vram_ratio(steady) < 0.85
    assert memory_used(CFG, snap(blocks=CFG.blocks)) <= CFG.gpu_memory_utilization * 24 * GIB


def test_state_fields_are_plausible() -> None:
    busy = state_for(snap(running=15, blocks=300), 1.0, prefill=0.5)
    idle = state_for(snap(), 0.0)
    assert busy.processes[0].pid == 4242
    assert busy.processes[0].used_bytes == busy.memory_used_bytes
    assert busy.power_watts > idle.power_watts and busy.power_watts <= busy.power_limit_watts
    assert busy.sm_active is not None and 0 < busy.sm_active <= busy.utilization_gpu
    assert busy.tensor_active is not None and busy.dram_active is not None
    assert busy.sm_clock_hz > idle.sm_clock_hz
    no_gpm = gpu_state(
        dataclasses.replace(CFG, gpu=dataclasses.replace(CFG.gpu, gpm=False)),
        snap(running=3),
        GpuActivity(1.0, 0.0),
        gpu_index=0,
        pid=1,
        process_name="p",
        temperature=40,
        now=0,
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
        assert idle.memory_used_bytes == cfg.resident_bytes
        assert [p.pid for p in idle.processes] == [os.getpid()]
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
                    if st.utilization_gpu > 0 and st.memory_used_bytes > idle.memory_used_bytes:
                        break
                await asyncio.sleep(0.05)
            for p in pending:
                p.cancel()
        busy = seen[-1]
        assert busy.utilization_gpu > 0
        assert busy.memory_used_bytes > idle.memory_used_bytes
        assert busy.processes[0].used_bytes == busy.memory_used_bytes
        assert busy.updated >= idle.updated
