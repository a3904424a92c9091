"""A stand-in for the Kubernetes API server's pod list and watch, on loopback.

It speaks the protocol the API documents (https://kubernetes.io/docs/reference/
using-api/api-concepts/, "Efficient detection of changes", "Watch bookmarks",
"Retrieving large results sets in chunks", "Resource versions"), which the
agent's client is held to:

- ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`` returns a ``PodList``
  (``kind``, ``apiVersion``, ``metadata.resourceVersion``, ``items``), in pages
  of ``limit`` with a ``metadata.continue`` token;
- with ``watch=1`` it streams newline-delimited ``{"type", "object"}`` events
  (``ADDED``, ``MODIFIED``, ``DELETED``; ``BOOKMARK`` objects carry only
  ``metadata.resourceVersion``, and only when ``allowWatchBookmarks=true``),
  starting after ``resourceVersion``, and ends after ``timeoutSeconds``;
- a watch from a version older than the retained history gets an ``ERROR``
  event whose object is a ``Status`` with ``code: 410`` (the API server sends
  it in the stream, with HTTP 200: kubernetes/kubernetes#25151), and an expired
  ``continue`` token gets HTTP 410;
- a request without the expected bearer token gets a 401 ``Status``.

Resource versions are opaque strings to clients; here they count up.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def make_pod(
    name: str,
    *,
    uid: str,
    node: str = "gpu-node-1",
    namespace: str = "inference",
    ip: str = "127.0.0.1",
    containers: Sequence[Mapping[str, Any]] = (),
    container_ids: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    """A v1.Pod as the API returns it, with the fields discovery reads."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {"nodeName": node, "containers": [dict(c) for c in containers]},
        "status": {
            "phase": phase,
            "podIP": ip if phase == "Running" else "",
            "containerStatuses": [
                {
                    "name": c["name"],
                    "containerID": f"containerd://{(container_ids or {})[c['name']]}",
                }
                for c in containers
                if c["name"] in (container_ids or {})
            ],
        },
    }


