"""``inferwatch backtest``: replay scenarios through the committed rules, score every alert.

Each scenario (a synthetic one of ``scenarios/*.yaml`` or a recorded trace, a
``.jsonl.gz`` file) becomes the agent's series at the deployment's scrape interval;
``promtool test rules`` evaluates the rule files (``alerts/`` of the checkout by
default) over them at the evaluation interval, and the resulting alert timeline is
held to the scenario's ground truth: time to detect, misses, false pages by
severity, flaps (:mod:`inferwatch.backtest.score`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from inferwatch.backtest.engine import evaluate, promtool_binary
from inferwatch.backtest.scenario import Scenario, load_scenario, scenario_files
from inferwatch.backtest.score import ScenarioScore, markdown, score, summarize, text_table
from inferwatch.backtest.trace import load_trace
from inferwatch.backtest.truth import alert_facts
from inferwatch.cli import add_options
from inferwatch.errors import ConfigError, UsageError
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.validate import duration_seconds

REPO = Path(__file__).resolve().parents[3]
RULE_FILES = ("inferwatch-rules.yaml", "inferwatch-alerts.yaml")
PROMETHEUS_CONFIG = Path("deploy/prometheus/prometheus.yml")
MARK_BEGIN = "<!-- backtest:begin (inferwatch backtest --all --markdown-into docs/alerts.md) -->"
MARK_END = "<!-- backtest:end -->"
#: recorded traces the `--all` run picks up when present (the checkout's tests/data/traces)
TRACE_DIR = Path("tests/data/traces")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help="built-in scenario names (--list), scenario files (.yaml) or recorded traces "
        "(.jsonl.gz); --all for the built-in ones",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every built-in scenario, and the traces under tests/data/traces when present",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="print the built-in scenarios' names and descriptions, and exit",
    )
    add_options(
        p,
        ("--rules", "DIR", "the rule files' directory (default: alerts/ of the checkout)"),
        *(
            (f"--{name}", "DURATION", f"default: global.{key} of {PROMETHEUS_CONFIG} (15s)")
            for name, key in (
                ("scrape-interval", "scrape_interval"),
                ("evaluation-interval", "evaluation_interval"),
            )
        ),
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="per scenario and per alert, as JSON")
    out.add_argument("--markdown", action="store_true", help="the table for docs/alerts.md")
    add_options(
        out,
        (
            "--markdown-into",
            "FILE",
            "replace the table between the backtest markers of FILE (docs/alerts.md)",
        ),
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 on a false critical page, a miss or a slow detection (xfail scenarios aside)",
    )
    p.add_argument("--jobs", type=int, default=2, help="promtool runs at once (default 2)")
    add_options(p, ("--keep", "DIR", "keep each scenario's promtool test file here"))


def _interval(flag: str | None, key: str, name: str) -> float:
    if flag is not None:
        seconds = duration_seconds(flag)
        if seconds is None or seconds <= 0:
            raise ConfigError(f"--{name}", name, "a positive duration such as 15s", flag)
        return seconds
    for base in (Path.cwd(), REPO):
        path = base / PROMETHEUS_CONFIG
        if path.is_file():
            doc = yaml.safe_load(path.read_text()) or {}
            text = (doc.get("global") or {}).get(key)
            seconds = duration_seconds(str(text)) if text is not None else None
            if seconds is None or seconds <= 0:
                raise ConfigError(str(path), f"global.{key}", "a positive duration", text)
            return seconds
    return load_thresholds().pack.scrape_interval


def rule_files(directory: str | None) -> list[Path]:
    candidates = [Path(directory)] if directory else [Path.cwd() / "alerts", REPO / "alerts"]
    for base in candidates:
        files = [base / name for name in RULE_FILES]
        if all(f.is_file() for f in files):
            return files
    where = directory or "alerts/"
    raise ConfigError(where, "rule files", f"{' and '.join(RULE_FILES)} (inferwatch generate)")


def catalogue(files: list[Path]) -> frozenset[str]:
    """Alert names of the thresholds' catalogue (truth.alert_facts) and of the rule files."""
    names = set(alert_facts(load_thresholds()))
    for f in files:
        doc = yaml.safe_load(f.read_text()) or {}
        for group in doc.get("groups", []):
            names.update(r["alert"] for r in group.get("rules", []) if "alert" in r)
    return frozenset(names)


def built_in() -> dict[str, Path]:
    """The built-in scenarios (``scenarios/*.yaml`` of the package) by name."""
    return {p.stem: p for p in scenario_files()}


