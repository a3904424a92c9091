"""The command line of ``advise --what-if`` and ``advise --shadow``: sources and output."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

from inferwatch.advise.agent import Scrape, sample_agent
from inferwatch.advise.model import Unreachable, finite
from inferwatch.advise.twin import NotEnough
from inferwatch.advise.whatif import (
    SOURCE,
    Prediction,
    Suggestion,
    observe,
    observed_figures,
    parse_what_if,
    predict,
    suggest,
)
from inferwatch.engines import contract as c
from inferwatch.errors import ConfigError, UsageError
from inferwatch.pack import fmt

#: advise.cli's ``prometheus_range`` (handed in: the command line imports this module)
Range = Callable[[Any, Any], tuple[float, float, str]]

#: the agent series the twin reads (for Prometheus range queries)
SERIES = (
    c.GENERATION_TOKENS.name,
    c.PROMPT_TOKENS.name,
    c.REQUESTS_FINISHED.name,
    f"{c.PROMPT_LENGTH_TOKENS}_count",
    f"{c.PROMPT_LENGTH_TOKENS}_bucket",
    c.REQUESTS_RUNNING.name,
    c.QUEUE_DEPTH.name,
    c.MAX_NUM_SEQS.name,
    c.WORKER_INFO.name,
    c.KV_CACHE_USAGE_RATIO.name,
    c.GPU_UTILIZATION_RATIO.name,
    c.GPU_MEMORY_TOTAL_BYTES.name,
    c.GPU_PROCESS_MEMORY_USED_BYTES.name,
    c.GPU_UP.name,
    c.TTFT_QUANTILE_SECONDS.name,
)


def scrape_agent(
    url: str,
    span: float,
    every: float,
    timeout: float = 10.0,
    check: Callable[[Scrape], object] | None = None,
) -> list[tuple[float, Scrape]]:
    """The agent's ``/metrics`` every ``every`` seconds for ``span`` seconds; ``check``
    reads the first scrape before the span is watched (it raises to refuse at once)."""
    offsets = [i * every for i in range(max(2, int(span / every) + 1))]
    return sample_agent(url, offsets, timeout, check)


def scrape_prometheus(
    url: str, start: float, end: float, step: float, selector: str, instance: str | None = None
) -> list[tuple[float, Scrape]]:
    """The twin's series from Prometheus over ``[start, end]``, one pseudo-scrape a step."""
    from inferwatch.report.promapi import PrometheusClient, PrometheusUnreachable, QueryError

    client = PrometheusClient(url, timeout=60)
    names = "|".join(SERIES)
    inner = selector.strip()[1:-1] if selector.strip().startswith("{") else selector
    matchers = f'__name__=~"{names}"' + (f",{inner}" if inner else "")
    if instance:
        matchers += f',instance="{instance}"'
    try:
        series = client.range("{" + matchers + "}", start, end, step)
    except PrometheusUnreachable as exc:
        raise Unreachable(str(exc)) from None
    except QueryError as exc:
        raise Unreachable(str(exc).splitlines()[0]) from None
    by_t: dict[float, Scrape] = {}
    for s in series:
        labels = dict(s.labels)
        name = labels.pop("__name__", "")
        for t, v in s.points:
            by_t.setdefault(t, []).append((name, labels, v))
    return sorted(by_t.items())


# --------------------------------------------------------------------------- output


def _f(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.quantity(value, unit)


ROWS = (
    ("throughput", "tok/s", "throughput"),
    ("TTFT P50", "s", "ttft_p50"),
    ("TTFT P95", "s", "ttft_p95"),
    ("queue (mean)", "", "queue"),
    ("busy share", "ratio", "busy"),
    ("GPU utilization", "ratio", "gpu_utilization"),
    ("KV cache (peak)", "ratio", "kv_usage"),
)


def render_prediction(pred: Prediction) -> str:
    obs = pred.observed
    fit = pred.fit
    lines = [
        f"What if {pred.flag}={pred.value:g} on {pred.worker} ({obs.reading.engine or 'engine ?'}, "
        f"{obs.slots} slots now), from {obs.span:.0f} s observed:",
    ]
    if pred.trust is not None and not pred.trust.trusted:
        lines.append("  UNTRUSTED FIT: the figures below are not an answer to act on:")
        lines += [f"    - {p}" for p in pred.trust.problems]
    lines += [
        f"  load: {obs.load.arrival_rate:.2f} req/s, {obs.load.prompt_tokens:.0f} prompt + "
        f"{obs.load.output_tokens:.0f} output tokens each (requests from {obs.requests_from})",
        f"  step time = {fit.a * 1000:.2f} ms + {fit.k * 1000:.3f} ms x sequences + "
        f"{fit.p * 1e6:.1f} us x prompt tokens (residual {fit.residual:.0%})",
        f"  range: {pred.range_note}",
    ]
    header = f"  {'':18}{'observed':>12}{'twin now':>12}{'predicted':>12}"
    if pred.band:
        header += f"  {'predicted band (low .. high)':>30}"
    lines.append(header)
    observed: dict[str, float | None] = {
        **observed_figures(obs),
        "queue": obs.queue_mean,
        "gpu_utilization": obs.reading.gpu_util,
        "kv_usage": obs.reading.kv,
        "busy": obs.busy,
    }
    for label, unit, key in ROWS:
        row = f"  {label:18}{_f(observed.get(key), unit):>12}"
        row += f"{_f(getattr(pred.current, key), unit):>12}{_f(getattr(pred.new, key), unit):>12}"
        if pred.band:
            lo, hi = sorted_band(getattr(b, key) for b in pred.band)
            row += f"  {_f(lo, unit) + ' .. ' + _f(hi, unit):>30}"
        lines.append(row)
    for note in pred.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines) + "\n"