class KubeApi:
    """The stand-in server, in a thread of its own; change its pods from the test."""

    def __init__(
        self,
        token: str = "test-token-0123456789",
        *,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        self.token = token
        self.pods: dict[str, dict[str, Any]] = {}
        self.rv = 100
        #: (resource version, type, object) of every change, oldest first
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        #: history before this version is gone (a watch from older gets 410)
        self.oldest = 0
        #: (path with query, Authorization header) of every request
        self.requests: list[tuple[str, str | None]] = []
        self.watch_count = 0
        self.list_count = 0
        self._watchers: list[tuple[asyncio.Queue[dict[str, Any] | None], str, bool]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._tls = tls
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the Kubernetes API stand-in did not start")
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"

    # -- server ---------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._pods)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        ctx = None
        if self._tls:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(str(self._tls[0]), str(self._tls[1]))
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ctx)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        def shutdown() -> None:
            for queue, _, _ in list(self._watchers):
                queue.put_nowait(None)

        self._loop.call_soon_threadsafe(shutdown)
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        fut.result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def _call(self, fn: Any, *args: Any) -> Any:
        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    # -- the test's side -------------------------------------------------------

    def _change(self, kind: str, pod: dict[str, Any], notify: bool = True) -> None:
        self.rv += 1
        obj = copy.deepcopy(pod)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        uid = obj["metadata"]["uid"]
        if kind == "DELETED":
            self.pods.pop(uid, None)
        else:
            self.pods[uid] = obj
        self.history.append((self.rv, kind, obj))
        for queue, node, _ in self._watchers if notify else ():
            if obj["spec"].get("nodeName") == node:
                queue.put_nowait({"type": kind, "object": obj})

    def add(self, pod: dict[str, Any]) -> None:
        self._call(self._change, "ADDED", pod)

    def modify(self, pod: dict[str, Any]) -> None:
        self._call(self._change, "MODIFIED", pod)

    def delete(self, uid: str, *, notify: bool = True) -> None:
        """Delete a pod; ``notify=False``: open watches miss it (it happened while
        the client was away), though it stays in the history until compact()."""

        def run() -> None:
            pod = self.pods.get(uid)
            if pod is not None:
                self._change("DELETED", pod, notify)

        self._call(run)

    def bookmark(self) -> None:
        """A BOOKMARK to every open watch that asked for them."""

        def run() -> None:
            self.rv += 1  # a bookmark may name a version no object has
            for queue, _, bookmarks in self._watchers:
                if bookmarks:
                    queue.put_nowait(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": "Pod",
                                "apiVersion": "v1",
                                "metadata": {"resourceVersion": str(self.rv)},
                            },
                        }
                    )

        self._call(run)

    def compact(self) -> None:
        """Forget the history (etcd compaction): a watch from a version before the
        current one is now 410 Gone; the current version stays valid."""

        def run() -> None:
            self.oldest = self.rv
            self.history.clear()

        self._call(run)

    def end_watches(self) -> None:
        """End every open watch, as the server does at timeoutSeconds."""

        def run() -> None:
            for queue, _, _ in list(self._watchers):
                queue.put_nowait(None)

        self._call(run)

    def open_watches(self) -> int:
        return int(self._call(lambda: len(self._watchers)))

    # -- handler -----------------------------------------------------------------

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization")
        self.requests.append((request.path_qs, auth))
        if auth != f"Bearer {self.token}":
            return web.json_response(status(401, "Unauthorized", "Unauthorized"), status=401)
        selector = request.query.get("fieldSelector", "")
        if not selector.startswith("spec.nodeName="):
            # the agent always selects its node; anything else is a bug worth seeing
            return web.json_response(
                status(400, "BadRequest", f"unexpected fieldSelector {selector!r}"), status=400
            )
        node = selector.partition("=")[2]
        if request.query.get("watch") in ("1", "true"):
            return await self._watch(request, node)
        return self._list(request, node)

    def _list(self, request: web.Request, node: str) -> web.Response:
        self.list_count += 1
        items = sorted(
            (p for p in self.pods.values() if p["spec"].get("nodeName") == node),
            key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]),
        )
        limit = int(request.query.get("limit", "0") or 0)
        start, version = 0, self.rv
        token = request.query.get("continue")
        if token:
            start, version = (int(x) for x in base64.b64decode(token).decode().split(":"))
            if version < self.oldest:
                return web.json_response(
                    status(410, "Expired", "The provided continue parameter is too old"),
                    status=410,
                )
        page = items[start : start + limit] if limit else items[start:]
        meta: dict[str, Any] = {"resourceVersion": str(version)}
        if limit and start + limit < len(items):
            meta["continue"] = base64.b64encode(f"{start + limit}:{version}".encode()).decode()
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": []}
        for pod in page:
            item = copy.deepcopy(pod)
            item.pop("kind", None)  # list items carry no kind or apiVersion
            item.pop("apiVersion", None)
            body["items"].append(item)
        return web.json_response(body)

    async def _watch(self, request: web.Request, node: str) -> web.StreamResponse:
        self.watch_count += 1
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        since = int(request.query.get("resourceVersion", "0") or 0)
        timeout = float(request.query.get("timeoutSeconds", "1800"))
        bookmarks = request.query.get("allowWatchBookmarks") == "true"

        async def send(event: Mapping[str, Any]) -> None:
            await resp.write(json.dumps(event).encode() + b"\n")

        if since and since < self.oldest:
            message = f"too old resource version: {since} ({self.oldest})"
            await send({"type": "ERROR", "object": status(410, "Expired", message)})
            await resp.write_eof()
            return resp
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        entry = (queue, node, bookmarks)
        self._watchers.append(entry)
        try:
            for rv, kind, obj in self.history:
                if rv > since and obj["spec"].get("nodeName") == node:
                    await send({"type": kind, "object": obj})
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=left)
                except asyncio.TimeoutError:
                    break
                if event is None:
                    break
                await send(event)
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.remove(entry)
        return resp
