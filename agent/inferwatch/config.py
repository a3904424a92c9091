"""The agent's configuration: a YAML file, ``INFERWATCH_*`` environment variables and flags.

Precedence is flags > environment > file > defaults. Every value is validated
before anything starts; a wrong one raises :class:`~inferwatch.errors.ConfigError`
naming where it came from (the file, the variable or the flag), the dotted key
and what was expected, which the CLI prints as one line with exit code 2.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import yaml

from inferwatch.errors import ConfigError

DEFAULT_PORT = 10127
"""Outside the fully allocated 9100-9999 exporter range and unused by any known exporter."""

ENGINES = ("auto", "vllm", "sglang", "tgi", "llamacpp", "triton", "trtllm", "nim", "lmdeploy")
GPU_BACKENDS = ("nvml", "fake", "none")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class WorkerSpec:
    """One inference server the agent watches."""

    name: str
    url: str
    engine: str = "auto"
    metrics_path: str | None = None
    pid: int | None = None
    cmd_match: str | None = None
    max_num_seqs: int | None = None
    timeout: float | None = None
    #: the GPUs it runs on, when nothing the agent can read says so (NVML indices or
    #: GPU-/MIG- UUIDs; docs/attribution.md)
    gpus: tuple[int | str, ...] | None = None
    #: extra labels on the worker's series: ``namespace``, ``pod``, ``container`` (and
    #: allow-listed pod labels) of a worker found by Kubernetes discovery; () otherwise
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def port(self) -> int | None:
        return urlsplit(self.url).port


@dataclass(frozen=True)
class GpuConfig:
    backend: str = "nvml"
    interval: float = 1.0
    slow_interval: float = 30.0
    #: GPM and per-process SM share: averaged between reads this far apart, as
    #: nvmlDeviceGetProcessUtilization costs ~2 ms per GPU (docs/validation.md)
    activity_interval: float = 15.0
    fake_count: int = 1
    fake_state_dir: str | None = None


@dataclass(frozen=True)
class ScrapeConfig:
    timeout: float = 2.0
    max_body_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True)
class KubernetesConfig:
    """``kubernetes:``: discover the inference pods of this node (docs/deploy.md)."""

    #: this node's name; default the NODE_NAME variable (downward API spec.nodeName)
    node_name: str | None = None
    #: default https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (in-cluster)
    api_url: str | None = None
    token_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    ca_file: str | None = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    #: recognise engines by image, command and port in pods without annotations
    auto_detect: bool = True
    #: pod labels copied onto worker series (as label_<name>); none by default
    pod_labels: tuple[str, ...] = ()
    #: the kubelet's pod-resources socket (GPU allocations); None: not asked
    pod_resources_socket: str | None = "/var/lib/kubelet/pod-resources/kubelet.sock"
    #: where /proc/<pid>/cgroup is read to map NVML PIDs to pods (hostPID); None: not read
    proc_root: str | None = "/proc"
    #: how often allocations and cgroups are read and the worker list is applied
    interval: float = 5.0
    #: a watch is ended by the client after this long and resumed (server-side timeout)
    watch_timeout: float = 300.0


@dataclass(frozen=True)
class AgentConfig:
    listen_host: str = "0.0.0.0"
    listen_port: int = DEFAULT_PORT
    web_config_file: str | None = None
    log_level: str = "info"
    collect_interval: float = 2.0
    process_interval: float = 5.0
    stats_window: float = 60.0
    gpu: GpuConfig = field(default_factory=GpuConfig)
    scrape: ScrapeConfig = field(default_factory=ScrapeConfig)
    workers: tuple[WorkerSpec, ...] = ()
    #: pod discovery; None unless the file has a ``kubernetes:`` section
    kubernetes: KubernetesConfig | None = None
    #: raw sections owned and validated by other modules (warm-up gate, weekly report)
    warmup: Mapping[str, Any] = field(default_factory=dict)
    report: Mapping[str, Any] = field(default_factory=dict)
    #: where the file came from, for messages of modules that validate their own sections
    source: str = "defaults"

    @property
    def listen(self) -> str:
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        return f"{host}:{self.listen_port}"


# --------------------------------------------------------------------------- value parsers
# Each parser takes (value, source, key) and returns the parsed value or raises ConfigError.

Parser = Callable[[Any, str, str], Any]

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any, source: str, key: str) -> float:
    """Seconds from a number or a string such as ``500ms``, ``2s``, ``1m``, ``1h``."""
    if isinstance(value, bool):
        raise ConfigError(source, key, "a duration such as 2s, 500ms or 1m", value)
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION_RE.match(value)):
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    else:
        raise ConfigError(source, key, "a duration such as 2s, 500ms or 1m", value)
    if seconds <= 0:
        raise ConfigError(source, key, "a duration greater than zero", value)
    return seconds


def _positive_int(value: Any, source: str, key: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(source, key, "a whole number greater than zero", value)
    return value


def _optional(parser: Parser) -> Parser:
    def parse(value: Any, source: str, key: str) -> Any:
        return None if value is None else parser(value, source, key)

    return parse


def _string(value: Any, source: str, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(source, key, "a non-empty string", value)
    return value


def _choice(*choices: str) -> Parser:
    def parse(value: Any, source: str, key: str) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            raise ConfigError(source, key, "one of " + ", ".join(choices), value)
        return value.lower()

    return parse


def parse_listen(value: Any, source: str, key: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6, ``:PORT`` for every address)."""
    expected = "HOST:PORT such as 0.0.0.0:10127 or 127.0.0.1:10127"
    if not isinstance(value, str):
        raise ConfigError(source, key, expected, value)
    m = re.match(r"^(?:\[([0-9a-fA-F:.]+)\]|([^:\[\]]*)):(\d{1,5})$", value.strip())
    if not m:
        raise ConfigError(source, key, expected, value)
    host = m.group(1) or m.group(2) or "0.0.0.0"
    port = int(m.group(3))
    if not 0 < port < 65536:
        raise ConfigError(source, key, "a port between 1 and 65535", value)
    return host, port


