"""Which GPUs (or MIG devices) each worker runs on: the logic behind ``inferwatch_worker_gpu_info``.

Pure functions over what the NVML pass saw (the device list with each device's
compute processes) and what the process source and the configuration know of
each worker. Six sources, asked in this order; the first that answers for a
worker wins (docs/attribution.md):

1. ``processes``: the worker's process tree (vLLM's tensor-parallel ranks are
   child processes) found in NVML's compute-process list of a device. Needs the
   agent in the host PID namespace, or in the worker's.
1a. ``pod_processes``: NVML's PIDs joined to the worker's pod and container through
   their cgroups (Kubernetes discovery with hostPID: time-slicing, MPS).
1b. ``pod_resources``: the device IDs the kubelet's pod-resources API says the
   device plugin allocated to the worker's container (``nvidia.com/gpu``,
   ``nvidia.com/mig-*``).
2. ``environment``: the worker root process's ``NVIDIA_VISIBLE_DEVICES`` (what the
   container runtime gave the container) and ``CUDA_VISIBLE_DEVICES`` (what CUDA
   picks among those), resolved as the runtime and CUDA do.
3. ``agent_environment``: a one-worker sidecar whose own environment restricts
   its devices: the worker runs on every device the agent may use.
4. ``config``: ``workers[].gpus`` in the configuration file.

CUDA facts used here, from NVIDIA's CUDA Programming Guide, appendix "CUDA
Environment Variables" (https://docs.nvidia.com/cuda/cuda-programming-guide/
05-appendices/environment-variables.html): CUDA_VISIBLE_DEVICES is a comma
separated list of integer indices or UUIDs (``GPU-...``, which may be shortened
to any prefix that names one GPU, and ``MIG-...``); devices are enumerated in
the list's order; parsing stops at the first invalid entry; an empty value
hides every GPU. CUDA_DEVICE_ORDER is FASTEST_FIRST by default, PCI_BUS_ID
orders by PCI bus id. The container runtime's values of NVIDIA_VISIBLE_DEVICES
(``all``, ``none``, ``void`` or empty, a list of indices or UUIDs) are from the
NVIDIA container runtime's README (github.com/NVIDIA/nvidia-container-runtime).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from inferwatch.engines import contract

log = logging.getLogger(__name__)

#: The variables of a worker's environment that attribution reads (and the only ones kept).
GPU_ENV_VARS = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")

#: Source names, in the order they are asked.
SOURCES = (
    "dcgm_pods",
    "processes",
    "pod_processes",
    "pod_resources",
    "environment",
    "agent_environment",
    "config",
)
SOURCE_TEXT = {
    "dcgm_pods": "dcgm-exporter's pod labels (gpu.backend: dcgm-exporter)",
    "processes": "NVML's process list",
    "pod_processes": "NVML's process list joined to pods through cgroups",
    "pod_resources": "the kubelet's pod-resources allocation",
    "environment": "the worker's NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES",
    "agent_environment": "the agent's own visible devices (one-worker sidecar)",
    "config": "workers[].gpus in the configuration",
}
#: The one line logged for a worker no source answers for.
HOW_TO_ENABLE = (
    "run the agent in the host PID namespace (hostPID: true, Compose pid: host) so NVML's "
    "process list names the worker's processes, or let it read the worker's environment "
    "(same user or CAP_SYS_PTRACE), or set workers[].gpus in the configuration file"
)
#: Distinct notes (skipped entries) remembered per worker, so a changing value cannot grow memory.
MAX_NOTES = 32

_MIG_LEGACY = re.compile(r"^MIG-(GPU-[0-9a-fA-F-]+)/(\d+)/(\d+)$")


@dataclass(frozen=True, kw_only=True)
class GpuDevice:
    """One GPU or MIG device as a pass read it, whichever backend read it (NVML's
    ``DeviceReading``, dcgm-exporter's ``DcgmDevice``): what attribution and
    ``inferwatch_gpu_info`` need of it."""

    #: the GPU's index (a MIG device's: its GPU's)
    gpu: str
    uuid: str
    name: str = ""
    pci_bus_id: str = ""
    driver_version: str = ""
    mig_mode: str = "unknown"
    #: a MIG device's GPU instance and profile; None on a whole GPU
    gpu_instance: str | None = None
    mig_profile: str | None = None
    #: False for a device that does not answer (NVML), or that the last scrape did not
    #: carry or failed to read (dcgm-exporter)
    up: bool = True

    @property
    def pids(self) -> tuple[int, ...]:
        """The PIDs in the device's compute-process list (none: the backend lists none)."""
        return ()

    def labels(self) -> dict[str, str]:
        """The labels naming one GPU (``gpu``, ``uuid``) or MIG device (and ``gpu_instance``,
        ``mig_profile``) on every GPU series."""
        labels = {"gpu": self.gpu, "uuid": self.uuid}
        if self.gpu_instance is not None:
            labels["gpu_instance"] = self.gpu_instance
            labels["mig_profile"] = self.mig_profile or "unknown"
        return labels


@dataclass(frozen=True)
class WorkerGpuInputs:
    """What the agent knows of one worker, for attribution."""

    name: str
    #: the root process's GPU variables (GPU_ENV_VARS); None when unreadable or not found
    env: Mapping[str, str] | None = None
    #: ``workers[].gpus``: NVML indices or GPU-/MIG- UUIDs
    gpus: tuple[int | str, ...] | None = None
    #: device IDs the kubelet allocated to the worker's container (pod-resources)
    allocated: tuple[str, ...] | None = None
    #: extra labels of the worker's series (namespace, pod, container), copied onto
    #: its inferwatch_worker_gpu_info series
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Answer:
    """Where a worker runs: the devices and the source that said so (None: none did)."""

    source: str | None
    devices: tuple[GpuDevice, ...] = ()
    #: entries skipped on the way, each to be logged once
    notes: tuple[str, ...] = ()


@dataclass
class _Resolution:
    #: None: this source does not answer
    devices: list[GpuDevice] | None
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- helpers


def _is_mig(dev: GpuDevice) -> bool:
    return dev.gpu_instance is not None


def cuda_capable(devices: Sequence[GpuDevice]) -> list[GpuDevice]:
    """Devices a CUDA process can run on: whole GPUs not in MIG mode, and MIG devices."""
    return [d for d in devices if _is_mig(d) or d.mig_mode != "enabled"]


def _expand(dev: GpuDevice, devices: Sequence[GpuDevice]) -> list[GpuDevice]:
    """A GPU in MIG mode stands for its MIG devices (a container given it gets them all)."""
    if _is_mig(dev) or dev.mig_mode != "enabled":
        return [dev]
    return [d for d in devices if _is_mig(d) and d.gpu == dev.gpu]


def _by_uuid(entry: str, candidates: Sequence[GpuDevice]) -> GpuDevice | None:
    """The device an UUID names: exact, else the one device it is a prefix of (as CUDA)."""
    want = entry.lower()
    for dev in candidates:
        if dev.uuid.lower() == want:
            return dev
    hits = [d for d in candidates if d.uuid.lower().startswith(want)]
    return hits[0] if len(hits) == 1 else None


def _legacy_mig(
    entry: str, candidates: Sequence[GpuDevice], parents: Sequence[GpuDevice]
) -> GpuDevice | None:
    """``MIG-GPU-<uuid>/<gpu instance>/<compute instance>`` (drivers before R470)."""
    m = _MIG_LEGACY.match(entry)
    if m is None:
        return None
    parent = _by_uuid(m.group(1), [d for d in parents if not _is_mig(d)])
    if parent is None:
        return None
    hits = [
        d for d in candidates if _is_mig(d) and d.gpu == parent.gpu and d.gpu_instance == m.group(2)
    ]
    return hits[0] if len(hits) == 1 else None


def _uuid_entry(
    entry: str, candidates: Sequence[GpuDevice], parents: Sequence[GpuDevice] = ()
) -> GpuDevice | None:
    """The device among ``candidates`` an UUID names; ``parents``: where the GPU of a
    MIG device named by its parent's UUID is looked up (default: the candidates)."""
    if entry.upper().startswith("MIG-GPU-"):
        return _legacy_mig(entry, candidates, parents or candidates)
    return _by_uuid(entry, candidates)


def _is_uuid(entry: str) -> bool:
    return entry.upper().startswith(("GPU-", "MIG-"))


def _entries(value: str) -> list[str]:
    return [part.strip() for part in value.split(",")]


def _dedup(devices: list[GpuDevice]) -> list[GpuDevice]:
    seen: set[str] = set()
    out = []
    for dev in devices:
        if dev.uuid not in seen:
            seen.add(dev.uuid)
            out.append(dev)
    return out


def _unrestricted(value: str | None) -> bool:
    return value is None or value.strip().lower() == "all"


# ---------------------------------------------------------------------- sources


def process_index(
    devices: Sequence[GpuDevice], pid_workers: Mapping[int, str]
) -> dict[str, list[GpuDevice]]:
    """Worker -> the devices whose compute-process list holds one of its processes."""
    index: dict[str, list[GpuDevice]] = {}
    for dev in devices:
        owners = {pid_workers[pid] for pid in dev.pids if pid in pid_workers}
        for worker in sorted(owners):
            index.setdefault(worker, []).append(dev)
    return index


def from_processes(
    worker: str,
    devices: Sequence[GpuDevice],
    index: Mapping[str, Sequence[GpuDevice]],
    previous: Sequence[GpuDevice] = (),
) -> list[GpuDevice] | None:
    """Source 1: the devices whose compute-process list holds a process of the worker's
    tree (``index``: :func:`process_index` of this pass).

    ``previous``: the devices this source named last time. One of them that is now
    lost (``up`` false: NVML lists no process on it any more) stays the worker's,
    so that a GPU that falls off the bus is still joined to the worker it served.
    """
    found = list(index.get(worker, ()))
    lost = {d.uuid: d for d in devices if not d.up}
    names = {d.uuid for d in found}
    for dev in previous:
        if dev.uuid in lost and dev.uuid not in names:
            found.append(lost[dev.uuid])
            names.add(dev.uuid)
    return found or None


def visible_to_runtime(
    value: str | None, devices: Sequence[GpuDevice], *, host_indices: bool
) -> _Resolution:
    """The devices NVIDIA_VISIBLE_DEVICES gives a container (None: no restriction).

    ``host_indices``: whether an integer entry (a host GPU index) is an NVML index
    here, which holds when the agent itself sees every GPU of the host.
    """
    if _unrestricted(value):
        return _Resolution(None)
    assert value is not None
    text = value.strip()
    if text.lower() in ("none", "void", ""):
        # none: driver libraries without a GPU; void or empty: no GPU support at all
        return _Resolution([])
    entries = [(entry, f"NVIDIA_VISIBLE_DEVICES entry {entry!r}") for entry in _entries(text)]
    out, notes = _host_devices(entries, devices, host_indices=host_indices)
    return _Resolution(out, notes)


def _host_devices(
    entries: Iterable[tuple[str, str]], devices: Sequence[GpuDevice], *, host_indices: bool
) -> tuple[list[GpuDevice], list[str]]:
    """The devices host-level IDs name (each with how a note shows it), MIG slices of a
    named GPU included, without repeats; a note for each ID skipped."""
    out: list[GpuDevice] = []
    notes: list[str] = []
    for entry, shown in entries:
        if entry.isdigit() and not host_indices:
            notes.append(
                f"{shown} is a host GPU index, and this agent's own devices are restricted, "
                "so its NVML indices are not the host's; skipped (UUIDs are exact)"
            )
            continue
        dev = _host_device(entry, devices)
        if dev is None:
            notes.append(f"{shown} names no device NVML lists")
            continue
        out.extend(_expand(dev, devices))
    return _dedup(out), notes


def _host_device(entry: str, devices: Sequence[GpuDevice]) -> GpuDevice | None:
    """The device a host-level ID names (NVIDIA_VISIBLE_DEVICES, pod-resources): a whole
    GPU by NVML index, or a GPU or MIG device by UUID; None for anything else."""
    if entry.isdigit():
        return next((d for d in devices if not _is_mig(d) and d.gpu == entry), None)
    return _uuid_entry(entry, devices) if _is_uuid(entry) else None


def cuda_order(gpus: Sequence[GpuDevice], device_order: str | None) -> list[GpuDevice] | None:
    """Whole GPUs in the order CUDA's integer indices count them; None when unknowable.

    PCI bus order when CUDA_DEVICE_ORDER=PCI_BUS_ID, or when every GPU is the same
    model (FASTEST_FIRST then ties, broken by PCI bus id). Mixed models under
    FASTEST_FIRST leave the order to a speed heuristic this agent does not reproduce.
    """
    ordered = sorted(gpus, key=lambda d: d.pci_bus_id.lower())
    if (device_order or "").strip().upper() == "PCI_BUS_ID":
        return ordered
    if len({d.name for d in gpus}) <= 1:
        return ordered
    return None


def _whole_gpus(visible: Sequence[GpuDevice], devices: Sequence[GpuDevice]) -> list[GpuDevice]:
    """The GPUs of the visible devices: a MIG device counts as its GPU, once."""
    parents = {d.gpu: d for d in devices if not _is_mig(d)}
    out: list[GpuDevice] = []
    seen: set[str] = set()
    for dev in visible:
        whole = parents.get(dev.gpu) if _is_mig(dev) else dev
        if whole is not None and whole.uuid not in seen:
            seen.add(whole.uuid)
            out.append(whole)
    return out


def select_cuda(
    value: str,
    visible: Sequence[GpuDevice],
    device_order: str | None,
    devices: Sequence[GpuDevice] = (),
) -> _Resolution:
    """The devices CUDA_VISIBLE_DEVICES selects among ``visible`` (``devices``: every
    device NVML lists, MIG-mode GPUs included)."""
    if value.strip() == "":
        return _Resolution([])
    out: list[GpuDevice] = []
    notes: list[str] = []
    order: list[GpuDevice] | None = None
    order_known = False
    for entry in _entries(value):
        dev: GpuDevice | None = None
        if re.fullmatch(r"-?\d+", entry):
            if not order_known:
                whole = _whole_gpus(visible, devices or visible)
                order, order_known = cuda_order(whole, device_order), True
            if order is None:
                notes.append(
                    f"CUDA_VISIBLE_DEVICES entry {entry!r} is an index, and CUDA's order of "
                    "these GPUs is not known (mixed models without CUDA_DEVICE_ORDER=PCI_BUS_ID); "
                    "skipped (UUIDs are exact)"
                )
                continue
            index = int(entry)
            dev = order[index] if 0 <= index < len(order) else None
            if dev is not None and dev.mig_mode == "enabled":
                notes.append(
                    f"CUDA_VISIBLE_DEVICES entry {entry!r} is the index of a GPU in MIG mode, "
                    "whose MIG device CUDA picks is not known; skipped (name the MIG device's UUID)"
                )
                continue
        elif _is_uuid(entry):
            dev = _uuid_entry(entry, visible, devices)
            in_mig_mode = [d for d in devices if not _is_mig(d) and d.mig_mode == "enabled"]
            if dev is None and _by_uuid(entry, in_mig_mode) is not None:
                notes.append(
                    f"CUDA_VISIBLE_DEVICES entry {entry!r} names a GPU in MIG mode; skipped "
                    "(name the MIG device's UUID)"
                )
                continue
        if dev is None:
            # CUDA stops at the first invalid entry: the rest are not visible either.
            notes.append(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} names no visible device; CUDA ignores "
                "it and every entry after it"
            )
            break
        out.append(dev)
    return _Resolution(_dedup(out), notes)


