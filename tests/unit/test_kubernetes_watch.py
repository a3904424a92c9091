"""The pod watcher against a Kubernetes API stand-in that speaks list/watch JSON.

tests/support/kubeapi.py is held to the API's documented protocol (its
docstring cites the pages): PodList pages, watch events, bookmarks, 410 Gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.aioapp import until
from tests.support.kubeapi import KubeApi, make_pod
from tests.support.tls import self_signed_cert

from inferwatch.agent.collectors.kubernetes import ApiSettings, PodWatcher

NODE = "gpu-node-1"
VLLM = {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0", "ports": [{"containerPort": 8000}]}


def pod(name: str, node: str = NODE) -> dict:
    return make_pod(name, uid=f"uid-{name}", node=node, containers=[VLLM])


@pytest.fixture
def api() -> KubeApi:  # type: ignore[misc]
    server = KubeApi()
    yield server
    server.stop()


def token_file(tmp_path: Path, api: KubeApi) -> str:
    path = tmp_path / "token"
    path.write_text(api.token + "\n")
    return str(path)


@contextlib.asynccontextmanager
async def watching(watcher: PodWatcher) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(watcher.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await watcher.close()


def names(watcher: PodWatcher) -> list[str]:
    return sorted(p["metadata"]["name"] for p in watcher.pods.values())


async def test_list_then_watch_follows_adds_changes_and_deletes(
    tmp_path: Path, api: KubeApi
) -> None:
    api.add(pod("a"))
    api.add(pod("a2"))
    api.add(pod("elsewhere", node="gpu-node-2"))
    watcher = PodWatcher(ApiSettings(api.url, NODE, token_file(tmp_path, api), None), page_size=1)
    async with watching(watcher):
        await until(lambda: watcher.synced.is_set() and api.open_watches() == 1)
        assert names(watcher) == ["a", "a2"]
        api.add(pod("b"))
        await until(lambda: names(watcher) == ["a", "a2", "b"])
        changed = pod("b")
        changed["status"]["phase"] = "Failed"
        api.modify(changed)
        await until(lambda: watcher.pods["uid-b"]["status"]["phase"] == "Failed")
        api.delete("uid-a")
        await until(lambda: names(watcher) == ["a2", "b"])
        api.add(pod("c", node="gpu-node-2"))  # another node's pod never arrives
        api.bookmark()
        rv = str(api.rv)
        await until(lambda: watcher.resource_version == rv)
        assert names(watcher) == ["a2", "b"]
    # every request selected this node; the pages were followed
    assert all("fieldSelector=spec.nodeName%3Dgpu-node-1" in path for path, _ in api.requests)
    assert any("continue=" in path for path, _ in api.requests)
    assert any("allowWatchBookmarks=true" in path for path, _ in api.requests)


async def test_a_watch_that_ends_resumes_from_its_version(tmp_path: Path, api: KubeApi) -> None:
    api.add(pod("a"))
    watcher = PodWatcher(ApiSettings(api.url, NODE, token_file(tmp_path, api), None))
    async with watching(watcher):
        await until(lambda: api.open_watches() == 1)
        api.end_watches()
        await until(lambda: api.watch_count == 2 and api.open_watches() == 1)
        api.add(pod("b"))
        await until(lambda: names(watcher) == ["a", "b"])
    assert api.list_count == 1, "a watch that ended normally is resumed, not re-listed"


async def test_410_gone_lists_again_and_forgets_deleted_pods(tmp_path: Path, api: KubeApi) -> None:
    api.add(pod("a"))
    api.add(pod("b"))
    watcher = PodWatcher(ApiSettings(api.url, NODE, token_file(tmp_path, api), None))
    async with watching(watcher):
        await until(lambda: api.open_watches() == 1)
        # b goes while the client is away and the history is compacted: resuming from
        # the old version is 410 Gone (an ERROR event), and only a new list shows b gone
        api.delete("uid-b", notify=False)
        api.compact()
        api.end_watches()
        await until(lambda: api.list_count == 2 and names(watcher) == ["a"])
        api.add(pod("c"))
        await until(lambda: names(watcher) == ["a", "c"])


async def test_a_wrong_token_is_an_auth_error_and_never_logged(
    tmp_path: Path, api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = tmp_path / "token"
    wrong.write_text("not-the-token-7f3e9a")
    errors: list[tuple[str, str]] = []
    watcher = PodWatcher(
        ApiSettings(api.url, NODE, str(wrong), None), on_error=lambda r, m: errors.append((r, m))
    )
    with caplog.at_level(logging.DEBUG):
        async with watching(watcher):
            await until(lambda: bool(errors))
            assert errors[0][0] == "auth" and "401" in errors[0][1]
            # the token file is read on every request: a rotated token is picked up
            wrong.write_text(api.token)
            await until(lambda: watcher.synced.is_set(), timeout=30)
    assert "not-the-token-7f3e9a" not in caplog.text and api.token not in caplog.text
    assert all("not-the-token" not in m for _, m in errors)


async def test_an_unreachable_api_backs_off(tmp_path: Path) -> None:
    errors: list[str] = []
    watcher = PodWatcher(
        ApiSettings("http://127.0.0.1:9", NODE, None, None), on_error=lambda r, m: errors.append(r)
    )
    async with watching(watcher):
        await until(lambda: len(errors) >= 2, timeout=30)
    assert set(errors) == {"connect"}
    assert len(errors) < 10, "retries back off, they do not spin"


async def test_tls_with_the_cluster_ca(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    api = KubeApi(tls=(cert, key))
    try:
        api.add(pod("a"))
        watcher = PodWatcher(ApiSettings(api.url, NODE, token_file(tmp_path, api), str(cert)))
        async with watching(watcher):
            await until(lambda: names(watcher) == ["a"])
        # without the CA the certificate is refused
        errors: list[str] = []
        other = PodWatcher(
            ApiSettings(api.url, NODE, token_file(tmp_path, api), None),
            on_error=lambda r, m: errors.append(m),
        )
        async with watching(other):
            await until(lambda: bool(errors))
        assert not other.synced.is_set()
    finally:
        api.stop()


async def test_static_workers_keep_working_beside_discovery(tmp_path: Path, api: KubeApi) -> None:
    """The real agent (in process): a configured worker and the discovered ones are all
    watched; a configured name wins over a discovered worker of the same name."""
    from inferwatch.agent.config import load_config
    from inferwatch.agent.wiring import Agent

    api.add(pod("a"))
    api.add(pod("b"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"""
gpu: {{backend: none}}
workers:
  - {{name: static-0, url: "http://127.0.0.1:9"}}
  - {{name: inference/b/vllm, url: "http://127.0.0.1:10", engine: tgi}}
kubernetes:
  api_url: {api.url}
  node_name: {NODE}
  token_file: {token_file(tmp_path, api)}
  ca_file: null
  pod_resources_socket: null
  proc_root: null
  interval: 0.2s
"""
    )
    agent = Agent(load_config(str(cfg), env={}))
    await agent.start()
    try:
        await until(lambda: {w.name for w in agent.workers} >= {"inference/a/vllm"})
        names = [w.name for w in agent.workers]
        assert names == ["static-0", "inference/b/vllm", "inference/a/vllm"]
        assert {w.name: w.engine for w in agent.workers}["inference/b/vllm"] == "tgi"
        assert agent.engine is not None and set(agent.engine.workers) == set(names)
        api.delete("uid-a")
        await until(lambda: [w.name for w in agent.workers] == ["static-0", "inference/b/vllm"])
        assert agent.engine is not None and "inference/a/vllm" not in agent.engine.workers
    finally:
        await agent.stop()
