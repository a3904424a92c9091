"""The GPU dashboard (``inference-gpu``): the GPUs in detail, one function per row."""

from __future__ import annotations

from typing import Any

from inferwatch.engines import contract
from inferwatch.pack import signals as S
from inferwatch.pack.dashboards import common as c
from inferwatch.pack.dashboards import panels as p
from inferwatch.pack.dashboards.common import Dashboard
from inferwatch.pack.dashboards.panels import Query, Section, gpu_sel, host_sel, steps
from inferwatch.pack.thresholds import Thresholds

#: Core temperature: warm from 80 °C, hot from 87 °C (the stat's colour, the chart's lines).
TEMPERATURE_STEPS = steps("green", (80, "yellow"), (87, "red"))
#: the legend of a per-process series
PER_PROCESS = "{{process}} pid {{pid}} {{worker}}"


def vram_panel(t: Thresholds) -> Any:
    return c.memory_chart(
        t,
        "VRAM level",
        "(used + reserved) / total memory of each GPU (NVML). For an engine that "
        "pre-allocates its share of the card this stays flat: the Memory pressure panel "
        "shows its KV cache. " + c.vram_text(t),
        [c.gpu_series(contract.GPU_MEMORY_USED_RATIO.name)],
    )


def now_section(t: Thresholds) -> Section:
    return Section(
        "GPUs now",
        p.line(
            c.gpus_up_stat(),
            c.mean_utilization_stat(t, "Mean utilization"),
            c.memory_stat(
                t,
                "Highest VRAM level",
                "The fullest selected GPU. " + c.vram_text(t),
                f"max({contract.GPU_MEMORY_USED_RATIO}{gpu_sel()})",
            ),
            c.total_stat(
                "Power draw",
                "Total power drawn by the selected GPUs.",
                "sum",
                contract.GPU_POWER_WATTS,
                gpu_sel(),
                "watt",
            ),
            c.total_stat(
                "Hottest GPU",
                "Core temperature of the hottest selected GPU.",
                "max",
                contract.GPU_TEMPERATURE_CELSIUS,
                gpu_sel(),
                "celsius",
                thresholds=TEMPERATURE_STEPS,
            ),
            h=4,
        ),
    )


def compute_section(t: Thresholds) -> Section:
    return Section(
        "Compute",
        p.line(
            c.ratio_chart(
                "Utilization vs SM, tensor and DRAM activity",
                "NVML utilization only says a kernel was running; SM active, tensor active "
                "and DRAM active (GPM, Hopper and newer) say how much of the chip worked. "
                "High utilization with low SM activity is a GPU waiting on small kernels; "
                "high DRAM activity with low tensor activity is a memory-bound decode.",
                [
                    c.gpu_series(contract.GPU_UTILIZATION_RATIO.name, "utilization"),
                    c.gpu_series(contract.GPU_MEMORY_BUSY_RATIO.name, "memory busy"),
                    c.gpu_series(contract.GPU_SM_ACTIVE_RATIO.name, "SM active"),
                    c.gpu_series(contract.GPU_SM_OCCUPANCY_RATIO.name, "SM occupancy"),
                    c.gpu_series(contract.GPU_TENSOR_ACTIVE_RATIO.name, "tensor active"),
                    c.gpu_series(contract.GPU_DRAM_ACTIVE_RATIO.name, "DRAM active"),
                ],
                fill=0,
            ),
            c.gpu_utilization_panel(t),
            h=9,
        ),
        p.line(c.gpu_state_panel(t), h=6),
    )


def memory_section(t: Thresholds) -> Section:
    return Section(
        "Memory",
        p.line(
            c.gpu_chart(
                "Memory used, reserved and total",
                "Device memory used by allocations, reserved by the driver, and the total.",
                "bytes",
                (contract.GPU_MEMORY_USED_BYTES, "used"),
                (contract.GPU_MEMORY_RESERVED_BYTES, "reserved"),
                (contract.GPU_MEMORY_TOTAL_BYTES, "total"),
            ),
            vram_panel(t),
            c.gpu_chart(
                "Memory per process",
                "Device memory of each process on the GPU; processes of watched workers "
                "carry the worker's name.",
                "bytes",
                (contract.GPU_PROCESS_MEMORY_USED_BYTES, PER_PROCESS),
                stack=True,
                fill=30,
            ),
            h=8,
        ),
        p.line(
            c.ratio_chart(
                "SM share per process",
                "Each process's share of SM time over the last sample period.",
                [c.gpu_series(contract.GPU_PROCESS_SM_UTILIZATION_RATIO.name, PER_PROCESS)],
            ),
            h=7,
        ),
    )


def power_section(t: Thresholds) -> Section:
    return Section(
        "Power, temperature and clocks",
        p.line(
            c.gpu_chart(
                "Power vs limit",
                "Power drawn by each GPU against its enforced power limit. Draw "
                "pinned at the limit with sw_power_cap events means the clocks are capped.",
                "watt",
                (contract.GPU_POWER_WATTS, "draw"),
                (contract.GPU_POWER_LIMIT_WATTS, "limit"),
            ),
            p.timeseries(
                "Energy rate",
                "Average power from NVML's energy counter (read on the slow interval): "
                "smoother than the power gauge, and what the power bill sees.",
                [
                    Query(
                        S.GPU_POWER.render(selector=gpu_sel(), window=c.RATE_WINDOW),
                        c.gpu_label(),
                    )
                ],
                unit="watt",
                min_value=0,
            ),
            c.gpu_chart(
                "Temperature",
                "GPU core temperature.",
                "celsius",
                (contract.GPU_TEMPERATURE_CELSIUS, ""),
                min_value=None,
                thresholds=TEMPERATURE_STEPS,
                threshold_style="dashed",
            ),
            h=8,
        ),
        p.line(
            c.gpu_chart(
                "Clocks",
                "Current SM and memory clocks. SM clocks dropping under load go with the "
                "clock-event reasons next to this panel.",
                "hertz",
                (contract.GPU_SM_CLOCK_HERTZ, "SM"),
                (contract.GPU_MEMORY_CLOCK_HERTZ, "memory"),
            ),
            p.state_timeline(
                "Clock-event reasons",
                "Why the clocks are below maximum, per reason: idle is normal; sw_power_cap, "
                "hw_slowdown, sw_thermal, hw_thermal and power_brake throttle the GPU "
                "(InferenceGPUThermalThrottling).",
                [c.gpu_series(contract.GPU_CLOCK_EVENT_ACTIVE.name, "{{reason}}")],
                mappings=p.value_mappings(
                    {0: ("inactive", "transparent"), 1: ("active", "orange")}
                ),
            ),
            h=8,
        ),
    )


