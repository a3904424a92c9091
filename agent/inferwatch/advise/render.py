"""Output of ``inferwatch advise``: text, a rich table on a terminal, JSON for tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from inferwatch.advise.model import Recommendation, WorkerPicture, finite
from inferwatch.pack import fmt

if TYPE_CHECKING:
    from inferwatch.advise.capacity import CapacityPlan


def report_dict(
    pictures: Sequence[WorkerPicture],
    recs: Sequence[Recommendation],
    source: Mapping[str, Any],
    thresholds: str,
) -> dict[str, Any]:
    doc = {
        "source": dict(source),
        "thresholds": thresholds,
        "workers": [p.as_dict() for p in pictures],
        "recommendations": [r.as_dict(i + 1) for i, r in enumerate(recs)],
    }
    return dict(finite(doc))


def loop_words(r: Recommendation) -> str:
    """``closed loop "VRAM near the limit"``, or a further condition by its name."""
    from inferwatch.pack import loops as L

    if r.id in L.BY_ID:
        return L.shown(r.id)
    return f'{"closed loop" if r.loop in L.GUIDE_LOOPS else "further condition"} "{r.loop}"'


def _opt(value: float | None, unit: str) -> str:
    return "-" if value is None else fmt.quantity(value, unit)


def worker_rows(pictures: Sequence[WorkerPicture]) -> list[list[str]]:
    rows = []
    for p in pictures:
        cap = p.capacity()
        running = _opt(p.running_max, "")
        rows.append(
            [
                p.label,
                p.model or "-",
                _opt(p.gpu_utilization, "ratio"),
                _opt(p.vram_used_ratio, "ratio"),
                _opt(p.ttft_p95, "s"),
                f"{_opt(p.e2e_p50, 's')} / {_opt(p.e2e_p99, 's')}",
                _opt(p.queue_depth, ""),
                f"{running} / {cap:g}" if cap else running,
                _opt(p.kv_usage, "ratio"),
                " ".join(f"{k}={v}" for k, v in p.flags.items()) or "-",
            ]
        )
    return rows


WORKER_COLUMNS = [
    "worker",
    "model",
    "GPU util",
    "VRAM peak",
    "TTFT P95",
    "E2E P50 / P99",
    "queue",
    "running / max",
    "KV peak",
    "launch flags",
]


def render_text(
    pictures: Sequence[WorkerPicture], recs: Sequence[Recommendation], where: str
) -> str:
    lines = [f"inferwatch advise: {len(recs)} recommendation(s) from {where}", ""]
    if not recs:
        lines.append("No recommendation: every worker is within its thresholds.")
        lines.append("")
    for i, r in enumerate(recs, 1):
        lines.append(f"{i}. {r.title}")
        lines.append(f"   workers: {', '.join(r.workers)}  ({loop_words(r)}, guide {r.guide})")
        lines.append(f"   urgency: {r.urgency}")
        lines.append("   evidence:")
        lines += [f"     - {e.text()}" for e in r.evidence]
        lines.append("   do:")
        lines += [f"     - {a}" for a in r.actions]
        lines.append("")
    lines.append("Workers:")
    rows = [WORKER_COLUMNS, *worker_rows(pictures)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(WORKER_COLUMNS))]
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def render_rich(
    pictures: Sequence[WorkerPicture], recs: Sequence[Recommendation], where: str
) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]inferwatch advise[/bold]: {len(recs)} recommendation(s) from {escape(where)}"
    )
    if recs:
        table = Table(show_lines=True)
        for col in ("#", "recommendation", "evidence", "do"):
            table.add_column(col, overflow="fold")
        for i, r in enumerate(recs, 1):
            colour = {"critical": "red", "warning": "yellow"}.get(r.severity or "", "dim")
            table.add_row(
                str(i),
                f"[bold]{escape(r.title)}[/bold]\nworkers: {escape(', '.join(r.workers))}\n"
                f"[{colour}]{escape(r.urgency)}[/{colour}]\n"
                f"[dim]{escape(loop_words(r))}, guide {escape(r.guide)}[/dim]",
                escape("\n".join(e.text() for e in r.evidence)),
                escape("\n".join(f"- {a}" for a in r.actions)),
            )
        console.print(table)
    else:
        console.print("No recommendation: every worker is within its thresholds.")
    workers = Table(title="Workers")
    for col in WORKER_COLUMNS:
        workers.add_column(col)
    for row in worker_rows(pictures):
        workers.add_row(*(escape(cell) for cell in row))
    console.print(workers)


def render_capacity(plan: CapacityPlan) -> str:
    lines = ["inferwatch advise capacity: the field guide's max-num-seqs estimate (2.3)", ""]
    lines += [f"  {step}" for step in plan.steps]
    lines += ["", f"Suggested: vllm serve ... {plan.flags()}", ""]
    return "\n".join(lines)
