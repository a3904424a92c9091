"""The process source against real child processes that look like engines to psutil.

Each fake engine is one small Python program started under the name the real
engine's launcher has (an executable script called ``vllm``, ``llama-server``,
..., or a module ``vllm.entrypoints.openai.api_server`` on PYTHONPATH), so the
command line psutil reads is the one a real deployment shows. It listens on its
``--port`` (or ``--http-port`` / ``--server-port`` / ``-p``), in itself or in a
child, and can start a child that burns a fixed amount of CPU.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from tests.support.proc import Process, free_port, wait_until

from inferwatch.agent.collectors.process import ProcessSource
from inferwatch.agent.config import WorkerSpec

FAKE_ENGINE = r'''
import os, signal, socket, subprocess, sys, threading, time

PORT_FLAGS = ("--port", "--http-port", "--server-port", "-p")

CHILD = """
import os, socket, sys, time
parent = os.getppid()
mode, arg = sys.argv[1], sys.argv[2]
if mode == "listen":
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(arg)))
    sock.listen(16)
elif mode == "burn":
    while sum(os.times()[:2]) < float(arg):
        pass
    if os.environ.get("FAKE_CHILD_EXITS") == "1":
        sys.exit(0)
while os.getppid() == parent:
    time.sleep(0.2)
"""


def port_from(argv):
    for i, arg in enumerate(argv):
        for flag in PORT_FLAGS:
            if arg == flag and i + 1 < len(argv):
                return int(argv[i + 1])
            if arg.startswith(flag + "="):
                return int(arg.split("=", 1)[1])
    return int(os.environ["FAKE_PORT"])


children = []


def stop(*_):
    for child in children:
        child.terminate()
    for child in children:
        try:
            child.wait(5)
        except Exception:
            child.kill()
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
port = port_from(sys.argv[1:])
if os.environ.get("FAKE_LISTENER") == "child":
    children.append(subprocess.Popen([sys.executable, "-c", CHILD, "listen", str(port)]))
else:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(16)
if os.environ.get("FAKE_CHILD_CPU"):
    burner = subprocess.Popen([sys.executable, "-c", CHILD, "burn", os.environ["FAKE_CHILD_CPU"]])
    children.append(burner)
    # reap it when it exits, as an engine's process manager does
    threading.Thread(target=burner.wait, daemon=True).start()
while True:
    signal.pause()
'''


class Engines:
    """Starts fake engines under real launcher names and stops them after the test."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.pkgs = tmp / "pkgs"
        self.running: list[Process] = []

    def script(self, name: str) -> str:
        path = self.bin / name
        if not path.exists():
            path.write_text(f"#!{sys.executable}\n{FAKE_ENGINE}")
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return str(path)

    def module(self, dotted: str) -> None:
        """Make ``python -m dotted`` run the fake engine."""
        parts = dotted.split(".")
        folder = self.pkgs
        for part in parts[:-1]:
            folder = folder / part
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "__init__.py").touch()
        (folder / f"{parts[-1]}.py").write_text(FAKE_ENGINE)

    def start(
        self, argv: Sequence[str], port: int, env: Mapping[str, str] | None = None
    ) -> Process:
        full_env = {"PYTHONPATH": str(self.pkgs), **(env or {})}
        proc = Process(argv, self.tmp / f"engine-{len(self.running)}.log", env=full_env)
        self.running.append(proc)

        def listening() -> bool:
            if not proc.alive():
                raise AssertionError(f"fake engine exited:\n{proc.log()}")
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True

        wait_until(listening, timeout=30, message=f"fake engine on :{port}")
        return proc

    def serve(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> tuple[int, Process]:
        """The fake engine as launcher ``argv[0]`` with the rest of ``argv``, told
        ``--port`` (a free one, the last option), once it listens: (the port, the process)."""
        port = free_port()
        full = [self.script(argv[0]), *argv[1:], "--port", str(port)]
        return port, self.start(full, port, env)

    def stop_all(self) -> None:
        for proc in reversed(self.running):
            proc.stop()


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Engines]:
    fakes = Engines(tmp_path)
    try:
        yield fakes
    finally:
        fakes.stop_all()


def worker(name: str, port: int, **fields: object) -> WorkerSpec:
    return WorkerSpec(name=name, url=f"http://127.0.0.1:{port}", **fields)  # type: ignore[arg-type]


class _Families(Collector):
    def __init__(self, source: ProcessSource) -> None:
        self.source = source

    def collect(self) -> Iterable[Metric]:
        return self.source.families()


