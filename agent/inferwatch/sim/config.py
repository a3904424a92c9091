"""Configuration of a simulated inference worker: one frozen dataclass, validated once.

The defaults describe the field guide's worked example (section 2.3): a 7B model
quantized to INT8 (about 8 GB of weights) on an NVIDIA A10 with 24 GB, whose
``--max-num-seqs`` estimate is (24 x 0.8 - 8) / 0.5 ~ 22, rounded down to 20.
The KV cache geometry is Llama-2-7B's (32 layers, hidden size 4096, FP16 KV:
512 KiB per token), so one 16-token block is 8 MiB.

Memory is accounted as the engines do it: at start a worker reserves
``gpu_memory_utilization x`` its device's memory (the whole card, or its MIG
slice) on every GPU it runs on; the weights (split over the tensor-parallel
ranks) and the runtime overhead take their part of it, and the rest is the KV
pool, which ``num_gpu_blocks`` (when given) divides into however many blocks a
test wants without changing what NVML shows. With the defaults the pool is
13.3 GiB (1702 blocks) and NVML shows 97 % of the card used from start to stop,
idle or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from inferwatch import validate
from inferwatch.errors import ConfigError
from inferwatch.sim.gpustate import A10, GIB, MIB, GpuModel, OnSlice, parse_profile

#: What the simulator says it is, in ``/version`` and ``/v1/models``.
VLLM_VERSION = "0.33.0"


#: The cards ``--gpu-model`` knows. The H100 SXM5: 80 GB HBM3 at 3.35 TB/s, 700 W, MIG.
GPU_MODELS: dict[str, GpuModel] = {
    "a10": A10,
    "h100": GpuModel(
        name="NVIDIA H100 80GB HBM3 (simulated)",
        total_bytes=80 * GIB,
        reserved_bytes=512 * MIB,
        hbm_bytes_per_s=3.35e12,
        effective_flops=400e12,
        power_idle_watts=70.0,
        power_limit_watts=700.0,
        mig_capable=True,
    ),
}


@dataclass(frozen=True)
class MigPlacement(OnSlice):
    """``--mig GI:PROFILE``: the worker runs on GPU instance ``gpu_instance`` of its GPU."""

    gpu_instance: int
    profile: str

    @property
    def memory_bytes(self) -> int:
        return parse_profile(self.profile)[1] * GIB


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
    #: GPUs per engine: ranks 0..N-1 on GPUs gpu_index + engine x N + rank
    tensor_parallel: int = 1
    #: run on one MIG slice of GPU ``gpu_index`` instead of the whole card
    mig: MigPlacement | None = None
    version: str = VLLM_VERSION
    gpu: GpuModel = field(default_factory=GpuModel)
    profile: ModelProfile = field(default_factory=ModelProfile)

    @property
    def device_bytes(self) -> int:
        """Memory of the device one rank runs on: the card, or its MIG slice."""
        return self.mig.memory_bytes if self.mig is not None else self.gpu.total_bytes

    @property
    def reserved_per_gpu(self) -> int:
        """What the engine takes on each of its GPUs at start and holds until it stops."""
        return int(self.gpu_memory_utilization * self.device_bytes)

    @property
    def resident_per_gpu(self) -> int:
        """Weights (this rank's share) plus runtime overhead, on each GPU."""
        weights = self.profile.weights_bytes // self.tensor_parallel
        return weights + self.profile.runtime_overhead_bytes

    @property
    def kv_pool_bytes(self) -> int:
        """Bytes the KV cache gets over all ranks: each GPU's budget minus what is resident."""
        return (self.reserved_per_gpu - self.resident_per_gpu) * self.tensor_parallel

    @property
    def compute_share(self) -> float:
        """How much of the card's bandwidth and FLOPs one engine has (N GPUs, or a slice)."""
        if self.mig is not None:
            return self.mig.share
        return float(self.tensor_parallel)

    @property
    def blocks(self) -> int:
        """The number of KV blocks per engine: the flag, else what the memory budget holds."""
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        return self.kv_pool_bytes // (self.profile.kv_bytes_per_token * self.block_size)

    def validate(self) -> None:
        """Raise ConfigError (one line, naming the flag) on the first bad value."""
        src = "inferwatch simulate"
        validate.count(self.port, src, "--port", minimum=0)
        validate.count(self.data_parallel, src, "--data-parallel")
        validate.count(self.max_num_seqs, src, "--max-num-seqs")
        validate.count(self.max_model_len, src, "--max-model-len")
        validate.count(self.max_num_batched_tokens, src, "--max-num-batched-tokens")
        validate.count(self.block_size, src, "--block-size")
        if self.num_gpu_blocks is not None:
            validate.count(self.num_gpu_blocks, src, "--num-gpu-blocks")
        validate.count(self.cold_start_requests, src, "--cold-start-requests", minimum=0)
        validate.count(self.gpu_index, src, "--gpu-index", minimum=0)
        validate.count(self.tensor_parallel, src, "--tensor-parallel")
        if self.mig is not None:
            self._validate_mig(src, self.mig)
        if self.max_queued_requests is not None:
            validate.count(self.max_queued_requests, src, "--max-queued-requests", minimum=0)
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
                f"a budget above the {self.resident_per_gpu / GIB:.1f} GiB of weights and "
                "runtime overhead per GPU",
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

    def _validate_mig(self, src: str, mig: MigPlacement) -> None:
        try:
            parse_profile(mig.profile)
        except ValueError:
            raise ConfigError(
                src, "--mig", "GI:PROFILE with a profile like 3g.40gb", mig.profile
            ) from None
        validate.count(mig.gpu_instance, src, "--mig", minimum=0)
        if not self.gpu.mig_capable:
            raise ConfigError(
                src, "--gpu-model", "a MIG-capable card for --mig (h100)", self.gpu.name
            )
        if mig.memory_bytes > self.gpu.total_bytes:
            raise ConfigError(
                src,
                "--mig",
                f"a slice within the card's {self.gpu.total_bytes // GIB} GB",
                mig.profile,
            )
        if self.tensor_parallel != 1 or self.data_parallel != 1:
            raise ConfigError(
                src,
                "--mig",
                "a single engine on a single slice (no --tensor-parallel/--data-parallel)",
                f"{mig.gpu_instance}:{mig.profile}",
            )


def parse_mig(text: str) -> MigPlacement:
    """``"1:3g.40gb"`` -> MigPlacement(1, "3g.40gb"); ConfigError naming --mig otherwise."""
    gi, sep, profile = text.partition(":")
    if not sep or not gi.strip().isdigit():
        raise ConfigError("inferwatch simulate", "--mig", "GI:PROFILE, e.g. 1:3g.40gb", text)
    return MigPlacement(int(gi), profile.strip())
