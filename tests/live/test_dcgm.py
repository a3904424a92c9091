"""Issue 23 item 1: ``gpu.backend: dcgm-exporter`` maps dcgm-exporter's exposition onto the contract.

The captures under ``tests/data/dcgm/`` are written in dcgm-exporter's text
format (its render template, internal/pkg/rendermetrics/render_metrics.go) from
the field definitions cited in ``inferwatch.agent.collectors.dcgm_fields``; see
``tests/data/dcgm/README.md``. The stand-in is a loopback HTTP server that
serves them as dcgm-exporter does.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.agentrun import AgentRun
from tests.support.dcgm_data import DATA, NEW, OLD
from tests.support.proc import REPO, free_port, inferwatch_cmd
from tests.support.stubworker import StubWorker

from inferwatch.agent.collectors.attribution import WorkerGpuInputs
from inferwatch.agent.collectors.dcgm import (
    DcgmDevice,
    DcgmScrapeError,
    DcgmSource,
    build_families,
    read_exposition,
    worker_devices,
    worker_pods,
)
from inferwatch.agent.config import load_config
from inferwatch.errors import ConfigError

#: 4.10's PCIe names, and NVLink as the optional TX/RX profiling fields (no total field)
NEWEST = (DATA / "dcgm-exporter-4.10-h200x2.prom").read_text()
MIG = (DATA / "dcgm-exporter-4.8-mig.prom").read_text()
MIB = 1024 * 1024
U0 = "GPU-6f1d3a52-0c4e-4b1a-9d2e-1f7a8b9c0d11"
U1 = "GPU-b27e9c40-5a3d-4e8f-8c61-2d4e6f8a0b22"


def value(dev: DcgmDevice, family: str, **labels: str) -> float:
    return dev.values[(family, tuple(labels.items()))]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# ---------------------------------------------------------------------- mapping


@pytest.mark.parametrize("text", [NEW, NEWEST], ids=["4.9-names", "4.10-names"])
def test_pre_and_post_dcgm_4_9_names_give_the_same_contract_values(text: str) -> None:
    old, new = read_exposition(OLD), read_exposition(text)
    assert [d.uuid for d in old] == [d.uuid for d in new] == [U0, U1]
    for a, b in zip(old, new, strict=True):
        assert a.values.keys() == b.values.keys()
        for key, v in a.values.items():
            assert math.isclose(v, b.values[key], rel_tol=1e-12), key
        assert a.clock_events == b.clock_events
        assert (a.name, a.pci_bus_id, a.driver_version, a.pods) == (
            b.name,
            b.pci_bus_id,
            b.driver_version,
            b.pods,
        )


@pytest.mark.parametrize("text", [OLD, NEW, NEWEST], ids=["4.8-names", "4.9-names", "4.10-names"])
def test_values_are_in_the_contracts_base_units(text: str) -> None:
    gpu0, gpu1 = read_exposition(text)
    assert (gpu0.gpu, gpu0.name, gpu0.pci_bus_id) == ("0", "NVIDIA H200", "00000000:19:00.0")
    assert gpu0.driver_version == "570.124.06"
    assert value(gpu0, "inferwatch_gpu_utilization_ratio") == pytest.approx(0.87)
    assert value(gpu0, "inferwatch_gpu_memory_busy_ratio") == pytest.approx(0.41)
    assert value(gpu0, "inferwatch_gpu_sm_clock_hertz") == 1.98e9
    assert value(gpu0, "inferwatch_gpu_memory_clock_hertz") == 3.201e9
    assert value(gpu0, "inferwatch_gpu_energy_joules") == pytest.approx(123_456_789)
    assert value(gpu0, "inferwatch_gpu_power_watts") == pytest.approx(612.345)
    assert value(gpu0, "inferwatch_gpu_temperature_celsius") == 61
    assert value(gpu0, "inferwatch_gpu_memory_used_bytes") == 129024 * MIB
    assert value(gpu0, "inferwatch_gpu_memory_reserved_bytes") == 567 * MIB
    assert value(gpu0, "inferwatch_gpu_memory_total_bytes") == 143771 * MIB
    assert value(gpu0, "inferwatch_gpu_memory_used_ratio") == pytest.approx((129024 + 567) / 143771)
    assert value(gpu0, "inferwatch_gpu_sm_active_ratio") == pytest.approx(0.884)
    assert value(gpu0, "inferwatch_gpu_sm_occupancy_ratio") == pytest.approx(0.372)
    assert value(gpu0, "inferwatch_gpu_tensor_active_ratio") == pytest.approx(0.455)
    assert value(gpu0, "inferwatch_gpu_dram_active_ratio") == pytest.approx(0.618)
    assert value(gpu0, "inferwatch_gpu_graphics_active_ratio") == pytest.approx(0.912)
    tx = value(gpu0, "inferwatch_gpu_pcie_throughput_bytes_per_second", direction="tx")
    rx = value(gpu0, "inferwatch_gpu_pcie_throughput_bytes_per_second", direction="rx")
    assert (tx, rx) == (1.25e9, 3.5e8)
    assert value(gpu0, "inferwatch_gpu_nvlink_throughput_bytes_per_second") == 4.2e9
    assert value(gpu1, "inferwatch_gpu_performance_state") == 2
    assert value(gpu1, "inferwatch_gpu_fan_speed_ratio") == 0
    assert value(gpu1, "inferwatch_gpu_ecc_errors", type="corrected") == 3
    assert value(gpu1, "inferwatch_gpu_ecc_errors", type="uncorrected") == 0
    # 0x60 = sw_thermal | hw_thermal (NVML's clock event reason bits, passed through by DCGM)
    assert {r for r, v in gpu1.clock_events.items() if v} == {"sw_thermal", "hw_thermal"}
    assert not any(gpu0.clock_events.values()) and len(gpu0.clock_events) == 8
    assert gpu0.pods == frozenset({("llm", "vllm-0-7d9f8")}) and gpu1.pods == frozenset()


def test_dcgm_4_10_pcie_and_nvlink_names_and_their_older_spellings() -> None:
    """4.10 renamed the PCIe and NVLink profiling fields (units unchanged, B/s): the new
    names, the old ones a custom counters CSV keeps, and the NVLink total winning over
    the TX + RX sum where a GPU reports both."""
    gpu0 = read_exposition(NEWEST)[0]
    assert value(gpu0, "inferwatch_gpu_pcie_throughput_bytes_per_second", direction="tx") == 1.25e9
    assert value(gpu0, "inferwatch_gpu_nvlink_throughput_bytes_per_second") == 2.5e9 + 1.7e9
    # the pre-4.10 spellings of the NVLink profiling fields (a custom CSV)
    older = NEWEST.replace("_NVLINK_TX_BYTES_PER_SECOND", "_NVLINK_TX_BYTES").replace(
        "_NVLINK_RX_BYTES_PER_SECOND", "_NVLINK_RX_BYTES"
    )
    assert "NVLINK_TX_BYTES_PER_SECOND" not in older
    gpu0_older = read_exposition(older)[0]
    assert value(gpu0_older, "inferwatch_gpu_nvlink_throughput_bytes_per_second") == 4.2e9
    # one direction alone is no total
    tx_only = "\n".join(line for line in NEWEST.splitlines() if "NVLINK_RX" not in line)
    gpu0_tx = read_exposition(tx_only)[0]
    assert ("inferwatch_gpu_nvlink_throughput_bytes_per_second", ()) not in gpu0_tx.values
    # a total field, where present, wins over the sum
    total = f'DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND{{gpu="0",UUID="{U0}"}} 9e9\n'
    gpu0_both = read_exposition(NEWEST + total)[0]
    assert value(gpu0_both, "inferwatch_gpu_nvlink_throughput_bytes_per_second") == 9e9


def test_mig_instances_get_their_own_identity_and_the_nvml_sources_labels() -> None:
    parent, big, small = read_exposition(MIG)
    assert (parent.uuid, parent.gpu_instance, parent.mig_mode) == (U0, None, "enabled")
    assert value(parent, "inferwatch_gpu_power_watts") == 402.5
    assert big.uuid == f"MIG-{U0}/1" and small.uuid == f"MIG-{U0}/2"
    assert big.labels() == {
        "gpu": "0",
        "uuid": f"MIG-{U0}/1",
        "gpu_instance": "1",
        "mig_profile": "3g.71gb",
    }
    assert small.mig_profile == "1g.18gb"
    # no reserved field on a GPU instance: total = used + free
    assert value(big, "inferwatch_gpu_memory_total_bytes") == 71680 * MIB
    assert value(big, "inferwatch_gpu_memory_used_ratio") == pytest.approx(52000 / 71680)
    assert value(big, "inferwatch_gpu_sm_active_ratio") == 0.81
    assert ("inferwatch_gpu_utilization_ratio", ()) not in big.values

    answers = worker_devices([parent, big, small], {"big": ("llm", "vllm-big-0")})
    assert answers["big"].source == "dcgm_pods"
    pairs = [(w, d) for w, a in answers.items() for d in a.devices]
    text = "".join(_render(build_families([parent, big, small], pairs)))
    got = samples(text)
    key = (
        "inferwatch_worker_gpu_info",
        tuple(sorted({"worker": "big", **big.labels()}.items())),
    )
    assert got[key] == 1.0
    assert sum(1 for name, _ in got if name == "inferwatch_worker_gpu_info") == 1


def test_series_of_other_entities_and_unusable_values_are_skipped() -> None:
    extra = (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{nvlink="0",gpu="0",gpu_uuid="GPU-x"} 50\n'
        'DCGM_FI_DEV_GPU_UTIL{cpu="0",hostname="h"} 10\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-nan"} NaN\n'
        "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"
        'DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-y",xid="79"} 1\n'
    )
    assert read_exposition(extra) == ()
    with pytest.raises(DcgmScrapeError) as err:
        read_exposition('# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0" 5\n')
    assert err.value.reason == "parse"


def test_a_worker_pod_is_configured_or_the_sidecars_own() -> None:
    assert worker_pods({"a": "llm/vllm-a", "b": "vllm-b"}, ["a", "b"], env={}) == {
        "a": ("llm", "vllm-a"),
        "b": (None, "vllm-b"),
    }
    assert worker_pods({}, ["only"], env={"HOSTNAME": "vllm-0-7d9f8"}) == {
        "only": (None, "vllm-0-7d9f8")
    }
    assert worker_pods({}, ["a", "b"], env={"HOSTNAME": "node"}) == {}


def test_workers_without_a_pod_label_are_attributed_like_on_nvml() -> None:
    """dcgm-exporter's pod labels first; else the kubelet's allocation, the worker's
    visible devices, workers[].gpus: the NVML backend's sources that need no process list."""
    devices = read_exposition(NEW)  # GPU 0 carries pod llm/vllm-0-7d9f8, GPU 1 no pod
    inputs = [
        WorkerGpuInputs("pod", gpus=(U1,)),  # its pod label wins over the configuration
        WorkerGpuInputs("conf", gpus=(U1,)),
        WorkerGpuInputs("env", env={"NVIDIA_VISIBLE_DEVICES": U1}),
        WorkerGpuInputs("kubelet", allocated=(U0,)),
        WorkerGpuInputs("unknown"),
    ]
    answers = worker_devices(devices, {"pod": ("llm", "vllm-0-7d9f8")}, inputs, {})
    got = {w: (a.source, tuple(d.uuid for d in a.devices)) for w, a in answers.items()}
    assert got == {
        "pod": ("dcgm_pods", (U0,)),
        "conf": ("config", (U1,)),
        "env": ("environment", (U1,)),
        "kubelet": ("pod_resources", (U0,)),
        "unknown": (None, ()),
    }
    pairs = [(w, d) for w, a in answers.items() for d in a.devices]
    labels = {"conf": {"namespace": "llm", "pod": "vllm-conf-0"}}
    text = "".join(_render(build_families(devices, pairs, labels)))
    info = [dict(labels) for name, labels in samples(text) if name == "inferwatch_worker_gpu_info"]
    assert len(info) == 4
    assert {
        "worker": "conf",
        "gpu": "1",
        "uuid": U1,
        "namespace": "llm",
        "pod": "vllm-conf-0",
    } in info


