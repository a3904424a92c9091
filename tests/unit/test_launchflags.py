"""Launch command parsing: each engine's command line, in the forms people type."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferwatch.engines import launchflags
from inferwatch.engines.launchflags import ENGINE_FLAGS, LaunchInfo, parse_human_int, parse_launch


def parse(*argv: str, environ: dict[str, str] | None = None) -> LaunchInfo:
    info = parse_launch(list(argv), environ=environ)
    assert info is not None, f"not recognized: {argv}"
    return info


def parse_cmd(command: str, *head: str) -> LaunchInfo:
    """``parse`` of a command line as typed (split on spaces), after ``head``."""
    return parse(*head, *command.split())


def assert_fields(info: LaunchInfo, **want: object) -> None:
    """Each named field of ``info`` equals its value (all shown at once when some do not)."""
    assert {name: getattr(info, name) for name in want} == want


# -- vLLM --------------------------------------------------------------------


def test_vllm_serve_console_script_as_psutil_sees_it() -> None:
    info = parse_cmd(
        "/usr/bin/python3 /usr/local/bin/vllm serve meta-llama/Llama-3.1-8B-Instruct"
        " --max-num-seqs 32 --gpu-memory-utilization 0.85 --max-model-len 16384"
        " --max-num-batched-tokens 8192 --enable-prefix-caching --port 8001 -tp 2 -dp 4"
    )
    assert info == LaunchInfo(
        engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", port=8001,
        max_num_seqs=32, max_model_len=16384, max_num_batched_tokens=8192,
        gpu_memory_utilization=0.85, prefix_caching="true", tensor_parallel_size=2,
        data_parallel_size=4, extra=info.extra,
    )  # fmt: skip
    assert dict(info.extra) == {}


def test_vllm_equals_form_underscores_and_no_prefix_caching() -> None:
    info = parse_cmd(
        "vllm serve Qwen/Qwen2.5-7B --max_num_seqs=64 --port=9000 --no-enable-prefix-caching"
        " --tensor_parallel_size=8 --host=0.0.0.0"
    )
    assert_fields(info, max_num_seqs=64, port=9000, prefix_caching="false", tensor_parallel_size=8)
    assert info.extra["host"] == "0.0.0.0"


def test_vllm_api_server_module_takes_model_from_flag() -> None:
    info = parse_cmd(
        "python3 -u -m vllm.entrypoints.openai.api_server --model /models/llama --max-num-seqs 16"
    )
    assert_fields(
        info, engine="vllm", model="/models/llama", max_num_seqs=16, prefix_caching="unknown"
    )


def test_vllm_api_server_run_as_a_script_path() -> None:
    info = parse_cmd(
        "python /opt/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/api_server.py"
        " --model=m"
    )
    assert (info.engine, info.model) == ("vllm", "m")


def test_vllm_served_model_name_takes_several_names() -> None:
    info = parse_cmd("vllm serve org/model --served-model-name chat chat-v2 --max-num-seqs 8")
    assert info.served_model_name == "chat"
    assert info.extra["served_model_names"] == "chat,chat-v2"
    assert info.label_model == "chat"
    assert info.max_num_seqs == 8


def test_vllm_human_readable_lengths() -> None:
    info = parse("vllm", "serve", "m", "--max-model-len", "32k", "--max-num-batched-tokens", "2K")
    assert info.max_model_len == 32000
    assert info.max_num_batched_tokens == 2048


def test_vllm_serve_with_model_as_option_before_flags() -> None:
    info = parse("vllm", "serve", "--model", "m", "--max-num-seqs", "4")
    assert info.model == "m"
    assert info.max_num_seqs == 4


def test_vllm_other_subcommands_are_not_servers() -> None:
    assert parse_launch(["vllm", "bench", "serve", "--port", "8000"]) is None
    assert parse_launch(["/usr/bin/python3", "/usr/local/bin/vllm"]) is None


def test_no_default_is_ever_assumed() -> None:
    info = parse("vllm", "serve", "m")
    assert info.max_num_seqs is None
    assert info.max_model_len is None
    assert info.gpu_memory_utilization is None
    assert info.port is None
    assert info.prefix_caching == "unknown"


def test_bad_values_are_dropped_not_guessed() -> None:
    info = parse_cmd(
        "vllm serve m --max-num-seqs many --gpu-memory-utilization 1.5 --port 70000"
        " --max-model-len auto"
    )
    assert info.max_num_seqs is None
    assert info.gpu_memory_utilization is None
    assert info.port is None
    assert info.max_model_len is None


def test_last_occurrence_wins_as_in_argparse() -> None:
    assert (
        parse("vllm", "serve", "m", "--max-num-seqs", "8", "--max-num-seqs", "16").max_num_seqs
        == 16
    )


# -- SGLang ------------------------------------------------------------------


def test_sglang_launch_server() -> None:
    info = parse_cmd(
        "python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct"
        " --max-running-requests 48 --port 30000 --tp-size 2 --dp-size 2 --context-length 8k"
        " --mem-fraction-static 0.8 --disable-radix-cache --enable-metrics"
        " --chunked-prefill-size 4096"
    )
    assert_fields(
        info, engine="sglang", model="Qwen/Qwen2.5-7B-Instruct", max_num_seqs=48, port=30000
    )
    assert (info.tensor_parallel_size, info.data_parallel_size) == (2, 2)
    assert_fields(info, max_model_len=8000, gpu_memory_utilization=0.8, prefix_caching="false")
    assert info.extra["enable_metrics"] == "true"
    assert info.extra["chunked_prefill_size"] == "4096"
    # no vLLM-style per-step token budget is claimed for SGLang
    assert info.max_num_batched_tokens is None


def test_sglang_cli_serve_and_aliases() -> None:
    info = parse("sglang", "serve", "--model", "m", "--tensor-parallel-size", "4")
    assert (info.engine, info.model, info.tensor_parallel_size) == ("sglang", "m", 4)
    assert info.prefix_caching == "unknown"
    assert parse_launch(["sglang", "version"]) is None


# -- TGI ---------------------------------------------------------------------


def test_tgi_flags() -> None:
    info = parse_cmd(
        "text-generation-launcher --model-id bigscience/bloom-560m --max-concurrent-requests"
        " 128 -p 3000 --num-shard 2 --max-total-tokens 4096 --max-batch-prefill-tokens 8192"
    )
    assert_fields(info, engine="tgi", model="bigscience/bloom-560m", max_num_seqs=128)
    assert_fields(info, port=3000, tensor_parallel_size=2, max_model_len=4096)
    assert info.extra["max_batch_prefill_tokens"] == "8192"


def test_tgi_environment_fills_what_the_command_line_lacks() -> None:
    environ = {"MODEL_ID": "from-env", "MAX_CONCURRENT_REQUESTS": "7", "PORT": "8080"}
    environ |= {"PREFIX_CACHING": "0", "HOSTNAME": "pod-abc"}
    info = parse("text-generation-launcher", "--port", "3000", environ=environ)
    assert info.model == "from-env"
    assert info.max_num_seqs == 7
    assert info.port == 3000  # the command line wins, as with clap
    assert info.prefix_caching == "false"
    assert "host" not in info.extra  # every container sets HOSTNAME: never read


def test_environment_is_ignored_when_not_given() -> None:
    assert parse("text-generation-launcher").max_num_seqs is None


# -- llama.cpp ---------------------------------------------------------------


def test_llama_server_short_and_long_options() -> None:
    info = parse_cmd(
        "/app/llama-server -m /models/q4.gguf -np 4 --port 8080 -a llama,llama-chat -c 16384"
        " -ngl 99"
    )
    assert_fields(info, engine="llamacpp", model="/models/q4.gguf", served_model_name="llama")
    assert info.extra["served_model_names"] == "llama,llama-chat"
    assert info.max_num_seqs == 4
    assert info.port == 8080
    assert info.extra["ctx_size"] == "16384"
    # the context is shared by the slots: not a per-request limit
    assert info.max_model_len is None
    assert parse("llama-server", "--parallel", "8").max_num_seqs == 8


def test_llama_server_auto_parallel_is_not_a_capacity() -> None:
    assert parse("llama-server", "-m", "x.gguf", "-np", "-1").max_num_seqs is None


def test_llama_server_environment_and_hf_repo() -> None:
    info = parse(
        "llama-server",
        "-hf",
        "ggml-org/gemma-3-1b-it-GGUF",
        environ={"LLAMA_ARG_N_PARALLEL": "6", "LLAMA_ARG_PORT": "9090"},
    )
    assert_fields(info, model="ggml-org/gemma-3-1b-it-GGUF", max_num_seqs=6, port=9090)


@pytest.mark.parametrize(
    ("value", "on"),
    [("1", True), ("true", True), ("on", True), ("enabled", True), ("0", False),
     ("off", False), ("yes", False), ("TRUE", False)],
)  # fmt: skip
def test_llama_server_metrics_switch_from_the_environment(value: str, on: bool) -> None:
    # llama.cpp's is_truthy: exactly on / enabled / true / 1 turn a switch on
    info = parse("llama-server", "-m", "x.gguf", environ={"LLAMA_ARG_ENDPOINT_METRICS": value})
    assert info.extra.get("metrics") == ("true" if on else None)
    assert parse("llama-server", "--metrics").extra["metrics"] == "true"


# -- Triton, trtllm-serve, LMDeploy -----------------------------------------


def test_tritonserver() -> None:
    info = parse_cmd(
        "/opt/tritonserver/bin/tritonserver --model-repository=/models"
        " --model-repository=/more --http-port 8000 --metrics-port=8002 --load-model ensemble"
    )
    assert info.engine == "triton"
    assert info.port == 8000
    assert info.extra["metrics_port"] == "8002"
    assert info.extra["model_repository"] == "/models,/more"
    assert info.extra["load_model"] == "ensemble"
    assert info.model is None  # the models live in the repository, not on the command line
    assert info.max_num_seqs is None


@pytest.mark.parametrize(
    "head",
    [["trtllm-serve"], ["trtllm-serve", "serve"], ["python3", "-m", "tensorrt_llm.commands.serve"]],
)
def test_trtllm_serve(head: list[str]) -> None:
    info = parse_cmd(
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0 --max_batch_size 64 --max_num_tokens 8192"
        " --max_seq_len 4096 --tp_size 2 --port 8000 --kv_cache_free_gpu_memory_fraction 0.9",
        *head,
    )
    assert_fields(
        info,
        engine="trtllm",
        model="TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        max_num_seqs=64,
        max_num_batched_tokens=8192,
    )
    assert_fields(info, max_model_len=4096, tensor_parallel_size=2, port=8000)
    # a share of the memory left after the weights: not vLLM's gpu_memory_utilization
    assert info.gpu_memory_utilization is None
    assert info.extra["kv_cache_free_gpu_memory_fraction"] == "0.9"


def test_trtllm_disaggregated_has_no_model() -> None:
    info = parse("trtllm-serve", "disaggregated", "-c", "disagg.yaml")
    assert (info.engine, info.model) == ("trtllm", None)


def test_lmdeploy_api_server() -> None:
    info = parse_cmd(
        "/usr/bin/python3 /usr/local/bin/lmdeploy serve api_server"
        " internlm/internlm2_5-7b-chat --server-port 23333 --max-batch-size 128 --session-len"
        " 8192 --tp 2 --model-name internlm --enable-prefix-caching"
    )
    assert_fields(
        info,
        engine="lmdeploy",
        model="internlm/internlm2_5-7b-chat",
        served_model_name="internlm",
        port=23333,
    )
    assert_fields(
        info, max_num_seqs=128, max_model_len=8192, tensor_parallel_size=2, prefix_caching="true"
    )
    assert parse_launch(["lmdeploy", "serve", "gradio", "m"]) is None


# -- not engines ---------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        [""],
        ["bash", "-c", "vllm serve m"],
        ["python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"],
        ["python3", "-m", "http.server", "8000"],
        ["python3"],
        ["VLLM::EngineCore"],
        ["/usr/bin/python3", "/usr/local/bin/inferwatch", "run", "--worker", "http://x:8000"],
        ["text-generation-router", "--port", "3000"],
    ],
)
def test_other_programs_are_not_engines(argv: list[str]) -> None:
    assert parse_launch(argv) is None


def test_interpreter_options_before_the_module() -> None:
    info = parse(
        "python3.11", "-X", "dev", "-Wignore", "-OO", "-m", "sglang.launch_server", "--port", "1"
    )
    assert (info.engine, info.port) == ("sglang", 1)
    assert parse("python3", "-um", "sglang.launch_server").engine == "sglang"


# -- values ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4096", 4096),
        ("1k", 1000),
        ("25.6k", 25600),
        ("1K", 1024),
        ("2M", 2 * 2**20),
        ("1.5K", None),
        ("auto", None),
        ("-1", None),
        ("", None),
    ],
)
def test_human_readable_ints(text: str, value: int | None) -> None:
    assert parse_human_int(text) == value


def test_launch_info_is_immutable() -> None:
    info = parse("vllm", "serve", "m", "--host", "h")
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.max_num_seqs = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        info.extra["host"] = "other"  # type: ignore[index]


def test_every_engine_table_cites_its_source() -> None:
    # each engine's flags live in its own module (engines/<name>.py) as FLAGS
    root = Path(launchflags.__file__).parent
    for engine in ENGINE_FLAGS:
        source = (root / f"{engine}.py").read_text()
        position = source.index("\nFLAGS = ")
        comment = source[source.rindex("\n\n", 0, position) : position]
        assert " @ " in comment, f"{engine}: no commit cited above its table"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "vllm",
                    "serve",
                    "python3",
                    "-m",
                    "-np",
                    "--port",
                    "--max-num-seqs",
                    "-tp",
                    "llama-server",
                    "trtllm-serve",
                    "lmdeploy",
                    "api_server",
                    "--served-model-name",
                    "-c",
                    "-X",
                    "--model=",
                    "sglang.launch_server",
                    "32k",
                    "-1",
                    "=",
                ]
            ),
            st.text(max_size=12),
        ),
        max_size=12,
    )
)
def test_never_raises_on_any_command_line(argv: list[str]) -> None:
    info = parse_launch(argv)
    assert info is None or info.engine in ENGINE_FLAGS


def test_the_simulator_reads_like_vllm() -> None:
    for argv in (
        ["inferwatch", "simulate", "--port", "8001", "--max-num-seqs", "20", "--model", "demo-7b"],
        [
            "/usr/bin/python3",
            "-m",
            "inferwatch.cli",
            "simulate",
            "--max-num-seqs=20",
            "--port",
            "8001",
            "--model",
            "demo-7b",
            "--no-enable-prefix-caching",
        ],
    ):
        info = parse_launch(argv)
        assert info is not None
        assert (info.engine, info.max_num_seqs, info.port) == ("vllm", 20, 8001)
        assert info.model == "demo-7b"
    assert parse_launch(["inferwatch", "run", "--worker", "http://a:1"]) is None