def sorted_band(ends: Any) -> tuple[Any, Any]:
    """A band's two ends, low first (None or NaN where the figure has none)."""
    vals = list(ends)
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals):
        return vals[0], vals[1]
    return min(vals), max(vals)


def _band(p: Prediction, key: str, unit: str) -> str:
    """`` (band LOW .. HIGH)``, low to high, where the prediction has a band."""
    if not p.band:
        return ""
    values = [getattr(b, key) for b in p.band]
    known = [v for v in values if v is not None and not math.isnan(v)]
    if len(known) != 2:
        return ""
    return f" (band {_f(min(known), unit)} .. {_f(max(known), unit)})"


def _arrow(s: Suggestion) -> str:
    p = s.prediction
    assert p is not None and s.flag
    return (
        f"  -> {s.flag}={s.value:g}: TTFT P95 {_f(p.current.ttft_p95, 's')} -> "
        f"{_f(p.new.ttft_p95, 's')}{_band(p, 'ttft_p95', 's')}, P50 {_f(p.current.ttft_p50, 's')} "
        f"-> {_f(p.new.ttft_p50, 's')}{_band(p, 'ttft_p50', 's')}, "
        f"throughput {_f(p.current.throughput, 'tok/s')} -> {_f(p.new.throughput, 'tok/s')}"
        f"{_band(p, 'throughput', 'tok/s')}, queue {p.current.queue:.1f} -> {p.new.queue:.1f}"
    )


def render_suggestion(s: Suggestion) -> str:
    lines = [
        f"Lever for {s.prediction.worker if s.prediction else 'the worker'}: {s.lever}",
        f"  {s.reason}",
    ]
    if s.prediction and s.prediction.trust is not None and not s.prediction.trust.trusted:
        lines.append("  UNTRUSTED FIT: the twin does not reproduce what it was fitted on (below)")
    if s.flag and s.prediction:
        lines.append(_arrow(s))
    then = s.then
    if then is not None:
        lines.append(f"Then: {then.lever}" if then.advised else f"For comparison: {then.lever}")
        lines.append(f"  {then.reason}")
        if then.flag and then.prediction:
            lines.append(_arrow(then))
    for shown in (s, then):
        if shown is not None and shown.prediction is not None:
            lines.append("")
            lines.append(render_prediction(shown.prediction).rstrip("\n"))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main


def read_samples(
    args: Any,
    thresholds: Any,
    prometheus_range: Range,
    check: Callable[[Scrape], object] | None = None,
) -> tuple[list[tuple[float, Scrape]], str]:
    from inferwatch.validate import duration

    span = duration(args.span, SOURCE, "--span")
    every = duration(args.every, SOURCE, "--every")
    given = [x for x in (args.agent_url, args.prometheus_url, args.trace) if x]
    if len(given) != 1:
        raise UsageError(
            "--what-if and --shadow read one of --agent-url, --prometheus-url or --trace FILE"
        )
    if args.trace:
        from inferwatch.advise.trace import read_trace

        trace = read_trace(args.trace)
        start, end = trace.phase(args.phase)
        return trace.scrapes(start, end), f"{args.trace} ({args.phase or 'first phase'})"
    if args.agent_url:
        samples = scrape_agent(args.agent_url, span, every, check=check)
        return samples, f"{args.agent_url} over {span:.0f} s"
    start, end, selector = prometheus_range(args, thresholds)
    # one pseudo-sample per Prometheus scrape: 15 s unless --every says otherwise
    step = max(every if args.every != "1s" else 15.0, (end - start) / 2000)
    return (
        scrape_prometheus(args.prometheus_url, start, end, step, selector, args.instance),
        f"{args.prometheus_url} over {end - start:.0f} s",
    )


