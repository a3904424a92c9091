"""Runbooks: one page per alert, four sections, numbers from the thresholds, real panels."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.proc import REPO, SHARED

from inferwatch.pack import loops as L
from inferwatch.pack import rules, runbooks
from inferwatch.pack.dashboards import lint as dashlint
from inferwatch.pack.runbooks import common as runbook_text
from inferwatch.pack.runbooks import templates
from inferwatch.pack.thresholds import load_thresholds

RUNBOOKS = REPO / "runbooks"
DASHBOARDS = REPO / "dashboards"
METRICS_MD = SHARED / "design" / "METRICS.md"
PROJECT_METRICS_DOC = REPO / dashlint.PROJECT_METRICS_DOC


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((REPO / rules.ALERTS_FILE).read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def sections(text: str) -> list[tuple[str, str]]:
    """(title, body) of every ``## `` section."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return [(parts[i].strip(), parts[i + 1].strip()) for i in range(1, len(parts), 2)]


def test_every_alert_links_to_its_page_opened_on_its_labels() -> None:
    """runbook_url = the page's HTML, with the alert's labels and the firing Prometheus as
    Go templates; the page has the action first, then the four sections."""
    t = load_thresholds()
    scopes = {a.name: a.scope for a in rules.alerts(t)}
    assert alert_rules()
    for rule in alert_rules():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(t.pack.runbook_base_url)
        page, query = url.removeprefix(t.pack.runbook_base_url).split("?", 1)
        assert page == f"{rule['alert']}.html" and (RUNBOOKS / page).is_file(), url
        labels = [k for k in scopes[rule["alert"]] if k in ("instance", "worker", "gpu", "model")]
        if "worker" in labels:  # a worker's alerts carry its model
            labels.append("model")
        assert query.split("&") == [
            *(f"{k}={{{{ $labels.{k} | urlquery }}}}" for k in labels),
            "prometheus={{ $externalURL | urlquery }}",
        ], url
        text = (RUNBOOKS / f"{rule['alert']}.md").read_text()
        assert text.splitlines()[0] == f"# {rule['alert']}"
        found = sections(text)
        assert [title for title, _ in found] == [
            "Do this now", "The alert", "Meaning", "Impact", "Diagnosis", "Mitigation"
        ]  # fmt: skip
        for title, body in found:
            assert len(body) > 80, f"{rule['alert']}: section {title} is nearly empty"


def test_pages_name_severity_condition_and_the_alert_query() -> None:
    for rule in alert_rules():
        text = (RUNBOOKS / f"{rule['alert']}.md").read_text()
        assert "**Severity:** " in text and rule["labels"]["severity"] in text
        assert "**Fires when:**" in text
        assert rule["expr"].strip() in text, f"{rule['alert']}: alert query not on its page"


def panel_titles() -> dict[str, set[str]]:
    """Dashboard title -> its panel titles, from the generated dashboards."""
    files = sorted(DASHBOARDS.glob("*.json"))
    if not files:
        pytest.skip("dashboards/ has no generated dashboards yet")
    result: dict[str, set[str]] = {}
    for path in files:
        doc = json.loads(path.read_text())
        titles: set[str] = set()
        stack = list(doc.get("panels", []))
        while stack:
            panel = stack.pop()
            titles.add(panel.get("title", ""))
            stack.extend(panel.get("panels", []))
        result[doc["title"]] = titles
    return result


def test_panels_named_in_runbooks_exist_on_their_dashboard() -> None:
    titles = panel_titles()
    checked = 0
    for page in sorted(RUNBOOKS.glob("*.md")):
        for dashboard, panels in re.findall(
            r"\[(Inference [a-z ]+)\]\([^)]*\) → ((?:\*\*[^*]+\*\*(?:, )?)+)", page.read_text()
        ):
            assert dashboard in titles, f"{page.name}: no dashboard {dashboard!r}"
            for panel in re.findall(r"\*\*([^*]+)\*\*", panels):
                assert panel in titles[dashboard], f"{page.name}: {dashboard} has no {panel!r}"
                checked += 1
    assert checked >= 30


def metric_names() -> set[str]:
    """METRICS.md's names, plus the exact names of docs/metrics.md's Extensions section."""
    if not METRICS_MD.exists():
        pytest.skip(f"{METRICS_MD} is not there (shared design documents not mounted)")
    names = dashlint.extension_metrics(PROJECT_METRICS_DOC.read_text())
    for m in re.finditer(
        r"^\| ([a-z_][a-z0-9_ /]*) \| ([a-z0-9 =/]+) \|", METRICS_MD.read_text(), re.M
    ):
        for name in m.group(1).split(" / "):
            names.add(name.strip())
            if "histogram" in m.group(2):
                names |= {f"{name.strip()}_bucket", f"{name.strip()}_sum", f"{name.strip()}_count"}
    return names