def scrape(source: ProcessSource) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The source's families through a real exposition round trip: name -> samples."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(source))
    text = generate_latest(registry).decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def info_labels(source: ProcessSource, name: str) -> dict[str, str]:
    rows = [
        labels for labels, _ in scrape(source)["inferwatch_worker_info"] if labels["worker"] == name
    ]
    assert len(rows) == 1, rows
    return rows[0]


async def test_vllm_serve_found_by_its_port(engines: Engines) -> None:
    argv = ["vllm", "serve", "facebook/opt-125m", "--served-model-name", "opt"]
    argv += ["--max-num-seqs", "32", "--max-model-len", "2048"]
    argv += ["--gpu-memory-utilization", "0.85", "--no-enable-prefix-caching"]
    port, proc = engines.serve(argv)
    source = ProcessSource([worker("vllm-0", port)], interval=1.0)
    await source.refresh()

    labels = info_labels(source, "vllm-0")
    assert labels == {
        "worker": "vllm-0",
        "engine": "vllm",
        "model": "opt",
        "pid": str(proc.popen.pid),
        "version": "",
        "max_num_seqs": "32",
        "max_model_len": "2048",
        "max_num_batched_tokens": "",
        "gpu_memory_utilization": "0.85",
        "prefix_caching": "false",
        "kv_cache_dtype": "",
    }
    samples = scrape(source)
    series = {"worker": "vllm-0", "engine": "vllm", "model": "opt"}
    assert [v for lab, v in samples["inferwatch_worker_cpu_seconds_total"] if lab == series]
    rss = [v for lab, v in samples["inferwatch_worker_resident_memory_bytes"] if lab == series]
    assert len(rss) == 1 and rss[0] > 0
    started = psutil.Process(proc.popen.pid).create_time()
    assert [v for lab, v in samples["inferwatch_worker_start_time_seconds"] if lab == series] == [
        started
    ]
    launch = source.launch_info("vllm-0")
    assert launch is not None and launch.max_num_seqs == 32
    assert source.start_time("vllm-0") == started
    assert source.pid_workers()[proc.popen.pid] == "vllm-0"
    assert source.health.failing("vllm-0") is None
    assert source.health.last_success is not None


async def test_listener_in_a_child_leads_to_the_engine_process(engines: Engines) -> None:
    """vLLM's extra API servers (and TGI's router) own the socket, not the engine's main process."""
    port = free_port()
    engines.module("vllm.entrypoints.openai.api_server")
    proc = engines.start(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "/models/tiny",
            "--max-num-seqs",
            "8",
            "--port",
            str(port),
        ],
        port,
        env={"FAKE_LISTENER": "child"},
    )
    parent = psutil.Process(proc.popen.pid)
    listener = wait_until(lambda: parent.children(), message="listener child")[0]
    assert listener.pid != parent.pid

    source = ProcessSource([worker("api", port)])
    await source.refresh()

    labels = info_labels(source, "api")
    assert labels["pid"] == str(parent.pid)
    assert (labels["engine"], labels["model"], labels["max_num_seqs"]) == (
        "vllm",
        "/models/tiny",
        "8",
    )
    pids = source.pid_workers()
    assert pids[parent.pid] == "api"
    assert pids[listener.pid] == "api"
    seen = source.worker_process("api")
    assert seen is not None and seen.found_by == "port"
    # the tree's memory is more than the main process's alone: the child counts too
    assert seen.rss_bytes > parent.memory_info().rss


async def test_cpu_of_an_exited_child_stays_counted(engines: Engines) -> None:
    port, proc = engines.serve(
        ["llama-server", "-m", "/models/q4.gguf", "-np", "4"],
        env={"FAKE_CHILD_CPU": "0.3", "FAKE_CHILD_EXITS": "1"},
    )
    parent = psutil.Process(proc.popen.pid)

    def child_reaped() -> bool:
        times = parent.cpu_times()
        return not parent.children() and times.children_user + times.children_system >= 0.3

    wait_until(child_reaped, timeout=60, message="the CPU-burning child to exit and be reaped")
    source = ProcessSource([worker("llama", port)])
    await source.refresh()
    first = source.worker_process("llama")
    assert first is not None
    assert first.pids == (parent.pid,)
    assert first.cpu_seconds >= 0.3
    labels = info_labels(source, "llama")
    assert (labels["engine"], labels["max_num_seqs"], labels["model"]) == (
        "llamacpp",
        "4",
        "/models/q4.gguf",
    )
    await source.refresh()
    second = source.worker_process("llama")
    assert second is not None and second.cpu_seconds >= first.cpu_seconds


