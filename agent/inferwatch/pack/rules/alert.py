"""One alerting rule of the pack (:class:`Alert`): its PromQL, its ``for``, severity and
texts, and the dashboard and runbook links its annotations carry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferwatch.pack.fmt import dur
from inferwatch.pack.thresholds import Thresholds

#: the labels a runbook page can be opened on (``?instance=...&worker=...``)
PAGE_LABELS = ("instance", "worker", "gpu", "model")


@dataclass(frozen=True)
class Alert:
    """One alerting rule and the facts the runbooks and docs print about it."""

    name: str
    group: str
    expr: str
    for_seconds: float
    severity: str
    summary: str
    description: str
    #: key of ``pack.dashboard_uids`` whose panels show the signal; the catalogue fills
    #: in its group's dashboard where an alert names none
    dashboard: str = ""
    #: the labels that say what the alert is about; the dashboard link opens with the
    #: dashboards' variables of the same names set to the alert's values
    scope: tuple[str, ...] = ()

    def dashboard_link(self, t: Thresholds) -> str:
        """The dashboard URL with its variables templated from the alert's labels."""
        url = t.pack.dashboard_url(self.dashboard)
        if not self.scope:
            return url
        query = "&".join(f"var-{k}={{{{ $labels.{k} | urlquery }}}}" for k in self.scope)
        return f"{url}?{query}"

    @property
    def page_labels(self) -> tuple[str, ...]:
        """The labels the runbook link carries: the page fills its queries, dashboard links
        and ``inferwatch advise`` line with their values. A worker's alerts carry its model
        too (its peers' queries read it)."""
        keys = [k for k in self.scope if k in PAGE_LABELS]
        if "worker" in keys and "model" not in keys:
            keys.append("model")
        return tuple(keys)

    def rule(self, t: Thresholds) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_seconds:
            rule["for"] = dur(self.for_seconds)
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {
            "dashboard_url": self.dashboard_link(t),
            "description": self.description,
            "runbook_url": t.pack.runbook_url(self.name, self.page_labels),
            "summary": self.summary,
        }
        return rule
