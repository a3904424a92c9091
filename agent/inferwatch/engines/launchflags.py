"""Which inference engine a command line starts, and the launch flags that matter.

Pure functions over an argument vector (what ``psutil.Process.cmdline()``
returns). Nothing here touches a process: :mod:`inferwatch.agent.collectors.process`
reads the command line and hands it over.

A value is recorded only when the command line (or, for engines that read
their flags from the environment too, the process environment) says it. The
engines' defaults differ between versions, so a flag that is absent stays
``None`` (or ``"unknown"`` for prefix caching) and is never filled with a
guessed default.

Each engine's flags are a table (:class:`EngineFlags`), not code: the option
names are copied from the engine's own argument parser, whose file and commit
are cited next to the table. Option names are compared after turning ``_``
into ``-`` so that ``--max_num_seqs`` (accepted by vLLM's parser) and
trtllm-serve's native ``--max_batch_size`` match one spelling each.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

__all__ = [
    "ENGINE_FLAGS",
    "EngineFlags",
    "Flag",
    "LaunchInfo",
    "parse_human_int",
    "parse_launch",
]

PrefixCaching = Literal["true", "false", "unknown"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class LaunchInfo:
    """What a worker's command line says about it; ``None`` where it says nothing."""

    engine: str | None = None
    #: the model as given to the engine (a hub id or a path)
    model: str | None = None
    #: the name clients use (the first one where the engine takes several)
    served_model_name: str | None = None
    port: int | None = None
    #: batch capacity: vLLM --max-num-seqs or the engine's equivalent
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    prefix_caching: PrefixCaching = "unknown"
    tensor_parallel_size: int | None = None
    data_parallel_size: int | None = None
    #: further flags worth showing (host, pipeline size, engine-specific limits)
    extra: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    @property
    def label_model(self) -> str | None:
        """The model name the engine reports to clients: served name, else the model."""
        return self.served_model_name or self.model


#: the launch flags ``inferwatch_worker_info`` carries as labels (docs/metrics.md): the
#: agent's process source writes them, advise reads them
WORKER_INFO_FLAGS = (
    "max_num_seqs",
    "max_model_len",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "prefix_caching",
    "kv_cache_dtype",
)


# ---------------------------------------------------------------------------
# Flag tables
# ---------------------------------------------------------------------------

#: how a flag's value is read:
#: int / float / str: one value; hint: an int that may carry k/K/M... suffixes
#: (vLLM, SGLang); names: one or more values up to the next option (argparse
#: nargs="+"); csv: one comma-separated value; multi: one value per
#: occurrence, all kept (a repeatable option); true / false: a switch that sets
#: the key without taking a value
Kind = Literal["int", "hint", "float", "str", "names", "csv", "multi", "true", "false"]

_FIELDS_INT = frozenset(
    {
        "port",
        "max_num_seqs",
        "max_model_len",
        "max_num_batched_tokens",
        "tensor_parallel_size",
        "data_parallel_size",
    }
)
_FIELDS_FLOAT = frozenset({"gpu_memory_utilization"})
_FIELDS_STR = frozenset({"model", "served_model_name", "prefix_caching"})


@dataclass(frozen=True)
class Flag:
    """One launch option: the spellings the engine accepts and where its value goes.

    ``key`` is a :class:`LaunchInfo` field name, or any other name, which then
    lands in :attr:`LaunchInfo.extra`.
    """

    names: tuple[str, ...]
    key: str
    kind: Kind = "str"
    #: environment variables the engine reads when the option is absent
    env: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineFlags:
    engine: str
    flags: tuple[Flag, ...]
    #: environment variable -> key for settings that have no option at all
    env_only: Mapping[str, str] = field(default_factory=lambda: _EMPTY)


