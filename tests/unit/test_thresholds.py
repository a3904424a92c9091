"""thresholds.yaml: defaults match ALERTS.md, overrides merge, bad input is one clear error."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from tests.support.proc import REPO, SHARED

from inferwatch.errors import ConfigError
from inferwatch.pack.thresholds import (
    DEFAULTS_PATH,
    SECTIONS,
    format_duration,
    load_thresholds,
)
from inferwatch.validate import duration_seconds

ALERTS_MD = SHARED / "design" / "ALERTS.md"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return str(path)


def test_defaults_are_the_documented_numbers() -> None:
    t = load_thresholds()
    assert t.source == "defaults"
    u = t.gpu_utilization
    assert (u.waste_below, u.waste_for, u.idle_below) == (0.30, 1800.0, 0.40)
    assert (u.scale_review_above, u.scale_review_for, u.healthy_band) == (0.85, 900.0, (0.60, 0.85))
    v = t.vram
    assert (v.squeeze_above, v.squeeze_p99_ok_seconds, v.scale_above) == (0.85, 0.5, 0.92)
    assert t.queue.over_capacity_samples == 3
    assert (t.ttft.p99_slo_seconds, t.ttft.warmup_p95_seconds) == (2.0, 2.0)
    assert t.tpot.p99_slo_seconds == 0.1
    assert (t.latency.tail_ratio, t.errors.ratio_above) == (5, 0.01)
    assert (t.cold_start.within, t.cold_start.warmup_deadline_for) == (600.0, 60.0)
    assert {48, 79} <= set(t.gpu_health.xid_critical)
    assert t.pack.selector() == '{job="inferwatch"}'
    assert t.pack.window == "5m"
    # the runbook server the deploy material ships (deploy/runbooks/nginx.conf), on loopback
    assert t.pack.runbook_page("InferenceGPULost") == "http://localhost:8088/InferenceGPULost.html"


def test_defaults_agree_with_alerts_md() -> None:
    """Every `section.key | default` row of ALERTS.md's threshold table is what we load."""
    if not ALERTS_MD.exists():
        pytest.skip(f"{ALERTS_MD} is not there (shared design documents not mounted)")
    t = load_thresholds()
    rows = re.findall(r"^\| (\w+)\.(\w+) \| ([^|]+) \|", ALERTS_MD.read_text(), re.M)
    assert len(rows) >= 10
    for section, key, default in rows:
        value = getattr(getattr(t, section), key)
        numbers = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", default)]
        if isinstance(value, tuple):
            assert list(value) == numbers[:2], (section, key)
        else:
            assert value == numbers[0], (section, key, default)
        durations = re.findall(r"for (\d+m)", default)
        if durations:  # "0.30 for 30m": the matching *_for key
            for_keys = [f for f in vars(getattr(t, section)) if f.endswith("_for")]
            for_values = {getattr(getattr(t, section), f) for f in for_keys}
            assert duration_seconds(durations[0]) in for_values, (section, key)


def test_every_default_has_a_source_comment() -> None:
    """Outside `pack`, every key has a comment right above it (its source in the guide)."""
    section = ""
    checked = 0
    lines = DEFAULTS_PATH.read_text().splitlines()
    for i, line in enumerate(lines):
        if m := re.match(r"^(\w+):", line):
            section = m.group(1)
        elif re.match(r"^  \w+:", line) and section != "pack":
            assert lines[i - 1].lstrip().startswith("#"), f"{section}: {line.strip()} has no source"
            checked += 1
    assert checked >= 25


def test_user_file_overrides_a_subset(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "gpu_utilization:\n  waste_below: 0.25\n  waste_for: 1h30m\n"
        'pack:\n  agent_selector: \'job="iw", cluster=~"a,b"\'\n  rate_window: 2m\n',
    )
    t = load_thresholds(path)
    assert t.source == path
    assert t.gpu_utilization.waste_below == 0.25
    assert t.gpu_utilization.waste_for == 5400.0
    assert t.gpu_utilization.scale_review_above == 0.85  # untouched default
    assert t.pack.selector() == '{job="iw",cluster=~"a,b"}'
    assert t.pack.window == "2m"
    assert t.pack.dashboard_uids.gpu == "inferwatch-gpu"


