"""XID errors from NVML events, read by a daemon thread blocked in ``nvmlEventSetWait``.

The thread keeps one counter and the time of the last event per (GPU, XID), so an
XID storm costs counts, never memory.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from typing import Any

import pynvml

from inferwatch.agent.collectors.nvml.calls import MAX_GPU_RETRY, Device, NvmlCalls, handle_key

#: Distinct XID codes counted per GPU; more (a corrupted event stream) go to xid="other".
MAX_XID_CODES = 64
#: How long the event thread blocks in NVML before it checks whether to stop.
_EVENT_WAIT_MS = 200


class XidEvents:
    """The event set, its thread and the XID counts of every GPU registered with it."""

    def __init__(self, calls: NvmlCalls) -> None:
        self.calls = calls
        self._lock = threading.Lock()
        self._xid: dict[int, dict[str, int]] = {}
        self._xid_last: dict[int, dict[str, float]] = {}
        self._event_set: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._devices: dict[Any, int] = {}

    def start(self, gpus: Iterable[Device]) -> None:
        """Create the event set, register every GPU that answers, start the thread."""
        try:
            self._event_set = self.calls.nvml.nvmlEventSetCreate()
        except (pynvml.NVMLError, AttributeError) as err:
            self.calls.report_once(
                "not_supported", f"NVML events unavailable ({err}): no XID counts"
            )
            self._event_set = None
            return
        self._devices = {}
        for gpu in gpus:
            if not gpu.lost:
                self.register(gpu)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop,
            args=(self._event_set, self._stop),
            name="inferwatch-nvml-xid",
            daemon=True,
        )
        self._thread.start()

    def registered(self, gpu: Device) -> bool:
        return handle_key(gpu.handle) in self._devices

    def register(self, gpu: Device) -> None:
        if self._event_set is None:
            return
        nvml = self.calls.nvml
        xid_bit = pynvml.nvmlEventTypeXidCriticalError
        try:
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(gpu.handle))
            if supported & xid_bit:
                nvml.nvmlDeviceRegisterEvents(gpu.handle, xid_bit, self._event_set)
            else:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        except (pynvml.NVMLError, AttributeError) as err:
            self.calls.report_once(
                "not_supported", f"{gpu.key}: XID events not available ({err}); no XID counts"
            )
            return
        # A new dict, swapped in whole: the event thread reads it without a lock.
        devices = dict(self._devices)
        devices[handle_key(gpu.handle)] = gpu.index
        self._devices = devices
        with self._lock:
            self._xid.setdefault(gpu.index, {})
            self._xid_last.setdefault(gpu.index, {})

    def _loop(self, event_set: Any, stop: threading.Event) -> None:
        nvml = self.calls.nvml
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        xid_bit = pynvml.nvmlEventTypeXidCriticalError
        failures = 0
        while not stop.is_set():
            try:
                data = wait(event_set, _EVENT_WAIT_MS)
            except pynvml.NVMLError as err:
                if err.value == pynvml.NVML_ERROR_TIMEOUT:
                    continue
                if stop.is_set():
                    break
                failures += 1
                self.calls.report("xid_events", f"waiting for NVML events failed: {err}", "xid")
                stop.wait(min(2.0**failures, MAX_GPU_RETRY))
                continue
            if failures:
                failures = 0
                self.calls.report_ok("xid")
            if not int(data.eventType) & xid_bit:
                continue
            index = self._devices.get(handle_key(data.device))
            if index is not None:
                self._count(index, int(data.eventData))

    def _count(self, index: int, xid: int) -> None:
        # NVML's event data carries no time: the time it is read is a few ms after it.
        now = time.time()
        with self._lock:
            counts = self._xid.setdefault(index, {})
            code = str(xid)
            if code not in counts and len(counts) >= MAX_XID_CODES:
                code = "other"
            counts[code] = counts.get(code, 0) + 1
            self._xid_last.setdefault(index, {})[code] = now

    def rows(self, gpus: Iterable[Device]) -> tuple[tuple[str, str, str, int, float], ...]:
        """(gpu, uuid, xid, count, unix time of the last event) of every code seen."""
        uuids = {gpu.index: gpu.uuid for gpu in gpus}
        with self._lock:
            return tuple(
                (str(index), uuids.get(index, ""), code, count, self._xid_last[index][code])
                for index, counts in sorted(self._xid.items())
                for code, count in sorted(counts.items())
            )

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=2 * _EVENT_WAIT_MS / 1000 + 1)
        self._thread = None
        if self._event_set is not None:
            with contextlib.suppress(pynvml.NVMLError):
                self.calls.nvml.nvmlEventSetFree(self._event_set)
        self._event_set = None
        self._devices = {}
