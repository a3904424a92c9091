"""Worker processes: which process serves each worker, its launch flags, CPU, memory, start time.

Each pass runs in a thread (psutil reads /proc synchronously) and:

1. finds every worker's *root* process, once, and again only when it dies: the
   configured ``pid``; else the oldest process whose command line contains
   ``cmd_match``; else the process listening on the worker URL's port when that
   URL names this machine. From a listener (or a ``cmd_match`` hit) it climbs to
   the top-most ancestor whose command line is a known engine launch, because
   the socket often belongs to a child: vLLM's extra API-server processes,
   TGI's router, a re-titled worker;
2. sums CPU time and RSS over the root and all its live descendants, and lists
   their pids for the GPU collector's per-process series;
3. keeps the root's GPU variables (``NVIDIA_VISIBLE_DEVICES``,
   ``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER``; nothing else of its
   environment, which may hold secrets), read once when the root is found, for
   worker-to-GPU attribution (None where the environment cannot be read).

CPU time of the tree counts, for every live process, its own user + system time
plus the time of the children it has already reaped (the kernel adds a reaped
child's time, and that of the children it reaped, to its parent). A child that
exits is thus still counted once its parent waits for it; only a child reaped
outside the tree (re-parented to init) loses its time. So that the counter
never goes down across such a loss (or a child reaped between two reads of one
pass), the series stays flat until the tree's own total catches up. A new root
process (a restart) starts the counter again, like any process counter; the
start time series changes with it.

RSS is the sum of the tree's resident set sizes, which counts pages shared
between the processes (libraries, memory shared after fork) once per process.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from inferwatch.agent.collectors.attribution import gpu_env
from inferwatch.agent.collectors.base import Source, counter_family, gauge_family
from inferwatch.agent.config import WorkerSpec
from inferwatch.engines import contract
from inferwatch.engines.launchflags import (
    ENVIRON_ENGINES,
    WORKER_INFO_FLAGS,
    LaunchInfo,
    parse_launch,
)

log = logging.getLogger(__name__)

#: how long a decision "this host name is (not) this machine" is kept, seconds
_LOCALITY_TTL = 300.0
#: ancestors climbed at most from a listener towards the engine's main process
_MAX_DEPTH = 64

INFO_LABELS = ("worker", "engine", "model", "pid", "version", *WORKER_INFO_FLAGS)
SERIES_LABELS = ("worker", "engine", "model")


EngineFacts = Callable[[str], Mapping[str, str]]
#: listening TCP port -> [(bound address, owner pid or None)]
Listeners = dict[int, list[tuple[str, int | None]]]


def _no_facts(worker: str) -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class WorkerProcess:
    """One worker's process tree as the last pass saw it."""

    worker: str
    #: the root process: the engine's main process
    pid: int
    #: the root and every live descendant
    pids: tuple[int, ...]
    launch: LaunchInfo | None
    cpu_seconds: float
    rss_bytes: int
    start_time: float
    #: "pid", "cmd_match" or "port"
    found_by: str
    #: the root's GPU variables (attribution.GPU_ENV_VARS); None when unreadable
    gpu_env: Mapping[str, str] | None = None


@dataclass
class _Tracked:
    """A worker's root process between passes (mutable, owned by the pass thread)."""

    root: psutil.Process
    launch: LaunchInfo | None
    start_time: float
    found_by: str
    last_cpu: float = 0.0
    gpu_env: Mapping[str, str] | None = None


@dataclass(frozen=True)
class _Problem:
    worker: str
    reason: str
    message: str


