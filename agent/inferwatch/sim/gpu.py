"""The simulated GPU under a simulated engine: what the fake NVML backend will report.

:func:`gpu_state` is pure: engine gauges and busy time in, a
:class:`~inferwatch.sim.gpustate.SimGpuState` out. :class:`GpuStatePublisher`
writes it to ``DIR/gpu-<index>.json`` about ten times a second, one GPU per
data-parallel engine (``--gpu-index I`` is engine 0's GPU, I+1 engine 1's, ...).

The model, and where it departs from a real card:

- utilization (NVML's "a kernel ran" share) = busy share of the last period x
  (0.3 + 0.7 x running / max_num_seqs): a busy engine never shows less than
  30 %, a full batch shows 100 %; the warm-up delay of a cold start does not
  count as busy (it is kernel compilation on the CPU, the guide's 5.2), so a
  cold worker has slow first tokens on an idle GPU;
- memory used = weights + runtime overhead + KV blocks in use x block size.
  Real vLLM reserves its whole KV pool at start, so real NVML memory stays
  flat at about ``gpu_memory_utilization``; the simulator shows the blocks in
  use instead, so that VRAM pressure and load move together on a dashboard;
- power and temperature follow utilization (temperature with a 20 s lag);
- GPM: SM active a little under utilization, occupancy about half of it,
  tensor activity grows with the prefill share of the step tokens, DRAM
  activity with decode (memory-bound) work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from inferwatch.sim import gpustate
from inferwatch.sim.config import SimConfig
from inferwatch.sim.engine import EngineLoop
from inferwatch.sim.gpustate import SimGpuProcess, SimGpuState
from inferwatch.sim.stats import EngineSnapshot

log = logging.getLogger(__name__)

#: floor of utilization while busy, and the occupancy share above it
BUSY_FLOOR = 0.3
IDLE_TEMPERATURE = 35.0
FULL_LOAD_TEMPERATURE = 78.0
TEMPERATURE_TAU_SECONDS = 20.0
BOOST_SM_CLOCK_HZ = 1_695e6
IDLE_SM_CLOCK_HZ = 210e6
PUBLISH_INTERVAL = 0.1
#: NVML averages utilization over up to a second; smooth the busy share alike
BUSY_TAU_SECONDS = 1.0


@dataclass(frozen=True)
class GpuActivity:
    """What the engine did during the last sample period."""

    busy_share: float  # 0..1 of the period spent in engine steps
    prefill_share: float  # 0..1 of the computed tokens that were prompt tokens


def utilization(snap: EngineSnapshot, busy_share: float) -> float:
    if busy_share <= 0.0:
        return 0.0
    occupancy = min(1.0, snap.running / snap.max_num_seqs) if snap.max_num_seqs else 0.0
    return min(1.0, busy_share * (BUSY_FLOOR + (1.0 - BUSY_FLOOR) * occupancy))


def memory_used(cfg: SimConfig, snap: EngineSnapshot) -> int:
    return int(cfg.resident_bytes + snap.blocks_in_use * cfg.block_bytes)


def next_temperature(current: float, util: float, dt: float) -> float:
    target = IDLE_TEMPERATURE + (FULL_LOAD_TEMPERATURE - IDLE_TEMPERATURE) * util
    return target + (current - target) * math.exp(-max(dt, 0.0) / TEMPERATURE_TAU_SECONDS)


def gpu_state(
    cfg: SimConfig,
    snap: EngineSnapshot,
    activity: GpuActivity,
    *,
    gpu_index: int,
    pid: int,
    process_name: str,
    temperature: float,
    now: float,
) -> SimGpuState:
    util = utilization(snap, activity.busy_share)
    used = memory_used(cfg, snap)
    g = cfg.gpu
    sm_active = tensor = dram = occupancy = None
    if g.gpm:
        sm_active = 0.9 * util
        occupancy = 0.5 * sm_active
        tensor = util * (0.25 + 0.5 * activity.prefill_share)
        dram = util * (0.75 - 0.35 * activity.prefill_share)
    return SimGpuState(
        name=g.name,
        uuid=f"GPU-5171{gpu_index:04d}-0000-4000-8000-{cfg.port:012d}",
        pci_bus_id=f"00000000:{0x17 + gpu_index:02X}:00.0",
        memory_total_bytes=g.total_bytes,
        memory_reserved_bytes=g.reserved_bytes,
        memory_used_bytes=used,
        utilization_gpu=util,
        utilization_memory=util * (0.8 - 0.4 * activity.prefill_share),
        sm_active=sm_active,
        sm_occupancy=occupancy,
        tensor_active=tensor,
        dram_active=dram,
        power_watts=g.power_idle_watts + (g.power_limit_watts - g.power_idle_watts) * 0.9 * util,
        power_limit_watts=g.power_limit_watts,
        temperature_celsius=temperature,
        sm_clock_hz=BOOST_SM_CLOCK_HZ if activity.busy_share > 0 else IDLE_SM_CLOCK_HZ,
        processes=[
            SimGpuProcess(
                pid=pid, used_bytes=used, name=process_name, sm_utilization=sm_active or util
            )
        ],
        updated=now,
    )


class GpuStatePublisher:
    """Writes each engine's GPU state file about ten times a second."""

    def __init__(self, cfg: SimConfig, loops: Sequence[EngineLoop], state_dir: str) -> None:
        self.cfg = cfg
        self.loops = list(loops)
        self.cores = [loop.core for loop in self.loops]
        self.state_dir = state_dir
        self.pid = os.getpid()
        self.process_name = os.path.basename(sys.executable) or "python3"
        self._task: asyncio.Task[None] | None = None
        self._temps = [IDLE_TEMPERATURE for _ in self.cores]
        self._busy = [0.0 for _ in self.cores]
        self._busy_share = [0.0 for _ in self.cores]
        self._tokens = [(0, 0) for _ in self.cores]
        self._last = time.monotonic()

    def publish(self) -> None:
        """Write every engine's state once (also called at start and at stop)."""
        now = time.monotonic()
        dt = max(now - self._last, 1e-6)
        self._last = now
        for i, core in enumerate(self.cores):
            busy_total = self.loops[i].busy_seconds
            busy = busy_total - self._busy[i]
            self._busy[i] = busy_total
            prefill, decode = core.prefill_tokens_total, core.decode_tokens_total
            d_prefill = prefill - self._tokens[i][0]
            d_decode = decode - self._tokens[i][1]
            self._tokens[i] = (prefill, decode)
            total = d_prefill + d_decode
            # Steps are accounted when they end, in bursts; smooth them like NVML's window.
            alpha = 1.0 - math.exp(-dt / BUSY_TAU_SECONDS)
            share = self._busy_share[i] + alpha * (min(1.0, busy / dt) - self._busy_share[i])
            if share < 1e-3:
                share = 0.0  # an idle engine reads exactly 0, as NVML does
            self._busy_share[i] = share
            activity = GpuActivity(
                busy_share=share, prefill_share=d_prefill / total if total else 0.0
            )
            snap = core.snapshot()
            util = utilization(snap, activity.busy_share)
            self._temps[i] = next_temperature(self._temps[i], util, dt)
            state = gpu_state(
                self.cfg,
                snap,
                activity,
                gpu_index=self.cfg.gpu_index + i,
                pid=self.pid,
                process_name=self.process_name,
                temperature=self._temps[i],
                now=time.time(),
            )
            gpustate.write_state(self.state_dir, self.cfg.gpu_index + i, state)

    def start(self) -> None:
        self.publish()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-gpu-state")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL)
            try:
                self.publish()
            except OSError as exc:
                # A full or vanished directory must not stop the worker; say so once a while.
                log.warning("cannot write GPU state to %s: %s", self.state_dir, exc)