def from_environment(
    env: Mapping[str, str] | None, devices: Sequence[GpuDevice], *, host_indices: bool
) -> _Resolution:
    """Source 2: the worker's NVIDIA_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES among those."""
    if env is None:
        return _Resolution(None)
    runtime_value = env.get("NVIDIA_VISIBLE_DEVICES")
    cuda_value = env.get("CUDA_VISIBLE_DEVICES")
    if _unrestricted(runtime_value) and cuda_value is None:
        return _Resolution(None)  # every GPU visible says nothing of which ones it uses
    runtime = visible_to_runtime(runtime_value, devices, host_indices=host_indices)
    visible = cuda_capable(devices) if runtime.devices is None else runtime.devices
    explicit_none = runtime.devices == [] and not runtime.notes
    if cuda_value is None or explicit_none:
        return _Resolution(
            visible if (visible or explicit_none) else None,
            runtime.notes,
        )
    chosen = select_cuda(cuda_value, visible, env.get("CUDA_DEVICE_ORDER"), devices)
    assert chosen.devices is not None
    notes = runtime.notes + chosen.notes
    if not chosen.devices and cuda_value.strip() != "":
        return _Resolution(None, notes)  # nothing resolved: unknown, not "no GPU"
    return _Resolution(chosen.devices, notes)


