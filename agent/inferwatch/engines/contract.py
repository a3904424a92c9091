"""The metric contract as data: one typed row per family the agent exports.

Every family of docs/metrics.md (the contract of METRICS.md and its extensions)
is one :class:`Family` here, with its kind, unit, labels, the HELP text the agent
writes and the meaning docs/metrics.md shows. Producers (the agent's sources)
take names and HELP texts from these rows, readers take names from them, and
``inferwatch generate`` writes docs/metrics.md's family tables from them, so a
family is typed once. The names are a promise to users: a change needs a
migration note in the changelog.

This module sits at the bottom of the package: it imports nothing of inferwatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: ``info``: a gauge whose value is always 1 and whose labels carry facts
Kind = Literal["counter", "gauge", "histogram", "info"]

#: docs/metrics.md's family tables, in the order the doc shows them
TABLES = (
    "gpu",
    "workers",
    "processes",
    "agent",
    "means",
    "worker-signals",
    "gpu-signals",
    "proxy",
    "endpoint",
    "limits",
    "kubernetes",
    "warmup",
)


@dataclass(frozen=True)
class Family:
    """One family of the contract."""

    #: the name users query: counters end in ``_total``, as docs/metrics.md writes them
    name: str
    kind: Kind
    #: the base unit its name ends in (seconds, bytes, ratio, ...), "" for counts and codes
    unit: str
    #: labels every series of the family carries. A GPU series of a MIG device adds
    #: ``gpu_instance`` and ``mig_profile``; a worker found by Kubernetes discovery adds
    #: its pod's labels (docs/metrics.md, Labels); a histogram adds ``le``
    labels: tuple[str, ...]
    #: the docs/metrics.md table it is listed in (one of TABLES)
    table: str
    #: the HELP text the agent writes (plain text, one line)
    help: str
    #: the meaning column of docs/metrics.md (Markdown)
    meaning: str
    #: a gauge that is only ever 0 or 1
    flag: bool = False

    @property
    def base(self) -> str:
        """The name without ``_total``: prometheus_client's family name of a counter, and
        the target an engine table maps a counter onto."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name

    @property
    def type_cell(self) -> str:
        """The type column of docs/metrics.md."""
        if self.kind == "info":
            return "gauge = 1"
        return "gauge 0/1" if self.flag else self.kind

    def __str__(self) -> str:
        # f"rate({QUEUE_DEPTH}[5m])" writes the name
        return self.name


