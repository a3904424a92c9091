"""What the agent's measuring proxy exports (``workers[].proxy``; docs/proxy.md).

Shared by the agent, which fills these histograms, and the pack, whose SLO
objectives must name one of their bucket boundaries. Each threshold of the
pack's defaults is a boundary: TTFT 2 s (``ttft.p99_slo_seconds``,
``warmup_p95_seconds``) and 2.5 s (the SLO default), TPOT 100 ms.
"""

from __future__ import annotations

from inferwatch.engines import contract
from inferwatch.engines.base import E2E, TPOT, TTFT

TTFT_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
    1.5, 2.0, 2.5, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
TPOT_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
    0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0,
)  # fmt: skip
E2E_BUCKETS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
    45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0,
)  # fmt: skip

#: the contract's latency histograms the proxy measures
HISTOGRAMS = (TTFT, TPOT, E2E)
#: the contract's counters it measures (``requests_finished`` by ``reason``)
COUNTERS = (
    contract.PROMPT_TOKENS.base,
    contract.GENERATION_TOKENS.base,
    contract.REQUESTS_FINISHED.base,
)
