"""Two weeks of the agent's contract series with known properties, for the report tests.

The generator writes OpenMetrics text that ``promtool tsdb create-blocks-from
openmetrics`` turns into TSDB blocks, and returns the *truth*: the figures the
report must find, computed here from the generated values, not by the code
under test.

Shape of the data (END is Monday 2026-11-23 00:00 UTC, so each week runs Monday
to Sunday; day index 0..6 is the previous week, 7..13 this week):

- model ``llama-8b`` on workers ``vllm-0`` (agent ``gpu-a``) and ``vllm-1``
  (agent ``gpu-b``); ``vllm-0`` carries three times the traffic of ``vllm-1``.
  From Friday of this week (day 11, the fifth day) the TTFT tail of both
  workers moves above 2.5 s: the daily TTFT P99 (and P95) rise.
- model ``qwen-7b`` on ``tgi-0`` (agent ``gpu-c``): an engine without a TTFT
  histogram and without a known ``max_num_seqs``; its GPU has no GPM (no SM
  active series).
- GPU utilization is an hourly plateau: weekday daytime healthy, weekday
  nights in the low band, weekends in the waste band. ``gpu-c`` runs in the
  scale-review band on weekday middays.
- VRAM peaks once a day at 14:00; the peak of ``gpu-a`` grows by one point a
  day, ending above the 92 % scale line.
- ``vllm-0``'s queue sits above its ``max_num_seqs`` (256) on this week's
  Friday 10:00-12:00.
- ALERTS series for two alerts, firing at known times.

Sampling: gauges every 2 minutes, counters and histograms every 10 minutes,
ALERTS every minute while firing (as a rule evaluated each minute writes it).
That keeps the file at a few hundred thousand lines, so promtool builds the
blocks in seconds.
"""

from __future__ import annotations

import calendar
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

DAY = 86400
HOUR = 3600
END = calendar.timegm((2026, 11, 23, 0, 0, 0))
DAYS = 7
START = END - 2 * DAYS * DAY
GAUGE_STEP = 120
COUNTER_STEP = 600
ALERT_STEP = 60
BLOCK = 8 * HOUR
GIB = 1024**3
VRAM_TOTAL = 80 * GIB
VRAM_RESERVED = 1 * GIB

# (model, worker, engine, instance)
WORKERS = [
    ("llama-8b", "vllm-0", "vllm", "gpu-a:10127"),
    ("llama-8b", "vllm-1", "vllm", "gpu-b:10127"),
    ("qwen-7b", "tgi-0", "tgi", "gpu-c:10127"),
]
GPUS = [
    ("gpu-a:10127", "0", "GPU-aaaa"),
    ("gpu-b:10127", "0", "GPU-bbbb"),
    ("gpu-c:10127", "0", "GPU-cccc"),
]
MAX_NUM_SEQS = {"vllm-0": 256, "vllm-1": 256}

TTFT_LE = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, math.inf)
TPOT_LE = (0.025, 0.05, 0.1, 0.2, 0.5, math.inf)
E2E_LE = (1.0, 2.5, 5.0, 10.0, 20.0, 60.0, math.inf)

# Share of observations per bucket (not cumulative), in units of 1/200.
TTFT_NORMAL = (60, 80, 40, 16, 4, 0, 0)
TTFT_SLOW = (50, 70, 40, 16, 10, 12, 2)  # from this week's Friday on, llama workers
TPOT_SHAPE = (40, 100, 59, 1, 0, 0)
E2E_SHAPE = (20, 90, 70, 18, 2, 0, 0)
E2E_LONG_TAIL = (20, 80, 60, 30, 8, 2, 0)  # qwen-7b: P99 8x the P50

REQ_PER_STEP = {"vllm-0": 600, "vllm-1": 200, "tgi-0": 400}  # weekday daytime
PROMPT_PER_REQ = {"llama-8b": 500, "qwen-7b": 300}
GEN_PER_REQ = 200


