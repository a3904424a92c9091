"""Figures from a trace of bench/device/llamacpp_trace.py: the agent against nvidia-smi,
the engine's own counters and the streaming client, per phase.

    PYTHONPATH=agent python3 bench/device/llamacpp_report.py TRACE.jsonl.gz [--markdown]

Prints one table per comparison (docs/validation.md holds the H200 run's). Reads
only the trace: it runs anywhere.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def load(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    return lines[0], lines[1:]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def pick(
    snap: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float | None:
    for (n, lab), v in snap.items():
        if n == name and all(dict(lab).get(k) == want for k, want in labels.items()):
            return v
    return None


def quantile(values: Iterable[float], q: float) -> float | None:
    vals = sorted(values)
    if not vals:
        return None
    k = (len(vals) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def fmt(v: float | None, unit: str = "", nd: int = 3) -> str:
    return "-" if v is None else f"{v:.{nd}f}{unit}"


def in_phase(t: float, ph: dict[str, Any]) -> bool:
    return bool(ph["start"] <= t < ph["end"])


def report(path: Path) -> str:
    header, lines = load(path)
    phases = header["phases"]
    agent = [(x["t"], samples(x["agent"])) for x in lines if "agent" in x]
    engine = [(x["t"], samples(x["engine"])) for x in lines if "engine" in x]
    gpu = [(x["t"], x["gpu"]) for x in lines if "gpu" in x and "error" not in x["gpu"]]
    client = [(x["t"], x["client"]) for x in lines if "client" in x]
    out = [f"Trace: {header.get('source', path.name)}", ""]

    out.append("| phase | s | nvidia-smi util % (mean) | agent util % (mean) | "
               "nvidia-smi mem used MiB | agent mem used MiB |")  # fmt: skip
    out.append("|---|---:|---:|---:|---:|---:|")
    for ph in phases:
        smi = [float(g["utilization.gpu"]) for t, g in gpu if in_phase(t, ph)]
        smi_mem = [float(g["memory.used"]) for t, g in gpu if in_phase(t, ph)]
        ag = [
            v for t, s in agent if in_phase(t, ph)
            if (v := pick(s, "inferwatch_gpu_utilization_ratio")) is not None
        ]  # fmt: skip
        ag_mem = [
            v / 2**20 for t, s in agent if in_phase(t, ph)
            if (v := pick(s, "inferwatch_gpu_memory_used_bytes")) is not None
        ]  # fmt: skip
        out.append(
            f"| {ph['name']} | {ph['end'] - ph['start']:.0f} "
            f"| {fmt(statistics.fmean(smi) if smi else None, nd=1)} "
            f"| {fmt(100 * statistics.fmean(ag) if ag else None, nd=1)} "
            f"| {fmt(statistics.fmean(smi_mem) if smi_mem else None, nd=0)} "
            f"| {fmt(statistics.fmean(ag_mem) if ag_mem else None, nd=0)} |"
        )
    out.append("")

    def delta(series: list[tuple[float, Any]], name: str, ph: dict[str, Any]) -> float | None:
        vals = [(t, pick(s, name)) for t, s in series]
        before = [v for t, v in vals if t <= ph["start"] and v is not None]
        after = [v for t, v in vals if t <= ph["end"] and v is not None]
        if not before or not after:
            return None
        return after[-1] - before[-1]

    out.append("| phase | client requests ok | client generated tokens | engine tokens_predicted "
               "| agent generation tokens | engine max deferred | agent max queue |")  # fmt: skip
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for ph in phases:
        recs = [c for t, c in client if in_phase(t, ph) and c.get("ok")]
        gen = sum(int(c.get("gen_tokens") or 0) for c in recs)
        eng = delta(engine, "llamacpp:tokens_predicted_total", ph)
        ag = delta(agent, "inferwatch_generation_tokens_total", ph)
        eq = [
            v
            for t, s in engine
            if in_phase(t, ph)
            if (v := pick(s, "llamacpp:requests_deferred")) is not None
        ]
        aq = [
            v
            for t, s in agent
            if in_phase(t, ph)
            if (v := pick(s, "inferwatch_queue_depth")) is not None
        ]
        out.append(
            f"| {ph['name']} | {len(recs)} | {gen} | {fmt(eng, nd=0)} | {fmt(ag, nd=0)} "
            f"| {fmt(max(eq) if eq else None, nd=0)} | {fmt(max(aq) if aq else None, nd=0)} |"
        )
    out.append("")

    out.append("| phase | client TTFT P50 / P95 / P99 s | client TPOT P50 / P99 ms "
               "| agent TTFT P95 s (last) | agent TPOT P50 ms (last) |")  # fmt: skip
    out.append("|---|---|---|---:|---:|")
    for ph in phases:
        recs = [c for t, c in client if in_phase(t, ph) and c.get("ok")]
        ttft = [c["ttft_s"] for c in recs if c.get("ttft_s") is not None]
        tpot = [1000 * c["tpot_s"] for c in recs if c.get("tpot_s") is not None]
        last = [s for t, s in agent if in_phase(t, ph)]
        a_ttft = (
            pick(last[-1], "inferwatch_ttft_quantile_seconds", quantile="0.95") if last else None
        )
        a_tpot = (
            pick(last[-1], "inferwatch_tpot_quantile_seconds", quantile="0.5") if last else None
        )
        out.append(
            f"| {ph['name']} | {fmt(quantile(ttft, 0.5))} / {fmt(quantile(ttft, 0.95))} / "
            f"{fmt(quantile(ttft, 0.99))} | {fmt(quantile(tpot, 0.5), nd=1)} / "
            f"{fmt(quantile(tpot, 0.99), nd=1)} | {fmt(a_ttft)} "
            f"| {fmt(None if a_tpot is None else 1000 * a_tpot, nd=1)} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("traces", nargs="+", type=Path)
    args = ap.parse_args()
    for p in args.traces:
        print(report(p))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
