"""Runbooks: one Markdown page per alert, generated so their numbers follow the thresholds.

``generate(t)`` returns ``runbooks/<AlertName>.md`` for every alert of
:func:`inferwatch.pack.rules.alerts`. Each page has the prometheus-operator runbook
sections (Meaning, Impact, Diagnosis, Mitigation) under a header that repeats the
alert's severity, condition, dashboard and query, and is written for an on-call
engineer who has never run vLLM: which panel to open, which PromQL to paste,
which ``vllm serve`` flag or deployment change helps.

Numbers come from ``Thresholds`` (never typed into the text); the remedies the
closed loops share with ``inferwatch advise`` and the weekly report (their
flags, numbers and sentences) come from :mod:`inferwatch.pack.loops`, and each
page of a loop's alert names that loop. The field guide's own figures are cited
by section ([4.2] = section 四, part 2 of
shared/reference/000_1608bd3c8c368d9e.txt). To edit a page, edit its function
here and run ``inferwatch generate``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from inferwatch.pack import loops as L
from inferwatch.pack import names as an
from inferwatch.pack import slo
from inferwatch.pack.names import Names, names
from inferwatch.pack.rules import Alert, alerts, dur, num, pct, secs
from inferwatch.pack.thresholds import Thresholds

RUNBOOK_DIR = "runbooks"

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


def _range(pair: tuple[float, float]) -> str:
    return f"{pair[0]:g}-{pair[1]:g}"


def _pct_range(pair: tuple[float, float]) -> str:
    return f"{pair[0]:.0%}-{pair[1]:.0%}"


#: [5.2]: the unwarmed first call against a warm one, as the pages quote it
_COLD_VS_WARM = (
    f"about {L.WARM_CALL_SECONDS * 1000:.0f} ms instead of {L.COLD_FIRST_CALL_SECONDS:g} s"
)


_FP8_ALREADY = ", ".join(f"`{d}`" for d in L.FP8_DTYPES)
#: the worker_info matcher of an FP8 KV cache (``L.is_fp8``: the dtype starts with fp8)
_FP8_MATCHER = 'kv_cache_dtype=~"fp8.*"'

_FLAGS_WHERE = (
    "Where the flags live: vLLM's settings are command-line flags of `vllm serve` (or of "
    "`python -m vllm.entrypoints.openai.api_server`): in Kubernetes they are the container "
    "`args`, under systemd the `ExecStart=` line. The **Inference worker** dashboard's "
    "**Launch flags** table shows what each worker runs with now."
)

_MAX_NUM_SEQS_ESTIMATE = (
    "Size `--max-num-seqs` with the guide's estimate [2.3]: (GPU memory in GB × 0.8 − model "
    "weights in GB) ÷ KV cache per sequence in GB. Example: a 24 GB A10 serving a 7B model "
    "quantized to INT8 (8 GB) with about 0.5 GB of KV cache per sequence gives "
    "(24 × 0.8 − 8) ÷ 0.5 ≈ 22; run 20 to keep a margin. Then load-test at the same "
    "concurrency and watch P50/P99 and the VRAM level [2.3]."
)


def _kv_remedies(c: Ctx, *, pool_first: bool) -> str:
    """The KV-cache remedies of loop 3, facts from pack.loops.

    ``pool_first``: preemptions (a bigger KV pool first); else memory pressure with a
    rising queue (fewer sequences first, the guide's order [5.1]).
    """
    t = c.t
    worker = c.only("instance", "worker")
    oom = (
        "- **Out-of-memory risk first.** Before you touch the flag, read the card's used "
        "ratio and the worker's restarts:"
        + promql(
            "inferwatch_gpu_memory_used_ratio" + c.only("instance"),
            f"changes(inferwatch_worker_start_time_seconds{worker}[1h])",
            indent=2,
        )
        + f"  The card at or above {L.OOM_RISK_USED_RATIO:.0%} used with prefix caching "
        "on (the **Launch flags** table), or a restart whose reason says out of memory "
        "(`kubectl describe pod` shows `OOMKilled`, the log `CUDA out of memory`), is the "
        f"guide's OOM case. {cite(md(L.oom_headroom()), '2.3', '6.2')}\n"
    )
    pool = (
        f"- {cite(md(L.raise_kv_pool()), '4.2', '6.2')} `--gpu-memory-utilization` is the share of the card vLLM "
        "reserves at start, and the KV cache gets what is left after the weights, so a lower "
        "value means a smaller KV cache and more preemptions. `nvidia-smi` shows the room "
        "left on the card; lower the flag (to "
        f"{L.GPU_MEMORY_UTILIZATION_HEADROOM:g} [2.3, 6.2]) only when the process itself dies "
        "of out-of-memory (InferenceWorkerDown) or the card is at the OOM risk above."
    )
    seqs = (
        f"- {cite(md(L.fewer_seqs()), '5.1')} Compare the running batch with the limit first:"
        + promql(
            f"inferwatch_requests_running{worker}",
            f"inferwatch_max_num_seqs{worker}",
            indent=2,
        )
        + f"  With VRAM above {pct(t.vram.scale_above)} and the batch at the limit, lower "
        "`--max-num-seqs` before you consider turning prefix caching off [5.1]. "
        + _MAX_NUM_SEQS_ESTIMATE
    )
    rest = (
        f"- Turn on `--enable-prefix-caching`. {cite(md(L.PREFIX_CACHING), '6.2')}\n"
        f"- {cite(md(L.FP8_KV), '6.2')} Skip this where the worker's KV cache is FP8 already: its "
        f"`kv_cache_dtype` (the **Launch flags** table) is one of {_FP8_ALREADY}. This query "
        "returns the worker only when it is:"
        + promql(
            "inferwatch_worker_info" + c.only("instance", "worker", extra=(_FP8_MATCHER,)),
            indent=2,
        )
        + "- Bound the longest request: set `--max-model-len` to what the product needs and "
        "reject over-long inputs at the gateway; one unexpected 10K-token prompt can take the "
        "KV cache a whole batch needed [4 FAQ]."
    )
    first, second = (pool, seqs) if pool_first else (seqs, pool)
    return f"{oom}{first}\n{second}\n{rest}"


_BALANCING = (
    f"- {md(L.LEAST_CONNECTIONS)} Round-robin assumes every request costs the same, while a "
    "2000-token answer takes ten times a 200-token one [5.3].\n"
    f"- {md(L.LONG_CONTEXT_POOL)} Long requests then stop delaying short ones [5.3]."
)

_SCALE_CHOICES = (
    "- Several models on one box: one single-GPU worker per model is the flexible choice, and "
    "an OOM in one does not take the others down [6 FAQ]. Small models can share a card "
    "(two INT8 7B models on one A10, each with its own `--gpu-memory-utilization` share) or "
    "a MIG slice of an A100/H100; the guide saw utilization go from 35% to over 65% with "
    "under 10% more TTFT [2.1, 4.3].\n"
    "- One large model that needs lower latency: tensor parallelism "
    "(`--tensor-parallel-size 2`) splits the weights across cards; it pays off over NVLink "
    "much more than over PCIe [6 FAQ]. Check that a layout fits before you choose it: a "
    "70B model's FP16 weights alone take about 140 GB [4.2], more than 2 × 40 GB, so it needs "
    "quantized weights or more (or larger) cards. `inferwatch advise capacity` computes "
    "weights, KV cache per sequence and the `--max-num-seqs` a card set holds."
)


#: what a page's condition (its header, "Fires when") must say about a series its alert's
#: query reads, so the header cannot drift from the query under it (tests/test_runbooks.py)
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


# --------------------------------------------------------------------------- pages


def _gpu_underutilized(c: Ctx) -> Page:
    g = c.t.gpu_utilization
    a = c.variants[0]
    return Page(
        condition=(
            f"a GPU's utilization, averaged over {c.t.pack.window}, stays below "
            f"{pct(g.waste_below)} for {dur(a.for_seconds)}"
        ),
        meaning=(
            f"The GPU ran kernels less than {pct(g.waste_below)} of the time for "
            f"{dur(a.for_seconds)}. The field guide treats this as a resource-waste reminder "
            "[6.1]: inference GPUs commonly idle at 30-50% without tuning [1]. The healthy "
            f"band configured here is {pct(g.healthy_band[0])}-{pct(g.healthy_band[1])} "
            "(the guide: 70-85% [4], and 60-75% is healthier than 90% or more [6.1])."
        ),
        impact=(
            "No user-visible impact: requests are served. The cost is money, a GPU paid for "
            "and mostly unused. Not urgent; handle it in working hours."
        ),
        diagnosis=(
            f"1. Open {c.panel('gpu', 'GPU utilization', 'GPU state')}: "
            "is the GPU idle all day, or only at night?\n"
            f"2. Open {c.panel('overview', 'Queue depth vs max_num_seqs')}: if other workers "
            "of the same model have queues while this one is empty, requests are not spread "
            "(see InferenceLoadImbalance).\n"
            "3. Compare the workers of one model side by side:"
            + promql(
                c.r(c.n.gpu_util),
                c.on_gpu(c.n.rate("requests_finished")),
                c.on_gpu(c.n.queue_avg),
            )
            + "4. Check the batch capacity of the worker on this GPU (`max_num_seqs` in the "
            "**Launch flags** table): a small value caps how full the GPU can get."
        ),
        mitigation=(
            f"Do not shrink the fleet first [{L.guide('imbalance')}]:\n\n"
            + _BALANCING
            + "\n- Let each worker batch more: continuous batching fills the GPU only with "
            "enough concurrent requests. Start `--max-num-seqs` around 32 and raise it while "
            "load-testing [4.1]; on an A10, going from 8 to 64 concurrent sequences took "
            "utilization from 42% to 94% for 15 ms more P50 [3.3]. "
            + _MAX_NUM_SEQS_ESTIMATE
            + f"\n- If the load really is small, consolidate. {cite(md(L.SHARE_GPU), '2.1', '4.3')}\n"
            "- To silence this alert for a GPU that is idle on purpose (a standby), raise "
            "`gpu_utilization.waste_for` or lower `gpu_utilization.waste_below` in your "
            "thresholds file and regenerate."
        ),
    )


def _gpu_scale_review(c: Ctx) -> Page:
    g = c.t.gpu_utilization
    a = c.variants[0]
    return Page(
        condition=(
            f"a GPU's utilization, averaged over {c.t.pack.window}, stays above "
            f"{pct(g.scale_review_above)} for {dur(a.for_seconds)}"
        ),
        meaning=(
            f"The GPU has been busy more than {pct(g.scale_review_above)} of the time for "
            f"{dur(a.for_seconds)}. The guide calls for a scale-out review at this level "
            "[6.1]: 60-75% is healthier than 90% or more, because the spare time absorbs "
            "bursts; near saturation the queue is already forming and tail latency getting "
            "worse."
        ),
        impact=(
            "Nothing may be wrong yet, but there is little headroom: a 10-20% rise in "
            "traffic makes latency grow non-linearly at this level [6 FAQ]. Expect "
            "InferenceQueueOverCapacity and then the latency alerts if traffic grows."
        ),
        diagnosis=(
            f"1. Open {c.panel('overview', 'Queue depth vs max_num_seqs')} and "
            f"{c.panel('overview', 'TTFT P50 / P95 / P99')}: how far is latency from the "
            "SLO, is the queue growing?\n"
            f"2. Open {c.panel('overview', 'Compute-bound or memory-bound')}: a compute-bound "
            "GPU (high utilization, deep queue) needs more GPUs; a memory-bound one (VRAM near "
            "full, utilization modest) needs KV-cache work first [6.1].\n"
            "3. Headroom left per worker:"
            + promql(
                c.r(c.n.gpu_util),
                c.on_gpu(c.n.quantile("worker", "ttft", "p99")),
                c.on_gpu(c.n.queue_avg),
            )
        ),
        mitigation=(
            "- Do not add concurrency to a GPU that is already this busy: it only moves the "
            "queue into the batch and stretches every request [6 FAQ].\n"
            "- Plan capacity: add workers (replicas) for this model, or a larger instance. "
            "Measure the remaining margin to the SLO rather than asking whether latency is "
            "still acceptable [6 FAQ].\n" + _SCALE_CHOICES + "\n- Quantization (AWQ/GPTQ "
            "INT4) lowers the work per token: on an A10 it took a 7B model from 23 to 62 "
            "tokens/s [3.1].\n"
            "- If this level is intended (batch jobs that should fill the GPU), raise "
            "`gpu_utilization.scale_review_above` for that deployment."
        ),
    )


def _vram_pressure(c: Ctx) -> Page:
    v = c.t.vram
    a = c.variants[0]
    return Page(
        condition=(
            f"a worker's memory pressure on one of its own GPUs (its KV-cache usage where "
            "the engine exports it, else the GPU's memory used ratio, averaged over "
            f"{c.t.pack.window}) is above {pct(v.scale_above)} while that worker's queue "
            f"rises by more than {num(c.t.queue.rising_min_per_minute)} request a minute "
            f"(its slope over {dur(c.t.queue.rising_window)}), for {dur(a.for_seconds)}"
        ),
        meaning=(
            f"The worker's KV cache is above {pct(v.scale_above)} full (for an engine that "
            "does not export its KV-cache usage: the memory of its GPU) and its requests "
            "keep piling up. The label `pressure_from` says which was read. vLLM "
            "keeps each running request's attention state (the KV cache) in GPU memory; when "
            "it runs out, new requests wait and running ones get preempted. The guide's rule "
            f"[4.2]: memory above {pct(v.scale_above)} with a rising queue means scale out or "
            f"rate-limit. Memory above {pct(v.squeeze_above)} on its own is normal for vLLM, "
            "which reserves memory up front: with a TTFT P99 under "
            f"{secs(v.squeeze_p99_ok_seconds)} it is a healthy squeeze that needs nothing, "
            "and the dashboards show it as the **squeeze** state, not an alert."
        ),
        impact=(
            "Latency is about to climb for every user of this worker, and the worker is close "
            "to out-of-memory restarts. This pages because it comes before the latency SLO "
            "breach."
        ),
        diagnosis=(
            f"1. Open {c.panel('gpu', 'VRAM level', 'GPU state')}: a "
            "GPU in state **pressure** (3) is what fired.\n"
            f"2. Open {c.panel('worker', 'Queue trend', 'KV-cache usage', 'Preemptions')} "
            "for the workers on that host.\n"
            "3. Paste:"
            + promql(
                c.r(c.n.worker_gpu_pressure),
                c.n.queue_deriv + c.only("instance", "worker") + " * 60",
                c.n.rate("preemptions") + c.only("instance", "worker"),
                c.r(c.n.gpu_vram).replace(c.sel, c.only("instance", "gpu")),
            )
            + "4. Look for unusually long prompts (a 10K-token input can take what a batch "
            "needed) in the gateway logs [4 FAQ]."
        ),
        mitigation=(
            "Right now:\n\n"
            f"- {md(L.SCALE_OUT)} {cite(md(L.RATE_LIMIT), '4.2')}\n\n"
            "Then, per worker:\n\n" + _kv_remedies(c, pool_first=False) + "\n\n" + _FLAGS_WHERE
        ),
    )


def _gpu_lost(c: Ctx) -> Page:
    a = c.variants[0]
    source = c.s('collector=~"nvml|dcgm"')
    return Page(
        condition=f"the agent reports the GPU as unreadable (`inferwatch_gpu_up == 0`) for "
        f"{dur(a.for_seconds)}",
        meaning=(
            "The agent's GPU source stopped giving readings for this GPU: NVML, the NVIDIA "
            "management library (the default backend), or dcgm-exporter with "
            "`gpu.backend: dcgm-exporter`, which leaves out a GPU DCGM cannot read. Usually the "
            "GPU fell off the bus (XID 79), the driver crashed, or the GPU was reset or removed."
        ),
        impact=(
            "Workers on this GPU are failing or about to. Requests routed to them fail or time "
            "out; expect InferenceWorkerDown next."
        ),
        diagnosis=(
            f"1. Open {c.panel('gpu', 'GPUs up', 'Agent collection errors')}"
            " to see which GPU and why the agent could not read it:"
            + promql(
                f"inferwatch_gpu_up{c.sel} == 0",
                f"increase(inferwatch_collect_errors_total{source}[10m])",
            )
            + "2. On the host:"
            + sh(
                "nvidia-smi                      # does the GPU still show?",
                "sudo dmesg -T | grep -i xid     # XID 79 = fell off the bus",
                "journalctl -k --since -1h | grep -i nvrm",
            )
            + f"3. Check {c.panel('gpu', 'XID errors')} for an XID just before the loss."
        ),
        mitigation=(
            "- Take the host out of the load balancer so no traffic reaches its workers.\n"
            "- If `nvidia-smi` no longer lists the GPU, it needs a reset (`sudo nvidia-smi -r "
            "-i <index>` with no process on it) or, more often, a reboot; on a cloud instance, "
            "stop and start it to land on other hardware.\n"
            "- If it recurs on the same card, open a hardware ticket with the provider, "
            "attaching `nvidia-bug-report.sh` output.\n"
            "- If `nvidia-smi` lists the GPU and it works, the fault is in the reading path: "
            "with the dcgm-exporter backend, look at dcgm-exporter's log and its `/metrics` "
            "for that GPU's UUID; with NVML, read the agent's log for the NVML error, then "
            "restart the agent."
        ),
    )


def _gpu_telemetry_down(c: Ctx) -> Page:
    a = c.variants[0]
    source = c.s('collector=~"nvml|dcgm"')
    return Page(
        condition=(
            "the agent has not finished a pass over its GPU source (NVML, or dcgm-exporter) "
            f"for {dur(c.t.availability.gpu_lost_for)}, "
            "or reports errors from it and has never finished one, for "
            f"{dur(a.for_seconds)}"
        ),
        meaning=(
            "The agent cannot read its GPU source at all. With NVML (the default backend): the "
            "driver is not loaded, the library is missing from the agent's container, or every "
            "call fails. With `gpu.backend: dcgm-exporter`: dcgm-exporter does not answer at "
            "`gpu.dcgm_exporter_url`, answers an error, or lists no GPU. Unlike InferenceGPULost (one GPU stops answering), no GPU series exists "
            "any more, so every GPU alert of this host is silent."
        ),
        impact=(
            "Idle, overloaded, overheating or failing GPUs on this host go unseen: no waste "
            "reminder [6.1], no memory pressure page [4.2], no XID page. The workers may be "
            "fine."
        ),
        diagnosis=(
            "1. See which source fails and why (labels `collector`: `nvml` or `dcgm`; "
            "`reason`: `library_not_found`, `driver_not_loaded`, `timeout` for NVML, "
            "`connect`, `http_status`, `timeout`, `no_gpu_metrics` for dcgm-exporter). "
            "Paste into Prometheus:"
            + promql(f"increase(inferwatch_collect_errors_total{source}[10m])")
            + "2. On the host, does the driver answer?"
            + sh("nvidia-smi")
            + "3. Read the agent's log for the line that names the error:"
            + sh(
                "journalctl -u inferwatch --since -1h | grep -iE 'nvml|dcgm'    # systemd",
                "kubectl logs <agent-pod> | grep -iE 'nvml|dcgm'               # Kubernetes",
            )
            + "4. With the dcgm-exporter backend, ask dcgm-exporter from the agent's host or "
            "pod (the URL is `gpu.dcgm_exporter_url`, port 9400 by default):"
            + sh("curl -s http://127.0.0.1:9400/metrics | grep -c '^DCGM_FI_'")
        ),
        mitigation=(
            "- If `nvidia-smi` fails on the host too, the driver is gone: drain the host "
            "(take its workers out of the load balancer) and reboot it or reinstall the "
            "driver.\n"
            "- If `nvidia-smi` works on the host but the agent cannot load NVML, the agent's "
            "container lacks the driver's libraries: run it with the NVIDIA container runtime "
            "(`runtimeClassName: nvidia` in Kubernetes, `runtime: nvidia` or "
            "`gpus: all` in Compose), as deploy/ does.\n"
            "- If the errors say `timeout`, an NVML call hangs: check `dmesg` for XID errors "
            "and treat it as InferenceGPULost.\n"
            "- dcgm-exporter backend, `connect` or `timeout`: its pod or service is down or "
            "the URL is wrong (`kubectl -n gpu-operator get pods -l app=nvidia-dcgm-exporter`); "
            "`no_gpu_metrics`: dcgm-exporter runs but DCGM sees no GPU, which is the driver "
            "case above."
        ),
    )


def _xid(c: Ctx) -> Page:
    crit = ", ".join(str(x) for x in c.t.gpu_health.xid_critical)
    return Page(
        condition=(
            f"a GPU reports a new XID error within {c.t.pack.window}: critical (pages) for "
            f"XIDs {crit}, warning (ticket) for any other"
        ),
        meaning=(
            "An XID is an error the NVIDIA driver logs about a GPU. Some come from the "
            "application (for example 13, 31 or 43: a kernel fault or a process killed "
            "mid-work); others mean the hardware needs attention. The XIDs that page here "
            f"({crit}) are `gpu_health.xid_critical` in the thresholds. The default list holds "
            'the ones NVIDIA\'s Xid catalog files under "reset the GPU or drain the node": 48 '
            "double-bit ECC error, 64 failed row remap, 74 NVLink error, 79 GPU fell off the "
            "bus, 95 uncontained ECC error, 119/120 GSP firmware errors (the field guide does "
            "not cover XIDs)."
        ),
        impact=(
            "Critical XIDs: computations on the GPU may be wrong or stopped; its workers will "
            "likely crash. Other XIDs: usually one request or process failed; a repeating "
            "pattern points at a bad driver, model or card."
        ),
        diagnosis=(
            f"1. Open {c.panel('gpu', 'XID errors', 'ECC errors')}:"
            + promql(
                f"time() - inferwatch_gpu_xid_last_timestamp_seconds{c.sel}",
                f"increase(inferwatch_gpu_xid_errors_total{c.sel}[1h])",
                f"increase(inferwatch_gpu_ecc_errors_total{c.sel}[1h])",
            )
            + "2. On the host, read the driver's own message for the XID:"
            + sh("sudo dmesg -T | grep -i 'NVRM: Xid'", "nvidia-smi -q -d ECC,ROW_REMAPPER")
            + "3. Look the number up in NVIDIA's XID catalog "
            "(docs.nvidia.com/deploy/xid-errors) for its recommended action."
        ),
        mitigation=(
            "- Critical XID: drain the host (remove it from the load balancer, cordon the "
            "Kubernetes node), let running requests finish, then reset the GPU or reboot. "
            "If it comes back, the card needs service: open a hardware ticket.\n"
            "- Other XIDs: check the worker's log at the same time; a crash loop after a model "
            "or driver upgrade is the usual cause. Roll back if it started after a change.\n"
            "- Both: confirm with `nvidia-smi` that the GPU is healthy before returning the "
            "host to service."
        ),
    )


def _thermal(c: Ctx) -> Page:
    a = c.variants[0]
    return Page(
        condition=(
            "a thermal or power-brake clock event (hw_slowdown, hw_thermal, power_brake, "
            f"sw_thermal) stays active on a GPU for {dur(a.for_seconds)}"
        ),
        meaning=(
            "The GPU lowered its clocks to protect itself: it is too hot, or the system "
            "asserted the power brake. It keeps working, but slower."
        ),
        impact=(
            "Every request on this GPU takes longer: TPOT and throughput suffer and the GPU "
            "looks busier than its work justifies. Sustained heat shortens hardware life."
        ),
        diagnosis=(
            "1. Open "
            f"{c.panel('gpu', 'Clock-event reasons', 'Temperature', 'Clocks', 'Power vs limit')}:"
            + promql(
                f"inferwatch_gpu_clock_event_active{c.sel} == 1",
                f"inferwatch_gpu_temperature_celsius{c.sel}",
                f"inferwatch_gpu_sm_clock_hertz{c.sel}",
            )
            + "2. On the host:"
            + sh("nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER")
            + "3. Is it one GPU (a fan, a blocked airflow path) or all GPUs of the host (room "
            "or rack cooling, a chassis power limit)?"
        ),
        mitigation=(
            "- Fix the cooling or power problem: data-center or cloud provider ticket with the "
            "output above.\n"
            "- Until then, move load off the host, or lower its share in the load balancer.\n"
            "- `sw_power_cap` alone (the GPU reaching its configured power limit) is normal "
            "under load and does not fire this alert."
        ),
    )


def _queue_over_capacity(c: Ctx) -> Page:
    q = c.t.queue.over_capacity_samples
    return Page(
        condition=(
            f"a worker's queue depth is above its `max_num_seqs` for {q} consecutive samples "
            f"({c.t.pack.interval} apart, `pack.scrape_interval`)"
        ),
        meaning=(
            "More requests are waiting than the worker can put in one batch "
            "(`--max-num-seqs`, the most sequences vLLM runs at once). The guide calls the "
            "queue the leading indicator, and GPU utilization the lagging one: when the queue "
            f"stays above the batch capacity for {q} consecutive samples, scale out or "
            "rate-limit then, instead of waiting for the latency alerts [6.1, 6 FAQ]. The "
            "alert needs the agent to know `max_num_seqs` (from the command line, the engine "
            "or the agent's `workers[].max_num_seqs`); without it, it stays silent."
        ),
        impact=(
            "Requests spend time waiting before they start; TTFT rises first. If the "
            "overload lasts, the latency SLO alerts follow."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'Queue vs running vs capacity', 'Queue over capacity')}"
            f"; for the fleet, {c.panel('overview', 'Queue depth vs max_num_seqs')}.\n"
            "2. Paste:"
            + promql(
                f"inferwatch_queue_depth{c.sel}",
                c.r(c.n.batch_capacity),
                f"inferwatch_max_num_seqs{c.sel}",
                f"inferwatch_requests_running{c.sel}",
                f"inferwatch_kv_cache_usage_ratio{c.sel}",
            )
            + "3. Are all workers of the model over capacity (real overload) or only this one "
            "(an imbalance: see InferenceLoadImbalance)?\n"
            f"4. {c.panel('overview', 'Compute-bound or memory-bound')}: a busy GPU wants more "
            "GPUs; a memory-bound one wants KV-cache work [6.1]."
        ),
        mitigation=(
            f"- {cite(md(L.SCALE_OUT), '6 FAQ')} {md(L.RATE_LIMIT)}\n"
            "- If the GPU is not busy (utilization under "
            f"{pct(c.t.gpu_utilization.idle_below)}), the batch is too small for it: raise "
            "`--max-num-seqs` within the memory budget. " + _MAX_NUM_SEQS_ESTIMATE + "\n"
            "- Tune how much each step batches: `--max-num-batched-tokens` "
            f"{_range(L.BATCHED_TOKENS_RANGE)} is usual "
            "for a 7B model on an A10 (30-50 ms per step). Too small and continuous batching "
            "has nothing to batch; too large and every step gets slow. If prompt throughput "
            "drops as batches grow, it is past the point of diminishing returns [2.3].\n"
            + _BALANCING
            + "\n\n"
            + _FLAGS_WHERE
        ),
    )


def _ttft_high_gpu_idle(c: Ctx) -> Page:
    t = c.t
    a = c.variants[0]
    return Page(
        condition=(
            f"a worker's TTFT P95 over {t.pack.window} is above "
            f"{secs(t.ttft.warmup_p95_seconds)} while its own GPUs (those the agent "
            f"attributes to it) average below {pct(t.gpu_utilization.idle_below)} "
            f"utilization over {t.pack.window}, for {dur(a.for_seconds)} (not within "
            f"{dur(t.cold_start.within)} of a start: that is InferenceWorkerColdStart)"
        ),
        meaning=(
            "TTFT (time to first token) is how long a user waits before the answer starts. "
            "Slow first tokens on a GPU that is not busy point at setup work, not load: the "
            f"guide's loop {L.BY_ID['warmup'].loop} [6.2] reads it as a missing warm-up, meaning "
            "CUDA kernels, the "
            "KV cache and shared prompt prefixes are prepared on real users' requests instead "
            "of beforehand."
        ),
        impact=(
            "Users wait seconds for the answer to start; past 2 s a conversation feels broken "
            "[1.2]. Throughput is not the problem, so adding GPUs will not help."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'TTFT P50 / P95 / P99', 'TTFT distribution')}: are a few requests very slow (warm-up, long prompts) or "
            "all of them?\n"
            f"2. {c.panel('worker', 'Prefix-cache hit ratio')}: near zero with a shared "
            "system prompt means prefix caching is off or not hitting.\n"
            f"3. {c.panel('worker', 'Restarts')}: frequent restarts or scale-ups keep the "
            "fleet cold.\n"
            "4. Paste:"
            + promql(
                c.r(c.n.quantile("worker", "ttft", "p95")),
                c.r(c.n.worker_util),
                f"inferwatch_prefix_cache_hit_ratio{c.sel}",
                f"inferwatch_worker_info{c.sel}",
            )
        ),
        mitigation=(
            "- Warm up before taking traffic: after the server answers `/health`, send one "
            "or two small completion requests (`max_tokens: 1`) and only then add the worker "
            "to the load balancer (a readiness probe that runs the warm-up does both). The "
            f"guide measured {L.COLD_FIRST_CALL_SECONDS:g} s for the first unwarmed call, 2.3 s "
            f"of it CUDA compilation, against about {L.WARM_CALL_SECONDS * 1000:.0f} ms once "
            "warm [5.2].\n"
            "- Turn on `--enable-prefix-caching` for services with a long fixed system "
            "prompt: the prefix is computed once and later requests skip it; first tokens come "
            f"{_pct_range(L.PREFIX_CACHE_TTFT_GAIN)} sooner [6.2, 2.3].\n"
            "- Keep models resident: avoid scaling to zero or recycling workers that serve "
            "interactive traffic.\n\n" + _FLAGS_WHERE
        ),
    )


def _ttft_slo(c: Ctx) -> Page:
    t = c.t
    a = c.variants[0]
    return Page(
        condition=(
            f"a worker's TTFT P99 over {t.pack.window} is above "
            f"{secs(t.ttft.p99_slo_seconds)} for {dur(a.for_seconds)}"
        ),
        meaning=(
            "TTFT (time to first token) is how long a user waits before the answer starts "
            "streaming. One request in a hundred now waits more than "
            f"{secs(t.ttft.p99_slo_seconds)}. The guide puts the limit for a conversation at "
            "2 s [1.2]; interactive services such as code completion aim much lower (P99 under "
            "200 ms [2.1]). `ttft.p99_slo_seconds` in the thresholds holds your SLO."
        ),
        impact=(
            "Users see a stalled chat. Clients time out and retry, adding load: the guide "
            "warns this snowballs into an outage [1.2]."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'TTFT P50 / P95 / P99', 'Queue time P50 / P95 / P99')}"
            ": if queue time makes up most of TTFT, the worker is overloaded; if not, "
            "prompt processing (prefill) itself is slow.\n"
            f"2. {c.panel('worker', 'Queue vs running vs capacity')} and "
            f"{c.panel('gpu', 'GPU state')}: pressure or a deep queue means capacity; an idle "
            "GPU means warm-up (see InferenceTTFTHighGPUIdle).\n"
            "3. Paste:"
            + promql(
                c.r(c.n.quantile("worker", "ttft", "p99")),
                "histogram_quantile(0.99, sum by (le, worker) "
                f"(rate(inferwatch_queue_time_seconds_bucket{c.sel}[{t.pack.window}])))",
                f"inferwatch_queue_depth{c.sel}",
                c.of_worker(c.n.gpu_state + c.only("instance")),
            )
        ),
        mitigation=(
            "- Overloaded (deep queue, busy GPU): add replicas or rate-limit now; see "
            "InferenceQueueOverCapacity.\n"
            "- Long shared prompts: `--enable-prefix-caching`. With an 800-token system "
            "prompt the guide saw prefill go from 1.2 s to under 0.3 s [5.1].\n"
            "- Batching too aggressive: a very large `--max-num-batched-tokens` makes each "
            f"step long, and new requests wait for it; {_range(L.BATCHED_TOKENS_RANGE)} keeps a "
            "7B model on an A10 at "
            "30-50 ms per step [2.3].\n"
            "- Mixed traffic: give interactive requests a higher vLLM `priority` than batch "
            "jobs [4 FAQ], or move long-context requests to their own pool [5.3].\n"
            "- Model too slow for the card: INT4 quantization (AWQ/GPTQ) cut TTFT from 2.3 s "
            "to 0.9 s for a 7B model on an A10 [3.1]; tensor parallelism "
            "(`--tensor-parallel-size`) shortens prefill for large models [6 FAQ].\n\n"
            + _FLAGS_WHERE
        ),
    )


def _tpot_slo(c: Ctx) -> Page:
    t = c.t
    a = c.variants[0]
    return Page(
        condition=(
            f"a worker's TPOT P99 over {t.pack.window} is above "
            f"{secs(t.tpot.p99_slo_seconds)} for {dur(a.for_seconds)}"
        ),
        meaning=(
            "TPOT (time per output token) is the gap between streamed tokens once the answer "
            "has started. High TPOT means the decode steps are slow: the GPU is saturated, "
            "the batch is too big for it, or memory bandwidth is the limit [6.1]. The "
            f"{secs(t.tpot.p99_slo_seconds)} default is vLLM's upstream dashboard SLO, not a "
            "number from the guide."
        ),
        impact=(
            "Answers stream slowly (10 tokens a second is slower than people read). Long "
            "answers take much longer to finish, which keeps more requests in the batch and "
            "feeds the queue."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'TPOT P50 / P95 / P99')} and "
            f"{c.panel('worker', 'Queue vs running vs capacity')}: TPOT rising with the "
            "number of running requests means the batch is too large for the GPU.\n"
            f"2. {c.panel('gpu', 'Utilization vs SM, tensor and DRAM activity')}: DRAM "
            "activity near its limit means memory-bandwidth bound.\n"
            f"3. {c.panel('gpu', 'Clock-event reasons')}: a throttled GPU is slow for "
            "everyone (see InferenceGPUThermalThrottling).\n"
            "4. Paste:"
            + promql(
                c.r(c.n.quantile("worker", "tpot", "p99")),
                f"inferwatch_requests_running{c.sel}",
                c.of_worker(f"inferwatch_gpu_dram_active_ratio{c.only('instance')}"),
            )
        ),
        mitigation=(
            "- Lower `--max-num-seqs` or `--max-num-batched-tokens` so each step has less to "
            "do; this trades some throughput for faster streams [2.3, 4.1].\n"
            "- Add replicas if the whole model is busy.\n"
            "- Quantize the weights (AWQ/GPTQ INT4): less memory traffic per token; the guide "
            "saw decode throughput rise from 23 to 62 tokens/s on an A10 [3.1].\n"
            "- Large models: tensor parallelism over NVLink splits the per-token work "
            "[2.1, 6 FAQ].\n\n" + _FLAGS_WHERE
        ),
    )


def _long_tail(c: Ctx) -> Page:
    t = c.t
    a = c.variants[0]
    return Page(
        condition=(
            f"a worker's TTFT P99 or its TPOT P99 over {t.pack.window} is at least "
            f"{num(t.latency.tail_ratio)} times its P50, for {dur(a.for_seconds)} (end-to-end "
            "latency is not judged: it grows with the answer's length)"
        ),
        meaning=(
            "The slowest requests take many times longer than the typical one. The guide "
            f"singles out a P99 {num(t.latency.tail_ratio)} times the P50 or more as the long "
            "tail that averages hide [6.1]. The usual cause is a mix of short and very long "
            "requests on the same workers: round-robin balancing gives every worker a few "
            "long requests, and they slow down the short ones batched with them [5.3]."
        ),
        impact=(
            "Most users are fine, but a steady share waits far longer than the rest, often "
            "long enough for client timeouts and retries [1.2]."
        ),
        diagnosis=(
            "1. Open "
            + c.panel(
                "worker", "End-to-end latency P50 / P95 / P99", "End-to-end latency distribution"
            )
            + ": two humps mean two kinds of traffic.\n"
            f"2. {c.panel('overview', 'Queue depth vs max_num_seqs')}: is the tail on some "
            "workers only?\n"
            "3. Paste:"
            + promql(
                f"{c.r(c.n.quantile('worker', 'ttft', 'p99'))} "
                f"/ {c.r(c.n.quantile('worker', 'ttft', 'p50'))}",
                f"{c.r(c.n.quantile('worker', 'tpot', 'p99'))} "
                f"/ {c.r(c.n.quantile('worker', 'tpot', 'p50'))}",
                c.r(c.n.quantile("worker", "e2e_latency", "p99")),
            )
            + "   The TTFT and TPOT P99 tell whether the tail is waiting (TTFT) or generating "
            "(TPOT)."
        ),
        mitigation=(
            _BALANCING + "\n- Give interactive requests a higher vLLM `priority` than batch "
            "work so the scheduler serves them first [4 FAQ].\n"
            "- Cap what one request can cost: `--max-model-len`, a `max_tokens` limit at the "
            "gateway, and a maximum input length check [4 FAQ].\n"
            "- Several smaller worker processes per GPU (2-3, each on its own port) instead "
            "of one large one also limit how many requests one long request can delay "
            "[5.3].\n\n" + _FLAGS_WHERE
        ),
    )


def _load_imbalance(c: Ctx) -> Page:
    t = c.t
    lb = t.load_imbalance
    a = c.variants[0]
    return Page(
        condition=(
            "a worker's utilization of its own GPUs (above "
            f"{pct(t.gpu_utilization.idle_below)}), or its "
            f"open requests (waiting plus running, at least {num(lb.min_open_requests)}), "
            f"averaged over {t.pack.window}, are more than {num(lb.load_ratio)} times the "
            "average of the other workers of the same model, while that model's own GPUs "
            f"average below {pct(t.gpu_utilization.idle_below)} over the last "
            f"{dur(lb.idle_window)} and its TTFT P99 is within "
            f"{secs(t.ttft.p99_slo_seconds)}, for {dur(a.for_seconds)}"
        ),
        meaning=(
            "Requests are not spread across the workers of one model: one builds a queue "
            "while its peers and their GPUs sit mostly idle. This is the guide's loop "
            f"{L.BY_ID['imbalance'].loop} [6.2]: low utilization with normal latency usually means uneven routing (a random "
            "or round-robin balancer, sticky sessions), not too many GPUs."
        ),
        impact=(
            "Users routed to the busy worker wait; the fleet has the capacity but does not "
            "use it. Scaling in now would make it worse."
        ),
        diagnosis=(
            f"1. Open {c.panel('overview', 'Queue depth vs max_num_seqs', 'Requests per second')}"
            ": compare the workers of the model.\n"
            "2. Paste:"
            + promql(
                c.n.worker_util + c.only("model"),
                c.n.open_avg + c.only("model"),
                c.n.model_util + c.only("model"),
            )
            + "3. Check the balancer's configuration: algorithm, session affinity, weights, "
            "and whether all workers are in its pool."
        ),
        mitigation=(
            f"{cite(md(L.NO_SCALE_IN), L.guide('imbalance'))}\n\n"
            + _BALANCING
            + "\n- Check that every worker passed its health check and is in "
            "the pool; a worker left out after a restart leaves its peers to carry its share.\n"
            f"- {cite(md(L.DATA_PARALLEL), '6.2')}\n"
            "- This is an inferwatch default, not a guide number: tune "
            "`load_imbalance.load_ratio` and `load_imbalance.min_open_requests` if it is noisy."
        ),
    )


def _warmup_gate_checks(c: Ctx, step: int) -> str:
    """The diagnosis step that reads the agent's warm-up gate (docs/warmup.md) for the alert's worker."""
    return (
        f"{step}. With the agent's warm-up gate on, look at the gate for the worker "
        f"({c.panel('worker', 'Warm', 'Warm-up TTFT', 'Gate opened on deadline')}"
        "): is it warm, and how far apart are the cold and the warm time to first token?"
        + promql(
            f"inferwatch_worker_ready{c.sel}",
            f"inferwatch_warmup_ttft_seconds{c.sel}",
            f"inferwatch_warmup_deadline_exceeded{c.sel} == 1",
            f"sum by (reason) (increase(inferwatch_warmup_failures_total{c.sel}[1h]))",
        )
        + "   `inferwatch_warmup_deadline_exceeded == 1` means the gate opened on "
        "`warmup.deadline` without ever warming the worker: the failures by reason "
        "(`connect`, `timeout`, `http_status`, `bad_response`, `no_model`) and the agent's "
        "log (`kubectl logs POD -c inferwatch`, `journalctl -u inferwatch`) say why. The "
        "agent's advice for the worker, with the evidence behind it:"
        + sh("inferwatch advise --agent-url http://INSTANCE --worker WORKER")
    )


def _cold_start(c: Ctx) -> Page:
    t = c.t
    a = c.variants[0]
    return Page(
        condition=(
            f"a worker's TTFT P95 over {t.pack.window} is above "
            f"{secs(t.ttft.warmup_p95_seconds)} within {dur(t.cold_start.within)} of its "
            f"process start, for {dur(a.for_seconds)}; silent while the agent's warm-up gate "
            "holds or has warmed the worker"
        ),
        meaning=(
            "A worker that just (re)started serves slow first tokens: it took traffic before "
            "it was ready. Loading weights, compiling CUDA kernels and allocating the KV cache "
            "take 30-60 s in total, and the first real requests pay for whatever was not "
            "done in advance [5.2]. The agent sees the start from the worker process's start "
            "time (`inferwatch_worker_start_time_seconds`)."
        ),
        impact=(
            "Users who land on the new worker wait seconds for the first token. After "
            "scale-ups or rolling deploys this hits a share of all traffic."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'Restarts', 'Uptime')}: planned (deploy, scale "
            "up) or a crash loop? Crash loops with OOM in the log point at "
            "`--gpu-memory-utilization` (see InferenceVRAMPressureQueueRising).\n"
            f"2. {c.panel('worker', 'TTFT P50 / P95 / P99')} from the start time on.\n"
            "3. Paste:"
            + promql(
                f"time() - inferwatch_worker_start_time_seconds{c.sel}",
                c.r(c.n.quantile("worker", "ttft", "p95")),
                f"changes(inferwatch_worker_start_time_seconds{c.sel}[1d])",
            )
            + _warmup_gate_checks(c, 4)
        ),
        mitigation=(
            "- First, turn on the agent's warm-up gate: add `warmup: {enabled: true}` to the "
            "agent's configuration, and list long fixed system prompts under "
            "`warmup.system_prompts` so the prefix cache holds them before users arrive. "
            "The agent then waits for `/health`, sends its warm-up requests and answers "
            "`/readyz` with 200 only once the worker is warm. In Kubernetes the sidecar's "
            "readinessProbe on `/readyz` keeps the pod out of the Service until then, and "
            "again after every restart of the worker, because the gate closes when the "
            "worker restarts (docs/warmup.md). Elsewhere, point the load balancer's health "
            "check at `http://AGENT:10127/readyz`.\n"
            "- Setups without the sidecar (a DaemonSet agent is not in the worker's pod and "
            'cannot gate it): add the warm-up step yourself between "server up" and "in '
            'the load balancer": '
            "wait until `/health` answers, send one or two completions with `max_tokens: 1`, "
            "and only then report ready. In Kubernetes, make the readiness probe depend on "
            "the warm-up; under systemd, run it in `ExecStartPost=`. Sketch:"
            + sh(
                "# blocks until the server accepts connections (up to 10 minutes)",
                "curl -fsS --retry 600 --retry-delay 1 --retry-all-errors \\",
                "  -o /dev/null http://127.0.0.1:8000/health",
                "# one tiny completion compiles the kernels and touches the KV cache",
                "curl -fsS -o /dev/null http://127.0.0.1:8000/v1/completions \\",
                "  -H 'Content-Type: application/json' \\",
                '  --data \'{"model": "MODEL", "prompt": "warm-up", "max_tokens": 1}\'',
                indent=2,
            )
            + f"  Warm, the guide's A10 answered in {_COLD_VS_WARM} [5.2]; kernel "
            "compilation alone costs 2-5 s on a first request [2.3].\n"
            "- With a long fixed system prompt, `--enable-prefix-caching` and a warm-up "
            "request that carries it make the prefix ready before users arrive [2.3].\n"
            "- Avoid scaling to zero and aggressive scale-in for interactive models: every "
            "new replica starts cold [5.2]. TensorRT-LLM engines: fix the shapes at build "
            "time (`--max_batch_size` etc.) to avoid run-time compilation [3.2]."
        ),
    )


def _warmup_deadline(c: Ctx) -> Page:
    a = c.variants[0]
    return Page(
        condition=(
            "the agent's warm-up gate reports `inferwatch_warmup_deadline_exceeded == 1` for "
            "a worker (the gate opened on `warmup.deadline` without a completed warm-up) for "
            f"{dur(a.for_seconds)}"
        ),
        meaning=(
            "The agent's warm-up gate (`warmup:` in its configuration, docs/warmup.md) holds "
            "a worker out of service until warm-up requests have compiled its kernels, "
            "touched its KV cache and loaded the configured system prompts into the prefix "
            "cache. This worker did not get warm within `warmup.deadline`, so the gate opened "
            "anyway rather than keep the pod out forever: the worker now takes traffic cold. "
            "The agent keeps trying in the background; when a warm-up succeeds, the gauge "
            "returns to 0 and the alert clears. Agents without the gate export no such "
            "series, so the alert is silent there."
        ),
        impact=(
            "Users routed to this worker pay for the missing warm-up: the guide measured an "
            f"unwarmed first call at {L.COLD_FIRST_CALL_SECONDS:g} s against about "
            f"{L.WARM_CALL_SECONDS * 1000:.0f} ms warm [5.2]. If the warm-up "
            "failed because the worker itself is broken (nothing listening, HTTP errors), "
            "their requests may fail as well: check InferenceWorkerDown and "
            "InferenceRequestErrors for the same worker."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'Gate opened on deadline', 'Warm', 'Warm-ups and failures')}"
            ": which workers, since when, and which failures came before.\n"
            "2. Paste:"
            + promql(
                f"inferwatch_warmup_deadline_exceeded{c.sel}",
                f"inferwatch_worker_ready{c.sel}",
                f"sum by (reason) (increase(inferwatch_warmup_failures_total{c.sel}[1h]))",
                f"inferwatch_warmup_ttft_seconds{c.sel}",
                f"inferwatch_target_up{c.sel}",
            )
            + "3. Read the failure reasons: `connect` (wrong URL, or nothing listening), "
            "`timeout` (a cold request took longer than `warmup.timeout`), `http_status` (the "
            "worker refused the requests; a 404 is usually a wrong `warmup.model`), "
            "`bad_response`, `no_model` (`/v1/models` lists nothing). No failures at all "
            "means the worker never answered `/health` (still loading the model, or a wrong "
            "URL), or, with `warmup.warm_ttft_below` set, that the warm TTFT "
            '(`phase="warm"`) never got below it.\n'
            "4. The agent's log says the same in words (`kubectl logs POD -c inferwatch`, "
            "`journalctl -u inferwatch`): look for `waiting for .../health`, `warm-up failed` "
            "and `not warm after`. The agent's advice for the worker, with its evidence:"
            + sh("inferwatch advise --agent-url http://INSTANCE --worker WORKER")
        ),
        mitigation=(
            "- Fix what kept the worker cold, by reason: correct `workers[].url`; raise "
            "`warmup.timeout` for a big model whose first request takes tens of seconds; set "
            "`warmup.model` after a 404 or `no_model`; raise `warmup.warm_ttft_below` when "
            "the warm TTFT never gets that low.\n"
            "- A model that legitimately loads for longer than `warmup.deadline`: raise the "
            "deadline, keeping it below what the rollout tolerates "
            "(`progressDeadlineSeconds` in Kubernetes).\n"
            "- While the worker is cold, take it out of the load balancer by hand, or warm it "
            "by hand with the request sketch of InferenceWorkerColdStart (`/health`, then a "
            "`max_tokens: 1` completion); a long fixed system prompt belongs in "
            "`warmup.system_prompts`, so the prefix cache holds it before users arrive [2.3].\n"
            "- The alert clears once a background warm-up succeeds; its hold time is "
            "`cold_start.warmup_deadline_for` in the thresholds."
        ),
    )


def _kv_preemptions(c: Ctx) -> Page:
    t = c.t
    a = c.variants[0]
    return Page(
        condition=(
            f"a worker preempts requests (rate over {t.pack.window} above "
            f"{num(t.kv_cache.preemption_rate_above)} per second) for {dur(a.for_seconds)}"
        ),
        meaning=(
            "vLLM ran out of KV cache (the GPU memory that holds each running request's "
            "attention state) and evicted running requests to make room; they are recomputed "
            "later. An occasional preemption is harmless; sustained ones mean the worker "
            "admits more or longer sequences than its memory holds. The KV cache, not the "
            "weights, is what runs out in LLM serving [4.2]."
        ),
        impact=(
            "Preempted requests redo their work: GPU time is wasted, TPOT and end-to-end "
            "latency rise, and throughput falls while the GPU looks busy."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'Preemptions', 'KV-cache usage')}: usage near "
            "100% when preemptions happen confirms it.\n"
            f"2. {c.panel('worker', 'Launch flags')}: `max_num_seqs`, `max_model_len`, "
            "`gpu_memory_utilization`, `prefix_caching`.\n"
            "3. Paste:"
            + promql(
                c.r(c.n.rate("preemptions")),
                f"inferwatch_kv_cache_usage_ratio{c.sel}",
                f"inferwatch_requests_running{c.sel}",
            )
        ),
        mitigation=(
            _kv_remedies(c, pool_first=True)
            + "\n- Or give the model more memory: a larger GPU, or tensor parallelism across "
            "two [2.1].\n\n" + _FLAGS_WHERE
        ),
    )


def _request_errors(c: Ctx) -> Page:
    t = c.t
    a = c.variants[0]
    return Page(
        condition=(
            f"more than {pct(t.errors.ratio_above)} of a worker's requests over "
            f"{t.pack.window} finish with an error or are rejected (HTTP 503), for "
            f"{dur(a.for_seconds)}"
        ),
        meaning=(
            "Requests fail: the engine reported them finished with reason `error`, or "
            "refused them at admission because its queue limits were reached (vLLM counts "
            "these as admission rejections and answers 503). Engines that report neither "
            "counter leave this alert silent."
        ),
        impact=(
            "Users get errors. Clients that retry add load, which can turn an overload into "
            "an outage [1.2]."
        ),
        diagnosis=(
            "1. Open "
            + c.panel("worker", "Finished requests by reason", "Error ratio", "Rejected requests")
            + ": errors or rejections?\n"
            "2. Paste:"
            + promql(
                c.r(c.n.error_ratio),
                f"sum by (worker, reason) (rate(inferwatch_requests_finished_total{c.sel}"
                f"[{t.pack.window}]))",
                c.r(c.n.rate("requests_rejected")),
            )
            + "3. Rejections: the worker is full; check InferenceQueueOverCapacity and the "
            "queue panels. Errors: read the worker's log around the first failures "
            "(`kubectl logs`, `journalctl -u <unit>`)."
        ),
        mitigation=(
            "- Rejections (503): add replicas or rate-limit upstream, so clients get a clean "
            "429 instead of a queue-full error; raise the engine's queue limits only if "
            "latency allows it.\n"
            "- Errors after a deploy: roll back the model, engine version or flags.\n"
            "- Errors from over-long inputs: check inputs against `--max-model-len` at the "
            "gateway [4 FAQ].\n"
            "- Errors with OOM in the log: see InferenceVRAMPressureQueueRising for memory "
            "flags."
        ),
    )


def _worker_down(c: Ctx) -> Page:
    a = c.variants[0]
    return Page(
        condition=(
            "the agent's last scrapes of a worker failed or carried no engine metrics "
            f"(`inferwatch_target_up == 0`) for {dur(a.for_seconds)}"
        ),
        meaning=(
            "The agent next to the worker cannot read the inference server's `/metrics`: "
            "the server is down, not listening yet, returning errors, or running without its "
            "metrics (vLLM started with `--disable-log-stats` exports no `vllm:` series). "
            "If the whole agent is gone, InferenceAgentDown fires instead."
        ),
        impact=(
            "If the server is down, every request routed to it fails. If only its metrics "
            "are missing, the worker is unwatched: no latency or queue alerts for it."
        ),
        diagnosis=(
            f"1. Open {c.panel('overview', 'Workers up')}, then "
            f"{c.panel('worker', 'Engine scrape errors')} for the reason:"
            + promql(
                f"inferwatch_target_up{c.sel} == 0",
                f"increase(inferwatch_target_scrape_errors_total{c.sel}[10m])",
            )
            + "   Reasons: `connect` (nothing listening), `timeout`, `http_status`, "
            "`too_large`, `parse`, `no_engine_metrics` (up, but no engine series).\n"
            "2. From the agent's host or pod:"
            + sh(
                "curl -s -o /dev/null -w '%{http_code}\\n' http://WORKER:8000/health",
                "curl -s http://WORKER:8000/metrics | grep -c '^vllm:'",
            )
            + "3. Worker process: `kubectl get pod` / `kubectl logs --previous`, or "
            "`systemctl status` / `journalctl -u <unit>`. OOM kills and CUDA errors show "
            "there."
        ),
        mitigation=(
            "- Take the worker out of the load balancer (or check that its readiness probe "
            "did) so no request is routed to it.\n"
            f"- Crash loop with out-of-memory: {md(L.headroom())} Check `--max-num-seqs` too; "
            "prefix caching on top of 0.9 is a known cause of OOM restarts [2.3].\n"
            "- `no_engine_metrics`: remove `--disable-log-stats` from the server's flags "
            "(SGLang needs `--enable-metrics`, llama.cpp `--metrics`).\n"
            "- A wrong URL or port in the agent's `workers:` list: fix the agent config.\n"
            "- A hung process (alive, `/health` does not answer, nothing in its log for "
            "minutes): restart it (delete the pod, `systemctl restart <unit>`) and keep it out "
            "of the load balancer until it is warm (see InferenceWorkerColdStart). A process "
            "younger than "
            f"{dur(c.t.availability.startup_grace)} is still loading its model and does not "
            "page."
        ),
    )


def _agent_down(c: Ctx) -> Page:
    t = c.t
    return Page(
        condition=(
            f"Prometheus's scrapes of an agent fail (`up{c.sel} == 0`), or no target "
            f"matches `{t.pack.agent_selector}` at all, for "
            f"{dur(t.availability.agent_down_for)}"
        ),
        meaning=(
            "Prometheus cannot collect the inferwatch agent's metrics, so every GPU and "
            "worker that agent watches is invisible and none of their alerts can fire. The "
            "second form (no target at all) catches a scrape job that was deleted or "
            "renamed: `pack.agent_selector` must match the job that scrapes the agents."
        ),
        impact=(
            "Blind spot: problems on that host go unnoticed. The inference service itself "
            "may be fine."
        ),
        diagnosis=(
            "1. Prometheus UI → Status → Targets: the agent's error message (connection "
            "refused, timeout, 401 with basic auth, TLS).\n"
            "2. Paste:"
            + promql(f"up{c.sel}", f"scrape_duration_seconds{c.sel}")
            + "3. From the Prometheus host or pod:"
            + sh(
                "curl -s http://AGENT:10127/healthz",
                "curl -s http://AGENT:10127/metrics | head",
            )
            + "4. The agent process: `kubectl logs` of the sidecar container or "
            "`journalctl -u inferwatch` (the unit of deploy/systemd)."
        ),
        mitigation=(
            "- Connection refused: check the listen address (`--listen`, default port "
            "10127) and any NetworkPolicy or firewall between Prometheus and the host.\n"
            "- 401/TLS errors: the scrape config's credentials must match the agent's "
            "`web_config_file`.\n"
            "- No target at all: restore the scrape job, or set `pack.agent_selector` in "
            "your thresholds file to its job and regenerate the rules.\n"
            "- The agent process is gone or hangs (its log stops): restart it (sidecar "
            "container, DaemonSet pod or systemd unit); that does not touch the inference "
            "server."
        ),
    )


def _worker_unattributed(c: Ctx) -> Page:
    a = c.variants[0]
    return Page(
        condition=(
            "the agent reads a worker (`inferwatch_target_up == 1`) and its host's GPUs "
            "(`inferwatch_gpu_up`) but has no `inferwatch_worker_gpu_info` for the worker, "
            f"for {dur(a.for_seconds)}"
        ),
        meaning=(
            "The agent does not know which GPUs the worker runs on: none of its attribution "
            "sources answered (docs/attribution.md lists them in order: NVML's process list, "
            "Kubernetes pod resources, the worker's environment, the agent's own devices, "
            "`workers[].gpus`). It never guesses, so the worker has no "
            "`inferwatch_worker_gpu_info` series, and every rule that joins a worker to its "
            "GPUs leaves it out: memory pressure (InferenceVRAMPressureQueueRising), slow "
            "first tokens on idle GPUs (InferenceTTFTHighGPUIdle), load imbalance "
            "(InferenceLoadImbalance), the GPU state and the cost by state."
        ),
        impact=(
            "Nothing fails for users, but the worker is half watched: its queue and latency "
            "alerts work, its GPU-side alerts stay silent whatever happens, and the guide's "
            "closed loops all read a worker's GPUs next to its queue and latency [6.2]. Fix it in "
            "working hours."
        ),
        diagnosis=(
            "1. Which workers, on which agent:"
            + promql(
                f"inferwatch_target_up{c.sel} == 1\n"
                f"unless on (job, instance, worker) inferwatch_worker_gpu_info{c.sel}",
            )
            + "2. The agent's log names the sources it tried for the worker (one warning line "
            "per worker: `no GPU attribution for worker ...`):"
            + sh(
                "kubectl logs <agent pod> | grep -i attribution",
                "journalctl -u inferwatch | grep -i attribution",
            )
            + '3. Compare with the deployment table of docs/attribution.md ("What to '
            'enable").'
        ),
        mitigation=(
            "- Bare VM or systemd: the agent sees host PIDs already; check that it runs on the "
            "same host as the worker and that NVML lists the worker's process "
            "(`nvidia-smi --query-compute-apps=pid --format=csv`).\n"
            "- Kubernetes DaemonSet: use `deploy/kubernetes/overlays/daemonset` (it sets "
            "`hostPID: true`, mounts the kubelet's pod-resources socket and turns discovery "
            "on).\n"
            "- Kubernetes sidecar: give the agent `CAP_SYS_PTRACE` or the worker's user so it "
            "reads the worker's `NVIDIA_VISIBLE_DEVICES`.\n"
            '- Docker Compose: `pid: "service:<worker>"` with the same user, or `pid: host`.\n'
            "- Anything else: list the GPUs in the agent's configuration, `workers[].gpus` "
            "(indexes or UUIDs), and send SIGHUP or restart the agent."
        ),
    )


PAGES: dict[str, Callable[[Ctx], Page]] = {
    an.GPU_UNDERUTILIZED: _gpu_underutilized,
    an.GPU_SCALE_REVIEW: _gpu_scale_review,
    an.VRAM_PRESSURE_QUEUE_RISING: _vram_pressure,
    an.GPU_LOST: _gpu_lost,
    an.GPU_XID_ERRORS: _xid,
    an.GPU_THERMAL_THROTTLING: _thermal,
    an.QUEUE_OVER_CAPACITY: _queue_over_capacity,
    an.GPU_TELEMETRY_DOWN: _gpu_telemetry_down,
    an.TTFT_HIGH_GPU_IDLE: _ttft_high_gpu_idle,
    an.TTFT_SLO_BREACH: _ttft_slo,
    an.TPOT_SLO_BREACH: _tpot_slo,
    an.LATENCY_LONG_TAIL: _long_tail,
    an.LOAD_IMBALANCE: _load_imbalance,
    an.WORKER_COLD_START: _cold_start,
    an.WARMUP_DEADLINE_EXCEEDED: _warmup_deadline,
    an.KV_CACHE_PREEMPTIONS: _kv_preemptions,
    an.REQUEST_ERRORS: _request_errors,
    an.WORKER_DOWN: _worker_down,
    an.AGENT_DOWN: _agent_down,
    an.WORKER_UNATTRIBUTED: _worker_unattributed,
}


def _loop_line(alert: str) -> list[str]:
    """The header line naming the closed loop of ``alert`` (pack.loops), if it has one."""
    if alert not in L.BY_ALERT:
        return []
    loop = L.BY_ID[L.BY_ALERT[alert]]
    number = f"{loop.loop}" if loop.loop is not None else "none (advice outside the loops)"
    keys = ", ".join(f"`{k}`" for k in loop.thresholds)
    return [
        f"**Closed loop:** {number}, `{loop.id}` in `inferwatch advise` and the weekly report: "
        f"{loop.title} [{L.guide(loop.id)}]. Tuned by {keys}.  "
    ]


def render(t: Thresholds, name: str, variants: tuple[Alert, ...]) -> str:
    """The Markdown page of one alert (all rules sharing its name)."""
    if name in PAGES:
        page = PAGES[name](Ctx(t=t, n=names(t), variants=variants))
    else:
        page = Page(**slo.page(t, name))  # the burn-rate alerts (pack.slo)
    severities = " / ".join(dict.fromkeys(a.severity for a in variants))
    dashboard = variants[0].dashboard
    queries = "\n\n".join(f"```promql\n{a.expr}\n```" for a in variants)
    lines = [
        f"# {name}",
        "",
        "<!-- generated by inferwatch generate from agent/inferwatch/pack/runbooks.py and "
        "thresholds.yaml; do not edit -->",
        "",
        f"**Severity:** {severities}  ",
        f"**Fires when:** {page.condition}.  ",
        *_loop_line(name),
        f"**Dashboard:** [{DASHBOARD_TITLES[dashboard]}]({t.pack.dashboard_url(dashboard)})",
        "",
        "<details><summary>Alert query</summary>",
        "",
        queries,
        "",
        "</details>",
        "",
    ]
    for title, body in zip(
        SECTIONS, (page.meaning, page.impact, page.diagnosis, page.mitigation), strict=True
    ):
        lines += [f"## {title}", "", body.strip(), ""]
    return "\n".join(lines)


def generate(t: Thresholds) -> dict[str, str]:
    """``runbooks/<AlertName>.md`` for every alert; one of ``generate.GENERATORS``."""
    grouped: dict[str, list[Alert]] = {}
    for alert in alerts(t):
        grouped.setdefault(alert.name, []).append(alert)
    missing = set(grouped) - set(PAGES) - set(slo.ALERT_NAMES.values())
    if missing:
        raise ValueError(f"no runbook page for {sorted(missing)}")
    return {
        f"{RUNBOOK_DIR}/{name}.md": render(t, name, tuple(variants))
        for name, variants in grouped.items()
    }
