"""The report as HTML (mail and file), plain text and CSV (package).

One module per output format (:mod:`.as_html`, :mod:`.as_text`, :mod:`.as_csv`),
one per section that every format prints (:mod:`.cost`, :mod:`.budgets`,
:mod:`.whatif`), the HTML building blocks (:mod:`.htmlkit`) and what all
formats share (:mod:`.common`). Every label that comes from Prometheus is
escaped in the HTML.
"""

from __future__ import annotations

from inferwatch.report.render.as_csv import csv_name, csv_text
from inferwatch.report.render.as_html import html
from inferwatch.report.render.as_text import text
from inferwatch.report.render.common import title
from inferwatch.report.render.cost import cost_text as _cost_text  # noqa: F401 (tests print one section)
from inferwatch.report.summary import BAND_NAMES

__all__ = ["BAND_NAMES", "csv_name", "csv_text", "html", "text", "title"]
