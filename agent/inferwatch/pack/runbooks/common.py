"""What every runbook page is made of: the page's fields, the context its template
gets (thresholds, rule names, the alert's scope, placeholders) and the Markdown
helpers the templates use as filters (PromQL and shell blocks, flags in backticks,
field-guide citations)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from inferwatch.pack.fmt import dur
from inferwatch.pack.names import Names
from inferwatch.pack.rules.alert import Alert
from inferwatch.pack.thresholds import Thresholds

DASHBOARD_TITLES = {
    "overview": "Inference overview",
    "worker": "Inference worker",
    "gpu": "Inference GPU",
    "trends": "Inference weekly trends",
}


SECTIONS = ("Meaning", "Impact", "Diagnosis", "Mitigation")

#: the block at the top of every page: the action, then ``inferwatch advise``
NOW = "Do this now"
#: the section after it: severity, condition, loop, dashboard and the alert's query
ALERT = "The alert"


@dataclass(frozen=True)
class Page:
    condition: str
    now: str
    meaning: str
    impact: str
    diagnosis: str
    mitigation: str


#: what an on-call engineer replaces in a page's queries and links: the alert's labels
PLACEHOLDERS = {"instance": "INSTANCE", "worker": "WORKER", "gpu": "GPU", "model": "MODEL"}

#: the address of the Prometheus that fired the alert (its ``$externalURL``)
PROMETHEUS = "PROMETHEUS"


@dataclass(frozen=True)
class Ctx:
    """What every page template gets as ``c``: thresholds, rule names, the alert's variants.

    Queries and dashboard links are scoped to what the alert is about (its
    ``scope``: the instance and the worker or GPU), with upper-case placeholders for
    the alert's labels: the HTML page fills them in from its link (:mod:`.html`), and
    the alert's own dashboard link has them filled in already.
    """

    t: Thresholds
    n: Names
    variants: tuple[Alert, ...]

    @property
    def scope(self) -> tuple[str, ...]:
        return tuple(k for k in self.variants[0].scope if k in PLACEHOLDERS)

    def _matchers(self, keys: tuple[str, ...]) -> list[str]:
        return [f'{k}="{PLACEHOLDERS[k]}"' for k in keys]

    @property
    def hold(self) -> str:
        """The alert's ``for`` in words (``10m``): how long its condition holds before it fires."""
        return dur(self.variants[0].for_seconds)

    @property
    def sel(self) -> str:
        """The agent's selector narrowed to the alert's instance and worker or GPU."""
        return self.t.pack.selector(*self._matchers(self.scope))

    def s(self, *extra: str) -> str:
        return self.t.pack.selector(*self._matchers(self.scope), *extra)

    def only(self, *keys: str, extra: tuple[str, ...] = ()) -> str:
        """The selector narrowed to some of the placeholders (``only("instance")``)."""
        return self.t.pack.selector(*self._matchers(keys), *extra)

    def r(self, record: str) -> str:
        """A recording rule's series for the alert's instance and worker or GPU."""
        return record + self.sel

    def on_gpu(self, expr: str) -> str:
        """Worker series (labels job, instance, worker) of the workers on the alert's GPU."""
        return (
            f"{expr}\nand on (job, instance, worker) "
            f"{self.n.worker_gpu}{self.only('instance', 'gpu')}"
        )

    def of_worker(self, expr: str) -> str:
        """GPU series (labels job, instance, gpu, uuid) of the GPUs the alert's worker runs on."""
        return (
            f"{expr}\n* on (job, instance, gpu, uuid) group_left (worker) "
            f"{self.n.worker_gpu}{self.only('instance', 'worker')}"
        )

    @property
    def advise(self) -> str:
        """The ``inferwatch advise`` line for what the alert is about: the agent of its
        instance (narrowed to its worker), else the Prometheus that fired it."""
        if "instance" not in self.scope:
            return f"inferwatch advise --prometheus-url {PROMETHEUS}"
        line = f"inferwatch advise --agent-url http://{PLACEHOLDERS['instance']}"
        if "worker" in self.scope:
            line += f" --worker {PLACEHOLDERS['worker']}"
        return line

    def dashboard(self, dashboard: str) -> str:
        """The dashboard's URL with its variables set to the alert's placeholders."""
        url = self.t.pack.dashboard_url(dashboard)
        if self.scope:
            url += "?" + "&".join(f"var-{k}={PLACEHOLDERS[k]}" for k in self.scope)
        return url

    def panel(self, dashboard: str, *titles: str) -> str:
        """``[Inference GPU](url?var-...) → **VRAM level**, **GPU state**``"""
        url = self.dashboard(dashboard)
        return f"[{DASHBOARD_TITLES[dashboard]}]({url}) → " + ", ".join(f"**{x}**" for x in titles)


def _fence(lang: str, lines: list[str], indent: int) -> str:
    pad = " " * indent
    return "\n".join(pad + line for line in (f"```{lang}", *lines, "```"))


def promql(body: str, indent: int = 3) -> str:
    """``{% filter promql %}`` (or ``promql(2)``): one fenced block per query, the queries
    apart by a blank line, indented to sit inside a list item (3 for ``1.``, 2 for
    ``-``); each block pastes into Prometheus' query box as it is."""
    queries = re.split(r"\n[ \t]*\n", textwrap.dedent(body).strip("\n"))
    return "\n\n".join(_fence("promql", q.splitlines(), indent) for q in queries) + "\n"


def sh(body: str, indent: int = 3) -> str:
    """``{% filter sh %}``: the lines as one fenced shell block, indented as ``promql``."""
    return _fence("sh", textwrap.dedent(body).strip("\n").splitlines(), indent) + "\n"


_FLAG = re.compile(r"(?<![`\w])(--[a-z][a-z0-9-]*(?: (?:fp8|\d[\d.]*)(?![\w.]))?)")


def md(text: str) -> str:
    """A remedy sentence of :mod:`inferwatch.pack.loops` with its flags as Markdown code."""
    return _FLAG.sub(r"`\1`", text)


def cite(text: str, *sections: str) -> str:
    """``text`` (a sentence ending in a full stop) with the guide's sections before the stop."""
    return f"{text.rstrip().rstrip('.')} [{', '.join(sections)}]."


#: what a page's condition (its header, "Fires when") must say about a series its alert's
#: query reads, so the header cannot drift from the query under it (tests/unit/test_runbooks.py)
def expr_terms(n: Names) -> dict[str, str]:
    return {
        n.worker_gpu_pressure: "memory pressure",
        n.queue_deriv: "queue",
        n.worker_util: "its own GPUs",
        n.model_util: "model's own GPUs",
        n.gpu_util: "GPU's utilization",
        n.quantile("worker", "ttft", "p95"): "TTFT P95",
        n.quantile("worker", "ttft", "p99"): "TTFT P99",
    }
