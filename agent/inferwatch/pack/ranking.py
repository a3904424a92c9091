"""The one order of advice, and the moves that must never undo each other.

``inferwatch advise``, the weekly report's findings and the demo's "what to do
first" all rank here:

1. ``ALERT``: an item whose alert fires, or whose condition (``pack.loops``, the
   rules' own definition) holds now and would page: critical before warning, by the
   alert catalogue's severity (``severity``). Measured evidence of running out of
   memory (a restart, an XID error) ranks as critical: it is a crash, not a risk;
2. ``LOOP``: a loop that is active but not paging yet (its condition holds, its
   alert still waits out its ``for``);
3. ``NOTE``: configuration notes, standing advice that no measured condition backs
   (the guide's 0.85 head-room with prefix caching on is one: vLLM's pre-allocated
   KV pool fills the card by design, so a full card alone is no emergency).

Within a tier and severity, ``ORDER`` (the queue, the leading indicator of the 6 FAQ,
before the memory it fills), then the further past its line (``score``), the sooner.

Every item also states the ``Move`` each of its actions makes on a knob (a launch
flag, or the model's replicas). Two items that turn one knob opposite ways on the
same worker (the model, for replicas) contradict each other: ``reconcile`` keeps
the better-ranked item's move and takes the opposed action out of the other, with
one line that points at the item it defers to; a configuration note so opposed is
folded into the item it deferred to. ``contradictions`` finds any that
remain (the tests hold every answer, and the report, to none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol, TypeVar

ALERT = "alert"
LOOP = "loop"
NOTE = "note"
TIERS = (ALERT, LOOP, NOTE)
#: most urgent first; an alert's severity label
SEVERITIES = ("critical", "warning")

#: the knobs a remedy turns: launch flags by vLLM's names, and the model's replicas
GPU_MEMORY_UTILIZATION = "gpu_memory_utilization"
MAX_NUM_SEQS = "max_num_seqs"
REPLICAS = "replicas"
PREFIX_CACHING = "prefix_caching"
KV_CACHE_DTYPE = "kv_cache_dtype"
#: how a knob is turned: raise it, lower it, or a "do not" either way
UP, DOWN, NO_UP, NO_DOWN = "up", "down", "no_up", "no_down"
_OPPOSED = {frozenset((UP, DOWN)), frozenset((UP, NO_UP)), frozenset((DOWN, NO_DOWN))}
#: knobs of the model (every worker of it), not of one worker
MODEL_KNOBS = frozenset({REPLICAS})
#: how people name each knob in the line that points at the item it defers to
KNOB_WORDS = {
    GPU_MEMORY_UTILIZATION: "--gpu-memory-utilization",
    MAX_NUM_SEQS: "--max-num-seqs",
    REPLICAS: "the replica count",
    PREFIX_CACHING: "prefix caching",
    KV_CACHE_DTYPE: "the KV cache dtype",
}


@dataclass(frozen=True)
class Move:
    """One action's turn of one knob; ``action`` is the action's text."""

    knob: str
    way: str
    action: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"knob": self.knob, "way": self.way}


def opposed(a: Move, b: Move) -> bool:
    """Whether two moves on one knob undo each other (up and down, up and "do not raise",
    down and "do not lower")."""
    return a.knob == b.knob and frozenset((a.way, b.way)) in _OPPOSED


#: within one tier and severity: pack.loops ids (and advise's out-of-memory item) in
#: the order they are acted on; ids not listed come after
ORDER = (
    "oom_risk",
    "over_capacity",
    "memory",
    "preemptions",
    "cold_start",
    "warmup",
    "long_tail",
    "imbalance",
    "consolidate",
)


class Ranked(Protocol):
    """What the ranking reads of an item (advise's ``Recommendation`` is one)."""

    @property
    def id(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def severity(self) -> str | None: ...
    @property
    def score(self) -> float: ...


def key(
    tier: str, severity: str | None, item_id: str = "", score: float = 0.0
) -> tuple[int, int, int, float]:
    """The sort key: tier, severity (critical first), ``ORDER``, how far past its line."""
    sev = SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)
    order = ORDER.index(item_id) if item_id in ORDER else len(ORDER)
    return (TIERS.index(tier), sev, order, -score)


def rank_key(item: Ranked) -> tuple[int, int, int, float]:
    return key(item.tier, item.severity, item.id, item.score)


@cache
def alert_severities() -> Mapping[str, str]:
    """Each alert's most urgent severity, from the alert catalogue (severities do not
    depend on the thresholds' numbers)."""
    from inferwatch.pack.rules import alerts
    from inferwatch.pack.thresholds import load_thresholds

    out: dict[str, str] = {}
    for a in alerts(load_thresholds()):
        known = out.get(a.name)
        if known is None or SEVERITIES.index(a.severity) < SEVERITIES.index(known):
            out[a.name] = a.severity
    return out


def severity(alert_names: Iterable[str]) -> str | None:
    """The most urgent severity among these alerts (None: none of them is known)."""
    known = [alert_severities()[a] for a in alert_names if a in alert_severities()]
    return min(known, key=SEVERITIES.index) if known else None


def urgency(tier: str, sev: str | None, alerts: Sequence[str], firing: bool = False) -> str:
    """The urgency as measured, in words: what backs the item."""
    names = ", ".join(alerts)
    if tier == ALERT:
        pages = "pages" if sev == "critical" else "warns"
        held = "fires" if firing else "condition holds now"
        return f"{sev or 'alert'}: {names} {held} ({pages})" if names else f"{sev}: measured"
    if tier == LOOP:
        return f"active, not paging yet: {names} pending (its 'for' not yet passed)"
    return "configuration note: no measured condition backs it"


class Reconcilable(Ranked, Protocol):
    @property
    def title(self) -> str: ...
    @property
    def workers(self) -> tuple[str, ...]: ...
    @property
    def model(self) -> str: ...
    @property
    def actions(self) -> tuple[str, ...]: ...
    @property
    def moves(self) -> tuple[Move, ...]: ...


R = TypeVar("R", bound=Any)


def _same_scope(a: Reconcilable, b: Reconcilable, knob: str) -> bool:
    if knob in MODEL_KNOBS:
        return a.model == b.model
    return bool(set(a.workers) & set(b.workers))


def contradictions(items: Sequence[Reconcilable]) -> list[tuple[int, int, Move, Move]]:
    """Pairs of items (indices) whose moves undo each other on one knob, in one scope."""
    out = []
    for i, a in enumerate(items):
        for j in range(i + 1, len(items)):
            b = items[j]
            for ma in a.moves:
                for mb in b.moves:
                    if opposed(ma, mb) and _same_scope(a, b, ma.knob):
                        out.append((i, j, ma, mb))
    return out


def reconcile(items: Sequence[R], folds: Mapping[str, str] | None = None) -> list[R]:
    """``items`` ranked, with every opposed move settled for the better-ranked item: the
    other loses the opposed actions and says which item it defers to. A configuration
    note that a measured condition opposes is dropped, and its knob's ``folds`` line (the one
    consistent step, e.g. the guide's 0.85 after an FP8 KV cache) is added to the item
    it deferred to."""
    ranked = sorted(items, key=rank_key)
    folds = folds or {}
    changed = True
    while changed:
        changed = False
        for i, j, _keep, drop in contradictions(ranked):
            winner, loser = ranked[i], ranked[j]
            gone = {m.action for m in loser.moves if m.knob == drop.knob and m.way == drop.way}
            actions = tuple(a for a in loser.actions if a not in gone)
            moves = tuple(m for m in loser.moves if m.action not in gone)
            if loser.tier == NOTE:
                fold = folds.get(drop.knob)
                if fold and fold not in winner.actions:
                    ranked[i] = dataclasses.replace(winner, actions=(*winner.actions, fold))
                del ranked[j]
            else:
                word = KNOB_WORDS.get(drop.knob, drop.knob)
                pointer = f'{word[:1].upper()}{word[1:]}: as "{winner.title}" says, above.'
                ranked[j] = dataclasses.replace(loser, actions=(*actions, pointer), moves=moves)
            changed = True
            break
    return ranked
