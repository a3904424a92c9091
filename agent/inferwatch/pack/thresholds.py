"""Thresholds and pack settings: one YAML file, validated into frozen dataclasses.

Every number behind the alerts, the recording rules, the dashboards' threshold
lines, the report's bands and the runbooks comes from ``thresholds.yaml`` next
to this module (the defaults of ``shared/design/ALERTS.md``, each with a comment
citing the field guide). A user file overrides any subset of it.

Stable API (used by ``pack.rules``, ``pack.dashboards`` and the report)::

    from inferwatch.pack.thresholds import Thresholds, load_thresholds, format_duration

    t = load_thresholds()                 # the packaged defaults
    t = load_thresholds("mine.yaml")      # defaults overridden by mine.yaml (any subset)

    t.gpu_utilization.waste_below         # 0.30, a ratio 0..1
    t.gpu_utilization.waste_for           # 1800.0: every duration is float seconds
    t.gpu_utilization.healthy_band        # (0.6, 0.85)
    t.vram.scale_above                    # 0.92
    t.queue.over_capacity_samples         # 3 (an int)
    t.ttft.p99_slo_seconds                # 2.0
    t.pack.selector()                     # '{job="inferwatch"}'
    t.pack.selector('reason="error"')     # '{job="inferwatch",reason="error"}'
    t.pack.window                         # "5m": pack.rate_window as a PromQL duration
    t.pack.runbook_page("InferenceGPULost")  # base URL + InferenceGPULost.html
    t.pack.dashboard_url("gpu")           # base URL + pack.dashboard_uids.gpu
    format_duration(1800.0)               # "30m"

Sections and keys are listed in ``thresholds.yaml``; ``SECTIONS`` maps each
section name to its dataclass. Adding a key means: a field on the dataclass
(annotated with its kind, such as ``Ratio`` or ``Duration``), a default with a source
comment in the YAML file, and nothing else: the loader is driven by the dataclass
fields.

Errors: unknown sections or keys, wrong types and out-of-range values raise
:class:`~inferwatch.errors.ConfigError` naming the file, the dotted key and what
was expected (``mine.yaml: vram.scale_above: expected a ratio between 0 and 1,
got 1.5``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, is_dataclass, replace
from pathlib import Path
from typing import Annotated, Any, get_origin, get_type_hints
from urllib.parse import urlsplit

from inferwatch import validate
from inferwatch.errors import ConfigError
from inferwatch.pack import slo_spec
from inferwatch.pack.pricing import Pricing, parse_pricing
from inferwatch.pack.slo_spec import SloSpec
from inferwatch.validate import format_duration

__all__ = ["SECTIONS", "Thresholds", "format_duration", "load_thresholds"]

DEFAULTS_PATH = Path(__file__).with_name("thresholds.yaml")

# Field kinds: how a YAML value is parsed and which range it must be in. A field's
# annotation carries its kind (``Annotated[float, RATIO]``); a field whose type is one
# of the dataclasses below is a nested section.
RATIO = "ratio"  # float in [0, 1]
SECONDS = "seconds"  # float > 0 (a latency)
DURATION = "duration"  # PromQL-style duration or number of seconds, >= 0
POSITIVE = "positive"  # float > 0
NON_NEGATIVE = "non_negative"  # float >= 0
ABOVE_ONE = "above_one"  # float > 1 (a multiplier)
COUNT = "count"  # int >= 1
BAND = "band"  # [low, high] ratios, low < high
SELECTOR = "selector"  # PromQL label matchers without braces
BASE_URL = "base_url"  # http(s)://host/path/ that a page or dashboard name is appended to
UID = "uid"  # Grafana dashboard UID
XIDS = "xids"  # non-empty list of positive ints
PRICING = "pricing"  # the pricing: section, validated by pack.pricing
SLOS = "slos"  # the SLO spec, parsed by pack.slo_spec

Ratio = Annotated[float, RATIO]
Seconds = Annotated[float, SECONDS]
Duration = Annotated[float, DURATION]
Positive = Annotated[float, POSITIVE]
NonNegative = Annotated[float, NON_NEGATIVE]
AboveOne = Annotated[float, ABOVE_ONE]
Count = Annotated[int, COUNT]
Band = Annotated[tuple[float, float], BAND]
Selector = Annotated[str, SELECTOR]
BaseUrl = Annotated[str, BASE_URL]
Uid = Annotated[str, UID]
Xids = Annotated[tuple[int, ...], XIDS]
PricingSection = Annotated[Pricing, PRICING]
SloSection = Annotated[SloSpec, SLOS]


@dataclass(frozen=True)
class DashboardUids:
    """Grafana UIDs of the four generated dashboards (``/d/<uid>`` links)."""

    overview: Uid
    worker: Uid
    gpu: Uid
    trends: Uid


@dataclass(frozen=True)
class PackConfig:
    """Selectors, intervals and links shared by every generated artifact."""

    agent_selector: Selector
    scrape_interval: Duration
    rate_window: Duration
    runbook_base_url: BaseUrl
    dashboard_base_url: BaseUrl
    dashboard_uids: DashboardUids

    def selector(self, *extra: str) -> str:
        """``{agent_selector,extra...}``: a complete selector for one of the agent's series."""
        return "{" + ",".join([self.agent_selector, *extra]) + "}"

    @property
    def window(self) -> str:
        """``rate_window`` as a PromQL duration (``5m``); also the recording rules' suffix."""
        return format_duration(self.rate_window)

    @property
    def interval(self) -> str:
        """``scrape_interval`` as a PromQL duration (``15s``)."""
        return format_duration(self.scrape_interval)

    def runbook_page(self, alert: str) -> str:
        """The alert's rendered runbook page (``runbooks/<alert>.html`` as served)."""
        return f"{self.runbook_base_url}{alert}.html"

    def runbook_url(self, alert: str, labels: tuple[str, ...] = ()) -> str:
        """The ``runbook_url`` annotation: the page, opened on the alert's ``labels`` and on
        the Prometheus that fired it (Go templates Prometheus fills in when it fires)."""
        query = [f"{k}={{{{ $labels.{k} | urlquery }}}}" for k in labels]
        query.append("prometheus={{ $externalURL | urlquery }}")
        return self.runbook_page(alert) + "?" + "&".join(query)

    def dashboard_url(self, dashboard: str) -> str:
        """Link to one of ``overview``, ``worker``, ``gpu``, ``trends``."""
        return self.dashboard_base_url + str(getattr(self.dashboard_uids, dashboard))


