"""docs/deploy.md: the paths it names exist and the config edits it prescribes work."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.support.proc import PROMTOOL, REPO, require_binary
from tests.support.stack import ALERTS_DIR, PROMETHEUS_CONFIG, scrape_job

DOC = REPO / "docs" / "deploy.md"
PROM_ETC = "/etc/prometheus/prometheus.yml"


def code_lines() -> list[str]:
    """Shell lines of the fenced code blocks, continuation lines joined."""
    lines: list[str] = []
    in_code = False
    pending = ""
    for raw in DOC.read_text().splitlines():
        if raw.startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            continue
        line = raw.strip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return lines


def test_every_repository_path_named_in_the_doc_exists() -> None:
    text = DOC.read_text()
    # Repository-relative only: not /var/lib/grafana/dashboards/..., not `deploy/vllm`
    # (a kubectl resource name).
    top = r"(?:deploy/(?:kubernetes|compose|systemd|prometheus|grafana|alertmanager)|alerts|dashboards|docs|tests)"
    paths = set(re.findall(rf"(?<![\w/.-])({top}(?:/[\w.-]*\w)*)", text))
    paths |= {"Dockerfile"} if "Dockerfile" in text else set()
    missing = sorted(p for p in paths if "*" not in p and "<" not in p and not (REPO / p).exists())
    assert not missing, f"docs/deploy.md names paths that do not exist: {missing}"


def test_the_prometheus_edits_of_the_vm_section_yield_a_valid_config(tmp_path: Path) -> None:
    """Run the doc's own sed commands on a copy, then check the result with promtool."""
    binary = require_binary(PROMTOOL, "promtool")
    edits = [line for line in code_lines() if "sed -i" in line and PROM_ETC in line]
    assert len(edits) >= 2, "the VM section lost its prometheus.yml edits"
    etc = tmp_path / "prometheus"
    etc.mkdir()
    target = etc / "prometheus.yml"
    shutil.copy(PROMETHEUS_CONFIG, target)
    shutil.copytree(ALERTS_DIR, etc / "alerts")
    for line in edits:
        command = line.removeprefix("sudo ").replace(PROM_ETC, str(target))
        subprocess.run(["bash", "-c", command], check=True, timeout=30)
    cfg = yaml.safe_load(target.read_text())
    assert scrape_job(cfg, "inferwatch")["static_configs"] == [{"targets": ["127.0.0.1:10127"]}]
    am = cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == ["127.0.0.1:9093"]
    with pytest.raises(KeyError):
        scrape_job(cfg, "inferwatch-kubernetes")
    check = subprocess.run(
        [binary, "check", "config", str(target)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_doc_names_every_deploy_target_and_its_verification() -> None:
    text = DOC.read_text()
    for heading in ("## Kubernetes", "## Docker Compose", "## Bare GPU VM (systemd)"):
        assert heading in text
    # Each path shows how to see a target up, rules loaded and dashboards imported.
    assert text.count("api/v1/rules") >= 3
    assert text.count("api/search?tag=inferwatch") >= 3
    assert text.count("api/v1/targets") + text.count('up{job="inferwatch"}') >= 3
    for overlay in ("sidecar", "daemonset", "servicemonitor"):
        assert f"deploy/kubernetes/overlays/{overlay}" in text
