"""KV-cache and batch-size arithmetic behind ``inferwatch advise capacity``.

Pure functions over numbers (and one reader of a model's ``config.json``), so
the arithmetic is tested without I/O. Sizes are bytes inside; the command line
takes and shows GiB, the unit the field guide's "GB" stands for on a GPU (an
A10's "24 GB" is 24 GiB).

The field guide's rule (section 2.3)::

    max-num-seqs ~= (VRAM x 0.8 - weights) / KV per sequence

with its worked example: a 7B model in INT8 (8 GB) on a 24 GB A10 at 0.5 GB of
KV per sequence gives (24 x 0.8 - 8) / 0.5 = 22.4, "take 20 for headroom".
KV per sequence is 2 (K and V) x layers x KV heads x head dim x bytes per
element x tokens. ``--max-num-batched-tokens`` sits in the guide's 4096-8192
band for a 7B model on an A10, never above what the batch can use (max-num-seqs
x context) or what the KV budget holds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inferwatch.errors import ConfigError, UsageError
from inferwatch.pack import fmt

GIB = 1024**3

#: share of the card the guide's rule lets weights + KV take (2.3)
USABLE_SHARE = 0.8
#: the guide rounds its estimate of 22.4 down to 20: about a tenth kept back
HEADROOM = 0.10
#: the guide's --max-num-batched-tokens band for a 7B model on an A10 (2.3)
BATCHED_TOKENS_BAND = (4096, 8192)

#: bytes per element of a dtype name as config.json (torch_dtype) or vLLM
#: (--kv-cache-dtype) spell it
DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "fp32": 4.0,
    "float": 4.0,
    "float16": 2.0,
    "fp16": 2.0,
    "half": 2.0,
    "bfloat16": 2.0,
    "bf16": 2.0,
    "int8": 1.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "float8_e4m3fn": 1.0,
    "float8_e5m2": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}


def dtype_bytes(name: str, source: str, key: str) -> float:
    """Bytes per element of ``name`` (``float16``, ``torch.bfloat16``, ``fp8``...)."""
    clean = name.strip().lower().removeprefix("torch.")
    if clean not in DTYPE_BYTES:
        raise ConfigError(source, key, "a dtype such as float16, bfloat16, float32, fp8", name)
    return DTYPE_BYTES[clean]


@dataclass(frozen=True)
class ModelShape:
    """What the KV size and the weights estimate need from a model's config.json."""

    layers: int
    kv_heads: int
    head_dim: int
    #: bytes per element of the weights (torch_dtype)
    dtype_bytes: float
    dtype: str = "float16"
    attention_heads: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    tied_embeddings: bool = False
    #: MLA (DeepSeek V2/V3): one latent of kv_lora_rank + rope dims per token and layer
    mla_dims: int | None = None
    #: mixture of experts: the dense weights estimate does not apply
    moe: bool = False

    def kv_elements_per_token(self) -> int:
        """Elements of KV cache one token takes across all layers."""
        if self.mla_dims is not None:
            return self.layers * self.mla_dims
        return 2 * self.layers * self.kv_heads * self.head_dim

    def parameters(self) -> int | None:
        """Parameter count of a dense decoder (embeddings + attention + gated MLP), or None.

        Attention: Q and O are hidden x hidden, K and V hidden x (KV heads x head
        dim); the MLP has three hidden x intermediate matrices (gate, up, down).
        Norms and biases are left out (well under 0.1 %).
        """
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        if self.moe or self.mla_dims is not None or not (h and i and v):
            return None
        q_heads = self.attention_heads or self.kv_heads
        attention = 2 * h * q_heads * self.head_dim + 2 * h * self.kv_heads * self.head_dim
        mlp = 3 * h * i
        embeddings = v * h * (1 if self.tied_embeddings else 2)
        return self.layers * (attention + mlp) + embeddings


def _int_key(cfg: Mapping[str, Any], keys: tuple[str, ...], source: str) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(source, key, "a whole number greater than zero", value)
        return value
    return None


