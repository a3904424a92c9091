"""The simulated GPUs under a simulated engine: what the fake NVML backend will report.

:func:`gpu_state` is pure: engine gauges and busy time in, one GPU's
:class:`~inferwatch.sim.gpustate.SimGpuState` fragment out.
:class:`GpuStatePublisher` writes the fragments to
``DIR/gpu-<index>.<port>.json`` about ten times a second. Layout: engine k of
``--data-parallel`` with ranks r of ``--tensor-parallel N`` runs on GPU
``--gpu-index + k x N + r``; with ``--mig GI:PROFILE`` the single engine runs
on that slice of GPU ``--gpu-index``. Other simulators may write fragments of
the same GPU (co-location); the backend merges them.

The model, and where it departs from a real card:

- utilization (NVML's "a kernel ran" share) = busy share of the last period x
  (0.3 + 0.7 x running / max_num_seqs): a busy engine never shows less than
  30 %, a full batch shows 100 %; the warm-up delay of a cold start does not
  count as busy (it is kernel compilation on the CPU, the guide's 5.2), so a
  cold worker has slow first tokens on an idle GPU. Every rank of a
  tensor-parallel engine shows the same (they run each step together);
- memory used = ``gpu_memory_utilization x`` the device (card or slice), from
  the moment the engine is up until it stops, flat: the engines reserve their
  KV pool at start (docs/simulator.md says which engine does what) and the KV
  cache fills inside it, seen in the engine's KV-usage gauge, not in NVML;
- each GPU lists the process that holds it: the worker itself with one GPU,
  each rank's child process with tensor parallelism (sim/ranks.py);
- power and temperature follow utilization (temperature with a 20 s lag);
- GPM: SM active a little under utilization, occupancy about half of it,
  tensor activity grows with the prefill share of the step tokens, DRAM
  activity with decode (memory-bound) work.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from inferwatch.sim import gpustate
from inferwatch.sim.config import SimConfig
from inferwatch.sim.engine import EngineLoop, cancel_and_wait
from inferwatch.sim.gpustate import (
    FULL_LOAD_TEMPERATURE,
    IDLE_TEMPERATURE,
    SimGpuProcess,
    SimGpuState,
    SimMigSlice,
)
from inferwatch.sim.ranks import rank_name
from inferwatch.sim.stats import EngineSnapshot

log = logging.getLogger(__name__)

#: floor of utilization while busy, and the occupancy share above it
BUSY_FLOOR = 0.3
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


def memory_used(cfg: SimConfig) -> int:
    """NVML memory used on each of the engine's GPUs: the reservation, load or not."""
    return cfg.reserved_per_gpu


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
    host: str = "",
) -> SimGpuState:
    """The fragment of GPU ``gpu_index`` that process ``pid`` of this engine holds.

    ``host`` names the simulated machine (the state directory) for the UUIDs.
    """
    util = utilization(snap, activity.busy_share)
    used = memory_used(cfg)
    g = cfg.gpu
    mig = None
    if cfg.mig is not None:
        mig = SimMigSlice(
            gpu_instance=cfg.mig.gpu_instance,
            profile=cfg.mig.profile,
            memory_total_bytes=cfg.mig.memory_bytes,
            uuid=gpustate.mig_uuid(host, gpu_index, cfg.mig.gpu_instance),
        )
    sm_active = tensor = dram = occupancy = None
    if g.gpm:
        sm_active = 0.9 * util
        occupancy = 0.5 * sm_active
        tensor = util * (0.25 + 0.5 * activity.prefill_share)
        dram = util * (0.75 - 0.35 * activity.prefill_share)
    return SimGpuState(
        name=g.name,
        uuid=gpustate.gpu_uuid(host, gpu_index),
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
        power_watts=gpustate.power_for(g.power_idle_watts, g.power_limit_watts, util),
        power_limit_watts=g.power_limit_watts,
        power_idle_watts=g.power_idle_watts,
        temperature_celsius=temperature,
        sm_clock_hz=BOOST_SM_CLOCK_HZ if activity.busy_share > 0 else IDLE_SM_CLOCK_HZ,
        processes=[
            SimGpuProcess(
                pid=pid, used_bytes=used, name=process_name, sm_utilization=sm_active or util
            )
        ],
        mig=mig,
        updated=now,
    )


class GpuStatePublisher:
    """Writes the fragment of every GPU the worker's engines run on, ten times a second.

    ``rank_pids`` are the tensor-parallel rank processes (engine-major: engine
    k's rank r is ``rank_pids[k x N + r]``); without them the worker's own pid
    holds each engine's GPU.
    """

    def __init__(
        self,
        cfg: SimConfig,
        loops: Sequence[EngineLoop],
        state_dir: str,
        rank_pids: Sequence[int] = (),
    ) -> None:
        self.cfg = cfg
        self.loops = list(loops)
        self.cores = [loop.core for loop in self.loops]
        self.state_dir = state_dir
        self.host = os.path.realpath(state_dir)
        self.tag = str(cfg.port)
        tp = cfg.tensor_parallel
        own = os.getpid(), os.path.basename(sys.executable) or "python3"
        #: (GPU index, pid, process name) per rank, engine-major
        self.placements: list[list[tuple[int, int, str]]] = []
        for k in range(len(self.cores)):
            ranks = []
            for r in range(tp):
                n = k * tp + r
                pid, name = (rank_pids[n], rank_name(r)) if rank_pids else own
                ranks.append((cfg.gpu_index + n, pid, name))
            self.placements.append(ranks)
        self._task: asyncio.Task[None] | None = None
        self._temps = [IDLE_TEMPERATURE for _ in self.cores]
        self._busy = [0.0 for _ in self.cores]
        self._busy_share = [0.0 for _ in self.cores]
        self._tokens = [(0, 0) for _ in self.cores]
        self._last = time.monotonic()

    @property
    def gpu_indices(self) -> list[int]:
        return [index for ranks in self.placements for index, _, _ in ranks]

    def publish(self) -> None:
        """Write every engine's fragments once (also called at start)."""
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
            for index, pid, name in self.placements[i]:
                state = gpu_state(
                    self.cfg,
                    snap,
                    activity,
                    gpu_index=index,
                    pid=pid,
                    process_name=name,
                    temperature=self._temps[i],
                    now=time.time(),
                    host=self.host,
                )
                gpustate.write_state(self.state_dir, index, state, self.tag)

    def withdraw(self) -> None:
        """Remove this worker's fragments: its processes left the GPUs."""
        for index in self.gpu_indices:
            try:
                gpustate.remove_state(self.state_dir, index, self.tag)
            except OSError as exc:
                log.warning("cannot remove GPU state from %s: %s", self.state_dir, exc)

    def start(self) -> None:
        self.publish()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-gpu-state")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        self.withdraw()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL)
            try:
                self.publish()
            except OSError as exc:
                # A full or vanished directory must not stop the worker; say so once a while.
                log.warning("cannot write GPU state to %s: %s", self.state_dir, exc)
