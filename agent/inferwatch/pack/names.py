"""Names of the pack's recording rules and alerts, written out once.

The rules (``pack.rules``), dashboards (``pack.dashboards``), runbooks
(``pack.runbooks``), the report and the tests import them from here, so a grep
for a name finds its one definition. Recording rules follow Prometheus'
``level:metric:operations`` convention; a window in a name is the configured
one (``pack.rate_window``, ``queue.rising_window``), so ``names(t)`` builds
them for a set of thresholds: ``worker:inferwatch_ttft_seconds:p99_5m`` with
the default ``5m``.

Levels and their labels (the contract in docs/development.md):

=============  =============================================
``worker``     cluster, job, instance, worker, model, engine
``worker_gpu`` cluster, job, instance, worker, gpu, uuid (one per GPU a worker runs on)
``gpu``        cluster, job, instance, gpu, uuid
``instance``   cluster, job, instance
``model``      cluster, job, model
``cluster``    cluster
=============  =============================================
"""

from __future__ import annotations

from dataclasses import dataclass

from inferwatch.engines import contract

# the contract's latency histograms, defined once with the engine tables (re-exported)
from inferwatch.engines.base import E2E as E2E
from inferwatch.engines.base import TPOT as TPOT
from inferwatch.engines.base import TTFT as TTFT
from inferwatch.pack.thresholds import Thresholds, format_duration

#: label sets, as PromQL ``by``/``on`` lists. ``cluster`` leads each of them: a
#: fleet's Prometheus servers set it as an external label, so on a shared store
#: (VictoriaMetrics, Thanos, Mimir) the same host and worker names of two clusters
#: stay apart; on one Prometheus the label is absent and changes nothing.
CLUSTER = "cluster"
WORKER = f"{CLUSTER}, job, instance, worker, model, engine"
WORKER_KEY = f"{CLUSTER}, job, instance, worker"
WORKER_GPU = f"{CLUSTER}, job, instance, worker, gpu, uuid"
GPU = f"{CLUSTER}, job, instance, gpu, uuid"
INSTANCE = f"{CLUSTER}, job, instance"
MODEL = f"{CLUSTER}, job, model"
#: how an engine's own series (scraped by Prometheus directly) meet their worker:
#: the ``endpoint`` label of ``inferwatch_worker_endpoint_info`` is the ``instance``
#: of that scrape, within the same ``cluster``
ENDPOINT_KEY = "endpoint"
ENDPOINT_JOIN = f"{CLUSTER}, {ENDPOINT_KEY}"
#: the agent's warm-up gate's own requests (docs/metrics.md), a histogram per worker at
#: every engine's TTFT boundaries: the TTFT SLO subtracts them from the engine's buckets
WARMUP_REQUESTS_TTFT = contract.WARMUP_REQUESTS_TTFT_SECONDS.name
#: one series per worker naming its engine, model and launch flags (docs/metrics.md)
WORKER_INFO = contract.WORKER_INFO.name

#: latency histograms of METRICS.md -> short name used in rule names
HISTOGRAMS = ("ttft", "tpot", "e2e_latency")
QUANTILES = ((0.5, "p50"), (0.95, "p95"), (0.99, "p99"))
#: the worker dashboard's other histograms (request shapes and phases, issue 23), each
#: with a recorded per-worker bucket rate like the latency ones
SHAPE_HISTOGRAMS = (
    contract.PROMPT_LENGTH_TOKENS.name,
    contract.GENERATION_LENGTH_TOKENS.name,
    contract.PREFILL_TIME_SECONDS.name,
    contract.DECODE_TIME_SECONDS.name,
    contract.QUEUE_TIME_SECONDS.name,
)
#: every histogram with a recorded per-worker bucket rate (``Names.histogram_rate``)
RECORDED_HISTOGRAMS = (*(f"inferwatch_{short}_seconds" for short in HISTOGRAMS), *SHAPE_HISTOGRAMS)


class _Windowed:
    """A rule name that ends in a window of its ``Names``: ``stem`` + ``window`` (or
    ``rising_window``), such as ``worker:inferwatch_queue_depth:avg5m``."""

    def __init__(self, stem: str, *, rising: bool = False) -> None:
        self.stem = stem
        self.rising = rising

    def __get__(self, names: Names | CostNames, owner: type | None = None) -> str:
        if self.rising and isinstance(names, Names):
            return self.stem + names.rising_window
        return self.stem + names.window


