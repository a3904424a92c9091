"""How dcgm-exporter's metric names map onto the contract's GPU families (data, not code).

dcgm-exporter names each metric after the DCGM field its counters CSV selects.
DCGM 4.7 deprecated many field names, and dcgm-exporter 4.9.0 switched its
default CSV to the new ones; eleven of the renamed fields are new field IDs in
base units. Both sets are read here, so a cluster can upgrade without the pack
noticing. Where a device reports both, the first name listed (the newer one) wins.

Facts, from these sources:

* The pre-4.9 names, their types and units: dcgm-exporter ``etc/default-counters.csv``
  (NVIDIA/dcgm-exporter at d5e5f510a1b6b393f39a43293ccd9dc985defc79, release
  4.5.3-4.8.2): clocks in MHz, energy in mJ, utilization in %, framebuffer in MiB,
  profiling fields as 0..1 ratios, ``DCGM_FI_PROF_PCIE_*_BYTES`` in bytes per second.
* The DCGM 4.7 base-unit fields and the legacy fields they replace: go-dcgm
  ``pkg/dcgm`` tests ``baseUnitFieldCases`` (``DCGM_FI_DEV_SM_CLOCK_HERTZ`` 1603 for
  ``DCGM_FI_DEV_SM_CLOCK`` 100, ``..._MEMORY_CLOCK_HERTZ`` 1604, ``..._GPU_ENERGY_JOULES_TOTAL``
  1611 for ``..._TOTAL_ENERGY_CONSUMPTION``, ``..._FAN_SPEED_RATIO`` 1612) and the alias
  tests (``DCGM_FI_DEV_GPU_TEMP`` -> ``..._GPU_TEMP_CELSIUS``, ``..._POWER_USAGE`` ->
  ``..._BOARD_POWER_WATTS``, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` -> ``..._GR_ENGINE_UTIL_RATIO``,
  ``..._PIPE_TENSOR_ACTIVE`` -> ``..._TENSOR_UTIL_RATIO``, ``..._CLOCK_THROTTLE_REASONS`` ->
  ``..._CLOCKS_EVENT_REASONS``); DCGM's field identifiers reference for the ratio and byte
  variants (``DCGM_FI_DEV_GPU_UTIL_RATIO`` 1613, ``..._MEMORY_UTIL_RATIO`` 1614,
  ``..._FB_CAPACITY_BYTES``/``FREE``/``USED``/``RESERVED_BYTES`` 1625-1628,
  ``..._NVLINK_THROUGHPUT_BYTES_PER_SECOND`` 1648, ``DCGM_FI_PROF_SM_UTIL_RATIO`` 1002,
  ``..._SM_OCCUPANCY_RATIO`` 1003, ``..._DRAM_UTIL_RATIO``).
* The rename itself (23 fields, 11 of them with new units: MHz -> Hz, mJ -> J,
  % -> ratio, MiB -> bytes, NVLink MB/s -> bytes/s): the dcgm-exporter 4.9.0 release notes.
* dcgm-exporter 4.10.0 (release notes of tag 4.10.0, commit 517dd34, shipping DCGM 4.8.0)
  renames four profiling fields in its shipped counters, units unchanged (bytes per
  second): ``DCGM_FI_PROF_PCIE_TX_BYTES`` -> ``DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND``,
  ``..._PCIE_RX_BYTES`` -> ``..._PCIE_RX_BYTES_PER_SECOND`` (collected by default),
  ``DCGM_FI_PROF_NVLINK_TX_BYTES`` -> ``..._NVLINK_TX_BYTES_PER_SECOND`` and
  ``..._NVLINK_RX_BYTES`` -> ``..._NVLINK_RX_BYTES_PER_SECOND`` (optional); custom
  counters CSVs may keep the old names, so both are read. Where a GPU reports no NVLink
  total field, its NVLink TX + RX profiling fields make the total. That the old NVLink
  profiling fields are rates in bytes per second: dcgm-exporter 3.3's CSV rows as quoted
  in NVIDIA/DCGM issue 149 ("The rate of data ... transmitted over NVLink (in B/s)").
"""

from __future__ import annotations

from dataclasses import dataclass

from inferwatch.engines import contract

MIB = 1024 * 1024

#: (dcgm-exporter metric name, factor to the contract's base unit), newest name first
Names = tuple[tuple[str, float], ...]
#: fixed labels a family gets (``direction``, ``type``)
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class FieldMap:
    """One contract family (with its fixed labels) read from the first of ``names`` a
    device reports."""

    target: str
    names: Names
    labels: Labels = ()


