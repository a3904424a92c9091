"""The weekly report's cost section: GPU-hours, money and energy per model, this week and last.

Queried from the agent's raw series with the classification of the cost rules
(``pack.rules.cost.raw_exprs``: the same PromQL on raw inputs, because recording rules
are never evaluated backwards), as a 1-minute subquery summed per day: each
subquery step stands for one minute of a GPU. The subquery range is one
millisecond short of a day so that each minute belongs to one day on
Prometheus 2 (closed ranges) and 3 (left-open ranges) alike.

The three biggest wasters are the models with the most held-idle money (or
GPU-hours without prices); each gets the loop of :mod:`inferwatch.pack.loops`
that the report's findings hold for that model this week (the same conditions
as the alerts, ``advise`` and the "what to look at" list, never a figure of its
own), each by its name: low utilization with normal latency (uneven routing) first,
since it explains idle GPUs directly, then the queue over capacity (at the peaks:
scale with the load), a slow first token on an idle GPU (warm-up, cold start), VRAM
near the limit (KV cache and VRAM), else GPU waste (consolidation: fewer or shared GPUs).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from inferwatch.engines import contract
from inferwatch.pack import loops as L
from inferwatch.pack import signals
from inferwatch.pack.names import COST_STATES, GPU, WORKER_STATES
from inferwatch.pack.rules.cost import (
    JOULES_PER_KWH,
    SECONDS_PER_HOUR,
    CostExprs,
    lit,
    price_expr,
    raw_exprs,
)
from inferwatch.pack.thresholds import Thresholds, format_duration
from inferwatch.report.model import DAY, Change, Daily, Period
from inferwatch.report.promapi import PrometheusClient
from inferwatch.report.query import Collector

STEP = 60
#: the pack.loops ids that can name a waster's loop, first match wins: (id, short name,
#: what to do about the idle GPU-hours)
WASTER_LOOPS: tuple[tuple[str, str, str], ...] = (
    ("imbalance", "uneven routing", "route by least connections; do not scale in before"),
    (
        "over_capacity",
        "over capacity",
        "scale with the load: out on the queue at the peaks, in when it is quiet",
    ),
    ("cold_start", "warm-up", "warm the worker up before it takes traffic"),
    ("warmup", "warm-up", "enable prefix caching and cache the system prompts"),
    (
        "memory",
        "KV cache and VRAM",
        "enable prefix caching or an FP8 KV cache and pack more on each GPU",
    ),
    (
        "preemptions",
        "KV cache and VRAM",
        "give the KV pool room (FP8 KV cache, fewer sequences), then pack more on each GPU",
    ),
)
CONSOLIDATE = ("consolidate", "consolidation", "serve the model on fewer GPUs, or share them")
UNALLOCATED = ""  # the model key of GPUs with no worker


@dataclass(frozen=True)
class RawCost:
    currency: str | None
    #: (model, state) -> daily GPU-hours over both periods; model "" = unallocated
    hours: dict[tuple[str, str], Daily]
    #: (model, state) -> daily money; empty without prices
    money: dict[tuple[str, str], Daily]
    tokens: dict[str, Daily]
    kwh: dict[str, Daily]  # model -> daily kWh; "" = every GPU
    gpu_kwh: dict[str, Daily]  # GPU uuid -> daily kWh


def _range() -> str:
    return format_duration(DAY - 0.001)


def _per_day(expr: str, scale: float) -> str:
    return f"sum_over_time(({expr})[{_range()}:{STEP}s]) * {lit(STEP / scale)}"


def _state(expr: str, state: str) -> str:
    return f'label_replace({expr}, "state", "{state}", "", "")'


def queries(t: Thresholds, e: CostExprs | None = None) -> dict[str, str]:
    """The cost section's daily queries (evaluated at each day's end)."""
    e = e or raw_exprs(t)
    price = price_expr(t.pricing, "")
    out: dict[str, str] = {}
    hours = [
        _state(
            f"sum by (model) ({_per_day(e.worker_from_pairs(e.share(e.gpu_state(s))), SECONDS_PER_HOUR)})",
            s,
        )
        for s in WORKER_STATES
    ]
    hours.append(
        _state(f"sum({_per_day(e.gpu_state('unallocated'), SECONDS_PER_HOUR)})", "unallocated")
    )
    out["hours"] = "\nor\n".join(hours)
    if price is not None:
        money = [
            _state(
                "sum by (model) ("
                + _per_day(
                    e.worker_from_pairs(
                        f"{e.share(e.gpu_state(s))} * on ({GPU}) group_left (currency) ({price})",
                        "currency",
                    ),
                    SECONDS_PER_HOUR,
                )
                + ")",
                s,
            )
            for s in WORKER_STATES
        ]
        money.append(
            _state(
                "sum("
                + _per_day(
                    f"{e.gpu_state('unallocated')} * on ({GPU}) group_left (currency) ({price})",
                    SECONDS_PER_HOUR,
                )
                + ")",
                "unallocated",
            )
        )
        out["money"] = "\nor\n".join(money)
    power = signals.GPU_POWER.render(window=t.pack.window, by=GPU)
    out["kwh"] = (
        f"sum by (model) ({_per_day(e.worker_from_pairs(e.share(power)), JOULES_PER_KWH)})\n"
        f"or\nsum by (uuid) ({_per_day(power, JOULES_PER_KWH)})\n"
        f"or\nsum({_per_day(power, JOULES_PER_KWH)})"
    )
    out["tokens"] = signals.GENERATION_TOKENS.render(window="1d", by="model")
    return out


def collect_cost(client: PrometheusClient, period: Period, t: Thresholds) -> RawCost:
    c = Collector(client, period, t)
    q = queries(t)
    hours = {(k[0], k[1]): v for k, v in c.daily_by(q["hours"], ("model", "state")).items()}
    money = (
        {(k[0], k[1]): v for k, v in c.daily_by(q["money"], ("model", "state")).items()}
        if "money" in q
        else {}
    )
    energy = c.daily_by(q["kwh"], ("model", "uuid"))
    kwh = {k[0]: v for k, v in energy.items() if not k[1]}
    gpu_kwh = {k[1]: v for k, v in energy.items() if k[1]}
    tokens = {k[0]: v for k, v in c.daily_by(q["tokens"], ("model",)).items()}
    return RawCost(
        t.pricing.currency if t.pricing.enabled else None, hours, money, tokens, kwh, gpu_kwh
    )


# --------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class ModelCost:
    model: str  # "" = unallocated GPUs
    hours: dict[str, Change]  # state -> GPU-hours
    money: dict[str, Change]  # state -> money; empty without prices
    tokens: Change
    kwh: Change

    def _spent(self, what: dict[str, Change], period: str) -> float | None:
        values = [getattr(what[s], period) for s in WORKER_STATES if s in what]
        present = [v for v in values if v is not None]
        return sum(present) if present else None

    @property
    def per_million_tokens(self) -> Change:
        """Money (or GPU-hours without prices) per million generated tokens."""
        what = self.money or self.hours

        def one(period: str) -> float | None:
            spent = self._spent(what, period)
            toks = getattr(self.tokens, period)
            if spent is None or not toks:
                return None
            return spent / toks * 1e6

        return Change(one("current"), one("previous"))

    @property
    def joules_per_token(self) -> Change:
        def one(period: str) -> float | None:
            kwh = getattr(self.kwh, period)
            toks = getattr(self.tokens, period)
            return kwh * JOULES_PER_KWH / toks if kwh is not None and toks else None

        return Change(one("current"), one("previous"))


@dataclass(frozen=True)
class Waster:
    model: str
    idle_hours: float
    idle_money: float | None
    #: the pack.loops id
    loop_id: str
    reason: str
    loop_name: str
    action: str

    @property
    def loop(self) -> str:
        """The loop's name (pack.loops): one of the guide's three, or a further condition."""
        return L.BY_ID[self.loop_id].name

    @property
    def loop_text(self) -> str:
        """``Slow first token on an idle GPU (warm-up)``: the loop by its name."""
        return f"{self.loop} ({self.loop_name})"


@dataclass(frozen=True)
class CostSection:
    currency: str | None
    models: tuple[ModelCost, ...]  # models by held-idle money/hours, unallocated last
    total: ModelCost
    wasters: tuple[Waster, ...]
    daily_hours: dict[tuple[str, str], Daily] = field(default_factory=dict)
    daily_money: dict[tuple[str, str], Daily] = field(default_factory=dict)
    daily_kwh: dict[str, Daily] = field(default_factory=dict)
    daily_gpu_kwh: dict[str, Daily] = field(default_factory=dict)
    note: str = ""

    @property
    def priced(self) -> bool:
        return self.currency is not None


def _sum(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _change(period: Period, daily: Daily | None) -> Change:
    if daily is None:
        return Change(None, None)
    return Change(_sum(period.current(daily)), _sum(period.previous(daily)))


def _loop(held: Collection[str]) -> tuple[str, str, str, str]:
    """(loop id, reason, short name, action) of a waster whose model holds ``held``."""
    for loop_id, name, action in WASTER_LOOPS:
        if loop_id in held:
            title = L.BY_ID[loop_id].title
            reason = title if title[:2].isupper() else title[:1].lower() + title[1:]
            return loop_id, reason, name, action
    loop_id, name, action = CONSOLIDATE
    others = sorted(set(held) - {loop_id})
    reason = (
        f"no loop that explains idle GPUs held this week ({', '.join(others)} did)"
        if others
        else "no loop held this week: the GPUs were simply more than the traffic needed"
    )
    return loop_id, reason, name, action


def cost_section(
    raw: RawCost,
    period: Period,
    t: Thresholds,
    loops: Mapping[str, Collection[str]] | None = None,
) -> CostSection | None:
    """The section's figures; None when no GPU has a utilization series at all.

    ``loops``: model -> the pack.loops ids the report's findings hold for it this week
    (``insights.loops_by_model``); a model without an entry holds none."""
    loops = loops or {}
    if not raw.hours:
        return None
    models = sorted({m for m, _ in raw.hours} | {m for m, _ in raw.money})
    rows = []
    for m in models:
        states = ("unallocated",) if m == UNALLOCATED else WORKER_STATES
        rows.append(
            ModelCost(
                model=m,
                hours={s: _change(period, raw.hours.get((m, s))) for s in states},
                money=(
                    {s: _change(period, raw.money.get((m, s))) for s in states}
                    if raw.currency
                    else {}
                ),
                tokens=_change(period, raw.tokens.get(m)) if m else Change(None, None),
                kwh=_change(period, raw.kwh.get(m)) if m else Change(None, None),
            )
        )

    def total_of(what: str, state: str) -> Change:
        parts = [getattr(r, what).get(state) for r in rows]
        cur = _sum([p.current for p in parts if p is not None])
        prev = _sum([p.previous for p in parts if p is not None])
        return Change(cur, prev)

    total = ModelCost(
        model="all",
        hours={s: total_of("hours", s) for s in COST_STATES},
        money={s: total_of("money", s) for s in COST_STATES} if raw.currency else {},
        tokens=Change(
            _sum([r.tokens.current for r in rows]), _sum([r.tokens.previous for r in rows])
        ),
        kwh=_change(period, raw.kwh.get("")),
    )

    def idle(r: ModelCost) -> tuple[float, float]:
        h = r.hours.get("held_idle")
        mo = r.money.get("held_idle")
        return ((mo.current or 0.0) if mo else 0.0, (h.current or 0.0) if h else 0.0)

    served = [r for r in rows if r.model != UNALLOCATED]
    served.sort(key=lambda r: (-idle(r)[0], -idle(r)[1], r.model))
    wasters = []
    for r in served:
        money, hrs = idle(r)
        if hrs <= 0:
            continue
        loop_id, reason, name, action = _loop(loops.get(r.model, ()))
        wasters.append(
            Waster(r.model, hrs, money if raw.currency else None, loop_id, reason, name, action)
        )
        if len(wasters) == 3:
            break
    ordered = tuple(served) + tuple(r for r in rows if r.model == UNALLOCATED)
    note = (
        ""
        if served
        else f"No GPU ran a worker according to {contract.WORKER_GPU_INFO}, so every GPU-hour "
        "counts as unallocated: check the agents' attribution (docs/attribution.md)."
    )
    return CostSection(
        raw.currency,
        ordered,
        total,
        tuple(wasters),
        raw.hours,
        raw.money,
        raw.kwh,
        raw.gpu_kwh,
        note,
    )