def fmt_le(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(le)


def weekday(t: float) -> int:
    """0 = Monday."""
    return (int(t) // DAY + 3) % 7  # 1970-01-01 was a Thursday


def hour_of(t: float) -> int:
    return (int(t) % DAY) // HOUR


def day_index(t: float) -> int:
    return int((t - START) // DAY)


def is_weekend(t: float) -> bool:
    return weekday(t) >= 5


def slow_ttft(t: float) -> bool:
    """True from this week's Friday (day 11) on."""
    return day_index(t) >= 11


def traffic_factor(t: float) -> int:
    """Multiplier of the base traffic, by time of week: day 4, night 1, weekend 1."""
    if is_weekend(t):
        return 1
    return 4 if 8 <= hour_of(t) < 20 else 1


def requests_in_step(worker: str, t: float) -> int:
    """Requests finished in the counter step ending at t (a multiple of 200).

    The previous week had 10 % less traffic (a multiple-of-200 step keeps the
    bucket shares integral).
    """
    base = REQ_PER_STEP[worker] // 4 * traffic_factor(t)
    if day_index(t - 1) < 7:
        base = base * 9 // 10
    return max(200, (base // 200) * 200)


def gpu_utilization(instance: str, t: float) -> float:
    h = hour_of(t)
    prev = day_index(t) < 7
    if is_weekend(t):
        return 0.15 if not prev else 0.22
    if instance == "gpu-c:10127":
        if 10 <= h < 16:
            return 0.90
        return 0.50
    if 8 <= h < 20:
        return 0.70 if not prev else 0.66
    return 0.45


def vram_ratio(instance: str, t: float) -> float:
    d = day_index(t)
    peak_hour = hour_of(t) == 14
    if instance == "gpu-a:10127":
        return round(0.80 + 0.01 * d, 4) if peak_hour else 0.60
    if instance == "gpu-b:10127":
        return 0.70 if peak_hour else 0.55
    return 0.88 if peak_hour else 0.75


def queue_depth(worker: str, t: float) -> float:
    d = day_index(t)
    h = hour_of(t)
    if worker == "vllm-0" and d == 11 and 10 <= h < 12:
        return 300.0
    if h == 15:
        return float(5 + d)  # the daily peak, growing
    return 1.0


# alert name, labels, [(start, end)] of firing, end exclusive
ALERT_FIRINGS: list[tuple[str, dict[str, str], list[tuple[int, int]]]] = [
    (
        "InferenceTTFTSLOBreach",
        {
            "severity": "critical",
            "model": "llama-8b",
            "worker": "vllm-0",
            "instance": "gpu-a:10127",
            "job": "inferwatch",
        },
        [
            (START + 11 * DAY + 10 * HOUR, START + 11 * DAY + 13 * HOUR),
            (START + 12 * DAY + 9 * HOUR, START + 12 * DAY + 10 * HOUR + 1800),
        ],
    ),
    (
        "InferenceGPUUnderutilized",
        {
            "severity": "warning",
            "gpu": "0",
            "uuid": "GPU-aaaa",
            "instance": "gpu-a:10127",
            "job": "inferwatch",
        },
        [
            (START + 5 * DAY + 2 * HOUR, START + 5 * DAY + 6 * HOUR),
            (START + 12 * DAY + 1 * HOUR, START + 12 * DAY + 7 * HOUR),
            (START + 13 * DAY + 1 * HOUR, START + 13 * DAY + 9 * HOUR),
            (START + 13 * DAY + 12 * HOUR, START + 13 * DAY + 14 * HOUR),
        ],
    ),
]


@dataclass
class Truth:
    """Per-day figures (index 0..13) computed from the generated values."""

    requests: dict[str, list[float]] = field(default_factory=dict)
    prompt_tokens: dict[str, list[float]] = field(default_factory=dict)
    generation_tokens: dict[str, list[float]] = field(default_factory=dict)
    # worker -> histogram -> day -> per-bucket (non-cumulative) counts
    buckets: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)
    queue_peak: dict[str, list[float]] = field(default_factory=dict)
    over_capacity_seconds: dict[str, list[float]] = field(default_factory=dict)
    # instance -> list of (timestamp, value)
    util_samples: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    vram_peak: dict[str, list[float]] = field(default_factory=dict)


def _num(value: float) -> str:
    """Exact text for a sample value (``%g`` would round big counters)."""
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


def _times(step: int) -> range:
    return range(START, END + 1, step)


def generate() -> tuple[list[tuple[int, str]], Truth]:
    """The samples as (timestamp, OpenMetrics line), grouped by family, and the truth."""
    truth = Truth()
    lines: list[tuple[int, str]] = []
    lines.extend(_worker_series(truth))
    lines.extend(_gpu_series(truth))
    lines.extend(_alert_series())
    return lines, truth


def write_openmetrics(directory: Path) -> tuple[list[Path], Truth]:
    """One OpenMetrics file per TSDB block (promtool reads its whole input once per
    2 h block it writes, so one big file would be parsed 168 times)."""
    lines, truth = generate()
    per_day: dict[int, list[str]] = {}
    for t, line in lines:
        per_day.setdefault(min(int((t - START) // BLOCK), 2 * DAYS * DAY // BLOCK - 1), []).append(
            line
        )
    paths = []
    for d, day_lines in sorted(per_day.items()):
        path = directory / f"part-{d:03d}.om"
        path.write_text("\n".join(day_lines) + "\n# EOF\n")
        paths.append(path)
    return paths, truth


def _shape_counts(shape: tuple[int, ...], n: int) -> list[int]:
    return [s * n // 200 for s in shape]


def _worker_series(truth: Truth) -> Iterator[tuple[int, str]]:
    families: dict[str, list[tuple[int, str]]] = {}

    def emit(family: str, name: str, labels: str, value: float, t: int) -> None:
        families.setdefault(family, []).append((t, f"{name}{labels} {_num(value)} {t}"))

    for model, worker, engine, instance in WORKERS:
        base = {
            "job": "inferwatch",
            "instance": instance,
            "worker": worker,
            "engine": engine,
            "model": model,
        }
        lab = _labels(**base)
        req = [0.0] * 14
        prompt = [0.0] * 14
        gen = [0.0] * 14
        hists = {"ttft": TTFT_LE, "tpot": TPOT_LE, "e2e": E2E_LE}
        if worker == "tgi-0":
            del hists["ttft"]
        per_day = {h: [[0.0] * len(le) for _ in range(14)] for h, le in hists.items()}
        cum_req = cum_prompt = cum_gen = 0
        cum_b = {h: [0] * len(le) for h, le in hists.items()}
        for t in _times(COUNTER_STEP):
            if t > START:
                n = requests_in_step(worker, t)
                d = day_index(t - 1)  # the step (t - 600, t] belongs to the day of t - 1
                cum_req += n
                cum_prompt += n * PROMPT_PER_REQ[model]
                cum_gen += n * GEN_PER_REQ
                req[d] += n
                prompt[d] += n * PROMPT_PER_REQ[model]
                gen[d] += n * GEN_PER_REQ
                for h in hists:
                    if h == "ttft":
                        shape = (
                            TTFT_SLOW if slow_ttft(t - 1) and model == "llama-8b" else TTFT_NORMAL
                        )
                        counts = _shape_counts(shape, n)
                    elif h == "tpot":
                        counts = _shape_counts(TPOT_SHAPE, n * GEN_PER_REQ)
                    else:
                        shape = E2E_LONG_TAIL if model == "qwen-7b" else E2E_SHAPE
                        counts = _shape_counts(shape, n)
                    for i, c in enumerate(counts):
                        cum_b[h][i] += c
                        per_day[h][d][i] += c
            emit(
                "inferwatch_requests_finished",
                "inferwatch_requests_finished_total",
                _labels(**base, reason="stop"),
                cum_req,
                t,
            )
            emit("inferwatch_prompt_tokens", "inferwatch_prompt_tokens_total", lab, cum_prompt, t)
            emit(
                "inferwatch_generation_tokens",
                "inferwatch_generation_tokens_total",
                lab,
                cum_gen,
                t,
            )
            for h, les in hists.items():
                fam = {
                    "ttft": "inferwatch_ttft_seconds",
                    "tpot": "inferwatch_tpot_seconds",
                    "e2e": "inferwatch_e2e_latency_seconds",
                }[h]
                running = 0
                for le, c in zip(les, cum_b[h], strict=True):
                    running += c
                    emit(fam, fam + "_bucket", _labels(**base, le=fmt_le(le)), running, t)
                emit(fam, fam + "_count", lab, running, t)
        truth.requests[worker] = req
        truth.prompt_tokens[worker] = prompt
        truth.generation_tokens[worker] = gen
        truth.buckets[worker] = per_day

        peaks = [-math.inf] * 14
        over = [0.0] * 14
        for t in _times(GAUGE_STEP):
            q = queue_depth(worker, t)
            emit("inferwatch_queue_depth", "inferwatch_queue_depth", lab, q, t)
            if t < END:
                peaks[day_index(t)] = max(peaks[day_index(t)], q)
                if worker in MAX_NUM_SEQS and q > MAX_NUM_SEQS[worker]:
                    over[day_index(t)] += GAUGE_STEP
            if worker in MAX_NUM_SEQS:
                emit(
                    "inferwatch_max_num_seqs",
                    "inferwatch_max_num_seqs",
                    lab,
                    MAX_NUM_SEQS[worker],
                    t,
                )
        truth.queue_peak[worker] = peaks
        if worker in MAX_NUM_SEQS:
            truth.over_capacity_seconds[worker] = over
    for lines in families.values():
        yield from lines


def _gpu_series(truth: Truth) -> Iterator[tuple[int, str]]:
    families: dict[str, list[tuple[int, str]]] = {}

    def emit(name: str, labels: str, value: float, t: int) -> None:
        families.setdefault(name, []).append((t, f"{name}{labels} {_num(value)} {t}"))

    for instance, gpu, uuid in GPUS:
        lab = _labels(job="inferwatch", instance=instance, gpu=gpu, uuid=uuid)
        samples: list[tuple[int, float]] = []
        peaks = [0.0] * 14
        for t in _times(GAUGE_STEP):
            u = gpu_utilization(instance, t)
            samples.append((t, u))
            emit("inferwatch_gpu_utilization_ratio", lab, u, t)
            if instance != "gpu-c:10127":
                emit("inferwatch_gpu_sm_active_ratio", lab, round(u * 0.6, 4), t)
            v = vram_ratio(instance, t)
            if t < END:
                peaks[day_index(t)] = max(peaks[day_index(t)], v)
            emit("inferwatch_gpu_memory_used_ratio", lab, v, t)
            emit("inferwatch_gpu_memory_used_bytes", lab, round(v * VRAM_TOTAL) - VRAM_RESERVED, t)
            emit("inferwatch_gpu_memory_total_bytes", lab, VRAM_TOTAL, t)
        truth.util_samples[instance] = samples
        truth.vram_peak[instance] = peaks
    for lines in families.values():
        yield from lines


def _alert_series() -> Iterator[tuple[int, str]]:
    for name, labels, firings in ALERT_FIRINGS:
        lab = _labels(alertname=name, alertstate="firing", **labels)
        for start, end in firings:
            for t in range(start, end, ALERT_STEP):
                yield t, f"ALERTS{lab} 1 {t}"


def alert_truth(period_start: int, period_end: int) -> dict[str, tuple[int, int]]:
    """alertname -> (firings starting in the period, seconds firing within it)."""
    out: dict[str, tuple[int, int]] = {}
    for name, _, firings in ALERT_FIRINGS:
        n = 0
        secs = 0
        for start, end in firings:
            if period_start <= start < period_end:
                n += 1
            secs += max(0, min(end, period_end) - max(start, period_start))
        out[name] = (n, secs)
    return out


def day_start(d: int) -> int:
    return START + d * DAY


def build_tsdb(workdir: Path, promtool: str) -> tuple[Path, Truth]:
    """TSDB blocks of the two weeks in ``workdir/data``, ready for a Prometheus to open."""
    import subprocess

    om_dir = workdir / "openmetrics"
    om_dir.mkdir(parents=True)
    data = workdir / "data"
    data.mkdir()
    paths, truth = write_openmetrics(om_dir)
    for path in paths:
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(path), str(data)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return data, truth


def histogram_quantile(q: float, per_bucket: list[float], bounds: tuple[float, ...]) -> float:
    """The test's own PromQL-style interpolation over non-cumulative bucket counts."""
    cumulative = []
    running = 0.0
    for c in per_bucket:
        running += c
        cumulative.append(running)
    total = cumulative[-1]
    rank = q * total
    for i, (le, cum) in enumerate(zip(bounds, cumulative, strict=True)):
        if cum >= rank:
            if math.isinf(le):
                return bounds[i - 1]
            lower = bounds[i - 1] if i > 0 else 0.0
            below = cumulative[i - 1] if i > 0 else 0.0
            return lower + (le - lower) * (rank - below) / (cum - below)
    raise AssertionError("rank beyond the last bucket")


def share_within(x: float, per_bucket: list[float], bounds: tuple[float, ...]) -> float:
    """Share of observations <= x, linear inside the bucket holding x."""
    total = sum(per_bucket)
    below = 0.0
    lower = 0.0
    for le, c in zip(bounds, per_bucket, strict=True):
        if x <= le:
            return (below + c * (x - lower) / (le - lower)) / total
        below += c
        lower = le
    return below / total