# vLLM. Option names: vllm-project/vllm vllm/engine/arg_utils.py
# @ 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b (EngineArgs.add_cli_args: -tp, -dp, -pp,
# BooleanOptionalAction for --enable-prefix-caching, served_model_name as a list, so
# nargs="+", max_model_len / max_num_batched_tokens parsed by human_readable_int); the
# same names at 001999d2f360c2c5da23a916510c273b1a73d06c (older, store_true switches);
# --host / --port: vllm/entrypoints/openai/cli_args.py
# @ 005223338608bc94fd165a4f976c102a57bd1fc4; `_` == `-` in option names and the
# k/K suffixes: vllm/utils/argparse_utils.py @ 00da11e37d1ffac917c3427fff227500302eb452;
# the positional model of `vllm serve`: vllm/entrypoints/cli/serve.py
# @ 00a5fdd20935ba7679750db22997dcf539ca4591 (model_tag).
VLLM = EngineFlags(
    "vllm",
    (
        Flag(("--model",), "model"),
        Flag(("--served-model-name",), "served_model_name", "names"),
        Flag(("--port",), "port", "int"),
        Flag(("--host",), "host"),
        Flag(("--max-num-seqs",), "max_num_seqs", "int"),
        Flag(("--max-model-len",), "max_model_len", "hint"),
        Flag(("--max-num-batched-tokens",), "max_num_batched_tokens", "hint"),
        Flag(("--gpu-memory-utilization",), "gpu_memory_utilization", "float"),
        Flag(("--enable-prefix-caching",), "prefix_caching", "true"),
        Flag(("--no-enable-prefix-caching",), "prefix_caching", "false"),
        Flag(("--tensor-parallel-size", "-tp"), "tensor_parallel_size", "int"),
        Flag(("--data-parallel-size", "-dp"), "data_parallel_size", "int"),
        Flag(("--pipeline-parallel-size", "-pp"), "pipeline_parallel_size", "int"),
        Flag(("--kv-cache-dtype",), "kv_cache_dtype"),
        Flag(("--config",), "config_file"),
    ),
)

# SGLang. Option names: sgl-project/sglang python/sglang/srt/server_args.py
# @ 001067fffe33427bee0ed2f007fb7551a1d76b44 (flags derived from the ServerArgs field
# names plus their aliases; --context-length and --max-total-tokens use
# human_readable_int); `sglang serve`: python/sglang/cli/main.py
# @ 16c8ff4f96e743ce5a1dbf3f640caadd6ae32e07. Radix (prefix) caching is on unless
# --disable-radix-cache, but that default is not assumed here.
SGLANG = EngineFlags(
    "sglang",
    (
        Flag(("--model-path", "--model"), "model"),
        Flag(("--served-model-name",), "served_model_name"),
        Flag(("--port",), "port", "int"),
        Flag(("--host",), "host"),
        Flag(("--max-running-requests",), "max_num_seqs", "int"),
        Flag(("--context-length",), "max_model_len", "hint"),
        Flag(("--mem-fraction-static",), "gpu_memory_utilization", "float"),
        Flag(("--disable-radix-cache",), "prefix_caching", "false"),
        Flag(("--tp-size", "--tensor-parallel-size"), "tensor_parallel_size", "int"),
        Flag(("--dp-size", "--data-parallel-size"), "data_parallel_size", "int"),
        Flag(("--pp-size", "--pipeline-parallel-size"), "pipeline_parallel_size", "int"),
        Flag(("--chunked-prefill-size",), "chunked_prefill_size", "int"),
        Flag(("--max-prefill-tokens",), "max_prefill_tokens", "hint"),
        Flag(("--max-total-tokens",), "max_total_tokens", "hint"),
        Flag(("--max-queued-requests",), "max_queued_requests", "int"),
        Flag(("--enable-metrics",), "enable_metrics", "true"),
        Flag(("--config",), "config_file"),
    ),
)


def _clap(names: tuple[str, ...], key: str, kind: Kind = "str") -> Flag:
    """A TGI launcher option and its variable: clap's ``#[clap(long, env)]`` names the
    variable after the field, upper case (``--max-batch-size``: ``MAX_BATCH_SIZE``)."""
    return Flag(names, key, kind, env=(names[0].removeprefix("--").replace("-", "_").upper(),))


# TGI. Option names: huggingface/text-generation-inference launcher/src/main.rs
# @ 009c4e0b945b2c111368afdc2c9813c32db0a9b7 (clap `#[clap(long, env)]`: the option is
# the field name in kebab case, the environment variable the field name in upper case;
# `port` also has `short`, so -p). PREFIX_CACHING is read from the environment only
# (resolve_attention). HOSTNAME is deliberately not read: every container sets it.
TGI = EngineFlags(
    "tgi",
    (
        _clap(("--model-id",), "model"),
        _clap(("--port", "-p"), "port", "int"),
        Flag(("--hostname",), "host"),
        _clap(("--max-concurrent-requests",), "max_num_seqs", "int"),
        _clap(("--max-total-tokens",), "max_model_len", "int"),
        _clap(("--cuda-memory-fraction",), "gpu_memory_utilization", "float"),
        _clap(("--num-shard",), "tensor_parallel_size", "int"),
        _clap(("--max-input-tokens",), "max_input_tokens", "int"),
        _clap(("--max-input-length",), "max_input_length", "int"),
        _clap(("--max-batch-prefill-tokens",), "max_batch_prefill_tokens", "int"),
        _clap(("--max-batch-total-tokens",), "max_batch_total_tokens", "int"),
        _clap(("--max-batch-size",), "max_batch_size", "int"),
    ),
    env_only=MappingProxyType({"PREFIX_CACHING": "prefix_caching"}),
)

