"""Worker-to-GPU attribution (issue 15): every source, every layout, the precedence, the logs.

The pure functions of ``collectors/attribution.py`` run over real
``DeviceReading`` objects, the ones an NVML pass builds; the NVML source then
runs them over the fake NVML backend, and the whole agent over real child
processes (the end-to-end test at the bottom).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.devices import H200, gpu, host, mig, uuid_of
from tests.support.proc import free_port, http_get, wait_until

from inferwatch.agent.collectors.attribution import (
    HOW_TO_ENABLE,
    Answer,
    AttributionLog,
    WorkerGpuInputs,
    attribute,
    cuda_order,
    gpu_env,
)
from inferwatch.agent.collectors.nvml import DeviceReading, NvmlSource
from inferwatch.agent.config import load_config
from inferwatch.agent.exporter import Exporter
from inferwatch.agent.wiring import Agent
from inferwatch.errors import ConfigError
from inferwatch.sim.fakegpu import FakeNvml
from inferwatch.sim.gpustate import GIB, SimGpuProcess, SimGpuState


def run(
    workers: Sequence[WorkerGpuInputs],
    devices: Sequence[DeviceReading],
    *,
    pid_workers: dict[int, str] | None = None,
    own_env: dict[str, str] | None = None,
) -> dict[str, Answer]:
    return attribute(workers, devices, pid_workers=pid_workers or {}, own_env=own_env or {})


def gpus_of(answer: Answer) -> list[str]:
    return [d.uuid if d.gpu_instance is not None else d.gpu for d in answer.devices]


def env_worker(name: str = "w", **env: str) -> WorkerGpuInputs:
    return WorkerGpuInputs(name, env)


def one(devices: Sequence[DeviceReading], **env: str) -> Answer:
    """The answer for one worker with this environment (no process on any GPU)."""
    # two workers: the one-worker sidecar source never applies here
    return run([env_worker("w", **env), WorkerGpuInputs("other")], devices)["w"]


# ---------------------------------------------------------------------- source 1: processes


def test_tensor_parallel_over_two_gpus_from_the_process_tree() -> None:
    # vLLM's TP ranks are children of the root: every pid of the tree maps to the worker
    devices = [gpu(0, pids=[1001]), gpu(1, pids=[1002]), gpu(2)]
    answers = run(
        [WorkerGpuInputs("llama")],
        devices,
        pid_workers={1000: "llama", 1001: "llama", 1002: "llama"},
    )
    assert answers["llama"].source == "processes"
    assert gpus_of(answers["llama"]) == ["0", "1"]


def test_tensor_parallel_over_eight_gpus() -> None:
    devices = [gpu(i, pids=[2000 + i]) for i in range(8)]
    answers = run(
        [WorkerGpuInputs("big")], devices, pid_workers={2000 + i: "big" for i in range(8)}
    )
    assert gpus_of(answers["big"]) == [str(i) for i in range(8)]


def test_two_workers_on_one_gpu() -> None:
    devices = [gpu(0, pids=[10, 20]), gpu(1)]
    answers = run(
        [WorkerGpuInputs("a"), WorkerGpuInputs("b")], devices, pid_workers={10: "a", 20: "b"}
    )
    assert gpus_of(answers["a"]) == ["0"] and gpus_of(answers["b"]) == ["0"]
    assert answers["a"].source == answers["b"].source == "processes"


def test_eight_workers_on_an_eight_gpu_host() -> None:
    devices = [gpu(i, pids=[100 + i]) for i in range(8)]
    workers = [WorkerGpuInputs(f"w{i}") for i in range(8)]
    answers = run(workers, devices, pid_workers={100 + i: f"w{i}" for i in range(8)})
    assert {w: gpus_of(a) for w, a in answers.items()} == {f"w{i}": [str(i)] for i in range(8)}


def test_data_parallel_ranks_give_one_series_per_gpu() -> None:
    # one worker, two data-parallel engine processes (grandchildren of the API server)
    devices = [gpu(0), gpu(1), gpu(2, pids=[31]), gpu(3, pids=[32])]
    answers = run([WorkerGpuInputs("dp")], devices, pid_workers={30: "dp", 31: "dp", 32: "dp"})
    assert gpus_of(answers["dp"]) == ["2", "3"]


def test_mig_two_slices_a_worker_on_each() -> None:
    parent = gpu(0, mig_mode="enabled")
    a, b = mig(0, 1, "3g.71gb", pids=[41]), mig(0, 2, "3g.71gb", pids=[42])
    answers = run(
        [WorkerGpuInputs("a"), WorkerGpuInputs("b")],
        [parent, a, b],
        pid_workers={41: "a", 42: "b"},
    )
    assert [d.uuid for d in answers["a"].devices] == [a.uuid]
    assert [d.uuid for d in answers["b"].devices] == [b.uuid]
    assert answers["a"].devices[0].labels() == {
        "gpu": "0",
        "uuid": a.uuid,
        "gpu_instance": "1",
        "mig_profile": "3g.71gb",
    }


def test_a_process_of_another_worker_is_not_ours() -> None:
    answers = run([WorkerGpuInputs("a")], [gpu(0, pids=[7])], pid_workers={7: "b"})
    assert answers["a"].source is None and answers["a"].devices == ()


# ---------------------------------------------------------------------- source 2: environment


def test_cuda_visible_devices_indices_in_their_order() -> None:
    answer = one(host(4), CUDA_VISIBLE_DEVICES="1,0")
    assert answer.source == "environment"
    assert gpus_of(answer) == ["1", "0"]


def test_indices_follow_pci_bus_order_not_nvml_order() -> None:
    # NVML index 0 sits on a higher bus than index 1: CUDA's index 0 is the lower bus
    devices = [gpu(0, bus="00000000:9A:00.0"), gpu(1, bus="00000000:1B:00.0")]
    assert gpus_of(one(devices, CUDA_VISIBLE_DEVICES="0")) == ["1"]


def test_eight_workers_from_their_environments() -> None:
    workers = [env_worker(f"w{i}", CUDA_VISIBLE_DEVICES=str(7 - i)) for i in range(8)]
    answers = run(workers, host(8))
    assert {w: gpus_of(a) for w, a in answers.items()} == {f"w{i}": [str(7 - i)] for i in range(8)}


def test_data_parallel_from_the_environment() -> None:
    assert gpus_of(one(host(8), CUDA_VISIBLE_DEVICES="4,5,6,7")) == ["4", "5", "6", "7"]


def test_full_and_abbreviated_uuids() -> None:
    devices = host(4)
    full = one(devices, CUDA_VISIBLE_DEVICES=uuid_of(2))
    assert gpus_of(full) == ["2"]
    prefix = uuid_of(3)[:12]  # "GPU-33" + enough digits to name one GPU
    assert gpus_of(one(devices, CUDA_VISIBLE_DEVICES=f"{prefix},{uuid_of(1).upper()}")) == [
        "3",
        "1",
    ]


def test_a_prefix_shared_by_two_gpus_is_invalid_and_stops_parsing() -> None:
    devices = [gpu(0), gpu(1)]
    answer = one(devices, CUDA_VISIBLE_DEVICES="1,GPU-,0")
    assert gpus_of(answer) == ["1"]
    assert any("'GPU-'" in n and "every entry after it" in n for n in answer.notes)


def test_parsing_stops_at_the_first_invalid_entry() -> None:
    # the CUDA guide's own example: 0,2,-1,1 makes 0 and 2 visible, not 1
    assert gpus_of(one(host(3), CUDA_VISIBLE_DEVICES="0,2,-1,1")) == ["0", "2"]
    assert gpus_of(one(host(3), CUDA_VISIBLE_DEVICES="1,7,0")) == ["1"]
    # nothing valid: unknown, not "no GPU"
    answer = one(host(3), CUDA_VISIBLE_DEVICES="x")
    assert answer.source is None


def test_mig_devices_by_uuid_in_both_formats() -> None:
    parent = gpu(0, mig_mode="enabled")
    a, b = mig(0, 1, "1g.18gb"), mig(0, 2, "1g.18gb")
    devices = [parent, a, b, gpu(1)]
    assert [d.uuid for d in one(devices, CUDA_VISIBLE_DEVICES=b.uuid).devices] == [b.uuid]
    legacy = f"MIG-{parent.uuid}/1/0"
    assert [d.uuid for d in one(devices, CUDA_VISIBLE_DEVICES=legacy).devices] == [a.uuid]
    # a whole GPU in MIG mode cannot run CUDA work itself: skipped, said once
    answer = one(devices, CUDA_VISIBLE_DEVICES=f"{parent.uuid},{a.uuid}")
    assert [d.uuid for d in answer.devices] == [a.uuid]
    assert any("MIG mode" in n for n in answer.notes)


def test_runtime_and_cuda_variables_compose() -> None:
    devices = host(8)
    # the container got host GPUs 2 and 5; CUDA index 1 is the second of those
    assert gpus_of(one(devices, NVIDIA_VISIBLE_DEVICES="2,5", CUDA_VISIBLE_DEVICES="1")) == ["5"]
    assert gpus_of(one(devices, NVIDIA_VISIBLE_DEVICES="5,2", CUDA_VISIBLE_DEVICES="0")) == ["2"]
    by_uuid = one(devices, NVIDIA_VISIBLE_DEVICES=f"{uuid_of(6)},{uuid_of(3)}")
    assert sorted(gpus_of(by_uuid)) == ["3", "6"]
    # a CUDA UUID outside the container's devices is invalid
    outside = one(devices, NVIDIA_VISIBLE_DEVICES="2", CUDA_VISIBLE_DEVICES=uuid_of(4))
    assert outside.source is None
    # NVIDIA_VISIBLE_DEVICES alone gives the container's devices
    assert gpus_of(one(devices, NVIDIA_VISIBLE_DEVICES="3,4")) == ["3", "4"]


def test_runtime_mig_device_and_a_whole_gpu_in_mig_mode() -> None:
    parent = gpu(0, mig_mode="enabled")
    a, b = mig(0, 1, "3g.71gb"), mig(0, 2, "3g.71gb")
    devices = [parent, a, b, gpu(1)]
    assert [d.uuid for d in one(devices, NVIDIA_VISIBLE_DEVICES=b.uuid).devices] == [b.uuid]
    # a GPU in MIG mode given whole stands for its MIG devices
    got = one(devices, NVIDIA_VISIBLE_DEVICES="0").devices
    assert [d.uuid for d in got] == [a.uuid, b.uuid]


def test_mixed_models_make_indices_ambiguous_but_uuids_stay_exact() -> None:
    devices = [gpu(0, name="NVIDIA H200"), gpu(1, name="NVIDIA L40S")]
    answer = one(devices, CUDA_VISIBLE_DEVICES=f"0,{uuid_of(1)}")
    assert gpus_of(answer) == ["1"]
    assert any("'0'" in n and "mixed models" in n for n in answer.notes)
    assert one(devices, CUDA_VISIBLE_DEVICES="0").source is None
    ordered = one(devices, CUDA_VISIBLE_DEVICES="1,0", CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert gpus_of(ordered) == ["1", "0"]
    assert cuda_order(devices, "FASTEST_FIRST") is None
    assert cuda_order(devices, None) is None


def test_none_void_and_empty_mean_no_gpu() -> None:
    for env in (
        {"NVIDIA_VISIBLE_DEVICES": "none"},
        {"NVIDIA_VISIBLE_DEVICES": "void"},
        {"NVIDIA_VISIBLE_DEVICES": ""},
        {"CUDA_VISIBLE_DEVICES": ""},
        {"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": ""},
    ):
        answer = one(host(2), **env)
        assert (answer.source, answer.devices) == ("environment", ()), env


def test_every_gpu_visible_says_nothing() -> None:
    for env in ({}, {"NVIDIA_VISIBLE_DEVICES": "all"}, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}):
        assert one(host(2), **env).source is None, env


def test_unreadable_environment_does_not_answer() -> None:
    answers = run([WorkerGpuInputs("w", None, gpus=(1,)), WorkerGpuInputs("x")], host(2))
    assert answers["w"].source == "config"


def test_host_indices_are_skipped_when_the_agent_sees_only_some_gpus() -> None:
    devices = host(2)
    own = {"NVIDIA_VISIBLE_DEVICES": "3,4"}
    workers = [env_worker("w", NVIDIA_VISIBLE_DEVICES=f"3,{uuid_of(1)}"), WorkerGpuInputs("x")]
    answer = run(workers, devices, own_env=own)["w"]
    assert gpus_of(answer) == ["1"]
    assert any("host GPU index" in n for n in answer.notes)


def test_gpu_env_keeps_only_the_gpu_variables() -> None:
    environ = {
        "CUDA_VISIBLE_DEVICES": "0",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "HF_TOKEN": "hf_secret",
        "PATH": "/usr/bin",
    }
    assert gpu_env(environ) == {
        "CUDA_VISIBLE_DEVICES": "0",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


# ---------------------------------------------------------------------- sources 3 and 4


def test_one_worker_sidecar_runs_on_the_agent_s_devices() -> None:
    devices = host(4)
    sidecar = [WorkerGpuInputs("only")]
    got = run(sidecar, devices, own_env={"CUDA_VISIBLE_DEVICES": "2,3"})["only"]
    assert (got.source, gpus_of(got)) == ("agent_environment", ["2", "3"])
    # the runtime already narrowed NVML to the container's GPUs: all of them
    narrowed = run(sidecar, host(1), own_env={"NVIDIA_VISIBLE_DEVICES": "5"})["only"]
    assert (narrowed.source, gpus_of(narrowed)) == ("agent_environment", ["0"])
    by_uuid = run(sidecar, devices, own_env={"NVIDIA_VISIBLE_DEVICES": uuid_of(1)})["only"]
    assert gpus_of(by_uuid) == ["1"]


def test_agent_environment_needs_one_worker_and_a_restriction() -> None:
    devices = host(4)
    two = run(
        [WorkerGpuInputs("a"), WorkerGpuInputs("b")],
        devices,
        own_env={"CUDA_VISIBLE_DEVICES": "1"},
    )
    assert two["a"].source is None and two["b"].source is None
    for own in ({}, {"NVIDIA_VISIBLE_DEVICES": "all"}, {"CUDA_VISIBLE_DEVICES": "all"}):
        assert run([WorkerGpuInputs("a")], devices, own_env=own)["a"].source is None, own


def test_configured_gpus_by_index_and_uuid() -> None:
    parent = gpu(1, mig_mode="enabled")
    slice_ = mig(1, 3, "2g.35gb")
    devices = [gpu(0), parent, slice_, gpu(2)]
    answer = run([WorkerGpuInputs("w", gpus=(2, slice_.uuid, uuid_of(0)[:13], 9))], devices)["w"]
    assert answer.source == "config"
    assert gpus_of(answer) == ["2", slice_.uuid, "0"]
    assert any("9" in n and "names no device" in n for n in answer.notes)
    assert run([WorkerGpuInputs("w", gpus=(9,))], devices)["w"].source is None


def test_precedence_first_source_that_answers_wins() -> None:
    devices = [gpu(0, pids=[5]), gpu(1), gpu(2), gpu(3)]
    own = {"CUDA_VISIBLE_DEVICES": "3"}
    full = WorkerGpuInputs("w", {"CUDA_VISIBLE_DEVICES": "1"}, gpus=(2,))

    def source(worker: WorkerGpuInputs, pids: dict[int, str]) -> tuple[str | None, list[str]]:
        answer = run([worker], devices, pid_workers=pids, own_env=own)["w"]
        return answer.source, gpus_of(answer)

    assert source(full, {5: "w"}) == ("processes", ["0"])
    assert source(full, {}) == ("environment", ["1"])
    no_env = WorkerGpuInputs("w", None, gpus=(2,))
    assert source(no_env, {}) == ("agent_environment", ["3"])
    both = [no_env, WorkerGpuInputs("x")]  # two workers: no sidecar source
    assert run(both, devices, own_env=own)["w"].source == "config"
    assert run([WorkerGpuInputs("w")], devices)["w"] == Answer(None)


# ---------------------------------------------------------------------- logging


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_warning_per_worker_after_the_grace_not_per_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    logger = logging.getLogger("test.attribution")
    tracker = AttributionLog(grace=30.0, clock=clock, logger=logger)
    caplog.set_level(logging.INFO, logger="test.attribution")
    unknown = {"a": Answer(None), "b": Answer(None)}
    for _ in range(5):
        tracker.update(unknown)
        clock.now += 5  # 25 s: still within the grace
    assert not caplog.records
    for _ in range(100):
        tracker.update(unknown)
        clock.now += 5
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert sorted(r.getMessage().split(":")[0] for r in warnings) == ["worker a", "worker b"]
    assert all(HOW_TO_ENABLE in r.getMessage() for r in warnings)


def test_one_info_line_when_the_source_changes(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logger = logging.getLogger("test.attribution2")
    tracker = AttributionLog(grace=0.0, clock=clock, logger=logger)
    caplog.set_level(logging.INFO, logger="test.attribution2")
    dev = gpu(0)
    note = "CUDA_VISIBLE_DEVICES entry '9' names no visible device"
    env_answer = Answer("environment", (dev,), (note,))
    for _ in range(10):
        tracker.update({"w": env_answer})
    for _ in range(10):
        tracker.update({"w": Answer("processes", (dev,))})
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"worker w: {note}",
        f"worker w: runs on gpu 0 ({dev.uuid}) (from the worker's "
        "NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES)",
        f"worker w: runs on gpu 0 ({dev.uuid}) (from NVML's process list)",
    ]


# ---------------------------------------------------------------------- configuration


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    return str(path)


def test_workers_gpus_in_the_config_file(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "workers:\n"
        "  - url: http://127.0.0.1:8000\n"
        "    gpus: [0, '3', GPU-8932f937, MIG-4b5c6d7e-aaaa-bbbb-cccc-000000000001]\n",
    )
    config = load_config(path, env={})
    assert config.workers[0].gpus == (
        0,
        3,
        "GPU-8932f937",
        "MIG-4b5c6d7e-aaaa-bbbb-cccc-000000000001",
    )
    assert (
        load_config(write_config(tmp_path, "workers: [http://127.0.0.1:8000]\n"), env={})
        .workers[0]
        .gpus
        is None
    )


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("[cuda:0]", "workers[0].gpus[0]"),
        ("[0, -1]", "workers[0].gpus[1]"),
        ("[true]", "workers[0].gpus[0]"),
        ("[]", "workers[0].gpus"),
        ("'0,1'", "workers[0].gpus"),
    ],
)
def test_bad_gpus_are_one_line_config_errors(tmp_path: Path, value: str, key: str) -> None:
    path = write_config(tmp_path, f"workers:\n  - url: http://127.0.0.1:8000\n    gpus: {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    message = str(err.value)
    assert message.startswith(f"{path}: {key}: expected ")
    assert "\n" not in message
    assert "GPU-" in message


# ---------------------------------------------------------------------- the NVML source


def h200(i: int, processes: Sequence[SimGpuProcess] = ()) -> SimGpuState:
    return SimGpuState(
        name=H200,
        uuid=uuid_of(i),
        pci_bus_id=gpu(i).pci_bus_id,
        memory_total_bytes=141 * GIB,
        processes=list(processes),
    )


Series = list[tuple[str, dict[str, str], float]]


def worker_gpu_series(src: NvmlSource) -> Series:
    return [
        (s.name, s.labels, s.value)
        for fam in src.families()
        for s in fam.samples
        if s.name == "inferwatch_worker_gpu_info"
    ]


async def test_the_source_exports_exactly_the_contract_labels(
    make_source: Callable[..., NvmlSource],
) -> None:
    fake = FakeNvml(3)
    fake.set_state(0, h200(0, [SimGpuProcess(pid=501, used_bytes=40 * GIB)]))
    fake.set_state(1, h200(1, [SimGpuProcess(pid=502, used_bytes=40 * GIB)]))
    fake.set_state(2, h200(2))
    fake.add_mig(2, 1, "3g.71gb", SimGpuState(memory_total_bytes=71 * GIB))
    fake.add_mig(2, 2, "3g.71gb", SimGpuState(memory_total_bytes=71 * GIB))
    inputs = [
        WorkerGpuInputs("tp"),  # found through its processes 501/502
        WorkerGpuInputs("slice", {"CUDA_VISIBLE_DEVICES": "MIG-fake-2-2"}),
        WorkerGpuInputs("lost"),  # nothing says: no series
    ]
    src = make_source(
        fake,
        interval=0.01,
        slow_interval=0.0,
        pid_workers=lambda: {500: "tp", 501: "tp", 502: "tp"},
        worker_gpu_inputs=lambda: inputs,
    )
    await src.refresh()
    await src.refresh()  # MIG devices are found on the slow pass
    got = sorted(worker_gpu_series(src), key=lambda s: (s[1]["worker"], s[1]["gpu"]))
    mig_uuid = fake.nvmlDeviceGetUUID(fake.nvmlDeviceGetMigDeviceHandleByIndex(
        fake.nvmlDeviceGetHandleByIndex(2), 1))  # fmt: skip
    assert got == [
        (
            "inferwatch_worker_gpu_info",
            {
                "worker": "slice",
                "gpu": "2",
                "uuid": mig_uuid,
                "gpu_instance": "2",
                "mig_profile": "3g.71gb",
            },
            1.0,
        ),
        ("inferwatch_worker_gpu_info", {"worker": "tp", "gpu": "0", "uuid": uuid_of(0)}, 1.0),
        ("inferwatch_worker_gpu_info", {"worker": "tp", "gpu": "1", "uuid": uuid_of(1)}, 1.0),
    ]
    # the MIG series carry the very labels of that device's own GPU series
    mig_memory = [
        s.labels
        for fam in src.families()
        for s in fam.samples
        if s.name == "inferwatch_gpu_memory_total_bytes" and s.labels["uuid"] == mig_uuid
    ]
    assert mig_memory == [{k: v for k, v in got[0][1].items() if k != "worker"}]
    assert src.attribution["lost"] == Answer(None)
    help_text = next(f for f in src.families() if f.name == "inferwatch_worker_gpu_info")
    assert "NVML's process list" in help_text.documentation


async def test_a_broken_worker_lookup_costs_only_the_attribution(
    make_source: Callable[..., NvmlSource], caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> list[WorkerGpuInputs]:
        raise RuntimeError("boom")

    fake = FakeNvml(1)
    src = make_source(fake, interval=0.01, worker_gpu_inputs=broken)
    for _ in range(3):
        await src.refresh()
        names = {s.name for fam in src.families() for s in fam.samples}
        assert "inferwatch_gpu_up" in names and "inferwatch_worker_gpu_info" not in names
    failures = [r for r in caplog.records if "worker_gpu_inputs() failed" in r.getMessage()]
    assert len(failures) == 1  # once, not on every rebuild


# ---------------------------------------------------------------------- end to end

PARENT = r"""
import os, subprocess, sys, time
n = int(sys.argv[1])
kids = [subprocess.Popen([sys.executable, "-c",
        "import os, time\nppid = os.getppid()\nwhile os.getppid() == ppid: time.sleep(0.2)"])
        for _ in range(n)]
