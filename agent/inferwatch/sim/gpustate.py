"""The state of a simulated GPU, shared between simulators and the fake NVML backend.

A simulated worker (``inferwatch simulate --gpu-state-dir DIR --gpu-index N``)
writes its *fragment* of GPU N, ``DIR/gpu-N.<tag>.json`` (the tag is the
worker's port), about ten times a second; the agent's fake NVML backend
(``--gpu-backend fake --fake-gpu-state DIR``) reads every fragment of a GPU
and reports their combination (:func:`merge`), as one card shared by several
processes looks to NVML. A file written without a tag (``DIR/gpu-N.json``, the
format before fragments) is one more fragment. Files are replaced atomically
(write to a temporary file, then rename), so a reader never sees half a
document. A worker removes its fragments when it stops; the backend drops one
left by a killed worker (``fakegpu.abandoned``). A GPU with no fragment is an
idle GPU with the defaults below.

A fragment with :attr:`SimGpuState.mig` set describes a worker on one MIG
slice of GPU N: the backend then reports GPU N in MIG mode with one MIG device
per GPU instance found in the fragments (:func:`mig_devices`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

GIB = 1024**3
MIB = 1024**2

#: The thermal model, one definition for the simulator and for merging fragments.
IDLE_TEMPERATURE = 35.0
FULL_LOAD_TEMPERATURE = 78.0
#: share of (limit - idle) drawn at 100 % utilization
POWER_SPAN = 0.9
#: compute slices of an A100/H100 (a ``7g`` profile is the whole GPU)
MIG_SLICES = 7
_PROFILE = re.compile(r"^([1-7])g\.([0-9]+)gb$")
_FRAGMENT = re.compile(r"^gpu-([0-9]+)(?:\.([A-Za-z0-9_-]+))?\.json$")


@dataclass(frozen=True)
class GpuModel:
    """A simulated card; the defaults are an NVIDIA A10 (24 GB, 600 GB/s, 150 W)."""

    name: str = "NVIDIA A10 (simulated)"
    total_bytes: int = 24 * GIB
    reserved_bytes: int = 512 * MIB
    #: memory bandwidth: every decode step streams the weights and the KV it reads
    hbm_bytes_per_s: float = 600e9
    #: dense throughput actually reached by prefill/decode matmuls (about half of peak)
    effective_flops: float = 70e12
    power_idle_watts: float = 55.0
    power_limit_watts: float = 150.0
    #: report GPM (SM active, tensor, DRAM) fields; real Ampere cards do not have GPM
    gpm: bool = True
    #: whether the card can be split into MIG slices (an A10 cannot)
    mig_capable: bool = False


#: the card a simulated worker runs on unless told otherwise (``--gpu-model a10``), and
#: what a GPU with no fragment reports
A10 = GpuModel()


@dataclass
class SimGpuProcess:
    pid: int
    used_bytes: int
    name: str = "python3"
    #: share of SM time this process had over the last sample period, 0..1
    sm_utilization: float = 0.0


class OnSlice:
    """A worker on one MIG slice, by its ``profile``: the simulator's setting
    (``config.MigPlacement``) and a fragment's state (:class:`SimMigSlice`)."""

    #: NVIDIA's profile name, ``<compute slices>g.<memory GB>gb`` (``3g.40gb``)
    profile: str

    @property
    def share(self) -> float:
        """The share of the GPU's compute this slice has (3g: 3/7)."""
        return profile_share(self.profile)


@dataclass
class SimMigSlice(OnSlice):
    """Where a fragment's worker runs: one GPU instance of a GPU in MIG mode."""

    gpu_instance: int
    profile: str
    memory_total_bytes: int
    uuid: str = ""