# llama.cpp server. Option names: ggml-org/llama.cpp common/arg.cpp
# @ 145b6280d6aa1890e22457143dad0badb3fd6820 (-m/--model LLAMA_ARG_MODEL, -a/--alias
# LLAMA_ARG_ALIAS, -hf/-hfr/--hf-repo, -np/--parallel LLAMA_ARG_N_PARALLEL, --host
# LLAMA_ARG_HOST, --port LLAMA_ARG_PORT, -ngl, --metrics); -c/--ctx-size
# LLAMA_ARG_CTX_SIZE in the same parser of other revisions; --metrics also from
# LLAMA_ARG_ENDPOINT_METRICS (common/arg.cpp of the llama.cpp that llama-cpp-python
# 0.3.36 vendors: a switch read from the environment is on for "on", "enabled",
# "true" or "1", common_arg_utils::is_truthy). --parallel -1 means "auto"
# in newer builds, so only a positive value is a capacity. --ctx-size is the context
# shared by all slots, not a per-request limit, so it is kept in extra.
LLAMACPP = EngineFlags(
    "llamacpp",
    (
        Flag(("-m", "--model"), "model", env=("LLAMA_ARG_MODEL",)),
        Flag(("-hf", "-hfr", "--hf-repo"), "hf_repo", env=("LLAMA_ARG_HF_REPO",)),
        Flag(("-a", "--alias"), "served_model_name", "csv", env=("LLAMA_ARG_ALIAS",)),
        Flag(("--port",), "port", "int", env=("LLAMA_ARG_PORT",)),
        Flag(("--host",), "host", env=("LLAMA_ARG_HOST",)),
        Flag(("-np", "--parallel"), "max_num_seqs", "int", env=("LLAMA_ARG_N_PARALLEL",)),
        Flag(("-c", "--ctx-size"), "ctx_size", "int", env=("LLAMA_ARG_CTX_SIZE",)),
        Flag(("-ngl", "--gpu-layers", "--n-gpu-layers"), "n_gpu_layers", "int"),
        Flag(("--metrics",), "metrics", "true", env=("LLAMA_ARG_ENDPOINT_METRICS",)),
    ),
)

# Triton Inference Server. Option names: triton-inference-server/server
# src/command_line_parser.cc @ 0299e638036b53bd5426fc2051161dc1da484358 (--http-port,
# --grpc-port, --metrics-port, --model-repository and its older spelling --model-store,
# --load-model, all repeatable where noted there). The batch capacity lives in each
# model's config.pbtxt / the TensorRT-LLM engine, never on this command line.
TRITON = EngineFlags(
    "triton",
    (
        Flag(("--http-port",), "port", "int"),
        Flag(("--grpc-port",), "grpc_port", "int"),
        Flag(("--metrics-port",), "metrics_port", "int"),
        Flag(("--model-repository", "--model-store"), "model_repository", "multi"),
        Flag(("--load-model",), "load_model", "multi"),
    ),
)

# trtllm-serve. Option names: NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py
# @ 00209af149e7774406881a37283dce303571eb11 (click options spelled with underscores;
# the group defaults to the `serve` command, whose MODEL is positional).
# --kv_cache_free_gpu_memory_fraction is a share of the memory left after the weights,
# not of the whole GPU, so it stays in extra.
TRTLLM = EngineFlags(
    "trtllm",
    (
        Flag(("--port",), "port", "int"),
        Flag(("--host",), "host"),
        Flag(("--max_batch_size",), "max_num_seqs", "int"),
        Flag(("--max_seq_len",), "max_model_len", "int"),
        Flag(("--max_num_tokens",), "max_num_batched_tokens", "int"),
        Flag(("--tensor_parallel_size", "--tp_size"), "tensor_parallel_size", "int"),
        Flag(("--pipeline_parallel_size", "--pp_size"), "pipeline_parallel_size", "int"),
        Flag(
            ("--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction"),
            "kv_cache_free_gpu_memory_fraction",
            "float",
        ),
        Flag(("--backend",), "backend"),
        Flag(("--config", "--extra_llm_api_options"), "config_file"),
    ),
)

