"""The fleet's rule evaluator on day 30: vmalert over VictoriaMetrics with 30 days of history
(issue 38, item 4).

    PYTHONPATH=agent python bench/bench_fleet_history.py [--workers 8,32] [--days 30]
        [--run 450] [--clusters 2] [--json FILE]

For each ``--workers`` N, one after the other, on loopback ports:

1. **History.** A real VictoriaMetrics (Debian's 1.79, ``tests/support/vm.py``, retention
   100 d) gets ``--days`` of a 15 s scrape for N vLLM workers, ending now, from the generator of
   ``bench/bench_rule_cost.py`` (``History``: the same traffic, incidents and series): the series
   the SLO rules read over the whole history, every other series an agent exports over the last
   ``--short-hours``. Workers are spread over ``--clusters`` values of the ``cluster`` label, as
   the fleet layout stores them (docs/fleet.md). Import: VictoriaMetrics' JSON line format
   (``/api/v1/import``, one line per series and 2 h block), then ``/internal/force_flush``.
2. **Recorded history, replayed.** The recorded series that a rule reads over a range
   (``backfill_plan`` of bench_rule_cost.py on the committed rules: the 5m SLO records and
   ``model:inferwatch_slo_{good_,}requests:rate5m_avg2m30s`` over the whole history, a few
   per-worker records over an hour) are written by **vmalert's replay mode**
   (``-replay.timeFrom/-replay.timeTo``: the committed expressions, evaluated by the store as
   range queries at the group's interval and written back), level by level (a record that reads
   another record is replayed after it, with a flush in between). Nothing is computed in Python.
3. **Normal mode.** A feeder keeps appending the next scrape's samples every 15 s (the same
   generator, continued); vmalert runs the committed ``alerts/*.yaml`` (every group, at its own
   interval) against the store, notifying a real Alertmanager, for ``--run`` seconds. Every 2 s
   the bench reads vmalert's ``/metrics``: ``vmalert_iteration_duration_seconds_sum`` and
   ``_count`` per group give each evaluation's seconds, ``vmalert_iteration_missed_total`` the
   evaluations skipped because the previous one overran. At the end: the rules' errors, the
   samples the 30-day windows found (``count_over_time`` of the 2m30s records), and the 30-day
   error ratios the rules recorded against the exact ones (``increase`` over 30 d on the raw
   counters).

Printed per group and N: evaluations seen, mean and largest evaluation seconds, share of the
interval, seconds per worker; then a least-squares line t = a + b N over the sizes per group,
its value at ``--project`` (1,000) workers and whether it stays inside the interval. The
machine line and the load average (start and end of each measurement) are printed: the figures
are the store's and vmalert's on this machine under the load there was.

    PYTHONPATH=agent python bench/bench_fleet_history.py --quick     # 2 workers, 1 day, 30 s
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from tests.support.proc import Alertmanager, http_get  # noqa: E402
from tests.support.vm import VMALERT, VictoriaMetrics, VMAlert  # noqa: E402

from bench_rule_cost import (  # noqa: E402
    STEP,
    BadInput,
    History,
    RuleSet,
    backfill_plan,
    duration,
    exact_ratio,
    levels,
    load_rules,
    slos,
)
from benchlib import machine, machine_line, write_json  # noqa: E402
from inferwatch.pack.thresholds import load_thresholds  # noqa: E402

#: the recorded 2m30s averages the long windows read
AVG_RECORDS = (
    "model:inferwatch_slo_good_requests:rate5m_avg2m30s",
    "model:inferwatch_slo_requests:rate5m_avg2m30s",
)
NULL_ALERTMANAGER = "route:\n  receiver: none\nreceivers:\n  - name: none\n"


# --------------------------------------------------------------------------- import
_LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


def metric_json(head: str, cache: dict[str, str]) -> str:
    """``name{a="b"}`` -> the JSON object of VictoriaMetrics' import format (cached per head)."""
    out = cache.get(head)
    if out is None:
        name, _, rest = head.partition("{")
        labels = {"__name__": name}
        labels.update((k, v.encode().decode("unicode_escape")) for k, v in _LABEL.findall(rest))
        out = cache[head] = json.dumps(labels, separators=(",", ":"))
    return out


