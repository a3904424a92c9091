"""Runbook pages as HTML: each page's Markdown rendered at ``inferwatch generate`` time
(markdown-it-py, CommonMark with raw HTML and tables), so the runbook site serves pages
whose links click and whose ``<details>`` open, with no script from anywhere else.

An alert's ``runbook_url`` opens its page with the alert's labels in the query string
(``InferenceQueueOverCapacity.html?instance=...&worker=...&prometheus=...``). The page
is static, so a small inline script reads ``location.search`` and fills the
placeholders the Markdown writes in capitals: the label values of the PromQL matchers
(escaped as PromQL strings), the words of the shell blocks (quoted for the shell, the
``inferwatch advise`` line among them), the ``var-`` variables of the Grafana links
(URL-encoded); with the Prometheus that fired the alert (its ``$externalURL``) each
query gets a "Run in Prometheus" link. Opened without parameters the page reads as the
Markdown does, placeholders and all. Values are only ever set as text or encoded into
a URL, never parsed as HTML.

Only placeholders in their place are marked (``worker="WORKER"`` in PromQL, a whole
word in a shell block, ``var-worker=WORKER`` in a link), never a word of the prose:
"GPU" is a placeholder in ``gpu="GPU"`` and a noun everywhere else.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.token import Token

from inferwatch.pack.runbooks.common import NOW, PLACEHOLDERS, PROMETHEUS

#: placeholder word -> the query parameter (an alert label, or ``prometheus``) that fills it
FILLS = {**{v: k for k, v in PLACEHOLDERS.items()}, PROMETHEUS: "prometheus"}

# In PromQL a placeholder is the value of its own label's matcher, escaped by markdown-it
_PROMQL = re.compile(
    r"\b(" + "|".join(PLACEHOLDERS) + r")=&quot;(" + "|".join(PLACEHOLDERS.values()) + ")&quot;"
)
# In a shell block, a placeholder word; not GPU, which comments use as a noun
_SH = re.compile(r"\b(INSTANCE|WORKER|MODEL|" + PROMETHEUS + r")\b")


def _var(label: str, word: str, kind: str) -> str:
    return f'<var data-label="{label}" data-as="{kind}">{word}</var>'


def mark(code: str, lang: str) -> str:
    """``code`` (escaped HTML) with its placeholders wrapped in ``<var>`` for the script."""
    if lang == "promql":

        def matcher(m: re.Match[str]) -> str:
            label, word = m.group(1), m.group(2)
            if PLACEHOLDERS[label] != word:
                return m.group(0)
            return f"{label}=&quot;{_var(label, word, 'promql')}&quot;"

        return _PROMQL.sub(matcher, code)
    if lang == "sh":
        return _SH.sub(lambda m: _var(FILLS[m.group(1)], m.group(1), "sh"), code)
    return code


def _fence(
    self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any
) -> str:  # a markdown-it render rule
    token = tokens[idx]
    lang = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
    attr = f' class="language-{escapeHtml(lang)}"' if lang else ""
    return f"<pre><code{attr}>{mark(escapeHtml(token.content), lang)}</code></pre>\n"


@cache
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    md.add_render_rule("fence", _fence)
    return md


STYLE = """\
body{font:16px/1.5 system-ui,sans-serif;color:#1b1f24;margin:0;background:#fff}
main{max-width:56rem;margin:0 auto;padding:.5rem 1.25rem 3rem}
h1{font-size:1.6rem;margin:.6rem 0 .2rem}h2{font-size:1.25rem;margin:1.6rem 0 .4rem;
border-bottom:1px solid #d8dee4}p,ul,ol{margin:.45rem 0}
code{font:13.5px/1.45 ui-monospace,monospace;background:#f1f3f5;padding:.1em .25em;
border-radius:3px}pre{background:#f6f8fa;border:1px solid #d8dee4;border-radius:4px;
padding:.5rem .7rem;overflow-x:auto;margin:.4rem 0}pre code{background:none;padding:0}
var{font-style:normal;color:#8250df;border-bottom:1px dotted #8250df}
var.filled{color:#0b6e2e;border-bottom:none;background:#dcf5e3}
a{color:#0b5cad}a.run{font-size:.85rem;margin:0 0 .6rem;display:inline-block}
details{margin:.5rem 0}summary{cursor:pointer;color:#0b5cad}
.now{background:#fff8e6;border:1px solid #f0c36d;border-left:6px solid #d4860b;
border-radius:4px;padding:.1rem 1rem .4rem;margin:.8rem 0 1rem}
.now h2{border:none;margin:.5rem 0 .2rem;color:#8a4b00}
#opened-on{font-size:.9rem;color:#57606a;margin:0 0 .4rem}
#opened-on.filled{color:#0b6e2e}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #d8dee4;
padding:.25rem .5rem}"""

#: fills the placeholders from ``location.search``; values are set as text or encoded
SCRIPT = r"""(function () {
  "use strict";
  var q = new URLSearchParams(location.search), v = {}, shown = [];
  ["instance", "worker", "gpu", "model"].forEach(function (k) {
    var x = q.get(k);
    if (x) { v[k] = x; shown.push(k + "=" + x); }
  });
  var p = q.get("prometheus");
  if (p && /^https?:\/\/[^\s"'<>]+$/i.test(p)) v.prometheus = p.replace(/\/+$/, "");
  var as = {
    promql: function (x) { return x.replace(/[\\"]/g, "\\$&").replace(/\n/g, "\\n"); },
    sh: function (x) {
      return /^[\w@%+=:,.\/-]+$/.test(x) ? x : "'" + x.replace(/'/g, "'\\''") + "'";
    }
  };
  document.querySelectorAll("var[data-label]").forEach(function (e) {
    var x = v[e.getAttribute("data-label")], f = as[e.getAttribute("data-as")];
    if (x === undefined) return;
    e.textContent = f ? f(x) : x;
    e.className = "filled";
  });
  var word = {INSTANCE: "instance", WORKER: "worker", GPU: "gpu", MODEL: "model"};
  document.querySelectorAll("a[href]").forEach(function (a) {
    var h = a.getAttribute("href");
    var n = h.replace(/([?&]var-(\w+)=)(INSTANCE|WORKER|GPU|MODEL)(?=[&#]|$)/g,
      function (m, pre, k, w) {
        return word[w] === k && v[k] !== undefined ? pre + encodeURIComponent(v[k]) : m;
      });
    if (n !== h) a.setAttribute("href", n);
  });
  if (v.prometheus) {
    document.querySelectorAll("pre > code.language-promql").forEach(function (c) {
      var a = document.createElement("a");
      a.className = "run";
      a.href = v.prometheus + "/graph?g0.expr=" + encodeURIComponent(c.textContent.trim()) +
        "&g0.tab=1";
      a.textContent = "Run in Prometheus";
      c.parentNode.parentNode.insertBefore(a, c.parentNode.nextSibling);
    });
  }
  var o = document.getElementById("opened-on");
  if (shown.length) {
    o.textContent = "Opened on " + shown.join(", ") +
      ": the alert's labels, filled in below.";
    o.className = "filled";
  }
})();"""

OPENED_ON = (
    '<p id="opened-on">Words in capitals (INSTANCE, WORKER, GPU, MODEL, PROMETHEUS) stand '
    "for the alert's labels: opened from the alert's link, this page fills them in.</p>"
)


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# what the page holds between its <script> and <style> tags
_SCRIPT_TEXT = f"\n{SCRIPT}\n"
_STYLE_TEXT = f"\n{STYLE}\n"

#: the runbook site's Content-Security-Policy: this page's inline script and style (by
#: their hashes) and nothing else, from nowhere else
CSP = (
    f"default-src 'none'; script-src {_sha256(_SCRIPT_TEXT)}; style-src {_sha256(_STYLE_TEXT)}; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _boxed(body: str) -> str:
    """The "Do this now" section in its box, up to the next section."""
    start = body.find(f"<h2>{NOW}</h2>")
    if start < 0:
        return body
    end = body.find("<h2>", start + 1)
    end = len(body) if end < 0 else end
    return (
        f'{body[:start]}<section class="now" id="do-this-now">\n{body[start:end]}</section>\n'
        f"{body[end:]}"
    )


def page(name: str, markdown: str) -> str:
    """The HTML page of alert ``name`` from its Markdown (``runbooks/<name>.md``)."""
    body = _boxed(_markdown().render(markdown))
    body = body.replace("</h1>\n", f"</h1>\n{OPENED_ON}\n", 1)
    return (
        "<!doctype html>\n"
        "<!-- generated by inferwatch generate from runbooks/"
        f"{name}.md (agent/inferwatch/pack/runbooks/); do not edit -->\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        # no icon to fetch: the site has none, and a 404 for it is an error in the console
        '<link rel="icon" href="data:,">\n'
        f"<title>{escapeHtml(name)} · inferwatch runbook</title>\n"
        f"<style>{_STYLE_TEXT}</style>\n</head>\n<body>\n<main>\n{body}</main>\n"
        f"<script>{_SCRIPT_TEXT}</script>\n</body>\n</html>\n"
    )