class _Table:
    """One pass's view of the process table: pid -> Process and pid -> parent pid."""

    def __init__(self) -> None:
        self.procs: dict[int, psutil.Process] = {}
        self.ppid: dict[int, int] = {}
        # process_iter keeps its Process objects between calls, so the objects
        # found here are the same ones each pass (cpu_times on them is cheap)
        for proc in psutil.process_iter(["ppid"]):
            self.procs[proc.pid] = proc
            ppid = proc.info.get("ppid")
            if isinstance(ppid, int):
                self.ppid[proc.pid] = ppid
        self.children: dict[int, list[int]] = {}
        for pid, ppid in self.ppid.items():
            if ppid != pid:
                self.children.setdefault(ppid, []).append(pid)
        self._launch: dict[int, LaunchInfo | None] = {}
        self._cmdline: dict[int, list[str]] = {}

    def cmdline(self, pid: int) -> list[str]:
        if pid not in self._cmdline:
            proc = self.procs.get(pid)
            try:
                self._cmdline[pid] = list(proc.cmdline()) if proc is not None else []
            except (psutil.Error, OSError):
                self._cmdline[pid] = []
        return self._cmdline[pid]

    def launch(self, pid: int) -> LaunchInfo | None:
        if pid not in self._launch:
            self._launch[pid] = parse_launch(self.cmdline(pid))
        return self._launch[pid]

    def descendants(self, pid: int) -> list[int]:
        seen = {pid}
        order: list[int] = []
        stack = list(self.children.get(pid, ()))
        while stack:
            child = stack.pop()
            if child in seen:
                continue
            seen.add(child)
            order.append(child)
            stack.extend(self.children.get(child, ()))
        return order

    def engine_root(self, pid: int) -> int:
        """The top-most process at or above ``pid`` whose command line is an engine launch."""
        best = pid
        current = pid
        for _ in range(_MAX_DEPTH):
            if self.launch(current) is not None:
                best = current
            parent = self.ppid.get(current)
            if parent is None or parent == current or parent <= 0 or parent not in self.procs:
                break
            current = parent
        return best


def _alive(proc: psutil.Process) -> bool:
    try:
        # is_running also notices a pid reused by a new process
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _local_addresses() -> set[str]:
    addresses: set[str] = set()
    try:
        for entries in psutil.net_if_addrs().values():
            for entry in entries:
                if entry.family in (socket.AF_INET, socket.AF_INET6):
                    addresses.add(entry.address.split("%", 1)[0])
    except (psutil.Error, OSError):
        pass
    return addresses


def _url_host_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return parts.hostname or "", None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname or "", port


def _listeners() -> Listeners:
    """Listening TCP sockets: port -> [(address, pid, or None where the owner is hidden)].

    The system-wide call needs no privilege on Linux but reports ``pid=None`` for
    sockets of processes we may not inspect; on systems where it needs root, each
    process we can read is asked instead.
    """
    found: list[tuple[str, int, int | None]] = []
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr:
                found.append((conn.laddr.ip, conn.laddr.port, conn.pid))
    except (psutil.AccessDenied, PermissionError):
        for proc in psutil.process_iter():
            # Process.net_connections is psutil >= 6; older releases call it connections
            reader = getattr(proc, "net_connections", None) or proc.connections
            try:
                owned = reader(kind="tcp")
            except (psutil.Error, OSError):
                continue
            for pconn in owned:
                if pconn.status == psutil.CONN_LISTEN and pconn.laddr:
                    found.append((pconn.laddr.ip, pconn.laddr.port, proc.pid))
    result: Listeners = {}
    for ip, port, pid in found:
        result.setdefault(port, []).append((ip, pid))
    return result


