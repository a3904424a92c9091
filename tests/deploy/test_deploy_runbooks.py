"""Runbook links that work as installed: every alert's ``runbook_url`` opens its page,
rendered, on the alert's labels.

The deploy material serves the generated runbooks/ with nginx (deploy/runbooks/
nginx.conf): Compose's ``runbooks`` service on 127.0.0.1:8088 and Kubernetes'
inferwatch-runbooks Deployment and Service (deploy/kubernetes/runbooks/), and the
default ``pack.runbook_base_url`` is that server's address, http://localhost:8088/.
Here the same nginx site runs on a loopback port with this checkout's runbooks/ and
every link of the committed rules is fetched; promtool expands every ``runbook_url``
template as Prometheus does when the alert fires; headless Chromium opens pages through
the site (its Content-Security-Policy included) and reads what their script filled in;
the Kubernetes objects are rendered with ``kubectl kustomize``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.support.browser import Devtools
from tests.support.proc import REPO
from tests.support.runbook_site import NGINX, runbook_site

from inferwatch.pack import rules
from inferwatch.pack.generate import CONFIGMAP_MAX_BYTES
from inferwatch.pack.thresholds import load_thresholds

BASE = load_thresholds().pack.runbook_base_url
KUBECTL = shutil.which("kubectl")
PROMTOOL = shutil.which("promtool")

#: label values that need escaping everywhere they go: in a URL, a PromQL string, a shell word
LABELS = {
    "job": "inferwatch",
    "instance": "10.0.0.7:10127",
    "worker": 'llama "8b" & co/é',
    "gpu": "0",
    "model": "org/Llama 3 8B?x=1",
}
PROMETHEUS = "http://prom.example:9090/prometheus"


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


def page_labels() -> dict[str, tuple[str, ...]]:
    return {a.name: a.page_labels for a in rules.alerts(load_thresholds())}


def test_the_default_base_is_the_served_address() -> None:
    assert BASE == "http://localhost:8088/"
    for alert, url in committed_urls().items():
        assert url.startswith(f"{BASE}{alert}.html?"), url
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
    with runbook_site(tmp_path) as url:
        yield url


def expanded(alert: str) -> str:
    """What Prometheus makes of the alert's runbook_url, given LABELS and PROMETHEUS
    (Go's urlquery: spaces as +, everything else but letters, digits and -_.~ escaped)."""
    query = [(k, LABELS[k]) for k in page_labels()[alert]] + [("prometheus", PROMETHEUS)]
    return f"{BASE}{alert}.html?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote_plus)}"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
def test_every_runbook_url_template_expands_to_its_page_on_the_labels(tmp_path: Path) -> None:
    """promtool fires every alert on a series with LABELS and checks its runbook_url as
    Prometheus expands it; each expanded URL names a committed page."""
    assert PROMTOOL is not None
    urls = committed_urls()
    group = {
        "name": "runbook-urls",
        "rules": [
            {
                "alert": alert,
                "expr": "runbook_probe",
                "annotations": {"runbook_url": template},
            }
            for alert, template in urls.items()
        ],
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    series = "runbook_probe{" + ",".join(f"{k}={json.dumps(v)}" for k, v in LABELS.items()) + "}"
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "external_url": PROMETHEUS,
                "input_series": [{"series": series, "values": "1 1"}],
                "alert_rule_test": [
                    {
                        "eval_time": "1m",
                        "alertname": alert,
                        "exp_alerts": [
                            {
                                "exp_labels": LABELS,
                                "exp_annotations": {"runbook_url": expanded(alert)},
                            }
                        ],
                    }
                    for alert in urls
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, allow_unicode=True))
    done = subprocess.run(
        [PROMTOOL, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for alert in urls:
        path = urllib.parse.urlsplit(expanded(alert)).path
        assert (REPO / "runbooks" / path.lstrip("/")).is_file(), path
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(expanded(alert)).query)
        assert query["prometheus"] == [PROMETHEUS]
        assert {k: v for k, (v,) in query.items() if k != "prometheus"} == {
            k: LABELS[k] for k in page_labels()[alert]
        }


def test_every_runbook_url_of_the_committed_rules_opens_its_page(nginx: str) -> None:
    for alert, url in committed_urls().items():
        path = urllib.parse.urlsplit(url).path
        with urllib.request.urlopen(nginx.rstrip("/") + path, timeout=5) as resp:
            assert resp.status == 200, url
            assert resp.headers["Content-Type"] == "text/html; charset=utf-8", url
            csp = resp.headers["Content-Security-Policy"]
            body = resp.read()
        assert body == (REPO / "runbooks" / f"{alert}.html").read_bytes()
        assert "default-src 'none'" in csp and "script-src 'sha256-" in csp
        # the Markdown stays served: shown in the browser as UTF-8 text, not downloaded
        with urllib.request.urlopen(f"{nginx}{alert}.md", timeout=5) as resp:
            assert resp.headers["Content-Type"] == "text/plain; charset=utf-8", url
            assert resp.read() == (REPO / "runbooks" / f"{alert}.md").read_bytes()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(nginx + "NoSuchAlert.html", timeout=5)
    assert missing.value.code == 404


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Devtools]:
    browser = Devtools(tmp_path / "profile", size=(1280, 800))
    try:
        yield browser
    finally:
        browser.close()


def on_site(url: str, nginx: str) -> str:
    """The runbook URL with its base swapped for the test's nginx site."""
    return nginx + url.removeprefix(BASE)


def test_a_page_opens_on_the_firing_worker(nginx: str, chromium: Devtools) -> None:
    """The overload page, opened from its expanded runbook_url through the shipped site:
    queries, Grafana links, Prometheus links and the advise line carry the worker, the
    action is on the first screen, <details> opens."""
    alert = "InferenceQueueOverCapacity"
    chromium.open(on_site(expanded(alert), nginx))
    worker, instance = LABELS["worker"], LABELS["instance"]
    assert not chromium.console_errors()
    assert chromium.eval("document.getElementById('opened-on').textContent") == (
        f"Opened on instance={instance}, worker={worker}, model={LABELS['model']}: "
        "the alert's labels, filled in below."
    )
    # every query: the labels as PromQL strings, no placeholder left
    queries = chromium.eval(
        "[...document.querySelectorAll('pre > code.language-promql')].map(c => c.textContent)"
    )
    assert isinstance(queries, list) and len(queries) >= 6
    promql_worker = 'worker="' + worker.replace("\\", "\\\\").replace('"', '\\"') + '"'
    scoped = [q for q in queries if "instance=" in q]
    assert len(scoped) == len(queries) - 1  # all but the alert's own query
    for q in scoped:
        assert promql_worker in q and f'instance="{instance}"' in q, q
        assert not re.search(r'"(INSTANCE|WORKER|GPU|MODEL)"', q), q
    # one Run in Prometheus link per query, on the Prometheus that fired the alert
    runs = chromium.eval("[...document.querySelectorAll('a.run')].map(a => a.href)")
    assert isinstance(runs, list) and len(runs) == len(queries)
    for href, q in zip(runs, queries, strict=True):
        parts = urllib.parse.urlsplit(href)
        assert f"{parts.scheme}://{parts.netloc}{parts.path}" == PROMETHEUS + "/graph"
        assert urllib.parse.parse_qs(parts.query)["g0.expr"] == [q.strip()]
    # Grafana links open the dashboards on the worker
    links = chromium.eval(
        "[...document.querySelectorAll('a[href*=\"/d/\"]')].map(a => a.getAttribute('href'))"
    )
    assert isinstance(links, list) and len(links) >= 3
    for link in links:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)
        assert query["var-worker"] == [worker] and query["var-instance"] == [instance], link
    # the action and the exact advise line, on the first screen
    advise = chromium.eval(
        "document.querySelector('#do-this-now code.language-sh').textContent.trim()"
    )
    assert advise == f"inferwatch advise --agent-url http://{instance} --worker '{worker}'"
    bottom = chromium.eval("document.getElementById('do-this-now').getBoundingClientRect().bottom")
    assert isinstance(bottom, (int, float)) and 0 < bottom <= 800, bottom
    # <details> is an element that opens
    assert chromium.eval("document.querySelector('details').open") is False
    assert chromium.eval("document.querySelector('details pre').checkVisibility()") is False
    closed = chromium.eval("document.querySelector('details').getBoundingClientRect().height")
    chromium.eval("document.querySelector('details summary').click()")
    assert chromium.eval("document.querySelector('details').open") is True
    assert chromium.eval("document.querySelector('details pre').checkVisibility()") is True
    opened = chromium.eval("document.querySelector('details').getBoundingClientRect().height")
    assert isinstance(closed, (int, float)) and isinstance(opened, (int, float))
    assert opened > closed + 40