def shape_from_config(cfg: Mapping[str, Any], source: str = "config.json") -> ModelShape:
    """The model's shape from a Hugging Face ``config.json`` mapping.

    Reads num_hidden_layers, num_key_value_heads (default: num_attention_heads),
    head_dim (default: hidden_size / num_attention_heads) and torch_dtype (or
    ``dtype``); a multimodal config's ``text_config`` when the top level has no
    layers; MLA models (kv_lora_rank) store one latent per token and layer.
    """
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        cfg = {**cfg["text_config"], **{k: v for k, v in cfg.items() if k == "torch_dtype"}}
    layers = _int_key(cfg, ("num_hidden_layers", "n_layer", "num_layers"), source)
    if layers is None:
        raise ConfigError(source, "num_hidden_layers", "the number of layers (required)")
    heads = _int_key(cfg, ("num_attention_heads", "n_head"), source)
    kv_heads = _int_key(cfg, ("num_key_value_heads", "num_kv_heads", "n_head_kv"), source)
    if kv_heads is None and cfg.get("multi_query") is True:
        kv_heads = 1
    kv_heads = kv_heads or heads
    if kv_heads is None:
        raise ConfigError(
            source, "num_key_value_heads", "KV heads or num_attention_heads (one is required)"
        )
    hidden = _int_key(cfg, ("hidden_size", "n_embd", "d_model"), source)
    head_dim = _int_key(cfg, ("head_dim",), source)
    if head_dim is None:
        if hidden is None or heads is None:
            raise ConfigError(
                source, "head_dim", "head_dim, or hidden_size and num_attention_heads"
            )
        if hidden % heads:
            raise ConfigError(
                source, "hidden_size", f"a multiple of num_attention_heads ({heads})", hidden
            )
        head_dim = hidden // heads
    dtype_name = cfg.get("torch_dtype") or cfg.get("dtype") or "float16"
    if not isinstance(dtype_name, str):
        raise ConfigError(source, "torch_dtype", "a dtype name such as bfloat16", dtype_name)
    key = "torch_dtype" if "torch_dtype" in cfg else "dtype"
    mla = None
    rank = _int_key(cfg, ("kv_lora_rank",), source)
    if rank is not None:
        mla = rank + (_int_key(cfg, ("qk_rope_head_dim",), source) or 0)
    moe = any(
        cfg.get(k)
        for k in ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts")
    )
    return ModelShape(
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype_bytes=dtype_bytes(dtype_name, source, key),
        dtype=dtype_name.removeprefix("torch."),
        attention_heads=heads,
        hidden_size=hidden,
        intermediate_size=_int_key(cfg, ("intermediate_size", "n_inner"), source),
        vocab_size=_int_key(cfg, ("vocab_size",), source),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        mla_dims=mla,
        moe=bool(moe),
    )


def read_model_config(path: str) -> ModelShape:
    """:func:`shape_from_config` of a config.json file; unreadable or bad JSON: ConfigError."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ConfigError(
            path, "(file)", "a readable config.json", exc.strerror or str(exc)
        ) from None
    except ValueError as exc:
        raise ConfigError(path, "(file)", "valid JSON", str(exc).split(":")[0]) from None
    if not isinstance(data, Mapping):
        raise ConfigError(path, "(top level)", "a JSON object", type(data).__name__)
    return shape_from_config(data, path)


# --------------------------------------------------------------------------- arithmetic


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, element_bytes: float) -> float:
    """2 (K and V) x layers x KV heads x head dim x bytes per element."""
    return 2.0 * layers * kv_heads * head_dim * element_bytes


def max_num_seqs_estimate(
    vram_bytes: float, weights_bytes: float, kv_per_sequence: float, usable: float = USABLE_SHARE
) -> float:
    """The guide's (VRAM x 0.8 - weights) / KV per sequence; may be <= 0 when nothing fits."""
    if kv_per_sequence <= 0:
        raise ValueError("KV per sequence must be positive")
    return (vram_bytes * usable - weights_bytes) / kv_per_sequence


