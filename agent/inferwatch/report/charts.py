"""PNG charts of the report, drawn with matplotlib's object API and the Agg canvas.

No pyplot: figures are plain ``Figure`` objects, so nothing global is touched
and the module works headless. Each function returns PNG bytes, or None when
there is nothing to draw (the section is then left out with a note).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inferwatch.pack import fmt
from inferwatch.pack import loops as L
from inferwatch.report import words
from inferwatch.report.model import DAY, LATENCY_NAMES
from inferwatch.report.summary import BAND_NAMES, BANDS, Report, band_ranges

INK = "#1f2933"
MUTED = "#7b8794"
GRID = "#e4e7eb"
LATENCY = "#d64545"
UTIL = "#2680c2"
VRAM = "#8e44ad"
BAND_COLORS = {
    "waste": "#e66a6a",
    "low": "#f0b429",
    "healthy": "#3ebd93",
    "scale_review": "#6a4fc2",
}
QUANTILE_COLORS = {0.5: "#9aa5b1", 0.95: "#f0b429", 0.99: "#d64545"}
DPI = 110


@dataclass(frozen=True)
class Chart:
    name: str  # file name without extension, also the Content-ID stem
    title: str
    alt: str
    png: bytes


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    fig.patch.set_facecolor("white")
    return fig


def _style(ax: Any) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color(GRID)
    ax.tick_params(colors=MUTED, labelsize=8, length=0)
    ax.grid(True, axis="y", color=GRID, linewidth=0.8)
    ax.set_axisbelow(True)


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    return buf.getvalue()


def _thin(labels: list[str], most: int = 10) -> list[str]:
    """Every k-th label only, so a long period stays legible."""
    k = math.ceil(len(labels) / most)
    return [lab if i % k == 0 else "" for i, lab in enumerate(labels)]


def _values(xs: Sequence[float], ys: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """Points with None as NaN, so matplotlib leaves a gap instead of drawing a zero."""
    return list(xs), [math.nan if y is None else y for y in ys]


def _before(report: Report) -> str:
    """The period before this one, as the charts name it: ``last week``."""
    days = report.period.days
    return "last week" if days == 7 else f"the {words.span(days)} before"


def _day_axis(ax: Any, report: Report, back: Any) -> None:
    """Ticks labelled with the day on ``ax``; day lines and weekend shade on ``back``,
    the axes drawn first, so they never cover a curve."""
    starts = report.period.day_starts()[report.period.days :]
    ax.set_xlim(report.period.start, report.period.end)
    ax.set_xticks([s + DAY / 2 for s in starts])
    ax.set_xticklabels(
        _thin([words.day_label(report.period, report.period.days + i) for i in range(len(starts))])
    )
    for s in starts:
        back.axvline(s, color=GRID, linewidth=0.8, zorder=0)
        # a day is the weekend when its name is (words.day_label: the day its window ends on)
        if words.day(s + DAY - 1).startswith(("Sat", "Sun")):
            back.axvspan(s, s + DAY, color="#f2f4f7", zorder=0)


def three_curves(report: Report) -> Chart | None:
    """The guide's weekly panel: P99 latency, GPU utilization and memory peak (KV-cache usage
    where the engine exports it, else NVML's VRAM level), hour by hour."""
    h = report.hourly
    has_lat = any(v is not None for v in h.latency_p99)
    has_util = any(v is not None for v in h.util_mean)
    has_vram = any(v is not None for v in h.vram_peak)
    if not (has_lat or has_util or has_vram):
        return None
    fig = _figure(9.2, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    _style(ax)
    right = ax.twinx()
    _day_axis(ax, report, right)
    right.spines["top"].set_visible(False)
    right.spines["left"].set_visible(False)
    right.spines["right"].set_color(GRID)
    right.tick_params(colors=MUTED, labelsize=8, length=0)
    right.set_ylim(0, 1.0)
    right.yaxis.set_major_formatter(_percent_formatter())
    handles = []
    t = report.thresholds
    u = L.utilization_lines(t)
    right.axhspan(u.healthy_low, u.healthy_high, color=BAND_COLORS["healthy"], alpha=0.07)
    if has_util:
        (line,) = right.plot(
            *_values(h.times, h.util_mean), color=UTIL, linewidth=1.6, label="GPU utilization (avg)"
        )
        handles.append(line)
    if has_vram:
        (line,) = right.plot(
            *_values(h.times, h.vram_peak),
            color=VRAM,
            linewidth=1.6,
            label="memory peak (KV cache where exported, else VRAM)",
        )
        handles.append(line)
        right.axhline(t.vram.scale_above, color=VRAM, linewidth=0.8, linestyle=":")
    ax.set_zorder(right.get_zorder() + 1)
    ax.patch.set_visible(False)
    if has_lat:
        (line,) = ax.plot(
            *_values(h.times, h.latency_p99),
            color=LATENCY,
            linewidth=2.0,
            label=f"{h.latency_name} P99",
        )
        handles.append(line)
        slo = t.ttft.p99_slo_seconds if h.latency_name == "TTFT" else None
        top = max(v for v in h.latency_p99 if v is not None)
        if slo is not None:
            ax.axhline(slo, color=LATENCY, linewidth=0.9, linestyle="--")
            ax.annotate(
                f"SLO {fmt.seconds(slo)}",
                (report.period.start, slo),
                xytext=(4, 3),
                textcoords="offset points",
                color=LATENCY,
                fontsize=7,
            )
            top = max(top, slo)
        ax.set_ylim(0, top * 1.15)
        ax.set_ylabel(f"{h.latency_name} P99 (s)", color=LATENCY, fontsize=8)
    else:
        ax.set_yticks([])
    right.set_ylabel("utilization / memory", color=MUTED, fontsize=8)
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(0, 1.16),
        ncol=3,
        frameon=False,
        fontsize=8,
    )
    fig.tight_layout()
    alt = "P99 latency, GPU utilization and memory peak over the period, hour by hour"
    return Chart("three-curves", "P99 latency, GPU utilization and memory peak", alt, _png(fig))


