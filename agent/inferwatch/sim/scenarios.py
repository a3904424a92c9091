"""Named load shapes for ``inferwatch loadgen``, sized for the simulator's defaults.

Rates are requests per second at ``--time-scale 1``; the load generator
divides them by the time scale, so a simulator running ten times faster gets
ten times the arrivals and the same shape. Lengths are in tokens of the
simulator's tokenizer (one 4-letter word is one token). The default
simulated worker (``inferwatch simulate`` with no flags) serves about 1.4
long requests per second at most; the numbers below are chosen against it.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

from inferwatch import validate
from inferwatch.errors import ConfigError


@dataclass(frozen=True)
class LengthDist:
    """A log-normal length: ``median`` tokens, spread ``sigma`` (0: fixed), clipped."""

    median: int
    sigma: float = 0.0
    minimum: int = 1
    maximum: int = 100_000

    def sample(self, rng: random.Random) -> int:
        if self.sigma <= 0:
            value = self.median
        else:
            value = round(rng.lognormvariate(math.log(self.median), self.sigma))
        return max(self.minimum, min(self.maximum, value))


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    #: requests per second (Poisson arrivals) at time scale 1
    rate: float
    duration: float
    prompt: LengthDist
    output: LengthDist
    #: a system prompt shared by ``system_prompt_share`` of the requests (prefix-cache hits)
    system_prompt_tokens: int = 0
    system_prompt_share: float = 0.0
    #: a share of requests drawn from the long distributions instead
    long_share: float = 0.0
    long_prompt: LengthDist | None = None
    long_output: LengthDist | None = None
    #: share of the traffic sent to the first target (None: spread evenly at random)
    hot_share: float | None = None
    min_targets: int = 1


#: What each scenario shows (``--scenario``'s help).
_DESCRIPTIONS = {
    "idle": "a trickle of short requests: the GPU sits far below 30 %",
    "steady": "chat traffic the worker absorbs: a third of the batch busy, no queue, "
    "most prompts share a 512-token system prompt",
    "overload": "long prompts faster than the worker serves them: the queue climbs "
    "past max_num_seqs and the KV cache fills (preemptions)",
    "long-tail": "short requests with 5 % very long ones: end-to-end P99 is many times P50",
    "cold-start": "light traffic against a freshly started worker: the first requests "
    "wait for warm-up (guide 5.2), later ones do not",
    "imbalance": "two workers, 90 % of the traffic to the first: one busy, one idle, "
    "their average utilization low",
}

#: (median, sigma, minimum, maximum) tokens of a :class:`LengthDist`
_Length = tuple[int, float, int, int]

#: Each scenario's load: name, requests per second, seconds, prompt and output lengths,
#: the shared system prompt (tokens, share of the requests that carry it).
_LOADS: tuple[tuple[str, float, float, _Length, _Length, tuple[int, float]], ...] = (
    ("idle", 0.2, 60, (64, 0.3, 8, 256), (32, 0.3, 4, 128), (256, 0.8)),
    ("steady", 2.0, 60, (200, 0.5, 16, 1500), (160, 0.5, 8, 600), (512, 0.9)),
    ("overload", 5.0, 60, (1200, 0.25, 400, 2400), (300, 0.3, 64, 800), (256, 0.5)),
    ("long-tail", 1.5, 60, (150, 0.4, 16, 800), (60, 0.3, 8, 200), (256, 0.8)),
    ("cold-start", 0.5, 30, (100, 0.3, 16, 400), (32, 0.3, 4, 128), (0, 0.0)),
    ("imbalance", 3.0, 60, (200, 0.4, 16, 1000), (120, 0.4, 8, 400), (256, 0.8)),
)


def _scenario(
    name: str,
    rate: float,
    duration: float,
    prompt: _Length,
    output: _Length,
    system_prompt: tuple[int, float],
) -> Scenario:
    return Scenario(
        name=name,
        description=_DESCRIPTIONS[name],
        rate=rate,
        duration=duration,
        prompt=LengthDist(*prompt),
        output=LengthDist(*output),
        system_prompt_tokens=system_prompt[0],
        system_prompt_share=system_prompt[1],
    )


SCENARIOS: dict[str, Scenario] = {row[0]: _scenario(*row) for row in _LOADS}
# What two of them add to that: long-tail's 5 % of long requests, imbalance's hot target.
SCENARIOS["long-tail"] = dataclasses.replace(
    SCENARIOS["long-tail"],
    long_share=0.05,
    long_prompt=LengthDist(2800, 0.1, 2000, 3000),
    long_output=LengthDist(700, 0.1, 500, 700),
)
SCENARIOS["imbalance"] = dataclasses.replace(SCENARIOS["imbalance"], hot_share=0.9, min_targets=2)


def get_scenario(name: str) -> Scenario:
    """The scenario of that name (any case); ConfigError naming --scenario otherwise."""
    return SCENARIOS[validate.choice(*SCENARIOS)(name, "inferwatch loadgen", "--scenario")]


def parse_length(text: str, flag: str) -> LengthDist:
    """``MEDIAN`` or ``MEDIAN:SIGMA`` (tokens, log-normal spread) from a command line flag."""
    median_text, _, sigma_text = text.partition(":")
    try:
        median = int(median_text)
        sigma = float(sigma_text) if sigma_text else 0.0
    except ValueError:
        raise ConfigError("inferwatch loadgen", flag, "MEDIAN or MEDIAN:SIGMA", text) from None
    if median < 1 or not (math.isfinite(sigma) and sigma >= 0):
        raise ConfigError("inferwatch loadgen", flag, "a median >= 1 token and a sigma >= 0", text)
    return LengthDist(median, sigma)


def customize(
    sc: Scenario,
    *,
    prompt: LengthDist | None = None,
    output: LengthDist | None = None,
    system_prompt_tokens: int | None = None,
    system_prompt_share: float | None = None,
) -> Scenario:
    """The scenario with some of its lengths or its shared system prompt replaced."""
    src = "inferwatch loadgen"
    changes: dict[str, object] = {}
    if prompt is not None:
        changes["prompt"] = prompt
    if output is not None:
        changes["output"] = output
    if system_prompt_tokens is not None:
        if system_prompt_tokens < 0:
            raise ConfigError(src, "--system-prompt-tokens", "tokens >= 0", system_prompt_tokens)
        changes["system_prompt_tokens"] = system_prompt_tokens
    if system_prompt_share is not None:
        if not 0.0 <= system_prompt_share <= 1.0:
            raise ConfigError(
                src, "--system-prompt-share", "a share in [0, 1]", system_prompt_share
            )
        changes["system_prompt_share"] = system_prompt_share
    return dataclasses.replace(sc, **changes)  # type: ignore[arg-type]