GPU_INFO = Family(
    "inferwatch_gpu_info",
    "info",
    "",
    ("gpu", "uuid", "name", "pci_bus_id", "driver_version", "mig_mode"),
    table="gpu",
    help="Static description of a GPU or MIG device; always 1.",
    meaning="labels `gpu`, `uuid`, `name`, `pci_bus_id`, `driver_version`, `mig_mode`",
)
GPU_UP = Family(
    "inferwatch_gpu_up",
    "gauge",
    "",
    ("gpu", "uuid"),
    table="gpu",
    help="1 when the GPU answered in the last pass, 0 when it is lost or its source is failing.",
    meaning=(
        "1 readable; 0 lost or failing "
        '(`inferwatch_collect_errors_total{collector="nvml"}` says why)'
    ),
)
GPU_UTILIZATION_RATIO = Family(
    "inferwatch_gpu_utilization_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid"),
    table="gpu",
    help=(
        "Share of the last sample period in which any kernel ran on the GPU (NVML "
        "utilization.gpu / 100; coarse, see inferwatch_gpu_sm_active_ratio)."
    ),
    meaning="share of time any kernel ran (NVML utilization.gpu / 100); coarse, see SM active",
)
GPU_MEMORY_BUSY_RATIO = Family(
    "inferwatch_gpu_memory_busy_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid"),
    table="gpu",
    help=(
        "Share of the last sample period in which device memory was read or written "
        "(NVML utilization.memory / 100)."
    ),
    meaning="share of time device memory was read or written",
)
GPU_SM_ACTIVE_RATIO = Family(
    "inferwatch_gpu_sm_active_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid"),
    table="gpu",
    help=(
        "Share of SMs busy over the sample period (NVML GPM SM utilization, Hopper "
        "and newer; or DCGM profiling)."
    ),
    meaning="GPM SM activity (Hopper and newer only)",
)
GPU_SM_OCCUPANCY_RATIO = Family(
    "inferwatch_gpu_sm_occupancy_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid"),
    table="gpu",
    help=(
        "Resident warps over the theoretical maximum over the sample period (NVML GPM"
        " or DCGM profiling SM occupancy)."
    ),
    meaning="GPM SM occupancy",
)
GPU_TENSOR_ACTIVE_RATIO = Family(
    "inferwatch_gpu_tensor_active_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid"),
    table="gpu",
    help=(
        "Share of time any tensor pipe was busy over the sample period (NVML GPM or "
        "DCGM profiling)."
    ),
    meaning="GPM tensor-pipe activity",
)
GPU_DRAM_ACTIVE_RATIO = Family(
    "inferwatch_gpu_dram_active_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid"),
    table="gpu",
    help=(
        "DRAM bandwidth used over its maximum over the sample period (NVML GPM or DCGM profiling)."
    ),
    meaning="GPM DRAM bandwidth utilization",
)
GPU_MEMORY_USED_BYTES = Family(
    "inferwatch_gpu_memory_used_bytes",
    "gauge",
    "bytes",
    ("gpu", "uuid"),
    table="gpu",
    help=(
        "Device memory allocated by processes, excluding the driver's reservation "
        "(NVML memory info v2 'used', v1 'used' where v2 is unsupported; "
        "dcgm-exporter: framebuffer used)."
    ),
    meaning="memory used (excludes driver-reserved)",
)
GPU_MEMORY_RESERVED_BYTES = Family(
    "inferwatch_gpu_memory_reserved_bytes",
    "gauge",
    "bytes",
    ("gpu", "uuid"),
    table="gpu",
    help="Device memory reserved by the driver.",
    meaning="driver-reserved memory",
)
GPU_MEMORY_TOTAL_BYTES = Family(
    "inferwatch_gpu_memory_total_bytes",
    "gauge",
    "bytes",
    ("gpu", "uuid"),
    table="gpu",
    help="Total device memory.",
    meaning="total memory",
)
GPU_MEMORY_USED_RATIO = Family(
    "inferwatch_gpu_memory_used_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid"),
    table="gpu",
    help="(used + reserved) / total device memory: the VRAM level the thresholds speak of.",
    meaning='(used + reserved) / total: the "VRAM level" of the thresholds',
)
GPU_POWER_WATTS = Family(
    "inferwatch_gpu_power_watts",
    "gauge",
    "watts",
    ("gpu", "uuid"),
    table="gpu",
    help="Power draw, in watts.",
    meaning="power draw",
)
GPU_POWER_LIMIT_WATTS = Family(
    "inferwatch_gpu_power_limit_watts",
    "gauge",
    "watts",
    ("gpu", "uuid"),
    table="gpu",
    help="Enforced power limit, in watts.",
    meaning="enforced power limit",
)
GPU_ENERGY_JOULES = Family(
    "inferwatch_gpu_energy_joules_total",
    "counter",
    "joules",
    ("gpu", "uuid"),
    table="gpu",
    help="Energy used since the driver was loaded, in joules.",
    meaning="energy since the driver loaded (read on the slow interval)",
)
GPU_TEMPERATURE_CELSIUS = Family(
    "inferwatch_gpu_temperature_celsius",
    "gauge",
    "celsius",
    ("gpu", "uuid"),
    table="gpu",
    help="GPU core temperature, in degrees Celsius.",
    meaning="core temperature",
)
GPU_SM_CLOCK_HERTZ = Family(
    "inferwatch_gpu_sm_clock_hertz",
    "gauge",
    "hertz",
    ("gpu", "uuid"),
    table="gpu",
    help="Current SM clock, in hertz.",
    meaning="SM clock",
)
GPU_MEMORY_CLOCK_HERTZ = Family(
    "inferwatch_gpu_memory_clock_hertz",
    "gauge",
    "hertz",
    ("gpu", "uuid"),
    table="gpu",
    help="Current memory clock, in hertz.",
    meaning="memory clock",
)
GPU_CLOCK_EVENT_ACTIVE = Family(
    "inferwatch_gpu_clock_event_active",
    "gauge",
    "",
    ("gpu", "uuid", "reason"),
    table="gpu",
    help=(
        "1 while the driver reports this reason for holding the clocks down (clock event reasons)."
    ),
    meaning=(
        "label `reason`: idle, sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, "
        "power_brake, sync_boost, app_clocks"
    ),
    flag=True,
)
GPU_XID_ERRORS = Family(
    "inferwatch_gpu_xid_errors_total",
    "counter",
    "",
    ("gpu", "uuid", "xid"),
    table="gpu",
    help="XID errors reported by NVML events since the agent started, by XID code.",
    meaning="label `xid`; from NVML events",
)
GPU_XID_LAST_TIMESTAMP_SECONDS = Family(
    "inferwatch_gpu_xid_last_timestamp_seconds",
    "gauge",
    "seconds",
    ("gpu", "uuid", "xid"),
    table="gpu",
    help=(
        "Unix time of the last NVML XID event of this XID code on this GPU since the agent started."
    ),
    meaning=(
        "label `xid`; Unix time the agent read the last NVML event of that XID on "
        'that GPU (since the agent started); alerts key on "within the window", which'
        " survives failed scrapes"
    ),
)
GPU_ECC_ERRORS = Family(
    "inferwatch_gpu_ecc_errors_total",
    "counter",
    "",
    ("gpu", "uuid", "type"),
    table="gpu",
    help="Volatile ECC error counts since the driver was loaded, by type.",
    meaning="label `type` = corrected, uncorrected (volatile)",
)
GPU_PROCESS_MEMORY_USED_BYTES = Family(
    "inferwatch_gpu_process_memory_used_bytes",
    "gauge",
    "bytes",
    ("gpu", "uuid", "pid", "process"),
    table="gpu",
    help="Device memory used by one process (NVML compute running processes).",
    meaning=(
        "labels `gpu`, `uuid`, `pid`, `process` (+ `worker` when the pid belongs to a"
        " watched worker)"
    ),
)
GPU_PROCESS_SM_UTILIZATION_RATIO = Family(
    "inferwatch_gpu_process_sm_utilization_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid", "pid", "process"),
    table="gpu",
    help="Share of SM time one process had since the previous pass (NVML).",
    meaning="a process's SM share over the last sample period",
)
WORKER_GPU_INFO = Family(
    "inferwatch_worker_gpu_info",
    "info",
    "",
    ("worker", "gpu", "uuid"),
    table="gpu",
    help=(
        "1 for each GPU or MIG device a worker runs on: from NVML's process list, "
        "else the worker's NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES, else the "
        "agent's own visible devices (one-worker sidecar), else workers[].gpus; with "
        "the dcgm-exporter backend, from its pod labels on the GPUs of the worker's "
        "pod; absent when unknown."
    ),
    meaning=(
        "labels `worker`, `gpu`, `uuid` (+ `gpu_instance`, `mig_profile` on a MIG "
        "device, as on its GPU series): one series per (worker, device) it runs on; "
        "tensor or data parallelism gives one worker several, co-location several "
        "workers one device; absent when unknown. Source: NVML's process list, else "
        "(Kubernetes discovery) NVML's PIDs joined to pods through cgroups, else the "
        "kubelet's pod-resources allocation, else the worker's "
        "`NVIDIA_VISIBLE_DEVICES`/`CUDA_VISIBLE_DEVICES`, else the agent's own "
        "visible devices (one-worker sidecar), else `workers[].gpus` "
        "([attribution.md](attribution.md)); with backend dcgm-exporter, its "
        "`pod`/`namespace` labels on the GPUs of the worker's pod "
        "(`gpu.dcgm_worker_pods`). Rules join GPUs to workers through it"
    ),
)
TARGET_UP = Family(
    "inferwatch_target_up",
    "gauge",
    "",
    ("worker",),
    table="workers",
    help="1 when the last scrape of the worker succeeded and carried engine data.",
    meaning="1 when the last scrape of the worker succeeded and carried engine data",
)
TARGET_SCRAPE_DURATION_SECONDS = Family(
    "inferwatch_target_scrape_duration_seconds",
    "gauge",
    "seconds",
    ("worker",),
    table="workers",
    help="Duration of the last scrape of the worker's metrics.",
    meaning="duration of the last scrape",
)
TARGET_SCRAPE_ERRORS = Family(
    "inferwatch_target_scrape_errors_total",
    "counter",
    "",
    ("worker", "reason"),
    table="workers",
    help="Failed scrapes of the worker's metrics, by reason.",
    meaning="label `reason`: connect, timeout, http_status, too_large, parse, no_engine_metrics",
)
QUEUE_DEPTH = Family(
    "inferwatch_queue_depth",
    "gauge",
    "",
    ("worker", "engine", "model"),
    table="workers",
    help="Requests waiting to be scheduled (engine: num_requests_waiting).",
    meaning="requests waiting to be scheduled",
)
QUEUE_DEPTH_SLOPE = Family(
    "inferwatch_queue_depth_slope",
    "gauge",
    "",
    ("worker", "engine", "model"),
    table="workers",
    help=(
        "Least-squares slope of queue depth over the stats window, requests per "
        "second; > 0 means rising."
    ),
    meaning=(
        "least-squares slope of queue depth over the stats window, requests per "
        "second; > 0 means rising"
    ),
)
REQUESTS_RUNNING = Family(
    "inferwatch_requests_running",
    "gauge",
    "",
    ("worker", "engine", "model"),
    table="workers",
    help="Requests in the running batch (engine: num_requests_running).",
    meaning="requests in the running batch",
)
MAX_NUM_SEQS = Family(
    "inferwatch_max_num_seqs",
    "gauge",
    "",
    ("worker", "engine", "model"),
    table="workers",
    help=(
        "The worker's batch capacity (--max-num-seqs or the engine's equivalent), "
        "from config, the command line or the engine."
    ),
    meaning=(
        "batch capacity (`--max-num-seqs` or the engine's equivalent) from config, "
        "the command line or the engine; absent when unknown"
    ),
)
KV_CACHE_USAGE_RATIO = Family(
    "inferwatch_kv_cache_usage_ratio",
    "gauge",
    "ratio",
    ("worker", "engine", "model"),
    table="workers",
    help="Share of the KV cache in use, 0..1 (engine: kv_cache_usage_perc).",
    meaning="share of the KV cache in use",
)
PREFIX_CACHE_HIT_RATIO = Family(
    "inferwatch_prefix_cache_hit_ratio",
    "gauge",
    "ratio",
    ("worker", "engine", "model"),
    table="workers",
    help="Prefix-cache hits / queries (tokens) over the stats window.",
    meaning="prefix-cache hits / queries (tokens) over the stats window",
)
PREEMPTIONS = Family(
    "inferwatch_preemptions_total",
    "counter",
    "",
    ("worker", "engine", "model"),
    table="workers",
    help="Requests preempted for KV-cache space (engine: num_preemptions).",
    meaning="requests preempted for KV-cache space",
)
PROMPT_TOKENS = Family(
    "inferwatch_prompt_tokens_total",
    "counter",
    "tokens",
    ("worker", "engine", "model"),
    table="workers",
    help="Prompt tokens processed, prefix-cache hits included.",
    meaning="prompt tokens processed (prefix-cache hits included)",
)
GENERATION_TOKENS = Family(
    "inferwatch_generation_tokens_total",
    "counter",
    "tokens",
    ("worker", "engine", "model"),
    table="workers",
    help="Tokens generated.",
    meaning="tokens generated",
)
REQUESTS_FINISHED = Family(
    "inferwatch_requests_finished_total",
    "counter",
    "",
    ("worker", "engine", "model", "reason"),
    table="workers",
    help="Requests finished, by reason (stop, length, abort, error, ...).",
    meaning="label `reason` (stop, length, abort, error, ...)",
)
REQUESTS_REJECTED = Family(
    "inferwatch_requests_rejected_total",
    "counter",
    "",
    ("worker", "engine", "model"),
    table="workers",
    help="Requests rejected at admission (HTTP 503 from queue limits).",
    meaning="admission rejections (HTTP 503 from queue limits)",
)
TTFT_SECONDS = Family(
    "inferwatch_ttft_seconds",
    "histogram",
    "seconds",
    ("worker", "engine", "model"),
    table="workers",
    help="Time to first token, the engine's buckets passed through.",
    meaning="time to first token; the engine's buckets passed through (aggregatable)",
)
TPOT_SECONDS = Family(
    "inferwatch_tpot_seconds",
    "histogram",
    "seconds",
    ("worker", "engine", "model"),
    table="workers",
    help="Time per output token (inter-token latency), engine buckets.",
    meaning="time per output token (inter-token latency)",
)
E2E_LATENCY_SECONDS = Family(
    "inferwatch_e2e_latency_seconds",
    "histogram",
    "seconds",
    ("worker", "engine", "model"),
    table="workers",
    help="End-to-end request latency, engine buckets.",
    meaning="end-to-end request latency",
)
QUEUE_TIME_SECONDS = Family(
    "inferwatch_queue_time_seconds",
    "histogram",
    "seconds",
    ("worker", "engine", "model"),
    table="workers",
    help="Time requests waited before being scheduled, engine buckets.",
    meaning="time waiting before being scheduled",
)
TTFT_QUANTILE_SECONDS = Family(
    "inferwatch_ttft_quantile_seconds",
    "gauge",
    "seconds",
    ("worker", "engine", "model", "quantile"),
    table="workers",
    help="TTFT quantiles over the stats window, from bucket increases.",
    meaning="label `quantile` = 0.5, 0.95, 0.99, over the stats window",
)
TPOT_QUANTILE_SECONDS = Family(
    "inferwatch_tpot_quantile_seconds",
    "gauge",
    "seconds",
    ("worker", "engine", "model", "quantile"),
    table="workers",
    help="TPOT quantiles over the stats window, from bucket increases.",
    meaning="same, for TPOT",
)
E2E_LATENCY_QUANTILE_SECONDS = Family(
    "inferwatch_e2e_latency_quantile_seconds",
    "gauge",
    "seconds",
    ("worker", "engine", "model", "quantile"),
    table="workers",
    help="End-to-end latency quantiles over the stats window, from bucket increases.",
    meaning="same, for end-to-end latency",
)
#: the launch flags inferwatch_worker_info carries as labels, in label order
#: (engines/launchflags.py reads them from a command line)
WORKER_INFO_FLAGS = (
    "max_num_seqs",
    "max_model_len",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "prefix_caching",
    "kv_cache_dtype",
)
WORKER_INFO = Family(
    "inferwatch_worker_info",
    "info",
    "",
    ("worker", "engine", "model", "pid", "version", *WORKER_INFO_FLAGS),
    table="processes",
    help=(
        'Worker process and the launch flags read from its command line (psutil); "" '
        "where the command line does not say."
    ),
    meaning=(
        "labels `worker`, `engine`, `model`, `pid`, `version` and the launch flags "
        "that matter: `max_num_seqs`, `max_model_len`, `max_num_batched_tokens`, "
        '`gpu_memory_utilization`, `prefix_caching` ("true"/"false"/"unknown"), and '
        '`kv_cache_dtype` (vLLM\'s `cache_config_info` `cache_dtype`: "auto" = the '
        'model\'s dtype, "fp8", "fp8_e4m3", ...); "" where unknown. Flags come from '
        "the command line; where it is silent, `gpu_memory_utilization` and "
        "`prefix_caching` come from what the engine states (vLLM's "
        "`cache_config_info`), and `version` from vLLM's `/version`"
    ),
)
WORKER_CPU_SECONDS = Family(
    "inferwatch_worker_cpu_seconds_total",
    "counter",
    "seconds",
    ("worker", "engine", "model"),
    table="processes",
    help=(
        "CPU time of the worker's process tree: live processes plus the children they"
        " reaped (psutil)."
    ),
    meaning="CPU time of the worker's process tree",
)
WORKER_RESIDENT_MEMORY_BYTES = Family(
    "inferwatch_worker_resident_memory_bytes",
    "gauge",
    "bytes",
    ("worker", "engine", "model"),
    table="processes",
    help="Resident memory of the worker's process tree, summed per process (psutil).",
    meaning="resident memory of the worker's process tree",
)
WORKER_START_TIME_SECONDS = Family(
    "inferwatch_worker_start_time_seconds",
    "gauge",
    "seconds",
    ("worker", "engine", "model"),
    table="processes",
    help="Unix time the worker's main process started; a change means a restart (psutil).",
    meaning="unix time the worker process started (a change means a restart)",
)
AGENT_INFO = Family(
    "inferwatch_agent_info",
    "info",
    "",
    ("version",),
    table="agent",
    help="The inferwatch agent's version.",
    meaning="label `version` (and `node`, this node's name, with Kubernetes discovery)",
)
COLLECT_DURATION_SECONDS = Family(
    "inferwatch_collect_duration_seconds",
    "gauge",
    "seconds",
    ("collector",),
    table="agent",
    help="Duration of each collector's last pass.",
    meaning="label `collector`: duration of its last pass",
)
COLLECT_ERRORS = Family(
    "inferwatch_collect_errors_total",
    "counter",
    "",
    ("collector", "reason"),
    table="agent",
    help="Errors met by each collector, by reason.",
    meaning="labels `collector`, `reason`",
)
LAST_COLLECT_TIMESTAMP_SECONDS = Family(
    "inferwatch_last_collect_timestamp_seconds",
    "gauge",
    "seconds",
    ("collector",),
    table="agent",
    help="Unix time each collector last finished a pass.",
    meaning="label `collector`: when it last finished a pass",
)
TPOT_MEAN_SECONDS = Family(
    "inferwatch_tpot_mean_seconds",
    "gauge",
    "seconds",
    ("worker", "engine", "model"),
    table="means",
    help=(
        "Mean time per output token over the stats window, from the engine's "
        "generation time and token counters (engines without a TPOT histogram: "
        "llama.cpp)."
    ),
    meaning=(
        "mean time per output token over the stats window, for engines with no TPOT "
        "histogram (llama.cpp: increase of `tokens_predicted_seconds_total` / "
        "increase of `tokens_predicted_total`); a mean, not a percentile"
    ),
)
E2E_LATENCY_MEAN_SECONDS = Family(
    "inferwatch_e2e_latency_mean_seconds",
    "gauge",
    "seconds",
    ("worker", "engine", "model"),
    table="means",
    help=(
        "Mean end-to-end request time over the stats window, from the engine's "
        "cumulative duration and request counters (engines without a latency "
        "histogram: Triton)."
    ),
    meaning=(
        "mean end-to-end latency over the stats window, for engines that expose only "
        "cumulative duration counters (Triton: `nv_inference_request_duration_us` / "
        "`nv_inference_request_success`)"
    ),
)
PREFILL_TIME_SECONDS = Family(
    "inferwatch_prefill_time_seconds",
    "histogram",
    "seconds",
    ("worker", "engine", "model"),
    table="worker-signals",
    help="Time a finished request spent in prefill (prompt processing), engine buckets.",
    meaning=(
        "per finished request, time spent in prefill (prompt processing); engine "
        "buckets (vLLM, trtllm-serve, LMDeploy)"
    ),
)
DECODE_TIME_SECONDS = Family(
    "inferwatch_decode_time_seconds",
    "histogram",
    "seconds",
    ("worker", "engine", "model"),
    table="worker-signals",
    help="Time a finished request spent in decode (generating), engine buckets.",
    meaning=(
        "per finished request, time spent generating; engine buckets (vLLM, trtllm-serve, LMDeploy)"
    ),
)
PROMPT_LENGTH_TOKENS = Family(
    "inferwatch_prompt_length_tokens",
    "histogram",
    "tokens",
    ("worker", "engine", "model"),
    table="worker-signals",
    help="Prompt length of each request in tokens, engine buckets.",
    meaning=(
        "prompt length of each request, tokens (vLLM, LMDeploy: 1-2-5 buckets up to "
        "`max_model_len`; SGLang, TGI, NIM: their own): the long-context share of "
        "[5.3] that `inferwatch advise` and the report read"
    ),
)
GENERATION_LENGTH_TOKENS = Family(
    "inferwatch_generation_length_tokens",
    "histogram",
    "tokens",
    ("worker", "engine", "model"),
    table="worker-signals",
    help="Tokens generated for each finished request, engine buckets.",
    meaning="tokens generated per finished request",
)
LORA_ADAPTER_ACTIVE = Family(
    "inferwatch_lora_adapter_active",
    "info",
    "",
    ("worker", "engine", "model", "adapter", "state"),
    table="worker-signals",
    help=(
        "1 for each LoRA adapter with running or waiting requests, by state (engine: "
        "lora_requests_info)."
    ),
    meaning=(
        "labels `adapter`, `state` = `running` or `waiting`: one series per LoRA "
        "adapter with requests in that state (vLLM names adapters, it does not count "
        "their requests)"
    ),
)
LORA_MAX_ADAPTERS = Family(
    "inferwatch_lora_max_adapters",
    "gauge",
    "",
    ("worker", "engine", "model"),
    table="worker-signals",
    help="How many LoRA adapters the worker can hold at once (--max-loras).",
    meaning=(
        "how many adapters the worker holds at once (vLLM `--max-loras`; SGLang's "
        "LoRA pool slots, `--max-loras-per-batch`)"
    ),
)
GPU_GRAPHICS_ACTIVE_RATIO = Family(
    "inferwatch_gpu_graphics_active_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid"),
    table="gpu-signals",
    help=(
        "Share of time the graphics or compute engine was active (DCGM profiling "
        "GR_ENGINE_ACTIVE; dcgm-exporter backend only)."
    ),
    meaning=(
        "share of time the graphics or compute engine was active (DCGM profiling "
        "`GR_ENGINE_ACTIVE`, in dcgm-exporter's default set)"
    ),
)
GPU_PCIE_THROUGHPUT_BYTES_PER_SECOND = Family(
    "inferwatch_gpu_pcie_throughput_bytes_per_second",
    "gauge",
    "bytes_per_second",
    ("gpu", "uuid", "direction"),
    table="gpu-signals",
    help=(
        "PCIe traffic by direction (tx, rx), in bytes per second (NVML: a 20 ms "
        "byte-counter sample taken every activity interval; dcgm-exporter: over its "
        "sample period, headers included)."
    ),
    meaning=(
        "label `direction` = `tx`, `rx`: PCIe traffic including headers "
        "(`DCGM_FI_PROF_PCIE_TX_BYTES`, `..._RX_BYTES`)"
    ),
)
GPU_NVLINK_THROUGHPUT_BYTES_PER_SECOND = Family(
    "inferwatch_gpu_nvlink_throughput_bytes_per_second",
    "gauge",
    "bytes_per_second",
    ("gpu", "uuid"),
    table="gpu-signals",
    help="NVLink traffic over all links of the GPU, in bytes per second.",
    meaning="NVLink traffic over all links of the GPU",
)
GPU_PERFORMANCE_STATE = Family(
    "inferwatch_gpu_performance_state",
    "gauge",
    "",
    ("gpu", "uuid"),
    table="gpu-signals",
    help="Performance state (P-state) 0-15; 0 is the fastest.",
    meaning="P-state 0-15, 0 the fastest",
)
GPU_FAN_SPEED_RATIO = Family(
    "inferwatch_gpu_fan_speed_ratio",
    "gauge",
    "ratio",
    ("gpu", "uuid"),
    table="gpu-signals",
    help="Intended fan speed as a share of its maximum (can exceed 1).",
    meaning=(
        "fan speed over its maximum (can exceed 1; absent on passively cooled boards "
        "that report none)"
    ),
)
PROXY_TTFT_SECONDS = Family(
    "inferwatch_proxy_ttft_seconds",
    "histogram",
    "seconds",
    ("worker", "engine", "model"),
    table="proxy",
    help=(
        "Time to first token as the proxy's clients saw it: request received to the "
        "first server-sent event carrying generated text (streamed answers)."
    ),
    meaning=(
        "request received by the proxy to the first server-sent event with generated "
        "text (streamed completions)"
    ),
)
PROXY_TPOT_SECONDS = Family(
    "inferwatch_proxy_tpot_seconds",
    "histogram",
    "seconds",
    ("worker", "engine", "model"),
    table="proxy",
    help="Time per output token as the proxy's clients saw it: each gap between two token events.",
    meaning="each gap between two token events",
)
PROXY_E2E_LATENCY_SECONDS = Family(
    "inferwatch_proxy_e2e_latency_seconds",
    "histogram",
    "seconds",
    ("worker", "engine", "model"),
    table="proxy",
    help=(
        "End-to-end latency as the proxy's clients saw it: request received to the "
        "answer's last byte (answers the client read to the end)."
    ),
    meaning="request received to the answer's last byte (answers read to the end)",
)
PROXY_PROMPT_TOKENS = Family(
    "inferwatch_proxy_prompt_tokens_total",
    "counter",
    "tokens",
    ("worker", "engine", "model"),
    table="proxy",
    help="Prompt tokens of proxied answers (their usage).",
    meaning="prompt tokens of proxied answers (their `usage`)",
)
PROXY_GENERATION_TOKENS = Family(
    "inferwatch_proxy_generation_tokens_total",
    "counter",
    "tokens",
    ("worker", "engine", "model"),
    table="proxy",
    help="Generated tokens of proxied answers (their usage, else the token events counted).",
    meaning="generated tokens (their `usage`, else token events)",
)
PROXY_REQUESTS = Family(
    "inferwatch_proxy_requests_total",
    "counter",
    "",
    ("worker", "engine", "model", "status_class"),
    table="proxy",
    help="Measured requests through the proxy, by the status class the client got.",
    meaning="measured requests, label `status_class` (`2xx` ... `5xx`) as the client got it",
)
PROXY_CLIENT_ABORTS = Family(
    "inferwatch_proxy_client_aborts_total",
    "counter",
    "",
    ("worker", "engine", "model"),
    table="proxy",
    help=(
        "Measured requests whose client went away before the answer's end (the "
        "upstream request is cancelled)."
    ),
    meaning=(
        "measured requests whose client went away before the end (the upstream "
        "request is cancelled)"
    ),
)
PROXY_UPSTREAM_ERRORS = Family(
    "inferwatch_proxy_upstream_errors_total",
    "counter",
    "",
    ("worker", "reason"),
    table="proxy",
    help="Requests the worker failed: connect (502), timeout (504 or a cut stream), reset.",
    meaning="labels `worker`, `reason`: connect (502), timeout (504 or a cut stream), reset",
)
PROXY_UPSTREAM_RETRIES = Family(
    "inferwatch_proxy_upstream_retries_total",
    "counter",
    "",
    ("worker", "reason"),
    table="proxy",
    help=(
        "Requests sent again on a fresh connection to the worker, which provably "
        "never got them: closed (a kept-alive connection the worker had closed, no "
        "byte of an answer back), refused (a connect refused, nothing sent)."
    ),
    meaning=(
        "labels `worker`, `reason`: requests sent again on a fresh connection, which "
        "the worker provably never got: `closed` (a reused kept-alive connection the "
        "worker had closed with the request unread, or a GET/HEAD/OPTIONS closed "
        "before any byte of its answer), `refused` (a connect refused or closed "
        "before the request was written; tried again within `connect_timeout`). A "
        "request is sent again at most once after `closed`; nothing the worker may "
        "have begun is ever sent twice "
        "([proxy.md](proxy.md#what-is-sent-again-and-what-is-not))"
    ),
)
PROXY_REJECTED = Family(
    "inferwatch_proxy_rejected_total",
    "counter",
    "",
    ("worker", "reason"),
    table="proxy",
    help="Requests the proxy refused itself, by reason (too_large: 413).",
    meaning="labels `worker`, `reason`: too_large (413, `proxy.max_body_bytes`)",
)
PROXY_SAMPLES_DROPPED = Family(
    "inferwatch_proxy_samples_dropped_total",
    "counter",
    "",
    ("worker",),
    table="proxy",
    help=(
        "Measured requests whose figures were dropped (never the requests "
        "themselves): a model beyond the per-worker cap."
    ),
    meaning=(
        "label `worker`: measured requests whose figures were dropped (a model beyond"
        " 16 per worker), never the requests"
    ),
)
PROXY_CONNECTIONS = Family(
    "inferwatch_proxy_connections",
    "gauge",
    "",
    ("worker",),
    table="proxy",
    help="Client connections open on the proxy.",
    meaning="label `worker`: client connections open on the proxy",
)
PROXY_REQUESTS_IN_FLIGHT = Family(
    "inferwatch_proxy_requests_in_flight",
    "gauge",
    "",
    ("worker",),
    table="proxy",
    help="Requests the proxy is forwarding now.",
    meaning="label `worker`: requests being forwarded now",
)
WORKER_ENDPOINT_INFO = Family(
    "inferwatch_worker_endpoint_info",
    "info",
    "",
    ("worker", "endpoint"),
    table="endpoint",
    help=(
        "1 per worker; label endpoint: the instance label of Prometheus' own scrape "
        "of the engine (workers[].endpoint, default the scraped host:port), to join "
        "its series."
    ),
    meaning=(
        "labels `worker`, `endpoint`: one series per configured worker, up or not. "
        "`endpoint` is the `instance` label Prometheus gives the engine when it "
        "scrapes it directly (`workers[].endpoint`, default the host:port the agent "
        "reads it from). The latency recording rules join the engine's own histograms"
        " to the worker through it when the agent does not re-export them "
        "(`export_histograms: false`, "
        "[engines.md](engines.md#when-prometheus-scrapes-the-engine-too))"
    ),
)
TARGET_SERIES_DROPPED = Family(
    "inferwatch_target_series_dropped_total",
    "counter",
    "",
    ("worker",),
    table="limits",
    help=(
        "Series of the worker dropped by the agent's per-worker cap "
        "(scrape.max_series), summed over scrapes."
    ),
    meaning=(
        "label `worker`: series of the worker dropped by the per-worker cap "
        "(`scrape.max_series`), summed over scrapes; > 0 means a worker exposes far "
        "more label values than expected (one log line when it starts)"
    ),
)
BUILD_INFO = Family(
    "inferwatch_build_info",
    "info",
    "",
    ("version", "revision", "pythonversion"),
    table="limits",
    help=(
        "A metric with a constant '1' labelled by version, revision and the Python "
        "version the agent runs on (the exporters' build_info convention)."
    ),
    meaning=(
        "labels `version`, `revision` (`INFERWATCH_REVISION` at build time, else "
        "`unknown`), `pythonversion`: the exporters' `*_build_info` convention"
    ),
)
KUBERNETES_WORKERS = Family(
    "inferwatch_kubernetes_workers",
    "gauge",
    "",
    ("node",),
    table="kubernetes",
    help="Workers found by Kubernetes discovery among the pods of this node.",
    meaning=(
        "label `node`: the workers discovery found among the running pods of this "
        "node (containers recognised by engine or opted in by annotations); their "
        "series follow them in and out"
    ),
)
WORKER_READY = Family(
    "inferwatch_worker_ready",
    "gauge",
    "",
    ("worker",),
    table="warmup",
    help="1 when the warm-up gate has warmed the worker (and it has not restarted since), else 0.",
    meaning=(
        "1 when the gate has warmed the worker and it has not restarted since; 0 "
        "while it waits for `/health`, warms up, or after a restart"
    ),
    flag=True,
)
WARMUP_DURATION_SECONDS = Family(
    "inferwatch_warmup_duration_seconds",
    "gauge",
    "seconds",
    ("worker",),
    table="warmup",
    help=(
        "How long the worker's last completed warm-up took, from its first warm-up "
        "request to ready."
    ),
    meaning=(
        "how long the last completed warm-up took, from its first warm-up request to "
        "ready (loading the model before `/health` answers is not counted: see "
        "`inferwatch_worker_start_time_seconds`)"
    ),
)
WARMUP_TTFT_SECONDS = Family(
    "inferwatch_warmup_ttft_seconds",
    "gauge",
    "seconds",
    ("worker", "phase"),
    table="warmup",
    help=(
        "Time to first token of the last warm-up: phase=cold is its first request, "
        "phase=warm the same request sent again at its end."
    ),
    meaning=(
        "label `phase`: `cold` is the time to first token of the warm-up's first "
        "request, `warm` the same request sent again at its end"
    ),
)
WARMUP_FAILURES = Family(
    "inferwatch_warmup_failures_total",
    "counter",
    "",
    ("worker", "reason"),
    table="warmup",
    help=(
        "Warm-up attempts that failed, by reason (connect, timeout, http_status, "
        "bad_response, no_model)."
    ),
    meaning=(
        "label `reason`: `connect`, `timeout`, `http_status`, `bad_response`, "
        "`no_model`; warm-up requests (or the `/v1/models` lookup) that failed. "
        "Waiting for `/health` is not a failure"
    ),
)
WARMUP_DEADLINE_EXCEEDED = Family(
    "inferwatch_warmup_deadline_exceeded",
    "gauge",
    "",
    ("worker",),
    table="warmup",
    help=(
        "1 when the gate opened for the worker because its deadline passed before it "
        "was warm (a warning: the worker takes traffic cold)."
    ),
    meaning=(
        "1 when the gate opened for the worker only because `warmup.deadline` passed:"
        " the worker takes traffic cold. A warning, not a state to keep"
    ),
    flag=True,
)
WARMUPS = Family(
    "inferwatch_warmups_total",
    "counter",
    "",
    ("worker",),
    table="warmup",
    help="Completed warm-ups of the worker (one at start, one after each restart).",
    meaning="completed warm-ups: one at start and one after each restart the gate noticed",
)
WARMUP_REQUESTS_TTFT_SECONDS = Family(
    "inferwatch_warmup_requests_ttft_seconds",
    "histogram",
    "seconds",
    ("worker",),
    table="warmup",
    help=(
        "Time to first token of every warm-up request the gate sent to the worker, as"
        " the agent timed it; the same requests are in the engine's own TTFT "
        "histogram, and the SLO rules subtract these."
    ),
    meaning=(
        "an extension of the contract (issue 29): the time to first token of every "
        "warm-up request the gate sent (pings, system prompts, warm probes), as the "
        "agent timed it, at every TTFT bucket boundary of the engines the agent maps "
        "(44 boundaries, `+Inf`; an SLO threshold is always one of them). Exported "
        "from zero before the first warm-up. The same requests are in the engine's "
        "own TTFT histogram (or the measuring proxy's: with `workers[].proxy` the "
        "gate sends them through it); the TTFT SLO rules subtract this one per worker"
        " and bucket, so no error budget burns on requests no user sent"
    ),
)

#: every family, in docs/metrics.md's order
FAMILIES: tuple[Family, ...] = tuple(v for v in dict(globals()).values() if isinstance(v, Family))
#: name (as documented) -> row; a counter's name without ``_total`` finds it too
BY_NAME: dict[str, Family] = {
    **{f.base: f for f in FAMILIES},
    **{f.name: f for f in FAMILIES},
}
NAMES: frozenset[str] = frozenset(f.name for f in FAMILIES)


def help_text(name: str) -> str:
    """The HELP text of ``name`` (with or without a counter's ``_total``)."""
    return BY_NAME[name].help