def json_lines(hist: History, ts: np.ndarray, cache: dict[str, str]) -> tuple[bytes, int]:
    """The samples of ``hist`` at ``ts`` as JSON lines (timestamps in ms); and their count."""
    stamps = [str(t * 1000) for t in ts.tolist()]
    lines = []
    samples = 0
    for head, values in hist.series_at(ts):
        vals = [str(v) for v in values.tolist()] if isinstance(values, np.ndarray) else values
        tail = stamps[len(stamps) - len(vals) :]
        lines.append(
            f'{{"metric":{metric_json(head, cache)},"values":[{",".join(vals)}],'
            f'"timestamps":[{",".join(tail)}]}}\n'
        )
        samples += len(vals)
    return "".join(lines).encode(), samples


def post(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=600) as response:
        if response.status not in (200, 204):
            raise RuntimeError(f"{url}: HTTP {response.status}")


def flush(vm: VictoriaMetrics) -> None:
    """Make what was imported searchable, and drop cached results that predate it."""
    with urllib.request.urlopen(f"{vm.url}/internal/force_flush", timeout=120):
        pass
    with urllib.request.urlopen(f"{vm.url}/internal/resetRollupResultCache", timeout=60):
        pass


def import_history(vm: VictoriaMetrics, hist: History) -> int:
    """Every 2 h block of ``hist`` into the store: generated here while the previous one is
    posted. Returns the samples imported."""
    bodies: queue.Queue[bytes | None] = queue.Queue(maxsize=2)
    failure: list[BaseException] = []

    def sender() -> None:
        try:
            while (body := bodies.get()) is not None:
                post(f"{vm.url}/api/v1/import", body)
        except BaseException as exc:  # handed to the main thread
            failure.append(exc)
            while bodies.get() is not None:  # let the producer finish
                pass

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    cache: dict[str, str] = {}
    total = 0
    for ts in hist.spans():
        body, n = json_lines(hist, ts, cache)
        total += n
        bodies.put(body)
    bodies.put(None)
    thread.join()
    if failure:
        raise RuntimeError(f"import failed: {failure[0]}")
    flush(vm)
    return total


class Feeder(threading.Thread):
    """Appends the next scrape's samples of every series as time passes, as Prometheus'
    remote write would: everything from the history's end up to now, then each 15 s step."""

    def __init__(self, vm: VictoriaMetrics, hist: History) -> None:
        super().__init__(daemon=True)
        self.vm, self.hist = vm, hist
        self.last = hist.end
        self.samples = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.cache: dict[str, str] = {}

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                now = int(time.time()) // STEP * STEP
                if now > self.last:
                    ts = np.arange(self.last + STEP, now + 1, STEP)
                    body, n = json_lines(self.hist, ts, self.cache)
                    post(f"{self.vm.url}/api/v1/import", body)
                    self.samples += n
                    self.last = now
                self.stopping.wait(1.0)
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


