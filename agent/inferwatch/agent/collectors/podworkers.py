"""Which containers of a pod are inference servers, and how to scrape them: pure.

A pod is read as the Kubernetes API returns it (``v1.Pod`` JSON). A container
is scraped when the pod opts in with annotations, or, with ``auto_detect``,
when its image or command is an engine's. Annotations (docs/deploy.md):

=========================== ==================================================
``inferwatch.io/scrape``    ``"true"``: scrape (with the keys below);
                            ``"false"``: never scrape this pod
``inferwatch.io/port``      the port: a number or a container port's name
``inferwatch.io/path``      the metrics path (default: the engine's own)
``inferwatch.io/engine``    an engine's name (``agent.config.ENGINES``; default:
                            auto, told by its exposition)
``inferwatch.io/container`` the container (default: the one with that port, or
                            the recognised engine, or the first)
=========================== ==================================================

Only pods in phase Running with an IP and no deletion timestamp are scraped; a
pod that leaves that state takes its workers (and their series) with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferwatch.agent.collectors.cgroups import container_id
from inferwatch.agent.config import ENGINES, WorkerSpec
from inferwatch.engines import ENGINES as ENGINE_TABLES
from inferwatch.engines.base import PodFacts

ANNOTATION = "inferwatch.io/"
SCRAPE = ANNOTATION + "scrape"
PORT = ANNOTATION + "port"
PATH = ANNOTATION + "path"
ENGINE = ANNOTATION + "engine"
CONTAINER = ANNOTATION + "container"


@dataclass(frozen=True)
class Recognition:
    """An engine and how its containers look (its table's ``pods``)."""

    engine: str
    facts: PodFacts

    @property
    def port(self) -> int:
        """The port the engine listens on when nothing says otherwise."""
        return self.facts.port


#: How each engine's official images and launchers look, and their default ports: the
#: ``pods`` of every engine table that has them, in the registry's order (the first
#: engine that matches a container wins)
RECOGNISED = tuple(
    Recognition(name, table.pods) for name, table in ENGINE_TABLES.items() if table.pods
)
_PORT_ARG = re.compile(r"^--port(?:=(\d+))?$")


@dataclass(frozen=True)
class PodWorker:
    """One container the agent scrapes, and the pod facts attribution needs."""

    spec: WorkerSpec
    namespace: str
    pod: str
    container: str
    pod_uid: str
    #: the runtime's container ID (bare hex) once the container has started
    container_id: str | None


@dataclass(frozen=True)
class Skipped:
    """A pod that asked to be scraped but cannot be: said once in the log."""

    namespace: str
    pod: str
    reason: str


def recognise(container: Mapping[str, Any]) -> Recognition | None:
    image = str(container.get("image") or "").lower()
    command = " ".join(
        str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]
    )
    for rec in RECOGNISED:
        facts = rec.facts
        if any(i in image for i in facts.images) or any(c in command for c in facts.commands):
            return rec
    return None


def _arg_port(container: Mapping[str, Any]) -> int | None:
    """``--port N`` or ``--port=N`` on the container's command line."""
    args = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
    for i, arg in enumerate(args):
        m = _PORT_ARG.match(arg)
        if m is None:
            continue
        value = m.group(1) or (args[i + 1] if i + 1 < len(args) else "")
        if value.isdigit():
            return int(value)
    return None


def _declared_ports(container: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        p for p in container.get("ports") or [] if str(p.get("protocol", "TCP")).upper() == "TCP"
    ]


def _port_of(container: Mapping[str, Any], rec: Recognition | None) -> int | None:
    """The engine's port: its --port, else a declared port (the engine's default one,
    then one named http), else the engine's default."""
    port = _arg_port(container)
    if port is not None:
        return port
    declared = _declared_ports(container)
    if rec is not None:
        for p in declared:
            if p.get("containerPort") == rec.port:
                return rec.port
    for p in declared:
        if p.get("name") in ("http", "metrics"):
            return int(p["containerPort"])
    if declared:
        return int(declared[0]["containerPort"])
    return rec.port if rec is not None else None


