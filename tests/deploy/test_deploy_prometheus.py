"""The one Prometheus configuration (deploy/prometheus/) and its test renderer (tests/support/stack.py).

Debian's Prometheus, the one installed here, is built without Kubernetes
discovery and refuses a file that uses it; the checks below remove that job
with the very command docs/deploy.md gives users of such builds, and the job
itself is checked by relabelling simulation in test_deploy_kubernetes.py.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.agentrun import AgentRun
from tests.support.proc import (
    PROMTOOL,
    REPO,
    Alertmanager,
    Prometheus,
    free_port,
    require_binary,
    wait_until,
)
from tests.support.stack import (
    AGENT_JOB,
    ALERTS_DIR,
    PROMETHEUS_CONFIG,
    PROMETHEUS_DIR,
    load_prometheus_config,
    parse_duration,
    render_prometheus_config,
    rule_file_paths,
    scrape_job,
    write_prometheus_config,
)

#: the command docs/deploy.md gives for Prometheus builds without Kubernetes discovery
STRIP_KUBERNETES = ["sed", "-i", "/BEGIN kubernetes/,/END kubernetes/d"]


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = require_binary(PROMTOOL, "promtool")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def rule_files() -> list[Path]:
    return sorted(ALERTS_DIR.glob("*.yaml"))


def etc_prometheus(tmp_path: Path) -> Path:
    """/etc/prometheus as Compose mounts it: the shipped file, alerts/, targets/."""
    etc = tmp_path / "etc-prometheus"
    etc.mkdir()
    shutil.copy(PROMETHEUS_CONFIG, etc / "prometheus.yml")
    shutil.copytree(ALERTS_DIR, etc / "alerts")
    shutil.copytree(PROMETHEUS_DIR / "targets", etc / "targets")
    example = etc / "targets" / "gpu-vms.yaml.example"
    example.rename(etc / "targets" / "gpu-vms.yaml")
    subprocess.run([*STRIP_KUBERNETES, str(etc / "prometheus.yml")], check=True)
    return etc


def test_shipped_config_passes_promtool_with_its_rules(tmp_path: Path) -> None:
    if not rule_files():
        pytest.skip("alerts/*.yaml not generated yet (`inferwatch generate`)")
    etc = etc_prometheus(tmp_path)
    result = promtool("check", "config", "prometheus.yml", cwd=etc)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "does not exist" not in out, f"a file discovery glob matches nothing:\n{out}"
    for path in rule_files():
        assert f"alerts/{path.name}" in out, f"promtool did not load {path.name}:\n{out}"


def test_strip_command_removes_only_the_kubernetes_job(tmp_path: Path) -> None:
    etc = etc_prometheus(tmp_path)
    stripped = yaml.safe_load((etc / "prometheus.yml").read_text())
    original = load_prometheus_config()
    names = [j["job_name"] for j in original["scrape_configs"]]
    kept = [j["job_name"] for j in stripped["scrape_configs"]]
    assert "inferwatch-kubernetes" in names
    assert kept == [n for n in names if n != "inferwatch-kubernetes"]
    assert {k: v for k, v in stripped.items() if k != "scrape_configs"} == {
        k: v for k, v in original.items() if k != "scrape_configs"
    }


def test_every_rule_file_glob_match_is_a_rule_file() -> None:
    """alerts/*.yaml is loaded by Prometheus: promtool unit tests must live elsewhere."""
    files = rule_files()
    if not files:
        pytest.skip("alerts/*.yaml not generated yet (`inferwatch generate`)")
    result = promtool("check", "rules", *map(str, files))
    assert result.returncode == 0, (
        "a file matched by rule_files (alerts/*.yaml) is not a valid rule file; "
        f"promtool tests belong in alerts/tests/:\n{result.stdout}{result.stderr}"
    )


def test_every_agent_job_ends_up_as_job_inferwatch() -> None:
    cfg = load_prometheus_config()
    for job in cfg["scrape_configs"]:
        name = job["job_name"]
        if not name.startswith("inferwatch"):
            continue
        if name == AGENT_JOB:
            continue
        assert {"target_label": "job", "replacement": AGENT_JOB} in job["relabel_configs"], name
    assert cfg["rule_files"] == ["alerts/*.yaml"]
    static = scrape_job(cfg, AGENT_JOB)["static_configs"][0]["targets"]
    # The Compose service name and the agent's default port; docs/deploy.md's sed
    # for VMs replaces this exact string.
    assert static == ["inferwatch:10127"]
    assert PROMETHEUS_CONFIG.read_text().count("inferwatch:10127") == 1


def test_grafana_datasource_interval_matches_the_scrape_interval() -> None:
    datasource = REPO / "deploy" / "grafana" / "provisioning" / "datasources" / "inferwatch.yaml"
    if not datasource.is_file():
        pytest.skip(f"{datasource.relative_to(REPO)} not written yet (Grafana provisioning)")
    ds = yaml.safe_load(datasource.read_text())["datasources"][0]
    scrape = load_prometheus_config()["global"]["scrape_interval"]
    assert ds["jsonData"]["timeInterval"] == scrape, (
        "Grafana's $__rate_interval relies on timeInterval = Prometheus's scrape_interval"
    )


# --------------------------------------------------------------------------- stack.py


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15), ("1m30s", 90), ("500ms", 0.5), ("2h", 7200), ("1d", 86400)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "s", "1x", "1s 2s"])
def test_parse_duration_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_render_replaces_only_the_documented_fields(tmp_path: Path) -> None:
    targets = tmp_path / "targets"
    cfg = render_prometheus_config(
        agent_targets=["127.0.0.1:1111"],
        alertmanager="http://127.0.0.1:2222",
        scrape_interval="1s",
        evaluation_interval="2s",
        file_sd_dir=targets,
        self_target="127.0.0.1:3333",
    )
    assert cfg["global"]["scrape_interval"] == "1s"
    assert cfg["global"]["evaluation_interval"] == "2s"
    assert cfg["global"]["scrape_timeout"] == "1s", "a timeout above the interval is invalid"
    assert cfg["rule_files"] == [str(ALERTS_DIR / "*.yaml")]
    am = cfg["alerting"]["alertmanagers"][0]["static_configs"]
    assert am == [{"targets": ["127.0.0.1:2222"]}]
    assert scrape_job(cfg, "inferwatch")["static_configs"] == [{"targets": ["127.0.0.1:1111"]}]
    assert scrape_job(cfg, "prometheus")["static_configs"] == [{"targets": ["127.0.0.1:3333"]}]
    file_job = scrape_job(cfg, "inferwatch-file")
    assert file_job["file_sd_configs"][0]["files"][0] == str(targets / "*.yaml")
    # Everything else is the shipped file's.
    shipped = scrape_job(load_prometheus_config(), "inferwatch-file")
    assert file_job["relabel_configs"] == shipped["relabel_configs"]
    with pytest.raises(KeyError):
        scrape_job(cfg, "inferwatch-kubernetes")
    kube = render_prometheus_config(kubernetes=True)
    assert scrape_job(kube, "inferwatch-kubernetes") == scrape_job(
        load_prometheus_config(), "inferwatch-kubernetes"
    )
    minimal = render_prometheus_config(alertmanager=None, rules_dir=None)
    assert "alerting" not in minimal and "rule_files" not in minimal
    assert [j["job_name"] for j in minimal["scrape_configs"]] == ["inferwatch"]


def test_rendered_config_passes_promtool(tmp_path: Path) -> None:
    cfg = render_prometheus_config(
        agent_targets=["127.0.0.1:1111"],
        alertmanager="127.0.0.1:2222",
        file_sd_dir=tmp_path / "targets",
    )
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "a.yaml").write_text('- targets: ["127.0.0.1:4444"]\n')
    path = write_prometheus_config(tmp_path / "prom", cfg)
    result = promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert rule_file_paths(cfg) == rule_files()


# --------------------------------------------------------------------------- live


def _up_by_instance(prom: Prometheus) -> dict[str, float]:
    return {
        r["metric"]["instance"]: float(r["value"][1])
        for r in prom.query(f'up{{job="{AGENT_JOB}"}}')
    }


@pytest.mark.slow
def test_live_prometheus_scrapes_agents_loads_rules_and_finds_alertmanager(
    tmp_path: Path,
) -> None:
    """The shipped config, rendered by stack.py, on a real Prometheus with real agents.

    One agent comes through the static job, the other through file discovery;
    both must end up as job="inferwatch", the generated rules must be loaded
    and the Alertmanager must be discovered.
    """
    ports = [free_port(), free_port()]
    with contextlib.ExitStack() as stack:
        for port in ports:
            agent = AgentRun(tmp_path, "--gpu-backend", "fake", port=port, timeout=30)
            stack.callback(agent.stop)
        am = Alertmanager(
            tmp_path, "route: {receiver: blackhole}\nreceivers:\n  - name: blackhole\n"
        )
        stack.callback(am.stop)
        targets = tmp_path / "targets"
        targets.mkdir()
        (targets / "vms.yaml").write_text(
            yaml.safe_dump([{"targets": [f"127.0.0.1:{ports[1]}"], "labels": {"site": "test"}}])
        )
        cfg = render_prometheus_config(
            agent_targets=[f"127.0.0.1:{ports[0]}"],
            alertmanager=am.url,
            file_sd_dir=targets,
        )
        prom = Prometheus(tmp_path, cfg)
        stack.callback(prom.stop)
        expected = {f"127.0.0.1:{p}": 1.0 for p in ports}
        wait_until(
            lambda: _up_by_instance(prom) == expected,
            timeout=60,
            message=f"both agents up with job={AGENT_JOB}",
        )
        site = prom.query(f'up{{job="{AGENT_JOB}",site="test"}}')
        assert [r["metric"]["instance"] for r in site] == [f"127.0.0.1:{ports[1]}"]
        assert prom.query(f'inferwatch_agent_info{{job="{AGENT_JOB}"}}'), "no agent metrics"

        files = rule_files()
        if files:
            want = sum(len(yaml.safe_load(f.read_text())["groups"]) for f in files)
            groups: list[dict[str, Any]] = wait_until(
                lambda: prom.api("rules")["groups"], timeout=30, message="rules loaded"
            )
            assert len(groups) == want, [g["name"] for g in groups]
            assert all(g["file"].startswith(str(ALERTS_DIR)) for g in groups)

        wait_until(
            lambda: prom.api("alertmanagers")["activeAlertmanagers"],
            timeout=30,
            message="alertmanager discovered",
        )
        active = prom.api("alertmanagers")["activeAlertmanagers"]
        assert [a["url"] for a in active] == [f"{am.url}/api/v2/alerts"]
