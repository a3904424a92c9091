"""``inferwatch simulate``: a simulated vLLM worker (OpenAI API + /metrics + fake GPU)."""

from __future__ import annotations

import argparse
import dataclasses

from inferwatch.sim.config import GPU_MODELS, SimConfig, parse_mig

_DEFAULTS = SimConfig()

#: Flags that set the SimConfig field of their name (``--max-num-seqs``: ``max_num_seqs``)
#: and default to the field's default: argument group (None: none) -> field -> (type, help).
_FIELD_FLAGS: dict[str | None, dict[str, tuple[type, str]]] = {
    None: {
        "host": (str, "address to bind (default %(default)s)"),
        "model": (str, "served model name (default %(default)s)"),
        "engine": (
            str,
            "whose /metrics to emit (default %(default)s; others come as sim/expo modules)",
        ),
        "data_parallel": (int, 'engines (engine="0".."N-1" series; --tensor-parallel GPUs each)'),
        "tensor_parallel": (int, "GPUs per engine, one rank process each (default %(default)s)"),
    },
    "engine": {
        "max_num_seqs": (
            int,
            "batch capacity (default %(default)s: the guide's 7B INT8 / A10 estimate)",
        ),
        "max_model_len": (int, "context length (default %(default)s)"),
        "max_num_batched_tokens": (
            int,
            "token budget per step, chunked prefill (default %(default)s)",
        ),
        "block_size": (int, "tokens per KV block (default %(default)s)"),
        "num_gpu_blocks": (
            int,
            f"KV blocks per engine (default: what the memory budget holds, {_DEFAULTS.blocks})",
        ),
        "gpu_memory_utilization": (
            float,
            "share of each GPU (or MIG slice) the engine reserves at start for weights, "
            "overhead and KV (default %(default)s)",
        ),
        "max_queued_requests": (
            int,
            "waiting requests above which new ones get HTTP 503 (default: no limit)",
        ),
    },
    "timing": {
        "time_scale": (float, "multiply every simulated duration (0.1: ten times faster)"),
        "cold_start_requests": (
            int,
            "first requests that pay the warm-up delay (default %(default)s)",
        ),
        "cold_start_seconds": (
            float,
            "warm-up delay of the first request, shrinking linearly for the next ones "
            "(default %(default)s, guide 5.2)",
        ),
        "seed": (int, "seed of generated lengths/text"),
    },
    "fake GPU": {
        "gpu_state_dir": (str, "write the simulated GPU's state here for --gpu-backend fake"),
        "gpu_index": (int, "GPU index of engine 0 (engine k, rank r uses index + k x TP + r)"),
    },
}
#: vLLM's spellings of the same flags
_ALIASES = {
    "model": ("--served-model-name",),
    "data_parallel": ("--data-parallel-size",),
    "tensor_parallel": ("--tensor-parallel-size",),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, required=True, help="TCP port to listen on (0: any)")
    parser.add_argument(
        "--format",
        default=None,
        help="exposition format of the engine: vllm: v1 (0.33, default), v0 (old names), "
        "multiprocess (pid duplicates, no _created)",
    )
    groups = {name: parser.add_argument_group(name) if name else parser for name in _FIELD_FLAGS}
    for name, flags in _FIELD_FLAGS.items():
        for field, (kind, help_text) in flags.items():
            groups[name].add_argument(
                "--" + field.replace("_", "-"),
                *_ALIASES.get(field, ()),
                dest=field,
                type=kind,
                default=getattr(_DEFAULTS, field),
                help=help_text,
            )
    g = groups["engine"]
    g.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=_DEFAULTS.enable_prefix_caching,
        help="prefix caching (default on)",
    )
    g.add_argument(
        "--kv-cache-dtype",
        choices=("auto", "fp8"),
        default=_DEFAULTS.cache_dtype,
        help="fp8 halves the KV bytes per token (default %(default)s)",
    )
    g.add_argument(
        "--disable-log-stats",
        action="store_true",
        help="no vllm: series at all (as vLLM with the same flag)",
    )
    gpu = groups["fake GPU"]
    gpu.add_argument(
        "--gpu-model",
        choices=sorted(GPU_MODELS),
        default="a10",
        help="the simulated card: a10 (24 GB, default) or h100 (80 GB, MIG-capable)",
    )
    gpu.add_argument(
        "--mig",
        metavar="GI:PROFILE",
        default=None,
        help="run on GPU instance GI of GPU --gpu-index, a MIG slice like 3g.40gb "
        "(needs --gpu-model h100)",
    )
    gpu.add_argument(
        "--no-gpm",
        action="store_true",
        help="report no GPM fields (as a real A10, which has no GPM)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The SimConfig the flags describe (not yet validated)."""
    from inferwatch.sim.expo import formats

    fmt = args.format if args.format is not None else formats(args.engine)[0]
    profile = _DEFAULTS.profile
    if args.kv_cache_dtype == "fp8":
        profile = dataclasses.replace(profile, kv_bytes_per_token=profile.kv_bytes_per_token // 2)
    fields = {field: getattr(args, field) for flags in _FIELD_FLAGS.values() for field in flags}
    return SimConfig(
        **fields,
        port=args.port,
        format=fmt,
        enable_prefix_caching=args.enable_prefix_caching,
        cache_dtype=args.kv_cache_dtype,
        disable_log_stats=args.disable_log_stats,
        mig=parse_mig(args.mig) if args.mig is not None else None,
        gpu=dataclasses.replace(GPU_MODELS[args.gpu_model], gpm=not args.no_gpm),
        profile=profile,
    )


def main(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from inferwatch.sim.expo import create_writer
    from inferwatch.sim.worker import serve

    cfg = config_from_args(args)
    cfg.validate()
    create_writer(cfg)  # reject an unknown engine or format before binding the port
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        asyncio.run(serve(cfg))
    except OSError as exc:
        from inferwatch.errors import UsageError

        raise UsageError(f"cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc}") from exc
    return 0
