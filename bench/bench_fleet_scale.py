"""What one Prometheus carries: replayed agents for N GPUs scraped with the generated rules (issue 21).

    PYTHONPATH=agent python bench/bench_fleet_scale.py [--gpus 1,10,100,1000]
        [--scrape-interval 15s] [--settle 90] [--json FILE]

For each N and each variant (the agents' output with the latency histograms
they pass through from the engines, and without them), the script starts:

- replayed agents (``tests/support/replay.py``): a real agent's capture for
  N GPUs and N vLLM workers, on hosts of 8 GPUs, served from this process;
- a real Prometheus (Debian's), configured from the shipped
  ``deploy/prometheus/prometheus.yml`` with the committed
  ``alerts/*.yaml`` rules, scraping the hosts and itself at the interval given
  (the shipped default 15s; rules are evaluated at the same interval).

After ``--settle`` seconds it reads Prometheus' own metrics: series in the head
block (all, the agents', the recording rules'), samples appended per second
(scraped and recorded), the last evaluation time of each rule group, the
scrape duration, and resident memory (the most it reached in the run). It
prints one table per variant and the growth exponent k of each figure, from a
least-squares fit of log(figure) against log(N) over N >= 10: k = 1 is linear.

Nothing is asserted; figures depend on the machine, printed first.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.proc import Prometheus, wait_until  # noqa: E402
from tests.support.replay import ReplayServer, make_hosts, scrape_targets  # noqa: E402
from tests.support.stack import ALERTS_DIR, parse_duration, render_prometheus_config  # noqa: E402

import benchlib  # noqa: E402

_BUCKET_RATE = re.compile(r'rate\((inferwatch_(\w+)_seconds_bucket)\{job="inferwatch"\}\[5m\]\)')


def shared_bucket_rules(dest: Path) -> Path:
    """The committed rules with each histogram's bucket rate recorded once per worker.

    A candidate change measured here, not shipped: today every quantile rule
    (p50, p95, p99 per worker, p99 per model and for the cluster) computes
    ``rate()`` over the raw buckets again. Here one rule per histogram records
    ``worker:inferwatch_<h>_seconds_bucket:rate5m`` and the quantiles aggregate
    that.
    """
    import yaml

    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ALERTS_DIR / "inferwatch-alerts.yaml", dest / "inferwatch-alerts.yaml")
    doc = yaml.safe_load((ALERTS_DIR / "inferwatch-rules.yaml").read_text())
    group = doc["groups"][0]
    added = {}
    for rule in group["rules"]:
        expr = str(rule["expr"])
        for match in _BUCKET_RATE.finditer(expr):
            name = f"worker:{match.group(1)}:rate5m"
            added[name] = (
                "sum by (le, job, instance, worker, model, engine) "
                f'(rate({match.group(1)}{{job="inferwatch"}}[5m]))'
            )
        rule["expr"] = _BUCKET_RATE.sub(lambda m: f"worker:{m.group(1)}:rate5m", expr)
    group["rules"] = [{"record": k, "expr": v} for k, v in added.items()] + group["rules"]
    (dest / "inferwatch-rules.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def one(value: Any) -> float:
    return float(value[0]["value"][1]) if value else math.nan


def measure(
    gpus: int,
    histograms: bool,
    interval: str,
    settle: float,
    tmp: Path,
    rules_dir: Path = ALERTS_DIR,
) -> dict[str, Any]:
    hosts = make_hosts(gpus, histograms=histograms)
    server = ReplayServer(hosts)
    prom: Prometheus | None = None
    try:
        cfg = render_prometheus_config(
            rules_dir=rules_dir,
            alertmanager=None,
            scrape_interval=interval,
            evaluation_interval=interval,
            self_target="127.0.0.1:0",  # replaced below, once the port is known
        )
        for job in cfg["scrape_configs"]:
            if job["job_name"] == "inferwatch":
                job["static_configs"] = scrape_targets(server)
        # the self-scrape job is pointed at this Prometheus after start (reload)
        prom = Prometheus(tmp, json.dumps(cfg))
        for job in cfg["scrape_configs"]:
            if job["job_name"] == "prometheus":
                job["static_configs"] = [{"targets": [f"127.0.0.1:{prom.port}"]}]
        prom.config_path.write_text(json.dumps(cfg))
        prom.reload()
        wait_until(prom.targets_up, 120, interval=1.0, message="every target up")
        start = time.time()
        rss_max = 0.0
        while time.time() - start < settle:
            rss = one(prom.query('process_resident_memory_bytes{job="prometheus"}'))
            if not math.isnan(rss):
                rss_max = max(rss_max, rss)
            time.sleep(5)
        window = f"{int(max(settle - parse_duration(interval), 2 * parse_duration(interval)))}s"
        groups = {
            r["metric"]["rule_group"].rsplit(";", 1)[-1]: float(r["value"][1])
            for r in prom.query("prometheus_rule_group_last_duration_seconds")
        }
        rules = [
            (float(r.get("evaluationTime", 0.0)), r.get("name", ""))
            for g in prom.api("rules")["groups"]
            for r in g["rules"]
        ]
        costliest = {name: seconds for seconds, name in sorted(rules, reverse=True)[:8]}
        return {
            "gpus": gpus,
            "workers": gpus,
            "hosts": len(hosts),
            "histograms": histograms,
            "exposed_series": sum(h.series() for h in hosts),
            "head_series": one(prom.query("prometheus_tsdb_head_series")),
            "agent_series": one(prom.query('count({job="inferwatch", __name__!~".+:.+"})')),
            "recorded_series": one(prom.query('count({__name__=~".+:.+"})')),
            "samples_per_s": one(
                prom.query(f"rate(prometheus_tsdb_head_samples_appended_total[{window}])")
            ),
            "scrape_duration_s": one(prom.query('max(scrape_duration_seconds{job="inferwatch"})')),
            "rule_groups_s": groups,
            "rule_eval_s": sum(groups.values()),
            "cpu_cores": one(
                prom.query(f'rate(process_cpu_seconds_total{{job="prometheus"}}[{window}])')
            ),
            "rule_failures": one(prom.query("sum(prometheus_rule_evaluation_failures_total)")),
            "rss_bytes": rss_max,
            "costliest_rules_s": costliest,
            "replay_scrapes": server.scrapes,
        }
    finally:
        if prom is not None:
            prom.stop()
        server.stop()


def exponent(rows: list[dict[str, Any]], key: str) -> float:
    pts = [
        (math.log(r["gpus"]), math.log(r[key]))
        for r in rows
        if r["gpus"] >= 10 and r.get(key, math.nan) > 0
    ]
    if len(pts) < 2:
        return math.nan
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den


KEYS = (
    "agent_series",
    "recorded_series",
    "head_series",
    "samples_per_s",
    "rule_eval_s",
    "rss_bytes",
)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'GPUs':>5} {'hosts':>5} {'agent series':>12} {'/GPU':>6} {'recorded':>9} "
        f"{'/GPU':>5} {'head':>8} {'samples/s':>9} {'rules ms':>8} {'scrape ms':>9} "
        f"{'CPU %':>6} {'RSS MiB':>8} {'KiB/series':>10}"
    ]
    for r in rows:
        lines.append(
            f"{r['gpus']:>5} {r['hosts']:>5} {r['agent_series']:>12.0f} "
            f"{r['agent_series'] / r['gpus']:>6.0f} {r['recorded_series']:>9.0f} "
            f"{r['recorded_series'] / r['gpus']:>5.1f} {r['head_series']:>8.0f} "
            f"{r['samples_per_s']:>9.0f} {r['rule_eval_s'] * 1000:>8.1f} "
            f"{r['scrape_duration_s'] * 1000:>9.1f} {r.get('cpu_cores', math.nan) * 100:>6.1f} "
            f"{r['rss_bytes'] / 2**20:>8.0f} "
            f"{r['rss_bytes'] / 1024 / r['head_series']:>10.2f}"
        )
    top = rows[-1].get("costliest_rules_s")
    if top:
        lines.append(
            f"costliest rules at {rows[-1]['gpus']} GPUs (last evaluation, ms): "
            + ", ".join(f"{name} {sec * 1000:.0f}" for name, sec in top.items())
        )
    fits = {k: exponent(rows, k) for k in KEYS}
    lines.append(
        "growth exponent k (figure ~ N^k, N >= 10): "
        + ", ".join(f"{k} {v:.2f}" for k, v in fits.items())
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="1,10,100,1000", help="comma-separated N")
    parser.add_argument("--scrape-interval", default="15s")
    parser.add_argument("--settle", type=float, default=90.0, help="seconds per step")
    parser.add_argument("--variants", default="with,without", help="with,without histograms")
    parser.add_argument("--tmp", default=str(REPO / "build" / "bench-fleet"))
    parser.add_argument(
        "--rules",
        choices=("committed", "shared-bucket-rate"),
        default="committed",
        help="the committed alerts/*.yaml, or a candidate that records bucket rates once",
    )
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    sizes = [int(x) for x in args.gpus.split(",")]
    tmp = Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    info = benchlib.machine()
    print(benchlib.machine_line(info), flush=True)
    rules_dir = (
        shared_bucket_rules(tmp / "rules-shared-bucket-rate")
        if args.rules == "shared-bucket-rate"
        else ALERTS_DIR
    )
    result: dict[str, Any] = {
        "machine": info,
        "interval": args.scrape_interval,
        "rules": args.rules,
        "variants": {},
    }
    for variant in args.variants.split(","):
        rows = []
        for n in sizes:
            row = measure(n, variant == "with", args.scrape_interval, args.settle, tmp, rules_dir)
            print(json.dumps(row), flush=True)
            rows.append(row)
        title = "with" if variant == "with" else "without"
        print(
            f"\nrules {args.rules}, {title} the engines' histograms passed through, "
            f"scrape/eval {args.scrape_interval}"
        )
        print(table(rows), flush=True)
        result["variants"][variant] = {"rows": rows, "fit": {k: exponent(rows, k) for k in KEYS}}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
