"""The weekly report's cost section: GPU-hours, money and energy per model, this week and last.

Queried from the agent's raw series with the classification of the cost rules
(``pack.cost.raw_exprs``: the same PromQL on raw inputs, because recording rules
are never evaluated backwards), as a 1-minute subquery summed per day: each
subquery step stands for one minute of a GPU. The subquery range is one
millisecond short of a day so that each minute belongs to one day on
Prometheus 2 (closed ranges) and 3 (left-open ranges) alike.

The three biggest wasters are the models with the most held-idle money (or
GPU-hours without prices); each gets the closed loop of the field guide [6.2]
that fits its week: loop 2 (warm-up) when its TTFT P95 was above
``ttft.warmup_p95_seconds``, loop 3 (KV cache / VRAM) when its KV-cache usage
peaked above ``vram.squeeze_above``, else loop 1 (uneven routing, or fewer GPUs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inferwatch.pack.cost import (
    JOULES_PER_KWH,
    SECONDS_PER_HOUR,
    CostExprs,
    lit,
    price_expr,
    raw_exprs,
)
from inferwatch.pack.names import COST_STATES, GPU, WORKER_STATES
from inferwatch.pack.thresholds import Thresholds, format_duration
from inferwatch.report.model import DAY, Change, Daily, Period
from inferwatch.report.promapi import PrometheusClient
from inferwatch.report.query import Collector

STEP = 60
#: field guide [6.2] loop ids and names (pack/loops.py owns the wording once merged)
LOOPS = {1: "uneven routing", 2: "warm-up", 3: "KV cache and VRAM"}
LOOP_ACTIONS = {
    1: "route by least connections, or serve the model on fewer GPUs",
    2: "warm the worker up before it takes traffic",
    3: "enable prefix caching or an FP8 KV cache and pack more on each GPU",
}
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
    ttft_p95: dict[str, float]
    kv_peak: dict[str, float]


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
    power = f"max by ({GPU}) (rate(inferwatch_gpu_energy_joules_total[{t.pack.window}]))"
    out["kwh"] = (
        f"sum by (model) ({_per_day(e.worker_from_pairs(e.share(power)), JOULES_PER_KWH)})\n"
        f"or\nsum by (uuid) ({_per_day(power, JOULES_PER_KWH)})\n"
        f"or\nsum({_per_day(power, JOULES_PER_KWH)})"
    )
    out["tokens"] = "sum by (model) (increase(inferwatch_generation_tokens_total[1d]))"
    return out


def collect_cost(client: PrometheusClient, period: Period, t: Thresholds) -> RawCost:
    c = Collector(client, period)
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
    week = format_duration(period.days * DAY)
    ttft = {
        s.labels.get("model", ""): s.value
        for s in client.instant(
            "histogram_quantile(0.95, sum by (model, le) "
            f"(increase(inferwatch_ttft_seconds_bucket[{week}])))",
            period.end,
        )
    }
    kv = {
        s.labels.get("model", ""): s.value
        for s in client.instant(
            f"max by (model) (max_over_time(inferwatch_kv_cache_usage_ratio[{week}]))", period.end
        )
    }
    return RawCost(
        t.pricing.currency if t.pricing.enabled else None,
        hours,
        money,
        tokens,
        kwh,
        gpu_kwh,
        ttft,
        kv,
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
    loop: int
    reason: str

    @property
    def loop_name(self) -> str:
        return LOOPS[self.loop]

    @property
    def action(self) -> str:
        return LOOP_ACTIONS[self.loop]


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


def _loop(model: str, raw: RawCost, t: Thresholds) -> tuple[int, str]:
    p95 = raw.ttft_p95.get(model)
    if p95 is not None and p95 == p95 and p95 > t.ttft.warmup_p95_seconds:
        return 2, f"TTFT P95 {p95:.2g} s over the week with GPUs held idle"
    kv = raw.kv_peak.get(model)
    if kv is not None and kv > t.vram.squeeze_above:
        return 3, f"KV cache peaked at {kv * 100:.0f}% while the GPUs were idle"
    return 1, "GPUs held below the waste threshold with latency fine"


def cost_section(raw: RawCost, period: Period, t: Thresholds) -> CostSection | None:
    """The section's figures; None when no GPU has a utilization series at all."""
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
        loop, reason = _loop(r.model, raw, t)
        wasters.append(Waster(r.model, hrs, money if raw.currency else None, loop, reason))
        if len(wasters) == 3:
            break
    ordered = tuple(served) + tuple(r for r in rows if r.model == UNALLOCATED)
    note = (
        ""
        if served
        else "No GPU ran a worker according to inferwatch_worker_gpu_info, so every GPU-hour "
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