def suggested_max_num_seqs(estimate: float, headroom: float = HEADROOM) -> int:
    """A little below the estimate, as the guide takes 20 for 22.4: floor(estimate x 0.9)."""
    return max(0, math.floor(estimate * (1.0 - headroom) + 1e-9))


@dataclass(frozen=True)
class BatchedTokens:
    value: int
    #: the bounds that applied, for the explanation: (name, tokens)
    bounds: tuple[tuple[str, int], ...]
    reason: str


def suggested_batched_tokens(
    max_num_seqs: int, context_tokens: int | None, kv_token_capacity: int | None
) -> BatchedTokens:
    """``--max-num-batched-tokens``: the top of the guide's 4096-8192 band that fits.

    A step cannot use more tokens than the batch holds (max-num-seqs x context),
    and the tokens of one step need KV room (the KV budget in tokens). Within
    those bounds the largest of 8192 and 4096 is taken; below 4096 the largest
    power of two under the bound.
    """
    low, high = BATCHED_TOKENS_BAND
    bounds: list[tuple[str, int]] = []
    if context_tokens is not None and max_num_seqs > 0:
        bounds.append(("max-num-seqs x context", max_num_seqs * context_tokens))
    if kv_token_capacity is not None:
        bounds.append(("KV budget in tokens", kv_token_capacity))
    limit = min((b for _, b in bounds), default=None)
    if limit is None:
        why = "top of the guide's 4096-8192 band; give --context and a model shape to check it"
        return BatchedTokens(high, (), why)
    if limit >= high:
        return BatchedTokens(high, tuple(bounds), "top of the guide's 4096-8192 band")
    if limit >= low:
        return BatchedTokens(low, tuple(bounds), "the guide's band, lowered to fit the bound")
    value = 1 << max(0, math.floor(math.log2(max(1, limit))))
    return BatchedTokens(value, tuple(bounds), "below the guide's band: the bound is smaller")


@dataclass(frozen=True)
class CapacityInput:
    vram_bytes: float
    weights_bytes: float
    #: where the weights figure came from ("given", "estimated from config.json")
    weights_source: str
    kv_per_sequence: float
    context_tokens: int | None
    kv_per_token: float | None
    usable: float = USABLE_SHARE
    shape: ModelShape | None = None
    kv_dtype: str | None = None
    kv_element_bytes: float | None = None


@dataclass(frozen=True)
class CapacityPlan:
    """The answer to one capacity question: the VRAM budget, the concurrent sequences it
    holds, and each step of the arithmetic that led there."""

    inputs: CapacityInput
    budget_bytes: float
    estimate: float
    max_num_seqs: int
    batched: BatchedTokens
    #: the arithmetic, one line per step, for people
    steps: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        i = self.inputs
        out: dict[str, Any] = {
            "gpu_memory_gib": i.vram_bytes / GIB,
            "usable_share": i.usable,
            "weights_gib": i.weights_bytes / GIB,
            "weights_source": i.weights_source,
            "kv_bytes_per_token": i.kv_per_token,
            "context_tokens": i.context_tokens,
            "kv_per_sequence_gib": i.kv_per_sequence / GIB,
            "kv_budget_gib": self.budget_bytes / GIB,
            "max_num_seqs_estimate": self.estimate,
            "suggested": {
                "max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.batched.value,
            },
            "batched_tokens_bounds": dict(self.batched.bounds),
            "steps": list(self.steps),
        }
        if i.kv_dtype is not None:
            out["kv_cache_dtype"] = i.kv_dtype
        return out

    def flags(self) -> str:
        return f"--max-num-seqs {self.max_num_seqs} --max-num-batched-tokens {self.batched.value}"