# --------------------------------------------------------------------------- replay
def rfc3339(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def replay_records(
    vm: VictoriaMetrics, rules_dir: Path, days: float, short_hours: float, end: int, root: Path
) -> list[str]:
    """The recorded history the rules read over ranges, written by vmalert's replay mode."""
    groups = load_rules(rules_dir, STEP)
    plan = backfill_plan([RuleSet("inferwatch", groups)], [], days, short_hours)
    notes = []
    for lv, names in enumerate(levels(plan)):
        batches: dict[tuple[int, int], list[Any]] = {}
        for n in names:
            owners, hist = plan[n]
            for g, r in owners:
                batches.setdefault((g.interval, hist), []).append(r)
        for (interval, hist), rules in sorted(batches.items()):
            rule_file = root / f"replay-{lv}-{interval}-{hist}.yaml"
            doc = {
                "groups": [
                    {
                        "name": f"replay-{lv}",
                        "interval": f"{interval}s",
                        "rules": [
                            {
                                "record": r.name,
                                "expr": r.expr,
                                **({"labels": r.labels} if r.labels else {}),
                            }
                            for r in rules
                        ],
                    }
                ]
            }
            rule_file.write_text(yaml.safe_dump(doc, sort_keys=False))
            t0 = time.perf_counter()
            res = subprocess.run(
                [
                    str(VMALERT),
                    f"-datasource.url={vm.url}",
                    f"-remoteWrite.url={vm.url}",
                    f"-rule={rule_file}",
                    f"-replay.timeFrom={rfc3339(end - hist)}",
                    f"-replay.timeTo={rfc3339(end)}",
                    "-replay.disableProgressBar",
                    # 1.79's replay steps its range queries by -datasource.queryStep (default 5m),
                    # not by the group's interval: without this, one record every 5 minutes
                    f"-datasource.queryStep={interval}s",
                    "-replay.maxDatapointsPerQuery=10000",
                    "-httpListenAddr=127.0.0.1:0",
                ],
                capture_output=True,
                text=True,
                timeout=3600,
            )
            out = res.stdout + res.stderr
            if res.returncode:
                raise RuntimeError(f"vmalert replay failed: {out[-2000:]}")
            m = re.search(r"Imported (\d+) samples", out)
            flush(vm)
            notes.append(
                f"level {lv}: {len(rules)} record(s) at {interval}s over {duration(hist)}: "
                f"{m.group(1) if m else '?'} samples, {time.perf_counter() - t0:.0f} s"
            )
    return notes


# --------------------------------------------------------------------------- measuring vmalert
_SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def vmalert_metrics(url: str) -> dict[tuple[str, str], float]:
    """(metric, group) -> value for vmalert's per-group metrics (quantiles left out)."""
    status, body, _ = http_get(f"{url}/metrics", timeout=10)
    if status != 200:
        raise RuntimeError(f"vmalert /metrics: HTTP {status}")
    out: dict[tuple[str, str], float] = {}
    for line in body.decode().splitlines():
        m = _SAMPLE.match(line)
        if not m or not m.group(1).startswith("vmalert_iteration") or "quantile=" in m.group(2):
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        if "group" in labels:
            out[(m.group(1), labels["group"])] = float(m.group(3))
    return out


def process_cpu(url: str) -> float:
    _, body, _ = http_get(f"{url}/metrics", timeout=10)
    for line in body.decode().splitlines():
        if line.startswith("process_cpu_seconds_total "):
            return float(line.split()[1])
    return math.nan


@dataclass
class GroupRun:
    interval: float
    evaluations: list[float] = field(default_factory=list)
    missed: float = 0.0

    def summary(self, workers: int) -> dict[str, Any]:
        ev = self.evaluations
        mean = statistics.fmean(ev) if ev else math.nan
        return {
            "interval_s": self.interval,
            "evaluations": len(ev),
            "mean_s": mean,
            "median_s": statistics.median(ev) if ev else math.nan,
            "max_s": max(ev) if ev else math.nan,
            "share_mean": mean / self.interval,
            "share_max": (max(ev) if ev else math.nan) / self.interval,
            "per_worker_s": mean / workers,
            "missed": self.missed,
            "seconds": ev,
        }


def watch(vmalert: VMAlert, seconds: float, feeder: Feeder) -> dict[str, GroupRun]:
    groups: dict[str, GroupRun] = {}
    last: dict[str, tuple[float, float]] = {}
    deadline = time.monotonic() + seconds
    while True:
        m = vmalert_metrics(vmalert.url)
        for (name, group), value in m.items():
            if name == "vmalert_iteration_interval_seconds" and group not in groups:
                groups[group] = GroupRun(value)
        for group, run in groups.items():
            total = m.get(("vmalert_iteration_duration_seconds_sum", group), 0.0)
            count = m.get(("vmalert_iteration_duration_seconds_count", group), 0.0)
            run.missed = m.get(("vmalert_iteration_missed_total", group), 0.0)
            before = last.get(group, (0.0, 0.0))
            if count > before[1]:
                run.evaluations.extend(
                    [(total - before[0]) / (count - before[1])] * int(count - before[1])
                )
            last[group] = (total, count)
        if feeder.error is not None:
            raise RuntimeError(f"feeder failed: {feeder.error}")
        if time.monotonic() >= deadline:
            return groups
        time.sleep(2.0)


def rule_errors(vmalert: VMAlert) -> list[str]:
    return [
        f"{g['name']}/{r['name']}: {r['lastError'][:200]}"
        for g in vmalert.groups()
        for r in g["rules"]
        if r.get("lastError")
    ]


def long_window_check(vm: VictoriaMetrics, period: str) -> dict[str, Any]:
    """What the 30-day windows found: samples of the 2m30s records, and the recorded 30-day
    error ratios against ``increase`` over the raw counters (by cluster and model)."""
    seen = {}
    for name in AVG_RECORDS:
        res = vm.query(f"max(count_over_time({name}[{period}]))")
        seen[name] = float(res[0]["value"][1]) if res else 0.0
    errors = {}
    # the 30-day rates the long group recorded, divided here: vmalert reads a record written
    # earlier in the same evaluation only once remote write has delivered it, so the group's
    # own ratio record lags its rates by one evaluation (and is missing after the first)
    good, requests = (
        f"model:inferwatch_slo_{k}:rate{period}" for k in ("good_requests", "requests")
    )
    for slo in slos():
        exact_expr = exact_ratio(slo, period).replace("by (model)", "by (cluster, model)")
        exact = {
            (r["metric"].get("cluster", ""), r["metric"].get("model", "")): float(r["value"][1])
            for r in vm.query(exact_expr)
        }
        got = {
            (r["metric"].get("cluster", ""), r["metric"].get("model", "")): float(r["value"][1])
            for r in vm.query(f'1 - {good}{{slo="{slo.kind}"}} / {requests}{{slo="{slo.kind}"}}')
        }
        rel = [abs(got[k] - v) / v * 100 for k, v in exact.items() if k in got and v > 0]
        errors[slo.kind] = {
            "pairs": len(rel),
            "of": len(exact),
            "max_rel_error_pct": max(rel) if rel else None,
        }
    return {"samples_in_window": seen, "ratio_30d": errors}


# --------------------------------------------------------------------------- one fleet size
def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_size(args: argparse.Namespace, workers: int, root: Path) -> dict[str, Any]:
    rules_dir = Path(args.rules)
    objectives = slos()
    period = duration(load_thresholds().slos.window)
    root.mkdir(parents=True)
    result: dict[str, Any] = {"workers": workers}
    parts: list[Any] = []
    feeder: Feeder | None = None
    try:
        vm = VictoriaMetrics(root, retention="100d")
        parts.append(vm)
        end = int(time.time()) // STEP * STEP
        hist = History(
            root,
            workers,
            args.days,
            args.short_hours,
            objectives,
            "",
            end=end,
            clusters=args.clusters,
        )
        hist.prepare()
        t0 = time.perf_counter()
        samples = import_history(vm, hist)
        took = time.perf_counter() - t0
        result["history"] = {
            "samples": samples,
            "series_full": hist.series_long,
            "series_short": hist.series_short,
            "seconds": round(took, 1),
        }
        print(
            f"[{workers} workers] history: {samples:,} samples ({samples / took:,.0f}/s), "
            f"{hist.series_long} series over {args.days:g} d, {hist.series_short} over the "
            f"last {args.short_hours:g} h; {took:.0f} s",
            flush=True,
        )
        feeder = Feeder(vm, hist)
        feeder.start()
        t0 = time.perf_counter()
        result["replay"] = replay_records(vm, rules_dir, args.days, args.short_hours, end, root)
        result["replay_seconds"] = round(time.perf_counter() - t0, 1)
        for note in result["replay"]:
            print(f"[{workers} workers] replay: {note}", flush=True)
        result["store_bytes"] = du(vm.dir)
        am = Alertmanager(root, NULL_ALERTMANAGER)
        parts.append(am)
        vmalert = VMAlert(
            root,
            datasource_url=vm.url,
            remote_write_url=vm.url,
            rule_files=sorted(rules_dir.glob("*.yaml")),
            notifier_url=am.url,
            evaluation_interval=f"{STEP}s",
        )
        parts.append(vmalert)
        load0 = os.getloadavg()
        cpu0 = (process_cpu(vm.url), process_cpu(vmalert.url), time.monotonic())
        print(
            f"[{workers} workers] vmalert running {args.run:.0f} s; load average "
            f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}",
            flush=True,
        )
        groups = watch(vmalert, args.run, feeder)
        cpu1 = (process_cpu(vm.url), process_cpu(vmalert.url), time.monotonic())
        load1 = os.getloadavg()
        wall = cpu1[2] - cpu0[2]
        result["load_average"] = {
            "start": [round(x, 2) for x in load0],
            "end": [round(x, 2) for x in load1],
        }
        result["cpu_cores"] = {
            "victoria-metrics": (cpu1[0] - cpu0[0]) / wall,
            "vmalert": (cpu1[1] - cpu0[1]) / wall,
        }
        result["groups"] = {g: run.summary(workers) for g, run in groups.items()}
        result["rule_errors"] = rule_errors(vmalert)
        result["long_windows"] = long_window_check(vm, period)
        result["fed_samples"] = feeder.samples
    finally:
        if feeder is not None:
            feeder.stop()
        for part in reversed(parts):
            part.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return result


