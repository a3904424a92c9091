"""engines/contract.py: one well-formed row per family, and docs/metrics.md written from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.support.proc import REPO, SHARED

from inferwatch.agent.collectors.process import INFO_LABELS
from inferwatch.engines import ENGINES, contract
from inferwatch.errors import UsageError
from inferwatch.pack import metrics_doc

UNITS = {
    "_bytes_per_second": "bytes_per_second",
    "_seconds": "seconds",
    "_bytes": "bytes",
    "_ratio": "ratio",
    "_watts": "watts",
    "_joules": "joules",
    "_celsius": "celsius",
    "_hertz": "hertz",
    "_tokens": "tokens",
}


def test_every_row_follows_the_naming_rules() -> None:
    names = [f.name for f in contract.FAMILIES]
    assert len(names) > 80 and len(set(names)) == len(names)
    for f in contract.FAMILIES:
        assert re.fullmatch(r"inferwatch_[a-z0-9_]+", f.name), f.name
        assert f.name.endswith("_total") == (f.kind == "counter"), f.name
        assert f.name.endswith("_info") <= (f.kind == "info"), f.name
        stem = f.base
        unit = next((u for suffix, u in UNITS.items() if stem.endswith(suffix)), "")
        assert f.unit == unit, f.name
        assert f.table in contract.TABLES, f.name
        assert f.help.endswith(".") and "\n" not in f.help, f.name
        assert f.meaning and "|" not in f.meaning and "\n" not in f.meaning, f.name
        assert not (f.flag and f.kind != "gauge"), f.name
        assert contract.BY_NAME[f.name] is f and contract.BY_NAME[f.base] is f


def test_every_engine_table_maps_onto_contract_rows_of_its_kind() -> None:
    for engine in ENGINES.values():
        for signal in engine.signals:
            if not signal.export:
                continue
            row = contract.BY_NAME.get(signal.target)
            assert row is not None, f"{engine.name}: {signal.target} is not in the contract"
            assert signal.target == row.base, f"{engine.name}: {signal.target}"
            assert row.kind in (signal.kind, "info"), f"{engine.name}: {signal.target}"
        for ratio in engine.ratios:
            assert contract.BY_NAME[ratio.target].kind == "gauge"


def test_the_worker_info_labels_are_the_process_sources() -> None:
    assert contract.WORKER_INFO.labels == INFO_LABELS


def test_the_original_tables_hold_only_names_of_the_shared_contract() -> None:
    path = SHARED / "design" / "METRICS.md"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared design folder is not beside the repo)")
    shared = set(re.findall(r"inferwatch_[a-z0-9_]+", path.read_text()))
    original = ("gpu", "workers", "processes", "agent")
    outside = [f.name for f in contract.FAMILIES if f.table in original and f.name not in shared]
    assert outside == [], "extensions belong in the Extensions tables"
    # and every family the shared contract names is a row
    assert {n for n in shared if not n.endswith("_")} <= contract.NAMES


def test_the_committed_doc_is_the_table() -> None:
    text = (REPO / metrics_doc.DOC).read_text(encoding="utf-8")
    assert metrics_doc.splice(text) == text
    for f in contract.FAMILIES:
        assert f"| `{f.name}` | {f.type_cell} | {f.meaning} |" in text


def test_splice_rewrites_a_table_edited_by_hand_and_keeps_the_prose() -> None:
    text = (REPO / metrics_doc.DOC).read_text(encoding="utf-8")
    edited = text.replace("| `inferwatch_gpu_up` | gauge |", "| `inferwatch_gpu_up` | counter |")
    edited = edited.replace("## Labels", "## Labels (hand-written)")
    assert edited != text
    spliced = metrics_doc.splice(edited)
    assert "| `inferwatch_gpu_up` | gauge |" in spliced
    assert "## Labels (hand-written)" in spliced


def test_a_doc_without_a_table_marker_is_one_line_naming_it(tmp_path: Path) -> None:
    text = (REPO / metrics_doc.DOC).read_text(encoding="utf-8")
    gone = re.sub(r"^.*table warmup -->$", "", text, flags=re.M)
    with pytest.raises(UsageError, match=r"docs/metrics.md: table 'warmup': expected"):
        metrics_doc.splice(gone)
    assert metrics_doc.generate(tmp_path) == {}  # no document under --out: nothing to write