def plan_capacity(inp: CapacityInput) -> CapacityPlan:
    """Apply the guide's rule to ``inp`` and write down each step of the arithmetic."""
    if inp.vram_bytes <= 0:
        raise UsageError("--gpu-memory: expected a size greater than zero")
    if inp.kv_per_sequence <= 0:
        raise UsageError("KV per sequence: expected a size greater than zero")
    steps: list[str] = []
    shape = inp.shape
    if shape is not None and inp.kv_per_token is not None and inp.kv_element_bytes is not None:
        if shape.mla_dims is not None:
            steps.append(
                f"KV per token    = {shape.layers} layers x {shape.mla_dims} latent dims (MLA) x "
                f"{inp.kv_element_bytes:g} B ({inp.kv_dtype}) = {inp.kv_per_token:,.0f} B"
            )
        else:
            steps.append(
                f"KV per token    = 2 (K, V) x {shape.layers} layers x {shape.kv_heads} KV heads"
                f" x {shape.head_dim} head dim x {inp.kv_element_bytes:g} B ({inp.kv_dtype})"
                f" = {inp.kv_per_token:,.0f} B"
            )
    if inp.kv_per_token is not None and inp.context_tokens is not None:
        steps.append(
            f"KV per sequence = {inp.kv_per_token:,.0f} B x {inp.context_tokens:,} tokens"
            f" = {fmt.gib(inp.kv_per_sequence, 2)}"
        )
    else:
        steps.append(f"KV per sequence = {fmt.gib(inp.kv_per_sequence, 2)} (given)")
    budget = inp.vram_bytes * inp.usable - inp.weights_bytes
    steps.append(
        f"KV budget       = {fmt.gib(inp.vram_bytes, 2)} x {inp.usable:g} - {fmt.gib(inp.weights_bytes, 2)}"
        f" weights ({inp.weights_source}) = {fmt.gib(budget, 2)}"
    )
    if budget <= 0:
        raise UsageError(
            f"the weights ({fmt.gib(inp.weights_bytes, 2)}) leave no KV room in {inp.usable:g} x "
            f"{fmt.gib(inp.vram_bytes, 2)}: a bigger GPU, tensor parallelism or a quantized model"
        )
    estimate = max_num_seqs_estimate(
        inp.vram_bytes, inp.weights_bytes, inp.kv_per_sequence, inp.usable
    )
    steps.append(
        f"estimate        = {fmt.gib(budget, 2)} / {fmt.gib(inp.kv_per_sequence, 2)} = {estimate:.1f} sequences"
    )
    seqs = suggested_max_num_seqs(estimate)
    if seqs < 1:
        raise UsageError(
            f"not even one sequence of {fmt.gib(inp.kv_per_sequence, 2)} fits the KV budget of "
            f"{fmt.gib(budget, 2)}: shorten the context (--max-model-len) or use an FP8 KV cache"
        )
    steps.append(
        f"--max-num-seqs  = floor({estimate:.1f} x {1 - HEADROOM:g}) = {seqs}"
        " (a tenth kept back, as the guide takes 20 for 22.4)"
    )
    capacity = int(budget // inp.kv_per_token) if inp.kv_per_token else None
    batched = suggested_batched_tokens(seqs, inp.context_tokens, capacity)
    bound_text = "".join(f"; {name} {value:,}" for name, value in batched.bounds)
    steps.append(f"--max-num-batched-tokens = {batched.value} ({batched.reason}{bound_text})")
    return CapacityPlan(inp, budget, estimate, seqs, batched, tuple(steps))


def parse_size(text: str, source: str, key: str) -> float:
    """Bytes from ``24`` (GiB), ``24GiB``, ``24GB`` (10^9), ``512MiB``, ``0.5``..."""
    units = {
        "": GIB,
        "g": GIB,
        "gi": GIB,
        "gib": GIB,
        "gb": 1e9,
        "m": 1024**2,
        "mi": 1024**2,
        "mib": 1024**2,
        "mb": 1e6,
        "t": 1024**4,
        "ti": 1024**4,
        "tib": 1024**4,
        "tb": 1e12,
        "k": 1024,
        "kib": 1024,
        "kb": 1e3,
    }
    raw = text.strip().lower().replace(" ", "")
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number) :]
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if unit not in units or not math.isfinite(value) or value < 0:
        raise ConfigError(source, key, "a size such as 24 (GiB), 24GiB, 80GB or 512MiB", text)
    return value * units[unit]