async def test_a_restarted_worker_is_found_again(engines: Engines) -> None:
    port = free_port()
    argv = [
        engines.script("trtllm-serve"),
        "TinyLlama",
        "--max_batch_size",
        "16",
        "--port",
        str(port),
    ]
    first = engines.start(argv, port)
    source = ProcessSource([worker("trt", port)])
    await source.refresh()
    assert info_labels(source, "trt")["pid"] == str(first.popen.pid)
    first_start = source.start_time("trt")

    first.stop()
    second = engines.start([*argv[:3], "64", *argv[4:]], port)
    await source.refresh()

    labels = info_labels(source, "trt")
    assert labels["pid"] == str(second.popen.pid)
    assert labels["max_num_seqs"] == "64"
    assert source.start_time("trt") == psutil.Process(second.popen.pid).create_time()
    assert first_start is not None and source.start_time("trt") != first_start
    assert first.popen.pid not in source.pid_workers()


async def test_missing_workers_export_nothing_and_log_once(
    engines: Engines, caplog: pytest.LogCaptureFixture
) -> None:
    busy, _ = engines.serve(["vllm", "serve", "m"])
    workers = [
        worker("gone", free_port()),
        # a remote address: a local process on the same port must not be taken for it
        WorkerSpec(name="remote", url=f"http://192.0.2.10:{busy}"),
        WorkerSpec(name="badpid", url="http://127.0.0.1:1", pid=2**22 + 12345),
    ]
    source = ProcessSource(workers)
    with caplog.at_level(logging.DEBUG, logger="inferwatch.agent.collectors.process"):
        for _ in range(3):
            await source.refresh()

    samples = scrape(source)
    exported = {labels["worker"] for rows in samples.values() for labels, _ in rows}
    assert exported == set()
    for name in ("gone", "remote", "badpid"):
        assert source.launch_info(name) is None
        assert source.start_time(name) is None
        assert source.health.failing(name) is None
        logged = [r for r in caplog.records if f"worker {name}: no process found" in r.getMessage()]
        assert len(logged) == 1, [r.getMessage() for r in caplog.records]
    assert source.pid_workers() == {}


async def test_cmd_match_picks_its_process(engines: Engines) -> None:
    ports = [free_port(), free_port()]
    procs = [
        engines.start(
            [
                engines.script("lmdeploy"),
                "serve",
                "api_server",
                model,
                "--server-port",
                str(port),
                "--max-batch-size",
                seqs,
            ],
            port,
        )
        for model, port, seqs in (("org/model-a", ports[0], "16"), ("org/model-b", ports[1], "64"))
    ]
    source = ProcessSource(
        [WorkerSpec(name="b", url="http://127.0.0.1:1", cmd_match="org/model-b")]
    )
    await source.refresh()
    labels = info_labels(source, "b")
    assert labels["pid"] == str(procs[1].popen.pid)
    assert (labels["engine"], labels["model"], labels["max_num_seqs"]) == (
        "lmdeploy",
        "org/model-b",
        "64",
    )
    seen = source.worker_process("b")
    assert seen is not None and seen.found_by == "cmd_match"


async def test_configured_pid_and_facts_from_the_engine(engines: Engines) -> None:
    port = free_port()
    proc = engines.start(
        [engines.script("tritonserver"), "--model-repository=/models", "--http-port", str(port)],
        port,
    )
    facts: Callable[[str], Mapping[str, str]] = lambda name: {  # noqa: E731
        "model": "ensemble",
        "version": "2.52.0",
    }
    source = ProcessSource(
        [WorkerSpec(name="triton", url="http://127.0.0.1:1", pid=proc.popen.pid)],
        engine_facts=facts,
    )
    await source.refresh()
    labels = info_labels(source, "triton")
    assert labels["pid"] == str(proc.popen.pid)
    assert (labels["engine"], labels["model"], labels["version"]) == (
        "triton",
        "ensemble",
        "2.52.0",
    )
    assert labels["max_num_seqs"] == ""  # Triton keeps it in the model config, not the command line
    assert labels["prefix_caching"] == "unknown"

    def broken(name: str) -> Mapping[str, str]:
        raise RuntimeError("engine source not ready")

    fallback = ProcessSource(
        [WorkerSpec(name="triton", url="http://127.0.0.1:1", pid=proc.popen.pid, engine="triton")],
        engine_facts=broken,
    )
    await fallback.refresh()
    labels = info_labels(fallback, "triton")
    assert (labels["engine"], labels["model"], labels["version"]) == ("triton", "", "")


async def test_tgi_settings_from_the_environment(engines: Engines) -> None:
    port, _ = engines.serve(
        ["text-generation-launcher"],
        env={
            "MODEL_ID": "bigscience/bloom-560m",
            "MAX_CONCURRENT_REQUESTS": "77",
            "PREFIX_CACHING": "1",
        },
    )
    source = ProcessSource([worker("tgi", port)])
    await source.refresh()
    labels = info_labels(source, "tgi")
    assert (
        labels["engine"],
        labels["model"],
        labels["max_num_seqs"],
        labels["prefix_caching"],
    ) == (
        "tgi",
        "bigscience/bloom-560m",
        "77",
        "true",
    )


