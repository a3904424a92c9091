"""Compose stacks (deploy/compose/): schema, wiring between services, and the files they mount.

No Docker engine runs here, and the Docker client here has no compose plugin,
so ``docker compose config`` is used only where it works. Every file is
validated against the Compose specification's JSON schema as vendored by the
``check-jsonschema`` package, and the ``include:`` of the shared monitoring
file is resolved here to check the whole project of each stack.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml
from tests.support.proc import AMTOOL, REPO, require_binary
from tests.support.stack import check_inferwatch_args, load_prometheus_config, scrape_job

from inferwatch.agent.config import load_config

COMPOSE = REPO / "deploy" / "compose"
STACKS = ("docker-compose.yml", "docker-compose.sim.yml")
FILES = (*STACKS, "monitoring.yml")
GRAFANA_DASHBOARDS = "/var/lib/grafana/dashboards/inferwatch"
#: files other developers write; until they exist, the checks that need them skip
NOT_OURS = ("deploy/grafana/", "deploy/alertmanager/", "alerts", "dashboards")


@cache
def compose_schema() -> dict[str, Any]:
    try:
        from importlib.resources import files

        text = (
            files("check_jsonschema.builtin_schemas.vendor")
            .joinpath("compose-spec.json")
            .read_text()
        )
    except ModuleNotFoundError:
        pytest.skip(
            "the Compose JSON schema comes from check-jsonschema: pip install check-jsonschema"
        )
    schema = json.loads(text)
    assert isinstance(schema, dict)
    return schema


def schema_errors(doc: dict[str, Any]) -> list[str]:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in sorted(validator.iter_errors(doc), key=str)
    ]


def load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((COMPOSE / name).read_text())
    assert isinstance(doc, dict)
    return doc


def project(name: str) -> dict[str, Any]:
    """A stack with its ``include:`` files merged in (services, volumes)."""
    doc = load(name)
    merged: dict[str, Any] = {"services": {}, "volumes": {}}
    for inc in doc.get("include", []):
        path = inc if isinstance(inc, str) else inc["path"]
        sub = project(path)
        for key in ("services", "volumes"):
            clash = set(sub[key]) & set(merged[key])
            assert not clash, f"{name}: {path} redefines {key} {clash}"
            merged[key].update(sub[key])
    for key in ("services", "volumes"):
        clash = set(doc.get(key) or {}) & set(merged[key])
        assert not clash, f"{name} redefines included {key} {sorted(clash)}"
        merged[key].update(doc.get(key) or {})
    return merged


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str, bool]]:
    """(host path, container path, read-only) of the service's bind mounts."""
    out = []
    for v in service.get("volumes", []):
        parts = v.split(":")
        if parts[0].startswith((".", "/")):
            out.append(((COMPOSE / parts[0]).resolve(), parts[1], parts[-1] == "ro"))
    return out


def named_mounts(service: dict[str, Any]) -> dict[str, str]:
    """volume name -> container path."""
    return {
        v.split(":")[0]: v.split(":")[1]
        for v in service.get("volumes", [])
        if not v.split(":")[0].startswith((".", "/"))
    }


def flag(args: list[str], name: str) -> str:
    """The value of ``--name=value`` or ``--name value`` in a command list."""
    for i, a in enumerate(args):
        if a.startswith(f"{name}="):
            return a.split("=", 1)[1]
        if a == name:
            return args[i + 1]
    raise AssertionError(f"{name} not in {args}")


def agent_config(stack: dict[str, Any]) -> dict[str, Any]:
    agent = stack["services"]["inferwatch"]
    path = flag(agent["command"], "--config")
    host = next(h for h, c, _ in bind_mounts(agent) if c == path)
    cfg = yaml.safe_load(host.read_text())
    assert isinstance(cfg, dict)
    return cfg


# --------------------------------------------------------------------------- validity


@pytest.mark.parametrize("name", FILES)
def test_compose_file_matches_the_compose_schema(name: str) -> None:
    errors = schema_errors(load(name))
    assert not errors, f"{name}: " + "; ".join(errors[:5])


def test_schema_check_rejects_a_broken_service() -> None:
    doc = load("docker-compose.sim.yml")
    doc["services"]["sim"]["comand"] = ["typo"]
    doc["services"]["loadgen"]["restart"] = 3
    assert len(schema_errors(doc)) >= 2


