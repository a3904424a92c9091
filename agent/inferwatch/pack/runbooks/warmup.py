"""Runbook pages of the warm-up alerts: a cold start and the warm-up gate's deadline
(docs/warmup.md)."""

from __future__ import annotations

from collections.abc import Callable

from inferwatch.pack import loops as L
from inferwatch.pack import names as an
from inferwatch.pack.rules.common import dur, secs
from inferwatch.pack.runbooks.common import Ctx, Page, promql, sh

#: [5.2]: the unwarmed first call against a warm one, as the pages quote it
_COLD_VS_WARM = (
    f"about {L.WARM_CALL_SECONDS * 1000:.0f} ms instead of {L.COLD_FIRST_CALL_SECONDS:g} s"
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
    return Page(
        condition=(
            f"a worker's TTFT P95 over {t.pack.window} is above "
            f"{secs(t.ttft.warmup_p95_seconds)} within {dur(t.cold_start.within)} of its "
            f"process start, for {c.hold}; silent while the agent's warm-up gate "
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
    return Page(
        condition=(
            "the agent's warm-up gate reports `inferwatch_warmup_deadline_exceeded == 1` for "
            "a worker (the gate opened on `warmup.deadline` without a completed warm-up) for "
            f"{c.hold}"
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


PAGES: dict[str, Callable[[Ctx], Page]] = {
    an.WORKER_COLD_START: _cold_start,
    an.WARMUP_DEADLINE_EXCEEDED: _warmup_deadline,
}