def vector_selectors(promql_parser: Any, query: str) -> list[str]:
    names: list[str] = []

    def visit(node: Any) -> None:
        if type(node).__name__ == "VectorSelector":
            names.append(node.name)

    promql_parser.walk(promql_parser.parse(query), visit)
    return names


def test_promql_in_runbooks_parses_and_uses_known_metrics() -> None:
    promql_parser = pytest.importorskip("promql_parser")
    recorded = {
        r["record"]
        for g in yaml.safe_load((REPO / rules.RULES_FILE).read_text())["groups"]
        for r in g["rules"]
    }
    known = metric_names() | recorded | {"up", "scrape_duration_seconds"}
    count = 0
    for page in sorted(RUNBOOKS.glob("*.md")):
        head, body = page.read_text().split("</details>", 1)
        # the alert's own query (in <details>) and each block to paste below hold one
        # query each, which may span lines: a block pastes into the query box as it is
        queries = re.findall(r"```promql\n(.*?)\n```", head, re.S)
        blocks = re.findall(r"```promql\n(.*?)\n\s*```", body, re.S)
        assert blocks, f"{page.name}: no PromQL to paste"
        queries += [" ".join(line.strip() for line in block.splitlines()) for block in blocks]
        for query in queries:
            for name in vector_selectors(promql_parser, query):
                assert name in known, f"{page.name}: {name} is not a metric or recorded rule"
            count += 1
    assert count >= 40


def test_runbook_numbers_follow_the_thresholds(tmp_path: Path) -> None:
    custom = tmp_path / "t.yaml"
    custom.write_text(
        "gpu_utilization:\n  waste_below: 0.25\n  waste_for: 45m\n"
        "vram:\n  scale_above: 0.9\n  squeeze_above: 0.8\n  squeeze_p99_ok_seconds: 0.3\n"
        "queue:\n  over_capacity_samples: 4\n"
        "ttft:\n  p99_slo_seconds: 1.5\n"
        "gpu_health:\n  xid_critical: [79]\n"
        "pack:\n  dashboard_base_url: https://grafana.example/d/\n"
    )
    pages = runbooks.generate(load_thresholds(str(custom)))
    defaults = runbooks.generate(load_thresholds())
    assert set(pages) == set(defaults)

    under = pages["runbooks/InferenceGPUUnderutilized.md"]
    assert "below 25% for 45m" in under and "30%" not in under.split("## Meaning")[0]
    vram = pages["runbooks/InferenceVRAMPressureQueueRising.md"]
    assert "is above 90% while" in vram and "92%" not in vram
    assert "above 80% on its own" in vram and "under 300ms" in vram
    queue = pages["runbooks/InferenceQueueOverCapacity.md"]
    assert "for 4 consecutive samples" in queue
    ttft = pages["runbooks/InferenceTTFTSLOBreach.md"]
    assert "above 1.5s" in ttft
    xid = pages["runbooks/InferenceGPUXidErrors.md"]
    assert "critical (pages) for XIDs 79," in xid
    assert "https://grafana.example/d/inferwatch-gpu" in vram
    assert "http://localhost:3000" not in "".join(pages.values())
    for path, text in pages.items():
        assert text != defaults[path] or path.endswith(
            ("InferenceAgentDown.md", "InferenceWorkerDown.md")
        ), path


def test_default_pages_quote_the_default_thresholds() -> None:
    t = load_thresholds()
    text = {p.stem: p.read_text() for p in RUNBOOKS.glob("*.md")}
    assert "below 30% for 30m" in text["InferenceGPUUnderutilized"]
    assert "above 85% for 15m" in text["InferenceGPUScaleReview"]
    assert "is above 92% while" in text["InferenceVRAMPressureQueueRising"]
    assert "above 85% on its own" in text["InferenceVRAMPressureQueueRising"]
    assert (
        f"{t.queue.over_capacity_samples} consecutive samples" in text["InferenceQueueOverCapacity"]
    )
    assert "above 2s for 10m" in text["InferenceTTFTSLOBreach"]
    assert "above 100ms for 10m" in text["InferenceTPOTSLOBreach"]
    assert "at least 5 times its P50" in text["InferenceLatencyLongTail"]
    assert "within 10m of its process start" in text["InferenceWorkerColdStart"]
    assert "more than 1% of a worker's requests" in text["InferenceRequestErrors"]