@pytest.mark.parametrize("name", STACKS)
def test_docker_compose_config_accepts_the_stack(name: str) -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True)
    if probe.returncode != 0:
        reason = probe.stderr.strip().splitlines()[0] if probe.stderr.strip() else "no output"
        pytest.skip(f"the docker client has no compose plugin ({reason})")
    result = subprocess.run(
        [docker, "compose", "-f", name, "config", "--quiet"],
        cwd=COMPOSE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", STACKS)
def test_stack_includes_the_shared_monitoring_services(name: str) -> None:
    stack = project(name)
    assert {"prometheus", "alertmanager", "grafana", "inferwatch"} <= set(stack["services"])
    for svc in stack["services"].values():
        for vol in named_mounts(svc):
            assert vol in stack["volumes"], f"{name}: volume {vol} is not declared"
        for dep in svc.get("depends_on", []):
            assert dep in stack["services"], f"{name}: depends_on unknown service {dep}"
        assert str(svc.get("image", "")).split(":")[-1] not in ("", "latest"), svc.get("image")


@pytest.mark.parametrize("name", STACKS)
def test_our_bind_mounts_exist_and_are_read_only(name: str) -> None:
    for sname, svc in project(name)["services"].items():
        for host, _, read_only in bind_mounts(svc):
            rel = host.relative_to(REPO).as_posix()
            assert read_only, f"{name}: {sname} mounts {rel} writable"
            if rel.startswith(NOT_OURS):
                continue
            assert host.exists(), f"{name}: {sname} mounts {rel}, which does not exist"


@pytest.mark.parametrize("name", STACKS)
def test_mounts_of_files_other_parts_provide(name: str) -> None:
    """Generated files and other developers' configs: present, and of the kind mounted."""
    theirs = [
        (host, container)
        for svc in project(name)["services"].values()
        for host, container, _ in bind_mounts(svc)
        if host.relative_to(REPO).as_posix().startswith(NOT_OURS)
    ]
    missing = sorted({h.relative_to(REPO).as_posix() for h, _ in theirs if not h.exists()})
    if missing:
        pytest.skip(f"not written yet by their owners: {missing}")
    for host, container in theirs:
        if container.endswith((".yml", ".yaml")):
            assert host.is_file(), f"{host} is mounted as a file"
        else:
            assert host.is_dir(), f"{host} is mounted as a directory"
    assert list((REPO / "alerts").glob("*.yaml")), "alerts/ holds no rule file"
    assert list((REPO / "dashboards").glob("*.json")), "dashboards/ holds no dashboard"


# --------------------------------------------------------------------------- wiring


@pytest.mark.parametrize("name", STACKS)
def test_prometheus_runs_the_one_config_with_the_generated_rules(name: str) -> None:
    prom = project(name)["services"]["prometheus"]
    mounts = {c: h for h, c, _ in bind_mounts(prom)}
    config_path = flag(prom["command"], "--config.file")
    assert mounts[config_path] == REPO / "deploy" / "prometheus" / "prometheus.yml"
    config_dir = PurePosixPath(config_path).parent
    cfg = load_prometheus_config()
    for pattern in cfg["rule_files"]:
        rule_dir = str(config_dir / PurePosixPath(pattern).parent)
        assert mounts.get(rule_dir) == REPO / "alerts", f"rule_files {pattern}: not mounted"
    for sd in scrape_job(cfg, "inferwatch-file")["file_sd_configs"]:
        for pattern in sd["files"]:
            sd_dir = str(config_dir / PurePosixPath(pattern).parent)
            assert mounts.get(sd_dir) == REPO / "deploy" / "prometheus" / "targets"


@pytest.mark.parametrize("name", STACKS)
def test_prometheus_targets_are_the_stack_services(name: str) -> None:
    stack = project(name)
    cfg = load_prometheus_config()
    (target,) = scrape_job(cfg, "inferwatch")["static_configs"][0]["targets"]
    host, port = target.rsplit(":", 1)
    assert host in stack["services"]
    listen = agent_config(stack)["listen"]
    assert listen.rsplit(":", 1)[1] == port
    (am,) = cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am.split(":")[0] == "alertmanager" and "alertmanager" in stack["services"]


@pytest.mark.parametrize("name", STACKS)
def test_agent_configs_load_and_the_agent_is_hardened(name: str, tmp_path: Path) -> None:
    stack = project(name)
    agent = stack["services"]["inferwatch"]
    host = next(h for h, c, _ in bind_mounts(agent) if c == flag(agent["command"], "--config"))
    cfg = load_config(str(host), env={})
    assert len(cfg.workers) == 1
    worker = cfg.workers[0]
    pid_service = agent["pid"].removeprefix("service:")
    assert agent["pid"].startswith("service:") and pid_service in stack["services"]
    assert worker.url.startswith(f"http://{pid_service}:"), (
        "the agent watches the worker it shares PIDs with"
    )
    assert worker.cmd_match, "a non-root agent finds the worker by command line"
    assert agent["read_only"] is True and agent["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in agent["security_opt"]
    assert "user" not in agent, "the image's non-root user (10001) must not be overridden"
    from tests.support.attack import NOFILE_FLOOR, RSS_LIMIT_MB

    memory = agent["deploy"]["resources"]["limits"]["memory"]
    assert memory in (f"{RSS_LIMIT_MB}M", RSS_LIMIT_MB * 1024 * 1024), memory
    nofile = agent["ulimits"]["nofile"]
    assert int(nofile["soft"]) >= NOFILE_FLOOR and int(nofile["hard"]) >= NOFILE_FLOOR


def test_gpu_stack_gives_the_agent_the_worker_gpu() -> None:
    stack = project("docker-compose.yml")
    vllm, agent = stack["services"]["vllm"], stack["services"]["inferwatch"]

    def devices(svc: dict[str, Any]) -> list[dict[str, Any]]:
        return list(svc["deploy"]["resources"]["reservations"]["devices"])

    assert [d["device_ids"] for d in devices(agent)] == [d["device_ids"] for d in devices(vllm)]
    assert all(d["driver"] == "nvidia" for d in devices(agent))
    port = flag(vllm["command"], "--port")
    assert load_config(str(COMPOSE / "inferwatch.yaml"), env={}).workers[0].port == int(port)
    assert vllm["entrypoint"] == ["vllm", "serve"], "cmd_match 'vllm serve' relies on it"


def test_gpu_stack_publishes_the_measuring_proxy() -> None:
    """Issue 30: the agent's proxy in front of vllm is published on loopback at the port
    its configuration listens on; vllm's own port stays published too."""
    stack = project("docker-compose.yml")
    (worker,) = load_config(str(COMPOSE / "inferwatch.yaml"), env={}).workers
    assert worker.proxy is not None
    port = worker.proxy.listen_port
    assert f"127.0.0.1:{port}:{port}" in stack["services"]["inferwatch"]["ports"]
    assert f"127.0.0.1:{worker.port}:{worker.port}" in stack["services"]["vllm"]["ports"]


def test_sim_stack_shares_the_fake_gpu_between_simulator_and_agent() -> None:
    stack = project("docker-compose.sim.yml")
    sim, agent, loadgen = (stack["services"][s] for s in ("sim", "inferwatch", "loadgen"))
    assert "deploy" not in sim, "the laptop stack needs no GPU"
    assert "reservations" not in agent["deploy"]["resources"], "the laptop stack needs no GPU"
    assert sim["command"][0] == "simulate" and loadgen["command"][0] == "loadgen"
    state_dir = flag(sim["command"], "--gpu-state-dir")
    assert flag(sim["command"], "--host") == "0.0.0.0", "other containers must reach it"
    cfg = load_config(str(COMPOSE / "inferwatch.sim.yaml"), env={})
    assert cfg.gpu.backend == "fake" and cfg.gpu.fake_state_dir == state_dir
    sim_vols, agent_vols = named_mounts(sim), named_mounts(agent)
    shared = [v for v in sim_vols if sim_vols[v] == state_dir and agent_vols.get(v) == state_dir]
    assert shared, "the simulator's GPU state directory is not a volume the agent mounts too"
    port = flag(sim["command"], "--port")
    assert cfg.workers[0].url == f"http://sim:{port}"
    # loadgen sends to loopback only: it shares the simulator's network namespace.
    assert loadgen["network_mode"] == "service:sim"
    assert flag(loadgen["command"], "--target") == f"http://127.0.0.1:{port}"
    assert loadgen["depends_on"]["sim"]["condition"] == "service_healthy"
    assert loadgen["healthcheck"] == {"disable": True}


@pytest.mark.parametrize("name", STACKS)
def test_inferwatch_command_lines_parse(name: str) -> None:
    """Every service running the inferwatch image gives the real CLI arguments it accepts."""
    checked = 0
    for sname, svc in project(name)["services"].items():
        if not str(svc.get("image", "")).startswith("${INFERWATCH_IMAGE"):
            continue
        if check_inferwatch_args(svc["command"]):
            checked += 1
        else:
            pytest.skip(f"{sname}: `inferwatch {svc['command'][0]}` is not registered yet")
    assert checked >= 1


def test_grafana_gets_the_provisioning_and_the_dashboards() -> None:
    grafana = project("docker-compose.sim.yml")["services"]["grafana"]
    mounts = {c: h for h, c, _ in bind_mounts(grafana)}
    assert mounts[GRAFANA_DASHBOARDS] == REPO / "dashboards"
    provisioning = mounts["/etc/grafana/provisioning"]
    providers = provisioning / "dashboards"
    if not providers.is_dir():
        pytest.skip("deploy/grafana/provisioning not written yet (Grafana provisioning)")
    paths = [
        p["options"]["path"]
        for f in sorted(providers.glob("*.y*ml"))
        for p in yaml.safe_load(f.read_text())["providers"]
    ]
    assert GRAFANA_DASHBOARDS in paths
    urls = [
        d["url"]
        for f in sorted((provisioning / "datasources").glob("*.y*ml"))
        for d in yaml.safe_load(f.read_text())["datasources"]
    ]
    assert "http://prometheus:9090" in urls


def test_alertmanager_config_passes_amtool() -> None:
    prom = project("docker-compose.yml")["services"]["alertmanager"]
    host = next(h for h, c, _ in bind_mounts(prom) if c.endswith("alertmanager.yml"))
    if not host.is_file():
        pytest.skip(f"{host.relative_to(REPO)} not written yet (Alertmanager configuration)")
    amtool = require_binary(AMTOOL, "amtool")
    result = subprocess.run(
        [amtool, "check-config", str(host)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
