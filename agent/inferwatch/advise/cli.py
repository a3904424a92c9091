"""The ``inferwatch advise`` command line: where the pictures come from, what is printed."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

from inferwatch.advise.agent import Scrape, read_agent, workers_of
from inferwatch.advise.model import Unreachable
from inferwatch.advise.prometheus import read_alerts, read_prometheus
from inferwatch.advise.render import render_capacity, render_rich, render_text, report_dict
from inferwatch.advise.rules import advise, alert_waits
from inferwatch.cli import add_options
from inferwatch.errors import ConfigError, UsageError
from inferwatch.pack.fmt import age

#: where flag values come from, in error messages
SOURCE = "command line"


def parse_time(text: str, now: float, key: str) -> float:
    """Unix seconds from ``now``, ``now-1h``, ``-30m``, unix seconds or RFC 3339."""
    from inferwatch.validate import duration_seconds

    raw = text.strip()
    if raw == "now":
        return now
    for prefix in ("now-", "-"):
        if raw.startswith(prefix):
            seconds = duration_seconds(raw[len(prefix) :])
            if seconds is None:
                break
            return now - seconds
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            SOURCE, key, "now, now-1h, -30m, unix seconds or RFC 3339 (2025-01-31T12:00:00Z)", text
        ) from None
    if stamp.tzinfo is None:
        raise ConfigError(SOURCE, key, "an RFC 3339 time with a zone (Z or +01:00)", text)
    return stamp.timestamp()


# --------------------------------------------------------------------------- CLI


def prometheus_range(args: Any, thresholds: Any) -> tuple[float, float, str]:
    """What a Prometheus read covers: ``--start`` to ``--end`` (the last hour by default),
    and the series selector (``--selector``, else the pack's)."""
    now = time.time()
    end = parse_time(args.end, now, "--end") if args.end else now
    start = parse_time(args.start, now, "--start") if args.start else end - 3600
    if start >= end:
        raise ConfigError(SOURCE, "--start", f"a time before --end ({end:.0f})", args.start)
    selector = "{" + args.selector + "}" if args.selector else thresholds.pack.selector()
    return start, end, selector


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(
        parser,
        ("--agent-url", "URL", "read an agent's /metrics (e.g. http://127.0.0.1:10127)"),
        ("--prometheus-url", "URL", "read Prometheus over --start .. --end instead"),
        ("--start", "T", "range start (default now-1h)"),
        ("--end", "T", "range end (default now)"),
        (
            "--selector",
            "MATCHERS",
            "label matchers of the agents' series (default: pack.agent_selector of thresholds)",
        ),
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=3,
        metavar="N",
        help="agent mode: scrapes to average, at least 2 (default 3); the first and the "
        "last are advice.min_rate_span of thresholds apart at least (10s), so rates "
        "come from counter deltas",
    )
    add_options(
        parser,
        ("--every", "DURATION", "agent mode: time between scrapes (default 1s)", "1s"),
        ("--worker", "NAME", "only recommendations for this worker"),
    )
    parser.add_argument("--json", action="store_true", help="JSON for tools")
    add_options(parser, ("--thresholds", "FILE", "thresholds.yaml overrides (default: packaged)"))
    add_what_if_arguments(parser)
    sub = parser.add_subparsers(dest="advise_mode", metavar="MODE")
    cap = sub.add_parser(
        "capacity",
        help="the guide's max-num-seqs / max-num-batched-tokens arithmetic",
        description="Per-sequence KV size, the field guide's estimate "
        "(VRAM x 0.8 - weights) / KV per sequence, and the flags it suggests. Sizes are "
        "GiB unless suffixed (24, 24GiB, 80GB, 512MiB).",
    )
    cap.add_argument("--gpu-memory", metavar="SIZE", required=True, help="GPU memory (24 = 24 GiB)")
    add_options(cap, ("--model-config", "FILE", "the model's config.json"))
    # the model's shape, as config.json names it
    for flag, key in (
        ("--layers", "num_hidden_layers"),
        ("--kv-heads", "num_key_value_heads"),
        ("--head-dim", "head_dim"),
    ):
        cap.add_argument(flag, type=int, metavar="N", help=key)
    add_options(
        cap,
        ("--dtype", "DTYPE", "weights dtype (default: config.json's)"),
        ("--weights", "SIZE", "weights size (default: estimated from config.json)"),
    )
    cap.add_argument("--context", type=int, metavar="TOKENS", help="expected tokens per sequence")
    add_options(
        cap,
        (
            "--kv-dtype",
            "DTYPE",
            "KV cache dtype: auto (the weights' dtype), fp16, bf16, fp8 (default auto)",
            "auto",
        ),
        ("--kv-per-seq", "SIZE", "KV per sequence, instead of shape and context"),
    )
    cap.add_argument(
        "--usable", type=float, default=0.8, help="share of VRAM for weights + KV (default 0.8)"
    )
    cap.add_argument("--json", action="store_true", help="JSON for tools")


def add_what_if_arguments(parser: argparse.ArgumentParser) -> None:
    """``--what-if`` and ``--shadow`` (the capacity twin, docs/advise.md "What-if")."""
    add_options(
        parser,
        (
            "--what-if",
            "FLAG=VALUE",
            "predict throughput, TTFT, queue, GPU and KV at FLAG=VALUE (max-num-seqs or "
            "parallel, max-num-batched-tokens, gpu-memory-utilization, replicas); `suggest` "
            "picks the lever",
        ),
        (
            "--shadow",
            "STATE",
            "shadow mode: record the twin's fit in STATE (JSON); when a worker's launch "
            "flags change, compare its prediction with what followed",
        ),
        (
            "--shadow-metrics",
            "FILE",
            "shadow mode: write inferwatch_whatif_* gauges to FILE (textfile collector format)",
        ),
        ("--trace", "FILE", "what-if: read a recorded trace instead"),
        ("--phase", "NAME", "what-if: the trace's phase (default: first)"),
        ("--span", "DURATION", "what-if, agent mode: how long to observe (default 60s)", "60s"),
    )
    parser.add_argument(
        "--output-tokens",
        type=float,
        metavar="N",
        help="what-if: mean answer length, for engines that count no requests (llama.cpp)",
    )
    add_options(
        parser,
        (
            "--weights",
            "SIZE",
            "what-if gpu-memory-utilization: the model's weights (24GiB), for the exact KV pool",
        ),
        ("--instance", "HOST:PORT", "what-if, Prometheus: the agent's instance"),
    )


def capacity_input(args: argparse.Namespace) -> Any:
    from inferwatch.advise.capacity import (
        CapacityInput,
        ModelShape,
        dtype_bytes,
        kv_bytes_per_token,
        parse_size,
        read_model_config,
    )

    src = SOURCE
    vram = parse_size(args.gpu_memory, src, "--gpu-memory")
    if not 0 < args.usable <= 1:
        raise ConfigError(src, "--usable", "a share in (0, 1]", args.usable)
    shape: ModelShape | None = None
    if args.model_config:
        shape = read_model_config(args.model_config)
    explicit = {"--layers": args.layers, "--kv-heads": args.kv_heads, "--head-dim": args.head_dim}
    if any(v is not None for v in explicit.values()):
        for flag, value in explicit.items():
            if value is None and shape is None:
                raise ConfigError(src, flag, "a value (with --layers, --kv-heads, --head-dim)")
            if value is not None and value <= 0:
                raise ConfigError(src, flag, "a whole number greater than zero", value)
        base = shape or ModelShape(layers=1, kv_heads=1, head_dim=1, dtype_bytes=2.0)
        shape = replace(
            base,
            layers=args.layers or base.layers,
            kv_heads=args.kv_heads or base.kv_heads,
            head_dim=args.head_dim or base.head_dim,
        )
    if shape is not None and args.dtype:
        shape = replace(
            shape, dtype=args.dtype, dtype_bytes=dtype_bytes(args.dtype, src, "--dtype")
        )
    kv_dtype = None
    kv_element = None
    per_token = None
    if shape is not None:
        if args.kv_dtype == "auto":
            kv_dtype, kv_element = shape.dtype, shape.dtype_bytes
        else:
            kv_dtype, kv_element = args.kv_dtype, dtype_bytes(args.kv_dtype, src, "--kv-dtype")
        if shape.mla_dims is not None:
            per_token = shape.layers * shape.mla_dims * kv_element
        else:
            per_token = kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, kv_element)
    if args.context is not None and args.context <= 0:
        raise ConfigError(src, "--context", "tokens greater than zero", args.context)
    if args.kv_per_seq:
        if per_token is not None and args.context is not None:
            raise UsageError("give either --kv-per-seq, or a model shape with --context, not both")
        per_seq = parse_size(args.kv_per_seq, src, "--kv-per-seq")
    elif per_token is not None:
        if args.context is None:
            raise ConfigError(
                src, "--context", "the expected tokens per sequence (prompt + output)"
            )
        per_seq = per_token * args.context
    else:
        raise UsageError(
            "give --kv-per-seq, or --model-config (or --layers, --kv-heads, --head-dim) with "
            "--context"
        )
    if args.weights:
        weights = parse_size(args.weights, src, "--weights")
        weights_source = "given"
    else:
        params = shape.parameters() if shape is not None else None
        if params is None or shape is None:
            raise ConfigError(
                src,
                "--weights",
                "the weights size (estimated only from a dense model's config.json)",
            )
        weights = params * shape.dtype_bytes
        weights_source = f"~{params / 1e9:.2f}B parameters x {shape.dtype_bytes:g} B, estimated"
    return CapacityInput(
        vram_bytes=vram,
        weights_bytes=weights,
        weights_source=weights_source,
        kv_per_sequence=per_seq,
        context_tokens=args.context,
        kv_per_token=per_token,
        usable=args.usable,
        shape=shape,
        kv_dtype=kv_dtype,
        kv_element_bytes=kv_element,
    )