def transfers_section(t: Thresholds) -> Section:
    return Section(
        "Interconnect, P-state and fan",
        p.line(
            c.gpu_chart(
                "PCIe throughput",
                "PCIe traffic of each GPU by direction (tx: out of the GPU, rx: into it), "
                "headers included. Sustained high rx on an inference GPU is weights or KV "
                "cache moving over the bus (offload, swapping, model load).",
                "Bps",
                (contract.GPU_PCIE_THROUGHPUT_BYTES_PER_SECOND, "{{direction}}"),
            ),
            c.gpu_chart(
                "NVLink throughput",
                "NVLink traffic over all links of each GPU: tensor-parallel all-reduce "
                "traffic. From the dcgm-exporter backend only; absent on boards without "
                "NVLink.",
                "Bps",
                (contract.GPU_NVLINK_THROUGHPUT_BYTES_PER_SECOND, ""),
            ),
            h=8,
        ),
        p.line(
            c.gpu_chart(
                "Performance state",
                "P-state of each GPU, 0 the fastest. A GPU under load that leaves P0 "
                "is being held back (power, thermal or an application-clock setting); "
                "idle GPUs drop to P8 and lower.",
                "none",
                (contract.GPU_PERFORMANCE_STATE, ""),
                max_value=15,
                fill=0,
            ),
            c.gpu_chart(
                "Fan speed",
                "Intended fan speed as a share of its maximum (can exceed 100%). Absent "
                "on passively cooled boards, where the chassis moves the air.",
                "percentunit",
                (contract.GPU_FAN_SPEED_RATIO, ""),
                fill=0,
            ),
            h=8,
        ),
    )


def errors_section(t: Thresholds) -> Section:
    return Section(
        "Errors and partitions",
        p.line(
            p.event_bars(
                "XID errors",
                "New XID errors reported by the driver, per GPU and XID code. Critical XIDs "
                f"({', '.join(str(x) for x in t.gpu_health.xid_critical)}) page.",
                [
                    Query(
                        S.XID_ERRORS.render(
                            selector=gpu_sel(), window=c.RATE_WINDOW, by="instance, gpu, xid"
                        ),
                        c.gpu_label("XID {{xid}}"),
                    )
                ],
            ),
            p.event_bars(
                "ECC errors",
                "New volatile ECC errors per GPU: corrected ones are a warning sign, "
                "uncorrected ones corrupt results.",
                [
                    Query(
                        S.ECC_ERRORS.render(
                            selector=gpu_sel(), window=c.RATE_WINDOW, by="instance, gpu, type"
                        ),
                        c.gpu_label("{{type}}"),
                    )
                ],
            ),
            p.timeseries(
                "Agent collection errors",
                "Errors of the agent's own collectors per second, by collector and reason. "
                "A collector that has counted no error since the agent started shows as a "
                "flat zero (the agent creates an error series at the first error).",
                [
                    Query(
                        S.COLLECT_ERROR_RATE.render(
                            selector=host_sel(),
                            window=c.RATE_WINDOW,
                            by="instance, collector, reason",
                        )
                        + " or sum by (instance, collector) "
                        f"(0 * {contract.COLLECT_DURATION_SECONDS}{host_sel()})",
                        "{{instance}} {{collector}} {{reason}}",
                    )
                ],
                unit="short",
                axis_label="errors/s",
                min_value=0,
            ),
            h=8,
        ),
        p.line(
            p.table(
                "MIG instances",
                "MIG instances of the selected GPUs with their profile and VRAM level.",
                [
                    Query(
                        contract.GPU_MEMORY_USED_RATIO.name + gpu_sel('gpu_instance!=""'),
                        "",
                        instant=True,
                        fmt="table",
                    )
                ],
                unit="percentunit",
                exclude=("job",),
                order=("instance", "gpu", "gpu_instance", "mig_profile", "uuid", "Value"),
                rename={"Value": "VRAM level"},
            ),
            c.info_table(
                "GPU inventory",
                "Model, UUID, PCI bus, driver and MIG mode of each selected GPU.",
                contract.GPU_INFO,
                gpu_sel(),
                (
                    "instance",
                    "gpu",
                    "name",
                    "uuid",
                    "pci_bus_id",
                    "driver_version",
                    "mig_mode",
                ),
            ),
            h=7,
        ),
    )


DASHBOARD = Dashboard(
    key="gpu",
    title="Inference GPU",
    description="GPUs in detail: utilization against SM/tensor/DRAM activity, memory down to "
    "the process, power, temperature, clocks and why they drop, PCIe and NVLink traffic, "
    "P-state and fan, XID and ECC errors, MIG.",
    rows=(
        now_section,
        compute_section,
        memory_section,
        power_section,
        transfers_section,
        errors_section,
    ),
)