def from_agent_environment(own_env: Mapping[str, str], devices: Sequence[GpuDevice]) -> _Resolution:
    """Source 3: the devices the agent itself may use, when its environment restricts them.

    The container runtime has already narrowed what NVML shows the agent, so an
    NVIDIA_VISIBLE_DEVICES of host indices means every device NVML lists; UUIDs
    are matched exactly all the same. CUDA_VISIBLE_DEVICES selects among them.
    """
    runtime_value = own_env.get("NVIDIA_VISIBLE_DEVICES")
    cuda_value = own_env.get("CUDA_VISIBLE_DEVICES")
    if _unrestricted(runtime_value) and (cuda_value is None or cuda_value.strip().lower() == "all"):
        return _Resolution(None)
    capable = cuda_capable(devices)
    visible = capable
    notes: list[str] = []
    if not _unrestricted(runtime_value):
        assert runtime_value is not None
        entries = _entries(runtime_value.strip())
        if entries and all(_is_uuid(e) for e in entries):
            runtime = visible_to_runtime(runtime_value, devices, host_indices=False)
            visible, notes = runtime.devices or [], runtime.notes
        elif runtime_value.strip().lower() in ("none", "void", ""):
            visible = []
    if cuda_value is None or cuda_value.strip().lower() == "all":
        return _Resolution(visible or None, notes)
    chosen = select_cuda(cuda_value, visible, own_env.get("CUDA_DEVICE_ORDER"), devices)
    return _Resolution(chosen.devices or None, notes + chosen.notes)


