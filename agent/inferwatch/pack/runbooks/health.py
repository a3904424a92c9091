"""Runbook pages of the health alerts: request errors, a worker or the agent down, a
worker whose GPUs are unknown."""

from __future__ import annotations

from collections.abc import Callable

from inferwatch.pack import loops as L
from inferwatch.pack import names as an
from inferwatch.pack.rules.common import dur, pct
from inferwatch.pack.runbooks.common import Ctx, Page, md, promql, sh


def _request_errors(c: Ctx) -> Page:
    t = c.t
    return Page(
        condition=(
            f"more than {pct(t.errors.ratio_above)} of a worker's requests over "
            f"{t.pack.window} finish with an error or are rejected (HTTP 503), for "
            f"{c.hold}"
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
    return Page(
        condition=(
            "the agent's last scrapes of a worker failed or carried no engine metrics "
            f"(`inferwatch_target_up == 0`) for {c.hold}"
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
    return Page(
        condition=(
            "the agent reads a worker (`inferwatch_target_up == 1`) and its host's GPUs "
            "(`inferwatch_gpu_up`) but has no `inferwatch_worker_gpu_info` for the worker, "
            f"for {c.hold}"
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
    an.REQUEST_ERRORS: _request_errors,
    an.WORKER_DOWN: _worker_down,
    an.AGENT_DOWN: _agent_down,
    an.WORKER_UNATTRIBUTED: _worker_unattributed,
}
