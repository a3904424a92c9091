"""What every runbook page is made of: the page's fields, the context a page function
gets (thresholds, rule names, the alert's scope, placeholders), Markdown helpers
(PromQL and shell blocks, flags in backticks, field-guide citations) and the
remedy texts several families share."""

from __future__ import annotations

import re
from dataclasses import dataclass

from inferwatch.pack import loops as L
from inferwatch.pack.names import Names
from inferwatch.pack.rules.alert import Alert
from inferwatch.pack.rules.common import dur
from inferwatch.pack.thresholds import Thresholds

DASHBOARD_TITLES = {
    "overview": "Inference overview",
    "worker": "Inference worker",
    "gpu": "Inference GPU",
    "trends": "Inference weekly trends",
}


SECTIONS = ("Meaning", "Impact", "Diagnosis", "Mitigation")


@dataclass(frozen=True)
class Page:
    condition: str
    meaning: str
    impact: str
    diagnosis: str
    mitigation: str


#: what an on-call engineer replaces in a page's queries and links: the alert's labels
PLACEHOLDERS = {"instance": "INSTANCE", "worker": "WORKER", "gpu": "GPU", "model": "MODEL"}


@dataclass(frozen=True)
class Ctx:
    """What every page function needs: thresholds, rule names, the alert's variants.

    Queries and dashboard links are scoped to what the alert is about (its
    ``scope``: the instance and the worker or GPU), with upper-case placeholders
    the engineer replaces with the alert's labels (the alert's own dashboard link
    has them filled in already).
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

    def panel(self, dashboard: str, *titles: str) -> str:
        """``[Inference GPU](url?var-...) → **VRAM level**, **GPU state**``"""
        url = self.t.pack.dashboard_url(dashboard)
        if self.scope:
            url += "?" + "&".join(f"var-{k}={PLACEHOLDERS[k]}" for k in self.scope)
        return f"[{DASHBOARD_TITLES[dashboard]}]({url}) → " + ", ".join(f"**{x}**" for x in titles)


def _block(lang: str, lines: tuple[str, ...], indent: int) -> str:
    """A fenced block indented to sit inside a list item (3 for ``1.``, 2 for ``-``)."""
    pad = " " * indent
    body = "\n".join(pad + line for line in (f"```{lang}", *lines, "```"))
    return f"\n\n{body}\n\n"


def promql(*queries: str, indent: int = 3) -> str:
    """One fenced block per query: each pastes into Prometheus' query box as it is."""
    blocks = [_block("promql", tuple(q.splitlines()), indent).strip("\n") for q in queries]
    return "\n\n" + "\n\n".join(blocks) + "\n\n"


def sh(*lines: str, indent: int = 3) -> str:
    return _block("sh", lines, indent)


_FLAG = re.compile(r"(?<![`\w])(--[a-z][a-z0-9-]*(?: (?:fp8|\d[\d.]*)(?![\w.]))?)")


def md(text: str) -> str:
    """A remedy sentence of :mod:`inferwatch.pack.loops` with its flags as Markdown code."""
    return _FLAG.sub(r"`\1`", text)


def cite(text: str, *sections: str) -> str:
    """``text`` (a sentence ending in a full stop) with the guide's sections before the stop."""
    return f"{text.rstrip().rstrip('.')} [{', '.join(sections)}]."


FLAGS_WHERE = (
    "Where the flags live: vLLM's settings are command-line flags of `vllm serve` (or of "
    "`python -m vllm.entrypoints.openai.api_server`): in Kubernetes they are the container "
    "`args`, under systemd the `ExecStart=` line. The **Inference worker** dashboard's "
    "**Launch flags** table shows what each worker runs with now."
)


MAX_NUM_SEQS_ESTIMATE = (
    "Size `--max-num-seqs` with the guide's estimate [2.3]: (GPU memory in GB × 0.8 − model "
    "weights in GB) ÷ KV cache per sequence in GB. Example: a 24 GB A10 serving a 7B model "
    "quantized to INT8 (8 GB) with about 0.5 GB of KV cache per sequence gives "
    "(24 × 0.8 − 8) ÷ 0.5 ≈ 22; run 20 to keep a margin. Then load-test at the same "
    "concurrency and watch P50/P99 and the VRAM level [2.3]."
)


BALANCING = (
    f"- {md(L.LEAST_CONNECTIONS)} Round-robin assumes every request costs the same, while a "
    "2000-token answer takes ten times a 200-token one [5.3].\n"
    f"- {md(L.LONG_CONTEXT_POOL)} Long requests then stop delaying short ones [5.3]."
)


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
