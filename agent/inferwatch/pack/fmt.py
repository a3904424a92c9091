"""Numbers written for people and for rule files, once: the rules, the dashboards, the
runbooks, the report, advise and the demo all format through here.

Two families. A *line* of thresholds.yaml is written as the user wrote it (``pct``:
0.3 -> ``30%``, 0.925 -> ``92.5%``; ``num``: a PromQL literal; ``dur``: a PromQL
duration; ``secs``: a latency as Prometheus' ``humanizeDuration`` prints it). A
*measurement* is rounded for reading (``percent``, ``seconds``, ``count``,
``duration``, ``gib``, ``money``), and a missing one (None) is ``none``, the report's
dash unless the caller says otherwise.
"""

from __future__ import annotations

from inferwatch.stats import Over
from inferwatch.validate import format_duration

DASH = "–"

# --------------------------------------------------------------------------- lines


def num(x: float) -> str:
    """A PromQL number literal: 0.3 -> ``0.3``, 600.0 -> ``600``."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def lit(x: float) -> str:
    """A PromQL number literal at 12 significant digits (the cost rules' prices and
    factors): 1e6 / 3600 -> ``277.777777778``."""
    return f"{float(x):.12g}"


def pct(x: float) -> str:
    """A ratio as written, no rounding: 0.3 -> ``30%``, 0.925 -> ``92.5%``."""
    return f"{x * 100:g}%"


def dur(seconds: float) -> str:
    """A rule-file duration (``for``, windows): 1800 -> ``30m``, 37.5 -> ``37s500ms``."""
    return format_duration(seconds)


def secs(seconds: float) -> str:
    """A latency the way Prometheus' humanizeDuration writes it: 2 -> ``2s``, 0.1 -> ``100ms``."""
    if seconds >= 1:
        return f"{seconds:.4g}s"
    return f"{seconds * 1000:.4g}ms"


def spaced_secs(seconds: float) -> str:
    """A latency line with its unit apart (dashboard texts): 2 -> ``2 s``, 0.25 -> ``0.25 s``."""
    return f"{seconds:g} s"


def quantile(q: float) -> str:
    """A quantile's name: 0.99 -> ``P99``, 0.5 -> ``P50``, 0.999 -> ``P99.9``."""
    return f"P{q * 100:g}"


def band(low: float | None, high: float | None, gap: str = " ") -> str:
    """A band between two ratio lines: ``< 30%``, ``30-60%``, ``> 85%`` (``gap=""``:
    ``<30%``); rounded to whole percent, as the report's tables and charts print them."""
    if low is None and high is not None:
        return f"<{gap}{high * 100:.0f}%"
    if high is None and low is not None:
        return f">{gap}{low * 100:.0f}%"
    if low is None or high is None:
        raise ValueError("band: at least one of low and high")
    return f"{low * 100:.0f}-{high * 100:.0f}%"


# --------------------------------------------------------------------------- measurements


def percent(value: float | None, digits: int = 0, none: str = DASH, sign: bool = False) -> str:
    """A share rounded: 0.304 -> ``30%`` (``digits`` decimals; ``sign``: ``+30%``)."""
    if value is None:
        return none
    return f"{value * 100:{'+' if sign else ''}.{digits}f}%"


def points(delta: float, sign: bool = False) -> str:
    """A change of a share in percentage points: 0.12 -> ``12 pts`` (``+12 pts`` with ``sign``)."""
    return f"{delta * 100:{'+' if sign else ''}.0f} pts"


def number(value: float | None, digits: int = 0, none: str = DASH) -> str:
    """A plain number rounded to ``digits`` decimals."""
    return none if value is None else f"{value:.{digits}f}"


def seconds(value: float | None, none: str = DASH) -> str:
    """A latency: ``850 ms``, ``1.75 s``, ``12 s``, ``120 µs``; ``over 60.0 s`` for a
    quantile past the histogram's largest finite bucket (:class:`~inferwatch.stats.Over`)."""
    if value is None:
        return none
    if isinstance(value, Over):
        return f"over {seconds(float(value))}"
    if value < 0.001:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        ms = value * 1000
        return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"
    if value < 10:
        return f"{value:.2f} s"
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


def count(value: float | None, none: str = DASH) -> str:
    """``950``, ``12.3 k``, ``4.56 M``, ``1.2 G``."""
    if value is None:
        return none
    v = abs(value)
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            x = value / div
            return f"{x:.3g} {unit}" if abs(x) < 100 else f"{x:.0f} {unit}"
    return f"{value:.0f}"


def duration(value: float | None, none: str = DASH) -> str:
    """A span, coarse: ``45s``, ``12m``, ``2h 05m``, ``3d 4h``."""
    if value is None:
        return none
    s = round(value)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def age(value: float) -> str:
    """A span in one unit: ``45 s``, ``12 min``, ``3.5 h``."""
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


def clock(value: float) -> str:
    """Time held on a stopwatch: ``40s``, ``2m05s``."""
    s = int(value)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def gib(value: float | None, digits: int = 1, none: str = DASH) -> str:
    """Bytes in GiB: ``79.1 GiB`` (``digits`` decimals)."""
    if value is None:
        return none
    return f"{value / 1024**3:.{digits}f} GiB"


def money(value: float | None, currency: str | None, none: str = DASH) -> str:
    """An amount: ``1,234.50 USD`` with a currency, ``1,234.5`` without one."""
    if value is None:
        return none
    return f"{value:,.2f} {currency}" if currency else f"{value:,.1f}"


def quantity(value: float, unit: str) -> str:
    """A number by its unit (advise's evidence): ``ratio`` as percent, ``s`` in ms below
    one second, ``x`` a multiple, ``age`` a span, any other unit after the number."""
    if unit == "ratio":
        return percent(value)
    if unit == "s":
        return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.2f} s"
    if unit == "x":
        return f"{value:.1f}x"
    if unit == "age":
        return age(value)
    if unit:
        return f"{value:.3g} {unit}"
    return f"{value:.3g}"
