"""Runbook pages of the SLO burn-rate alerts (``InferenceTTFTBudgetBurn``, ...): the
objectives from ``slos:``, the burn pairs of :mod:`inferwatch.pack.rules.slo`, where to look."""

from __future__ import annotations

from prometheus_client.utils import floatToGoString

from inferwatch.pack import loops as L
from inferwatch.pack.names import SLO_BUDGET_REMAINING, slo_burn_rate
from inferwatch.pack.rules.slo import (
    ALERT_NAMES,
    BURNS,
    TITLES,
    num_text,
    window_name,
    window_seconds,
)
from inferwatch.pack.thresholds import Thresholds


def _objective_lines(t: Thresholds, kind: str) -> str:
    spec = t.slos
    lines = []
    for entry in spec.active:
        o = entry.get(kind)
        if o is None:
            continue
        who = (
            f"`{entry.model}`"
            if entry.model
            else ("every other model" if spec.models else "every model")
        )
        engines = ", ".join(entry.engines)
        good = (
            f"get their first token within {floatToGoString(o.le)} s"
            if kind == "ttft"
            else f"stream at or under {floatToGoString(o.le)} s per output token"
            if kind == "tpot"
            else "finish without an error and are not rejected"
        )
        lines.append(
            f"- {who} ({engines}): {num_text(round(o.objective * 100, 6))}% of requests {good} "
            f"over {window_name(spec.window)}; budget {num_text(round(o.budget * 100, 6))}%"
        )
    return "\n".join(lines)


def page(t: Thresholds, name: str) -> dict[str, str]:
    """The five runbook fields (``runbooks.Page``) of one burn-rate alert."""
    kind = next(k for k, v in ALERT_NAMES.items() if v == name)
    title = TITLES[kind]
    budget = window_name(t.slos.window)
    sel = '{model="MODEL",slo="' + kind + '"}'
    burns = "\n".join(
        f"| {b.severity} | {num_text(b.factor)}x | {b.long} | {b.short} | "
        f"{num_text(round(b.factor * window_seconds(b.long) / t.slos.window * 100, 2))}% |"
        for b in BURNS
    )
    cause = {
        "ttft": (
            "A first token later than 2 s breaks a conversation [1.2]. Slow first tokens "
            "come from queueing (more requests waiting than the batch holds: scale out or "
            "rate-limit before latency suffers [6 FAQ]), slow prefill (long prompts, no "
            "prefix caching) or cold workers (an unwarmed first call takes seconds [5.2])."
        ),
        "tpot": (
            "Slow streaming comes from batches too large for the card, KV-cache preemptions "
            "(the KV cache is the real VRAM bottleneck [4.2]) or a GPU slowed by heat or "
            "power."
        ),
        "availability": (
            "Failed requests come from engine errors (out of memory, bad inputs) and "
            "admission rejections (HTTP 503 when the queue limit is hit): an overload the "
            "queue shows first [6 FAQ]."
        ),
    }[kind]
    related = {
        "ttft": "InferenceQueueOverCapacity, InferenceTTFTSLOBreach, InferenceWorkerColdStart",
        "tpot": "InferenceTPOTSLOBreach, InferenceKVCachePreemptions, "
        "InferenceGPUThermalThrottling",
        "availability": "InferenceRequestErrors, InferenceWorkerDown, InferenceQueueOverCapacity",
    }[kind]
    return {
        "condition": (
            f"a model's {title} SLI has missed its objective fast enough to spend the "
            f"{budget} error budget early, over a long and a short window at once"
        ),
        "meaning": (
            f"The {title} SLO counts the share of requests that met it (objectives from "
            "`slos:` in the thresholds):\n\n"
            + _objective_lines(t, kind)
            + "\n\nThe burn rate is the share of bad requests divided by the budget: at 1 "
            f"the budget lasts exactly {budget}. The alert fires when both windows of a "
            "pair burn faster than its factor (the Google SRE workbook's multiwindow, "
            "multi-burn-rate alerts); the label `burn_window` names the long window. A pair "
            f"fires only when its long window holds data: at least {t.slos.min_requests} "
            "requests, and the model's SLI recorded since "
            f"{num_text(t.slos.min_coverage * 100)}% of the long window ago (a fresh "
            "Prometheus or a new model has only minutes in a long window; the queue and P99 "
            "alerts speak for those first minutes).\n\n"
            "| severity | burn rate | long window | short window | budget spent when it fires |\n"
            "|---|---|---|---|---|\n" + burns
        ),
        "impact": (
            "The tail is what users feel [6.1], and a budget counts every request in it. "
            "A page means users are feeling it now and, at this pace, the whole budget is "
            "gone within days; a ticket means the month's budget will run out before the "
            f"month does. {cause}"
        ),
        "diagnosis": (
            "1. Open the **Inference overview** dashboard's **SLOs and error budgets** row: "
            "which model, which objective, and whether the burn started at a deploy, a "
            "traffic peak or a restart.\n"
            "2. Compare the windows; a short window well above the long one is a fresh "
            "incident, the reverse a slow leak:\n\n"
            + "\n\n".join(
                f"   ```promql\n   {query}\n   ```"
                for query in (
                    *(
                        f"{slo_burn_rate(w)}{sel}"
                        for w in dict.fromkeys(x for b in BURNS for x in (b.long, b.short))
                    ),
                    f"{SLO_BUDGET_REMAINING}{sel}",
                )
            )
            + "\n\n"
            "3. Find the worker: the per-worker alerts that explain it are " + related + "."
        ),
        "mitigation": (
            "- Fix the cause the per-worker alerts name: scale out on a queue over capacity "
            "(the autoscaling rules in docs/deploy.md do it on the same signal), warm up cold "
            "workers, roll back a bad deploy.\n"
            + {
                "ttft": "- Long shared prompts: `--enable-prefix-caching`; very long steps: a "
                "smaller `--max-num-batched-tokens`.\n",
                "tpot": "- Batches too large for the card: lower `--max-num-seqs`; preemptions: "
                "more room in the KV cache (`--kv-cache-dtype fp8`).\n",
                "availability": "- Rejections: more replicas, or a longer queue limit at the "
                f"gateway; OOM errors: `--gpu-memory-utilization {L.GPU_MEMORY_UTILIZATION_HEADROOM}` "
                "and a bounded "
                "`--max-model-len`.\n",
            }[kind]
            + "- While the budget is low, slow down risky changes: the budget is what pays for "
            "deploys and experiments.\n"
            "- An objective that pages every week is too strict for the hardware: change "
            "`slos:` in your thresholds file (a latency threshold must be one of the "
            "engine's bucket boundaries; `inferwatch generate` names the nearest ones) and "
            "regenerate. To keep only the P99 threshold alerts, set `slos.enabled: false`."
        ),
    }