@dataclass(frozen=True)
class Names:
    """Recording rule names for one set of thresholds (windows are part of some names)."""

    window: str
    rising_window: str

    # -- worker level -------------------------------------------------------------
    def quantile(self, level: str, short: str, label: str) -> str:
        return f"{level}:inferwatch_{short}_seconds:{label}_{self.window}"

    def histogram_rate(self, metric: str) -> str:
        """Per-worker rate of the buckets (label ``le``) of one of ``RECORDED_HISTOGRAMS``:
        the agent's copy, else the engine's own series joined through the endpoint."""
        return f"worker:{metric}_bucket:rate{self.window}"

    def bucket_rate(self, short: str) -> str:
        """``histogram_rate`` of the latency histogram ``short`` (``ttft``, ...)."""
        return self.histogram_rate(f"inferwatch_{short}_seconds")

    def rate(self, name: str) -> str:
        return f"worker:inferwatch_{name}:rate{self.window}"

    error_ratio = _Windowed("worker:inferwatch_request_errors:ratio_rate")
    #: one series per (worker, model, engine) the engine reports: how a per-worker value
    #: gets the model and engine labels (a worker serving two models gets both)
    worker_labels = "worker:inferwatch_worker_labels:info"
    #: how many GPUs (or MIG devices) the worker runs on
    worker_gpus = "worker:inferwatch_worker_gpus:count"
    #: what the worker can batch now: max_num_seqs, or the running batch once the KV
    #: cache is full (whichever is smaller)
    batch_capacity = "worker:inferwatch_batch_capacity:min"
    queue_over_capacity = "worker:inferwatch_queue_over_capacity:bool"
    queue_avg = _Windowed(f"worker:{contract.QUEUE_DEPTH}:avg")
    running_avg = _Windowed(f"worker:{contract.REQUESTS_RUNNING}:avg")
    #: waiting plus running requests, averaged: the load the low-utilization loop compares
    open_avg = _Windowed("worker:inferwatch_requests_open:avg")
    #: least-squares slope of the queue depth (requests per second)
    queue_deriv = _Windowed(f"worker:{contract.QUEUE_DEPTH}:deriv", rising=True)
    #: summed utilization of the GPUs the worker runs on (through attribution)
    worker_util_sum = _Windowed(f"worker:{contract.GPU_UTILIZATION_RATIO}:sum")
    #: average utilization of the GPUs the worker runs on (through attribution)
    worker_util = _Windowed(f"worker:{contract.GPU_UTILIZATION_RATIO}:avg")

    # -- worker x GPU -------------------------------------------------------------
    #: inferwatch_worker_gpu_info without the MIG labels, one series per pair
    worker_gpu = f"worker_gpu:{contract.WORKER_GPU_INFO}:max"
    #: the worker's KV-cache usage on each of its GPUs, else the GPU's NVML used ratio
    worker_gpu_pressure = "worker_gpu:inferwatch_memory_pressure:ratio"

    # -- GPU level ----------------------------------------------------------------
    gpu_util = _Windowed(f"gpu:{contract.GPU_UTILIZATION_RATIO}:avg")

    gpu_vram = f"gpu:{contract.GPU_MEMORY_USED_RATIO}:max"
    gpu_pressure = "gpu:inferwatch_memory_pressure:ratio"
    gpu_state = "gpu:inferwatch_gpu_state:code"

    # -- model, cluster -----------------------------------------------------------
    #: average utilization of the model's own GPUs (through attribution)
    model_util = _Windowed(f"model:{contract.GPU_UTILIZATION_RATIO}:avg")

    cluster_util = f"cluster:{contract.GPU_UTILIZATION_RATIO}:avg"
    cluster_vram = f"cluster:{contract.GPU_MEMORY_USED_RATIO}:max"


def names(t: Thresholds) -> Names:
    return Names(window=t.pack.window, rising_window=format_duration(t.queue.rising_window))


# --------------------------------------------------------------------------- alerts
# Alert names, in the order of the generated file (pack.rules.alerts).
GPU_UNDERUTILIZED = "InferenceGPUUnderutilized"
GPU_SCALE_REVIEW = "InferenceGPUScaleReview"
VRAM_PRESSURE_QUEUE_RISING = "InferenceVRAMPressureQueueRising"
GPU_LOST = "InferenceGPULost"
GPU_TELEMETRY_DOWN = "InferenceGPUTelemetryDown"
GPU_XID_ERRORS = "InferenceGPUXidErrors"
GPU_THERMAL_THROTTLING = "InferenceGPUThermalThrottling"
QUEUE_OVER_CAPACITY = "InferenceQueueOverCapacity"
TTFT_HIGH_GPU_IDLE = "InferenceTTFTHighGPUIdle"
TTFT_SLO_BREACH = "InferenceTTFTSLOBreach"
TPOT_SLO_BREACH = "InferenceTPOTSLOBreach"
LATENCY_LONG_TAIL = "InferenceLatencyLongTail"
LOAD_IMBALANCE = "InferenceLoadImbalance"
WORKER_COLD_START = "InferenceWorkerColdStart"
WARMUP_DEADLINE_EXCEEDED = "InferenceWarmupDeadlineExceeded"
KV_CACHE_PREEMPTIONS = "InferenceKVCachePreemptions"
REQUEST_ERRORS = "InferenceRequestErrors"
WORKER_DOWN = "InferenceWorkerDown"
AGENT_DOWN = "InferenceAgentDown"
WORKER_UNATTRIBUTED = "InferenceWorkerUnattributed"
# -- cost: where the GPU-hours go (pack.rules.cost, docs/cost.md) ---------------------------
#: the three states of a GPU's time, in the order the report and dashboards list them
COST_STATES = ("serving", "held_idle", "unallocated")
#: the states a worker (and so a model) can hold a GPU in
WORKER_STATES = ("serving", "held_idle")


