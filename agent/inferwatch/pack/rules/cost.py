"""Where the GPU-hours go: the cost recording rules and the PromQL behind them.

Every GPU (or MIG device) is, at each rule evaluation, in exactly one state:

``serving``      a worker runs on it (``inferwatch_worker_gpu_info``) and its smoothed
                 utilization is not past the consolidate loop's line (``pack.loops.WASTE``)
``held_idle``    a worker runs on it and its utilization is past that line (below it)
``unallocated``  no worker runs on it

``gpu:inferwatch_gpus:by_state`` is 1 for the GPU's state and 0 for the other two,
so summing it over time counts GPU-hours (``hours()``). A GPU shared by ``n``
workers counts ``1/n`` for each of them, so the worker, model and cluster
roll-ups add up to the GPUs once; a worker that serves two models splits its
share between them the same way. With prices (``pricing:``, see
``pack.pricing``) the same roll-ups exist in money per hour (label ``currency``).
Energy comes from NVML's energy counter: watts per GPU, split like the GPUs.

The state, share and price expressions are built by :class:`CostExprs` from
their inputs, so the recording rules (inputs: other recording rules) and the
weekly report (inputs: the agent's raw series, because rules are never
evaluated backwards) classify a GPU-hour the same way.

The rules live in their own group (``inferwatch-cost.rules``), which reads the
main group's records; Prometheus evaluates groups independently, so the cost
rules trail the main ones by at most one evaluation interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inferwatch.engines import contract
from inferwatch.pack import loops as L
from inferwatch.pack import signals
from inferwatch.pack.fmt import lit
from inferwatch.pack.names import (
    CLUSTER,
    COST_STATES,
    GPU,
    MODEL,
    WORKER,
    WORKER_GPU,
    WORKER_KEY,
    WORKER_STATES,
    cost_names,
    names,
)
from inferwatch.pack.pricing import Pricing
from inferwatch.pack.rules.common import record
from inferwatch.pack.thresholds import Thresholds

GROUP = "inferwatch-cost.rules"
SECONDS_PER_HOUR = 3600.0
JOULES_PER_KWH = 3.6e6


def promql_string(text: str) -> str:
    """``text`` as a double-quoted PromQL string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def price_expr(pricing: Pricing, selector: str) -> str | None:
    """Price per GPU-hour per GPU (labels job, instance, gpu, uuid, currency); first match wins.

    ``selector`` is the agent selector without braces ("" in the report). None
    without prices.
    """
    if not pricing.enabled:
        return None
    branches = []
    for p in pricing.prices:
        if p.gpu_name is not None:
            matcher = f"name=~{promql_string(p.gpu_name)}"
        else:
            assert p.instance_type is not None
            matcher = f"{pricing.instance_type_label}={promql_string(p.instance_type)}"
        sel = "{" + ", ".join(m for m in (selector, matcher) if m) + "}"
        branches.append(f"  0 * max by ({GPU}) ({contract.GPU_INFO}{sel}) + {lit(p.per_gpu_hour)}")
    body = f"\nor on ({GPU})\n".join(branches)
    return f'label_replace(\n{body},\n  "currency", "{pricing.currency}", "", ""\n)'