def test_pages_cite_the_guide_and_name_vllm_flags() -> None:
    """Pages built on the guide cite its sections; tuning pages name the flag to change."""
    text = {p.stem: p.read_text() for p in RUNBOOKS.glob("*.md")}
    outside_the_guide = {
        "InferenceGPULost",
        "InferenceGPUXidErrors",
        "InferenceGPUThermalThrottling",
        "InferenceAgentDown",
    }
    for name, page in text.items():
        if name not in outside_the_guide:
            assert re.search(r"\[\d(?:\.\d)?(?: FAQ)?(?:, [\d.]+(?: FAQ)?)*\]", page), name
    for name in ("InferenceVRAMPressureQueueRising", "InferenceKVCachePreemptions"):
        for flag in ("--max-num-seqs", "--gpu-memory-utilization", "--enable-prefix-caching"):
            assert flag in text[name], (name, flag)
    assert "--enable-prefix-caching" in text["InferenceTTFTHighGPUIdle"]
    assert "--kv-cache-dtype fp8" in text["InferenceKVCachePreemptions"]
    assert "--max-num-batched-tokens" in text["InferenceQueueOverCapacity"]
    assert "--max-num-seqs" in text["InferenceQueueOverCapacity"]
    assert "least_conn" in text["InferenceLoadImbalance"]
    assert "(24 × 0.8 − 8) ÷ 0.5" in text["InferenceVRAMPressureQueueRising"]


def test_cold_start_page_reads_the_warmup_gate_and_turns_it_on_first() -> None:
    page = (RUNBOOKS / "InferenceWorkerColdStart.md").read_text()
    found = dict(sections(page))
    diagnosis, mitigation = found["Diagnosis"], found["Mitigation"]
    for query in (
        'inferwatch_worker_ready{job="inferwatch",instance="INSTANCE",worker="WORKER"}',
        'inferwatch_warmup_ttft_seconds{job="inferwatch",instance="INSTANCE",worker="WORKER"}',
        'inferwatch_warmup_deadline_exceeded{job="inferwatch",instance="INSTANCE",worker="WORKER"} == 1',
        "sum by (reason) (increase(inferwatch_warmup_failures_total"
        '{job="inferwatch",instance="INSTANCE",worker="WORKER"}[1h]))',
    ):
        assert query in diagnosis, query
    assert "inferwatch advise --agent-url http://INSTANCE --worker WORKER" in diagnosis
    first, *rest = mitigation.split("\n- ")
    assert "warmup: {enabled: true}" in first and "warmup.system_prompts" in first
    assert "readinessProbe" in first and "/readyz" in first and "restart" in first
    # the hand-made warm-up stays, for setups without the sidecar, after the gate
    sketch = next(item for item in rest if "curl" in item)
    assert "without the sidecar" in sketch and "max_tokens" in sketch


def test_warmup_deadline_page_follows_the_thresholds(tmp_path: Path) -> None:
    custom = tmp_path / "t.yaml"
    custom.write_text("cold_start:\n  warmup_deadline_for: 5m\n")
    page = runbooks.generate(load_thresholds(str(custom)))[
        "runbooks/InferenceWarmupDeadlineExceeded.md"
    ]
    default = (RUNBOOKS / "InferenceWarmupDeadlineExceeded.md").read_text()
    assert "without a completed warm-up) for 5m." in page
    assert "without a completed warm-up) for 1m." in default
    diagnosis = dict(sections(default))["Diagnosis"]
    for reason in ("connect", "timeout", "http_status", "bad_response", "no_model"):
        assert f"`{reason}`" in diagnosis, reason
    assert "inferwatch advise --agent-url http://INSTANCE --worker WORKER" in diagnosis


def test_pasted_queries_are_scoped_to_the_alert_and_restarting_is_never_the_first_step() -> None:
    """Each query to paste names the alert's instance, worker, GPU or model placeholder;
    each dashboard link carries them; a restart is never the first mitigation."""
    t = load_thresholds()
    scoped = {a.name for a in rules.alerts(t) if a.scope}
    for page in sorted(RUNBOOKS.glob("*.md")):
        name = page.stem
        _, body = page.read_text().split("</details>", 1)
        if name in scoped:
            for block in re.findall(r"```promql\n(.*?)\n\s*```", body, re.S):
                assert re.search(r'="(INSTANCE|WORKER|GPU|MODEL)"', block), (name, block)
            for link in re.findall(r"\]\((http[^)]*?/d/[^)]*)\)", body):
                assert "var-instance=INSTANCE" in link, (name, link)
        mitigation = dict(sections(page.read_text()))["Mitigation"]
        first = mitigation.lstrip().splitlines()[0].lower()
        assert not re.match(r"-\s*(restart|reboot)", first), (name, first)


