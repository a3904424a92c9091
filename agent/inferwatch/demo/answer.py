"""The demo's "what to do first": ``inferwatch advise``'s rules over the demo's readings.

The demo reads each worker from the agent's ``/metrics`` (``conditions.Reading``);
``pictures`` turns those readings into advise's pictures and ``answer`` asks
advise's rules (``pack.loops``' conditions) what to do, ranked by ``pack.ranking``
with what the demo knows of each alert's life: an item whose alert has held past
its ``for`` fires (``ALERT``), one still waiting is active but not paging yet
(``LOOP``), configuration notes come last. It is the same answer, in the same
order, as ``inferwatch advise --agent-url`` gives for the same numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from inferwatch.advise.model import Recommendation, WarmupState, WorkerPicture, reading_figures
from inferwatch.advise.rules import advise
from inferwatch.demo.conditions import FIRING, AlertState, Reading
from inferwatch.pack import loops as L
from inferwatch.pack import ranking as R
from inferwatch.pack.thresholds import Thresholds


def picture(worker: str, r: Reading) -> WorkerPicture:
    """One worker's reading as advise's picture (the demo reads one agent: one instance)."""
    gate = r.gate_deadline_exceeded
    return WorkerPicture(
        worker=worker,
        instance="demo",
        model=r.model or "",
        gpus=(worker,),
        **reading_figures(r),
        queue_depth_max=r.queue,
        running_max=r.running,
        preemption_rate=r.preemption_rate,
        uptime_seconds=r.uptime,
        flags=dict(r.flags),
        warmup=None if gate is None else WarmupState(ready=not gate, deadline_exceeded=gate),
    )


def pictures(readings: Mapping[str, Reading]) -> list[WorkerPicture]:
    return [picture(w, r) for w, r in readings.items() if r.up]


def answer(
    readings: Mapping[str, Reading], t: Thresholds, states: Iterable[AlertState] | None = None
) -> list[Recommendation]:
    """advise's answer for these readings; with ``states``, an item whose alerts are all
    still pending is ranked as not paging yet (``pack.ranking.LOOP``)."""
    recs = advise(pictures(readings), t)
    if states is None:
        return recs
    firing = {(s.condition.alert, s.condition.worker) for s in states if s.state == FIRING}
    out = []
    for rec in recs:
        if rec.tier == R.ALERT and rec.id in L.BY_ID:
            fired = any((a, w) in firing for a in rec.alerts for w in rec.workers)
            tier = R.ALERT if fired else R.LOOP
            urgency = R.urgency(tier, rec.severity, rec.alerts, firing=fired)
            rec = dataclasses.replace(rec, tier=tier, urgency=urgency)
        out.append(rec)
    return sorted(out, key=R.rank_key)
