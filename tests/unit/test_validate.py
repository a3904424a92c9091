"""The shared settings parsers: one grammar and one message wherever a value is set."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.support.proc import inferwatch_cmd

from inferwatch import validate
from inferwatch.agent.config import load_config
from inferwatch.errors import ConfigError
from inferwatch.pack.thresholds import load_thresholds


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(inferwatch_cmd(*args), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2s", 2.0), ("500ms", 0.5), ("1m", 60.0), ("1h30m", 5400.0), ("2 s", 2.0), ("1d", 86400.0)],
)
def test_agent_and_thresholds_read_a_duration_the_same(
    tmp_path: Path, text: str, seconds: float
) -> None:
    agent = tmp_path / "agent.yaml"
    agent.write_text(f"server: {{idle_timeout: '{text}'}}\n")
    assert load_config(str(agent), env={}).server.idle_timeout == seconds
    pack = tmp_path / "thresholds.yaml"
    pack.write_text(f"gpu_utilization:\n  waste_for: '{text}'\n")
    assert load_thresholds(str(pack)).gpu_utilization.waste_for == seconds


@pytest.mark.parametrize("value", ["soon", "5x", "1h 30m", True, [1], ".inf"])
def test_a_bad_duration_reads_the_same_in_both_files(tmp_path: Path, value: object) -> None:
    shown = repr(value) if not isinstance(value, str) else f"'{value}'"
    agent = tmp_path / "agent.yaml"
    agent.write_text(f"stats_window: {shown}\n")
    pack = tmp_path / "thresholds.yaml"
    pack.write_text(f"gpu_utilization:\n  waste_for: {shown}\n")
    with pytest.raises(ConfigError) as a:
        load_config(str(agent), env={})
    with pytest.raises(ConfigError) as t:
        load_thresholds(str(pack))
    assert a.value.expected == t.value.expected == validate.DURATION_EXPECTED
    assert (a.value.key, t.value.key) == ("stats_window", "gpu_utilization.waste_for")


def test_zero_and_negative_durations() -> None:
    with pytest.raises(ConfigError, match="expected a duration greater than zero, got 0"):
        validate.duration(0, "f.yaml", "k")
    with pytest.raises(ConfigError, match="expected a duration greater than zero, got -1"):
        validate.duration(-1, "f.yaml", "k")
    with pytest.raises(ConfigError, match="expected a duration such as 2s, 500ms or 1m, got '-1s'"):
        validate.duration("-1s", "f.yaml", "k")
    assert validate.duration("0s", "f.yaml", "k", zero=True) == 0.0
    with pytest.raises(ConfigError, match="expected a duration of at least 0s, got -5"):
        validate.duration(-5, "f.yaml", "k", zero=True)
    with pytest.raises(ConfigError, match="expected a duration in whole milliseconds"):
        validate.duration(0.0005, "f.yaml", "k", whole_ms=True)


def test_counts_read_environment_digits_and_name_their_minimum() -> None:
    assert validate.count("3", "environment X", "k") == 3
    assert validate.count(0, "f", "k", minimum=0) == 0
    for bad in (0, -1, True, 1.5, "x"):
        with pytest.raises(ConfigError, match=r"^f: k: expected a whole number >= 1"):
            validate.count(bad, "f", "k")


def test_booleans_strings_and_known_keys() -> None:
    assert validate.boolean("True", "f", "k") is True
    assert validate.boolean(False, "f", "k") is False
    with pytest.raises(ConfigError, match="expected true or false, got 'yes'"):
        validate.boolean("yes", "f", "k")
    with pytest.raises(ConfigError, match="expected a non-empty string"):
        validate.string("  ", "f", "k")
    with pytest.raises(ConfigError, match=r"^f: s\.colour: expected one of the known keys a, b$"):
        validate.known_keys({"a": 1, "colour": 2}, ("a", "b"), "f", "s")


def test_changed_messages_are_one_line_and_exit_2(tmp_path: Path) -> None:
    """The messages that changed when the two parsers became one, as the user sees them."""
    agent = tmp_path / "agent.yaml"
    agent.write_text("gpu: {fake_count: 0}\n")
    result = run_cli("run", "--config", str(agent), "--gpu-backend", "none")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{agent}: gpu.fake_count: expected a whole number >= 1, got 0" in lines[0]

    pack = tmp_path / "thresholds.yaml"
    pack.write_text("vram: [\n")
    result = run_cli("generate", "--thresholds", str(pack), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{pack}: line 2: expected valid YAML" in lines[0]
    assert not (tmp_path / "out").exists()


def test_the_report_settings_file_goes_through_the_same_bounded_reader(tmp_path: Path) -> None:
    from inferwatch.report.settings import load_settings

    bomb = tmp_path / "bomb.yaml"
    anchors = "\n".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 40))
    bomb.write_text(f"a0: &a0 [x]\n{anchors}\nreport: {{days: 7}}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(str(bomb), {})
    assert (err.value.key, err.value.expected) == ("(file)", "valid YAML")
    assert "aliases" in str(err.value) and len(str(err.value).splitlines()) == 1
    days = tmp_path / "days.yaml"
    days.write_text("report: {days: 400}\n")
    with pytest.raises(ConfigError, match=r"report\.days: expected a whole number from 1 to 366"):
        load_settings(str(days), {})


def test_a_wrong_non_string_is_shown_by_its_kind_only() -> None:
    with pytest.raises(ConfigError) as err:
        validate.string(271828, "f.yaml", "report.prometheus_password_file")
    assert "271828" not in str(err.value) and str(err.value).endswith("got a int")