def _render(families: list) -> list[str]:  # type: ignore[type-arg]
    from inferwatch.agent.exposition import family_text

    return [family_text(f) for f in families]


# ---------------------------------------------------------------------- the source


def test_source_scrapes_a_loopback_exporter_fails_and_recovers() -> None:
    stub = StubWorker(lambda: OLD)
    source = DcgmSource(
        stub.url + "/metrics", interval=0.1, pods={"vllm-0": ("llm", "vllm-0-7d9f8")}
    )

    async def run() -> None:
        try:
            await source.refresh()
            got = samples("".join(_render(list(source.families()))))
            assert got[("inferwatch_gpu_up", (("gpu", "1"), ("uuid", U1)))] == 1.0
            info = (
                "inferwatch_worker_gpu_info",
                (("gpu", "0"), ("uuid", U0), ("worker", "vllm-0")),
            )
            assert got[info] == 1.0
            assert got[("inferwatch_gpu_energy_joules_total", (("gpu", "0"), ("uuid", U0)))] == (
                pytest.approx(123_456_789)
            )
            assert source.health.last_success is not None

            stub.status = 503
            await source.refresh()
            got = samples("".join(_render(list(source.families()))))
            assert got[("inferwatch_gpu_up", (("gpu", "1"), ("uuid", U1)))] == 0.0
            assert not any(name == "inferwatch_gpu_power_watts" for name, _ in got)
            assert source.health.errors == {"http_status": 1}

            stub.status = 200
            stub.body = lambda: "# TYPE up gauge\nup 1\n"
            await source.refresh()
            assert source.health.errors == {"http_status": 1, "no_gpu_metrics": 1}

            stub.body = lambda: NEW
            await source.refresh()
            got = samples("".join(_render(list(source.families()))))
            assert got[("inferwatch_gpu_up", (("gpu", "1"), ("uuid", U1)))] == 1.0
            assert source.health.failing() is None

            # GPU 1 falls off the bus: dcgm-exporter stops writing its rows
            stub.body = lambda: "\n".join(
                line for line in NEW.splitlines() if 'gpu="1"' not in line
            )
            await source.refresh()
            got = samples("".join(_render(list(source.families()))))
            assert got[("inferwatch_gpu_up", (("gpu", "1"), ("uuid", U1)))] == 0.0
            assert got[("inferwatch_gpu_up", (("gpu", "0"), ("uuid", U0)))] == 1.0
            assert not any(
                name == "inferwatch_gpu_power_watts" and ("gpu", "1") in labels
                for name, labels in got
            )
        finally:
            await source.stop()
            stub.stop()

    asyncio.run(run())