# LMDeploy. Option names: InternLM/lmdeploy lmdeploy/cli/serve.py
# @ 00596da999e74d269a3557cb300a5a64b2c7175f (`lmdeploy serve api_server MODEL_PATH`,
# --server-name, --server-port) and lmdeploy/cli/utils.py
# @ 00948ee273c696465b3a301519c08ef9c674683f (ArgumentHelper: --model-name, --tp,
# --session-len, --max-batch-size, --cache-max-entry-count, --enable-prefix-caching,
# --backend). --cache-max-entry-count is a share of free memory, so it stays in extra.
LMDEPLOY = EngineFlags(
    "lmdeploy",
    (
        Flag(("--server-port",), "port", "int"),
        Flag(("--server-name",), "host"),
        Flag(("--model-name",), "served_model_name"),
        Flag(("--max-batch-size",), "max_num_seqs", "int"),
        Flag(("--session-len",), "max_model_len", "int"),
        Flag(("--tp",), "tensor_parallel_size", "int"),
        Flag(("--enable-prefix-caching",), "prefix_caching", "true"),
        Flag(("--cache-max-entry-count",), "cache_max_entry_count", "float"),
        Flag(("--max-prefill-token-num",), "max_prefill_token_num", "int"),
        Flag(("--backend",), "backend"),
    ),
)

ENGINE_FLAGS: Mapping[str, EngineFlags] = MappingProxyType(
    {t.engine: t for t in (VLLM, SGLANG, TGI, LLAMACPP, TRITON, TRTLLM, LMDEPLOY)}
)


# ---------------------------------------------------------------------------
# Recognizing the program
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Launch:
    engine: str
    #: arguments after the program and its sub-commands
    args: tuple[str, ...]
    #: whether the first argument, when not an option, is the model
    positional_model: bool


_PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?[a-z]?(\.exe)?$")
# interpreter options that take a value (the value may be attached: -Wignore)
_PY_VALUE_OPTS = frozenset("XW")
_PY_LONG_VALUE_OPTS = frozenset({"--check-hash-based-pycs"})

# modules run with `python -m`, as dotted names; scripts whose path ends like one
# of these are treated the same (`python .../vllm/entrypoints/openai/api_server.py`)
_MODULES: Mapping[str, str] = MappingProxyType(
    {
        "vllm.entrypoints.openai.api_server": "vllm-api-server",
        "vllm.entrypoints.cli.main": "vllm",
        "sglang.launch_server": "sglang-launch-server",
        "sglang.cli.main": "sglang",
        "tensorrt_llm.commands.serve": "trtllm-serve",
        "inferwatch.cli": "inferwatch",
    }
)


@dataclass(frozen=True)
class _Program:
    engine: str
    #: sub-commands that must follow the program (`vllm serve`)
    subcommand: tuple[str, ...] = ()
    #: whether the first argument after them, when not an option, is the model
    positional_model: bool = False


# program (basename, or module alias above) -> how it launches an engine
_PROGRAMS: Mapping[str, _Program] = MappingProxyType(
    {
        "vllm": _Program("vllm", ("serve",), positional_model=True),
        "vllm-api-server": _Program("vllm"),
        "sglang-launch-server": _Program("sglang"),
        "sglang": _Program("sglang", ("serve",)),
        "text-generation-launcher": _Program("tgi"),
        "llama-server": _Program("llamacpp"),
        "tritonserver": _Program("triton"),
        "lmdeploy": _Program("lmdeploy", ("serve", "api_server"), positional_model=True),
        # trtllm-serve's click group runs `serve` for anything that is not a sub-command
        "trtllm-serve": _Program("trtllm", positional_model=True),
        # inferwatch's own simulator takes vLLM's flag names (sim/simulate_cmd.py)
        "inferwatch": _Program("vllm", ("simulate",)),
    }
)
_TRTLLM_SUBCOMMANDS: Mapping[str, bool] = MappingProxyType(
    {
        "serve": True,
        "grpc": True,
        "mm_embedding_serve": True,
        "disaggregated": False,
        "disaggregated_mpi_worker": False,
    }
)


