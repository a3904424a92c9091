"""Real simulator processes in the layouts users run, read back through the fake NVML backend.

Tensor parallelism (one worker, N GPUs, one rank child process per GPU), two
workers sharing a card, two workers on MIG slices of one GPU, and rank
processes that never outlive their simulator.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pynvml
import pytest
from tests.support.proc import Process, free_port, http_get, inferwatch_cmd, wait_until

from inferwatch.sim.fakegpu import FakeNvml
from inferwatch.sim.gpustate import GIB

SCALE = "0.05"


class Sim:
    def __init__(self, tmp: Path, state: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = Process(
            inferwatch_cmd(
                "simulate",
                "--port",
                str(self.port),
                "--time-scale",
                SCALE,
                "--cold-start-requests",
                "0",
                "--gpu-state-dir",
                str(state),
                *args,
            ),
            tmp / f"sim-{self.port}.log",
        )

    @property
    def pid(self) -> int:
        return self.proc.popen.pid

    def wait_up(self) -> None:
        def up() -> bool:
            if not self.proc.alive():
                raise AssertionError(f"simulator exited:\n{self.proc.log()[-2000:]}")
            return http_get(f"{self.url}/health", timeout=2)[0] == 200

        wait_until(up, timeout=60, message=f"simulator on :{self.port}")

    def load(self, requests: int = 2, tokens: int = 3000) -> None:
        """Send long requests in the background (they end when the simulator stops)."""
        body = json.dumps({"prompt": "word " * 200, "max_tokens": tokens}).encode()

        def post() -> None:
            req = urllib.request.Request(
                f"{self.url}/v1/completions",
                data=body,
                headers={"Content-Type": "application/json"},
            )
            with contextlib.suppress(OSError):  # the simulator stopped under it
                urllib.request.urlopen(req, timeout=120).read()

        for _ in range(requests):
            threading.Thread(target=post, daemon=True).start()


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[list[Sim]]:
    started: list[Sim] = []
    yield started
    for s in started:
        s.proc.stop()


def start(sims: list[Sim], tmp: Path, *args: str) -> Sim:
    sim = Sim(tmp, tmp / "gpus", *args)
    sims.append(sim)
    sim.wait_up()
    return sim


def nvml_for(tmp: Path, count: int) -> FakeNvml:
    nvml = FakeNvml(count, state_dir=tmp / "gpus")
    nvml.nvmlInit()
    return nvml


def pids_on(nvml: FakeNvml, index: int) -> list[int]:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    return sorted(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(h))


def used(nvml: FakeNvml, handle: object) -> int:
    return int(nvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2).used)


def util(nvml: FakeNvml, index: int) -> int:
    return int(nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(index)).gpu)


def dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_tensor_parallel_spans_gpus_with_one_rank_child_each(
    tmp_path: Path, sims: list[Sim]
) -> None:
    sim = start(sims, tmp_path, "--tensor-parallel", "4", "--gpu-index", "1")
    nvml = nvml_for(tmp_path, 6)
    ranks = wait_until(
        lambda: all(r := [pids_on(nvml, i) for i in range(1, 5)]) and r, message="rank fragments"
    )
    assert all(len(r) == 1 for r in ranks), ranks
    children = {c.pid for c in psutil.Process(sim.pid).children()}
    assert {r[0] for r in ranks} == children and sim.pid not in children
    names = {psutil.Process(r[0]).name() for r in ranks}
    assert names == {f"VllmWorker-{n}" for n in range(4)}
    # spare GPUs: nobody on them
    assert pids_on(nvml, 0) == [] and pids_on(nvml, 5) == []
    assert used(nvml, nvml.nvmlDeviceGetHandleByIndex(5)) == 0
    # every rank's GPU holds the reservation from the start, idle or busy
    for i in range(1, 5):
        assert used(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) == int(0.95 * 24 * GIB)
    assert {util(nvml, i) for i in range(1, 5)} == {0}
    sim.load()

    def all_busy() -> list[int] | None:
        u = [util(nvml, i) for i in range(1, 5)]
        return u if min(u) > 0 else None

    busy = wait_until(all_busy, message="the ranks busy")
    assert max(busy) - min(busy) <= 1, busy  # the ranks step together
    assert util(nvml, 0) == 0 and util(nvml, 5) == 0
    for i in range(1, 5):
        assert used(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) == int(0.95 * 24 * GIB)
    # a clean stop ends the ranks and frees the GPUs
    assert sim.proc.stop() == 0
    wait_until(lambda: all(dead(r[0]) for r in ranks), 15, message="the ranks gone")
    assert [pids_on(nvml, i) for i in range(1, 5)] == [[], [], [], []]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_rank_processes_die_with_the_simulator(
    tmp_path: Path, sims: list[Sim], sig: signal.Signals
) -> None:
    sim = start(sims, tmp_path, "--tensor-parallel", "2", "--data-parallel", "2")
    nvml = nvml_for(tmp_path, 4)

    def four() -> list[psutil.Process] | None:
        children = psutil.Process(sim.pid).children()
        return children if len(children) == 4 else None

    ranks = wait_until(four, message="four rank processes")
    assert wait_until(lambda: all(pids_on(nvml, i) for i in range(4))), "four GPUs held"
    sim.proc.signal(sig)
    wait_until(lambda: all(dead(c.pid) for c in ranks), 15, message="no orphaned rank")
    wait_until(lambda: not sim.proc.alive(), 15, message="the simulator gone")
    # the GPUs are free again: withdrawn at a clean stop, dropped once a killed
    # simulator's fragments have been silent for a while
    wait_until(lambda: not any(pids_on(nvml, i) for i in range(4)), 15, message="the GPUs freed")
    assert all(used(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) == 0 for i in range(4))


@pytest.mark.slow
def test_two_workers_share_one_card(tmp_path: Path, sims: list[Sim]) -> None:
    half = ("--gpu-index", "0", "--gpu-memory-utilization", "0.45", "--max-model-len", "2048")
    a = start(sims, tmp_path, *half, "--model", "small-a")
    b = start(sims, tmp_path, *half, "--model", "small-b")
    nvml = nvml_for(tmp_path, 1)
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    assert wait_until(lambda: pids_on(nvml, 0) if len(pids_on(nvml, 0)) == 2 else None) == sorted(
        [a.pid, b.pid]
    )
    assert used(nvml, gpu) == 2 * int(0.45 * 24 * GIB)
    per_process = {p.pid: p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(gpu)}
    assert per_process == {a.pid: int(0.45 * 24 * GIB), b.pid: int(0.45 * 24 * GIB)}
    # one card, one UUID, whoever is on it
    assert nvml.nvmlDeviceGetUUID(gpu).startswith("GPU-")
    a.load(requests=1, tokens=1500)  # within --max-model-len 2048
    solo = wait_until(lambda: util(nvml, 0) or None, message="worker a busy")
    b.load(requests=1, tokens=1500)

    # both busy: the card shows the sum of their shares (capped at 100 %)
    def both_busy() -> int | None:
        u = util(nvml, 0)
        return u if u > solo + 10 or u == 100 else None

    both = wait_until(both_busy, message="both workers busy")
    assert solo < both <= 100
    b.proc.stop()
    wait_until(lambda: pids_on(nvml, 0) == [a.pid], message="b's memory freed")
    assert used(nvml, gpu) == int(0.45 * 24 * GIB)


@pytest.mark.slow
def test_workers_on_two_mig_slices_of_one_gpu(tmp_path: Path, sims: list[Sim]) -> None:
    on_slice = ("--gpu-model", "h100", "--gpu-index", "1", "--gpu-memory-utilization", "0.9")
    a = start(sims, tmp_path, *on_slice, "--mig", "1:3g.40gb")
    b = start(sims, tmp_path, *on_slice, "--mig", "2:3g.40gb")
    nvml = nvml_for(tmp_path, 2)
    gpu = nvml.nvmlDeviceGetHandleByIndex(1)
    wait_until(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(gpu) and pids_on(nvml, 1), 10)
    assert nvml.nvmlDeviceGetMigMode(gpu) == [1, 1]
    assert nvml.nvmlDeviceGetMigMode(nvml.nvmlDeviceGetHandleByIndex(0)) == [0, 0]
    assert "H100" in nvml.nvmlDeviceGetName(gpu)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetUtilizationRates(gpu)
    devices = wait_until(
        lambda: [nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i) for i in range(2)],
        message="two MIG devices",
    )
    by_instance = {nvml.nvmlDeviceGetGpuInstanceId(d): d for d in devices}
    assert sorted(by_instance) == [1, 2]
    for gi, sim in ((1, a), (2, b)):
        dev = by_instance[gi]
        assert nvml.nvmlDeviceGetName(dev).endswith("MIG 3g.40gb")
        assert nvml.nvmlDeviceGetUUID(dev).startswith("MIG-")
        mem = nvml.nvmlDeviceGetMemoryInfo(dev, pynvml.nvmlMemory_v2)
        assert (mem.total, mem.used) == (40 * GIB, int(0.9 * 40 * GIB))
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(dev)
        assert [(p.pid, p.gpuInstanceId) for p in procs] == [(sim.pid, gi)]
    assert used(nvml, gpu) == 2 * int(0.9 * 40 * GIB)
    # the slice's work shows in its per-instance GPM and in the card's power
    idle_power = nvml.nvmlDeviceGetPowerUsage(gpu)
    a.load(requests=2)
    wait_until(
        lambda: nvml.nvmlDeviceGetPowerUsage(gpu) > idle_power + 20_000, message="power rises"
    )
    assert nvml.state(1).sm_active is not None and nvml.state(1).sm_active > 0
