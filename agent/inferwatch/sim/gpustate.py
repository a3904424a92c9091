"""The state of a simulated GPU, shared between a simulator and the fake NVML backend.

A simulated worker (``inferwatch simulate --gpu-state-dir DIR --gpu-index N``)
writes ``DIR/gpu-N.json`` every engine step; the agent's fake NVML backend
(``--gpu-backend fake --fake-gpu-state DIR``) reads it whenever NVML is asked.
The file is replaced atomically (write to a temporary file, then rename), so a
reader never sees half a document. A GPU with no file is an idle GPU with the
defaults below.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

GIB = 1024**3


@dataclass
class SimGpuProcess:
    pid: int
    used_bytes: int
    name: str = "python3"
    #: share of SM time this process had over the last sample period, 0..1
    sm_utilization: float = 0.0


@dataclass
class SimGpuState:
    """Everything the fake NVML backend reports for one GPU. Ratios are 0..1."""

    name: str = "NVIDIA A10 (simulated)"
    uuid: str = ""
    pci_bus_id: str = ""
    memory_total_bytes: int = 24 * GIB
    memory_reserved_bytes: int = 512 * 1024**2
    memory_used_bytes: int = 0
    utilization_gpu: float = 0.0
    utilization_memory: float = 0.0
    #: GPM-style activity; None means "not supported" (the series stays absent)
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    power_watts: float = 60.0
    power_limit_watts: float = 150.0
    temperature_celsius: float = 40.0
    sm_clock_hz: float = 1_695e6
    memory_clock_hz: float = 6_251e6
    #: None means "not supported" (a passively cooled board has no fan reading)
    performance_state: int | None = 0
    fan_speed: float | None = 0.3
    pcie_tx_bytes_per_second: float | None = 0.0
    pcie_rx_bytes_per_second: float | None = 0.0
    processes: list[SimGpuProcess] = field(default_factory=list)
    #: unix time of the last write, for staleness checks
    updated: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> SimGpuState:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["processes"] = [SimGpuProcess(**p) for p in data.get("processes", [])]
        return cls(**kwargs)


def state_path(state_dir: str | os.PathLike[str], index: int) -> Path:
    return Path(state_dir) / f"gpu-{index}.json"


def write_state(state_dir: str | os.PathLike[str], index: int, state: SimGpuState) -> None:
    """Atomically replace the state file of GPU ``index``."""
    target = state_path(state_dir, index)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".gpu-{index}-", suffix=".json", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(state.to_json())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_state(state_dir: str | os.PathLike[str], index: int) -> SimGpuState | None:
    """The last written state of GPU ``index``, or None when there is none (yet)."""
    try:
        text = state_path(state_dir, index).read_text()
    except FileNotFoundError:
        return None
    return SimGpuState.from_dict(json.loads(text))