@dataclass(frozen=True)
class GpuUtilization:
    waste_below: Ratio
    waste_for: Duration
    scale_review_above: Ratio
    scale_review_for: Duration
    healthy_band: Band
    idle_below: Ratio


@dataclass(frozen=True)
class Vram:
    squeeze_above: Ratio
    squeeze_p99_ok_seconds: Seconds
    scale_above: Ratio
    pressure_for: Duration


@dataclass(frozen=True)
class Queue:
    over_capacity_samples: Count
    rising_window: Duration
    rising_min_per_minute: NonNegative


@dataclass(frozen=True)
class Ttft:
    p99_slo_seconds: Seconds
    slo_for: Duration
    warmup_p95_seconds: Seconds
    idle_gpu_for: Duration


@dataclass(frozen=True)
class Tpot:
    p99_slo_seconds: Seconds
    slo_for: Duration


@dataclass(frozen=True)
class Latency:
    tail_ratio: AboveOne
    tail_for: Duration
    long_prompt_share: Ratio


@dataclass(frozen=True)
class LoadImbalance:
    load_ratio: AboveOne
    min_open_requests: NonNegative
    imbalance_for: Duration
    idle_window: Duration


@dataclass(frozen=True)
class ColdStart:
    within: Positive
    cold_start_for: Duration
    warmup_deadline_for: Duration


@dataclass(frozen=True)
class KvCache:
    preemption_rate_above: NonNegative
    preemptions_for: Duration


@dataclass(frozen=True)
class Errors:
    ratio_above: Ratio
    errors_for: Duration


@dataclass(frozen=True)
class Availability:
    worker_down_for: Duration
    startup_grace: Duration
    crash_loop_restarts: Count
    crash_loop_window: Duration
    agent_down_for: Duration
    gpu_lost_for: Duration
    unattributed_for: Duration


