"""Cost of the SLO recording rules: how long Prometheus takes to evaluate each SLI window.

Backfills ``--days`` (default 30) of one model's TTFT histogram (the two series an
SLI reads per worker: the bucket at the threshold and ``+Inf``) at a 15 s scrape,
for ``--workers`` workers, with ``promtool tsdb create-blocks-from openmetrics``,
opens the blocks in a real Prometheus and times the generated expression of
``model:inferwatch_slo_errors:ratio_rate<W>`` (TTFT part) for every window at the
end of the data, ``--repeat`` times each. A rule group evaluates it at every
``pack.scrape_interval``, so compare the figure with 15 s.

    PYTHONPATH=agent python bench/bench_slo_rules.py --days 30 --workers 4
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
from inferwatch.pack import slo
from inferwatch.pack.thresholds import load_thresholds

STEP = 15
END = 1_800_000_000  # a fixed end, so runs compare


def write_openmetrics(path: Path, days: int, workers: int) -> int:
    """Blocks of 2 h per file keep promtool's memory flat; returns the number of samples."""
    start = END - days * 86400
    n = 0
    with path.open("w") as f:
        f.write("# TYPE inferwatch_ttft_seconds histogram\n")
        for w in range(workers):
            labels = (
                f'job="inferwatch",instance="h{w}:10127",worker="vllm-{w}",model="m",engine="vllm"'
            )
            for le, per_step in (("2.5", 99), ("+Inf", 100)):
                for i, t in enumerate(range(start, END + 1, STEP)):
                    f.write(
                        f'inferwatch_ttft_seconds_bucket{{{labels},le="{le}"}} {i * per_step} {t}\n'
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
        samples = write_openmetrics(om, args.days, args.workers)
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
                    query_seconds(url, "count(inferwatch_ttft_seconds_bucket)", END)
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
        f"{samples} samples ({args.workers} workers x 2 series x {args.days} d at {STEP} s); "
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
                    "days": args.days,
                    "median_seconds": results,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
