"""The dcgm-exporter source: the contract's GPU families from a dcgm-exporter the cluster runs.

Where the GPU Operator already runs dcgm-exporter, a second NVML poller would
read every GPU twice. With ``gpu.backend: dcgm-exporter`` the agent scrapes
dcgm-exporter's ``/metrics`` instead (``gpu.dcgm_exporter_url``) and maps it onto
the same ``inferwatch_gpu_*`` families as the NVML source, so rules, dashboards
and the report do not know which backend fed them. The name table is
:mod:`inferwatch.agent.collectors.dcgm_fields` (both the pre- and post-DCGM-4.7 names).

Identity. A GPU is (``gpu``, ``UUID``) as dcgm-exporter labels it. A MIG GPU
instance carries ``GPU_I_ID`` and ``GPU_I_PROFILE`` and the *parent's* UUID
(internal/pkg/collector/gpu_collector.go, ``toMetric``): dcgm-exporter does not
export the MIG device's own UUID, so the agent names the instance
``MIG-<parent uuid>/<GPU_I_ID>`` (the legacy ``MIG-GPU-.../gi/ci`` form without the
compute instance), the same in the GPU series and in the attribution series, and
exports ``gpu_instance`` and ``mig_profile`` as the NVML source does.

Attribution. dcgm-exporter's pod mapper labels the series of a GPU a pod holds
with ``pod``, ``namespace`` and ``container``. A worker whose pod the agent knows
(``gpu.dcgm_worker_pods``; for a single worker, the agent's own pod name
``$HOSTNAME`` when it runs as a sidecar) gets one
``inferwatch_worker_gpu_info{worker, gpu, uuid}`` series per GPU of that pod.

Failures. A failed scrape (connection, time-out, HTTP status, size cap, bad
text, or no GPU series) is counted in ``inferwatch_collect_errors_total{collector="dcgm"}``;
the GPUs seen before stay with ``inferwatch_gpu_up 0`` and their ``_info``, their
readings absent, until dcgm-exporter answers again. A whole GPU missing from an
answer (dcgm-exporter leaves out a GPU DCGM cannot read) is kept the same way.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from inferwatch.agent.collectors.attribution import Answer, GpuDevice, WorkerGpuInputs, attribute
from inferwatch.agent.collectors.base import ReasonError, Source
from inferwatch.agent.collectors.dcgm_fields import (
    CLOCK_EVENT_FIELDS,
    COUNTERS,
    DRIVER_LABELS,
    FIELDS,
    FREE_FIELDS,
    MODEL_LABELS,
    NAMESPACE_LABELS,
    NVLINK_DIRECTION_FIELDS,
    OTHER_ENTITY_LABELS,
    POD_LABELS,
    UUID_LABELS,
    wanted_names,
)
from inferwatch.agent.collectors.nvml.sampling import CLOCK_EVENT_REASONS
from inferwatch.agent.collectors.nvml.snapshot import info_labels
from inferwatch.agent.config import redact_url
from inferwatch.agent.httpio import Client, HttpError, TooLarge
from inferwatch.engines import contract
from inferwatch.engines.mapping import ParseError, parse

log = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:9400/metrics"

#: Ratios clamped to 0..1 (DCGM's profiling averages can overshoot by rounding).
_CLAMPED = tuple(
    f.name
    for f in (
        contract.GPU_UTILIZATION_RATIO,
        contract.GPU_MEMORY_BUSY_RATIO,
        contract.GPU_SM_ACTIVE_RATIO,
        contract.GPU_SM_OCCUPANCY_RATIO,
        contract.GPU_TENSOR_ACTIVE_RATIO,
        contract.GPU_DRAM_ACTIVE_RATIO,
        contract.GPU_GRAPHICS_ACTIVE_RATIO,
    )
)


class DcgmScrapeError(ReasonError):
    """The dcgm-exporter could not be read or parsed."""


@dataclass(frozen=True)
class DcgmDevice(GpuDevice):
    """One GPU or MIG GPU instance in one scrape."""

    #: (family, fixed labels) -> value in base units
    values: Mapping[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    clock_events: Mapping[str, float] = field(default_factory=dict)
    #: (namespace, pod) pairs dcgm-exporter attributes this device to
    pods: frozenset[tuple[str, str]] = frozenset()

    def lost(self) -> DcgmDevice:
        """This device as exported while it is missing: _info and up 0, no readings."""
        return replace(self, up=False, values={}, clock_events={}, pods=frozenset())


@dataclass
class _Raw:
    gpu: str
    parent_uuid: str
    gi: str | None
    profile: str | None
    facts: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    pods: set[tuple[str, str]] = field(default_factory=set)


def _first(labels: Mapping[str, str], names: Iterable[str]) -> str:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return ""


def read_exposition(text: str) -> tuple[DcgmDevice, ...]:
    """The devices of one dcgm-exporter exposition, mapped to the contract's units.

    Raises :class:`DcgmScrapeError` ("parse") on text that is not Prometheus's format.
    """
    try:
        families = parse(text, wanted_names())
    except ParseError as exc:
        raise DcgmScrapeError("parse", f"unparsable exposition: {exc}") from None
    raw: dict[tuple[str, str, str | None], _Raw] = {}
    for fam in families.values():
        for sample in fam.samples:  # type: ignore[attr-defined]
            labels = sample.labels
            if any(k in labels for k in OTHER_ENTITY_LABELS):
                continue
            gpu, uuid = labels.get("gpu", ""), _first(labels, UUID_LABELS)
            value = float(sample.value)
            if not gpu or not uuid or math.isnan(value):
                continue
            gi = labels.get("GPU_I_ID") or None
            key = (gpu, uuid, gi)
            dev = raw.get(key)
            if dev is None:
                dev = raw[key] = _Raw(gpu, uuid, gi, labels.get("GPU_I_PROFILE") or None)
            for role, names in (("name", MODEL_LABELS), ("driver", DRIVER_LABELS)):
                if role not in dev.facts and (found := _first(labels, names)):
                    dev.facts[role] = found
            if "pci_bus_id" not in dev.facts and labels.get("pci_bus_id"):
                dev.facts["pci_bus_id"] = labels["pci_bus_id"]
            pod = _first(labels, POD_LABELS)
            if pod:
                dev.pods.add((_first(labels, NAMESPACE_LABELS), pod))
            # Time-sliced GPUs repeat a device's series once per pod: the copies agree.
            dev.metrics.setdefault(fam.name, value)  # type: ignore[attr-defined]
    mig_parents = {(r.gpu, r.parent_uuid) for r in raw.values() if r.gi is not None}
    return tuple(_device(r, mig_parents) for _, r in sorted(raw.items(), key=_order))


def _order(item: tuple[tuple[str, str, str | None], _Raw]) -> tuple[int, str, int, str]:
    (gpu, uuid, gi), _ = item
    index = int(gpu) if gpu.isdigit() else 1 << 30
    return (index, uuid, -1 if gi is None else int(gi) if gi.isdigit() else 1 << 30, gi or "")


def _value(metrics: Mapping[str, float], names: Iterable[tuple[str, float]]) -> float | None:
    for name, factor in names:
        if name in metrics:
            return metrics[name] * factor
    return None


def _device(r: _Raw, mig_parents: set[tuple[str, str]]) -> DcgmDevice:
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fm in FIELDS:
        value = _value(r.metrics, fm.names)
        if value is None:
            continue
        if fm.target in _CLAMPED:
            value = min(max(value, 0.0), 1.0)
        values[(fm.target, fm.labels)] = value
    nvlink = (contract.GPU_NVLINK_THROUGHPUT_BYTES_PER_SECOND.name, ())
    if nvlink not in values:  # no total field: TX + RX of the profiling fields, if both
        directions = [_value(r.metrics, names) for names in NVLINK_DIRECTION_FIELDS]
        if all(d is not None for d in directions):
            values[nvlink] = sum(d for d in directions if d is not None)
    used = values.get((contract.GPU_MEMORY_USED_BYTES.name, ()))
    reserved = values.get((contract.GPU_MEMORY_RESERVED_BYTES.name, ()))
    total = values.get((contract.GPU_MEMORY_TOTAL_BYTES.name, ()))
    free = _value(r.metrics, FREE_FIELDS)
    if total is None and used is not None and free is not None:
        total = used + (reserved or 0.0) + free
        values[(contract.GPU_MEMORY_TOTAL_BYTES.name, ())] = total
    if used is not None and total:
        values[(contract.GPU_MEMORY_USED_RATIO.name, ())] = min(
            1.0, (used + (reserved or 0.0)) / total
        )
    events: dict[str, float] = {}
    mask = _value(r.metrics, ((name, 1.0) for name in CLOCK_EVENT_FIELDS))
    if mask is not None and mask >= 0:
        bits = int(mask)
        # DCGM passes NVML's clock event reason bits through unchanged.
        events = {reason: 1.0 if bits & bit else 0.0 for reason, bit in CLOCK_EVENT_REASONS}
    if r.gi is not None:
        uuid, mig_mode = f"MIG-{r.parent_uuid}/{r.gi}", "enabled"
    else:
        uuid = r.parent_uuid
        mig_mode = "enabled" if (r.gpu, r.parent_uuid) in mig_parents else "unknown"
    return DcgmDevice(
        gpu=r.gpu,
        uuid=uuid,
        name=r.facts.get("name", ""),
        pci_bus_id=r.facts.get("pci_bus_id", ""),
        driver_version=r.facts.get("driver", ""),
        gpu_instance=r.gi,
        mig_profile=r.profile if r.gi is not None else None,
        mig_mode=mig_mode,
        values=values,
        clock_events=events,
        pods=frozenset(r.pods),
    )


def parse_pod_ref(text: str) -> tuple[str | None, str]:
    """``NAMESPACE/POD`` or ``POD`` -> (namespace or None, pod)."""
    namespace, sep, pod = text.strip().rpartition("/")
    return (namespace or None) if sep else None, pod


def worker_pods(
    configured: Mapping[str, str], workers: Iterable[str], env: Mapping[str, str] | None = None
) -> dict[str, tuple[str | None, str]]:
    """Worker -> (namespace or None, pod): the configured ones, else the sidecar's own pod.

    A single worker with no configured pod is taken to share the agent's pod (the
    sidecar deployment), whose name Kubernetes gives the agent as ``$HOSTNAME``.
    """
    names = list(workers)
    pods = {w: parse_pod_ref(ref) for w, ref in configured.items()}
    env = os.environ if env is None else env
    if not pods and len(names) == 1 and env.get("HOSTNAME"):
        pods[names[0]] = (None, env["HOSTNAME"])
    return pods


def _on_pod(dev: DcgmDevice, namespace: str | None, pod: str) -> bool:
    return any(p == pod and (namespace is None or ns == namespace) for ns, p in dev.pods)


def worker_devices(
    devices: Sequence[DcgmDevice],
    pods: Mapping[str, tuple[str | None, str]],
    inputs: Sequence[WorkerGpuInputs] = (),
    own_env: Mapping[str, str] | None = None,
) -> dict[str, Answer]:
    """Which devices each worker runs on: dcgm-exporter's pod labels first, then the
    sources of :func:`inferwatch.agent.collectors.attribution.attribute` that need no process
    list (the kubelet's allocation, the worker's NVIDIA_/CUDA_VISIBLE_DEVICES, the
    one-worker sidecar's own devices, ``workers[].gpus``), over the same devices."""
    answers = attribute(inputs, devices, pid_workers={}, own_env=own_env or {}) if inputs else {}
    for worker, (namespace, pod) in pods.items():
        hit = tuple(d for d in devices if _on_pod(d, namespace, pod))
        if hit:
            answers[worker] = Answer("dcgm_pods", hit)
    return answers


def build_families(
    devices: Iterable[DcgmDevice],
    worker_gpus: Iterable[tuple[str, GpuDevice]] = (),
    worker_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Metric]:
    """The contract's families for ``devices`` (a device that is not up: _info and up 0);
    ``worker_gpus``: the (worker, device) pairs of attribution."""
    gauges: dict[str, Metric] = {}
    counters: dict[str, Metric] = {}

    def add(name: str, labels: dict[str, str], value: float, counter: bool = False) -> None:
        table = counters if counter else gauges
        fam = table.get(name)
        if fam is None:
            cls = CounterMetricFamily if counter else GaugeMetricFamily
            fam = table[name] = cls(name, contract.BY_NAME[name].help)
        fam.samples.append(Sample(name + ("_total" if counter else ""), labels, value))

    for dev in devices:
        base = dev.labels()
        add(contract.GPU_INFO.name, info_labels(dev), 1.0)
        add(contract.GPU_UP.name, base, 1.0 if dev.up else 0.0)
        if not dev.up:
            continue
        for (name, fixed), value in dev.values.items():
            add(name, {**base, **dict(fixed)}, value, counter=name in COUNTERS)
        for reason, value in dev.clock_events.items():
            add(contract.GPU_CLOCK_EVENT_ACTIVE.name, {**base, "reason": reason}, value)
    for worker, device in sorted(worker_gpus, key=lambda pair: (pair[0], pair[1].gpu)):
        extra = (worker_labels or {}).get(worker, {})
        add(contract.WORKER_GPU_INFO.name, {**extra, **device.labels(), "worker": worker}, 1.0)
    return [*gauges.values(), *counters.values()]


class DcgmSource(Source):
    """GPU metrics read from dcgm-exporter; see the module docstring."""

    name = "dcgm"

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        interval: float = 5.0,
        timeout: float = 2.0,
        max_body_bytes: int = 16 * 1024 * 1024,
        pods: Mapping[str, tuple[str | None, str]] | None = None,
        worker_gpu_inputs: Callable[[], Iterable[WorkerGpuInputs]] | None = None,
        own_env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        #: what the process source, the kubelet and the configuration know of each
        #: worker: attribution where dcgm-exporter's pod labels say nothing
        self.worker_gpu_inputs = worker_gpu_inputs or (lambda: ())
        self.own_env = dict(own_env or {})
        self.url = url
        #: the URL as messages show it (no password)
        self.shown_url = redact_url(url)
        self.interval = interval
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self.pods = dict(pods or {})
        self.devices: tuple[DcgmDevice, ...] = ()
        self._session: Client | None = None
        self._families: list[Metric] = []
        self._unattributed_logged: set[str] = set()

    async def start(self) -> None:
        self._session = Client(
            headers={"Accept": "text/plain;version=0.0.4;q=1.0, */*;q=0.1"},
            limit=2,
            idle_per_host=1,
        )

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def refresh(self) -> None:
        started = time.perf_counter()
        if self._session is None:
            await self.start()
        try:
            body = await self._fetch()
            devices = read_exposition(body.decode("utf-8", errors="replace"))
            if not devices:
                raise DcgmScrapeError(
                    "no_gpu_metrics",
                    f"{self.shown_url} answered with no GPU series (is it dcgm-exporter?)",
                )
        except DcgmScrapeError as exc:
            self.devices = tuple(d.lost() for d in self.devices)
            self.health.error(exc.reason, str(exc))
        except Exception as exc:  # a bug must not stop the agent
            log.debug("dcgm scrape failed", exc_info=True)
            self.devices = tuple(d.lost() for d in self.devices)
            self.health.error("internal", f"{type(exc).__name__}: {exc}")
        else:
            self.devices = devices + self._vanished(devices)
            self.health.ok()
            self.health.finished_pass(started)
        self._families = self._build()

    def _build(self) -> list[Metric]:
        try:
            inputs = list(self.worker_gpu_inputs())
            up = [d for d in self.devices if d.up]
            answers = worker_devices(up, self.pods, inputs, self.own_env)
        except Exception:  # a bug in attribution must not cost the GPU series
            log.exception("dcgm: attribution failed; no worker-to-GPU series")
            answers, inputs = {}, []
        self._log_unattributed(answers)
        pairs = [(w, dev) for w, answer in answers.items() for dev in answer.devices]
        labels = {i.name: dict(i.labels) for i in inputs if i.labels}
        return build_families(self.devices, pairs, labels)

    def _vanished(self, devices: tuple[DcgmDevice, ...]) -> tuple[DcgmDevice, ...]:
        """Whole GPUs seen before that this scrape lacks: up 0 (InferenceGPULost).

        dcgm-exporter drops the rows of a GPU whose values DCGM returns blank, as
        for a GPU fallen off the bus. A MIG instance that goes is a new layout,
        not a loss: it is dropped.
        """
        now = {(d.gpu, d.uuid) for d in devices}
        return tuple(
            d.lost() for d in self.devices if d.gpu_instance is None and (d.gpu, d.uuid) not in now
        )

    def _log_unattributed(self, answers: Mapping[str, Answer]) -> None:
        """One line for a worker whose pod no GPU carries and that no other source places."""
        if not self.devices or not any(d.up for d in self.devices):
            return  # nothing read yet, or dcgm-exporter is down: its own error says so
        for worker, (namespace, pod) in self.pods.items():
            answer = answers.get(worker)
            found = answer is not None and answer.source is not None
            if not found and worker not in self._unattributed_logged:
                self._unattributed_logged.add(worker)
                log.info(
                    "dcgm: no GPU of dcgm-exporter carries pod %s for worker %s; its "
                    "GPU attribution is absent (is the exporter's pod mapping on?)",
                    f"{namespace}/{pod}" if namespace else pod,
                    worker,
                )
            elif found:
                self._unattributed_logged.discard(worker)

    async def _fetch(self) -> bytes:
        assert self._session is not None
        limit = self.max_body_bytes
        try:
            resp = await self._session.get(self.url, timeout=self.timeout, max_body=limit)
        except TooLarge:
            raise DcgmScrapeError(
                "too_large", f"{self.shown_url} body over {limit} bytes"
            ) from None
        except asyncio.TimeoutError:
            raise DcgmScrapeError(
                "timeout", f"{self.shown_url} did not answer within {self.timeout:g}s"
            ) from None
        except HttpError as exc:
            raise DcgmScrapeError(
                "connect", f"{self.shown_url}: {type(exc).__name__}: {self._scrub(exc)}"
            ) from None
        if resp.status != 200:
            raise DcgmScrapeError("http_status", f"{self.shown_url} answered HTTP {resp.status}")
        return resp.body

    def _scrub(self, exc: Exception) -> str:
        """An error's text with any password of the URL taken out."""
        text = str(exc)
        parts = urlsplit(self.url)
        return text.replace(parts.password, "***") if parts.password else text

    def families(self) -> Iterable[Metric]:
        return self._families
