"""What the tests read back from the generated pack: every panel query with whether the
test stack may leave it empty (:data:`HARDWARE_OPTIONAL`), the alert names, and the
series an expression selects. Test-only: the package itself never needs them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inferwatch.pack.dashboards import GLOBAL_DEFAULTS
from inferwatch.pack.dashboards.lint import parse, selector_name, selectors
from inferwatch.pack.rules import alerts
from inferwatch.pack.thresholds import Thresholds


@dataclass(frozen=True)
class HardwareOptional:
    """Queries of a panel that need hardware the fake GPU does not have."""

    reason: str
    #: refIds of the optional queries; empty means every query of the panel
    ref_ids: frozenset[str] = frozenset()


_GPM = (
    "GPM metrics (SM active, SM occupancy, tensor active, DRAM active) exist on Hopper and "
    "newer GPUs only; the simulated GPU reports them only when the simulator sets them"
)

_WARMUP = (
    "the warm-up gate's series (docs/warmup.md) exist only when the agent runs with "
    "`warmup:` enabled; a stack whose agent has no gate leaves the Warm-up row empty"
)

#: The one place that says which panel queries may return nothing on the test stack: the
#: fake GPU lacks some hardware, and some series need an agent feature turned on.
#: Keys are panel titles (unique across the dashboards where they matter).
HARDWARE_OPTIONAL: dict[str, HardwareOptional] = {
    "Utilization vs SM, tensor and DRAM activity": HardwareOptional(
        _GPM, frozenset({"C", "D", "E", "F"})
    ),
    "XID errors": HardwareOptional(
        "XID counters appear only after the driver reports an XID event; the fake GPU "
        "reports one only when a test injects it"
    ),
    "MIG instances": HardwareOptional(
        "MIG needs an A100/H100-class GPU in MIG mode; the fake GPU has MIG devices only "
        "when a test adds them"
    ),
    "Wasted GPU-hours per day, against the week before": HardwareOptional(
        "the week-before line reads data a week old: a Prometheus younger than a week has "
        "none (not hardware, but the same kind of absence)",
        frozenset({"B"}),
    ),
    # issue 23: signals some engines or GPUs do not have (docs/engines.md, docs/gpu.md)
    "NVLink throughput": HardwareOptional(
        "NVLink throughput comes from the dcgm-exporter backend only (NVML's counters are "
        "not read), and PCIe-only boards have no NVLink at all"
    ),
    "Fan speed": HardwareOptional(
        "passively cooled data-centre boards (H100/H200 SXM, most PCIe cards in server "
        "chassis) report no fan speed"
    ),
    "Prefill, decode and queue time P50 / P95": HardwareOptional(
        "per-request prefill and decode histograms exist only for the engines that export "
        "them (docs/engines.md: vLLM); the queue-time lines are required",
        frozenset({"A", "B", "C", "D"}),
    ),
    "TTFT P99: engine and clients": HardwareOptional(
        "the measuring proxy's series exist only for workers with workers[].proxy "
        "(docs/proxy.md); the rules' TTFT line is required",
        frozenset({"B"}),
    ),
    "LoRA adapters": HardwareOptional(
        "LoRA series exist only for a vLLM worker started with --enable-lora"
    ),
    **{
        title: HardwareOptional(_WARMUP)
        for title in (
            "Warm",
            "Gate opened on deadline",
            "Warm-up TTFT",
            "Warm-up duration",
            "Warm-ups and failures",
        )
    },
}


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref_id: str
    expr: str
    instant: bool
    #: why this query may return no data on the test stack, or None when it must
    optional: str | None


def _all_panels(dashboard_json: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for panel in dashboard_json.get("panels") or []:
        out.append(panel)
        out.extend(panel.get("panels") or [])
    return out


def optional_reason(panel_title: str, ref_id: str) -> str | None:
    entry = HARDWARE_OPTIONAL.get(panel_title)
    if entry is None or (entry.ref_ids and ref_id not in entry.ref_ids):
        return None
    return entry.reason


def query_targets(dashboard_json: Mapping[str, Any]) -> list[PanelQuery]:
    """Every target of every panel, with its refId and whether it may be empty.

    For the live test (simulator under load + agent + Prometheus with the
    generated rules): expand each ``expr`` with :func:`expand_variables` (the
    "All" values of :func:`dashboard_variables`, or the running setup's worker
    and GPU names) and query Prometheus; every query whose ``optional`` is None
    must return data. Series that only exist under certain conditions, which
    the test has to create: ``inferwatch_max_num_seqs`` (start the simulated
    workers with ``--max-num-seqs``), admission rejections (a queue limit the
    load exceeds), and a firing alert for the "Firing alerts" table (an
    always-firing ``Inference*`` rule, or one of the generated alerts after its
    ``for``).
    """
    uid = str(dashboard_json.get("uid", ""))
    out = []
    for panel in _all_panels(dashboard_json):
        for target in panel.get("targets") or []:
            title = str(panel.get("title", ""))
            ref = str(target.get("refId", ""))
            out.append(
                PanelQuery(
                    uid,
                    title,
                    ref,
                    str(target["expr"]),
                    bool(target.get("instant")),
                    optional_reason(title, ref),
                )
            )
    return out


def panel_queries(dashboard_json: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL with variables) for every query of every panel."""
    return [(q.panel, q.expr) for q in query_targets(dashboard_json)]


def alert_names(t: Thresholds) -> list[str]:
    """Distinct alert names, in file order."""
    return list(dict.fromkeys(a.name for a in alerts(t)))


def metric_names(expr: str, values: Mapping[str, str] | None = None) -> set[str]:
    """Names of the series an expression selects (after expansion)."""
    tree = parse(expr, values if values is not None else GLOBAL_DEFAULTS)
    return {n for n in (selector_name(s) for s in selectors(tree)) if n}
