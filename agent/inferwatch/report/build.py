"""The report assembled: the figures of :mod:`summary`, then the findings of :mod:`insights` on them.

The one module that imports both, so neither imports the other. Pure; no I/O.
"""

from __future__ import annotations

import time
from dataclasses import replace

from inferwatch.pack.thresholds import Thresholds
from inferwatch.report.insights import findings as find
from inferwatch.report.model import RawData, RawWorker
from inferwatch.report.summary import (
    ModelFigures,
    Report,
    alert_figures,
    data_notes,
    gpu_figures,
    scope_figures,
)


def build_report(raw: RawData, t: Thresholds, generated_at: float | None = None) -> Report:
    period = raw.period
    by_model: dict[str, list[RawWorker]] = {}
    for w in raw.workers:
        by_model.setdefault(w.model, []).append(w)
    worker_models = {w.worker: w.model for w in raw.workers}
    gpus = tuple(gpu_figures(g, period, worker_models) for g in raw.gpus)
    models = []
    for model, ws in sorted(by_model.items()):
        total_fig = scope_figures("model", model, "", ws, period, t)
        workers = tuple(
            scope_figures("worker", model, w.worker, [w], period, t)
            for w in sorted(ws, key=lambda w: w.worker)
        )
        model_gpus = tuple(g.uuid for g in gpus if model in g.models)
        models.append(ModelFigures(total_fig, workers, model_gpus))
    fleet = scope_figures("fleet", "", "", raw.workers, period, t) if raw.workers else None
    alerts = alert_figures(raw)
    report = Report(
        period=period,
        thresholds=t,
        generated_at=time.time() if generated_at is None else generated_at,
        fleet=fleet,
        models=tuple(models),
        gpus=gpus,
        alerts=alerts,
        findings=(),
        notes=data_notes(raw),
        hourly=raw.hourly,
    )
    return replace(report, findings=tuple(find(report)))
