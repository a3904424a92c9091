"""The monitoring pack that ``inferwatch generate`` writes.

At this top, the policy every part reads: ``thresholds`` (with ``thresholds.yaml``),
``loops`` (the closed loops), ``names`` (recording-rule and alert names),
``pricing`` and ``slo_spec`` (the ``pricing:`` and ``slos:`` sections), and
``generate``. One room per artefact: ``rules/`` (Prometheus rules and alerts),
``dashboards/`` (Grafana dashboards and their linter), ``runbooks/`` (one page
per alert).
"""