def parse_url(value: Any, source: str, key: str) -> str:
    """An http(s) base URL with a host; a trailing slash is dropped."""
    expected = "an http:// or https:// URL with a host, such as http://127.0.0.1:8000"
    if not isinstance(value, str):
        raise ConfigError(source, key, expected, value)
    try:
        parts = urlsplit(value.strip())
        port = parts.port  # raises ValueError on a bad port
    except ValueError:
        raise ConfigError(source, key, expected, value) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(source, key, expected, value)
    if port is not None and not 0 < port < 65536:
        raise ConfigError(source, key, expected, value)
    if parts.query or parts.fragment:
        raise ConfigError(source, key, expected + " (no query or fragment)", value)
    return value.strip().rstrip("/")


def _metrics_path(value: Any, source: str, key: str) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(source, key, "a path starting with /, such as /metrics", value)
    return value


_GPU_ID = re.compile(r"^(?:GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]*$")


def _gpu_list(value: Any, source: str, key: str) -> tuple[int | str, ...]:
    """``workers[].gpus``: NVML indices or GPU-/MIG- UUIDs (full, or a prefix naming one)."""
    if not isinstance(value, list) or not value:
        raise ConfigError(
            source, key, "a non-empty list of NVML indices or GPU-/MIG- UUIDs, such as [0, 1]"
        )
    out: list[int | str] = []
    for i, item in enumerate(value):
        if isinstance(item, str) and item.strip().isdigit():
            item = int(item.strip())
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            out.append(item)
        elif isinstance(item, str) and _GPU_ID.match(item.strip()):
            out.append(item.strip())
        else:
            raise ConfigError(
                source,
                f"{key}[{i}]",
                "an NVML index (0, 1, ...) or a UUID starting GPU- or MIG- (nvidia-smi -L)",
                item,
            )
    return tuple(out)


