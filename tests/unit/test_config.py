"""Configuration: file, environment and flags, and the one-line errors for bad input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.support.proc import inferwatch_cmd

from inferwatch.agent.config import DEFAULT_PORT, load_config
from inferwatch.errors import ConfigError


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "inferwatch.yaml"
    path.write_text(text)
    return str(path)


def test_defaults() -> None:
    config = load_config(env={})
    assert config.listen == f"0.0.0.0:{DEFAULT_PORT}"
    assert config.stats_window == 60.0
    assert config.gpu.backend == "nvml"
    assert config.workers == ()


def test_file_env_and_flags_in_order_of_precedence(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
listen: 127.0.0.1:9999
collect_interval: 500ms
stats_window: 2m
gpu: {backend: fake, fake_count: 2}
workers:
  - http://10.0.0.5:8000
  - {name: big, url: "http://10.0.0.6:8001/", max_num_seqs: 64, engine: vllm}
""",
    )
    config = load_config(path, env={})
    assert (config.listen_host, config.listen_port) == ("127.0.0.1", 9999)
    assert config.collect_interval == 0.5
    assert config.stats_window == 120.0
    assert [w.name for w in config.workers] == ["10.0.0.5:8000", "big"]
    assert config.workers[1].url == "http://10.0.0.6:8001"
    assert config.workers[1].max_num_seqs == 64

    env = {"INFERWATCH_LISTEN": "127.0.0.1:7000", "INFERWATCH_WORKERS": "a=http://h:1,http://h:2"}
    config = load_config(path, env=env)
    assert config.listen_port == 7000
    assert [w.name for w in config.workers] == ["a", "h:2"]

    config = load_config(
        path, env=env, flags={"listen": ":8080", "workers": ["x=http://y:3"], "stats_window": "30"}
    )
    assert (config.listen_host, config.listen_port) == ("0.0.0.0", 8080)
    assert [(w.name, w.url) for w in config.workers] == [("x", "http://y:3")]
    assert config.stats_window == 30.0


def test_config_path_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "log_level: debug\n")
    assert load_config(env={"INFERWATCH_CONFIG": path}).log_level == "debug"


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("listne: 1.2.3.4:5\n", "listne", "one of the known keys"),
        ("listen: 10127\n", "listen", "HOST:PORT"),
        ("listen: 'a:99999'\n", "listen", "port between 1 and 65535"),
        ("collect_interval: fast\n", "collect_interval", "a duration"),
        ("stats_window: -5\n", "stats_window", "greater than zero"),
        ("stats_window: 1s\n", "stats_window", "at least twice collect_interval"),
        ("gpu: {backend: cuda}\n", "gpu.backend", "one of nvml, fake, none"),
        ("gpu: {fake_count: 0}\n", "gpu.fake_count", "a whole number >= 1"),
        ("gpu: [1]\n", "gpu", "a mapping"),
        ("gpu: {speed: 1}\n", "gpu.speed", "one of the known keys"),
        ("scrape: {timeout: true}\n", "scrape.timeout", "a duration"),
        ("workers: http://a:1\n", "workers", "a list of workers"),
        ("workers: [ftp://a:1]\n", "workers[0].url", "an http:// or https:// URL"),
        ("workers: ['http://:80']\n", "workers[0].url", "with a host"),
        ("workers: [{name: a}]\n", "workers[0].url", "required"),
        ("workers: [{url: 'http://a:1', engine: vllm2}]\n", "workers[0].engine", "one of auto"),
        ("workers: [{url: 'http://a:1', pid: x}]\n", "workers[0].pid", "whole number"),
        (
            "workers: [{url: 'http://a:1', metrics_path: metrics}]\n",
            "workers[0].metrics_path",
            "starting with /",
        ),
        ("workers: [{url: 'http://a:1', colour: red}]\n", "workers[0].colour", "known keys"),
        ("workers: ['http://a:1', 'http://a:1']\n", "workers[1].name", "no other worker uses"),
        ("- 1\n", "(top level)", "a mapping"),
        ("listen: [unclosed\n", "line", "valid YAML"),
    ],
)
def test_bad_values_name_file_key_and_expectation(
    tmp_path: Path, text: str, key: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert message.startswith(f"{path}: {key}")
    assert expected in message


def test_bad_environment_and_flags_name_their_source() -> None:
    with pytest.raises(ConfigError, match=r"^environment INFERWATCH_STATS_WINDOW: stats_window"):
        load_config(env={"INFERWATCH_STATS_WINDOW": "soon"})
    with pytest.raises(
        ConfigError, match=r"^--worker: workers\[0\]\.url: expected an http.*got 'nope'"
    ):
        load_config(env={}, flags={"workers": ["nope"]})
    with pytest.raises(ConfigError, match=r"^--listen: listen"):
        load_config(env={}, flags={"listen": "localhost"})


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(inferwatch_cmd(*args), capture_output=True, text=True, timeout=60)


def test_cli_bad_config_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    path = write(tmp_path, "workers: [{url: 'http://a:1', max_num_seqs: many}]\n")
    result = run_cli("run", "--config", path, "--gpu-backend", "none")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{path}: workers[0].max_num_seqs: expected a whole number" in lines[0]
    assert result.stdout == ""


def test_cli_unreadable_file_and_bad_flag(tmp_path: Path) -> None:
    result = run_cli("run", "--config", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2
    assert "missing.yaml: (file): expected a readable file" in result.stderr
    result = run_cli("run", "--worker", "localhost:8000", "--gpu-backend", "none")
    assert result.returncode == 2
    assert "expected an http:// or https:// URL" in result.stderr


def test_cli_version() -> None:
    from inferwatch import __version__

    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"inferwatch {__version__}"