def _named_port(
    containers: Sequence[Mapping[str, Any]], value: str
) -> tuple[Mapping[str, Any], int] | None:
    for c in containers:
        for p in _declared_ports(c):
            if (value.isdigit() and p.get("containerPort") == int(value)) or p.get("name") == value:
                return c, int(p["containerPort"])
    return None


def label_name(key: str) -> str:
    """A pod label key as a Prometheus label name: ``label_`` + [a-zA-Z0-9_] (as
    kube-state-metrics names them)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def scrapable(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    return (
        status.get("phase") == "Running"
        and bool(status.get("podIP"))
        and not meta.get("deletionTimestamp")
    )


def _status_ids(pod: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for st in (pod.get("status") or {}).get("containerStatuses") or []:
        if st.get("containerID"):
            out[str(st.get("name"))] = container_id(str(st["containerID"]))
    return out


def pod_workers(
    pod: Mapping[str, Any],
    *,
    auto_detect: bool = True,
    pod_labels: Sequence[str] = (),
) -> tuple[list[PodWorker], Skipped | None]:
    """The workers of one pod (none when it is not running, opted out, or has no engine)."""
    meta = pod.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    opt = str(annotations.get(SCRAPE, "")).strip().lower()
    if opt == "false" or not scrapable(pod):
        return [], None
    spec = pod.get("spec") or {}
    containers: list[Mapping[str, Any]] = list(spec.get("containers") or [])
    ip = str((pod.get("status") or {})["podIP"])
    chosen: list[
        tuple[Mapping[str, Any], int, str, str | None]
    ] = []  # container, port, engine, path
    if opt == "true":
        engine = str(annotations.get(ENGINE, "auto")).strip().lower() or "auto"
        if engine not in ENGINES:
            return [], Skipped(
                namespace,
                name,
                f"annotation {ENGINE}={engine!r} is not one of {', '.join(ENGINES)}",
            )
        path = annotations.get(PATH)
        if path is not None and not str(path).startswith("/"):
            return [], Skipped(namespace, name, f"annotation {PATH}={path!r} does not start with /")
        by_name = {str(c.get("name")): c for c in containers}
        wanted = annotations.get(CONTAINER)
        if wanted is not None and wanted not in by_name:
            return [], Skipped(
                namespace, name, f"annotation {CONTAINER}={wanted!r} names no container"
            )
        port_value = annotations.get(PORT)
        container: Mapping[str, Any] | None = by_name.get(wanted) if wanted else None
        port: int | None = None
        if port_value is not None:
            text = str(port_value).strip()
            hit = _named_port([container] if container is not None else containers, text)
            if hit is not None:
                container, port = hit
            elif text.isdigit() and 0 < int(text) < 65536:
                port = int(text)
            else:
                return [], Skipped(
                    namespace,
                    name,
                    f"annotation {PORT}={text!r} is no port number or container port name",
                )
        if container is None:
            recognised = [c for c in containers if recognise(c) is not None]
            container = recognised[0] if recognised else (containers[0] if containers else None)
        if container is None:
            return [], None
        rec = recognise(container)
        if port is None:
            port = _port_of(container, rec)
        if port is None:
            return [], Skipped(namespace, name, f"no port: set annotation {PORT}")
        if engine == "auto" and rec is not None:
            engine = rec.engine
        chosen.append((container, port, engine, path))
    elif auto_detect:
        for c in containers:
            rec = recognise(c)
            if rec is None:
                continue
            port = _port_of(c, rec)
            if port is not None:
                chosen.append((c, port, rec.engine, None))
    ids = _status_ids(pod)
    uid = str(meta.get("uid", ""))
    labels_meta: Mapping[str, str] = meta.get("labels") or {}
    extra = [(label_name(k), str(labels_meta[k])) for k in pod_labels if k in labels_meta]
    out = []
    for container, port, engine, path in chosen:
        cname = str(container.get("name"))
        host = f"[{ip}]" if ":" in ip else ip
        labels = (("namespace", namespace), ("pod", name), ("container", cname), *extra)
        worker = WorkerSpec(
            name=f"{namespace}/{name}/{cname}",
            url=f"http://{host}:{port}",
            engine=engine,
            metrics_path=path,
            labels=labels,
        )
        out.append(PodWorker(worker, namespace, name, cname, uid, ids.get(cname)))
    return out, None