def check_arguments(args: Any) -> None:
    """Every argument of ``--what-if`` and ``--shadow`` checked before anything is read
    (one line, exit 2): the sources, and the flags that only one source reads."""
    from inferwatch.validate import duration

    span = duration(args.span, SOURCE, "--span")
    every = duration(args.every, SOURCE, "--every")
    if span <= 0:
        raise ConfigError(SOURCE, "--span", "a duration greater than zero", args.span)
    if every <= 0:
        raise ConfigError(SOURCE, "--every", "a duration greater than zero", args.every)
    given = [x for x in (args.agent_url, args.prometheus_url, args.trace) if x]
    if len(given) != 1:
        raise UsageError(
            "--what-if and --shadow read one of --agent-url, --prometheus-url or --trace FILE"
        )
    if args.phase and not args.trace:
        raise UsageError("--phase needs --trace FILE")
    if args.instance and not args.prometheus_url:
        raise UsageError("--instance needs --prometheus-url")
    if (args.start or args.end) and not args.prometheus_url:
        raise UsageError("--start and --end need --prometheus-url")
    if args.output_tokens is not None and not args.output_tokens > 0:
        raise ConfigError(SOURCE, "--output-tokens", "tokens greater than zero", args.output_tokens)


def main_what_if(args: Any, prometheus_range: Range) -> int:
    from inferwatch.advise.capacity import parse_size
    from inferwatch.advise.whatif import precheck
    from inferwatch.pack.thresholds import load_thresholds

    flag_value = parse_what_if(args.what_if) if args.what_if and args.what_if != "suggest" else None
    check_arguments(args)
    weights = parse_size(args.weights, SOURCE, "--weights") if args.weights else None
    thresholds = load_thresholds(args.thresholds)

    def check(scrape: Scrape) -> None:
        try:
            precheck(scrape, args.worker, flag_value, args.output_tokens)
        except NotEnough as exc:
            raise UsageError(f"--what-if: {exc}") from None

    try:
        samples, where = read_samples(args, thresholds, prometheus_range, check)
        if not args.agent_url and samples:
            check(samples[-1][1])
    except Unreachable as exc:
        print(f"inferwatch advise: error: {exc}", file=sys.stderr)
        return 3
    try:
        obs = observe(samples, args.worker, args.output_tokens)
        fit = obs.fit()
        if flag_value is None:
            s = suggest(
                obs,
                fit,
                gpu_saturated=thresholds.gpu_utilization.scale_review_above,
                kv_full=thresholds.vram.scale_above,
                long_prompt_share=thresholds.latency.long_prompt_share,
                t=thresholds,
            )
            doc: dict[str, Any] = {"source": where, "suggestion": s.as_dict()}
            text = render_suggestion(s)
        else:
            pred = predict(obs, flag_value[0], flag_value[1], fit, weights_bytes=weights)
            doc = {"source": where, "what_if": pred.as_dict()}
            text = render_prediction(pred)
    except NotEnough as exc:
        raise UsageError(f"--what-if: {exc}") from None
    if args.json:
        print(json.dumps(finite(doc), indent=2, allow_nan=False))
    else:
        sys.stdout.write(text)
    return 0


def main_shadow(args: Any, prometheus_range: Range) -> int:
    """One shadow pass: observe every worker, keep its fit, judge any flag change."""
    from inferwatch.advise import shadow
    from inferwatch.advise.whatif import workers_in
    from inferwatch.pack.thresholds import load_thresholds

    if args.what_if:
        raise UsageError("give --what-if or --shadow, not both")
    check_arguments(args)
    thresholds = load_thresholds(args.thresholds)
    state = shadow.load_state(args.shadow)

    def check(scrape: Scrape) -> None:
        if args.worker:
            from inferwatch.advise.whatif import choose_worker

            choose_worker(scrape, args.worker)

    try:
        samples, _where = read_samples(args, thresholds, prometheus_range, check)
    except Unreachable as exc:
        print(f"inferwatch advise: error: {exc}", file=sys.stderr)
        return 3
    names = [args.worker] if args.worker else workers_in(samples)
    skipped = []
    for name in names:
        try:
            obs = observe(samples, name, args.output_tokens)
            fit = obs.fit()
        except NotEnough as exc:
            skipped.append(str(exc))
            continue
        shadow.step(state, obs, fit, samples[-1][1])
    shadow.save_state(args.shadow, state)
    if args.shadow_metrics:
        from pathlib import Path

        Path(args.shadow_metrics).write_text(shadow.metrics_text(state))
    if args.json:
        print(json.dumps(finite({"changes": state["changes"], "skipped": skipped}), indent=2))
    else:
        sys.stdout.write(shadow.render(state))
        for line in skipped:
            sys.stdout.write(f"  not fitted: {line}\n")
    return 0