@dataclass(frozen=True)
class CostExprs:
    """The state, share and price expressions over a given set of inputs.

    util:          smoothed utilization per GPU (labels job, instance, gpu, uuid)
    attribution:   1 per (worker, GPU) pair (labels job, instance, worker, gpu, uuid)
    worker_labels: 1 per (worker, model, engine) (labels job, instance, worker, model, engine)
    waste:         the waste line's number (``pack.loops.WASTE``)
    """

    util: str
    attribution: str
    worker_labels: str
    waste: float

    @property
    def _allocated(self) -> str:
        return f"group by ({GPU}) ({self.attribution})"

    def gpu_state(self, state: str) -> str:
        """1 where the GPU is in ``state``, 0 where it is in another (labels of a GPU)."""
        u = f"({self.util})"
        w = lit(self.waste)
        zero = f"0 * {u}"
        if state == "serving":
            hit = f"({u} >= bool {w}) and on ({GPU}) {self._allocated}"
        elif state == "held_idle":
            hit = f"({u} < bool {w}) and on ({GPU}) {self._allocated}"
        elif state == "unallocated":
            hit = f"({zero} + 1) unless on ({GPU}) {self._allocated}"
        else:
            raise ValueError(f"unknown state {state}")
        return f"(\n  ({hit})\n  or on ({GPU})\n  {zero}\n)"

    def labelled(self, state: str, expr: str) -> str:
        return f'label_replace(\n{expr},\n"state", "{state}", "", ""\n)'

    def gpu_states(self) -> str:
        return "\nor\n".join(self.labelled(s, self.gpu_state(s)) for s in COST_STATES)

    def share(self, per_gpu: str) -> str:
        """``per_gpu`` (labels of a GPU) split evenly over the workers on the GPU
        (labels job, instance, worker, gpu, uuid)."""
        a = self.attribution
        return (
            f"(\n  {a}\n  * on ({GPU}) group_left ()\n  ({per_gpu})\n"
            f"  / on ({GPU}) group_left ()\n  count by ({GPU}) ({a})\n)"
        )

    def per_worker(self, per_worker_key: str, keep: str = "") -> str:
        """A per-worker value (labels job, instance, worker[, keep]) given the worker's
        model and engine labels; a worker serving two models splits it between them."""
        wl = self.worker_labels
        split = f"({wl}\n  / on ({WORKER_KEY}) group_left ()\n  count by ({WORKER_KEY}) ({wl}))"
        return f"{split}\n* on ({WORKER_KEY}) group_left ({keep})\n({per_worker_key})"

    def worker_from_pairs(self, pairs: str, keep: str = "") -> str:
        """Sum a (worker, GPU) series per worker, then give it model and engine."""
        by = f"{WORKER_KEY}, {keep}" if keep else WORKER_KEY
        return self.per_worker(f"sum by ({by}) ({pairs})", keep)

    def each_worker_state(self, series: str, step: Callable[[str], str]) -> str:
        """``step`` applied to ``series`` of each worker state apart, the state put back."""
        return "\nor\n".join(
            self.labelled(st, step(f'{series}{{state="{st}"}}')) for st in WORKER_STATES
        )


def rule_exprs(t: Thresholds) -> CostExprs:
    """The inputs of the recording rules: the main group's records."""
    n = names(t)
    return CostExprs(
        util=n.gpu_util,
        attribution=n.worker_gpu,
        worker_labels=n.worker_labels,
        waste=L.WASTE.of(t),
    )


def raw_util_expr(t: Thresholds, selector: str = "") -> str:
    """The main group's ``gpu:...:avg5m`` expression on the raw gauges (for the report).

    It must stay the same PromQL as the rule (``tests/unit/test_cost.py`` compares them):
    utilization averaged over ``pack.rate_window``, or GPM SM activity on a MIG device.
    """
    return signals.gpu_utilization(selector="{" + selector + "}", window=t.pack.window, by=GPU)


def raw_exprs(t: Thresholds, selector: str = "") -> CostExprs:
    """The same classification on the agent's raw series, for queries over past weeks."""
    sel = "{" + selector + "}"
    return CostExprs(
        util=raw_util_expr(t, selector),
        attribution=f"max by ({WORKER_GPU}) ({contract.WORKER_GPU_INFO}{sel})",
        worker_labels=(
            f"group by ({WORKER}) ({contract.QUEUE_DEPTH}{sel} or {contract.REQUESTS_RUNNING}{sel})"
        ),
        waste=L.WASTE.of(t),
    )


