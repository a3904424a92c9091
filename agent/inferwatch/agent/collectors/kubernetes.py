"""Kubernetes discovery: the inference pods of this node, their GPUs and processes.

The agent runs as a DaemonSet. It lists and then watches the pods of its own
node through the API server (``GET /api/v1/pods`` with the field selector
``spec.nodeName=<node>``), following the API's documented protocol (Kubernetes
docs, "API Concepts", sections "Efficient detection of changes", "Watch
bookmarks" and "Resource versions"):

- a list returns a ``PodList`` whose ``metadata.resourceVersion`` is where the
  watch starts (``watch=1&resourceVersion=<rv>&allowWatchBookmarks=true``);
- a watch streams one JSON object per line, ``{"type": "ADDED" | "MODIFIED" |
  "DELETED" | "BOOKMARK" | "ERROR", "object": ...}``; a bookmark only moves the
  resource version on; the server ends a watch after ``timeoutSeconds`` and the
  client resumes from the last version it saw;
- a version too old to resume from is answered ``410 Gone``, either as the HTTP
  status or as an ``ERROR`` event carrying a ``Status`` with code 410: the
  client lists again;
- any other failure is retried with an exponential back-off (1 s to 60 s).

Authentication in a pod (docs "Accessing the Kubernetes API from a Pod"): the
service-account token from its projected file (read for every request, as the
kubelet rotates it) and the cluster CA, the server at
``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``. The token is sent in the
Authorization header only and never logged.

Every ``kubernetes.interval`` the source turns the pods into workers
(:mod:`inferwatch.agent.collectors.podworkers`), asks the kubelet for the GPU
allocations (:mod:`inferwatch.agent.collectors.podresources`) and maps host PIDs to
pods through their cgroups (:mod:`inferwatch.agent.collectors.cgroups`), then hands
the workers to the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import random
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from prometheus_client.metrics_core import Metric

from inferwatch.agent.collectors import cgroups
from inferwatch.agent.collectors.base import ReasonError, Source, gauge_family
from inferwatch.agent.collectors.podresources import ContainerKey
from inferwatch.agent.collectors.podworkers import PodWorker, Skipped, pod_workers
from inferwatch.agent.config import KubernetesConfig
from inferwatch.agent.httpio import Client, HttpError, Response, StreamedResponse
from inferwatch.engines import contract
from inferwatch.errors import ConfigError

log = logging.getLogger(__name__)

BACKOFF_MIN = 1.0
BACKOFF_MAX = 60.0
LIST_PAGE = 500
#: the largest page of a pod list read (500 pods of ~20 kB each, with room)
LIST_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class ApiSettings:
    url: str
    node: str
    token_file: str | None
    ca_file: str | None


def api_settings(cfg: KubernetesConfig, environ: Mapping[str, str], source: str) -> ApiSettings:
    """Where the API is and which node this is; a ConfigError when either is unknown."""
    url = cfg.api_url
    if url is None:
        host = environ.get("KUBERNETES_SERVICE_HOST", "")
        port = environ.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port.isdigit():
            raise ConfigError(
                source,
                "kubernetes.api_url",
                "the API server's URL, or KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                "(set in every pod)",
            )
        url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    node = cfg.node_name or environ.get("NODE_NAME", "")
    if not node:
        raise ConfigError(
            source,
            "kubernetes.node_name",
            "this node's name, or NODE_NAME from the downward API (fieldRef spec.nodeName)",
        )
    if cfg.pod_resources_socket and importlib.util.find_spec("grpc") is None:
        raise ConfigError(
            source,
            "kubernetes.pod_resources_socket",
            "the kubernetes extra installed (pip install 'inferwatch[kubernetes]'), or null "
            "to leave the kubelet's GPU allocations out",
        )
    for key, path in (("token_file", cfg.token_file), ("ca_file", cfg.ca_file)):
        if path is not None and not os.access(path, os.R_OK):
            raise ConfigError(source, f"kubernetes.{key}", "a readable file", path)
    return ApiSettings(url.rstrip("/"), node, cfg.token_file, cfg.ca_file)


class Gone(Exception):
    """410: the resource version is too old; list again."""


class ApiError(ReasonError):
    """The Kubernetes API could not be asked or answered an error."""


class PodWatcher:
    """The pods of one node, kept current by list + watch (see the module docstring).

    ``pods`` maps pod UID -> the pod object as last seen; ``version`` counts changes.
    """

    def __init__(
        self,
        settings: ApiSettings,
        *,
        watch_timeout: float = 300.0,
        on_error: Callable[[str, str], None] = lambda reason, message: None,
        on_ok: Callable[[], None] = lambda: None,
        page_size: int = LIST_PAGE,
    ) -> None:
        self.settings = settings
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.on_error = on_error
        self.on_ok = on_ok
        self.pods: dict[str, Mapping[str, Any]] = {}
        self.version = 0
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.lists = 0
        self._session: Client | None = None

    # -- HTTP ---------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.settings.token_file:
            try:
                with open(self.settings.token_file, encoding="utf-8") as fh:
                    token = fh.read().strip()
            except OSError as exc:
                raise ApiError("auth", f"reading the token file: {exc.strerror}") from None
            if token:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    def _session_for(self) -> Client:
        if self._session is None:
            ssl_ctx: ssl.SSLContext | None = None
            if self.settings.url.startswith("https://") and self.settings.ca_file:
                ssl_ctx = ssl.create_default_context(cafile=self.settings.ca_file)
            self._session = Client(ssl_context=ssl_ctx, limit=4, idle_per_host=1)
        return self._session

    def _url(self, **params: str) -> str:
        query = {"fieldSelector": f"spec.nodeName={self.settings.node}", **params}
        text = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
        return f"{self.settings.url}/api/v1/pods?{text}"

    @staticmethod
    def _check(resp: Response | StreamedResponse) -> None:
        if resp.status == 410:
            raise Gone()
        if resp.status in (401, 403):
            raise ApiError(
                "auth",
                f"the API answered {resp.status}: the service account needs get, list and "
                "watch on pods (the DaemonSet overlay's ClusterRole)",
            )
        if resp.status != 200:
            raise ApiError("http_status", f"the API answered HTTP {resp.status}")

    # -- list and watch -------------------------------------------------------

    async def list_pods(self) -> None:
        """Every pod of the node, in pages; replaces what was known."""
        session = self._session_for()
        pods: dict[str, Mapping[str, Any]] = {}
        token = ""
        version = ""
        while True:
            params = {"limit": str(self.page_size)}
            if token:
                params["continue"] = token
            resp = await session.get(
                self._url(**params), headers=self._headers(), timeout=60, max_body=LIST_MAX_BYTES
            )
            self._check(resp)
            try:
                body = json.loads(resp.body)
            except ValueError:
                raise ApiError("parse", "the API's answer to a pod list is not JSON") from None
            if not isinstance(body, dict) or body.get("kind") != "PodList":
                raise ApiError("parse", "the API's answer to a pod list is not a PodList")
            for item in body.get("items") or []:
                uid = (item.get("metadata") or {}).get("uid")
                if uid:
                    pods[uid] = item
            meta = body.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            token = str(meta.get("continue") or "")
            if not token:
                break
        self.pods = pods
        self.resource_version = version
        self.version += 1
        self.lists += 1
        self.synced.set()

    def apply(self, event: Mapping[str, Any]) -> None:
        """One watch event."""
        kind = event.get("type")
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise ApiError("watch", f"watch error: {obj.get('reason')}: {obj.get('message')}")
        rv = meta.get("resourceVersion")
        if rv:
            self.resource_version = str(rv)
        if kind == "BOOKMARK":
            return
        uid = meta.get("uid")
        if not uid:
            return
        if kind in ("ADDED", "MODIFIED"):
            self.pods[uid] = obj
            self.version += 1
        elif kind == "DELETED" and self.pods.pop(uid, None) is not None:
            self.version += 1

    async def watch_once(self) -> None:
        """One watch from the current resource version, until the server ends it."""
        session = self._session_for()
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(int(self.watch_timeout)),
        }
        if self.resource_version:
            params["resourceVersion"] = self.resource_version
        async with session.stream(
            "GET",
            self._url(**params),
            headers=self._headers(),
            timeout=self.watch_timeout + 30,
            connect_timeout=10,
        ) as resp:
            self._check(resp)
            self.on_ok()
            async for line in resp.lines():
                if line.strip():
                    self._event(line)

    def _event(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            raise ApiError("parse", "a watch event is not JSON") from None
        if not isinstance(event, dict):
            raise ApiError("parse", "a watch event is not a JSON object")
        self.apply(event)

    async def run(self) -> None:
        """List, then watch, forever: re-list on 410, back off on errors."""
        backoff = BACKOFF_MIN
        need_list = True
        just_listed = False
        while True:
            try:
                if need_list:
                    await self.list_pods()
                    need_list, just_listed = False, True
                    self.on_ok()
                await self.watch_once()
                backoff, just_listed = BACKOFF_MIN, False
                continue
            except asyncio.CancelledError:
                raise
            except Gone:
                need_list = True
                if not just_listed:
                    log.info(
                        "kubernetes: resource version %s expired; listing again",
                        self.resource_version,
                    )
                    continue
                # 410 from the version a list has just returned: wait before the next list
                self.on_error("gone", "the API answered 410 Gone to a version it had just listed")
            except ApiError as exc:
                self.on_error(exc.reason, str(exc))
            except (HttpError, asyncio.TimeoutError, OSError) as exc:
                self.on_error(
                    "connect", f"the API at {self.settings.url}: {type(exc).__name__}: {exc}"
                )
            except Exception as exc:  # a bug here must not end discovery
                log.exception("kubernetes: watch failed")
                self.on_error("internal", f"watch failed: {exc!r}")
            await asyncio.sleep(backoff * (0.8 + 0.4 * random.random()))
            backoff = min(BACKOFF_MAX, backoff * 2)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass(frozen=True)
class Discovered:
    """What the last pass found: workers, their GPU allocations and PIDs."""

    workers: tuple[PodWorker, ...] = ()
    #: worker -> GPU device IDs from the kubelet (pod-resources); absent: none known
    allocations: Mapping[str, tuple[str, ...]] | None = None
    #: host PID -> worker, from cgroups
    pid_workers: Mapping[int, str] | None = None


class KubernetesSource(Source):
    """Discovery of this node's inference pods; hands its workers to ``on_workers``."""

    name = "kubernetes"

    def __init__(
        self,
        cfg: KubernetesConfig,
        settings: ApiSettings,
        *,
        on_workers: Callable[[Sequence[PodWorker]], None],
        pod_resources: Any | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.interval = cfg.interval
        self.settings = settings
        self.on_workers = on_workers
        self.watcher = PodWatcher(
            settings,
            watch_timeout=cfg.watch_timeout,
            on_error=lambda reason, message: self.health.error(reason, message, key="api"),
            on_ok=lambda: self.health.ok(key="api"),
        )
        self._pod_resources = pod_resources
        self._task: asyncio.Task[None] | None = None
        self._skipped: set[Skipped] = set()
        self.discovered = Discovered()
        self._roots: dict[tuple[str, str], int] = {}
        self._scanner: cgroups.Scanner | None = None

    async def start(self) -> None:
        if self._pod_resources is None and self.cfg.pod_resources_socket:
            from inferwatch.agent.collectors.podresources import PodResourcesClient

            self._pod_resources = PodResourcesClient(self.cfg.pod_resources_socket)
        self._task = asyncio.create_task(self.watcher.run(), name="kubernetes-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.watcher.close()
        if self._pod_resources is not None:
            with contextlib.suppress(Exception):
                self._pod_resources.close()

    def workers_of(self, pods: Iterable[Mapping[str, Any]]) -> list[PodWorker]:
        out: list[PodWorker] = []
        for pod in pods:
            found, skipped = pod_workers(
                pod, auto_detect=self.cfg.auto_detect, pod_labels=self.cfg.pod_labels
            )
            if skipped is not None and skipped not in self._skipped and len(self._skipped) < 1000:
                self._skipped.add(skipped)
                log.warning(
                    "kubernetes: pod %s/%s not scraped: %s",
                    skipped.namespace,
                    skipped.pod,
                    skipped.reason,
                )
            out.extend(found)
        return sorted(out, key=lambda w: w.spec.name)

    async def refresh(self) -> None:
        started = time.perf_counter()
        if not self.watcher.synced.is_set():
            # nothing known yet: wait a little for the first list, so that the agent's
            # first pass has the workers
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.watcher.synced.wait(), timeout=min(5.0, self.interval))
        workers = self.workers_of(list(self.watcher.pods.values()))
        allocations = await self._allocations(workers)
        pid_map = await self._pids(workers)
        workers = [self._with_root(w) for w in workers]
        self.discovered = Discovered(tuple(workers), allocations, pid_map)
        try:
            self.on_workers(workers)
        except Exception:  # the agent's side must not stop discovery
            log.exception("kubernetes: applying the discovered workers failed")
            self.health.error("internal", "applying the discovered workers failed")
        if self.watcher.synced.is_set():
            self.health.finished_pass(started)

    async def _allocations(
        self, workers: Sequence[PodWorker]
    ) -> Mapping[str, tuple[str, ...]] | None:
        client = self._pod_resources
        if client is None:
            return None
        try:
            got = await client.list()
        except Exception as exc:
            self.health.error("pod_resources", str(exc), key="pod-resources")
            return None
        self.health.ok(key="pod-resources")
        out: dict[str, tuple[str, ...]] = {}
        for w in workers:
            ids = got.get(ContainerKey(w.namespace, w.pod, w.container))
            if ids:
                out[w.spec.name] = ids
        return out

    async def _pids(self, workers: Sequence[PodWorker]) -> Mapping[int, str] | None:
        root = self.cfg.proc_root
        if root is None:
            return None
        if self._scanner is None:
            self._scanner = cgroups.Scanner(root)
        try:
            pods = await asyncio.to_thread(self._scanner.scan)
        except Exception as exc:
            self.health.error("cgroups", f"reading {root}: {exc!r}", key="cgroups")
            return None
        by_container = {(w.pod_uid, w.container_id): w.spec.name for w in workers if w.container_id}
        per_pod: dict[str, list[str]] = {}
        for w in workers:
            per_pod.setdefault(w.pod_uid, []).append(w.spec.name)
        pod_only = {uid: names[0] for uid, names in per_pod.items() if len(names) == 1}
        pid_map = cgroups.pid_workers(pods, by_container, pod_only)
        self._roots = await asyncio.to_thread(
            cgroups.container_roots, pods, root, by_container, self._roots
        )
        return pid_map

    def _with_root(self, worker: PodWorker) -> PodWorker:
        """The container's first process as the worker's pid, for the process source."""
        if worker.container_id is None:
            return worker
        pid = self._roots.get((worker.pod_uid, worker.container_id))
        if pid is None or worker.spec.pid == pid:
            return worker
        from dataclasses import replace

        return replace(worker, spec=replace(worker.spec, pid=pid))

    def families(self) -> Iterable[Metric]:
        fam = gauge_family(contract.KUBERNETES_WORKERS, ["node"])
        fam.add_metric([self.settings.node], float(len(self.discovered.workers)))
        return [fam]