# --------------------------------------------------------------------------- report
def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares t = a + b N; one point: a line through the origin."""
    pts = [(n, t) for n, t in points if not math.isnan(t)]
    if not pts:
        return math.nan, math.nan
    if len(pts) == 1:
        return 0.0, pts[0][1] / pts[0][0]
    mx = statistics.fmean(n for n, _ in pts)
    my = statistics.fmean(t for _, t in pts)
    den = sum((n - mx) ** 2 for n, _ in pts)
    b = sum((n - mx) * (t - my) for n, t in pts) / den
    return my - b * mx, b


def report(results: list[dict[str, Any]]) -> str:
    lines = []
    for res in results:
        w = res["workers"]
        la = res["load_average"]
        lines.append("")
        lines.append(
            f"== {w} workers: {res['history']['samples']:,} samples imported "
            f"({res['history']['series_full']} series over the whole history), store "
            f"{res['store_bytes'] / 2**20:.0f} MiB; load average {la['start'][0]:.2f} at the "
            f"start, {la['end'][0]:.2f} at the end; CPU cores used: victoria-metrics "
            f"{res['cpu_cores']['victoria-metrics']:.2f}, vmalert {res['cpu_cores']['vmalert']:.2f}"
        )
        head = (
            f"{'group':<30} {'every':>6} {'evals':>5} {'mean s':>8} {'max s':>8} "
            f"{'mean %':>7} {'max %':>7} {'ms/worker':>9} {'missed':>6}"
        )
        lines.append(head)
        lines.append("-" * len(head))
        for g, s in sorted(res["groups"].items()):
            lines.append(
                f"{g[:30]:<30} {duration(s['interval_s']):>6} {s['evaluations']:>5} "
                f"{s['mean_s']:>8.3f} {s['max_s']:>8.3f} {s['share_mean'] * 100:>6.2f}% "
                f"{s['share_max'] * 100:>6.2f}% {s['per_worker_s'] * 1000:>9.3f} "
                f"{s['missed']:>6.0f}"
            )
        busy = sum(s["share_mean"] for s in res["groups"].values() if s["evaluations"])
        lines.append(f"all groups: {busy:.3f} evaluator-seconds per second (sum of the shares)")
        errs = res["rule_errors"]
        lines.append(f"rules with an error: {len(errs)}" + "".join(f"\n  {e}" for e in errs[:5]))
        lw = res["long_windows"]
        lines.append(
            "30-day windows: samples of the 2m30s records found: "
            + ", ".join(f"{k.split(':')[1]} {v:.0f}" for k, v in lw["samples_in_window"].items())
            + "; 30-day error ratio from the recorded 30-day rates vs increase on the raw counters: "
            + ", ".join(
                f"{k} {pct(v['max_rel_error_pct'])} ({v['pairs']}/{v['of']})"
                for k, v in lw["ratio_30d"].items()
            )
        )
    return "\n".join(lines)


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} %"


def projection(results: list[dict[str, Any]], project: int) -> str:
    sizes = [r["workers"] for r in results]
    big = max(sizes)
    lines = [
        f"projection to {project} workers, from each group's mean evaluation seconds: the line "
        f"t = a + b N (least squares over N = {', '.join(map(str, sizes))}), and as an upper "
        f"bound t({big}) / {big} x {project} (the fixed cost counted per worker)"
    ]
    head = (
        f"{'group':<30} {'every':>6} {'a s':>8} {'b ms/worker':>11} {f't({project}) s':>10} "
        f"{'of interval':>11} {'bound s':>8} {'of interval':>11}  inside"
    )
    lines.append(head)
    lines.append("-" * len(head))
    names = sorted({g for r in results for g in r["groups"]})
    all_inside = True
    for g in names:
        runs = [r for r in results if g in r["groups"] and r["groups"][g]["evaluations"]]
        interval = next(r["groups"][g]["interval_s"] for r in results if g in r["groups"])
        a, b = fit([(r["workers"], r["groups"][g]["mean_s"]) for r in runs])
        t = a + b * project
        largest = max(runs, key=lambda r: r["workers"], default=None)
        bound = (
            largest["groups"][g]["mean_s"] / largest["workers"] * project if largest else math.nan
        )
        inside = max(t, bound) < interval  # False when the group was never evaluated (nan)
        all_inside &= inside
        lines.append(
            f"{g[:30]:<30} {duration(interval):>6} {a:>8.3f} {b * 1000:>11.3f} {t:>10.2f} "
            f"{t / interval * 100:>10.1f}% {bound:>8.2f} {bound / interval * 100:>10.1f}%  "
            f"{'yes' if inside else 'NO'}"
        )
    lines.append(
        f"every group inside its interval at {project} workers (fit and bound): "
        f"{'yes' if all_inside else 'no'}"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workers", default="8,32", help="comma-separated fleet sizes (default 8,32)")
    ap.add_argument("--days", type=float, default=30.0, help="history of the SLO series")
    ap.add_argument("--short-hours", type=float, default=3.0, help="history of the other series")
    ap.add_argument("--clusters", type=int, default=2, help="values of the cluster label")
    ap.add_argument(
        "--run",
        type=float,
        default=None,
        help="seconds vmalert runs in normal mode per size (default 450: 3 or more "
        "evaluations of the 2m30s group)",
    )
    ap.add_argument("--project", type=int, default=1000, help="fleet size to project to")
    ap.add_argument("--rules", default=str(REPO / "alerts"), help="directory of *.yaml rules")
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 workers, 1 day, 30 s")
    ap.add_argument("--tmp", default=str(REPO / "build" / "bench-fleet-history"))
    ap.add_argument("--keep", action="store_true", help="keep the store's data directory")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.run = 450.0 if args.run is None and not args.quick else args.run
    if args.quick:
        args.workers, args.days = "2", 1.0
        args.run = 30.0 if args.run is None else args.run
        args.short_hours = min(args.short_hours, 1.0)
    try:
        sizes = [int(x) for x in args.workers.split(",")]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        print(
            f"--workers: comma-separated positive integers expected, got {args.workers!r}",
            file=sys.stderr,
        )
        return 2
    try:
        if not 1 <= args.days <= 90:
            raise BadInput(f"--days: 1 to 90 expected (the store keeps 100 d), got {args.days:g}")
        if not 0 < args.short_hours <= args.days * 24:
            raise BadInput(f"--short-hours: 0 < h <= --days x 24 expected, got {args.short_hours}")
        if args.clusters < 0:
            raise BadInput(f"--clusters: 0 or more expected, got {args.clusters}")
        if args.run < 2 * STEP:
            raise BadInput(f"--run: at least {2 * STEP} s expected, got {args.run:g}")
        if not any(Path(args.rules).glob("*.yaml")):
            raise BadInput(f"--rules {args.rules}: no *.yaml rule file there")
    except BadInput as exc:
        print(exc, file=sys.stderr)
        return 2
    if not (shutil.which("victoria-metrics") and VMALERT):
        print(
            "needs victoria-metrics and vmalert on PATH (apt-get install victoria-metrics)",
            file=sys.stderr,
        )
        return 2
    m = machine()
    print(machine_line(m))
    # Debian's build prints no version of its own
    version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "victoria-metrics"], capture_output=True, text=True
    )
    print(f"victoria-metrics: {version.stdout.strip() or 'version unknown'} (Debian package)")
    print(
        f"rules: {args.rules}; SLO series {args.days:g} d at {STEP} s, the others "
        f"{args.short_hours:g} h; {args.clusters} cluster(s); vmalert {args.run:g} s per size",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    tmp = Path(args.tmp)
    for n in sizes:
        t0 = time.perf_counter()
        res = run_size(args, n, tmp / f"{n}-workers-{int(time.time())}")
        res["wall_seconds"] = round(time.perf_counter() - t0, 1)
        results.append(res)
        print(report([res]), flush=True)
        print(f"[{n} workers] {res['wall_seconds']:.0f} s in all", flush=True)
        write_json(
            Path(args.json) if args.json else None,
            {
                "machine": m,
                "rules": args.rules,
                "days": args.days,
                "step": STEP,
                "short_hours": args.short_hours,
                "clusters": args.clusters,
                "run_s": args.run,
                "results": results,
            },
        )
    print("\n" + projection(results, args.project))
    return 0


if __name__ == "__main__":
    sys.exit(main())
