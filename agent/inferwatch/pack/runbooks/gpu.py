"""Runbook pages of the GPU alerts: utilization below or above the healthy band, a
lost GPU or its telemetry, XID errors, thermal throttling."""

from __future__ import annotations

from collections.abc import Callable

from inferwatch.pack import loops as L
from inferwatch.pack import names as an
from inferwatch.pack.rules.common import dur, pct
from inferwatch.pack.runbooks.common import (
    BALANCING,
    MAX_NUM_SEQS_ESTIMATE,
    Ctx,
    Page,
    cite,
    md,
    promql,
    sh,
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


#: the matcher of the agent's GPU sources in its own series (label collector)
_GPU_SOURCES = 'collector=~"nvml|dcgm"'


def _utilization_stays(c: Ctx, side: str, line: float) -> str:
    """The condition of the two utilization alerts: ``side`` is below or above."""
    return (
        f"a GPU's utilization, averaged over {c.t.pack.window}, stays {side} "
        f"{pct(line)} for {c.hold}"
    )


def _source_errors(c: Ctx) -> str:
    """The agent's errors reading its GPU source (NVML or dcgm-exporter), by reason."""
    return f"increase(inferwatch_collect_errors_total{c.s(_GPU_SOURCES)}[10m])"


def _gpu_underutilized(c: Ctx) -> Page:
    g = c.t.gpu_utilization
    return Page(
        condition=_utilization_stays(c, "below", g.waste_below),
        meaning=(
            f"The GPU ran kernels less than {pct(g.waste_below)} of the time for "
            f"{c.hold}. The field guide treats this as a resource-waste reminder "
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
            + BALANCING
            + "\n- Let each worker batch more: continuous batching fills the GPU only with "
            "enough concurrent requests. Start `--max-num-seqs` around 32 and raise it while "
            "load-testing [4.1]; on an A10, going from 8 to 64 concurrent sequences took "
            "utilization from 42% to 94% for 15 ms more P50 [3.3]. "
            + MAX_NUM_SEQS_ESTIMATE
            + f"\n- If the load really is small, consolidate. {cite(md(L.SHARE_GPU), '2.1', '4.3')}\n"
            "- To silence this alert for a GPU that is idle on purpose (a standby), raise "
            "`gpu_utilization.waste_for` or lower `gpu_utilization.waste_below` in your "
            "thresholds file and regenerate."
        ),
    )


def _gpu_scale_review(c: Ctx) -> Page:
    g = c.t.gpu_utilization
    return Page(
        condition=_utilization_stays(c, "above", g.scale_review_above),
        meaning=(
            f"The GPU has been busy more than {pct(g.scale_review_above)} of the time for "
            f"{c.hold}. The guide calls for a scale-out review at this level "
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


def _gpu_lost(c: Ctx) -> Page:
    return Page(
        condition=f"the agent reports the GPU as unreadable (`inferwatch_gpu_up == 0`) for "
        f"{c.hold}",
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
                _source_errors(c),
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
    return Page(
        condition=(
            "the agent has not finished a pass over its GPU source (NVML, or dcgm-exporter) "
            f"for {dur(c.t.availability.gpu_lost_for)}, "
            "or reports errors from it and has never finished one, for "
            f"{c.hold}"
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
            + promql(_source_errors(c))
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
    return Page(
        condition=(
            "a thermal or power-brake clock event (hw_slowdown, hw_thermal, power_brake, "
            f"sw_thermal) stays active on a GPU for {c.hold}"
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


PAGES: dict[str, Callable[[Ctx], Page]] = {
    an.GPU_UNDERUTILIZED: _gpu_underutilized,
    an.GPU_SCALE_REVIEW: _gpu_scale_review,
    an.GPU_LOST: _gpu_lost,
    an.GPU_XID_ERRORS: _xid,
    an.GPU_THERMAL_THROTTLING: _thermal,
    an.GPU_TELEMETRY_DOWN: _gpu_telemetry_down,
}