def test_an_unreachable_exporter_is_a_connect_error_without_the_password() -> None:
    port = free_port()
    source = DcgmSource(f"http://user:s3cret@127.0.0.1:{port}/metrics", timeout=2)

    async def run() -> None:
        try:
            await source.refresh()
        finally:
            await source.stop()

    asyncio.run(run())
    assert source.health.errors == {"connect": 1}
    assert list(source.families()) == []
    assert "s3cret" not in source.shown_url


# ---------------------------------------------------------------------- configuration


def test_backend_url_from_file_flag_and_environment(tmp_path: Path) -> None:
    default = load_config(flags={"gpu.backend": "dcgm-exporter"}, env={})
    assert default.gpu.backend == "dcgm-exporter"
    assert default.gpu.dcgm_exporter_url == "http://127.0.0.1:9400/metrics"
    env = load_config(env={"INFERWATCH_DCGM_EXPORTER_URL": "http://dcgm.gpu-operator:9400"})
    assert env.gpu.dcgm_exporter_url == "http://dcgm.gpu-operator:9400/metrics"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "gpu:\n  backend: dcgm-exporter\n  dcgm_exporter_url: http://a:1/m\n"
        "  dcgm_worker_pods: {w: llm/vllm-0}\nworkers: [{name: w, url: 'http://127.0.0.1:8000'}]\n"
    )
    both = load_config(
        str(cfg),
        flags={"gpu.dcgm_exporter_url": "http://b:2/metrics"},
        env={"INFERWATCH_DCGM_EXPORTER_URL": "http://c:3/metrics"},
    )
    assert both.gpu.dcgm_exporter_url == "http://b:2/metrics"
    assert both.gpu.dcgm_worker_pods == {"w": "llm/vllm-0"}