def from_config(gpus: Sequence[int | str] | None, devices: Sequence[GpuDevice]) -> _Resolution:
    """Source 4: ``workers[].gpus``: NVML indices (whole GPUs) or GPU-/MIG- UUIDs."""
    if not gpus:
        return _Resolution(None)
    out: list[GpuDevice] = []
    notes: list[str] = []
    for entry in gpus:
        dev: GpuDevice | None
        if isinstance(entry, int):
            hits = [d for d in devices if not _is_mig(d) and d.gpu == str(entry)]
            dev = hits[0] if hits else None
        else:
            dev = _uuid_entry(entry, devices)
        if dev is None:
            notes.append(f"workers[].gpus entry {entry!r} names no device NVML lists")
            continue
        out.append(dev)
    return _Resolution(_dedup(out) or None, notes)


def from_device_ids(
    ids: Sequence[str] | None, devices: Sequence[GpuDevice], *, host_indices: bool
) -> _Resolution:
    """Source 1b: the device plugin's IDs from pod-resources.

    NVIDIA's device plugin (k8s-device-plugin README): GPU or MIG UUIDs by default,
    NVML indices with ``deviceIDStrategy: index``; a time-sliced replica is the
    GPU's ID with ``::<replica>`` appended, and is that GPU.
    """
    if not ids:
        return _Resolution(None)
    entries = [(raw.split("::", 1)[0].strip(), f"pod-resources device ID {raw!r}") for raw in ids]
    out, notes = _host_devices(entries, devices, host_indices=host_indices)
    return _Resolution(out or None, notes)