def _percent_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: fmt.percent(v))


def latency(report: Report) -> list[Chart]:
    """Per model: daily P50/P95/P99 of TTFT, TPOT and end-to-end, with last week's P99."""
    charts = []
    days = report.period.days
    labels = [words.day_label(report.period, i) for i in range(days, 2 * days)]
    for m in report.models:
        names = [n for n in ("ttft", "tpot", "e2e") if n in m.total.latency]
        if not names:
            continue
        fig = _figure(9.2, 2.7)
        axes = fig.subplots(1, len(names), squeeze=False)[0]
        xs = list(range(days))
        for ax, name in zip(axes, names, strict=True):
            lat = m.total.latency[name]
            _style(ax)
            for q in (0.5, 0.95, 0.99):
                ax.plot(
                    *_values(xs, lat.daily[q][days:]),
                    marker="o",
                    markersize=3,
                    color=QUANTILE_COLORS[q],
                    linewidth=1.6,
                    label=fmt.quantile(q),
                )
            ax.plot(
                *_values(xs, lat.daily[0.99][:days]),
                color=QUANTILE_COLORS[0.99],
                linewidth=1.0,
                linestyle=":",
                label=f"P99 {_before(report)}",
            )
            if lat.slo is not None:
                ax.axhline(lat.slo, color=INK, linewidth=0.8, linestyle="--")
                ax.annotate(
                    f"SLO {fmt.seconds(lat.slo)}",
                    (0, lat.slo),
                    xytext=(2, 3),
                    textcoords="offset points",
                    fontsize=7,
                    color=INK,
                )
            ax.set_ylim(bottom=0)
            ax.set_xticks(xs)
            ax.set_xticklabels(_thin([lab.split()[0] for lab in labels], 7))
            ax.set_title(LATENCY_NAMES[name], fontsize=9, color=INK, loc="left")
            ax.yaxis.set_major_formatter(_seconds_formatter())
        handles, labels_ = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels_, loc="upper right", ncol=4, frameon=False, fontsize=7)
        fig.tight_layout(rect=(0, 0, 1, 0.93))
        charts.append(
            Chart(
                f"latency-{_slug(m.total.model)}",
                f"{m.total.model}: latency per day",
                f"Daily P50, P95 and P99 latency of {m.total.model}, with the P99 of "
                f"{_before(report)} dotted",
                _png(fig),
            )
        )
    return charts


def _seconds_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: fmt.seconds(v) if v > 0 else "0")


