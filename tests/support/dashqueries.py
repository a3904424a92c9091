"""The queries of the generated dashboards, read back out of their JSON (tests only).

:func:`panel_queries` and :func:`query_targets` list every panel's PromQL,
:func:`expand_variables` fills in the dashboard and Grafana variables, and
:data:`HARDWARE_OPTIONAL` names, in this one place, the queries that need
hardware the fake GPU does not have, with the reason. The dashboard linter
(``tests/support/dashlint.py``) and the live tests use them; nothing in the
package does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# --- queries, for linting and for the live test ----------------------------------------


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


#: Grafana's global variables and the values the checks give them. The live test
#: may pass other values (e.g. ``{"__range": "5m"}`` for a young Prometheus).
GLOBAL_DEFAULTS: dict[str, str] = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
    "__interval_ms": "60000",
}

_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)\]\]")


def dashboard_variables(dashboard_json: Mapping[str, Any]) -> dict[str, str]:
    """Each templating variable -> the value its "All" option puts into a query."""
    values = {}
    for var in (dashboard_json.get("templating") or {}).get("list") or []:
        if var.get("type") == "datasource":
            values[var["name"]] = "prometheus"
        else:
            values[var["name"]] = str(var.get("allValue") or ".*")
    return values


def expand_variables(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with ``$var``, ``${var}``, ``${var:format}`` and ``[[var]]`` replaced.

    ``values`` holds the dashboard variables (``job``, ``gpu``...); Grafana's global
    variables default to :data:`GLOBAL_DEFAULTS`. An unknown variable raises KeyError.
    """
    merged = {**GLOBAL_DEFAULTS, **values}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in merged:
            raise KeyError(f"undefined variable ${name} in {expr!r}")
        return merged[name]

    return _VARIABLE.sub(sub, expr)
