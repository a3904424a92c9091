"""The generated rules with ``cluster`` added to every label list: the change proposed for a fleet.

On a store shared by several Prometheus servers, every series carries the
``cluster`` external label. The committed rules aggregate ``by (job, instance,
...)`` and so drop it. Evaluated there (vmalert over VictoriaMetrics, Thanos
Ruler, the Mimir ruler) they go wrong in three ways, seen with vmalert 1.79
on the fleet test's store:

- two clusters with the same host and worker names are merged into one series
  (``max by (job, instance, worker, ...)`` over both), and the alerts carry
  no ``cluster`` label to tell an operator where to look;
- with one evaluator per cluster (``?extra_label=cluster=<c>`` on the
  datasource, ``-external.label=cluster=<c>``), the recorded series carry the
  label but the aggregations beside them do not, so joins between the two
  find nothing (``worker:inferwatch_queue_over_capacity:bool`` is empty: the
  queue alert never fires) or collide (``gpu:inferwatch_memory_pressure:ratio``
  fails: "result contains metrics with the same labelset").

The fix belongs in ``inferwatch.pack.names`` (the label lists) and
``inferwatch.pack.rules`` (the cluster level): ``cluster`` first in every
``by``/``on`` list, ``by (le, cluster)`` and ``by (cluster)`` for the cluster
rules. On a single Prometheus the label is absent, and ``by (cluster, ...)``
yields exactly the series it yields today. Until that change lands,
:func:`with_cluster` applies it to the committed text so the fleet test runs
the rules as they will be; once the committed files carry ``cluster`` it
changes nothing (the test then runs them unchanged).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

_LIST = re.compile(r"\b(by|on) \(([^)]*)\)")
_BARE = re.compile(r"^(avg|max|min|sum|count)\(")


def _add(match: re.Match[str]) -> str:
    keyword, inner = match.group(1), match.group(2)
    labels = [s.strip() for s in inner.split(",") if s.strip()]
    if "cluster" in labels or not ({"job", "le"} & set(labels)):
        return match.group(0)
    if labels[0] == "le":
        labels.insert(1, "cluster")
    else:
        labels.insert(0, "cluster")
    return f"{keyword} ({', '.join(labels)})"


def with_cluster(expr: str) -> str:
    """``expr`` with ``cluster`` in every label list and cluster-level aggregations by it."""
    out = _LIST.sub(_add, expr)
    return _BARE.sub(lambda m: f"{m.group(1)} by (cluster) (", out)


def write_cluster_rules(files: list[Path], dest: Path) -> list[Path]:
    """Copies of the rule files with :func:`with_cluster` applied to every expression."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for path in files:
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                rule["expr"] = with_cluster(str(rule["expr"]))
        target = dest / path.name
        target.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(target)
    return out
