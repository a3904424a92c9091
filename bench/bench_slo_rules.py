"""Cost of the SLO recording rules: how long Prometheus takes to evaluate each SLI window.

Backfills ``--days`` (default 30) of one model's TTFT histogram (the two series an
SLI reads per worker: the bucket at the threshold and ``+Inf``) at a 15 s scrape,
for ``--workers`` workers, with ``promtool tsdb create-blocks-from openmetrics``,
opens the blocks in a real Prometheus and times the generated expression of
``model:inferwatch_slo_errors:ratio_rate<W>`` (TTFT part) for every window at the
end of the data, ``--repeat`` times each. A rule group evaluates it at every
``pack.scrape_interval``, so compare the figure with 15 s. ``--source engine``
stores vLLM's own buckets instead (a worker with ``export_histograms: false``),
which the same expression reads through the endpoint join.

    PYTHONPATH=agent python bench/bench_slo_rules.py --days 30 --workers 4 [--source engine]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from benchlib import machine, machine_line
from inferwatch.pack.rules import own_histograms, slo
from inferwatch.pack.thresholds import load_thresholds

STEP = 15
END = 1_800_000_000  # a fixed end, so runs compare


def write_openmetrics(path: Path, days: int, workers: int, source: str) -> int:
    """Blocks of 2 h per file keep promtool's memory flat; returns the number of samples.

    ``source`` ``agent``: the agent's ``inferwatch_ttft_seconds_bucket``; ``engine``:
    vLLM's own ``vllm:time_to_first_token_seconds_bucket`` from a direct scrape
    (``export_histograms: false``) and the agent's endpoint info series over the last
    hour, which the rules join it through.
    """
    start = END - days * 86400
    n = 0
    with path.open("w") as f:
        family = (
            "inferwatch_ttft_seconds" if source == "agent" else "vllm:time_to_first_token_seconds"
        )
        f.write(f"# TYPE {family} histogram\n")
        for w in range(workers):
            if source == "agent":
                labels = (
                    f'job="inferwatch",instance="h{w}:10127",worker="vllm-{w}",model="m",'
                    'engine="vllm"'
                )
            else:
                labels = f'job="vllm",instance="10.0.0.{w}:8000",model_name="m",engine="0"'
            for le, per_step in (("2.5", 99), ("+Inf", 100)):
                for i, t in enumerate(range(start, END + 1, STEP)):
                    f.write(f'{family}_bucket{{{labels},le="{le}"}} {i * per_step} {t}\n')
                    n += 1
        if source == "engine":
            f.write(f"# TYPE {own_histograms.ENDPOINT_INFO} gauge\n")
            for w in range(workers):
                for t in range(END - 3600, END + 1, STEP):
                    f.write(
                        f'{own_histograms.ENDPOINT_INFO}{{job="inferwatch",instance="h{w}:10127",'
                        f'worker="vllm-{w}",endpoint="10.0.0.{w}:8000"}} 1 {t}\n'
                    )
                    n += 1
        f.write("# EOF\n")
    return n


def query_seconds(url: str, expr: str, at: float) -> float:
    qs = urllib.parse.urlencode({"query": expr, "time": at})
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"{url}/api/v1/query?{qs}", timeout=600) as resp:
        doc = json.load(resp)
    elapsed = time.perf_counter() - t0
    if doc.get("status") != "success" or not doc["data"]["result"]:
        raise SystemExit(f"query failed or empty: {expr}: {doc}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--source",
        choices=("agent", "engine"),
        default="agent",
        help="whose buckets are stored: the agent's copy, or vLLM's own (export_histograms: false)",
    )
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if not (promtool and prometheus):
        print("needs promtool and prometheus", file=sys.stderr)
        return 2
    t = load_thresholds()
    (entry,) = (e for e in t.slos.entries if e.model is None)
    objective = entry.get("ttft")
    assert objective is not None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        om = root / "data.om"
        samples = write_openmetrics(om, args.days, args.workers, args.source)
        t0 = time.perf_counter()
        subprocess.run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "-q",
                str(om),
                str(root / "tsdb"),
            ],
            check=True,
            capture_output=True,
        )
        backfill = time.perf_counter() - t0
        (root / "prometheus.yml").write_text("global: {}\n")
        port = 19000 + (int(time.time()) % 1000)
        proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'tsdb'}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    query_seconds(url, "count({__name__=~'.+_bucket'})", END)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            results = {}
            for w in slo.windows(t.slos):
                expr = slo.error_ratio(t, t.slos, entry, objective, w)
                times = [query_seconds(url, expr, END) for _ in range(args.repeat)]
                results[w] = statistics.median(times)
        finally:
            proc.terminate()
            proc.wait(30)
    print(machine_line(machine()))
    print(
        f"{samples} samples ({args.source}'s buckets: {args.workers} workers x 2 series x "
        f"{args.days} d at {STEP} s); "
        f"backfill {backfill:.1f} s"
    )
    for w, sec in results.items():
        print(f"  TTFT SLI over {w:>4}: {sec * 1000:8.1f} ms (median of {args.repeat})")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "samples": samples,
                    "workers": args.workers,
                    "source": args.source,
                    "days": args.days,
                    "median_seconds": results,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