def _mapping(value: Any, source: str, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(source, key, "a mapping of keys to values", value)
    return dict(value)


def _bool(value: Any, source: str, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(source, key, "true or false", value)


_LABEL_NAME = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _pod_labels(value: Any, source: str, key: str) -> tuple[str, ...]:
    """``kubernetes.pod_labels``: Kubernetes label keys (``app``, ``app.kubernetes.io/name``)."""
    if not isinstance(value, list):
        raise ConfigError(source, key, "a list of pod label keys, such as [app]", value)
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _LABEL_NAME.match(item):
            raise ConfigError(
                source, f"{key}[{i}]", "a Kubernetes label key such as app.kubernetes.io/name", item
            )
        out.append(item)
    return tuple(out)


def _optional_path(value: Any, source: str, key: str) -> str | None:
    if value is None or value is False:
        return None
    return _string(value, source, key)


# --------------------------------------------------------------------------- sections

_GPU_FIELDS: dict[str, Parser] = {
    "backend": _choice(*GPU_BACKENDS),
    "interval": parse_duration,
    "slow_interval": parse_duration,
    "activity_interval": parse_duration,
    "fake_count": _positive_int,
    "fake_state_dir": _optional(_string),
}
_SCRAPE_FIELDS: dict[str, Parser] = {
    "timeout": parse_duration,
    "max_body_bytes": _positive_int,
}
_WORKER_FIELDS: dict[str, Parser] = {
    "name": _string,
    "url": parse_url,
    "engine": _choice(*ENGINES),
    "metrics_path": _optional(_metrics_path),
    "pid": _optional(_positive_int),
    "cmd_match": _optional(_string),
    "max_num_seqs": _optional(_positive_int),
    "timeout": _optional(parse_duration),
    "gpus": _optional(_gpu_list),
}
_KUBERNETES_FIELDS: dict[str, Parser] = {
    "node_name": _optional(_string),
    "api_url": _optional(parse_url),
    "token_file": _string,
    "ca_file": _optional_path,
    "auto_detect": _bool,
    "pod_labels": _pod_labels,
    "pod_resources_socket": _optional_path,
    "proc_root": _optional_path,
    "interval": parse_duration,
    "watch_timeout": parse_duration,
}
_TOP_SCALARS: dict[str, Parser] = {
    "web_config_file": _optional(_string),
    "log_level": _choice(*LOG_LEVELS),
    "collect_interval": parse_duration,
    "process_interval": parse_duration,
    "stats_window": parse_duration,
}
TOP_KEYS = (
    "listen",
    *_TOP_SCALARS,
    "gpu",
    "scrape",
    "workers",
    "kubernetes",
    "warmup",
    "report",
)


def _section(raw: Any, fields_: Mapping[str, Parser], source: str, prefix: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(source, prefix, "a mapping with keys " + ", ".join(fields_), raw)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}.{key}"
        if key not in fields_:
            raise ConfigError(source, dotted, "one of the known keys " + ", ".join(fields_))
        out[str(key)] = fields_[key](value, source, dotted)
    return out


def default_worker_name(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def _worker(raw: Any, source: str, key: str) -> WorkerSpec:
    if isinstance(raw, str):
        raw = {"url": raw}
    values = _section(raw, _WORKER_FIELDS, source, key)
    if "url" not in values:
        raise ConfigError(source, f"{key}.url", "the worker's base URL (required)")
    values.setdefault("name", default_worker_name(values["url"]))
    return WorkerSpec(**values)


def _workers(raw: Any, source: str, key: str = "workers") -> tuple[WorkerSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(source, key, "a list of workers (each a URL or a mapping with url)", raw)
    workers = tuple(_worker(item, source, f"{key}[{i}]") for i, item in enumerate(raw))
    _check_unique(workers, source)
    return workers


def parse_worker_arg(text: str, source: str, key: str) -> WorkerSpec:
    """``URL`` or ``NAME=URL`` as given to ``--worker`` or in ``INFERWATCH_WORKERS``."""
    name, sep, url = text.partition("=")
    if sep and not name.startswith(("http://", "https://")):
        if not name:
            raise ConfigError(source, key, "NAME=URL with a non-empty NAME", text)
        return _worker({"name": name, "url": url}, source, key)
    return _worker({"url": text}, source, key)


def _apply(config: AgentConfig, raw: Mapping[str, Any], source: str) -> AgentConfig:
    """Validate one layer of raw values and lay it over ``config``."""
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "listen":
            changes["listen_host"], changes["listen_port"] = parse_listen(value, source, key)
        elif key in _TOP_SCALARS:
            changes[key] = _TOP_SCALARS[key](value, source, key)
        elif key == "gpu":
            changes["gpu"] = replace(config.gpu, **_section(value, _GPU_FIELDS, source, key))
        elif key == "scrape":
            changes["scrape"] = replace(
                config.scrape, **_section(value, _SCRAPE_FIELDS, source, key)
            )
        elif key == "workers":
            changes["workers"] = value if isinstance(value, tuple) else _workers(value, source)
        elif key == "kubernetes":
            base = config.kubernetes or KubernetesConfig()
            section = {} if value is None else _section(value, _KUBERNETES_FIELDS, source, key)
            changes["kubernetes"] = replace(base, **section)
        elif key in ("warmup", "report"):
            changes[key] = _mapping(value, source, key)
        else:
            raise ConfigError(source, str(key), "one of the known keys " + ", ".join(TOP_KEYS))
    return replace(config, **changes)


def read_yaml_file(path: str) -> Mapping[str, Any]:
    """A YAML mapping from ``path``; unreadable files and bad YAML are ConfigErrors."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(path, "(file)", "a readable file", exc.strerror or str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(file)"
        raise ConfigError(path, where, "valid YAML", getattr(exc, "problem", str(exc))) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(path, "(top level)", "a mapping of settings", type(data).__name__)
    return data


# Environment variables and the key each one sets.
ENV_KEYS: dict[str, str] = {
    "INFERWATCH_LISTEN": "listen",
    "INFERWATCH_WEB_CONFIG_FILE": "web_config_file",
    "INFERWATCH_LOG_LEVEL": "log_level",
    "INFERWATCH_COLLECT_INTERVAL": "collect_interval",
    "INFERWATCH_STATS_WINDOW": "stats_window",
    "INFERWATCH_GPU_BACKEND": "gpu.backend",
    "INFERWATCH_FAKE_GPUS": "gpu.fake_count",
    "INFERWATCH_FAKE_GPU_STATE": "gpu.fake_state_dir",
    "INFERWATCH_WORKERS": "workers",
}


def _env_layer(env: Mapping[str, str]) -> list[tuple[dict[str, Any], str]]:
    layers: list[tuple[dict[str, Any], str]] = []
    for var, key in ENV_KEYS.items():
        if var not in env or env[var] == "":
            continue
        source = f"environment {var}"
        value: Any = env[var]
        if key == "workers":
            items = [v.strip() for v in value.split(",") if v.strip()]
            value = tuple(parse_worker_arg(v, source, f"workers[{i}]") for i, v in enumerate(items))
            _check_unique(value, source)
        layers.append((_nest(key, value), source))
    return layers


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    head, _, rest = dotted.partition(".")
    return {head: _nest(rest, value) if rest else value}


def _check_unique(workers: Sequence[WorkerSpec], source: str) -> None:
    seen: set[str] = set()
    for i, w in enumerate(workers):
        if w.name in seen:
            raise ConfigError(source, f"workers[{i}].name", "a name no other worker uses", w.name)
        seen.add(w.name)


# Flags whose names are not their key's last part.
FLAG_NAMES: dict[str, str] = {
    "workers": "--worker",
    "gpu.backend": "--gpu-backend",
    "gpu.fake_count": "--fake-gpus",
    "gpu.fake_state_dir": "--fake-gpu-state",
}


def load_config(
    path: str | None = None,
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Build the configuration from a file, the environment and flag values.

    ``flags`` maps dotted keys (``listen``, ``gpu.backend``, ``workers`` as a list of
    ``[NAME=]URL`` strings, ...) to the raw strings given on the command line; keys
    whose value is None are ignored.
    """
    env = os.environ if env is None else env
    path = path or env.get("INFERWATCH_CONFIG") or None
    config = AgentConfig()
    if path:
        config = replace(_apply(config, read_yaml_file(path), path), source=path)
    for raw, source in _env_layer(env):
        config = _apply(config, raw, source)
    for key, value in (flags or {}).items():
        if value is None:
            continue
        source = FLAG_NAMES.get(key) or "--" + key.split(".")[-1].replace("_", "-")
        if key == "workers":
            value = tuple(parse_worker_arg(v, source, f"workers[{i}]") for i, v in enumerate(value))
            _check_unique(value, source)
        config = _apply(config, _nest(key, value), source)
    _check_consistency(config)
    return config


def _check_consistency(config: AgentConfig) -> None:
    if config.stats_window < config.collect_interval * 2:
        raise ConfigError(
            config.source,
            "stats_window",
            f"at least twice collect_interval ({config.collect_interval:g}s) so a window "
            "holds two samples",
            config.stats_window,
        )
    for key in ("slow_interval", "activity_interval"):
        if getattr(config.gpu, key) < config.gpu.interval:
            raise ConfigError(config.source, f"gpu.{key}", "at least gpu.interval")
