"""Which pod and container a process belongs to, from ``/proc/<pid>/cgroup``.

The kubelet puts every container in a cgroup below ``kubepods``, named after
the pod's UID and the container runtime's container ID (Kubernetes docs,
"About cgroup v2" and the kubelet's cgroup drivers, "Configuring a cgroup
driver"). Both drivers' shapes are read:

- ``cgroupfs``: ``/kubepods/burstable/pod<uid>/<container id>``
  (Guaranteed pods sit directly under ``/kubepods``);
- ``systemd``: ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid with _ for ->.slice/<runtime>-<container id>.scope``
  (``cri-containerd-``, ``crio-``, ``docker-``).

Under cgroup v2 a line is ``0::<path>``; under v1 one line per hierarchy
``<id>:<controllers>:<path>``. A reader in a cgroup namespace of its own sees
paths relative to its own root (``/../../kubepods-...``): the pod and container
parts are found anywhere in the path, so that works too.

This is how NVML's PIDs (host PIDs, the agent running with ``hostPID``) are
joined to pods when several pods share one GPU (time-slicing, MPS), where the
kubelet's allocations cannot tell them apart.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_POD = re.compile(
    r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})"
)
_SCOPE = re.compile(r"^(?:cri-containerd|crio|docker|containerd)-([0-9a-fA-F]{12,})\.scope$")
_BARE_ID = re.compile(r"^[0-9a-fA-F]{32,}$")


@dataclass(frozen=True)
class PodProcess:
    pod_uid: str
    #: the runtime's container ID (hex), None for the pod's sandbox or an unknown shape
    container_id: str | None


def parse_cgroup(text: str) -> PodProcess | None:
    """The pod (and container) of one ``/proc/<pid>/cgroup`` file; None: not in a pod."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if "kubepods" not in path:
            continue
        m = _POD.search(path)
        if m is None:
            continue
        uid = m.group(1).replace("_", "-").lower()
        last = path.rstrip("/").rsplit("/", 1)[-1]
        scope = _SCOPE.match(last)
        cid = scope.group(1) if scope else (last if _BARE_ID.match(last) else None)
        return PodProcess(uid, cid.lower() if cid else None)
    return None


def container_id(status_id: str) -> str:
    """The bare ID of a pod status ``containerID`` (``containerd://<id>``, ``cri-o://<id>``)."""
    return status_id.rsplit("://", 1)[-1].lower()


def _read_cgroup(proc_root: str, pid: int) -> PodProcess | None:
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8") as fh:
            return parse_cgroup(fh.read())
    except (OSError, UnicodeDecodeError):
        return None


def _pids(proc_root: str) -> list[int]:
    try:
        return [int(n) for n in os.listdir(proc_root) if n.isdigit()]
    except OSError:
        return []


def scan(proc_root: str = "/proc", pids: Iterable[int] | None = None) -> dict[int, PodProcess]:
    """PID -> its pod for every process under ``proc_root`` (or just ``pids``) in a pod.

    Processes that end during the scan, or whose file cannot be read, are skipped.
    """
    out: dict[int, PodProcess] = {}
    for pid in _pids(proc_root) if pids is None else pids:
        found = _read_cgroup(proc_root, pid)
        if found is not None:
            out[pid] = found
    return out


class Scanner:
    """:func:`scan` again and again, reading only the processes that are new.

    A process keeps its cgroup for life (a container's processes are born in it), so
    a PID seen before is read again only when its ``/proc/<pid>`` entry is another
    one (a reused PID: the entry's inode and change time differ).
    """

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._known: dict[int, tuple[tuple[int, int], PodProcess | None]] = {}
        self.reads = 0

    def scan(self) -> dict[int, PodProcess]:
        known: dict[int, tuple[tuple[int, int], PodProcess | None]] = {}
        out: dict[int, PodProcess] = {}
        for pid in _pids(self.proc_root):
            try:
                st = os.stat(os.path.join(self.proc_root, str(pid)))
            except OSError:
                continue
            key = (st.st_ino, st.st_ctime_ns)
            seen = self._known.get(pid)
            if seen is not None and seen[0] == key:
                found = seen[1]
            else:
                found = _read_cgroup(self.proc_root, pid)
                self.reads += 1
            known[pid] = (key, found)
            if found is not None:
                out[pid] = found
        self._known = known
        return out


def pid_workers(
    pods: Mapping[int, PodProcess],
    containers: Mapping[tuple[str, str], str],
    pod_only: Mapping[str, str],
) -> dict[int, str]:
    """PID -> worker: by (pod UID, container ID), else by pod UID for a one-worker pod.

    ``containers``: (pod UID, container ID) -> worker; ``pod_only``: pod UID -> worker
    for pods with exactly one worker (a process of another container of such a pod,
    say a sidecar, is not the worker's; only IDs unknown to the pod status fall back).
    """
    out: dict[int, str] = {}
    for pid, where in pods.items():
        worker = containers.get((where.pod_uid, where.container_id or ""))
        if worker is None and where.container_id is None:
            worker = pod_only.get(where.pod_uid)
        if worker is not None:
            out[pid] = worker
    return out


def _ppid(proc_root: str, pid: int) -> int | None:
    """The parent PID from ``/proc/<pid>/stat`` (after the command name, which may hold
    spaces and parentheses: the fields follow its last ``)``)."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def container_roots(
    pods: Mapping[int, PodProcess],
    proc_root: str = "/proc",
    wanted: Iterable[tuple[str, str]] | None = None,
    known: Mapping[tuple[str, str], int] | None = None,
) -> dict[tuple[str, str], int]:
    """(pod UID, container ID) -> the container's first process: the one whose parent
    is outside the container (the runtime's shim); the lowest such PID on a tie.

    ``wanted``: only these containers (default all); ``known``: roots found before,
    kept while that PID is still in the same container (no file is read for them).
    """
    want = None if wanted is None else set(wanted)
    members: dict[tuple[str, str], set[int]] = {}
    for pid, where in pods.items():
        if where.container_id:
            key = (where.pod_uid, where.container_id)
            if want is None or key in want:
                members.setdefault(key, set()).add(pid)
    out: dict[tuple[str, str], int] = {}
    for key, pids in members.items():
        previous = (known or {}).get(key)
        if previous is not None and previous in pids:
            out[key] = previous
            continue
        roots = [pid for pid in sorted(pids) if _ppid(proc_root, pid) not in pids]
        if roots:
            out[key] = roots[0]
    return out