print(" ".join(str(k.pid) for k in kids), flush=True)
while True:
    time.sleep(0.5)
"""


class Tree:
    """A real process with ``n`` real children (tensor-parallel ranks stand-in)."""

    def __init__(self, n: int = 0, env: dict[str, str] | None = None) -> None:
        full = {k: v for k, v in os.environ.items() if not k.endswith("VISIBLE_DEVICES")}
        full.update(env or {})
        self.popen = subprocess.Popen(
            [sys.executable, "-c", PARENT, str(n)],
            stdout=subprocess.PIPE,
            text=True,
            env=full,
            start_new_session=True,
        )
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        self.pid = self.popen.pid
        self.children = [int(p) for p in line.split()]

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)


async def test_the_agent_serves_worker_gpu_info_for_every_layout(tmp_path: Path) -> None:
    trees: dict[str, Tree] = {}
    try:
        trees["tp"] = Tree(2)  # ranks on GPUs 0 and 1, seen in NVML's process lists
        trees["colo-a"], trees["colo-b"] = Tree(), Tree()  # both on GPU 2
        trees["env-rev"] = Tree(env={"CUDA_VISIBLE_DEVICES": "3,2"})
        trees["env-ctr"] = Tree(
            env={
                "NVIDIA_VISIBLE_DEVICES": f"{uuid_of(1)},{uuid_of(3)}",
                "CUDA_VISIBLE_DEVICES": "1",
            }
        )
        trees["mig-a"] = Tree()  # on the first MIG slice of GPU 4, by its process
        trees["mig-b"] = Tree(env={"CUDA_VISIBLE_DEVICES": "MIG-fake-4-2"})
        trees["none"] = Tree(env={"NVIDIA_VISIBLE_DEVICES": "void"})
        trees["unknown"] = Tree()
        fake = FakeNvml(5)
        tp = trees["tp"]
        fake.set_state(0, h200(0, [SimGpuProcess(tp.children[0], 30 * GIB)]))
        fake.set_state(1, h200(1, [SimGpuProcess(tp.children[1], 30 * GIB)]))
        fake.set_state(
            2,
            h200(
                2,
                [
                    SimGpuProcess(trees["colo-a"].pid, 20 * GIB),
                    SimGpuProcess(trees["colo-b"].pid, 40 * GIB),
                ],
            ),
        )
        fake.set_state(3, h200(3))
        fake.set_state(4, h200(4))
        fake.add_mig(
            4,
            1,
            "3g.71gb",
            SimGpuState(processes=[SimGpuProcess(trees["mig-a"].pid, 10 * GIB)]),
        )
        fake.add_mig(4, 2, "3g.71gb", SimGpuState())
        dead = free_port()  # the engines do not serve /metrics here: only processes matter
        lines = ["process_interval: 0.2s", "collect_interval: 0.2s", "stats_window: 2s"]
        lines += ["gpu: {interval: 0.2s, slow_interval: 0.2s, activity_interval: 0.2s}", "workers:"]
        for name, tree in trees.items():
            lines += [
                f"  - name: {name}",
                f"    url: http://127.0.0.1:{dead}",
                f"    pid: {tree.pid}",
            ]
        lines += ["  - name: conf", f"    url: http://127.0.0.1:{dead}", "    gpus: [3]"]
        path = tmp_path / "agent.yaml"
        path.write_text("\n".join(lines) + "\n")
        port = free_port()
        config = load_config(str(path), flags={"listen": f"127.0.0.1:{port}"}, env={})
        agent = Agent(config, gpu_backend=fake, environ={})
        exporter = Exporter(agent, config)
        await agent.start()
        url = await exporter.start()
        mig1 = f"MIG-fake-4-1-4000-8000-{4:06x}{1:06x}"
        mig2 = f"MIG-fake-4-2-4000-8000-{4:06x}{2:06x}"
        want = {
            ("tp", "0", uuid_of(0)),
            ("tp", "1", uuid_of(1)),
            ("colo-a", "2", uuid_of(2)),
            ("colo-b", "2", uuid_of(2)),
            ("env-rev", "3", uuid_of(3)),
            ("env-rev", "2", uuid_of(2)),
            ("env-ctr", "3", uuid_of(3)),
            ("mig-a", "4", mig1, "1", "3g.71gb"),
            ("mig-b", "4", mig2, "2", "3g.71gb"),
            ("conf", "3", uuid_of(3)),
        }

        def got() -> set[tuple[str, ...]]:
            _, body, _ = http_get(f"{url}/metrics")
            out = set()
            for fam in text_string_to_metric_families(body.decode()):
                for s in fam.samples:
                    if s.name == "inferwatch_worker_gpu_info":
                        assert s.value == 1.0
                        ls = dict(s.labels)
                        extra = (
                            (ls.pop("gpu_instance"), ls.pop("mig_profile"))
                            if "gpu_instance" in ls
                            else ()
                        )
                        assert set(ls) == {"worker", "gpu", "uuid"}, ls
                        out.add((ls["worker"], ls["gpu"], ls["uuid"], *extra))
            return out

        try:
            seen = await asyncio.to_thread(
                wait_until, lambda: got() == want or None, 30, 0.2, "every worker's GPUs"
            )
            assert seen
            # nothing for the worker no source speaks of, nor for the one given no GPU
            last = await asyncio.to_thread(got)
            assert not {row for row in last if row[0] in ("unknown", "none")}
        finally:
            await exporter.stop()
            await agent.stop()
    finally:
        for tree in trees.values():
            tree.stop()


def test_an_index_counts_whole_gpus_and_skips_one_in_mig_mode() -> None:
    parent = gpu(1, mig_mode="enabled")
    devices = [gpu(0), parent, mig(1, 1, "3g.71gb"), mig(1, 2, "3g.71gb"), gpu(2)]
    # GPU 1 is in MIG mode: index 2 is still GPU 2
    assert gpus_of(one(devices, CUDA_VISIBLE_DEVICES="2,0")) == ["2", "0"]
    answer = one(devices, CUDA_VISIBLE_DEVICES="1,2")
    assert gpus_of(answer) == ["2"]
    assert any("'1'" in n and "MIG mode" in n for n in answer.notes)


def test_a_lost_gpu_stays_joined_to_the_worker_it_served() -> None:
    import dataclasses

    pids = {11: "tp", 12: "tp"}
    before = run([WorkerGpuInputs("tp")], [gpu(0, pids=[11]), gpu(1, pids=[12])], pid_workers=pids)
    assert gpus_of(before["tp"]) == ["0", "1"]
    # GPU 1 falls off the bus: NVML lists nothing on it; the join stays for the page
    lost = dataclasses.replace(gpu(1), up=False)
    after = attribute(
        [WorkerGpuInputs("tp")],
        [gpu(0, pids=[11]), lost],
        pid_workers=pids,
        own_env={},
        previous=before,
    )
    assert after["tp"].source == "processes"
    assert gpus_of(after["tp"]) == ["0", "1"]
    assert after["tp"].devices[1] is lost
    # back and without the process: no longer the worker's
    again = attribute(
        [WorkerGpuInputs("tp")],
        [gpu(0, pids=[11]), gpu(1)],
        pid_workers=pids,
        own_env={},
        previous=after,
    )
    assert gpus_of(again["tp"]) == ["0"]


async def test_the_source_keeps_a_lost_gpu_s_worker(make_source: Callable[..., NvmlSource]) -> None:
    fake = FakeNvml(2)
    fake.set_state(0, h200(0, [SimGpuProcess(pid=601, used_bytes=GIB)]))
    fake.set_state(1, h200(1, [SimGpuProcess(pid=602, used_bytes=GIB)]))
    src = make_source(
        fake,
        interval=0.01,
        pid_workers=lambda: {600: "tp", 601: "tp", 602: "tp"},
        worker_gpu_inputs=lambda: [WorkerGpuInputs("tp")],
    )
    await src.refresh()
    want = [("tp", "0", uuid_of(0)), ("tp", "1", uuid_of(1))]

    def rows() -> list[tuple[str, str, str]]:
        return sorted((ls["worker"], ls["gpu"], ls["uuid"]) for _, ls, _ in worker_gpu_series(src))

    assert rows() == want
    fake.lose(1)
    await src.refresh()
    up = {
        s.labels["gpu"]: s.value
        for fam in src.families()
        for s in fam.samples
        if s.name == "inferwatch_gpu_up"
    }
    assert up == {"0": 1.0, "1": 0.0}
    assert rows() == want  # the page for GPU 1 still names its worker