@dataclass
class SimGpuState:
    """Everything the fake NVML backend reports for one GPU. Ratios are 0..1."""

    name: str = A10.name
    uuid: str = ""
    pci_bus_id: str = ""
    memory_total_bytes: int = A10.total_bytes
    memory_reserved_bytes: int = A10.reserved_bytes
    memory_used_bytes: int = 0
    utilization_gpu: float = 0.0
    utilization_memory: float = 0.0
    #: GPM-style activity; None means "not supported" (the series stays absent)
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    power_watts: float = 60.0
    power_limit_watts: float = A10.power_limit_watts
    #: what the card draws idle; merging fragments adds each one's power above it
    power_idle_watts: float = A10.power_idle_watts
    temperature_celsius: float = 40.0
    sm_clock_hz: float = 1_695e6
    memory_clock_hz: float = 6_251e6
    #: None means "not supported" (a passively cooled board has no fan reading)
    performance_state: int | None = 0
    fan_speed: float | None = 0.3
    pcie_tx_bytes_per_second: float | None = 0.0
    pcie_rx_bytes_per_second: float | None = 0.0
    processes: list[SimGpuProcess] = field(default_factory=list)
    #: the MIG slice this fragment's worker runs on (None: the whole GPU)
    mig: SimMigSlice | None = None
    #: unix time of the last write, for staleness checks
    updated: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> SimGpuState:
        if not isinstance(data, dict):
            raise TypeError(f"a GPU state is a JSON object, not {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["processes"] = [SimGpuProcess(**p) for p in data.get("processes", [])]
        mig = data.get("mig")
        kwargs["mig"] = SimMigSlice(**mig) if mig else None
        return cls(**kwargs)


def parse_profile(profile: str) -> tuple[int, int]:
    """``"3g.40gb"`` -> (3 compute slices, 40 GB); ValueError for anything else."""
    m = _PROFILE.match(profile)
    if m is None:
        raise ValueError(f"not a MIG profile like 3g.40gb: {profile!r}")
    return int(m.group(1)), int(m.group(2))


def profile_share(profile: str) -> float:
    """The share of the GPU's compute a slice of ``profile`` has (``"3g.40gb"``: 3/7)."""
    return parse_profile(profile)[0] / MIG_SLICES


def power_for(idle_watts: float, limit_watts: float, utilization: float) -> float:
    """The power model: idle plus a share of the headroom that grows with utilization."""
    return idle_watts + (limit_watts - idle_watts) * POWER_SPAN * utilization


def gpu_uuid(host: str, index: int) -> str:
    """The UUID of GPU ``index`` of the simulated host ``host`` (its state directory).

    One per GPU, whoever runs on it, and different on another host, as real UUIDs are.
    """
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"inferwatch-sim:{host}:{index}"))


def mig_uuid(host: str, index: int, gpu_instance: int) -> str:
    """The UUID of a MIG device (NVML names them ``MIG-<uuid>``)."""
    return "MIG-" + str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"inferwatch-sim:{host}:{index}:gi{gpu_instance}")
    )


# ---------------------------------------------------------------------- files


def state_path(state_dir: str | os.PathLike[str], index: int, tag: str | int | None = None) -> Path:
    """``DIR/gpu-<index>.json``, or the fragment ``DIR/gpu-<index>.<tag>.json``."""
    name = f"gpu-{index}.json" if tag is None else f"gpu-{index}.{tag}.json"
    return Path(state_dir) / name


def fragment_paths(state_dir: str | os.PathLike[str], index: int) -> list[Path]:
    """Every state file of GPU ``index``, the untagged one first, then by tag."""
    found: list[tuple[str, Path]] = []
    try:
        with os.scandir(state_dir) as it:
            for entry in it:
                m = _FRAGMENT.match(entry.name)
                if m is not None and int(m.group(1)) == index:
                    found.append((m.group(2) or "", Path(entry.path)))
    except FileNotFoundError:
        return []
    return [p for _, p in sorted(found)]


def has_state(state_dir: str | os.PathLike[str], index: int) -> bool:
    """Whether any simulator has published a state for GPU ``index``."""
    return bool(fragment_paths(state_dir, index))


def write_state(
    state_dir: str | os.PathLike[str],
    index: int,
    state: SimGpuState,
    tag: str | int | None = None,
) -> None:
    """Atomically replace the state file (or the fragment ``tag``) of GPU ``index``."""
    target = state_path(state_dir, index, tag)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".gpu-{index}-", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(state.to_json())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_state(
    state_dir: str | os.PathLike[str], index: int, tag: str | int | None = None
) -> None:
    """Withdraw a fragment: its process left the GPU and freed its memory."""
    state_path(state_dir, index, tag).unlink(missing_ok=True)


def read_fragment(path: str | os.PathLike[str]) -> SimGpuState:
    """One state file; ValueError/TypeError/KeyError when it is not one."""
    return SimGpuState.from_dict(json.loads(Path(path).read_text()))