def listing() -> str:
    """``--list``: one line per built-in scenario, its name and its description."""
    scenarios = built_in()
    width = max(map(len, scenarios))
    lines = []
    for name, path in scenarios.items():
        doc = yaml.safe_load(path.read_text()) or {}
        description = " ".join(str(doc.get("description", "")).split())
        lines.append(f"{name:<{width}}  {description}".rstrip())
    return "\n".join(lines) + "\n"


def _path(arg: str) -> Path:
    """A scenario file or trace as given, else the built-in scenario of that name."""
    path = Path(arg)
    if path.is_file():
        return path
    scenarios = built_in()
    if arg in scenarios:
        return scenarios[arg]
    near = difflib.get_close_matches(arg, scenarios, n=1)
    raise ConfigError(
        arg,
        "(scenario)",
        "an existing scenario (.yaml) or trace (.jsonl.gz), or a built-in scenario's name "
        f"(inferwatch backtest --list{f'; did you mean {near[0]}?' if near else ''})",
    )


def inputs(args: argparse.Namespace) -> list[Path]:
    paths = [_path(p) for p in args.scenarios]
    if args.all:
        paths = scenario_files() + paths
        for base in (Path.cwd(), REPO):
            traces = base / TRACE_DIR
            if traces.is_dir():
                paths += sorted(traces.glob("*.jsonl.gz"))
                break
    if not paths:
        raise UsageError(
            "name scenarios (inferwatch backtest --list), files or traces, or pass --all"
        )
    return paths


def load(path: Path, alerts: frozenset[str], scrape: float, evaluation: float) -> Scenario:
    if path.name.endswith(".jsonl.gz"):
        return load_trace(path, alerts, scrape, evaluation)
    return load_scenario(path, alerts, scrape)


def run_backtest(
    paths: list[Path],
    rules: list[Path],
    scrape: float,
    evaluation: float,
    jobs: int = 2,
    keep: Path | None = None,
) -> list[ScenarioScore]:
    promtool_binary()
    alerts = catalogue(rules)
    facts = alert_facts(load_thresholds())
    scenarios = [load(p, alerts, scrape, evaluation) for p in paths]

    def one(sc: Scenario) -> ScenarioScore:
        kept = keep / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', sc.name)}.test.yaml" if keep else None
        # a scenario that sets its own intervals (a month at 15 s would take hours) runs at them
        own_scrape, own_evaluation = sc.scrape or scrape, sc.evaluation or evaluation
        probes = tuple(dict.fromkeys((r.record, r.at) for r in sc.truth.ratios))
        timeline = evaluate(sc.series, sc.duration, rules, own_scrape, own_evaluation, kept, probes)
        return score(sc.name, sc.source, timeline, sc.truth, facts, own_scrape, own_evaluation)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, scenarios))


def replace_between_markers(path: Path, body: str) -> None:
    text = path.read_text()
    if MARK_BEGIN not in text or MARK_END not in text:
        raise ConfigError(str(path), "backtest markers", f"{MARK_BEGIN} ... {MARK_END}")
    head, rest = text.split(MARK_BEGIN, 1)
    _, tail = rest.split(MARK_END, 1)
    path.write_text(f"{head}{MARK_BEGIN}\n{body}{MARK_END}{tail}")


def main(args: argparse.Namespace) -> int:
    if args.list:
        if args.scenarios or args.all:
            raise UsageError("--list: lists the built-in scenarios; name none and leave out --all")
        sys.stdout.write(listing())
        return 0
    scrape = _interval(args.scrape_interval, "scrape_interval", "scrape-interval")
    evaluation = _interval(args.evaluation_interval, "evaluation_interval", "evaluation-interval")
    rules = rule_files(args.rules)
    paths = inputs(args)
    keep = Path(args.keep) if args.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    scores = run_backtest(paths, rules, scrape, evaluation, args.jobs, keep)
    facts = alert_facts(load_thresholds())
    summary = summarize(scores, facts, scrape, evaluation)
    if args.json:
        doc = {
            "scrape_interval_s": scrape,
            "evaluation_interval_s": evaluation,
            "rules": [str(r) for r in rules],
            "alerts": [s.__dict__ for s in summary],
            "scenarios": [s.as_json() for s in scores],
        }
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.markdown:
        sys.stdout.write(markdown(summary, scores, scrape, evaluation))
    elif args.markdown_into:
        replace_between_markers(
            Path(args.markdown_into), markdown(summary, scores, scrape, evaluation)
        )
    else:
        sys.stdout.write(text_table(summary, scores))
    failed = [s for s in scores if not s.passed and not s.xfail]
    return 1 if args.check and failed else 0
