"""The KV / max-num-seqs arithmetic of `inferwatch advise capacity`, against hand-computed cases."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.support.proc import inferwatch_cmd

from inferwatch.advise.capacity import (
    GIB,
    CapacityInput,
    kv_bytes_per_token,
    max_num_seqs_estimate,
    parse_size,
    plan_capacity,
    read_model_config,
    shape_from_config,
    suggested_batched_tokens,
    suggested_max_num_seqs,
)
from inferwatch.errors import ConfigError, UsageError

# Llama-2-7B's config.json (the fields that matter; public model card values)
LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "torch_dtype": "float16",
    "tie_word_embeddings": False,
}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        inferwatch_cmd("advise", "capacity", *args),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_guides_worked_example_gives_22_and_suggests_20() -> None:
    # (24 x 0.8 - 8) / 0.5 = 11.2 / 0.5 = 22.4; the guide: "about 22, take 20"
    estimate = max_num_seqs_estimate(24 * GIB, 8 * GIB, 0.5 * GIB)
    assert estimate == pytest.approx(22.4)
    assert suggested_max_num_seqs(estimate) == 20


def test_kv_per_token_of_llama2_7b_in_fp16() -> None:
    # 2 x 32 layers x 32 heads x 128 dims x 2 bytes = 524,288 B = 512 KiB per token
    assert kv_bytes_per_token(32, 32, 128, 2) == 524_288
    # so 1,024 tokens are 0.5 GiB: the guide's "0.5 GB per sequence"
    assert kv_bytes_per_token(32, 32, 128, 2) * 1024 == 0.5 * GIB


def test_shape_and_weights_from_a_llama2_config() -> None:
    shape = shape_from_config(LLAMA2_7B)
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (32, 32, 128)
    assert shape.dtype_bytes == 2
    # attention 4 x 4096^2 + MLP 3 x 4096 x 11008 per layer, x 32, + 2 x 32000 x 4096
    per_layer = 4 * 4096 * 4096 + 3 * 4096 * 11008
    assert shape.parameters() == 32 * per_layer + 2 * 32000 * 4096 == 6_738_149_376


def test_llama2_7b_fp16_on_an_80_gib_gpu_at_4096_tokens() -> None:
    shape = shape_from_config(LLAMA2_7B)
    per_token = kv_bytes_per_token(32, 32, 128, 2)
    weights = 6_738_149_376 * 2  # 12.55 GiB
    plan = plan_capacity(
        CapacityInput(
            vram_bytes=80 * GIB,
            weights_bytes=weights,
            weights_source="estimated",
            kv_per_sequence=per_token * 4096,  # 2 GiB
            context_tokens=4096,
            kv_per_token=per_token,
            shape=shape,
            kv_dtype="float16",
            kv_element_bytes=2,
        )
    )
    # (80 x 0.8 - 12.5503) / 2 = 51.4497 / 2 = 25.72 -> floor(25.72 x 0.9) = floor(23.15) = 23
    assert plan.estimate == pytest.approx((64 * GIB - weights) / (2 * GIB))
    assert plan.estimate == pytest.approx(25.72, abs=0.01)
    assert plan.max_num_seqs == 23
    # bounds 23 x 4096 = 94,208 tokens and 51.45 GiB / 512 KiB = 105,368 tokens: both above 8192
    assert dict(plan.batched.bounds) == {
        "max-num-seqs x context": 94_208,
        "KV budget in tokens": 105_368,
    }
    assert plan.batched.value == 8192
    assert "524,288 B" in plan.steps[0] and "= 23" in "\n".join(plan.steps)


def test_gqa_and_explicit_head_dim_and_fp8_kv() -> None:
    # a Llama-3-8B-like shape: 8 KV heads of 128 dims; FP8 halves the bytes
    cfg = {**LLAMA2_7B, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"}
    shape = shape_from_config(cfg)
    assert kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 2) == 131_072
    assert kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 1) == 65_536


def test_mla_models_store_one_latent_per_token_and_layer() -> None:
    # DeepSeek-V3-like: 61 layers x (512 + 64) latent dims x 2 bytes = 70,272 B per token
    cfg = {
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "hidden_size": 7168,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "n_routed_experts": 256,
        "torch_dtype": "bfloat16",
    }
    shape = shape_from_config(cfg)
    assert shape.kv_elements_per_token() * 2 == 70_272
    assert shape.parameters() is None  # MoE: no dense estimate, --weights is required


def test_batched_tokens_fall_below_the_band_when_memory_is_short() -> None:
    # the batch holds 4 x 512 = 2048 tokens: a step cannot use more
    small = suggested_batched_tokens(4, 512, kv_token_capacity=100_000)
    assert small.value == 2048
    # 6000 tokens of room: inside the band, 4096
    assert suggested_batched_tokens(20, 1024, kv_token_capacity=6000).value == 4096
    # nothing known: the top of the band
    assert suggested_batched_tokens(20, None, None).value == 8192


def test_weights_that_leave_no_room_are_an_error() -> None:
    with pytest.raises(UsageError, match="leave no KV room"):
        plan_capacity(
            CapacityInput(24 * GIB, 20 * GIB, "given", 0.5 * GIB, None, None),
        )


def test_config_json_errors_name_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32}))
    with pytest.raises(ConfigError) as err:
        read_model_config(str(path))
    assert str(err.value).startswith(f"{path}: num_hidden_layers: expected")
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="valid JSON"):
        read_model_config(str(path))
    with pytest.raises(ConfigError, match="torch_dtype"):
        shape_from_config({**LLAMA2_7B, "torch_dtype": "float17"}, "c.json")


def test_sizes_read_gib_by_default() -> None:
    assert parse_size("24", "x", "--gpu-memory") == 24 * GIB
    assert parse_size("80GB", "x", "--gpu-memory") == 80e9
    assert parse_size("512MiB", "x", "--gpu-memory") == 0.5 * GIB
    with pytest.raises(ConfigError, match="--gpu-memory: expected a size"):
        parse_size("lots", "x", "--gpu-memory")


def test_cli_shows_the_arithmetic_of_the_guides_example() -> None:
    done = run_cli("--gpu-memory", "24", "--weights", "8", "--kv-per-seq", "0.5")
    assert done.returncode == 0, done.stderr
    assert "24.00 GiB x 0.8 - 8.00 GiB" in done.stdout
    assert "= 22.4 sequences" in done.stdout
    assert "--max-num-seqs 20 --max-num-batched-tokens 8192" in done.stdout


def test_cli_json_from_a_config_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA2_7B))
    done = run_cli(
        "--gpu-memory", "24", "--weights", "8", "--model-config", str(path),
        "--context", "1024", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    # 512 KiB x 1024 tokens = 0.5 GiB: the guide's example again, now from the shape
    assert doc["kv_per_sequence_gib"] == pytest.approx(0.5)
    assert doc["max_num_seqs_estimate"] == pytest.approx(22.4)
    assert doc["suggested"] == {"max_num_seqs": 20, "max_num_batched_tokens": 8192}


def test_cli_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_cli("--gpu-memory", "24", "--weights", "8")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "--kv-per-seq" in done.stderr
    missing = tmp_path / "absent.json"
    done = run_cli("--gpu-memory", "24", "--model-config", str(missing), "--context", "10")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"inferwatch advise: error: {missing}: (file): expected a readable config.json, "
        "got 'No such file or directory'"
    ]