def bands(report: Report) -> Chart | None:
    """Share of each day every GPU spent in each utilization band (stacked bars)."""
    if not report.gpus:
        return None
    days = report.period.days
    gpus = report.gpus
    fig = _figure(9.2, 0.55 + 0.42 * len(gpus) * 1.0 + 0.6)
    ax = fig.add_subplot(1, 1, 1)
    _style(ax)
    ax.grid(False)
    width = 0.8 / 1
    rows = []
    for gi, g in enumerate(gpus):
        y = len(gpus) - 1 - gi
        rows.append((y, g.label))
        for d in range(days):
            left = float(d)
            for band in BANDS:
                v = g.band_daily.get(band, ())[days + d] if g.band_daily.get(band) else None
                if v is None:
                    continue
                ax.barh(
                    y, v * 0.96, left=left, height=width * 0.8, color=BAND_COLORS[band], linewidth=0
                )
                left += v * 0.96
    ax.set_yticks([r[0] for r in rows])
    ax.set_yticklabels([r[1] for r in rows], fontsize=8, color=INK)
    ax.set_xticks([d + 0.48 for d in range(days)])
    ax.set_xticklabels(_thin([words.day_label(report.period, days + d) for d in range(days)]))
    ax.set_xlim(-0.05, days)
    from matplotlib.patches import Patch

    ranges = band_ranges(report.thresholds)
    ax.legend(
        handles=[Patch(color=BAND_COLORS[k], label=f"{BAND_NAMES[k]} {ranges[k]}") for k in BANDS],
        loc="upper left",
        bbox_to_anchor=(0, 1.0 + 0.5 / (len(gpus) + 1.2)),
        ncol=4,
        frameon=False,
        fontsize=8,
    )
    fig.tight_layout()
    return Chart(
        "gpu-bands",
        "Time in each utilization band, per GPU and day",
        "Stacked bars: the share of each day every GPU spent in the waste, low, "
        "healthy and scale-review utilization bands",
        _png(fig),
    )


def vram(report: Report) -> Chart | None:
    """Daily memory peak per GPU, this week solid and last week dotted: the KV-cache usage
    where an engine on the GPU exports it (an engine that pre-allocates holds NVML's level
    flat at its reservation), else NVML's VRAM level; each line names its source."""
    gpus = [g for g in report.gpus if any(v is not None for v in g.memory_daily)]
    if not gpus:
        return None
    days = report.period.days
    fig = _figure(9.2, 2.9)
    ax = fig.add_subplot(1, 1, 1)
    _style(ax)
    xs = list(range(days))
    palette = ["#2680c2", "#8e44ad", "#3ebd93", "#f0b429", "#d64545", "#52606d", "#0f609b"]
    low = 1.0
    for i, g in enumerate(gpus):
        color = palette[i % len(palette)]
        cur = g.memory_daily[days:]
        prev = g.memory_daily[:days]
        ax.plot(
            *_values(xs, cur),
            color=color,
            marker="o",
            markersize=3,
            linewidth=1.6,
            label=f"{g.label} ({g.memory_source})",
        )
        ax.plot(*_values(xs, prev), color=color, linewidth=0.9, linestyle=":")
        low = min([low, *[v for v in (*cur, *prev) if v is not None]])
    v = report.thresholds.vram
    for line, text in ((v.squeeze_above, "squeeze"), (v.scale_above, "scale out")):
        ax.axhline(line, color=MUTED, linewidth=0.8, linestyle="--")
        ax.annotate(
            f"{text} {fmt.percent(line)}",
            (xs[-1], line),
            xytext=(-2, 3),
            textcoords="offset points",
            ha="right",
            fontsize=7,
            color=MUTED,
        )
    ax.set_ylim(max(0.0, low - 0.1), 1.0)
    ax.yaxis.set_major_formatter(_percent_formatter())
    ax.set_xticks(xs)
    ax.set_xticklabels(_thin([words.day_label(report.period, days + d) for d in xs]))
    ax.legend(loc="lower left", frameon=False, fontsize=8, ncol=min(4, len(gpus)))
    fig.tight_layout()
    return Chart(
        "vram-peaks",
        "Daily memory peak per GPU (KV cache where the engine exports it, else VRAM)",
        f"Daily memory peak of each GPU this {words.period_noun(report.period.days)}: the "
        f"KV-cache usage where the engine exports it, else NVML's VRAM level; "
        f"{_before(report)} dotted",
        _png(fig),
    )


def _slug(text: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    return out or "model"


def all_charts(report: Report) -> list[Chart]:
    """Every chart, the three-curves panel first."""
    charts: list[Chart] = []
    hero = three_curves(report)
    if hero:
        charts.append(hero)
    charts.extend(latency(report))
    for extra in (bands(report), vram(report)):
        if extra:
            charts.append(extra)
    return charts
