"""README.md against the real thing: every count it states, its numbered steps, its
configuration reference (issue 39: "19 alerts" where the rule files had 20, Kubernetes
steps numbered 1, 2, 3, 4, 3, 4 around a repeated paragraph, no `gpu.activity_interval`).

The counts are read from the generated files and the code that makes them, never
written here, so a README that drifts fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from tests.support.proc import REPO

from inferwatch.agent import config as agent_config
from inferwatch.demo.layouts import layout_for
from inferwatch.pack.thresholds import load_thresholds

README = REPO / "README.md"
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
WORDS = {w: i for i, w in enumerate(NUMBER_WORDS)}


def _number(text: str) -> int:
    return int(text) if text.isdigit() else WORDS[text.lower()]


def _stated(pattern: str, text: str | None = None) -> int:
    """The one count the README states where ``pattern`` (its ``(?P<n>...)`` group) is."""
    found = re.findall(pattern, README.read_text() if text is None else text)
    assert len(found) == 1, f"{pattern!r}: expected one statement, found {found}"
    return _number(found[0])


NUMBER = r"(\d+|" + "|".join(WORDS) + r"|" + "|".join(w.title() for w in WORDS) + r")"


SLO_GROUP = "inferwatch-slo.alerts"


def _alert_rules() -> tuple[list[str], list[str]]:
    """Alert names of the generated file's rules, one per rule: (outside the SLO group,
    the SLO burn-rate group)."""
    doc = yaml.safe_load((REPO / "alerts" / "inferwatch-alerts.yaml").read_text())
    plain: list[str] = []
    burn: list[str] = []
    for group in doc["groups"]:
        names = [r["alert"] for r in group["rules"] if "alert" in r]
        (burn if group["name"] == SLO_GROUP else plain).extend(names)
    return plain, burn


def test_the_alert_counts_are_the_rule_files() -> None:
    plain, burn = _alert_rules()
    assert _stated(NUMBER + r" `Inference\*` alerts") == len(set(plain))
    assert _stated(NUMBER + r" SLO burn-rate alerts") == len(set(burn))
    # docs/alerts.md states them too, with the rules behind them
    doc = (REPO / "docs" / "alerts.md").read_text()
    assert _stated(r"the " + NUMBER + r" alerts \(\d+ rules", doc) == len(set(plain))
    assert _stated(r"the \d+ alerts \(" + NUMBER + r" rules", doc) == len(plain)
    assert _stated(r"the " + NUMBER + r" burn-rate alerts", doc) == len(set(burn))
    assert _stated(r"burn-rate alerts of `slos:` \(" + NUMBER + " rules", doc) == len(burn)


def test_the_dashboard_count_is_the_generated_dashboards() -> None:
    dashboards = sorted((REPO / "dashboards").glob("*.json"))
    assert _stated(r"\n" + NUMBER + r" dashboards, generated") == len(dashboards)
    assert _stated(r"# " + NUMBER + " dashboards\n") == len(dashboards)


def test_the_demo_counts_are_its_layouts() -> None:
    pair = layout_for("steady")
    assert _stated(r"`inferwatch demo` starts " + NUMBER + " simulated vLLM") == len(pair.workers)
    tp = layout_for("tp")
    used = {g for w in tp.workers for g in w.gpus}
    assert _stated(r"`tp`: one model over " + NUMBER + " GPUs") == len(used)
    assert _stated(r"GPU\), " + NUMBER + " spare GPUs idle") == tp.gpu_count - len(used)
    colocate = layout_for("colocate")
    assert _stated(r"`colocate`: " + NUMBER + " small models") == len(colocate.workers)
    host8 = layout_for("host8")
    assert _stated(r"`host8`: " + NUMBER + " workers") == len(host8.workers)
    assert _stated(r"on an (\d+)-GPU host") == host8.gpu_count
    mig = layout_for("mig")
    assert _stated(r"`mig`: " + NUMBER + " MIG slices") == len(mig.workers)


def test_the_queue_samples_are_the_thresholds() -> None:
    samples = load_thresholds().queue.over_capacity_samples
    assert _stated(r"over capacity for " + NUMBER + " samples") == samples


def _ordered_lists(text: str) -> list[tuple[int, list[int]]]:
    """(first line, item numbers) of each top-level numbered list, code fences skipped.

    A list runs from its first item through indented continuation lines and blank
    lines, until a line at column 0 that is not an item (a paragraph, a heading)."""
    lists: list[tuple[int, list[int]]] = []
    current: list[int] | None = None
    fence = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
            current = None  # a fence at column 0 ends a list
            continue
        if fence:
            continue
        item = re.match(r"(\d+)\. ", line)
        if item:
            if current is None:
                current = []
                lists.append((lineno, current))
            current.append(int(item.group(1)))
        elif line and not line[0].isspace():
            current = None
    return lists


DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_numbered_steps_are_consecutive(path: Path) -> None:
    for lineno, numbers in _ordered_lists(path.read_text()):
        start = min(numbers[0], 1)  # docs/report.md counts its sections from 0
        assert numbers == list(range(start, start + len(numbers))), (
            f"{path.name}:{lineno}: steps numbered {numbers}"
        )


def test_the_list_reader_finds_what_it_checks() -> None:
    """The reader can fail: it sees the steps numbered 1, 2, 3, 4, 3, 4 of issue 39 as one
    list, and it finds the README's Kubernetes steps."""
    steps = "1. a\n   more\n   ```sh\n   x\n   ```\n2. b\n\n3. c\n4. d\n3. e\n4. f\n\nAfter.\n"
    assert _ordered_lists(steps) == [(1, [1, 2, 3, 4, 3, 4])]
    text = README.read_text()
    kubernetes = text[: text.index("### Kubernetes")].count("\n") + 1
    after = [numbers for line, numbers in _ordered_lists(text) if line > kubernetes]
    assert after and len(after[0]) >= 4, after


def _reference_keys() -> set[str]:
    """Keys in the first column of the README's configuration tables."""
    text = README.read_text()
    section = text[text.index("## Configuration reference") :]
    section = section[: section.index("\n## ")]
    return {
        key
        for line in section.splitlines()
        if line.startswith("| `")
        for key in re.findall(r"`([a-z_.]+)`", line.split("|")[1])
    }


def test_the_configuration_reference_names_every_agent_key() -> None:
    keys = _reference_keys()
    expected = {
        *(f"gpu.{k}" for k in agent_config._GPU_FIELDS),
        *(f"scrape.{k}" for k in agent_config._SCRAPE_FIELDS),
        *(f"server.{k}" for k in agent_config._SERVER_FIELDS),
        *agent_config._TOP_SCALARS,
        "listen",
        "workers",
        "kubernetes",
        *agent_config._WORKER_FIELDS,
    }
    missing = sorted(expected - keys)
    assert not missing, f"README's configuration reference lacks {missing}"
