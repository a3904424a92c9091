"""NVML calls that remember: the error codes, the per-device state, and the calls.

A reading is made through :meth:`NvmlCalls.call`: a call NVML does not support is
never made again for that device (counted once as ``not_supported``), a lost GPU
raises :class:`Lost`, a vanished library :class:`LibraryGone`, anything else is
reported and the reading skipped (:data:`SKIP`). Health reports are queued here,
off the event loop, and applied by the source on it.
"""

from __future__ import annotations

import collections
import ctypes
from typing import Any

import pynvml

#: Longest wait between attempts to re-open a lost GPU, and to re-initialise NVML.
MAX_GPU_RETRY = 60.0
MAX_INIT_RETRY = 600.0

NOT_SUPPORTED = {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
GPU_GONE = {pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED}
LIBRARY_GONE = {
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
}
REASONS = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library_not_found",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver_not_loaded",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "driver_mismatch",
    pynvml.NVML_ERROR_UNINITIALIZED: "uninitialized",
    pynvml.NVML_ERROR_NO_PERMISSION: "no_permission",
    pynvml.NVML_ERROR_TIMEOUT: "timeout",
    pynvml.NVML_ERROR_GPU_IS_LOST: "gpu_lost",
    pynvml.NVML_ERROR_RESET_REQUIRED: "gpu_lost",
    pynvml.NVML_ERROR_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "not_supported",
    pynvml.NVML_ERROR_UNKNOWN: "unknown",
}


def error_reason(code: int) -> str:
    """The ``reason`` label of ``inferwatch_collect_errors_total`` for an NVML return code."""
    return REASONS.get(code, "nvml_error")


def text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def ratio(percent: float) -> float:
    """NVML percent -> 0..1; GPM can overshoot 100 by rounding."""
    return min(max(percent / 100.0, 0.0), 1.0)


def handle_key(handle: Any) -> Any:
    """A hashable identity for a device handle (ctypes pointers compare by object, not address)."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


class Lost(Exception):
    """The GPU cannot be used (lost, reset required, or it failed to open)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class LibraryGone(Exception):
    """NVML itself stopped answering (uninitialised, driver gone)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


#: What :meth:`NvmlCalls.call` returns for a reading that is absent this pass.
SKIP: Any = object()


class Device:
    """Mutable per-device state, touched only by the pass thread (and the lock holder)."""

    def __init__(self, index: int, key: str) -> None:
        self.index = index
        self.key = key
        self.handle: Any = None
        self.uuid = ""
        self.name = ""
        self.pci_bus_id = ""
        self.mig_mode = "unknown"
        self.unsupported: set[str] = set()
        self.failing: set[str] = set()
        self.lost = False
        self.retry_at = 0.0
        self.backoff = 0.0
        self.gpm = False
        self.gpm_samples: list[Any] = []
        self.gpm_prev: Any = None
        self.gpm_next = 0
        self.gpm_request: Any = None
        self.proc_ts = 0
        self.slow_due = 0.0
        self.activity_due = 0.0
        self.gpm_values: dict[str, float] = {}
        self.pcie: dict[str, float] = {}
        self.shares: dict[int, float] | None = None
        self.slow_gauges: dict[str, float] = {}
        self.slow_counters: dict[str, float] = {}
        self.ecc: dict[str, float] = {}
        # MIG: on a parent, its MIG devices; on a MIG device, its parent and instance.
        self.migs: list[Device] = []
        self.parent: Device | None = None
        self.gpu_instance: int | None = None
        self.profile = ""


class NvmlCalls:
    """The backend's functions called with memory of what failed, and the health reports."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        # Health reports made off the event loop, applied by the source on it: SourceHealth
        # is read by the agent on the loop and is not thread-safe.
        self.reports: collections.deque[tuple[str, str, str, str]] = collections.deque()

    # ------------------------------------------------------------------ reports

    def report(self, reason: str, message: str, key: str) -> None:
        self.reports.append(("error", reason, message, key))

    def report_ok(self, key: str) -> None:
        self.reports.append(("ok", "", "", key))

    def report_once(self, reason: str, message: str) -> None:
        """Count an expected condition (an unsupported call) without a warning."""
        self.reports.append(("note", reason, message, ""))

    # ------------------------------------------------------------------ opening devices

    def raw(self, function: str, *args: Any) -> Any:
        """Call NVML where failure means the device cannot be used (opening it)."""
        fn = getattr(self.nvml, function)
        try:
            return fn(*args)
        except pynvml.NVMLError as err:
            if err.value in LIBRARY_GONE:
                raise LibraryGone(err.value, f"{function}: {err}") from err
            raise Lost(err.value, f"{function}: {err}") from err

    def optional(self, function: str, *args: Any, default: Any = None) -> Any:
        """Call NVML for something nice to have (a label); ``default`` when it fails."""
        fn = getattr(self.nvml, function, None)
        if fn is None:
            return default
        try:
            return fn(*args)
        except pynvml.NVMLError as err:
            if err.value in LIBRARY_GONE:
                raise LibraryGone(err.value, f"{function}: {err}") from err
            if err.value in GPU_GONE:
                raise Lost(err.value, f"{function}: {err}") from err
            return default

    # ------------------------------------------------------------------ readings

    def call(self, dev: Device, key: str, function: str, *args: Any) -> Any:
        """One reading; SKIP when it is unsupported or failed (the reason is recorded)."""
        if key in dev.unsupported:
            return SKIP
        fn = getattr(self.nvml, function, None)
        if fn is None:
            self.unsupported(dev, key, f"this pynvml has no {function}")
            return SKIP
        try:
            result = fn(*args)
        except pynvml.NVMLError as err:
            return self.failed(dev, key, err)
        self.succeeded(dev, key)
        return result

    def succeeded(self, dev: Device, key: str) -> None:
        """A reading that failed before answered again: its error is cleared."""
        if dev.failing and key in dev.failing:
            dev.failing.discard(key)
            self.report_ok(f"{dev.key}:{key}")

    def failed(self, dev: Device, key: str, err: pynvml.NVMLError) -> Any:
        code = err.value
        if code in NOT_SUPPORTED:
            self.unsupported(dev, key, str(err))
            return SKIP
        if code in GPU_GONE:
            raise Lost(code, f"{key}: {err}")
        if code in LIBRARY_GONE:
            raise LibraryGone(code, f"{key}: {err}")
        dev.failing.add(key)
        self.report(
            error_reason(code),
            f"NVML error {code} ({err}); this reading is absent until it succeeds",
            f"{dev.key}:{key}",
        )
        return SKIP

    def unsupported(self, dev: Device, key: str, why: str) -> None:
        dev.unsupported.add(key)
        self.report_once(
            "not_supported", f"{dev.key}: {key} not supported ({why}); its series stay absent"
        )
