"""`inferwatch generate --grafana-url`: the dashboard links of every alert and runbook
point at the user's Grafana, set once, and still carry their var- variables."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inferwatch.cli import main
from inferwatch.errors import UsageError
from inferwatch.pack.generate import with_grafana_url
from inferwatch.pack.thresholds import load_thresholds


def test_every_dashboard_link_uses_the_given_grafana(tmp_path: Path) -> None:
    assert (
        main(["generate", "--grafana-url", "https://grafana.example.com/", "--out", str(tmp_path)])
        == 0
    )
    rule = yaml.safe_load((tmp_path / "deploy/kubernetes/prometheusrule.yaml").read_text())
    links = [
        r["annotations"]["dashboard_url"]
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if "dashboard_url" in r.get("annotations", {})
    ]
    assert len(links) >= 10
    assert all(u.startswith("https://grafana.example.com/d/inferwatch-") for u in links), links[:3]
    assert any("var-" in u for u in links), "links keep the alert's labels as dashboard variables"
    text = "".join(p.read_text() for p in (tmp_path / "runbooks").glob("*.md"))
    assert "localhost:3000" not in text and "https://grafana.example.com/d/" in text


@pytest.mark.parametrize("url", ["grafana.example.com", "ftp://g/", "https://g/?orgId=1"])
def test_a_bad_grafana_url_is_a_usage_error(url: str) -> None:
    with pytest.raises(UsageError, match="--grafana-url"):
        with_grafana_url(load_thresholds(), url)


def test_a_url_ending_in_d_is_not_doubled() -> None:
    t = with_grafana_url(load_thresholds(), "https://g.example/grafana/d/")
    assert t.pack.dashboard_base_url == "https://g.example/grafana/d/"