# The renamed fields, (newest name, an older name), by the change of unit: DCGM 4.7's
# renames as dcgm-exporter 4.9.0 ships them and 4.10.0's profiling renames. The newest
# name is in the contract's base unit.
_SAME_UNIT = (
    ("DCGM_FI_PROF_SM_UTIL_RATIO", "DCGM_FI_PROF_SM_ACTIVE"),
    ("DCGM_FI_PROF_SM_OCCUPANCY_RATIO", "DCGM_FI_PROF_SM_OCCUPANCY"),
    ("DCGM_FI_PROF_TENSOR_UTIL_RATIO", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    ("DCGM_FI_PROF_DRAM_UTIL_RATIO", "DCGM_FI_PROF_DRAM_ACTIVE"),
    ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    ("DCGM_FI_DEV_BOARD_POWER_WATTS", "DCGM_FI_DEV_POWER_USAGE"),
    ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_GPU_TEMP"),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", "DCGM_FI_PROF_PCIE_TX_BYTES"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", "DCGM_FI_PROF_PCIE_RX_BYTES"),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND", "DCGM_FI_PROF_NVLINK_TX_BYTES"),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND", "DCGM_FI_PROF_NVLINK_RX_BYTES"),
)
_PERCENT_TO_RATIO = (
    ("DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_GPU_UTIL"),
    ("DCGM_FI_DEV_MEMORY_UTIL_RATIO", "DCGM_FI_DEV_MEM_COPY_UTIL"),
    ("DCGM_FI_DEV_FAN_SPEED_RATIO", "DCGM_FI_DEV_FAN_SPEED"),
)
_MIB_TO_BYTES = (
    ("DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_FB_USED"),
    ("DCGM_FI_DEV_FB_RESERVED_BYTES", "DCGM_FI_DEV_FB_RESERVED"),
    ("DCGM_FI_DEV_FB_CAPACITY_BYTES", "DCGM_FI_DEV_FB_TOTAL"),
    ("DCGM_FI_DEV_FB_FREE_BYTES", "DCGM_FI_DEV_FB_FREE"),
)
_MHZ_TO_HZ = (
    ("DCGM_FI_DEV_SM_CLOCK_HERTZ", "DCGM_FI_DEV_SM_CLOCK"),
    ("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "DCGM_FI_DEV_MEM_CLOCK"),
)
_MJ_TO_J = (("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),)
#: NVLink's total, MB/s -> bytes/s: two older names, the first present wins
_MB_TO_BYTES = (
    ("DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL"),
    ("DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"),
)
#: (factor from the older name's unit to the newest's, the renames)
_RENAMES: tuple[tuple[float, tuple[tuple[str, str], ...]], ...] = (
    (1.0, _SAME_UNIT),
    (0.01, _PERCENT_TO_RATIO),
    (MIB, _MIB_TO_BYTES),
    (1e6, _MHZ_TO_HZ),
    (0.001, _MJ_TO_J),
    (1e6, _MB_TO_BYTES),
)


def names(newest: str) -> Names:
    """A field's names, newest first, each with its factor to the contract's base unit."""
    older = [(old, f) for f, pairs in _RENAMES for new, old in pairs if new == newest]
    return ((newest, 1.0), *older)


#: Families that are counters (exported with ``_total``).
COUNTERS = frozenset({contract.GPU_ENERGY_JOULES.base, contract.GPU_ECC_ERRORS.base})

_PCIE = contract.GPU_PCIE_THROUGHPUT_BYTES_PER_SECOND.name

#: Every contract family read from a field: (family, the field's newest name, fixed labels).
_FAMILIES: tuple[tuple[str, str, Labels], ...] = (
    (contract.GPU_UTILIZATION_RATIO.name, "DCGM_FI_DEV_GPU_UTIL_RATIO", ()),
    (contract.GPU_MEMORY_BUSY_RATIO.name, "DCGM_FI_DEV_MEMORY_UTIL_RATIO", ()),
    (contract.GPU_SM_ACTIVE_RATIO.name, "DCGM_FI_PROF_SM_UTIL_RATIO", ()),
    (contract.GPU_SM_OCCUPANCY_RATIO.name, "DCGM_FI_PROF_SM_OCCUPANCY_RATIO", ()),
    (contract.GPU_TENSOR_ACTIVE_RATIO.name, "DCGM_FI_PROF_TENSOR_UTIL_RATIO", ()),
    (contract.GPU_DRAM_ACTIVE_RATIO.name, "DCGM_FI_PROF_DRAM_UTIL_RATIO", ()),
    (contract.GPU_GRAPHICS_ACTIVE_RATIO.name, "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", ()),
    (contract.GPU_MEMORY_USED_BYTES.name, "DCGM_FI_DEV_FB_USED_BYTES", ()),
    (contract.GPU_MEMORY_RESERVED_BYTES.name, "DCGM_FI_DEV_FB_RESERVED_BYTES", ()),
    (contract.GPU_MEMORY_TOTAL_BYTES.name, "DCGM_FI_DEV_FB_CAPACITY_BYTES", ()),
    (contract.GPU_POWER_WATTS.name, "DCGM_FI_DEV_BOARD_POWER_WATTS", ()),
    (contract.GPU_POWER_LIMIT_WATTS.name, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", ()),
    (contract.GPU_ENERGY_JOULES.base, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", ()),
    (contract.GPU_TEMPERATURE_CELSIUS.name, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", ()),
    (contract.GPU_SM_CLOCK_HERTZ.name, "DCGM_FI_DEV_SM_CLOCK_HERTZ", ()),
    (contract.GPU_MEMORY_CLOCK_HERTZ.name, "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", ()),
    (contract.GPU_ECC_ERRORS.base, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", (("type", "corrected"),)),
    (contract.GPU_ECC_ERRORS.base, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", (("type", "uncorrected"),)),
    # The signals of issue 23 item 3 (the GPU dashboard's PCIe/NVLink, P-state, fan).
    (_PCIE, "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", (("direction", "tx"),)),
    (_PCIE, "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", (("direction", "rx"),)),
    (
        contract.GPU_NVLINK_THROUGHPUT_BYTES_PER_SECOND.name,
        "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
        (),
    ),
    (contract.GPU_PERFORMANCE_STATE.name, "DCGM_FI_DEV_GPU_PSTATE", ()),
    (contract.GPU_FAN_SPEED_RATIO.name, "DCGM_FI_DEV_FAN_SPEED_RATIO", ()),
)

#: Every dcgm-exporter field the agent reads as a contract family, newest name first.
FIELDS: tuple[FieldMap, ...] = tuple(
    FieldMap(target, names(newest), labels) for target, newest, labels in _FAMILIES
)

#: The clock-event bitmask (same bits as NVML's clock event reasons), newest name first.
CLOCK_EVENT_FIELDS: tuple[str, ...] = tuple(
    name for name, _ in names("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
)
#: NVLink traffic by direction (profiling fields, optional in the counters CSV), newest
#: name first: summed into the NVLink total where a device reports no total field.
NVLINK_DIRECTION_FIELDS: tuple[Names, ...] = (
    names("DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND"),
    names("DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND"),
)
#: Free framebuffer, for the total where no capacity field is collected (total = used +
#: reserved + free, as NVML's v2 memory info adds up).
FREE_FIELDS: Names = names("DCGM_FI_DEV_FB_FREE_BYTES")

#: Labels dcgm-exporter puts on a GPU entity's series, by role; the first present wins.
#: ``UUID`` by default, ``uuid`` with --use-old-namespace; ``modelName`` on GPU series,
#: ``model_name`` on link series; the driver label renamed in 4.9.0. Pod labels come from
#: its Kubernetes pod mapper (``pod``/``namespace``/``container``, or the old
#: ``pod_name``/``pod_namespace``/``container_name``): internal/pkg/transformation/const.go.
UUID_LABELS = ("UUID", "uuid", "gpu_uuid")
MODEL_LABELS = ("modelName", "model_name")
DRIVER_LABELS = ("DCGM_FI_SYSTEM_DRIVER_VERSION", "DCGM_FI_DRIVER_VERSION")
POD_LABELS = ("pod", "pod_name")
NAMESPACE_LABELS = ("namespace", "pod_namespace")
#: Series of entities that are not a GPU or a GPU instance (NVLink ports, NVSwitches, CPUs).
OTHER_ENTITY_LABELS = ("nvlink", "nvswitch", "cpu", "cpucore")


def wanted_names() -> set[str]:
    """Every metric name the source parses out of an exposition."""
    names = {name for f in FIELDS for name, _ in f.names}
    names.update(CLOCK_EVENT_FIELDS)
    names.update(name for name, _ in FREE_FIELDS)
    names.update(name for pair in NVLINK_DIRECTION_FIELDS for name, _ in pair)
    return names