def test_empty_user_file_is_the_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing changed\n")
    assert load_thresholds(path) == replace(load_thresholds(), source=path)


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("vramm:\n  scale_above: 0.9\n", "vramm", "one of the known keys"),
        ("vram:\n  scale_abov: 0.9\n", "vram.scale_abov", "one of the known keys"),
        ("vram:\n  scale_above: 1.5\n", "vram.scale_above", "a ratio between 0 and 1"),
        ("vram:\n  scale_above: high\n", "vram.scale_above", "a ratio between 0 and 1"),
        ("vram:\n  scale_above: true\n", "vram.scale_above", "a ratio between 0 and 1"),
        ("vram: 3\n", "vram", "a mapping"),
        ("- 1\n", "(top level)", "a mapping"),
        ("gpu_utilization:\n  waste_below: 0.9\n", "gpu_utilization.waste_below", "below"),
        ("gpu_utilization:\n  waste_for: soon\n", "gpu_utilization.waste_for", "a duration"),
        (
            "cold_start:\n  warmup_deadline_for: -1m\n",
            "cold_start.warmup_deadline_for",
            "a duration",
        ),
        ("gpu_utilization:\n  healthy_band: [0.9, 0.6]\n", "gpu_utilization.healthy_band", "two"),
        ("vram:\n  squeeze_above: 0.95\n", "vram.squeeze_above", "below vram.scale_above"),
        ("queue:\n  over_capacity_samples: 2.5\n", "queue.over_capacity_samples", "whole"),
        ("queue:\n  over_capacity_samples: 0\n", "queue.over_capacity_samples", "whole"),
        ("latency:\n  tail_ratio: 1\n", "latency.tail_ratio", "greater than 1"),
        ("ttft:\n  p99_slo_seconds: 0\n", "ttft.p99_slo_seconds", "greater than 0"),
        ("pack:\n  agent_selector: 'job'\n", "pack.agent_selector", "label matchers"),
        ("pack:\n  agent_selector: '{job=\"x\"}'\n", "pack.agent_selector", "label matchers"),
        ("pack:\n  rate_window: 20s\n", "pack.rate_window", "at least twice"),
        ("pack:\n  dashboard_uids:\n    gpu: 'a b'\n", "pack.dashboard_uids.gpu", "Grafana UID"),
        ("pack:\n  dashboard_uids:\n    gpus: x\n", "pack.dashboard_uids.gpus", "known keys"),
        ("gpu_health:\n  xid_critical: []\n", "gpu_health.xid_critical", "non-empty list"),
        ("gpu_health:\n  xid_critical: [48, x]\n", "gpu_health.xid_critical", "XID numbers"),
        ("vram: [\n", "line 2", "valid YAML"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path: Path, text: str, key: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    message = str(err.value)
    assert err.value.source == path
    assert err.value.key == key
    assert expected in message
    assert "\n" not in message
    assert message.startswith(f"{path}: {key}: expected ")


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: \(file\): expected a readable file"):
        load_thresholds(str(tmp_path / "nope.yaml"))


def test_sections_cover_the_yaml() -> None:
    import yaml

    assert set(yaml.safe_load(DEFAULTS_PATH.read_text())) == set(SECTIONS)


@pytest.mark.parametrize(
    ("text", "seconds", "rendered"),
    [
        ("30m", 1800.0, "30m"),
        ("15m", 900.0, "15m"),
        ("1h30m", 5400.0, "1h30m"),
        ("90", 90.0, "1m30s"),
        ("500ms", 0.5, "500ms"),
        ("37s500ms", 37.5, "37s500ms"),
        ("0", 0.0, "0s"),
    ],
)
def test_durations_round_trip(text: str, seconds: float, rendered: str) -> None:
    assert duration_seconds(text) == seconds
    assert format_duration(seconds) == rendered


@pytest.mark.parametrize("text", ["", "m", "5x", "1h 30m", "-5m", "5m1"])
def test_bad_durations(text: str) -> None:
    assert duration_seconds(text) is None


def test_every_key_is_documented() -> None:
    """docs/alerts.md lists every key of thresholds.yaml (as `section.key` or `key`)."""
    import yaml

    docs = (REPO / "docs" / "alerts.md").read_text()
    for section, keys in yaml.safe_load(DEFAULTS_PATH.read_text()).items():
        for key in keys:
            assert f"`{section}.{key}" in docs or f"`{key}`" in docs, f"{section}.{key}"