@dataclass(frozen=True)
class CostNames:
    """Recording rules of the cost group; ``state`` is a label of the ``by_state`` ones."""

    window: str

    # GPUs (or MIG devices) in each state: 0 or 1 per GPU and state; per worker and
    # model the worker's share (a GPU shared by n workers counts 1/n for each)
    gpu_states = "gpu:inferwatch_gpus:by_state"
    worker_gpu_states = "worker_gpu:inferwatch_gpus:by_state"
    worker_states = "worker:inferwatch_gpus:by_state"
    model_states = "model:inferwatch_gpus:by_state"
    cluster_states = "cluster:inferwatch_gpus:by_state"
    # money per hour (label currency) at each level, by state; only with prices
    gpu_price = "gpu:inferwatch_gpu_price:per_hour"
    gpu_cost = "gpu:inferwatch_gpu_cost:per_hour"
    worker_gpu_cost = "worker_gpu:inferwatch_gpu_cost:per_hour"
    worker_cost = "worker:inferwatch_gpu_cost:per_hour"
    model_cost = "model:inferwatch_gpu_cost:per_hour"
    cluster_cost = "cluster:inferwatch_gpu_cost:per_hour"
    # per million generated tokens: GPU-hours, and money with prices
    model_gpu_hours_per_mtok = "model:inferwatch_gpu_hours:per_million_generation_tokens"
    model_cost_per_mtok = "model:inferwatch_gpu_cost:per_million_generation_tokens"
    model_tokens = _Windowed(f"model:{contract.GENERATION_TOKENS.base}:rate")

    # power from NVML's energy counter (watts), split like the GPUs
    gpu_power = _Windowed(f"gpu:{contract.GPU_ENERGY_JOULES.base}:rate")
    worker_power = _Windowed(f"worker:{contract.GPU_ENERGY_JOULES.base}:rate")
    model_power = _Windowed(f"model:{contract.GPU_ENERGY_JOULES.base}:rate")
    cluster_power = _Windowed(f"cluster:{contract.GPU_ENERGY_JOULES.base}:rate")
    model_energy_per_token = _Windowed(
        f"model:{contract.GPU_ENERGY_JOULES.base}:per_generation_token_"
    )


def cost_names(t: Thresholds) -> CostNames:
    return CostNames(window=t.pack.window)


# -- SLOs and autoscaling (pack.rules.slo, pack.rules.autoscale) -------------------------------
# Windows in these names are the SLO's own (fixed burn windows, slos.window), not
# pack.rate_window. Every SLO series carries job, model and slo (ttft, tpot,
# availability).
SLO_LABELS = f"{CLUSTER}, job, model, slo"


def slo_errors(window: str) -> str:
    """Share of the model's requests that missed the objective over ``window``."""
    return f"model:inferwatch_slo_errors:ratio_rate{window}"


def slo_good(window: str) -> str:
    """Requests per second an SLI counted good over ``window`` (its numerator's complement)."""
    return f"model:inferwatch_slo_good_requests:rate{window}"


def slo_requests(window: str) -> str:
    """Requests per second an SLI counted over ``window`` (its denominator): how much data a
    burn window holds."""
    return f"model:inferwatch_slo_requests:rate{window}"


def slo_burn_rate(window: str) -> str:
    """``slo_errors(window)`` over the error budget: 1 spends the budget in exactly its period."""
    return f"model:inferwatch_slo_burn_rate:ratio_rate{window}"


#: 1 - objective, one series per model and objective that has traffic
SLO_ERROR_BUDGET = "model:inferwatch_slo_error_budget:ratio"
#: share of the budget left over slos.window (1 untouched, 0 spent, below 0 overspent)
SLO_BUDGET_REMAINING = "model:inferwatch_slo_error_budget_remaining:ratio"

#: (waiting + running) / batch capacity
QUEUE_PRESSURE_WORKER = "worker:inferwatch_queue_pressure:ratio"
QUEUE_PRESSURE_MODEL = "model:inferwatch_queue_pressure:ratio"
#: the fullest KV cache among the model's workers
KV_USAGE_MODEL = f"model:{contract.KV_CACHE_USAGE_RATIO}:max"
#: workers serving the model now
REPLICAS = "model:inferwatch_replicas:count"
#: 1 while a worker of the model has had its queue over capacity for queue.over_capacity_samples
SCALE_OUT = "model:inferwatch_scale_out:bool"
#: 1 while the model may lose a worker: GPUs below the waste threshold, no worker warming up
SCALE_IN = "model:inferwatch_scale_in:bool"
#: what a scaler following the guide's signals would run (KEDA / HPA target, value 1 per pod)
DESIRED_REPLICAS = "model:inferwatch_desired_replicas:count"