# ---------------------------------------------------------------------- all sources


def host_indices_match(own_env: Mapping[str, str]) -> bool:
    """Whether NVML indices here are host indices: the agent is not limited to some GPUs."""
    return _unrestricted(own_env.get("NVIDIA_VISIBLE_DEVICES"))


def attribute(
    workers: Sequence[WorkerGpuInputs],
    devices: Sequence[GpuDevice],
    *,
    pid_workers: Mapping[int, str],
    own_env: Mapping[str, str],
    previous: Mapping[str, Answer] | None = None,
    pod_pid_workers: Mapping[int, str] | None = None,
) -> dict[str, Answer]:
    """Each worker's devices from the first source that answers, in SOURCES order.

    ``previous``: the answers of the last call (a lost GPU keeps its worker);
    ``pod_pid_workers``: host PID -> worker from cgroups (Kubernetes discovery).
    """
    host_indices = host_indices_match(own_env)
    sidecar = len(workers) == 1
    by_worker = process_index(devices, pid_workers)
    by_pod = process_index(devices, pod_pid_workers) if pod_pid_workers else {}
    answers: dict[str, Answer] = {}
    for worker in workers:
        notes: list[str] = []
        answer: Answer | None = None
        last = (previous or {}).get(worker.name)
        before = last.devices if last is not None and last.source == "processes" else ()
        found = from_processes(worker.name, devices, by_worker, before)
        if found is not None:
            answer = Answer("processes", tuple(found))
        if answer is None and by_pod:
            before = last.devices if last is not None and last.source == "pod_processes" else ()
            found = from_processes(worker.name, devices, by_pod, before)
            if found is not None:
                answer = Answer("pod_processes", tuple(found))
        if answer is None and worker.allocated:
            alloc = from_device_ids(worker.allocated, devices, host_indices=host_indices)
            notes += alloc.notes
            if alloc.devices is not None:
                answer = Answer("pod_resources", tuple(alloc.devices))
        if answer is None:
            env = from_environment(worker.env, devices, host_indices=host_indices)
            notes += env.notes
            if env.devices is not None:
                answer = Answer("environment", tuple(env.devices))
        if answer is None and sidecar:
            own = from_agent_environment(own_env, devices)
            notes += own.notes
            if own.devices is not None:
                answer = Answer("agent_environment", tuple(own.devices))
        if answer is None:
            conf = from_config(worker.gpus, devices)
            notes += conf.notes
            if conf.devices is not None:
                answer = Answer("config", tuple(conf.devices))
        if answer is None:
            answer = Answer(None)
        answers[worker.name] = Answer(answer.source, answer.devices, tuple(notes))
    return answers