def test_bad_values_are_one_line_errors_that_hide_a_password(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(flags={"gpu.dcgm_exporter_url": "ftp://u:hunter2@x/metrics"}, env={})
    text = str(err.value)
    assert "--dcgm-exporter-url" in text and "gpu.dcgm_exporter_url" in text
    assert "hunter2" not in text and "\n" not in text
    cfg = tmp_path / "c.yaml"
    cfg.write_text("gpu:\n  dcgm_worker_pods: {nobody: llm/x}\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(cfg), env={})
    assert "gpu.dcgm_worker_pods.nobody" in str(err.value) and str(cfg) in str(err.value)


def test_cli_rejects_a_bad_url_with_exit_2() -> None:
    args = ("run", "--gpu-backend", "dcgm-exporter", "--dcgm-exporter-url", "nope")
    proc = subprocess.run(inferwatch_cmd(*args), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--dcgm-exporter-url" in lines[0], proc.stderr


# ---------------------------------------------------------------------- the agent


def test_agent_exports_documented_families_from_dcgm_exporter(tmp_path: Path) -> None:
    stub = StubWorker(lambda: NEW)
    agent = AgentRun(
        tmp_path, "--gpu-backend", "dcgm-exporter", "--dcgm-exporter-url", f"{stub.url}/metrics"
    )
    try:
        text = agent.until(
            lambda t: "inferwatch_gpu_up" in t, 30, "agent serving dcgm-exporter's GPUs"
        )
    finally:
        agent.stop()
        stub.stop()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    gpu_names = {n for n in names if n.startswith("inferwatch_gpu")}
    doc = (REPO / "docs" / "metrics.md").read_text()
    assert "inferwatch_gpu_utilization_ratio" in gpu_names and len(gpu_names) >= 20
    missing = {n for n in gpu_names if f"`{n}`" not in doc}
    assert not missing, f"exported but not in docs/metrics.md: {sorted(missing)}"
    assert 'inferwatch_last_collect_timestamp_seconds{collector="dcgm"}' in text