def read_state(state_dir: str | os.PathLike[str], index: int) -> SimGpuState | None:
    """What GPU ``index`` shows now (all its fragments merged), or None with none (yet)."""
    states = []
    for path in fragment_paths(state_dir, index):
        try:
            states.append(read_fragment(path))
        except FileNotFoundError:
            continue  # withdrawn between the listing and the read
    return merge(states) if states else None


# ---------------------------------------------------------------------- combining


def _capped_sum(values: Iterable[float], cap: float = 1.0) -> float:
    return min(cap, sum(values))


def _optional_sum(values: Sequence[float | None], weights: Sequence[float]) -> float | None:
    known = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None]
    if not known:
        return None
    return _capped_sum(v * w for v, w in known)


def merge(states: Sequence[SimGpuState]) -> SimGpuState:
    """One GPU as NVML shows it when every fragment's process runs on it.

    The first fragment names the card (name, UUID, bus id, memory size, power
    limit). Memory used is the sum (at most what the card has); utilization,
    memory busy and GPM activity are summed and capped at 1; power and
    temperature add up each fragment's share above idle (capped at the card's
    full-load values), so they follow the combined utilization; process lists
    are united. A fragment on a MIG slice counts with its slice's share of the
    compute (3g: 3/7) towards the whole GPU's activity. A single whole-GPU
    fragment is returned as written.
    """
    if not states:
        raise ValueError("merge needs at least one state")
    first = states[0]
    if len(states) == 1 and first.mig is None:
        return first  # one process on the whole card: exactly what it wrote
    pairs = [(s, s.mig.share if s.mig is not None else 1.0) for s in states]
    capacity = max(first.memory_total_bytes - first.memory_reserved_bytes, 0)
    idle_w = first.power_idle_watts
    top_w = power_for(idle_w, first.power_limit_watts, 1.0)
    power = idle_w + sum((s.power_watts - s.power_idle_watts) * w for s, w in pairs)
    heat = sum((s.temperature_celsius - IDLE_TEMPERATURE) * w for s, w in pairs)
    weights = [w for _, w in pairs]
    return dataclasses.replace(
        first,
        memory_used_bytes=min(capacity, sum(s.memory_used_bytes for s in states)),
        utilization_gpu=_capped_sum(s.utilization_gpu * w for s, w in pairs),
        utilization_memory=_capped_sum(s.utilization_memory * w for s, w in pairs),
        sm_active=_optional_sum([s.sm_active for s in states], weights),
        sm_occupancy=_optional_sum([s.sm_occupancy for s in states], weights),
        tensor_active=_optional_sum([s.tensor_active for s in states], weights),
        dram_active=_optional_sum([s.dram_active for s in states], weights),
        power_watts=min(top_w, max(idle_w, power)),
        temperature_celsius=min(FULL_LOAD_TEMPERATURE, IDLE_TEMPERATURE + max(0.0, heat)),
        sm_clock_hz=max(s.sm_clock_hz for s in states),
        processes=[p for s in states for p in s.processes],
        mig=None,
        updated=max(s.updated for s in states),
    )


@dataclass
class MigDeviceState:
    """One MIG device of a GPU, as the fragments on its GPU instance describe it."""

    gpu_instance: int
    profile: str
    state: SimGpuState


def mig_devices(states: Sequence[SimGpuState]) -> list[MigDeviceState]:
    """The MIG devices the fragments of one GPU describe, by GPU instance id.

    Several workers on one instance are merged like workers on one GPU; the
    device's memory is its slice's (the driver keeps no separate reservation
    on a slice here), its UUID the first fragment's ``mig.uuid``.
    """
    by_instance: dict[int, list[SimGpuState]] = {}
    for s in states:
        if s.mig is not None:
            by_instance.setdefault(s.mig.gpu_instance, []).append(s)
    out = []
    for gi in sorted(by_instance):
        group = by_instance[gi]
        where = group[0].mig
        assert where is not None
        merged = merge(
            [
                dataclasses.replace(
                    s,
                    mig=None,
                    memory_total_bytes=where.memory_total_bytes,
                    memory_reserved_bytes=0,
                )
                for s in group
            ]
        )
        out.append(MigDeviceState(gi, where.profile, dataclasses.replace(merged, uuid=where.uuid)))
    return out
