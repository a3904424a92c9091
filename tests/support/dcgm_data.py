"""dcgm-exporter's real expositions of two H200s (tests/data/dcgm/): 4.8 (OLD) and 4.9 (NEW)."""

from __future__ import annotations

from tests.support.proc import REPO

DATA = REPO / "tests" / "data" / "dcgm"
OLD = (DATA / "dcgm-exporter-4.8-h200x2.prom").read_text()
NEW = (DATA / "dcgm-exporter-4.9-h200x2.prom").read_text()