def test_without_labels_the_page_reads_with_its_placeholders(
    nginx: str, chromium: Devtools
) -> None:
    chromium.open(f"{nginx}InferenceQueueOverCapacity.html")
    assert not chromium.console_errors()
    assert chromium.eval("document.querySelectorAll('var.filled').length") == 0
    assert chromium.eval("document.querySelectorAll('a.run').length") == 0
    assert (
        chromium.eval("document.querySelector('#do-this-now code.language-sh').textContent.trim()")
        == "inferwatch advise --agent-url http://INSTANCE --worker WORKER"
    )
    assert "Words in capitals" in str(
        chromium.eval("document.getElementById('opened-on').textContent")
    )


def test_every_page_fills_every_placeholder_of_its_labels(nginx: str, chromium: Devtools) -> None:
    """Each alert's page, opened from its expanded link: the script runs under the site's
    Content-Security-Policy, and no placeholder of the alert's labels is left."""
    for alert, labels in page_labels().items():
        chromium.open(on_site(expanded(alert), nginx))
        assert not chromium.console_errors(), alert
        left = chromium.eval(
            "[...document.querySelectorAll('var:not(.filled)')].map(v => v.dataset.label)"
        )
        assert left == [], (alert, left)
        texts = chromium.eval(
            "[...document.querySelectorAll('pre code')].map(c => c.textContent).join('\\n')"
        )
        for k in labels:
            assert f'{k}="{k.upper()}"' not in str(texts), alert
        assert "PROMETHEUS" not in str(texts), alert
        runs = chromium.eval("document.querySelectorAll('a.run').length")
        blocks = chromium.eval("document.querySelectorAll('pre > code.language-promql').length")
        assert runs == blocks, alert


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
    pages = {
        **by[("ConfigMap", "inferwatch-runbooks")]["data"],
        **by[("ConfigMap", "inferwatch-runbooks-html")]["data"],
    }
    for name in ("inferwatch-runbooks", "inferwatch-runbooks-html"):
        # kubectl apply keeps the object as JSON in an annotation of at most 256 KiB
        size = len(json.dumps(by[("ConfigMap", name)], separators=(",", ":")).encode())
        assert size < CONFIGMAP_MAX_BYTES, (name, size)
    site = by[("ConfigMap", "inferwatch-runbooks-nginx")]["data"]["default.conf"]
    assert site == (REPO / "deploy" / "runbooks" / "nginx.conf").read_text()
    urls = runbook_urls(rule["spec"]["groups"])
    for alert, url in urls.items():
        name = urllib.parse.urlsplit(url).path.lstrip("/")
        assert url.startswith(BASE) and name == f"{alert}.html"
        for page in (name, f"{alert}.md"):
            assert pages[page] == (REPO / "runbooks" / page).read_text(), page
    # nginx serves the ConfigMap at the site's root, on the Service's port
    deploy = by[("Deployment", "inferwatch-runbooks")]
    pod = deploy["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v.get("configMap", {}).get("name") for v in pod["volumes"]}
    projected = next(v["projected"] for v in pod["volumes"] if v["name"] == "runbooks")
    assert [s["configMap"]["name"] for s in projected["sources"]] == [
        "inferwatch-runbooks", "inferwatch-runbooks-html"
    ]  # fmt: skip
    assert mounts["runbooks"] == "/srv/runbooks"
    assert "root /srv/runbooks;" in site and "listen 8088;" in site
    assert volumes["site"] == "inferwatch-runbooks-nginx" and mounts["site"] == "/etc/nginx/conf.d"
    service = by[("Service", "inferwatch-runbooks")]
    assert service["metadata"]["namespace"] == "monitoring"
    assert [p["port"] for p in service["spec"]["ports"]] == [urllib.parse.urlsplit(BASE).port]