def test_every_loop_alert_names_its_loop_and_its_thresholds() -> None:
    """The header names the loop of pack.loops (the id advise and the report print) by its
    name: one of the guide's three closed loops, or a further condition; never a number."""
    heads = ("**Closed loop:**", "**Further condition:**")
    for page in sorted(RUNBOOKS.glob("*.md")):
        text = page.read_text()
        lines = [line for line in text.splitlines() if line.startswith(heads)]
        loop_id = L.BY_ALERT.get(page.stem)
        if loop_id is None:
            assert lines == [], page.name
            continue
        loop = L.BY_ID[loop_id]
        assert len(lines) == 1, page.name
        head = heads[0] if loop.name in L.GUIDE_LOOPS else heads[1]
        assert lines[0].startswith(f"{head} {loop.name}, "), (page.name, lines[0])
        assert not re.search(r"[Ll]oop \d", text), page.name
        assert f"`{loop.id}`" in lines[0] and loop.title in lines[0], page.name
        assert f"[{L.guide(loop.id)}]" in lines[0], page.name
        for key in loop.thresholds:
            assert f"`{key}`" in lines[0], (page.name, key)


def test_remedy_facts_come_from_pack_loops() -> None:
    """Each remedy the loops share with advise and the report reads as pack.loops says it."""
    text = {p.stem: p.read_text() for p in RUNBOOKS.glob("*.md")}
    kv = ("InferenceKVCachePreemptions", "InferenceVRAMPressureQueueRising")
    for name in kv:
        for fact in (L.raise_kv_pool(), L.fewer_seqs(), L.FP8_KV, L.PREFIX_CACHING):
            assert runbook_text.cite(runbook_text.md(fact), "x")[:-5] in text[name], (name, fact)
        for dtype in L.FP8_DTYPES:
            assert f"`{dtype}`" in text[name]
        assert 'kv_cache_dtype=~"fp8.*"' in text[name]
    # preemptions: a larger pool first; memory pressure: fewer sequences first [5.1]
    pre = dict(sections(text[kv[0]]))["Mitigation"]
    mem = dict(sections(text[kv[1]]))["Mitigation"]
    assert pre.index("Give the KV pool more memory") < pre.index("Lower `--max-num-seqs`")
    assert mem.index("Lower `--max-num-seqs`") < mem.index("Give the KV pool more memory")
    assert runbook_text.md(L.headroom()) in text["InferenceWorkerDown"]
    assert runbook_text.md(L.NO_SCALE_IN).rstrip(".") in text["InferenceLoadImbalance"]
    assert runbook_text.md(L.DATA_PARALLEL).rstrip(".") in text["InferenceLoadImbalance"]
    for name in ("InferenceLoadImbalance", "InferenceLatencyLongTail"):
        assert runbook_text.md(L.LEAST_CONNECTIONS) in text[name], name
        assert runbook_text.md(L.LONG_CONTEXT_POOL) in text[name], name
    assert runbook_text.md(L.SCALE_OUT).rstrip(".") in text["InferenceQueueOverCapacity"]
    cold = f"{L.COLD_FIRST_CALL_SECONDS:g} s"
    for name in ("InferenceTTFTHighGPUIdle", "InferenceWorkerColdStart"):
        assert cold in text[name] and f"{L.WARM_CALL_SECONDS * 1000:.0f} ms" in text[name]
    low, high = L.BATCHED_TOKENS_RANGE
    assert f"`--max-num-batched-tokens` {low:g}-{high:g}" in text["InferenceQueueOverCapacity"]


