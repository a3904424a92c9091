"""The agent's configuration: a YAML file, ``INFERWATCH_*`` environment variables and flags.

Precedence is flags > environment > file > defaults. Every value is validated
before anything starts; a wrong one raises :class:`~inferwatch.errors.ConfigError`
naming where it came from (the file, the variable or the flag), the dotted key
and what was expected, which the CLI prints as one line with exit code 2.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from inferwatch.agent.redact import redact_url
from inferwatch.engines import ENGINES as ENGINE_TABLES
from inferwatch.errors import ConfigError, Kind
from inferwatch.validate import (
    Parser,
    boolean,
    choice,
    count,
    duration,
    mapping,
    optional,
    read_yaml_file,
    string,
)

DEFAULT_PORT = 10127
"""Outside the fully allocated 9100-9999 exporter range and unused by any known exporter."""

#: what ``workers[].engine`` accepts: auto (told by the exposition) or an engine of the registry
ENGINES = ("auto", *ENGINE_TABLES)
GPU_BACKENDS = ("nvml", "fake", "none", "dcgm-exporter")
DEFAULT_DCGM_EXPORTER_URL = "http://127.0.0.1:9400/metrics"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "logfmt", "json")


@dataclass(frozen=True)
class ProxySpec:
    """``workers[].proxy``: the measuring proxy in front of the worker (docs/proxy.md)."""

    listen_host: str
    listen_port: int
    #: connecting to the worker (waiting for a free upstream connection included)
    connect_timeout: float = 5.0
    #: the longest the worker may stay silent: before its answer's head (a long prefill
    #: under load) and between two chunks of it; then the client gets 504 or a cut stream
    read_timeout: float = 600.0
    #: a request body larger than this is refused with 413 (counted as it streams)
    max_body_bytes: int = 32 * 1024 * 1024
    #: open client connections at once (each holds at most one upstream connection)
    max_connections: int = 1024
    #: a client must finish its request head this soon after its first byte
    header_timeout: float = 10.0
    #: an idle keep-alive client connection is closed after this long
    idle_timeout: float = 75.0

    @property
    def listen(self) -> str:
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        return f"{host}:{self.listen_port}"


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
    #: basic auth towards the worker; the password from password_file or password_env
    #: (never on the command line, where ps shows it)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: False when Prometheus scrapes the engine itself: its histograms are not stored
    #: twice (the window quantiles are still computed); see docs/engines.md
    export_histograms: bool = True
    #: the ``instance`` label of Prometheus' own scrape of the engine, exported as
    #: ``inferwatch_worker_endpoint_info{endpoint}`` so the recording rules can join the
    #: engine's series to this worker; None: the scraped URL's host:port
    endpoint: str | None = None
    #: extra labels on the worker's series: ``namespace``, ``pod``, ``container`` (and
    #: allow-listed pod labels) of a worker found by Kubernetes discovery; () otherwise
    labels: tuple[tuple[str, str], ...] = ()
    #: the measuring proxy in front of this worker; None: not proxied
    proxy: ProxySpec | None = None

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
    #: backend dcgm-exporter: where its exposition is, how often to read it (it samples
    #: every 30 s by default), and which pod each worker runs in ("NAMESPACE/POD" or "POD")
    dcgm_exporter_url: str = DEFAULT_DCGM_EXPORTER_URL
    dcgm_interval: float = 5.0
    dcgm_worker_pods: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ScrapeConfig:
    timeout: float = 2.0
    max_body_bytes: int = 16 * 1024 * 1024
    #: exported samples per worker (a histogram counts its buckets, sum and count);
    #: the input is cut at SAMPLES_PER_SERIES times this many lines before parsing
    max_series: int = 5000


#: input sample lines read per exported sample allowed (ranks and copies that combine)
SAMPLES_PER_SERIES = 8


@dataclass(frozen=True)
class ServerConfig:
    """Limits of the agent's own HTTP server (a hostile client must not exhaust it)."""

    #: open connections at once; at the cap the oldest one still sending its request
    #: head is closed for the new one, or the new one is refused
    max_connections: int = 256
    #: a connection must finish its request head this soon after its first byte
    header_timeout: float = 10.0
    #: an idle keep-alive connection is closed after this long
    idle_timeout: float = 30.0


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
    log_format: str = "text"
    collect_interval: float = 2.0
    process_interval: float = 5.0
    stats_window: float = 60.0
    gpu: GpuConfig = field(default_factory=GpuConfig)
    scrape: ScrapeConfig = field(default_factory=ScrapeConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
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


def local_url(host: str, port: int, scheme: str = "http") -> str:
    """The URL that reaches a listener on ``host:port`` from this host: the wildcard
    address (0.0.0.0, or none given) is reached on loopback; IPv6 hosts in brackets."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"{scheme}://{shown}:{port}"


def parse_url(value: Any, source: str, key: str) -> str:
    """An http(s) base URL with a host; a trailing slash is dropped."""
    expected = "an http:// or https:// URL with a host, such as http://127.0.0.1:8000"
    if not isinstance(value, str):
        raise ConfigError(source, key, expected, Kind(value))
    try:
        parts = urlsplit(value.strip())
        port = parts.port  # raises ValueError on a bad port
    except ValueError:
        raise ConfigError(source, key, expected, redact_url(value)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(source, key, expected, redact_url(value))
    if port is not None and not 0 < port < 65536:
        raise ConfigError(source, key, expected, redact_url(value))
    if parts.query or parts.fragment:
        raise ConfigError(source, key, expected + " (no query or fragment)", redact_url(value))
    return value.strip().rstrip("/")


def _endpoint(value: Any, source: str, key: str) -> str:
    """``workers[].endpoint``: a Prometheus ``instance`` value such as ``10.0.0.5:8000``."""
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= 255
        or not value.isprintable()
        or any(c.isspace() for c in value)
    ):
        raise ConfigError(
            source,
            key,
            "the instance label of Prometheus' own scrape of the engine, such as 10.0.0.5:8000",
        )
    return value


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


def _exporter_url(value: Any, source: str, key: str) -> str:
    """An http(s) URL of a /metrics page, such as dcgm-exporter's (default path /metrics)."""
    try:
        url = parse_url(value, source, key)
    except ConfigError as exc:
        raise ConfigError(source, key, exc.expected, redact_url(value)) from None
    return url if urlsplit(url).path else url + "/metrics"


def _pod_map(value: Any, source: str, key: str) -> Mapping[str, str]:
    expected = "a mapping of worker name to NAMESPACE/POD or POD"
    if not isinstance(value, Mapping):
        raise ConfigError(source, key, expected, value)
    for worker, pod in value.items():
        if not isinstance(worker, str) or not isinstance(pod, str) or not pod.strip("/ "):
            raise ConfigError(source, f"{key}.{worker}", expected, pod)
    return dict(value)


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
    return string(value, source, key)


_PROXY_FIELDS: dict[str, Parser] = {
    "listen": parse_listen,
    "connect_timeout": duration,
    "read_timeout": duration,
    "max_body_bytes": count,
    "max_connections": count,
    "header_timeout": duration,
    "idle_timeout": duration,
}


def _proxy(value: Any, source: str, key: str) -> ProxySpec | None:
    """``workers[].proxy``: ``HOST:PORT``, or a mapping with ``listen`` and limits."""
    if value is None or value is False:
        return None
    if isinstance(value, str):
        value = {"listen": value}
    if not isinstance(value, Mapping):
        raise ConfigError(
            source, key, "HOST:PORT or a mapping with listen, such as {listen: 0.0.0.0:8001}"
        )
    values = _section(value, _PROXY_FIELDS, source, key)
    if "listen" not in values:
        raise ConfigError(source, f"{key}.listen", "the proxy's HOST:PORT (required)")
    host, port = values.pop("listen")
    return ProxySpec(listen_host=host, listen_port=port, **values)


# --------------------------------------------------------------------------- sections

_GPU_FIELDS: dict[str, Parser] = {
    "backend": choice(*GPU_BACKENDS),
    "interval": duration,
    "slow_interval": duration,
    "activity_interval": duration,
    "fake_count": count,
    "fake_state_dir": optional(string),
    "dcgm_exporter_url": _exporter_url,
    "dcgm_interval": duration,
    "dcgm_worker_pods": _pod_map,
}
_SCRAPE_FIELDS: dict[str, Parser] = {
    "timeout": duration,
    "max_body_bytes": count,
    "max_series": count,
}
_SERVER_FIELDS: dict[str, Parser] = {
    "max_connections": count,
    "header_timeout": duration,
    "idle_timeout": duration,
}
_WORKER_FIELDS: dict[str, Parser] = {
    "name": string,
    "url": parse_url,
    "engine": choice(*ENGINES),
    "metrics_path": optional(_metrics_path),
    "pid": optional(count),
    "cmd_match": optional(string),
    "max_num_seqs": optional(count),
    "timeout": optional(duration),
    "gpus": optional(_gpu_list),
    "username": optional(string),
    "password_file": optional(string),
    "password_env": optional(string),
    "export_histograms": boolean,
    "endpoint": optional(_endpoint),
    "proxy": _proxy,
}
_KUBERNETES_FIELDS: dict[str, Parser] = {
    "node_name": optional(string),
    "api_url": optional(parse_url),
    "token_file": string,
    "ca_file": _optional_path,
    "auto_detect": boolean,
    "pod_labels": _pod_labels,
    "pod_resources_socket": _optional_path,
    "proc_root": _optional_path,
    "interval": duration,
    "watch_timeout": duration,
}
_TOP_SCALARS: dict[str, Parser] = {
    "web_config_file": optional(string),
    "log_level": choice(*LOG_LEVELS),
    "log_format": choice(*LOG_FORMATS),
    "collect_interval": duration,
    "process_interval": duration,
    "stats_window": duration,
}
TOP_KEYS = (
    "listen",
    *_TOP_SCALARS,
    "gpu",
    "scrape",
    "server",
    "workers",
    "kubernetes",
    "warmup",
    "report",
)


def _section(raw: Any, fields_: Mapping[str, Parser], source: str, prefix: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(source, prefix, "a mapping with keys " + ", ".join(fields_), Kind(raw))
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
    password = _worker_password(values, source, key)
    if password is not None:
        if not values.get("username"):
            raise ConfigError(source, f"{key}.username", "a user name for the worker's password")
        values["password"] = password
    values.setdefault("name", default_worker_name(values["url"]))
    return WorkerSpec(**values)


def _worker_password(values: dict[str, Any], source: str, key: str) -> str | None:
    """The worker's password from its file or variable (removed from ``values``)."""
    path = values.pop("password_file", None)
    var = values.pop("password_env", None)
    if path is not None:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().rstrip("\r\n")
        except (OSError, UnicodeDecodeError):
            raise ConfigError(source, f"{key}.password_file", "a readable UTF-8 file") from None
    if var is not None:
        if var not in os.environ:
            raise ConfigError(source, f"{key}.password_env", "the name of a set variable", var)
        return os.environ[var]
    return None


def _workers(raw: Any, source: str, key: str = "workers") -> tuple[WorkerSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(
            source, key, "a list of workers (each a URL or a mapping with url)", Kind(raw)
        )
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
        elif key == "server":
            changes["server"] = replace(
                config.server, **_section(value, _SERVER_FIELDS, source, key)
            )
        elif key == "workers":
            changes["workers"] = value if isinstance(value, tuple) else _workers(value, source)
        elif key == "kubernetes":
            base = config.kubernetes or KubernetesConfig()
            section = {} if value is None else _section(value, _KUBERNETES_FIELDS, source, key)
            changes["kubernetes"] = replace(base, **section)
        elif key in ("warmup", "report"):
            changes[key] = mapping(value, source, key)
        else:
            raise ConfigError(source, str(key), "one of the known keys " + ", ".join(TOP_KEYS))
    return replace(config, **changes)


# Environment variables and the key each one sets.
ENV_KEYS: dict[str, str] = {
    "INFERWATCH_LISTEN": "listen",
    "INFERWATCH_WEB_CONFIG_FILE": "web_config_file",
    "INFERWATCH_LOG_LEVEL": "log_level",
    "INFERWATCH_LOG_FORMAT": "log_format",
    "INFERWATCH_COLLECT_INTERVAL": "collect_interval",
    "INFERWATCH_STATS_WINDOW": "stats_window",
    "INFERWATCH_GPU_BACKEND": "gpu.backend",
    "INFERWATCH_FAKE_GPUS": "gpu.fake_count",
    "INFERWATCH_FAKE_GPU_STATE": "gpu.fake_state_dir",
    "INFERWATCH_DCGM_EXPORTER_URL": "gpu.dcgm_exporter_url",
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
    "log_format": "--log.format",
    "gpu.dcgm_exporter_url": "--dcgm-exporter-url",
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
    _check_proxy_ports(config)
    names = {w.name for w in config.workers}
    for worker in config.gpu.dcgm_worker_pods:
        if worker not in names:
            raise ConfigError(
                config.source,
                f"gpu.dcgm_worker_pods.{worker}",
                "the name of a configured worker",
                worker,
            )


def _check_proxy_ports(config: AgentConfig) -> None:
    """Each proxy on a port of its own: not the agent's, not another proxy's."""
    taken = {config.listen_port: "listen"}
    for i, worker in enumerate(config.workers):
        if worker.proxy is None:
            continue
        port = worker.proxy.listen_port
        if port in taken:
            raise ConfigError(
                config.source,
                f"workers[{i}].proxy.listen",
                f"a port other than {taken[port]}'s",
                worker.proxy.listen,
            )
        taken[port] = f"workers[{i}].proxy.listen"
        host = urlsplit(worker.url).hostname or ""
        if worker.port == port and host in (
            "localhost",
            "127.0.0.1",
            "::1",
            worker.proxy.listen_host,
        ):
            raise ConfigError(
                config.source,
                f"workers[{i}].proxy.listen",
                "a port other than the worker's own (the proxy forwards to it)",
                worker.proxy.listen,
            )