def gpu_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Only the variables attribution reads: an environment may hold secrets."""
    return {k: environ[k] for k in GPU_ENV_VARS if k in environ}


# ---------------------------------------------------------------------- logging


def _describe(devices: Sequence[GpuDevice]) -> str:
    if not devices:
        return "no GPU"
    return ", ".join(f"gpu {d.gpu} ({d.uuid})" for d in devices)


class AttributionLog:
    """Logs what attribution decided, without repeating itself every pass.

    One info line when a worker's answer comes from a new source (the first one
    included); one warning per worker, ever, when no source has answered for it
    for ``grace`` seconds (the process source may not have found the worker yet);
    each skipped entry once per worker.
    """

    def __init__(
        self,
        *,
        grace: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.grace = grace
        self.clock = clock
        self.log = logger
        self._source: dict[str, str | None] = {}
        self._unanswered_since: dict[str, float] = {}
        self._warned: set[str] = set()
        self._notes: dict[str, set[str]] = {}

    def update(self, answers: Mapping[str, Answer]) -> None:
        now = self.clock()
        for worker, answer in answers.items():
            seen = self._notes.setdefault(worker, set())
            for note in answer.notes:
                if note not in seen and len(seen) < MAX_NOTES:
                    seen.add(note)
                    self.log.info("worker %s: %s", worker, note)
            previous = self._source.get(worker)
            if answer.source is None:
                since = self._unanswered_since.setdefault(worker, now)
                if previous is not None:
                    self.log.info(
                        "worker %s: %s no longer says which GPUs it runs on",
                        worker,
                        SOURCE_TEXT[previous],
                    )
                if worker not in self._warned and now - since >= self.grace:
                    self._warned.add(worker)
                    self.log.warning(
                        "worker %s: no source says which GPUs it runs on, so it has no "
                        f"{contract.WORKER_GPU_INFO} series; %s",
                        worker,
                        HOW_TO_ENABLE,
                    )
            else:
                self._unanswered_since.pop(worker, None)
                if answer.source != previous:
                    self.log.info(
                        "worker %s: runs on %s (from %s)",
                        worker,
                        _describe(answer.devices),
                        SOURCE_TEXT[answer.source],
                    )
            self._source[worker] = answer.source