@dataclass(frozen=True)
class GpuHealth:
    xid_critical: Xids
    thermal_for: Duration


@dataclass(frozen=True)
class Advice:
    min_rate_span: Positive
    full_batch_share: Ratio
    max_num_seqs_cut: Ratio


@dataclass(frozen=True)
class Report:
    regression_ratio: NonNegative
    pressure_growth: Ratio
    scale_review_share: Ratio
    waste_day_share: Ratio


@dataclass(frozen=True)
class Thresholds:
    """Everything in ``thresholds.yaml``; ``source`` names the user file (or "defaults")."""

    pack: PackConfig
    gpu_utilization: GpuUtilization
    vram: Vram
    queue: Queue
    ttft: Ttft
    tpot: Tpot
    latency: Latency
    load_imbalance: LoadImbalance
    cold_start: ColdStart
    kv_cache: KvCache
    errors: Errors
    availability: Availability
    gpu_health: GpuHealth
    advice: Advice
    report: Report
    pricing: PricingSection
    slos: SloSection
    source: str = "defaults"


def _schema(cls: type) -> dict[str, str | type]:
    """Each settings field of ``cls``: its kind, or the dataclass of its nested section."""
    schema: dict[str, str | type] = {}
    for name, hint in get_type_hints(cls, include_extras=True).items():
        if name == "source":
            continue
        if get_origin(hint) is Annotated:
            schema[name] = hint.__metadata__[0]
        elif isinstance(hint, type) and is_dataclass(hint):
            schema[name] = hint
        else:  # pragma: no cover - programming error
            raise TypeError(f"{cls.__name__}.{name}: annotate it with a kind or a section")
    return schema


SECTIONS: dict[str, type] = {
    name: hint for name, hint in get_type_hints(Thresholds).items() if name != "source"
}


# ---------------------------------------------------------------------------- values

_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR_RE = re.compile(rf"{_MATCHER}(?:,{_MATCHER})*")
_UID_RE = re.compile(r"[A-Za-z0-9_-]{1,40}")

_EXPECTED = {
    BAND: "a list of two ratios [low, high] with low < high",
    SELECTOR: 'PromQL label matchers such as job="inferwatch" (without braces)',
    BASE_URL: "an http(s) URL with a host and a path ending in / (https://host/runbooks/), "
    "without ?query or #fragment: page names are appended to it",
    UID: "a Grafana UID (1-40 letters, digits, - or _)",
    XIDS: "a non-empty list of XID numbers such as [48, 79]",
}

#: the kinds validated by the shared parsers of :mod:`inferwatch.validate`
_SHARED: dict[str, validate.Parser] = {
    RATIO: validate.ratio,
    SECONDS: validate.seconds,
    NON_NEGATIVE: validate.non_negative,
    ABOVE_ONE: validate.above_one,
    COUNT: validate.count,
}


def _duration(value: Any, source: str, key: str) -> float:
    """A window or a ``for``: zero allowed, whole milliseconds (the rule files' grammar)."""
    return validate.duration(value, source, key, zero=True, whole_ms=True)


def _parse_value(kind: str, value: Any, source: str, key: str) -> Any:
    def bad() -> ConfigError:
        return ConfigError(source, key, _EXPECTED[kind], value)

    if kind == PRICING:
        return parse_pricing(value, source, key)
    if kind == SLOS:
        return slo_spec.parse(value, source, lambda v, k: _duration(v, source, k))
    if kind == DURATION:
        return _duration(value, source, key)
    if kind == POSITIVE:
        return validate.duration(value, source, key, whole_ms=True)
    if kind in _SHARED:
        return _SHARED[kind](value, source, key)
    if kind == BAND:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise bad()
        low, high = (validate.number(v) for v in value)
        if low is None or high is None or not 0 <= low < high <= 1:
            raise bad()
        return (low, high)
    if kind == SELECTOR:
        if not isinstance(value, str) or not _SELECTOR_RE.fullmatch(value):
            raise bad()
        return ",".join(part.strip() for part in _split_matchers(value))
    if kind == BASE_URL:
        if not isinstance(value, str) or not _is_base_url(value.strip()):
            raise bad()
        return value.strip()
    if kind == UID:
        if not isinstance(value, str) or not _UID_RE.fullmatch(value):
            raise bad()
        return value
    if kind == XIDS:
        if not isinstance(value, (list, tuple)) or not value:
            raise bad()
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in value):
            raise bad()
        return tuple(sorted(set(value)))
    raise AssertionError(f"unknown field kind {kind}")  # pragma: no cover - programming error