def hours(expr: str, range_: str, interval_seconds: float, offset: str = "") -> str:
    """GPU-hours (or money, for a per-hour series) of a recorded 0..1 series over ``range_``.

    Each evaluation of the rule stands for one interval of time.
    """
    off = f" offset {offset}" if offset else ""
    return f"sum_over_time({expr}[{range_}]{off}) * {lit(interval_seconds / SECONDS_PER_HOUR)}"


# --------------------------------------------------------------------------- rules


def _priced(gpu_hours: str, price: str) -> str:
    """A GPU's hours (per state) times its price per hour, in the price's currency."""
    return f"{gpu_hours}\n* on ({GPU}) group_left (currency)\n{price}"


def _per_mtok(per_model: str, tokens: str, keep: str = "") -> str:
    """A model's hourly ``per_model`` (GPU-hours or cost, summed over states and kept
    ``keep`` labels) over its tokens per second: per million tokens."""
    by = f"{MODEL}, {keep}" if keep else MODEL
    join = " group_left ()" if keep else ""
    return (
        f"sum by ({by}) ({per_model})\n/ on ({MODEL}){join}\n({tokens} > 0)\n"
        f"* {lit(1e6 / SECONDS_PER_HOUR)}"
    )


def recording_rules(t: Thresholds) -> list[dict[str, Any]]:
    """The cost group's rules, each after the rules it reads."""
    n = names(t)
    c = cost_names(t)
    e = rule_exprs(t)
    s = t.pack.selector()
    rules: list[dict[str, Any]] = [record(c.gpu_states, e.gpu_states())]
    rules.append(
        record(
            c.worker_gpu_states,
            e.each_worker_state(c.gpu_states, e.share),
        )
    )
    rules.append(
        record(
            c.worker_states,
            e.each_worker_state(c.worker_gpu_states, e.worker_from_pairs),
        )
    )
    rules.append(record(c.model_states, f"sum by ({MODEL}, state) ({c.worker_states})"))
    rules.append(record(c.cluster_states, f"sum by ({CLUSTER}, state) ({c.gpu_states})"))

    rules.append(record(c.model_tokens, f"sum by ({MODEL}) ({n.rate('generation_tokens')})"))
    rules.append(
        record(
            c.model_gpu_hours_per_mtok,
            _per_mtok(c.model_states, c.model_tokens),
        )
    )

    price = price_expr(t.pricing, t.pack.agent_selector)
    if price is not None:
        rules.append(record(c.gpu_price, price))
        rules.append(record(c.gpu_cost, _priced(c.gpu_states, c.gpu_price)))
        rules.append(
            record(
                c.worker_gpu_cost,
                _priced(c.worker_gpu_states, c.gpu_price),
            )
        )
        rules.append(
            record(
                c.worker_cost,
                e.each_worker_state(
                    c.worker_gpu_cost, lambda pairs: e.worker_from_pairs(pairs, "currency")
                ),
            )
        )
        rules.append(record(c.model_cost, f"sum by ({MODEL}, state, currency) ({c.worker_cost})"))
        rules.append(record(c.cluster_cost, f"sum by ({CLUSTER}, state, currency) ({c.gpu_cost})"))
        rules.append(
            record(
                c.model_cost_per_mtok,
                _per_mtok(c.model_cost, c.model_tokens, "currency"),
            )
        )

    power = signals.GPU_POWER.render(selector=s, window=t.pack.window, by=GPU)
    rules.append(record(c.gpu_power, power))
    rules.append(record(c.worker_power, e.worker_from_pairs(e.share(c.gpu_power))))
    rules.append(record(c.model_power, f"sum by ({MODEL}) ({c.worker_power})"))
    rules.append(record(c.cluster_power, f"sum by ({CLUSTER}) ({c.gpu_power})"))
    rules.append(
        record(c.model_energy_per_token, f"{c.model_power}\n/ on ({MODEL})\n({c.model_tokens} > 0)")
    )
    return rules


def recording_group(t: Thresholds) -> dict[str, Any]:
    return {"name": GROUP, "interval": t.pack.interval, "rules": recording_rules(t)}