class ProcessSource(Source):
    """psutil source: worker process trees, launch flags, and the pid -> worker join."""

    name = "process"

    def __init__(
        self,
        workers: Sequence[WorkerSpec],
        *,
        interval: float = 5.0,
        engine_facts: EngineFacts = _no_facts,
    ) -> None:
        super().__init__()
        self.interval = interval
        self._workers = tuple(workers)
        self._specs = {w.name: w for w in self._workers}
        self._engine_facts = engine_facts
        self._tracked: dict[str, _Tracked] = {}
        self._snapshot: Mapping[str, WorkerProcess] = {}
        self._pid_workers: Mapping[int, str] = {}
        self._gpu_envs: Mapping[str, Mapping[str, str] | None] = {}
        self._missing: dict[str, str] = {}
        self._locality: dict[str, tuple[float, bool]] = {}
        self._self_pid = os.getpid()
        self._lock = asyncio.Lock()
        self._pending: tuple[WorkerSpec, ...] | None = None

    def set_workers(self, workers: Sequence[WorkerSpec]) -> None:
        """Replace the worker list (Kubernetes discovery); applied at the next pass. A
        worker that is gone leaves the snapshot at once; one whose pid changed (a
        restarted container) is looked for again."""
        self._pending = tuple(workers)
        names = {w.name for w in workers}
        self._snapshot = {n: s for n, s in self._snapshot.items() if n in names}
        self._pid_workers = {p: n for p, n in self._pid_workers.items() if n in names}

    def _apply_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        specs = {w.name: w for w in pending}
        for name in list(self._tracked):
            old, new = self._specs.get(name), specs.get(name)
            if (
                new is None
                or old is None
                or (old.pid, old.cmd_match, old.url)
                != (
                    new.pid,
                    new.cmd_match,
                    new.url,
                )
            ):
                del self._tracked[name]
        for name in list(self._missing):
            if name not in specs:
                del self._missing[name]
        self._workers = pending
        self._specs = specs

    # -- the pass ------------------------------------------------------------

    async def refresh(self) -> None:
        started = time.perf_counter()
        async with self._lock:
            self._apply_pending()
            try:
                snapshot, problems = await asyncio.to_thread(self._collect)
            except Exception as exc:  # a source never raises
                self.health.error("collect", f"process pass failed: {exc!r}")
                return
        if self._pending is not None:  # the list changed during the pass: drop the gone
            names = {w.name for w in self._pending}
            snapshot = {n: seen for n, seen in snapshot.items() if n in names}
        self._snapshot = snapshot
        pid_workers: dict[int, str] = {}
        for name in sorted(snapshot):
            for pid in snapshot[name].pids:
                pid_workers.setdefault(pid, name)
        self._pid_workers = pid_workers
        envs = {name: seen.gpu_env for name, seen in snapshot.items()}
        if envs != self._gpu_envs:
            self._gpu_envs = envs
        failing = {p.worker for p in problems}
        for problem in problems:
            self.health.error(problem.reason, problem.message, key=problem.worker)
        for spec in self._workers:
            if spec.name not in failing:
                self.health.ok(key=spec.name)
        self.health.ok()
        self.health.finished_pass(started)

    def _collect(self) -> tuple[dict[str, WorkerProcess], list[_Problem]]:
        table = _Table()
        problems: list[_Problem] = []
        snapshot: dict[str, WorkerProcess] = {}
        listeners: list[Listeners] = []

        def get_listeners() -> Listeners:
            if not listeners:
                listeners.append(_listeners())
            return listeners[0]

        for spec in self._workers:
            try:
                seen = self._watch(spec, table, get_listeners, problems)
            except (psutil.Error, OSError) as exc:
                problems.append(_Problem(spec.name, "psutil", f"reading processes: {exc!r}"))
                continue
            if seen is not None:
                snapshot[spec.name] = seen
        return snapshot, problems

    def _watch(
        self,
        spec: WorkerSpec,
        table: _Table,
        get_listeners: Callable[[], Listeners],
        problems: list[_Problem],
    ) -> WorkerProcess | None:
        tracked = self._tracked.get(spec.name)
        if tracked is not None and not _alive(tracked.root):
            log.info(
                "worker %s: process %d is gone; looking for it again", spec.name, tracked.root.pid
            )
            del self._tracked[spec.name]
            tracked = None
        if tracked is None:
            try:
                tracked, why = self._find(spec, table, get_listeners, problems)
            except psutil.NoSuchProcess:
                tracked, why = None, "the process exited while it was being inspected"
            if tracked is None:
                if self._missing.get(spec.name) != why:
                    log.debug("worker %s: no process found (%s)", spec.name, why)
                    self._missing[spec.name] = why
                return None
            self._missing.pop(spec.name, None)
            self._tracked[spec.name] = tracked
            engine = tracked.launch.engine if tracked.launch else "no known engine"
            log.info(
                "worker %s: process %d (%s) found by %s",
                spec.name,
                tracked.root.pid,
                engine,
                tracked.found_by,
            )
        return self._measure(spec.name, tracked, table)

    def _measure(self, worker: str, tracked: _Tracked, table: _Table) -> WorkerProcess | None:
        root = tracked.root
        pids = [root.pid, *table.descendants(root.pid)]
        cpu = 0.0
        rss = 0
        live: list[int] = []
        for pid in pids:
            proc = root if pid == root.pid else table.procs.get(pid)
            if proc is None:
                continue
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    cpu += times.user + times.system
                    cpu += getattr(times, "children_user", 0.0)
                    cpu += getattr(times, "children_system", 0.0)
                    live.append(pid)
                    rss += proc.memory_info().rss
            except psutil.NoSuchProcess:
                if pid == root.pid:
                    # gone between the liveness check and now: look again next pass
                    self._tracked.pop(worker, None)
                    return None
            except psutil.Error:
                # a zombie has no memory left; a process of another user may hide it
                continue
        # a dip (a child reaped by a process outside the tree, or reaped between two
        # reads of this pass) holds the counter flat until the tree catches up:
        # a counter never goes down, and a passing dip leaves no lasting error
        total = max(cpu, tracked.last_cpu)
        tracked.last_cpu = total
        return WorkerProcess(
            worker=worker,
            pid=root.pid,
            pids=tuple(live),
            launch=tracked.launch,
            cpu_seconds=total,
            rss_bytes=rss,
            start_time=tracked.start_time,
            found_by=tracked.found_by,
            gpu_env=tracked.gpu_env,
        )

    # -- finding a worker's process -------------------------------------------

    def _find(
        self,
        spec: WorkerSpec,
        table: _Table,
        get_listeners: Callable[[], Listeners],
        problems: list[_Problem],
    ) -> tuple[_Tracked | None, str]:
        if spec.pid is not None:
            proc = table.procs.get(spec.pid)
            if proc is None:
                try:
                    proc = psutil.Process(spec.pid)
                except psutil.Error:
                    return None, f"configured pid {spec.pid} does not exist"
            return self._track(proc, table, "pid"), ""
        if spec.cmd_match:
            pid = self._by_cmd_match(spec.cmd_match, table)
            if pid is None:
                return None, f"no command line contains {spec.cmd_match!r}"
            return self._track(table.procs[pid], table, "cmd_match"), ""
        host, port = _url_host_port(spec.url)
        if port is None:
            return None, f"no port in {spec.url}"
        if not self._is_local(host):
            return None, f"{host} is not an address of this machine"
        entries = get_listeners().get(port, [])
        if not entries:
            return None, f"nothing listens on port {port}"
        ranked = sorted(entries, key=lambda e: self._address_rank(e[0], host))
        best_rank = self._address_rank(ranked[0][0], host)
        pids = [pid for ip, pid in ranked if self._address_rank(ip, host) == best_rank and pid]
        if not pids:
            problems.append(
                _Problem(
                    spec.name,
                    "access_denied",
                    f"port {port} is listened on by a process this agent may not inspect; "
                    "run the agent as the worker's user (or with CAP_SYS_PTRACE), in the "
                    "worker's PID namespace, or configure the worker's pid",
                )
            )
            return None, f"the process listening on port {port} is hidden from this agent"
        roots = {table.engine_root(pid) for pid in pids if pid in table.procs}
        if not roots:
            return None, f"the process listening on port {port} has exited"
        root = min(roots, key=lambda pid: self._age_key(table, pid))
        return self._track(table.procs[root], table, "port"), ""

    def _by_cmd_match(self, needle: str, table: _Table) -> int | None:
        matches = {
            pid
            for pid in table.procs
            if pid != self._self_pid and needle in " ".join(table.cmdline(pid))
        }
        # a forked child keeps its parent's command line: keep the top of each family
        tops = [pid for pid in matches if table.ppid.get(pid) not in matches]
        if not tops:
            return None
        roots = {table.engine_root(pid) for pid in tops}
        return min(roots, key=lambda pid: (table.launch(pid) is None, *self._age_key(table, pid)))

    @staticmethod
    def _age_key(table: _Table, pid: int) -> tuple[float, int]:
        try:
            return table.procs[pid].create_time(), pid
        except (psutil.Error, KeyError):
            return float("inf"), pid

    def _track(self, proc: psutil.Process, table: _Table, found_by: str) -> _Tracked:
        cmdline = table.cmdline(proc.pid) if proc.pid in table.procs else _cmdline(proc)
        launch = parse_launch(cmdline)
        environ: dict[str, str] | None
        try:
            environ = dict(proc.environ())
        except (psutil.Error, OSError):
            environ = None  # another user's environment: the command line alone
        if environ and launch is not None and launch.engine in ENVIRON_ENGINES:
            launch = parse_launch(cmdline, environ=environ)
        return _Tracked(
            root=proc,
            launch=launch,
            start_time=proc.create_time(),
            found_by=found_by,
            gpu_env=None if environ is None else gpu_env(environ),
        )

    def _is_local(self, host: str) -> bool:
        """Whether ``host`` names this machine (cached: name resolution may be slow)."""
        now = time.monotonic()
        cached = self._locality.get(host)
        if cached is not None and now - cached[0] < _LOCALITY_TTL:
            return cached[1]
        local = _resolve_local(host)
        self._locality[host] = (now, local)
        return local

    @staticmethod
    def _address_rank(ip: str, host: str) -> int:
        """0: bound to the URL's own address; 1: bound to every address; 2: other."""
        if ip == host:
            return 0
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return 2
        if address.is_unspecified:
            return 1
        if address.is_loopback and host in ("localhost", ""):
            return 0
        return 2

    # -- what others read ------------------------------------------------------

    def families(self) -> Iterable[Metric]:
        info = gauge_family(contract.WORKER_INFO, INFO_LABELS)
        cpu = counter_family(contract.WORKER_CPU_SECONDS, SERIES_LABELS)
        rss = gauge_family(contract.WORKER_RESIDENT_MEMORY_BYTES, SERIES_LABELS)
        start = gauge_family(contract.WORKER_START_TIME_SECONDS, SERIES_LABELS)
        snapshot = self._snapshot
        for name in sorted(snapshot):
            seen = snapshot[name]
            engine, model, version, facts = self._identity(seen)
            launch = seen.launch or LaunchInfo()
            # The command line wins; where it is silent, what the engine says of itself
            # (vLLM's cache_config_info) is still known, not a guess.
            prefix: str = launch.prefix_caching
            if prefix == "unknown":
                prefix = facts.get("prefix_caching", "unknown")
            gpu_mem = _text(launch.gpu_memory_utilization) or facts.get(
                "gpu_memory_utilization", ""
            )
            info.add_metric(
                [
                    name,
                    engine,
                    model,
                    str(seen.pid),
                    version,
                    _text(launch.max_num_seqs) or facts.get("max_num_seqs", ""),
                    _text(launch.max_model_len),
                    _text(launch.max_num_batched_tokens),
                    gpu_mem,
                    prefix,
                    # vLLM's cache_config_info cache_dtype; "" where the engine does not say
                    facts.get("kv_cache_dtype", ""),
                ],
                1.0,
            )
            labels = [name, engine, model]
            extra = tuple(getattr(self._specs.get(name), "labels", ()) or ())
            if extra:
                # a discovered pod's worker: its namespace, pod and container too
                info.samples[-1] = _with_labels(info.samples[-1], extra)
                for fam, value in (
                    (cpu, seen.cpu_seconds),
                    (rss, float(seen.rss_bytes)),
                    (start, seen.start_time),
                ):
                    sample_name = fam.name + ("_total" if fam.type == "counter" else "")
                    keyed = dict(zip(SERIES_LABELS, labels, strict=True))
                    fam.samples.append(Sample(sample_name, {**keyed, **dict(extra)}, value))
                continue
            cpu.add_metric(labels, seen.cpu_seconds)
            rss.add_metric(labels, float(seen.rss_bytes))
            start.add_metric(labels, seen.start_time)
        return [info, cpu, rss, start]

    def _identity(self, seen: WorkerProcess) -> tuple[str, str, str, Mapping[str, str]]:
        """engine, model and version labels: the engine's own report first, then config,
        then the command line, so the labels join with the engine source's series; and
        the engine's facts."""
        try:
            facts = self._engine_facts(seen.worker) or {}
        except Exception:  # a callback must not break the exposition
            facts = {}
        spec = self._specs.get(seen.worker)
        launch = seen.launch
        configured = spec.engine if spec is not None and spec.engine != "auto" else None
        engine = facts.get("engine") or configured or (launch.engine if launch else None)
        model = facts.get("model") or (launch.label_model if launch else None)
        return engine or "", model or "", facts.get("version") or "", facts

    def pid_workers(self) -> Mapping[int, str]:
        """Every pid of every watched worker's tree -> the worker's name."""
        return self._pid_workers

    def gpu_environments(self) -> Mapping[str, Mapping[str, str] | None]:
        """Each found worker's root GPU variables (None where unreadable); the same
        object until one changes."""
        return self._gpu_envs

    def launch_info(self, worker: str) -> LaunchInfo | None:
        """The worker's launch flags, or None when its process is not found or unknown."""
        seen = self._snapshot.get(worker)
        return seen.launch if seen is not None else None

    def start_time(self, worker: str) -> float | None:
        seen = self._snapshot.get(worker)
        return seen.start_time if seen is not None else None

    def worker_process(self, worker: str) -> WorkerProcess | None:
        """The whole last observation of one worker (pid, tree, totals)."""
        return self._snapshot.get(worker)


def _with_labels(sample: Sample, extra: tuple[tuple[str, str], ...]) -> Sample:
    return Sample(sample.name, {**sample.labels, **dict(extra)}, sample.value)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return list(proc.cmdline())
    except (psutil.Error, OSError):
        return []


def _text(value: int | float | None) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def _resolve_local(host: str) -> bool:
    if host in ("", "localhost") or host.endswith(".localhost"):
        return True
    local = _local_addresses()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return address.is_loopback or address.is_unspecified or str(address) in local
    if host.lower() == socket.gethostname().lower():
        return True
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    for info in infos:
        resolved = str(info[4][0]).split("%", 1)[0]
        try:
            address = ipaddress.ip_address(resolved)
        except ValueError:
            continue
        if address.is_loopback or resolved in local:
            return True
    return False
