"""Pictures from Prometheus: instant queries at the end of a range, over the whole range."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from inferwatch.advise.model import (
    PENDING,
    AlertSeen,
    AlertView,
    Unreachable,
    WorkerPicture,
    name_pictures,
)
from inferwatch.pack.reading import Answer, prometheus_queries, readings_from_answers

if TYPE_CHECKING:
    from inferwatch.report.promapi import PrometheusClient

__all__ = [
    "alert_queries",
    "alerts_from_answers",
    "pictures_from_answers",
    "prometheus_queries",
    "read_alerts",
    "read_prometheus",
]


def _answers(client: PrometheusClient, queries: Mapping[str, str], at: float) -> dict[str, Answer]:
    """Each query's answer at ``at``; :class:`Unreachable` when Prometheus cannot answer."""
    from inferwatch.report.promapi import PrometheusUnreachable, QueryError

    try:
        return {n: [(s.labels, s.value) for s in client.instant(q, at)] for n, q in queries.items()}
    except PrometheusUnreachable as exc:
        raise Unreachable(str(exc)) from None
    except QueryError as exc:
        raise Unreachable(str(exc).splitlines()[0]) from None


def read_prometheus(
    url: str, start: float, end: float, selector: str, timeout: float = 60.0
) -> list[WorkerPicture]:
    """Each worker's picture over ``[start, end]`` from a Prometheus-compatible API."""
    from inferwatch.report.promapi import PrometheusClient

    client = PrometheusClient(url, timeout=timeout)
    queries = prometheus_queries(selector, f"{max(1, round(end - start))}s")
    return pictures_from_answers(_answers(client, queries, end), end)


def alert_queries(names: Sequence[str]) -> dict[str, str]:
    """The instant queries (at the end of the range) of the pack's alerts: their states and
    labels, and when each became active (``ALERTS_FOR_STATE``'s value, an alert with a
    ``for``)."""
    matcher = f'alertname=~"{"|".join(sorted(names))}"'
    return {"alerts": f"ALERTS{{{matcher}}}", "active_at": f"ALERTS_FOR_STATE{{{matcher}}}"}


def read_alerts(
    url: str, end: float, waits: Mapping[str, float], timeout: float = 60.0
) -> AlertView:
    """The alerts named in ``waits`` (name -> its ``for``) as Prometheus holds them at
    ``end``, and which of them it evaluates: its rules API, else the ones seen active (a
    store that only receives ``ALERTS``, or one without the API, says nothing of the rest)."""
    from inferwatch.report.promapi import PrometheusClient, PrometheusUnreachable, QueryError

    client = PrometheusClient(url, timeout=timeout)
    answers = _answers(client, alert_queries(list(waits)), end)
    try:
        loaded = set(client.alerting_rules())
    except QueryError:
        loaded = set()
    except PrometheusUnreachable as exc:
        raise Unreachable(str(exc)) from None
    return alerts_from_answers(answers, end, waits, loaded)


def _alert_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "alertstate")))


def alerts_from_answers(
    answers: Mapping[str, Sequence[tuple[Mapping[str, str], float]]],
    end: float,
    waits: Mapping[str, float],
    loaded: Iterable[str] = (),
) -> AlertView:
    """Join the answers of :func:`alert_queries` into the view at ``end``."""
    active_at = {_alert_key(lb): v for lb, v in answers.get("active_at", ())}
    seen = []
    for labels, _ in answers.get("alerts", ()):
        name = labels.get("alertname", "")
        if name not in waits:
            continue
        state = labels.get("alertstate", PENDING)
        plain = {k: v for k, v in labels.items() if k not in ("__name__", "alertstate")}
        seen.append(AlertSeen(name, state, plain, active_at.get(_alert_key(labels)), waits[name]))
    evaluated = (set(loaded) | {s.alert for s in seen}) & set(waits)
    return AlertView(end, tuple(seen), frozenset(evaluated))


def pictures_from_answers(answers: Mapping[str, Answer], end: float) -> list[WorkerPicture]:
    """One picture per (instance, worker): the workers' ``pack.reading`` readings from the
    answers of :func:`prometheus_queries`, as advise's pictures."""
    readings = readings_from_answers(answers, end)
    return name_pictures([WorkerPicture.of(r, instance) for (instance, _), r in readings.items()])