def _program(argv: Sequence[str]) -> tuple[str, tuple[str, ...]] | None:
    """(program name or module alias, its arguments), looking through a Python interpreter."""
    if not argv or not argv[0]:
        return None
    name = os.path.basename(argv[0])
    if not _PYTHON.match(name):
        return name, tuple(argv[1:])
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg in _PY_LONG_VALUE_OPTS:
            i += 2
            continue
        if arg.startswith("--") or arg == "-":
            if arg == "-":
                return None  # script from stdin
            i += 1
            continue
        if not arg.startswith("-"):
            break
        # a cluster of one-letter options: -u, -OO, -um module, -Wignore, -X dev
        j = 1
        while j < len(arg):
            letter = arg[j]
            if letter in ("m", "c") or letter in _PY_VALUE_OPTS:
                rest = arg[j + 1 :]
                value = rest if rest else (argv[i + 1] if i + 1 < len(argv) else "")
                consumed = 1 if rest else 2
                if letter == "c":
                    return None  # inline code: not a known launcher
                if letter == "m":
                    module = value
                    return _MODULES.get(module, module), tuple(argv[i + consumed :])
                i += consumed
                break
            j += 1
        else:
            i += 1
    if i >= len(argv):
        return None
    script = argv[i]
    dotted = script[:-3].replace("/", ".").replace("\\", ".") if script.endswith(".py") else ""
    for module, alias in _MODULES.items():
        if dotted == module or dotted.endswith("." + module):
            return alias, tuple(argv[i + 1 :])
    base = os.path.basename(script)
    if base.endswith(".py"):
        base = base[:-3]
    return base, tuple(argv[i + 1 :])


def _recognize(argv: Sequence[str]) -> _Launch | None:
    found = _program(argv)
    if found is None:
        return None
    name, args = found
    program = _PROGRAMS.get(name.removesuffix(".exe"))
    if program is None:
        return None
    if program.engine == "trtllm" and args[:1] and args[0] in _TRTLLM_SUBCOMMANDS:
        return _Launch("trtllm", args[1:], _TRTLLM_SUBCOMMANDS[args[0]])
    depth = len(program.subcommand)
    if args[:depth] != program.subcommand:
        return None
    return _Launch(program.engine, args[depth:], program.positional_model)


# ---------------------------------------------------------------------------
# Reading the options
# ---------------------------------------------------------------------------


def _norm(option: str) -> str:
    """Option spelling used for matching: underscores as dashes."""
    return option.replace("_", "-")


def _index(table: EngineFlags) -> dict[str, Flag]:
    return {_norm(name): flag for flag in table.flags for name in flag.names}


_INDEXES: Mapping[str, Mapping[str, Flag]] = MappingProxyType(
    {name: MappingProxyType(_index(table)) for name, table in ENGINE_FLAGS.items()}
)

_SWITCH: Mapping[str, str] = MappingProxyType({"true": "true", "false": "false"})
#: values of an environment variable that turn a switch on (llama.cpp's is_truthy; see
#: the llama.cpp table): the only engine here whose switches have variables
_ENV_SWITCH_ON = frozenset({"on", "enabled", "true", "1"})


def _scan(args: Sequence[str], index: Mapping[str, Flag]) -> dict[str, list[str]]:
    """Raw values per key, in command-line order (the last one wins later)."""
    found: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            continue
        name, eq, attached = arg.partition("=")
        flag = index.get(_norm(name))
        if flag is None:
            continue
        if flag.kind in _SWITCH:
            found[flag.key] = [_SWITCH[flag.kind]]
            continue
        if eq:
            values = [attached]
        elif flag.kind == "names":
            values = []
            while i < len(args) and not args[i].startswith("-"):
                values.append(args[i])
                i += 1
        elif i < len(args):
            # the next word is the value even when it starts with "-" (-np -1)
            values = [args[i]]
            i += 1
        else:
            values = []
        if values and flag.kind == "multi":
            found.setdefault(flag.key, []).extend(values)
        elif values:
            found[flag.key] = values
    return found


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_human_int(text: str) -> int | None:
    """An integer as vLLM's human_readable_int reads it: ``25.6k`` = 25600, ``32K`` = 32768.

    Lower-case suffixes are decimal, upper-case ones binary (no fraction allowed
    with those). ``None`` for anything else, including ``auto`` and ``-1``.
    """
    match = _HUMAN_INT.fullmatch(text.strip())
    if match is None:
        return None
    number, suffix = match.groups()
    if not suffix:
        return int(number) if "." not in number else None
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        return None
    return int(number) * _BINARY[suffix]