def main_capacity(args: argparse.Namespace) -> int:
    from inferwatch.advise.capacity import plan_capacity

    plan = plan_capacity(capacity_input(args))
    if args.json:
        print(json.dumps(plan.as_dict(), indent=2))
    else:
        sys.stdout.write(render_capacity(plan))
    return 0


def main(args: argparse.Namespace) -> int:
    if getattr(args, "advise_mode", None) == "capacity":
        return main_capacity(args)
    if getattr(args, "what_if", None) or getattr(args, "shadow", None):
        from inferwatch.advise.whatif_cli import main_shadow, main_what_if

        run = main_shadow if args.shadow else main_what_if
        return run(args, prometheus_range)
    from inferwatch.pack.thresholds import load_thresholds
    from inferwatch.validate import duration

    if bool(args.agent_url) == bool(args.prometheus_url):
        raise UsageError("give one of --agent-url URL or --prometheus-url URL (or `capacity`)")
    if args.samples < 1:
        raise ConfigError(SOURCE, "--samples", "a whole number >= 1", args.samples)
    every = duration(args.every, SOURCE, "--every")
    thresholds = load_thresholds(args.thresholds)
    if args.agent_url and (args.start or args.end):
        raise UsageError("--start and --end need --prometheus-url")
    for flag in ("trace", "phase", "instance", "weights", "output_tokens", "shadow_metrics"):
        if getattr(args, flag, None) is not None:
            cli_flag = "--" + flag.replace("_", "-")
            raise UsageError(f"{cli_flag} belongs to --what-if or --shadow")

    def check(scrape: Scrape) -> None:
        """A --worker the agent does not watch is refused at the first scrape."""
        known = workers_of(scrape)
        if args.worker and not any(args.worker == w for w in known):
            names = ", ".join(known) or "none"
            raise ConfigError(SOURCE, "--worker", f"a worker in the data ({names})", args.worker)

    source: dict[str, Any]
    view = None
    try:
        if args.agent_url:
            pictures = read_agent(
                args.agent_url,
                args.samples,
                every,
                thresholds.advice.min_rate_span,
                cold_within=thresholds.cold_start.within,
                check=check,
            )
            source = {"kind": "agent", "url": args.agent_url, "samples": args.samples}
            where = f"{args.agent_url} ({args.samples} sample(s))"
        else:
            start, end, selector = prometheus_range(args, thresholds)
            pictures = read_prometheus(args.prometheus_url, start, end, selector)
            # the loops' alerts as Prometheus holds them at the range's end: a firing one
            # ranks its item first (pack.ranking), the conditions alone where it has none
            view = read_alerts(args.prometheus_url, end, alert_waits(thresholds))
            source = {
                "kind": "prometheus",
                "url": args.prometheus_url,
                "start": start,
                "end": end,
                "alerts_evaluated": sorted(view.evaluated),
                "alerts_active": [
                    {"alert": s.alert, "state": s.state, "since": s.since, "labels": dict(s.labels)}
                    for s in view.active
                ],
            }
            firing = sum(1 for s in view.active if s.state == "firing")
            alerts_note = (
                f"ranked by its alerts ({firing} firing)"
                if view.evaluated
                else "it evaluates none of the loops' alerts: ranked by their conditions"
            )
            where = f"{args.prometheus_url} over {age(end - start)}; {alerts_note}"
    except Unreachable as exc:
        print(f"inferwatch advise: error: {exc}", file=sys.stderr)
        return 3
    recs = advise(pictures, thresholds, view)
    if args.worker:
        if not any(args.worker in (p.worker, p.label) for p in pictures):
            known = ", ".join(p.label for p in pictures) or "none"
            raise ConfigError(SOURCE, "--worker", f"a worker in the data ({known})", args.worker)
        names = {p.label for p in pictures if args.worker in (p.worker, p.label)}
        recs = [r for r in recs if names & set(r.workers)]
        pictures = [p for p in pictures if p.label in names]
    if args.json:
        doc = report_dict(pictures, recs, source, thresholds.source)
        print(json.dumps(doc, indent=2, allow_nan=False))
    elif sys.stdout.isatty():
        render_rich(pictures, recs, where)
    else:
        sys.stdout.write(render_text(pictures, recs, where))
    return 0