def test_the_page_source_types_no_fact_that_pack_loops_defines() -> None:
    """pack/runbooks/ (code and page templates) quotes no number pack.loops holds: a
    changed fact changes every page."""
    package = REPO / "agent" / "inferwatch" / "pack" / "runbooks"
    files = sorted([*package.glob("*.py"), *package.glob("pages/*.md.j2")])
    assert len(files) > 20, files
    # a template wraps its lines: a fact may stand across two of them
    source = " ".join(" ".join(path.read_text() for path in files).split())
    facts = {
        f"{L.GPU_MEMORY_UTILIZATION_HEADROOM:g}": "GPU_MEMORY_UTILIZATION_HEADROOM",
        f"{L.FP8_KV_ACCURACY_LOSS:.1%}": "FP8_KV_ACCURACY_LOSS",
        f"{L.COLD_FIRST_CALL_SECONDS:g} s": "COLD_FIRST_CALL_SECONDS",
        f"{L.WARM_CALL_SECONDS * 1000:.0f} ms": "WARM_CALL_SECONDS",
        f"{L.BATCHED_TOKENS_RANGE[0]}-{L.BATCHED_TOKENS_RANGE[1]}": "BATCHED_TOKENS_RANGE",
        f"over {L.LONG_PROMPT_TOKENS} tokens": "LONG_PROMPT_TOKENS",
        f"{L.PREFIX_CACHE_KV_SAVING:.0%} or more": "PREFIX_CACHE_KV_SAVING",
    }
    for literal, constant in facts.items():
        assert literal not in source, f"pack/runbooks/ types {literal!r}: use loops.{constant}"


def test_the_long_tail_page_judges_ttft_and_tpot_with_at_least() -> None:
    page = (RUNBOOKS / "InferenceLatencyLongTail.md").read_text()
    fires = next(line for line in page.splitlines() if line.startswith("**Fires when:**"))
    assert "TTFT P99 or its TPOT P99" in fires and "at least" in fires
    assert "end-to-end latency is not judged" in fires


def test_every_header_describes_the_query_under_it() -> None:
    """A page's "Fires when" names what its alert's query reads (``runbooks.common.expr_terms``)
    and the ratio thresholds it compares with, so a header cannot describe an old query."""
    from inferwatch.pack.names import names

    t = load_thresholds()
    terms = runbook_text.expr_terms(names(t))
    pages = runbooks.generate(t)
    checked = 0
    for alert in rules.alerts(t):
        text = pages[f"runbooks/{alert.name}.md"]
        fires = next(line for line in text.splitlines() if line.startswith("**Fires when:**"))
        for series, phrase in terms.items():
            if re.search(re.escape(series) + r"(?![\w:])", alert.expr):
                assert phrase in fires, (alert.name, series, phrase, fires)
                checked += 1
        # a ratio series compared with a share: the header says that share
        for m in re.finditer(r"[\w:]*ratio[\w:]*(?:\{[^}]*\})?\s*[<>]=?\s*(0\.\d+)", alert.expr):
            share = f"{float(m.group(1)):.0%}"
            assert share in fires, (alert.name, m.group(0), fires)
        for stale in ("GPUs of its agent", "watched by the same agent", "slope > 0"):
            assert stale not in fires, (alert.name, stale)
    assert checked >= 8


def test_every_page_template_is_the_page_of_an_alert() -> None:
    """pages/<AlertName>.md.j2: one per alert of the default pack (every family on),
    and no template left over from an alert that is gone."""
    assert templates.names() == {a.name for a in rules.alerts(load_thresholds())}


