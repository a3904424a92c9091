"""Issue 39 item 4: built-in backtest scenarios by name, and ``inferwatch backtest --list``.

``inferwatch backtest overload`` was refused: a built-in scenario had to be given by its
path inside the installed package. The commands run from an empty directory, as a user
of an installed package would.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from tests.support.proc import inferwatch_cmd

from inferwatch.backtest.scenario import scenario_files


def _backtest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        inferwatch_cmd("backtest", *args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_built_in_scenario_runs_by_name(tmp_path: Path) -> None:
    result = _backtest(tmp_path, "overload", "--json")
    assert result.returncode == 0, result.stderr
    doc = yaml.safe_load(result.stdout)  # JSON is YAML
    assert [s["scenario"] for s in doc["scenarios"]] == ["overload"], doc["scenarios"]
    by_name = {s["scenario"]: s for s in doc["scenarios"]}
    assert by_name["overload"]["passed"] is True


def test_list_names_every_built_in_scenario_with_its_description(tmp_path: Path) -> None:
    result = _backtest(tmp_path, "--list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    files = scenario_files()
    assert len(files) > 20 and len(lines) == len(files), result.stdout
    for line, path in zip(lines, files, strict=True):
        name, description = line.split(None, 1)
        assert name == path.stem
        expected = " ".join(str(yaml.safe_load(path.read_text())["description"]).split())
        assert description == expected, (line, expected)


@pytest.mark.parametrize("name", ["no-such-scenario", "overlaod"])
def test_an_unknown_name_is_one_line_naming_list(tmp_path: Path, name: str) -> None:
    result = _backtest(tmp_path, name)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and name in lines[0] and "--list" in lines[0], result.stderr


def test_list_takes_no_scenarios(tmp_path: Path) -> None:
    result = _backtest(tmp_path, "--list", "overload")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "--list" in result.stderr
