"""The runbook pages' Jinja2 templates (``pages/``): the environment they render in,
and the split of a rendered page into its fields (``Page``).

A page is ``pages/<AlertName>.md.j2``: Markdown with ``{{ }}`` holes for the facts
(thresholds, rule names, dashboard links, the remedies of :mod:`inferwatch.pack.loops`),
under six headings, ``## Fires when`` (one sentence, without its full stop),
``## Do this now`` (the action, in two or three sentences: the page opens with it) then
the four sections of ``SECTIONS``. A template gets the alert's context ``c`` (``Ctx``) and
its thresholds ``t`` (``c.t``), and the filters and globals of ``_FILTERS`` and
``_GLOBALS`` below; ``pages/_shared.md.j2`` holds the texts several pages share (as
macros). A name that is not defined fails the render with the template's name and line.

A line that holds only a ``{% %}`` tag leaves no line behind. The lines of a paragraph
are joined, as Markdown joins them when it renders, so a template wraps its prose
freely; a list item, a table row and a fenced block keep their own lines (``unwrap``).
"""

from __future__ import annotations

import re
import traceback
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from prometheus_client.utils import floatToGoString

from inferwatch.engines import contract
from inferwatch.pack import loops as L
from inferwatch.pack import signals as S
from inferwatch.pack.fmt import dur, num, pct, secs
from inferwatch.pack.names import SLO_BUDGET_REMAINING, slo_burn_rate
from inferwatch.pack.rules import slo
from inferwatch.pack.runbooks.common import NOW, SECTIONS, Ctx, Page, cite, md, promql, sh

PAGES_DIR = Path(__file__).parent / "pages"
SUFFIX = ".md.j2"
HEADINGS = ("Fires when", NOW, *SECTIONS)

_FILTERS: dict[str, Any] = {
    "pct": pct,  # 0.92 -> 92%
    "dur": dur,  # seconds -> 10m
    "secs": secs,  # seconds -> 2s, 100ms
    "num": num,  # 5.0 -> 5
    "num_text": slo.num_text,  # a PromQL number: 14.4, 6
    "go": floatToGoString,  # seconds as Prometheus prints them (0.1, 2.5)
    "window_name": slo.window_name,  # seconds -> 30d
    "fmt": format,  # Python's format spec: {{ x | fmt(".0%") }}
    "md": md,  # a loops remedy with its flags in backticks
    "cite": cite,  # {{ text | cite("2.3", "6.2") }}: the guide's sections before the stop
    "promql": promql,  # {% filter promql %}: one fenced block per query
    "sh": sh,  # {% filter sh %}: one fenced shell block
}

_GLOBALS: dict[str, Any] = {
    "L": L,  # pack.loops: the closed loops and the remedy facts they share
    "S": S,  # pack.signals: every query over the agent's raw series renders from it
    "C": contract,  # engines.contract: the families (S.bucket_rate(C.QUEUE_TIME_SECONDS))
    "slo": slo,  # pack.rules.slo: BURNS, TITLES, window_seconds
    "slo_burn_rate": slo_burn_rate,
    "SLO_BUDGET_REMAINING": SLO_BUDGET_REMAINING,
    #: every burn window once, the long then the short of each pair
    "burn_windows": tuple(dict.fromkeys(w for b in slo.BURNS for w in (b.long, b.short))),
}


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(PAGES_DIR),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Markdown, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters.update(_FILTERS)
    env.globals.update(_GLOBALS)
    return env


def names() -> set[str]:
    """The alerts that have a page template (``_``-files are shared parts)."""
    return {
        p.name.removesuffix(SUFFIX)
        for p in PAGES_DIR.glob(f"*{SUFFIX}")
        if not p.name.startswith("_")
    }


_KEEPS_ITS_LINE = re.compile(r"\s*(?:[-*] |\d+\. |\||```)")


def unwrap(text: str) -> str:
    """Each paragraph on one line: a line is joined to the one before it unless either is
    blank, it starts a list item, a table row or a fence, or it is inside a fence."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            out.append(line)
            continue
        before = out[-1].strip() if out else ""
        joins = stripped and before and not before.startswith(("```", "|"))
        if fenced or not joins or _KEEPS_ITS_LINE.match(line):
            out.append(line)
        else:
            out[-1] += " " + stripped
    return "\n".join(out)


def _where(exc: Exception, template: str) -> str:
    """``pages/X.md.j2, line N`` of the template frame nearest the error."""
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"{exc.filename or template}, line {exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(SUFFIX)]
    if not frames:
        return str(PAGES_DIR / template)
    return f"{frames[-1].filename}, line {frames[-1].lineno}"


def page(name: str, c: Ctx) -> Page:
    """The fields of alert ``name``'s page, rendered from ``pages/<name>.md.j2``."""
    template = name + SUFFIX
    try:
        text = environment().get_template(template).render(c=c, t=c.t)
    except jinja2.TemplateError as exc:
        raise ValueError(f"{_where(exc, template)}: {exc.message}") from exc
    parts = re.split(r"^## (.+)\n", text, flags=re.M)
    found = tuple(parts[1::2])
    if found != HEADINGS or parts[0].strip():
        raise ValueError(
            f"{PAGES_DIR / template}: the headings must be {HEADINGS} with nothing before "
            f"them, not {found}"
        )
    condition, now, meaning, impact, diagnosis, mitigation = (
        unwrap(body.strip()) for body in parts[2::2]
    )
    if "\n" in condition:
        raise ValueError(f"{PAGES_DIR / template}: 'Fires when' must be one paragraph")
    return Page(condition, now, meaning, impact, diagnosis, mitigation)
