"""Configuration of a simulated inference worker: one frozen dataclass, validated once.

The defaults describe the field guide's worked example (section 2.3): a 7B model
quantized to INT8 (about 8 GB of weights) on an NVIDIA A10 with 24 GB, whose
``--max-num-seqs`` estimate is (24 x 0.8 - 8) / 0.5 ~ 22, rounded down to 20.
The KV cache geometry is Llama-2-7B's (32 layers, hidden size 4096, FP16 KV:
512 KiB per token), so one 16-token block is 8 MiB.

Memory is accounted so that the VRAM picture is a 24 GB card whatever block count
a test picks: the KV pool is ``gpu_memory_utilization x total - weights -
runtime overhead`` and each block is that pool divided by ``num_gpu_blocks``.
With the defaults the pool is 13.3 GiB (1702 blocks); an idle worker shows
42 % VRAM and a full KV cache 97 %, so overload (a full cache and a growing
queue) crosses the 92 % threshold of ALERTS.md together with the queue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from inferwatch.errors import ConfigError

GIB = 1024**3
MIB = 1024**2

#: What the simulator says it is, in ``/version`` and ``/v1/models``.
VLLM_VERSION = "0.33.0"


@dataclass(frozen=True)
class GpuModel:
    """The simulated card: an NVIDIA A10 (24 GB, 600 GB/s, 150 W)."""

    name: str = "NVIDIA A10 (simulated)"
    total_bytes: int = 24 * GIB
    reserved_bytes: int = 512 * MIB
    #: memory bandwidth: every decode step streams the weights and the KV it reads
    hbm_bytes_per_s: float = 600e9
    #: dense throughput actually reached by prefill/decode matmuls (about half of peak)
    effective_flops: float = 70e12
    power_idle_watts: float = 55.0
    power_limit_watts: float = 150.0
    #: report GPM (SM active, tensor, DRAM) fields; real Ampere cards do not have GPM
    gpm: bool = True


@dataclass(frozen=True)
class ModelProfile:
    """The simulated model: a 7B decoder, INT8 weights, FP16 KV cache."""

    params: float = 7e9
    weights_bytes: int = 8 * GIB
    #: CUDA context, activations and CUDA graphs: resident whether busy or not
    runtime_overhead_bytes: int = 3 * GIB // 2
    #: Llama-2-7B: 32 layers x (K and V) x 4096 x 2 bytes
    kv_bytes_per_token: int = 512 * 1024


@dataclass(frozen=True)
class SimConfig:
    """Everything `inferwatch simulate` takes; durations are in unscaled seconds."""

    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "sim-llama-2-7b-int8"
    #: exposition writer (``sim/expo/<engine>.py``) and its format
    engine: str = "vllm"
    format: str = "v1"
    data_parallel: int = 1
    max_num_seqs: int = 20
    max_model_len: int = 4096
    #: chunked-prefill token budget per engine step (vLLM's V1 default for this GPU class)
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    #: None: derived from the memory budget (like vLLM's profiling run)
    num_gpu_blocks: int | None = None
    #: the guide's A10 example (section 3.3) runs at 0.95; vLLM's own default is 0.92
    gpu_memory_utilization: float = 0.95
    enable_prefix_caching: bool = True
    cache_dtype: str = "auto"
    #: waiting requests above which a new request gets HTTP 503 (None: unlimited)
    max_queued_requests: int | None = None
    disable_log_stats: bool = False
    #: the first N requests after start pay a warm-up delay (guide 5.2: 4.8 s vs 180 ms)
    cold_start_requests: int = 3
    cold_start_seconds: float = 4.6
    #: every simulated duration is multiplied by this (0.1: ten times faster)
    time_scale: float = 1.0
    #: fixed cost of one engine step (scheduler, sampling, Python)
    step_overhead_seconds: float = 0.003
    seed: int = 0
    gpu_state_dir: str | None = None
    gpu_index: int = 0
    version: str = VLLM_VERSION
    gpu: GpuModel = field(default_factory=GpuModel)
    profile: ModelProfile = field(default_factory=ModelProfile)

    @property
    def kv_pool_bytes(self) -> int:
        """Bytes the KV cache gets: the utilization budget minus what is always resident."""
        budget = self.gpu_memory_utilization * self.gpu.total_bytes
        resident = self.profile.weights_bytes + self.profile.runtime_overhead_bytes
        return int(budget - resident)

    @property
    def blocks(self) -> int:
        """The number of KV blocks per engine: the flag, else what the memory budget holds."""
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        return self.kv_pool_bytes // (self.profile.kv_bytes_per_token * self.block_size)

    @property
    def block_bytes(self) -> float:
        """VRAM one block stands for (the pool split evenly, see the module docstring)."""
        return self.kv_pool_bytes / self.blocks

    @property
    def resident_bytes(self) -> int:
        return self.profile.weights_bytes + self.profile.runtime_overhead_bytes

    def validate(self) -> None:
        """Raise ConfigError (one line, naming the flag) on the first bad value."""
        src = "inferwatch simulate"
        _positive_int(src, "--port", self.port, minimum=0)
        _positive_int(src, "--data-parallel", self.data_parallel)
        _positive_int(src, "--max-num-seqs", self.max_num_seqs)
        _positive_int(src, "--max-model-len", self.max_model_len)
        _positive_int(src, "--max-num-batched-tokens", self.max_num_batched_tokens)
        _positive_int(src, "--block-size", self.block_size)
        if self.num_gpu_blocks is not None:
            _positive_int(src, "--num-gpu-blocks", self.num_gpu_blocks)
        _positive_int(src, "--cold-start-requests", self.cold_start_requests, minimum=0)
        _positive_int(src, "--gpu-index", self.gpu_index, minimum=0)
        if self.max_queued_requests is not None:
            _positive_int(src, "--max-queued-requests", self.max_queued_requests, minimum=0)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(
                src, "--gpu-memory-utilization", "a fraction in (0, 1]", self.gpu_memory_utilization
            )
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ConfigError(src, "--time-scale", "a number > 0", self.time_scale)
        if not (math.isfinite(self.cold_start_seconds) and self.cold_start_seconds >= 0):
            raise ConfigError(src, "--cold-start-seconds", "a number >= 0", self.cold_start_seconds)
        if not self.model.strip():
            raise ConfigError(src, "--model", "a non-empty served model name", self.model)
        if self.kv_pool_bytes <= 0:
            raise ConfigError(
                src,
                "--gpu-memory-utilization",
                f"a budget above the {self.resident_bytes / GIB:.1f} GiB of weights and "
                "runtime overhead",
                self.gpu_memory_utilization,
            )
        if self.blocks < 1:
            raise ConfigError(src, "--num-gpu-blocks", "at least one KV block", self.blocks)
        capacity = self.blocks * self.block_size
        if self.max_model_len > capacity:
            # vLLM refuses to start in this case too: one request could never fit.
            raise ConfigError(
                src,
                "--max-model-len",
                f"at most the {capacity} tokens the KV cache holds "
                f"({self.blocks} blocks x {self.block_size})",
                self.max_model_len,
            )
        if self.format == "v0" and self.data_parallel > 1:
            raise ConfigError(
                src,
                "--data-parallel",
                "1 with --format v0 (V0 series have no engine label)",
                self.data_parallel,
            )


def _positive_int(source: str, key: str, value: int, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(source, key, f"an integer >= {minimum}", value)