def _is_base_url(url: str) -> bool:
    """``http(s)://host[:port]/path/``: a name appended to it is a page under that path."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and parts.path.endswith("/")
        and not parts.query
        and not parts.fragment
        and not any(ch.isspace() for ch in url)
    )


def _split_matchers(text: str) -> list[str]:
    """Split ``a="x,y",b!~"z"`` on the commas between matchers (not inside quotes)."""
    return [m.group(0) for m in re.finditer(_MATCHER, text)]


# ---------------------------------------------------------------------------- loading


def _merge(
    defaults: dict[str, Any], override: Any, cls: type, source: str, prefix: str
) -> dict[str, Any]:
    """``defaults`` with ``override`` applied, refusing keys ``cls`` does not have."""
    where = prefix or "(top level)"
    if not isinstance(override, dict):
        raise ConfigError(source, where, "a mapping of keys to values", override)
    schema = _schema(cls)
    validate.known_keys(override, schema, source, prefix)
    merged = dict(defaults)
    for key, value in override.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        what = schema[key]
        if what == SLOS:
            merged[key] = slo_spec.merge(defaults.get(key), value)
        elif isinstance(what, type):
            merged[key] = _merge(defaults.get(key) or {}, value, what, source, dotted)
        else:
            merged[key] = value
    return merged


def _build(cls: type, raw: dict[str, Any], source: str, prefix: str) -> Any:
    values: dict[str, Any] = {}
    for name, what in _schema(cls).items():
        dotted = f"{prefix}.{name}" if prefix else name
        if name not in raw:
            raise ConfigError(source, dotted, "a value (missing from the defaults)")
        if isinstance(what, type):
            if not isinstance(raw[name], dict):
                raise ConfigError(source, dotted, "a mapping of keys to values", raw[name])
            values[name] = _build(what, raw[name], source, dotted)
        else:
            values[name] = _parse_value(what, raw[name], source, dotted)
    return cls(**values)


def _check(t: Thresholds, source: str) -> None:
    """Rules that tie two keys together."""
    g = t.gpu_utilization
    if g.waste_below >= g.scale_review_above:
        raise ConfigError(
            source,
            "gpu_utilization.waste_below",
            f"a ratio below gpu_utilization.scale_review_above ({g.scale_review_above})",
            g.waste_below,
        )
    if t.vram.squeeze_above >= t.vram.scale_above:
        raise ConfigError(
            source,
            "vram.squeeze_above",
            f"a ratio below vram.scale_above ({t.vram.scale_above})",
            t.vram.squeeze_above,
        )
    p = t.pack
    if p.scrape_interval <= 0:
        raise ConfigError(source, "pack.scrape_interval", "a duration greater than zero", 0)
    if p.rate_window < 2 * p.scrape_interval:
        # rate() needs two samples inside its window
        raise ConfigError(
            source,
            "pack.rate_window",
            f"at least twice pack.scrape_interval ({format_duration(2 * p.scrape_interval)})",
            format_duration(p.rate_window),
        )
    if t.queue.rising_window < 2 * p.scrape_interval:
        # deriv() needs two samples inside its window
        raise ConfigError(
            source,
            "queue.rising_window",
            f"at least twice pack.scrape_interval ({format_duration(2 * p.scrape_interval)})",
            format_duration(t.queue.rising_window),
        )


def load_thresholds(path: str | None = None) -> Thresholds:
    """The packaged defaults, overridden by the YAML file at ``path`` when given."""
    default_source = str(DEFAULTS_PATH)
    defaults = dict(validate.read_yaml_file(default_source))
    raw = defaults
    source = default_source
    if path is not None:
        raw = _merge(defaults, dict(validate.read_yaml_file(path)), Thresholds, path, "")
        source = path
    thresholds: Thresholds = _build(Thresholds, raw, source, "")
    _check(thresholds, source)
    return replace(thresholds, source=path or "defaults")
