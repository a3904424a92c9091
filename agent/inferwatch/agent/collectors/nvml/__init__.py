"""The NVML source (package): every GPU series of the metric contract, read through ``pynvml``.

One code path serves the real library and the fake one (:mod:`inferwatch.sim.fakegpu`):
the source is handed a backend object with ``pynvml``'s function names and
catches ``pynvml.NVMLError`` by its code.

How a pass works. :meth:`NvmlSource.refresh` runs one blocking pass in a
worker thread and never lets two passes overlap; the pass reads every GPU,
builds an immutable :class:`NvmlSnapshot` and swaps it in. :meth:`families`
turns the latest snapshot into metric families without touching NVML.

Cost. Handles and what never changes (name, UUID, PCI bus id, GPM support) are
read once when a GPU is opened. Three cadences, measured on an H200 (see
docs/validation.md): every ``interval`` (1 s) the cheap readings, a few
microseconds each; every ``activity_interval`` (15 s) the activity windows, GPM
(a GPM sample costs ~0.2 ms) and per-process SM share
(``nvmlDeviceGetProcessUtilization`` costs ~2 ms with a process on the GPU),
each averaged over the window since the previous activity pass, which is also
what a Prometheus scraping every 15 s wants; every ``slow_interval`` (30 s) the
slow or slow-changing calls (energy ~3.5 ms, ECC, the enforced power limit, MIG
layout). Between their reads, the last values are exported.

Failures, by NVML's answer:

* NOT_SUPPORTED (or a function this ``pynvml`` lacks): the series is absent for
  that GPU and the call is never made again for it (counted once as
  ``not_supported``).
* GPU_IS_LOST: ``inferwatch_gpu_up 0`` for that GPU, its readings absent, and the
  GPU is re-opened with exponential backoff; the other GPUs carry on.
* No library, no driver: no GPU series at all; the reason is logged once, counted
  (``library_not_found``, ``driver_not_loaded``, ...) and initialisation is
  retried rarely.
* Anything else: that reading is absent for this pass and the reason counted.

XID errors arrive as NVML events, read by a daemon thread blocked in
``nvmlEventSetWait``; it keeps one counter and the time of the last event per
(GPU, XID), so an XID storm costs counts, never memory.

Which GPUs each worker runs on (``inferwatch_worker_gpu_info``) is decided by
:mod:`inferwatch.agent.collectors.attribution` over the device list of the last pass,
with what the callbacks given to the source say of the workers.

The backend (``pynvml`` itself or a stand-in with its function names) is chosen
by the caller: this package never imports a simulator.

One module per job: :mod:`.calls` (NVML calls that remember what failed, the
per-device state), :mod:`.devices` (opening GPUs, GPM buffers, MIG discovery),
:mod:`.sampling` (one device's readings on the three cadences), :mod:`.processes`
(NVML's process list, per-process SM share), :mod:`.events` (XID events),
:mod:`.snapshot` (what a pass read, and its metric families), :mod:`.source`
(the passes and the Source API).
"""

from __future__ import annotations

from inferwatch.agent.collectors.nvml.calls import MAX_GPU_RETRY, MAX_INIT_RETRY, error_reason
from inferwatch.agent.collectors.nvml.devices import GPM_METRICS, mig_profile
from inferwatch.agent.collectors.nvml.events import MAX_XID_CODES
from inferwatch.agent.collectors.nvml.sampling import CLOCK_EVENT_REASONS
from inferwatch.agent.collectors.nvml.snapshot import (
    DeviceReading,
    NvmlSnapshot,
    ProcessReading,
    build_families,
)
from inferwatch.agent.collectors.nvml.source import NvmlSource

__all__ = [
    "CLOCK_EVENT_REASONS",
    "GPM_METRICS",
    "MAX_GPU_RETRY",
    "MAX_INIT_RETRY",
    "MAX_XID_CODES",
    "DeviceReading",
    "NvmlSnapshot",
    "NvmlSource",
    "ProcessReading",
    "build_families",
    "error_reason",
    "mig_profile",
]
