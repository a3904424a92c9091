"""``inferwatch simulate``: a simulated vLLM worker (OpenAI API + /metrics + fake GPU)."""

from __future__ import annotations

import argparse
import dataclasses

from inferwatch.sim.config import GPU_MODELS, SimConfig, parse_mig

_DEFAULTS = SimConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    parser.add_argument("--port", type=int, required=True, help="TCP port to listen on (0: any)")
    parser.add_argument("--host", default=d.host, help="address to bind (default %(default)s)")
    parser.add_argument(
        "--model",
        "--served-model-name",
        dest="model",
        default=d.model,
        help="served model name (default %(default)s)",
    )
    parser.add_argument(
        "--engine",
        default=d.engine,
        help="whose /metrics to emit (default %(default)s; others come as sim/expo modules)",
    )
    parser.add_argument(
        "--format",
        default=None,
        help="exposition format of the engine: vllm: v1 (0.33, default), v0 (old names), "
        "multiprocess (pid duplicates, no _created)",
    )
    parser.add_argument(
        "--data-parallel",
        "--data-parallel-size",
        dest="data_parallel",
        type=int,
        default=d.data_parallel,
        help='engines (engine="0".."N-1" series; --tensor-parallel GPUs each)',
    )
    parser.add_argument(
        "--tensor-parallel",
        "--tensor-parallel-size",
        dest="tensor_parallel",
        type=int,
        default=d.tensor_parallel,
        help="GPUs per engine, one rank process each (default %(default)s)",
    )
    g = parser.add_argument_group("engine")
    g.add_argument(
        "--max-num-seqs",
        type=int,
        default=d.max_num_seqs,
        help="batch capacity (default %(default)s: the guide's 7B INT8 / A10 estimate)",
    )
    g.add_argument(
        "--max-model-len",
        type=int,
        default=d.max_model_len,
        help="context length (default %(default)s)",
    )
    g.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=d.max_num_batched_tokens,
        help="token budget per step, chunked prefill (default %(default)s)",
    )
    g.add_argument(
        "--block-size",
        type=int,
        default=d.block_size,
        help="tokens per KV block (default %(default)s)",
    )
    g.add_argument(
        "--num-gpu-blocks",
        type=int,
        default=None,
        help=f"KV blocks per engine (default: what the memory budget holds, {_DEFAULTS.blocks})",
    )
    g.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=d.gpu_memory_utilization,
        help="share of each GPU (or MIG slice) the engine reserves at start for weights, "
        "overhead and KV (default %(default)s)",
    )
    g.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=d.enable_prefix_caching,
        help="prefix caching (default on)",
    )
    g.add_argument(
        "--kv-cache-dtype",
        choices=("auto", "fp8"),
        default=d.cache_dtype,
        help="fp8 halves the KV bytes per token (default %(default)s)",
    )
    g.add_argument(
        "--max-queued-requests",
        type=int,
        default=None,
        help="waiting requests above which new ones get HTTP 503 (default: no limit)",
    )
    g.add_argument(
        "--disable-log-stats",
        action="store_true",
        help="no vllm: series at all (as vLLM with the same flag)",
    )
    t = parser.add_argument_group("timing")
    t.add_argument(
        "--time-scale",
        type=float,
        default=d.time_scale,
        help="multiply every simulated duration (0.1: ten times faster)",
    )
    t.add_argument(
        "--cold-start-requests",
        type=int,
        default=d.cold_start_requests,
        help="first requests that pay the warm-up delay (default %(default)s)",
    )
    t.add_argument(
        "--cold-start-seconds",
        type=float,
        default=d.cold_start_seconds,
        help="warm-up delay of the first request, shrinking linearly for the next "
        "ones (default %(default)s, guide 5.2)",
    )
    t.add_argument("--seed", type=int, default=d.seed, help="seed of generated lengths/text")
    gpu = parser.add_argument_group("fake GPU")
    gpu.add_argument(
        "--gpu-state-dir",
        default=None,
        help="write the simulated GPU's state here for --gpu-backend fake",
    )
    gpu.add_argument(
        "--gpu-index",
        type=int,
        default=d.gpu_index,
        help="GPU index of engine 0 (engine k, rank r uses index + k x TP + r)",
    )
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

    d = _DEFAULTS
    fmt = args.format if args.format is not None else formats(args.engine)[0]
    profile = d.profile
    if args.kv_cache_dtype == "fp8":
        profile = dataclasses.replace(profile, kv_bytes_per_token=profile.kv_bytes_per_token // 2)
    return SimConfig(
        host=args.host,
        port=args.port,
        model=args.model,
        engine=args.engine,
        format=fmt,
        data_parallel=args.data_parallel,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enable_prefix_caching=args.enable_prefix_caching,
        cache_dtype=args.kv_cache_dtype,
        max_queued_requests=args.max_queued_requests,
        disable_log_stats=args.disable_log_stats,
        cold_start_requests=args.cold_start_requests,
        cold_start_seconds=args.cold_start_seconds,
        time_scale=args.time_scale,
        seed=args.seed,
        gpu_state_dir=args.gpu_state_dir,
        gpu_index=args.gpu_index,
        tensor_parallel=args.tensor_parallel,
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