def test_a_template_joins_its_paragraphs_and_keeps_lists_fences_and_tables() -> None:
    text = (
        "A paragraph\nwrapped in\n  three lines.\n\n1. An item\n   that wraps:\n\n"
        "   ```promql\n   up\n   and on (job) x\n   ```\n\n   After the block\n   too.\n"
        "- A list item\n- another\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    )
    assert templates.unwrap(text) == (
        "A paragraph wrapped in three lines.\n\n1. An item that wraps:\n\n"
        "   ```promql\n   up\n   and on (job) x\n   ```\n\n   After the block too.\n"
        "- A list item\n- another\n\n| a | b |\n|---|---|\n| 1 | 2 |"
    )


@pytest.fixture
def pages_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The page templates read from ``tmp_path`` (the shared parts copied there)."""
    for shared in templates.PAGES_DIR.glob("_*.md.j2"):
        (tmp_path / shared.name).write_text(shared.read_text())
    monkeypatch.setattr(templates, "PAGES_DIR", tmp_path)
    templates.environment.cache_clear()
    yield tmp_path
    templates.environment.cache_clear()


def test_a_typo_in_a_template_fails_with_its_name_and_line(pages_in: Path) -> None:
    t = load_thresholds()
    (pages_in / "InferenceGPULost.md.j2").write_text(
        "## Fires when\n\nthe GPU is gone for {{ c.hold }}\n\n## Meaning\n\n"
        "Above {{ t.gpu_utilization.wast_below | pct }}.\n"
    )
    with pytest.raises(ValueError, match=r"InferenceGPULost\.md\.j2, line 7: .*wast_below"):
        runbooks.render(t, "InferenceGPULost", tuple(rules.alerts(t))[:1])
    (pages_in / "InferenceGPULost.md.j2").write_text("## Fires when\n\nx {{ c.hold\n")
    with pytest.raises(ValueError, match=r"InferenceGPULost\.md\.j2, line 3"):
        runbooks.render(t, "InferenceGPULost", tuple(rules.alerts(t))[:1])


def test_a_template_without_the_six_headings_is_refused(pages_in: Path) -> None:
    t = load_thresholds()
    (pages_in / "InferenceGPULost.md.j2").write_text(
        "## Fires when\n\nthe GPU is gone\n\n## Meaning\n\nGone.\n\n## Mitigation\n\nReboot.\n"
    )
    with pytest.raises(ValueError, match="the headings must be"):
        runbooks.render(t, "InferenceGPULost", tuple(rules.alerts(t))[:1])


def test_every_page_opens_with_its_action_and_the_advise_line() -> None:
    """ "Do this now" comes first, under the title, says the action in a few sentences,
    and ends with the `inferwatch advise` line for what the alert is about (issue 40)."""
    t = load_thresholds()
    pages = 0
    for alert in {a.name: a for a in rules.alerts(t)}.values():
        text = (RUNBOOKS / f"{alert.name}.md").read_text()
        head, rest = text.split("\n## Do this now\n", 1)
        assert head.count("\n") <= 3 and "\n## " not in head, alert.name  # the title only
        now, _ = rest.split("\n## The alert\n", 1)
        action, advise = now.split("```sh\n", 1)
        assert len(action.split()) <= 90, (
            f"{alert.name}: Do this now runs to {len(action.split())} words"
        )
        if "instance" in alert.scope:
            expected = "inferwatch advise --agent-url http://INSTANCE"
            if "worker" in alert.scope:
                expected += " --worker WORKER"
        else:  # a model's SLO, or no agent to ask: the Prometheus that fired the alert
            expected = "inferwatch advise --prometheus-url PROMETHEUS"
        assert advise.split("\n", 1)[0] == expected, alert.name
        pages += 1
    assert pages == len(list(RUNBOOKS.glob("*.md"))) >= 20


def _between(html: str, tag: str) -> str:
    return html.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]


def test_html_pages_are_their_markdown_rendered_with_only_their_own_script() -> None:
    from inferwatch.pack.generate import runbook_nginx
    from inferwatch.pack.runbooks import html

    site = runbook_nginx()
    for md_page in sorted(RUNBOOKS.glob("*.md")):
        text = md_page.read_text()
        page = md_page.with_suffix(".html").read_text()
        # raw HTML passes through: <details> is an element, not text
        assert "<details><summary>Alert query</summary>" in page and "&lt;details" not in page
        assert page.count('<section class="now" id="do-this-now">') == 1
        assert page.index('id="do-this-now"') < page.index("<h2>Meaning</h2>")
        assert page.count('<code class="language-promql">') == text.count("```promql")
        assert page.count("<a href=") == len(re.findall(r"\]\(http", text)), md_page.name
        # every placeholder of a PromQL matcher is marked for the script, none is left bare
        for block in re.findall(r'<code class="language-promql">(.*?)</code>', page, re.S):
            bare = re.sub(r"<var [^>]*>\w+</var>", "", block)
            assert not re.search(r"=&quot;(INSTANCE|WORKER|GPU|MODEL)&quot;", bare), block
        advise = re.search(r'<code class="language-sh">inferwatch advise (.*?)</code>', page, re.S)
        assert advise and "<var data-label=" in advise.group(1), md_page.name
        # nothing from elsewhere; the one inline script and style are those the site's
        # Content-Security-Policy allows by hash
        assert "<script src" not in page and "@import" not in page
        assert re.findall(r"<link [^>]*>", page) == ['<link rel="icon" href="data:,">']
        assert page.count("<script>") == 1 and page.count("<style>") == 1
        for tag in ("script", "style"):
            digest = html._sha256(_between(page, tag))
            assert f"{tag}-src {digest}" in site, (md_page.name, tag)
    assert "Content-Security-Policy" in site and "default-src 'none'" in site
