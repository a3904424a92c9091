"""``inferwatch loadgen``: open-loop load against OpenAI-compatible workers on loopback."""

from __future__ import annotations

import argparse

from inferwatch.sim.scenarios import SCENARIOS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        action="append",
        required=True,
        metavar="URL",
        help="base URL of a worker, e.g. http://127.0.0.1:8000 (repeatable)",
    )
    parser.add_argument(
        "--scenario",
        required=True,
        choices=list(SCENARIOS),
        # argparse expands %-formats in help: the descriptions' "%" must be doubled
        help="; ".join(f"{s.name}: {s.description}" for s in SCENARIOS.values()).replace("%", "%%"),
    )
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds of arrivals (default: the scenario's)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="requests per second at time scale 1 (default: the scenario's)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="the workers' --time-scale: arrivals come 1/SCALE times faster",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of arrivals and lengths")
    parser.add_argument(
        "--prompt-tokens",
        metavar="MEDIAN[:SIGMA]",
        help="prompt length (user part), log-normal; default: the scenario's",
    )
    parser.add_argument(
        "--output-tokens",
        metavar="MEDIAN[:SIGMA]",
        help="output length (max_tokens), log-normal; default: the scenario's",
    )
    parser.add_argument(
        "--system-prompt-tokens", type=int, help="length of the shared system prompt"
    )
    parser.add_argument(
        "--system-prompt-share",
        type=float,
        help="share of requests that carry the shared system prompt (0..1)",
    )
    parser.add_argument(
        "--drain",
        type=float,
        default=30.0,
        help="seconds to wait for running requests after the last arrival",
    )
    parser.add_argument(
        "--max-requests",
        type=int,
        default=20_000,
        help="stop after this many requests (default %(default)s)",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=512,
        help="concurrent requests at most; later arrivals are skipped",
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        default=None,
        help="write every request's record and the summary here",
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def main(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from inferwatch.errors import ConfigError
    from inferwatch.sim.loadgen import run_load
    from inferwatch.sim.scenarios import customize, get_scenario, parse_length

    if args.max_requests < 1:
        raise ConfigError(
            "inferwatch loadgen", "--max-requests", "an integer >= 1", args.max_requests
        )
    if args.max_in_flight < 1:
        raise ConfigError(
            "inferwatch loadgen", "--max-in-flight", "an integer >= 1", args.max_in_flight
        )
    scenario = customize(
        get_scenario(args.scenario),
        prompt=parse_length(args.prompt_tokens, "--prompt-tokens") if args.prompt_tokens else None,
        output=parse_length(args.output_tokens, "--output-tokens") if args.output_tokens else None,
        system_prompt_tokens=args.system_prompt_tokens,
        system_prompt_share=args.system_prompt_share,
    )
    result = asyncio.run(
        run_load(
            args.target,
            scenario,
            args.duration,
            rate=args.rate,
            seed=args.seed,
            time_scale=args.time_scale,
            drain=args.drain,
            max_requests=args.max_requests,
            max_in_flight=args.max_in_flight,
        )
    )
    print(
        f"scenario {result.scenario}: {len(result.records)} requests in {result.elapsed:.1f} s "
        f"({', '.join(f'{k} {v}' for k, v in sorted(result.statuses().items()))}; "
        f"skipped {result.skipped})"
    )
    for target in result.targets:
        s = result.summary(target)
        print(
            f"  {target}: {s['ok']}/{s['requests']} ok; "
            + "; ".join(
                f"{name.upper()} p50 {_fmt(s[name]['p50'])} p95 {_fmt(s[name]['p95'])} "
                f"p99 {_fmt(s[name]['p99'])}"
                for name in ("ttft", "tpot", "e2e")
            )
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result.to_json(), fh, indent=1)
    return 0