async def test_gpu_variables_of_the_root_process_and_nothing_else(engines: Engines) -> None:
    """Attribution reads the root's NVIDIA_/CUDA_ variables; other variables (secrets) are
    never kept."""
    port = free_port()
    gpu_vars = {
        "NVIDIA_VISIBLE_DEVICES": "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,3",
        "CUDA_VISIBLE_DEVICES": "1,0",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    engines.module("vllm.entrypoints.openai.api_server")
    engines.start(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--port", str(port)],
        port,
        env={**gpu_vars, "HF_TOKEN": "hf_not_to_be_kept"},
    )
    plain, _ = engines.serve(["vllm", "serve", "m"])
    source = ProcessSource([worker("gpu", port), worker("plain", plain)])
    await source.refresh()
    envs = source.gpu_environments()
    assert envs["gpu"] == gpu_vars
    seen = source.worker_process("gpu")
    assert seen is not None and seen.gpu_env == gpu_vars
    # the second engine inherits the test's environment, minus what was set above
    expected_plain = {k: v for k, v in os.environ.items() if k in gpu_vars}
    assert envs["plain"] == expected_plain
    assert "hf_not_to_be_kept" not in repr(envs) + repr(seen)
    # the same mapping until something changes: the NVML source's cache keys on it
    await source.refresh()
    assert source.gpu_environments() is envs


def _run_as_nobody(port: int, pid: int) -> dict[str, object]:
    """Run one pass in a forked child that dropped root, and return what it saw."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            source = ProcessSource(
                [
                    worker("byport", port),
                    WorkerSpec(name="bypid", url="http://127.0.0.1:1", pid=pid),
                ]
            )
            asyncio.run(source.refresh())
            seen = source.worker_process("bypid")
            result: dict[str, object] = {
                "byport": source.worker_process("byport") is not None,
                "byport_failing": source.health.failing("byport"),
                "bypid": info_labels(source, "bypid") if seen else None,
                "bypid_rss": seen.rss_bytes if seen else None,
                "bypid_gpu_env": seen.gpu_env if seen else "not found",
            }
        except BaseException as exc:
            result = {"error": repr(exc)}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(child, 0)
    report: dict[str, object] = json.loads(b"".join(chunks))
    return report


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to drop to nobody"
)
def test_an_agent_without_privileges_degrades_gracefully(engines: Engines) -> None:
    port, proc = engines.serve(
        ["text-generation-launcher", "--max-concurrent-requests", "5"],
        env={"MODEL_ID": "secret-model"},
    )
    # run a pass as root first so that every lazily imported module is loaded
    asyncio.run(ProcessSource([worker("warm", port)]).refresh())

    seen = _run_as_nobody(port, proc.popen.pid)

    assert "error" not in seen, seen
    # the listening socket's owner is hidden from another user: said, not guessed
    assert seen["byport"] is False
    assert seen["byport_failing"] == "access_denied"
    # a configured pid still works: /proc/PID/stat and cmdline are world-readable,
    # the environment is not (so MODEL_ID stays unknown)
    labels = seen["bypid"]
    assert isinstance(labels, dict)
    assert labels["pid"] == str(proc.popen.pid)
    assert labels["max_num_seqs"] == "5"
    assert labels["model"] == ""
    assert isinstance(seen["bypid_rss"], int) and seen["bypid_rss"] > 0
    # nor are its GPU variables: unreadable (None), not "no restriction" ({})
    assert seen["bypid_gpu_env"] is None


async def test_engine_stated_settings_fill_what_the_command_line_leaves_out(
    engines: Engines,
) -> None:
    port = free_port()
    proc = engines.start(
        [engines.script("vllm"), "serve", "m", "--port", str(port), "--no-enable-prefix-caching"],
        port,
    )
    stated = {"prefix_caching": "true", "gpu_memory_utilization": "0.9", "kv_cache_dtype": "fp8"}
    source = ProcessSource(
        [WorkerSpec(name="w", url=f"http://127.0.0.1:{port}", pid=proc.popen.pid)],
        engine_facts=lambda name: stated,
    )
    await source.refresh()
    labels = info_labels(source, "w")
    # the flag on the command line wins; the engine fills what the command line left out
    assert labels["prefix_caching"] == "false"
    assert labels["gpu_memory_utilization"] == "0.9"
    # only the engine states its KV cache dtype (vLLM's cache_config_info cache_dtype)
    assert labels["kv_cache_dtype"] == "fp8"