def _to_int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _to_float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _first_name(values: Sequence[str], kind: Kind) -> tuple[str | None, list[str]]:
    names: list[str] = []
    for value in values:
        parts = value.split(",") if kind == "csv" else [value]
        names.extend(p.strip() for p in parts if p.strip())
    return (names[0] if names else None), names


_BOOL_WORDS: Mapping[str, PrefixCaching] = MappingProxyType(
    {"1": "true", "true": "true", "0": "false", "false": "false"}
)


def _valid(key: str, value: float) -> bool:
    """Whether a number is a real setting (not "auto", -1, 0 or out of range)."""
    if key == "port":
        return 0 < value < 65536
    if key == "gpu_memory_utilization":
        return 0 < value <= 1
    return value > 0


def _number(kind: Kind, text: str) -> int | float | None:
    if kind == "hint":
        return parse_human_int(text)
    if kind == "int":
        return _to_int(text)
    if kind == "float":
        return _to_float(text)
    return None


def _read_environ(
    table: EngineFlags, raw: dict[str, list[str]], environ: Mapping[str, str]
) -> None:
    """Fill keys the command line left out from the variables the engine reads."""
    for flag in table.flags:
        if flag.key in raw:
            continue
        for var in flag.env:
            if not environ.get(var):
                continue
            if flag.kind in _SWITCH:
                # a switch set by a variable: only the engine's words for "on" set it
                if environ[var] in _ENV_SWITCH_ON:
                    raw[flag.key] = [_SWITCH[flag.kind]]
            else:
                raw[flag.key] = [environ[var]]
            break
    for var, key in table.env_only.items():
        word = environ.get(var, "").strip().lower()
        if key not in raw and word in _BOOL_WORDS:
            raw[key] = [_BOOL_WORDS[word]]


def parse_launch(
    cmdline: Sequence[str], *, environ: Mapping[str, str] | None = None
) -> LaunchInfo | None:
    """The engine and launch flags of a command line; None when it is no known engine.

    ``environ`` is the process environment where it could be read: TGI and the
    llama.cpp server take most options from environment variables too (the
    command line wins, as in those engines).
    """
    launch = _recognize(cmdline)
    if launch is None:
        return None
    table = ENGINE_FLAGS[launch.engine]
    raw = _scan(launch.args, _INDEXES[launch.engine])
    if environ:
        _read_environ(table, raw, environ)
    kinds = {flag.key: flag.kind for flag in table.flags}

    ints: dict[str, int] = {}
    floats: dict[str, float] = {}
    texts: dict[str, str] = {}
    extra: dict[str, str] = {}
    if launch.positional_model and launch.args and not launch.args[0].startswith("-"):
        # `vllm serve MODEL` (a --model as well is moved behind it by vLLM itself)
        texts["model"] = launch.args[0]
    for key, values in raw.items():
        kind = kinds.get(key, "str")
        if kind in ("names", "csv", "multi"):
            first, names = _first_name(values, kind)
            if first is None:
                continue
            if key in _FIELDS_STR:
                texts[key] = first
                if len(names) > 1:
                    extra[key + "s"] = ",".join(names)
            else:
                extra[key] = ",".join(names)
            continue
        text = values[-1].strip()
        if not text:
            continue
        number = _number(kind, text)
        if key in _FIELDS_INT:
            if number is not None and _valid(key, number) and float(number).is_integer():
                ints[key] = int(number)
        elif key in _FIELDS_FLOAT:
            if number is not None and _valid(key, number):
                floats[key] = float(number)
        elif key in _FIELDS_STR:
            texts.setdefault(key, text)
        else:
            extra[key] = str(number) if isinstance(number, int) else text

    prefix = texts.get("prefix_caching", "unknown")
    return LaunchInfo(
        engine=launch.engine,
        model=texts.get("model") or extra.get("hf_repo"),
        served_model_name=texts.get("served_model_name"),
        port=ints.get("port"),
        max_num_seqs=ints.get("max_num_seqs"),
        max_model_len=ints.get("max_model_len"),
        max_num_batched_tokens=ints.get("max_num_batched_tokens"),
        gpu_memory_utilization=floats.get("gpu_memory_utilization"),
        prefix_caching=_BOOL_WORDS.get(prefix, "unknown"),
        tensor_parallel_size=ints.get("tensor_parallel_size"),
        data_parallel_size=ints.get("data_parallel_size"),
        extra=MappingProxyType(extra),
    )
