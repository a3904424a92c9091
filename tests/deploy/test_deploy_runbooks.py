"""Runbook links that work as installed: every alert's ``runbook_url`` opens a page.

The deploy material serves the generated runbooks/ with nginx (deploy/runbooks/
nginx.conf): Compose's ``runbooks`` service on 127.0.0.1:8088 and Kubernetes'
inferwatch-runbooks Deployment and Service (deploy/kubernetes/runbooks/), and the
default ``pack.runbook_base_url`` is that server's address, http://localhost:8088/.
Here the same nginx site runs on a loopback port with this checkout's runbooks/ and
every link of the committed rules is fetched; the Kubernetes objects are rendered
with ``kubectl kustomize``.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.support.proc import REPO, free_port, wait_until

from inferwatch.pack.thresholds import load_thresholds

BASE = load_thresholds().pack.runbook_base_url
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
KUBECTL = shutil.which("kubectl")


def runbook_urls(rule_groups: list[dict]) -> dict[str, str]:
    """{alert: runbook_url} of every alerting rule."""
    return {
        r["alert"]: r["annotations"]["runbook_url"]
        for g in rule_groups
        for r in g["rules"]
        if "alert" in r
    }


def committed_urls() -> dict[str, str]:
    doc = yaml.safe_load((REPO / "alerts" / "inferwatch-alerts.yaml").read_text())
    urls = runbook_urls(doc["groups"])
    assert len(urls) >= 20
    return urls


def test_the_default_base_is_the_served_address() -> None:
    assert BASE == "http://localhost:8088/"
    for alert, url in committed_urls().items():
        assert url == f"{BASE}{alert}.md"
    compose = yaml.safe_load((REPO / "deploy" / "compose" / "monitoring.yml").read_text())
    service = compose["services"]["runbooks"]
    assert service["ports"] == ["127.0.0.1:8088:8088"]
    mounts = {m.split(":")[1]: m for m in service["volumes"]}
    assert mounts["/srv/runbooks"] == "../../runbooks:/srv/runbooks:ro"
    assert mounts["/etc/nginx/conf.d/default.conf"].startswith("../runbooks/nginx.conf:")


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[str]:
    """The shipped nginx site on a loopback port, serving this checkout's runbooks/."""
    if NGINX is None:
        pytest.skip("nginx not installed")
    port = free_port()
    site = (REPO / "deploy" / "runbooks" / "nginx.conf").read_text()
    site = site.replace("listen 8088;", f"listen 127.0.0.1:{port};")
    site = site.replace("root /srv/runbooks;", f"root {REPO / 'runbooks'};")
    (tmp_path / "site.conf").write_text(site)
    main = f"""
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/error.log;
daemon off;
events {{}}
http {{
    access_log off;
    client_body_temp_path {tmp_path}/body;
    proxy_temp_path {tmp_path}/proxy;
    fastcgi_temp_path {tmp_path}/fastcgi;
    uwsgi_temp_path {tmp_path}/uwsgi;
    scgi_temp_path {tmp_path}/scgi;
    include {tmp_path}/site.conf;
}}
"""
    (tmp_path / "nginx.conf").write_text(main)
    proc = subprocess.Popen(
        [NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(
                f"nginx exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return True
        except OSError:
            return False

    try:
        wait_until(up, timeout=15, message="nginx")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_every_runbook_url_of_the_committed_rules_opens_its_page(nginx: str) -> None:
    for alert, url in committed_urls().items():
        path = urllib.parse.urlsplit(url).path
        with urllib.request.urlopen(nginx.rstrip("/") + path, timeout=5) as resp:
            assert resp.status == 200, url
            # shown in the browser as UTF-8 text, not offered as a download
            assert resp.headers["Content-Type"] == "text/plain; charset=utf-8", url
            body = resp.read()
        assert body == (REPO / "runbooks" / f"{alert}.md").read_bytes()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(nginx + "NoSuchAlert.md", timeout=5)
    assert missing.value.code == 404


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) not installed")
def test_kubernetes_serves_a_page_for_every_runbook_url_of_its_rules() -> None:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(REPO / "deploy" / "kubernetes")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    pages = by[("ConfigMap", "inferwatch-runbooks")]["data"]
    site = by[("ConfigMap", "inferwatch-runbooks-nginx")]["data"]["default.conf"]
    assert site == (REPO / "deploy" / "runbooks" / "nginx.conf").read_text()
    urls = runbook_urls(rule["spec"]["groups"])
    for alert, url in urls.items():
        name = urllib.parse.urlsplit(url).path.lstrip("/")
        assert url.startswith(BASE) and name == f"{alert}.md"
        assert pages[name] == (REPO / "runbooks" / name).read_text(), name
    # nginx serves the ConfigMap at the site's root, on the Service's port
    deploy = by[("Deployment", "inferwatch-runbooks")]
    pod = deploy["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v.get("configMap", {}).get("name") for v in pod["volumes"]}
    assert volumes["runbooks"] == "inferwatch-runbooks" and mounts["runbooks"] == "/srv/runbooks"
    assert "root /srv/runbooks;" in site and "listen 8088;" in site
    assert volumes["site"] == "inferwatch-runbooks-nginx" and mounts["site"] == "/etc/nginx/conf.d"
    service = by[("Service", "inferwatch-runbooks")]
    assert service["metadata"]["namespace"] == "monitoring"
    assert [p["port"] for p in service["spec"]["ports"]] == [urllib.parse.urlsplit(BASE).port]
